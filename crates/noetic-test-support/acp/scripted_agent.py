"""A scripted ACP (Agent Client Protocol v1) agent for testing ACP clients.

Runs over stdio on the official ACP Python SDK (PyPI ``agent-client-protocol``, pinned 0.12.1 by
``noetic-test-support``'s ``acp`` module, which installs it into a venv and documents the directive
language for test writers). No model, no network: every line of a prompt's text is a directive
(``say hello``, ``perm p1``, ``slow 5``, ...) that the agent carries out in order, then it ends the turn.

Environment: ``SCRIPTED_VERSION`` (the protocolVersion answered to ``initialize``; default 1),
``SCRIPTED_IMAGE=1`` (advertise ``promptCapabilities.image``).

Stdout carries ACP messages only (plus the line the ``garbage`` directive writes on purpose); every
message received is logged to stderr as ``[scripted] <method>``.

How the SDK is used: ``acp.run_agent`` runs this ``ScriptedAgent`` (its ``initialize``,
``new_session``, ``prompt`` and ``cancel`` are routed by the SDK) over ``acp.stdio_streams``; the
``AgentSideConnection`` handed to ``on_connect`` makes the client calls (``session_update``,
``request_permission``, ``read_text_file``, ``write_text_file``, ``create_terminal``, ...); a stream
observer (the connection's ``observers`` option) logs each incoming method. Three things go around
the SDK's models, through the connection's own JSON-RPC sender (``AgentSideConnection._conn``):
the ``unknown_update`` notification (no model has an unknown ``sessionUpdate``), the ``diff``
notification (the SDK drops ``None`` fields; this one carries an explicit ``"oldText": null``), and a
``stop`` with a reason outside the stable set (answered as a plain dict). ``usage_response`` needs no
workaround: the SDK's ``PromptResponse`` has the unstable ``usage`` field, so the prompt's result is
``{"stopReason": ..., "usage": {"totalTokens": IN+OUT, "inputTokens": IN, "outputTokens": OUT}}``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from typing import Any

import acp
from acp import RequestError
from acp.connection import StreamDirection, StreamEvent
from acp.core import DEFAULT_STDIO_BUFFER_LIMIT_BYTES
from acp.schema import (
    AgentCapabilities,
    AgentMessageChunk,
    Cost,
    Implementation,
    InitializeResponse,
    NewSessionResponse,
    PermissionOption,
    PromptCapabilities,
    PromptResponse,
    SessionNotification,
    ToolCallUpdate,
    Usage,
    UsageUpdate,
)
from pydantic import ValidationError

# The stop reasons of the stable schema (`StopReason`); `stop` with another one is sent verbatim.
STOP_REASONS = ("end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled")
# After a session/cancel, how long a pending permission request waits for the client's answer (the
# client MUST answer it, with `cancelled`) before the turn ends without one.
PERMISSION_GRACE_SECONDS = 5.0
# How long `crash` waits for buffered stdout to drain before exiting.
CRASH_FLUSH_SECONDS = 5.0

ALL_OPTIONS = [
    ("allow-once", "Allow once", "allow_once"),
    ("allow-always", "Allow always", "allow_always"),
    ("reject-once", "Reject once", "reject_once"),
    ("reject-always", "Reject always", "reject_always"),
]
REJECT_OPTIONS = ALL_OPTIONS[2:]


def log(line: str) -> None:
    """One line to stderr, flushed."""
    sys.stderr.write(f"[scripted] {line}\n")
    sys.stderr.flush()


class BadDirective(Exception):
    """A directive's arguments do not parse; the agent says so and goes on."""


class Session:
    def __init__(self, cwd: str) -> None:
        self.cwd = cwd
        # The running turn's cancel flag (a fresh Event per prompt), set by session/cancel.
        self.cancelled: asyncio.Event | None = None


class Turn:
    """One prompt turn: its session, its cancel flag, and what the directives decided."""

    def __init__(self, session_id: str, session: Session) -> None:
        self.session_id = session_id
        self.session = session
        self.cancelled = asyncio.Event()
        self.usage: Usage | None = None


def error_text(error: RequestError) -> str:
    return f"{error.code}: {error}"


class ScriptedAgent:
    def __init__(self, writer: asyncio.StreamWriter) -> None:
        # The stdout writer the SDK's connection writes through (for `garbage` and `crash`).
        self._writer = writer
        self._conn: Any = None
        self._sessions: dict[str, Session] = {}
        self._client_capabilities: Any = None

    # ---- SDK hooks -------------------------------------------------------------------------

    def on_connect(self, conn: Any) -> None:
        self._conn = conn

    def observe(self, event: StreamEvent) -> None:
        """Stream observer: logs every method received and keeps initialize's raw clientCapabilities."""
        if event.direction is not StreamDirection.INCOMING:
            return
        method = event.message.get("method")
        if not isinstance(method, str):
            return
        log(method)
        if method == "initialize":
            params = event.message.get("params")
            if isinstance(params, dict):
                self._client_capabilities = params.get("clientCapabilities")

    async def initialize(
        self,
        protocol_version: int,
        client_capabilities: Any = None,
        client_info: Any = None,
        **kwargs: Any,
    ) -> InitializeResponse:
        version = int(os.environ.get("SCRIPTED_VERSION", "1"))
        image = os.environ.get("SCRIPTED_IMAGE") == "1"
        return InitializeResponse(
            protocol_version=version,
            agent_capabilities=AgentCapabilities(
                load_session=False,
                prompt_capabilities=PromptCapabilities(image=image),
            ),
            agent_info=Implementation(name="scripted", version="0.1.0"),
        )

    async def new_session(self, cwd: str, **kwargs: Any) -> NewSessionResponse:
        session_id = uuid.uuid4().hex
        self._sessions[session_id] = Session(cwd)
        return NewSessionResponse(session_id=session_id)

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        log(f"cancel {session_id}")
        session = self._sessions.get(session_id)
        if session is not None and session.cancelled is not None:
            session.cancelled.set()

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> Any:
        session = self._sessions.get(session_id)
        if session is None:
            raise RequestError.invalid_params({"sessionId": session_id, "why": "unknown session"})
        turn = Turn(session_id, session)
        session.cancelled = turn.cancelled
        try:
            stop = await self._run_turn(turn, prompt)
        finally:
            if session.cancelled is turn.cancelled:
                session.cancelled = None
        if stop in STOP_REASONS:
            return PromptResponse(stop_reason=stop, usage=turn.usage)
        # A reason outside the stable schema, sent as is (the SDK's model would refuse it).
        raw: dict[str, Any] = {"stopReason": stop}
        if turn.usage is not None:
            raw["usage"] = turn.usage.model_dump(mode="json", by_alias=True, exclude_none=True)
        return raw

    # ---- the turn ----------------------------------------------------------------------------

    async def _run_turn(self, turn: Turn, prompt: list[Any]) -> str:
        text = "\n".join(block.text for block in prompt if getattr(block, "type", None) == "text")
        for line in text.split("\n"):
            if not line.strip():
                continue
            if turn.cancelled.is_set():
                return "cancelled"
            word, _, rest = line.partition(" ")
            handler = getattr(self, f"_d_{word}", None)
            if handler is None or word.startswith("_"):
                await self._say(turn, f"unknown directive: {line}")
                continue
            try:
                stop = await handler(turn, rest)
            except BadDirective as problem:
                await self._say(turn, f"bad directive: {line} ({problem})")
                continue
            except ValidationError as problem:
                first = problem.errors()[0]
                await self._say(turn, f"bad directive: {line} ({first['loc']}: {first['msg']})")
                continue
            if stop is not None:
                return stop
        return "end_turn"

    async def _update(self, turn: Turn, update: Any) -> None:
        await self._conn.session_update(session_id=turn.session_id, update=update)

    async def _say(self, turn: Turn, text: str, message_id: str | None = None) -> None:
        chunk = AgentMessageChunk(
            session_update="agent_message_chunk", content=acp.text_block(text), message_id=message_id
        )
        await self._update(turn, chunk)

    async def _raw_notification(self, method: str, params: dict[str, Any]) -> None:
        # The SDK connection's JSON-RPC sender, for messages its models cannot express.
        await self._conn._conn.send_notification(method, params)

    async def _pause(self, turn: Turn, seconds: float) -> bool:
        """Waits `seconds`; True (at once) when the turn is cancelled meanwhile."""
        try:
            await asyncio.wait_for(turn.cancelled.wait(), timeout=seconds)
        except asyncio.TimeoutError:
            return False
        return True

    # ---- directives: each takes the text after the directive word; a non-None result ends the
    # ---- turn with that stop reason.

    async def _d_say(self, turn: Turn, rest: str) -> None:
        await self._say(turn, rest)

    async def _d_say_in(self, turn: Turn, rest: str) -> None:
        message_id, _, text = rest.partition(" ")
        if not message_id:
            raise BadDirective("say_in MSGID TEXT")
        await self._say(turn, text, message_id=message_id)

    async def _d_think(self, turn: Turn, rest: str) -> None:
        await self._update(turn, acp.update_agent_thought_text(rest))

    async def _d_plan(self, turn: Turn, rest: str) -> None:
        entries = [acp.plan_entry(item, priority="medium", status="pending") for item in rest.split(";")]
        await self._update(turn, acp.update_plan(entries))

    async def _tool(self, turn: Turn, rest: str, fail: bool) -> None:
        parts = rest.split(" ", 2)
        if len(parts) < 3:
            raise BadDirective("ID KIND TITLE")
        tool_id, kind, title = parts
        await self._update(
            turn,
            acp.start_tool_call(tool_id, title, kind=kind, status="pending", raw_input={"id": tool_id}),
        )
        await self._update(turn, acp.update_tool_call(tool_id, status="in_progress"))
        outcome = "failed" if fail else "done"
        await self._update(
            turn,
            acp.update_tool_call(
                tool_id,
                status="failed" if fail else "completed",
                content=[acp.tool_content(acp.text_block(f"{tool_id} {outcome}"))],
                raw_output={"ok": not fail},
            ),
        )

    async def _d_tool(self, turn: Turn, rest: str) -> None:
        await self._tool(turn, rest, fail=False)

    async def _d_toolfail(self, turn: Turn, rest: str) -> None:
        await self._tool(turn, rest, fail=True)

    async def _d_diff(self, turn: Turn, rest: str) -> None:
        parts = rest.split(" ", 2)
        if len(parts) < 3:
            raise BadDirective("ID PATH TEXT")
        tool_id, path, text = parts
        start = acp.start_tool_call(
            tool_id,
            f"edit {path}",
            kind="edit",
            status="completed",
            content=[acp.tool_diff_content(path, text)],
        )
        params = SessionNotification(session_id=turn.session_id, update=start).model_dump(
            mode="json", by_alias=True, exclude_none=True
        )
        # The SDK would omit oldText (None); a new file's diff is sent with an explicit null.
        params["update"]["content"][0]["oldText"] = None
        await self._raw_notification("session/update", params)

    async def _permission(self, turn: Turn, rest: str, options: list[tuple[str, str, str]]) -> str | None:
        args = rest.split(" ")
        tool_id = args[0]
        if not tool_id or len(args) > 2:
            raise BadDirective("ID [KIND]")
        kind = args[1] if len(args) == 2 else "execute"
        tool_call = ToolCallUpdate(
            tool_call_id=tool_id, title=f"perm {tool_id}", kind=kind, raw_input={"id": tool_id}
        )
        request = asyncio.ensure_future(
            self._conn.request_permission(
                session_id=turn.session_id,
                tool_call=tool_call,
                options=[PermissionOption(option_id=o, name=n, kind=k) for o, n, k in options],
            )
        )
        cancel_seen = asyncio.ensure_future(turn.cancelled.wait())
        try:
            await asyncio.wait({request, cancel_seen}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            cancel_seen.cancel()
        if not request.done():
            # Cancelled meanwhile: the client must still answer the request (with `cancelled`).
            try:
                await asyncio.wait_for(request, timeout=PERMISSION_GRACE_SECONDS)
            except asyncio.TimeoutError:
                await self._say(turn, "permission: unanswered after cancel")
                return "cancelled"
            except Exception:
                pass  # reported below from the finished request
        try:
            answer = request.result()
        except RequestError as error:
            await self._say(turn, f"permission: error {error.code}")
        except ValidationError:
            await self._say(turn, "permission: invalid answer")
        else:
            outcome = answer.outcome
            if outcome.outcome == "selected":
                await self._say(turn, f"permission: selected {outcome.option_id}")
            else:
                await self._say(turn, "permission: cancelled")
                return "cancelled"
        return "cancelled" if turn.cancelled.is_set() else None

    async def _d_perm(self, turn: Turn, rest: str) -> str | None:
        return await self._permission(turn, rest, ALL_OPTIONS)

    async def _d_perm_reject_only(self, turn: Turn, rest: str) -> str | None:
        return await self._permission(turn, rest, REJECT_OPTIONS)

    async def _read(self, turn: Turn, path: str, line: int | None = None, limit: int | None = None) -> str:
        response = await self._conn.read_text_file(
            session_id=turn.session_id, path=path, line=line, limit=limit
        )
        return response.content

    async def _d_read(self, turn: Turn, rest: str) -> None:
        args = rest.split(" ")
        if not args[0] or len(args) > 3:
            raise BadDirective("PATH [LINE LIMIT]")
        try:
            numbers = [int(arg) for arg in args[1:]]
        except ValueError as problem:
            raise BadDirective(str(problem)) from None
        try:
            content = await self._read(turn, args[0], *numbers)
        except RequestError as error:
            await self._say(turn, f"read error {error_text(error)}")
        else:
            await self._say(turn, f"read: {content}")

    async def _d_read2(self, turn: Turn, rest: str) -> None:
        args = rest.split(" ")
        if len(args) != 2 or not all(args):
            raise BadDirective("PATH1 PATH2")
        results = await asyncio.gather(
            self._read(turn, args[0]), self._read(turn, args[1]), return_exceptions=True
        )
        for result in results:
            if isinstance(result, RequestError):
                await self._say(turn, f"read2 error {error_text(result)}")
                return
            if isinstance(result, BaseException):
                raise result
        await self._say(turn, f"read2: {results[0]}|{results[1]}")

    async def _d_write(self, turn: Turn, rest: str) -> None:
        path, sep, text = rest.partition(" ")
        if not path or not sep:
            raise BadDirective("PATH TEXT")
        try:
            await self._conn.write_text_file(session_id=turn.session_id, path=path, content=text)
        except RequestError as error:
            await self._say(turn, f"write error {error_text(error)}")
        else:
            await self._say(turn, "write: ok")

    async def _d_term(self, turn: Turn, rest: str) -> None:
        command, *args = rest.split(" ")
        if not command:
            raise BadDirective("CMD [ARGS...]")
        sid = turn.session_id
        try:
            created = await self._conn.create_terminal(session_id=sid, command=command, args=args)
        except RequestError as error:
            await self._say(turn, f"term error {error_text(error)}")
            return
        terminal_id = created.terminal_id
        failure: RequestError | None = None
        try:
            exited = await self._conn.wait_for_terminal_exit(session_id=sid, terminal_id=terminal_id)
            output = await self._conn.terminal_output(session_id=sid, terminal_id=terminal_id)
        except RequestError as error:
            failure = error
        try:
            await self._conn.release_terminal(session_id=sid, terminal_id=terminal_id)
        except RequestError as error:
            failure = failure or error
        if failure is not None:
            await self._say(turn, f"term error {error_text(failure)}")
        else:
            await self._say(turn, f"term exit={exited.exit_code} out={output.output!r}")

    async def _d_slow(self, turn: Turn, rest: str) -> str | None:
        count = self._int(rest)
        for i in range(count):
            if turn.cancelled.is_set():
                return "cancelled"
            await self._say(turn, f"chunk {i} ")
            if i + 1 < count and await self._pause(turn, 0.2):
                return "cancelled"
        return None

    async def _d_sleep(self, turn: Turn, rest: str) -> str | None:
        try:
            seconds = float(rest)
        except ValueError:
            raise BadDirective("S (seconds)") from None
        return "cancelled" if await self._pause(turn, seconds) else None

    async def _d_usage(self, turn: Turn, rest: str) -> None:
        args = rest.split(" ")
        if len(args) not in (2, 3):
            raise BadDirective("USED SIZE [COST]")
        try:
            used, size = int(args[0]), int(args[1])
            cost = Cost(amount=float(args[2]), currency="USD") if len(args) == 3 else None
        except ValueError as problem:
            raise BadDirective(str(problem)) from None
        await self._update(turn, UsageUpdate(session_update="usage_update", used=used, size=size, cost=cost))

    async def _d_usage_response(self, turn: Turn, rest: str) -> None:
        args = rest.split(" ")
        if len(args) != 2:
            raise BadDirective("IN OUT")
        try:
            tokens_in, tokens_out = int(args[0]), int(args[1])
        except ValueError as problem:
            raise BadDirective(str(problem)) from None
        turn.usage = Usage(
            input_tokens=tokens_in, output_tokens=tokens_out, total_tokens=tokens_in + tokens_out
        )

    async def _d_unknown_update(self, turn: Turn, rest: str) -> None:
        await self._raw_notification(
            "session/update",
            {
                "sessionId": turn.session_id,
                "update": {
                    "sessionUpdate": "made_up_kind",
                    "content": {"type": "text", "text": "made up", "_meta": {"scripted": "content"}},
                    "madeUpField": {"nested": True, "_meta": {"scripted": "field"}},
                    "_meta": {"scripted": "update"},
                },
                "_meta": {"scripted": "params"},
            },
        )

    async def _d_stop(self, turn: Turn, rest: str) -> str:
        if not rest:
            raise BadDirective("REASON")
        return rest

    async def _d_error(self, turn: Turn, rest: str) -> None:
        raise RequestError.internal_error({"why": rest})

    async def _d_crash(self, turn: Turn, rest: str) -> None:
        code = self._int(rest)
        await self._flush_stdout()
        sys.stderr.flush()
        os._exit(code)

    async def _d_garbage(self, turn: Turn, rest: str) -> None:
        # Through the SDK's own writer, so it lands between whole messages.
        self._writer.write(b"this is not json\n")
        await self._writer.drain()
        await self._flush_stdout()

    async def _d_hang(self, turn: Turn, rest: str) -> None:
        await asyncio.get_running_loop().create_future()  # never done; session/cancel is ignored

    async def _d_pid(self, turn: Turn, rest: str) -> None:
        await self._say(turn, f"pid: {os.getpid()}")

    async def _d_env(self, turn: Turn, rest: str) -> None:
        if not rest:
            raise BadDirective("NAME")
        value = os.environ.get(rest)
        await self._say(turn, f"env {rest} unset" if value is None else f"env {rest}={value}")

    async def _d_caps(self, turn: Turn, rest: str) -> None:
        caps = json.dumps(self._client_capabilities, sort_keys=True, separators=(",", ":"))
        await self._say(turn, caps)

    async def _d_cwd(self, turn: Turn, rest: str) -> None:
        await self._say(turn, f"cwd: {turn.session.cwd}")

    # ---- helpers -----------------------------------------------------------------------------

    @staticmethod
    def _int(text: str) -> int:
        try:
            return int(text)
        except ValueError:
            raise BadDirective("N (an integer)") from None

    async def _flush_stdout(self) -> None:
        """Waits (bounded) until everything written to stdout has left the process."""
        transport = self._writer.transport
        deadline = asyncio.get_running_loop().time() + CRASH_FLUSH_SECONDS
        while transport.get_write_buffer_size() > 0 and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)


async def main() -> None:
    reader, writer = await acp.stdio_streams(limit=DEFAULT_STDIO_BUFFER_LIMIT_BYTES)
    agent = ScriptedAgent(writer)
    await acp.run_agent(agent, writer, reader, observers=[agent.observe])


if __name__ == "__main__":
    asyncio.run(main())
