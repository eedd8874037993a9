// The AG-UI wire of `noetic serve` (`POST /v1/ag-ui`), run by `@ag-ui/client`'s own `HttpAgent`
// (whose pipeline enforces the event schemas and runs `verifyEvents`, the protocol's ordering
// rules) with every raw event also checked against `@ag-ui/core`'s `EventSchemas`: a plain run, and
// a run that ends with an interrupt for a tool approval followed by the run that resumes it
// (approved, and cancelled).
//
// The server runs researcher.json on the offline demo model: it calls the `echo` tool once, then
// answers in text built from the tool's output.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { fileURLToPath } from 'node:url';
import { HttpAgent, buildResumeArray } from '@ag-ui/client';
import { EventSchemas, RunAgentInputSchema } from '@ag-ui/core/schemas';
import { startServe } from '../lib/serve.mjs';

const FLOW = fileURLToPath(new URL('../../examples/workflows/researcher.json', import.meta.url));
// Only a guard against hangs: every wait is for something the test caused.
const WAIT_MS = 20_000;

function bounded(what, promise) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), WAIT_MS);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

async function withServer(args, body) {
  const server = await startServe(['serve', FLOW, ...args]);
  // The client's enforcement stage warns (and strips) when an event carries what the protocol
  // does not know: none is expected.
  const warnings = [];
  const warn = console.warn;
  console.warn = (...parts) => {
    warnings.push(parts.map(String).join(' '));
    warn(...parts);
  };
  try {
    await body(server);
  } finally {
    console.warn = warn;
    await server.stop();
  }
  assert.deepEqual(warnings.filter((line) => line.includes('[ag-ui]')), [], 'no event was stripped or dropped');
}

// An HttpAgent on the server whose raw responses are kept (a tee of each body) to be checked
// against the schemas, and whose events and run ends are recorded per run.
function agentOn(server, threadId) {
  const raw = [];
  const agent = new HttpAgent({
    url: `${server.url}v1/ag-ui`,
    threadId,
    fetch: async (url, init) => {
      RunAgentInputSchema.parse(JSON.parse(init.body));
      const response = await fetch(url, init);
      assert.equal(response.status, 200);
      assert.equal(response.headers.get('content-type'), 'text/event-stream');
      const [mine, theirs] = response.body.tee();
      raw.push(new Response(theirs).text());
      return new Response(mine, { status: response.status, headers: response.headers });
    },
  });
  const run = async (parameters) => {
    const events = [];
    let finished;
    const result = await bounded(
      'the run',
      agent.runAgent(parameters, {
        onEvent: ({ event }) => {
          events.push(event);
        },
        onRunFinishedEvent: (params) => {
          finished = params;
        },
      }),
    );
    const body = await bounded('the raw body', raw.at(-1));
    return { result, events, finished, frames: checkFrames(body) };
  };
  return { agent, run };
}

// The raw SSE body: one `data:` line per event, each a valid AG-UI event by `@ag-ui/core`.
function checkFrames(body) {
  const frames = body.split('\n\n').filter((frame) => frame !== '' && !frame.startsWith(':'));
  return frames.map((frame) => {
    assert.match(frame, /^data: \{.*\}$/s, 'one data line per event, no id: or event: lines');
    const event = JSON.parse(frame.slice('data: '.length));
    const checked = EventSchemas.safeParse(event);
    assert.ok(checked.success, `an AG-UI event: ${JSON.stringify(event)}: ${checked.error}`);
    return event;
  });
}

const types = (events) => events.map((event) => event.type);

test('a plain run is valid AG-UI that HttpAgent runs to success', async () => {
  await withServer([], async (server) => {
    const { agent, run } = agentOn(server, 'plain');
    agent.addMessage({ id: 'u1', role: 'user', content: 'tell me about otters' });
    const { result, events, finished, frames } = await run({ runId: 'run-1' });
    assert.deepEqual(types(events), types(frames), 'the client took every event as sent');
    assert.equal(frames[0].type, 'RUN_STARTED');
    assert.equal(frames[0].threadId, 'plain');
    assert.equal(frames[0].runId, 'run-1');
    assert.equal(frames.at(-1).type, 'RUN_FINISHED');
    assert.deepEqual(frames.at(-1).outcome, { type: 'success' });
    assert.equal(finished.outcome, 'success');
    for (const kind of ['TOOL_CALL_START', 'TOOL_CALL_ARGS', 'TOOL_CALL_END', 'TOOL_CALL_RESULT', 'TEXT_MESSAGE_START', 'STEP_STARTED']) {
      assert.ok(types(frames).includes(kind), `${kind} in ${types(frames)}`);
    }
    assert.ok(frames.some((event) => event.type === 'CUSTOM' && event.name.startsWith('noetic.')));
    const call = frames.find((event) => event.type === 'TOOL_CALL_START');
    assert.equal(call.toolCallName, 'echo');

    // What the client built from the events: the assistant's call, its result, the answer.
    const assistant = result.newMessages.filter((message) => message.role === 'assistant');
    assert.ok(assistant.some((message) => message.toolCalls?.[0]?.id === call.toolCallId), JSON.stringify(result.newMessages));
    const [output] = result.newMessages.filter((message) => message.role === 'tool');
    assert.equal(output.toolCallId, call.toolCallId);
    assert.match(String(output.content), /otters/);
    assert.ok(assistant.some((message) => /offline demo model/.test(message.content ?? '')), JSON.stringify(assistant));
    assert.deepEqual(agent.pendingInterrupts, []);
  });
});

test('an approval ends the run with an interrupt; the resume run finishes the same turn', async () => {
  await withServer(['--needs-approval', 'echo'], async (server) => {
    const { agent, run } = agentOn(server, 'approve');
    agent.addMessage({ id: 'u1', role: 'user', content: 'look up otters' });
    const first = await run({ runId: 'run-1' });
    assert.equal(first.finished.outcome, 'interrupt');
    const [interrupt] = first.finished.interrupts;
    assert.equal(first.finished.interrupts.length, 1);
    assert.equal(interrupt.reason, 'tool_call');
    assert.equal(interrupt.metadata.toolName, 'echo');
    assert.deepEqual(interrupt.metadata.arguments, { text: 'look up otters' });
    const call = first.frames.find((event) => event.type === 'TOOL_CALL_START');
    assert.equal(interrupt.toolCallId, call.toolCallId);
    assert.ok(!types(first.frames).includes('TOOL_CALL_RESULT'), 'the call waits');
    assert.deepEqual(agent.pendingInterrupts.map((open) => open.id), [interrupt.id]);

    // The client must address every open interrupt; it approves the call.
    const resume = buildResumeArray(agent.pendingInterrupts, {
      [interrupt.id]: { status: 'resolved', payload: { approved: true } },
    });
    const second = await run({ runId: 'run-2', resume });
    assert.equal(second.finished.outcome, 'success');
    assert.equal(second.frames[0].runId, 'run-2');
    assert.equal(second.frames[0].metadata.turnId, first.frames[0].metadata.turnId, 'the same noetic turn');
    assert.ok(!types(second.frames).includes('TOOL_CALL_START'), 'the call is not sent again');
    const result = second.frames.find((event) => event.type === 'TOOL_CALL_RESULT');
    assert.equal(result.toolCallId, call.toolCallId);
    assert.match(result.content, /otters/);
    assert.deepEqual(agent.pendingInterrupts, []);
    const answer = agent.messages.at(-1);
    assert.equal(answer.role, 'assistant');
    assert.match(answer.content, /offline demo model/);
    const tool = agent.messages.find((message) => message.role === 'tool');
    assert.equal(tool.toolCallId, call.toolCallId);
  });
});

test('a cancelled interrupt rejects the call and the turn still answers', async () => {
  await withServer(['--needs-approval', 'echo'], async (server) => {
    const { agent, run } = agentOn(server, 'cancel');
    agent.addMessage({ id: 'u1', role: 'user', content: 'look up otters' });
    const first = await run({ runId: 'run-1' });
    const [interrupt] = first.finished.interrupts;
    const resume = buildResumeArray(agent.pendingInterrupts, { [interrupt.id]: { status: 'cancelled' } });
    const second = await run({ runId: 'run-2', resume });
    assert.equal(second.finished.outcome, 'success');
    const result = second.frames.find((event) => event.type === 'TOOL_CALL_RESULT');
    assert.equal(result.toolCallId, interrupt.toolCallId);
    assert.match(result.content, /rejected/i);
    assert.equal(agent.messages.at(-1).role, 'assistant');
  });
});
