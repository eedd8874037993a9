//! The scripted ACP agent (`noetic_test_support::acp`) speaks ACP v1 as documented: these tests
//! drive it with raw JSON-RPC lines over its stdio, with no ACP client library, and bound every read.
//! Without Python they skip (or fail under CI: `scripted_agent_or_skip!`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use noetic_test_support::acp::{SDK_VERSION, ScriptedAgent};
use noetic_test_support::scripted_agent_or_skip;
use serde_json::{Value, json};

/// How long one message may take to arrive (the first includes Python's start, about half a second).
const READ_TIMEOUT: Duration = Duration::from_secs(20);

/// The agent's stderr lines so far, and a signal for each new one.
type StderrLog = Arc<(Mutex<Vec<String>>, Condvar)>;

/// A running scripted agent: its stdin, its stdout lines (`None` at end of file) and its stderr.
struct Peer {
    child: Child,
    stdin: ChildStdin,
    stdout: Receiver<Option<String>>,
    stderr: StderrLog,
}

impl Peer {
    fn spawn(agent: &ScriptedAgent, env: &[(&str, &str)]) -> Peer {
        let mut command = agent.std_command();
        command
            .env_remove("SCRIPTED_VERSION")
            .env_remove("SCRIPTED_IMAGE")
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().expect("the scripted agent starts");
        let stdin = child.stdin.take().unwrap();
        let (lines, stdout) = mpsc::channel();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        std::thread::spawn(move || {
            loop {
                let mut line = String::new();
                match out.read_line(&mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        if lines.send(Some(line)).is_err() {
                            return;
                        }
                    }
                }
            }
            let _ = lines.send(None);
        });
        let stderr: StderrLog = Arc::default();
        let log = Arc::clone(&stderr);
        let err = BufReader::new(child.stderr.take().unwrap());
        std::thread::spawn(move || {
            for line in err.lines().map_while(Result::ok) {
                let (lines, added) = &*log;
                lines.lock().unwrap().push(line);
                added.notify_all();
            }
        });
        Peer {
            child,
            stdin,
            stdout,
            stderr,
        }
    }

    /// Spawns the agent and opens a session: `initialize` (id 0), `session/new` (id 1). The
    /// session's id.
    fn with_session(agent: &ScriptedAgent) -> (Peer, String) {
        let mut peer = Peer::spawn(agent, &[]);
        let init = peer.request(0, "initialize", initialize_params());
        assert_eq!(init["result"]["protocolVersion"], 1, "{init}");
        let new = peer.request(1, "session/new", json!({"cwd": "/tmp", "mcpServers": []}));
        let session = new["result"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no sessionId in {new}"))
            .to_owned();
        (peer, session)
    }

    fn send(&mut self, message: Value) {
        writeln!(self.stdin, "{message}").expect("writing to the agent");
        self.stdin.flush().expect("flushing the agent's stdin");
    }

    /// The next stdout line (without its newline), `None` at end of file.
    fn line(&self) -> Option<String> {
        match self.stdout.recv_timeout(READ_TIMEOUT) {
            Ok(line) => line.map(|line| line.trim_end_matches('\n').to_owned()),
            Err(_) => panic!(
                "no stdout line from the agent within {READ_TIMEOUT:?}; its stderr:\n{}",
                self.stderr_text()
            ),
        }
    }

    /// The next stdout message, which must be JSON.
    fn message(&self) -> Value {
        let line = self.line().unwrap_or_else(|| {
            panic!(
                "the agent's stdout ended; its stderr:\n{}",
                self.stderr_text()
            )
        });
        serde_json::from_str(&line).unwrap_or_else(|error| panic!("not JSON ({error}): {line}"))
    }

    /// Sends a request and returns the next message, which must be its response.
    fn request(&mut self, id: u64, method: &str, params: Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let response = self.message();
        assert_eq!(response["jsonrpc"], "2.0", "{response}");
        assert_eq!(
            response["id"], id,
            "not the response to {method}: {response}"
        );
        assert!(response.get("method").is_none(), "{response}");
        response
    }

    fn prompt(&mut self, id: u64, session: &str, text: &str) {
        self.send(json!({
            "jsonrpc": "2.0",
            "id": id,
            "method": "session/prompt",
            "params": {"sessionId": session, "prompt": [{"type": "text", "text": text}]},
        }));
    }

    /// Waits until a stderr line equals `wanted`.
    fn wait_stderr(&self, wanted: &str) {
        let (lines, added) = &*self.stderr;
        let deadline = Instant::now() + READ_TIMEOUT;
        let mut seen = lines.lock().unwrap();
        while !seen.iter().any(|line| line == wanted) {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero(),
                "no stderr line {wanted:?} within {READ_TIMEOUT:?}; stderr:\n{}",
                seen.join("\n")
            );
            seen = added.wait_timeout(seen, left).unwrap().0;
        }
    }

    fn stderr_text(&self) -> String {
        self.stderr.0.lock().unwrap().join("\n")
    }

    /// The exit status, once stdout has ended (the process is exiting): bounded by `READ_TIMEOUT`.
    fn exit_status(&mut self) -> ExitStatus {
        let deadline = Instant::now() + READ_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait().expect("waiting for the agent") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "the agent did not exit within {READ_TIMEOUT:?} after its stdout ended"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn initialize_params() -> Value {
    json!({
        "protocolVersion": 1,
        "clientCapabilities": {"fs": {"readTextFile": true, "writeTextFile": true}, "terminal": true},
        "clientInfo": {"name": "noetic-test", "version": "0.0.0"},
    })
}

/// The text of an `agent_message_chunk` update for `session`, panicking on any other message.
fn said(message: &Value, session: &str) -> String {
    assert_eq!(message["method"], "session/update", "{message}");
    assert!(
        message.get("id").is_none(),
        "a notification has no id: {message}"
    );
    assert_eq!(message["params"]["sessionId"], session, "{message}");
    let update = &message["params"]["update"];
    assert_eq!(update["sessionUpdate"], "agent_message_chunk", "{message}");
    assert_eq!(update["content"]["type"], "text", "{message}");
    update["content"]["text"].as_str().unwrap().to_owned()
}

/// Asserts `message` answers request `id` with `result`, exactly.
fn assert_result(message: &Value, id: u64, result: Value) {
    assert_eq!(
        message,
        &json!({"jsonrpc": "2.0", "id": id, "result": result}),
        "{message}"
    );
}

#[test]
fn initialize_answers_version_1_and_the_documented_capabilities() {
    let agent = scripted_agent_or_skip!();
    let mut peer = Peer::spawn(&agent, &[]);
    let init = peer.request(0, "initialize", initialize_params());
    assert_result(
        &init,
        0,
        json!({
            "protocolVersion": 1,
            "agentCapabilities": {"loadSession": false, "promptCapabilities": {"image": false}},
            "agentInfo": {"name": "scripted", "version": "0.1.0"},
        }),
    );
    peer.wait_stderr("[scripted] initialize");
    // An unknown method is refused the JSON-RPC way.
    let bogus = peer.request(1, "bogus/method", json!({}));
    assert_eq!(bogus["error"]["code"], -32601, "{bogus}");
}

#[test]
fn scripted_version_and_image_come_from_the_environment() {
    let agent = scripted_agent_or_skip!();
    let mut peer = Peer::spawn(
        &agent,
        &[("SCRIPTED_VERSION", "2"), ("SCRIPTED_IMAGE", "1")],
    );
    let init = peer.request(0, "initialize", initialize_params());
    assert_eq!(init["result"]["protocolVersion"], 2, "{init}");
    assert_eq!(
        init["result"]["agentCapabilities"]["promptCapabilities"]["image"], true,
        "{init}"
    );
}

#[test]
fn session_new_gives_fresh_hex_session_ids() {
    let agent = scripted_agent_or_skip!();
    let mut peer = Peer::spawn(&agent, &[]);
    peer.request(0, "initialize", initialize_params());
    let mut ids = Vec::new();
    for id in [1, 2] {
        let new = peer.request(id, "session/new", json!({"cwd": "/tmp", "mcpServers": []}));
        let session = new["result"]["sessionId"].as_str().unwrap().to_owned();
        assert_eq!(session.len(), 32, "{session}");
        assert!(session.chars().all(|c| c.is_ascii_hexdigit()), "{session}");
        ids.push(session);
    }
    assert_ne!(ids[0], ids[1]);
    peer.wait_stderr("[scripted] session/new");
}

#[test]
fn say_directives_stream_chunks_then_end_the_turn() {
    let agent = scripted_agent_or_skip!();
    let (mut peer, session) = Peer::with_session(&agent);
    peer.prompt(2, &session, "say hello\nsay  world");
    assert_eq!(said(&peer.message(), &session), "hello");
    // TEXT is the rest of the line after one space, verbatim.
    assert_eq!(said(&peer.message(), &session), " world");
    assert_result(&peer.message(), 2, json!({"stopReason": "end_turn"}));
    peer.wait_stderr("[scripted] session/prompt");
}

#[test]
fn the_permission_request_has_its_own_id_space_and_reports_the_choice() {
    let agent = scripted_agent_or_skip!();
    let (mut peer, session) = Peer::with_session(&agent);
    peer.prompt(2, &session, "perm p1\nsay after");
    let request = peer.message();
    // The agent numbers its requests from 0, like this client did (`initialize` was id 0).
    assert_eq!(request["id"], 0, "{request}");
    assert_eq!(request["method"], "session/request_permission", "{request}");
    let params = &request["params"];
    assert_eq!(params["sessionId"], session.as_str());
    assert_eq!(
        params["toolCall"],
        json!({"toolCallId": "p1", "title": "perm p1", "kind": "execute", "rawInput": {"id": "p1"}})
    );
    let options: Vec<(&str, &str)> = params["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|option| {
            (
                option["optionId"].as_str().unwrap(),
                option["kind"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        options,
        [
            ("allow-once", "allow_once"),
            ("allow-always", "allow_always"),
            ("reject-once", "reject_once"),
            ("reject-always", "reject_always"),
        ]
    );
    peer.send(json!({
        "jsonrpc": "2.0",
        "id": 0,
        "result": {"outcome": {"outcome": "selected", "optionId": "allow-once"}},
    }));
    assert_eq!(
        said(&peer.message(), &session),
        "permission: selected allow-once"
    );
    assert_eq!(said(&peer.message(), &session), "after");
    assert_result(&peer.message(), 2, json!({"stopReason": "end_turn"}));
}

#[test]
fn garbage_writes_a_line_that_is_not_json_and_the_turn_goes_on() {
    let agent = scripted_agent_or_skip!();
    let (mut peer, session) = Peer::with_session(&agent);
    peer.prompt(2, &session, "say before\ngarbage\nsay after");
    assert_eq!(said(&peer.message(), &session), "before");
    let garbage = peer.line().expect("a line");
    assert_eq!(garbage, "this is not json");
    assert!(serde_json::from_str::<Value>(&garbage).is_err());
    assert_eq!(said(&peer.message(), &session), "after");
    assert_result(&peer.message(), 2, json!({"stopReason": "end_turn"}));
}

#[test]
fn crash_exits_mid_turn_with_the_given_status() {
    let agent = scripted_agent_or_skip!();
    let (mut peer, session) = Peer::with_session(&agent);
    peer.prompt(2, &session, "say before\ncrash 3\nsay never");
    assert_eq!(said(&peer.message(), &session), "before");
    assert_eq!(peer.line(), None, "stdout ends without an answer");
    assert_eq!(peer.exit_status().code(), Some(3));
}

#[test]
fn session_cancel_ends_a_slow_turn_with_cancelled_and_the_session_goes_on() {
    let agent = scripted_agent_or_skip!();
    let (mut peer, session) = Peer::with_session(&agent);
    peer.prompt(2, &session, "slow 50\nsay not reached");
    assert_eq!(said(&peer.message(), &session), "chunk 0 ");
    peer.send(
        json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": session}}),
    );
    // Chunks sent before the cancel arrived may still come; then the answer, long before 50.
    let mut chunks = 1;
    let answer = loop {
        let message = peer.message();
        if message.get("method").is_some() {
            assert_eq!(said(&message, &session), format!("chunk {chunks} "));
            chunks += 1;
            continue;
        }
        break message;
    };
    assert_result(&answer, 2, json!({"stopReason": "cancelled"}));
    assert!(
        chunks < 50,
        "{chunks} chunks: the cancel did not stop the turn"
    );
    peer.wait_stderr(&format!("[scripted] cancel {session}"));
    peer.prompt(3, &session, "say again");
    assert_eq!(said(&peer.message(), &session), "again");
    assert_result(&peer.message(), 3, json!({"stopReason": "end_turn"}));
}

#[test]
fn usage_response_and_stop_shape_the_final_answer() {
    let agent = scripted_agent_or_skip!();
    let (mut peer, session) = Peer::with_session(&agent);
    peer.prompt(
        2,
        &session,
        "usage_response 3 4\nstop max_tokens\nsay never",
    );
    assert_result(
        &peer.message(),
        2,
        json!({
            "stopReason": "max_tokens",
            "usage": {"inputTokens": 3, "outputTokens": 4, "totalTokens": 7},
        }),
    );
    peer.prompt(3, &session, "error boom");
    assert_eq!(
        peer.message(),
        json!({
            "jsonrpc": "2.0",
            "id": 3,
            "error": {"code": -32603, "message": "Internal error", "data": {"why": "boom"}},
        })
    );
}

#[test]
fn caps_cwd_and_unknown_directives_report_back() {
    let agent = scripted_agent_or_skip!();
    let (mut peer, session) = Peer::with_session(&agent);
    peer.prompt(2, &session, "caps\ncwd\nfrobnicate now");
    assert_eq!(
        said(&peer.message(), &session),
        r#"{"fs":{"readTextFile":true,"writeTextFile":true},"terminal":true}"#
    );
    assert_eq!(said(&peer.message(), &session), "cwd: /tmp");
    assert_eq!(
        said(&peer.message(), &session),
        "unknown directive: frobnicate now"
    );
    assert_result(&peer.message(), 2, json!({"stopReason": "end_turn"}));
}

#[test]
fn the_venv_has_the_pinned_sdk() {
    let agent = scripted_agent_or_skip!();
    let output = std::process::Command::new(&agent.python)
        .args([
            "-c",
            "import importlib.metadata as m; print(m.version('agent-client-protocol'))",
        ])
        .output()
        .expect("the venv's python runs");
    assert!(output.status.success(), "{output:?}");
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), SDK_VERSION);
}
