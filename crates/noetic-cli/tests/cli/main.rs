//! End-to-end tests of the `noetic` binary: the real executable, run as a child process against the
//! mock provider server (`noetic_test_support::MockServer`) or the offline demo model.
//!
//! Every test runs on a multi-thread tokio runtime so the mock server keeps serving while the test
//! waits on the child, and every wait on a child is bounded by [`CHILD_TIMEOUT`].

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod acp;
mod approvals;
mod chat;
mod durable;
mod durable_chat;
mod examples;
mod fleet;
mod invalid;
mod mcp;
mod otel;
mod restate;
mod run;
mod signals;
mod tools;

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use noetic_test_support::{MockReply, MockServer, RecordedHttpRequest};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

/// The longest a test waits for the child (or for one of its lines). It only guards against hangs: a
/// healthy run takes well under a second, so hitting it is a failure, never a normal path.
pub(crate) const CHILD_TIMEOUT: Duration = Duration::from_secs(60);

/// The model name passed with `--model` to the mock provider.
pub(crate) const MODEL: &str = "test-model";

/// The workspace root (the binary runs there, so `examples/workflows/…` paths work as in the docs).
pub(crate) fn workspace_root() -> PathBuf {
    noetic_test_support::workspace_root()
}

/// The `noetic` binary as a command: run from the workspace root, with no API key in its environment,
/// its stdio piped, and killed if the test drops it (a timed-out wait kills it).
pub(crate) fn noetic<I, S>(args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let mut command = Command::new(env!("CARGO_BIN_EXE_noetic"));
    command
        .args(args)
        .current_dir(workspace_root())
        .env_remove("OPENROUTER_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

/// What a finished child printed, and how it exited.
#[derive(Debug)]
pub(crate) struct Finished {
    /// The exit code (`-1` if killed by a signal).
    pub(crate) code: i32,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

impl Finished {
    /// Panics with everything the child printed unless it exited with `code`.
    #[track_caller]
    pub(crate) fn assert_code(&self, code: i32) -> &Self {
        assert_eq!(
            self.code, code,
            "exit code\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.stdout, self.stderr
        );
        self
    }

    /// stdout parsed as JSON lines.
    pub(crate) fn json_lines(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .map(|line| {
                serde_json::from_str(line)
                    .unwrap_or_else(|error| panic!("not a JSON line ({error}): {line}"))
            })
            .collect()
    }
}

/// Runs `noetic ARGS`, writing `stdin` (then closing it), and waits for it to exit.
pub(crate) async fn run_noetic<I, S>(args: I, stdin: &str) -> Finished
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    let mut child = noetic(args).spawn().expect("the noetic binary starts");
    let mut input = child.stdin.take().expect("stdin is piped");
    // The child may exit before reading its stdin (a usage error): a broken pipe is fine then.
    let _ = input.write_all(stdin.as_bytes()).await;
    drop(input);
    finished(child).await
}

/// Waits for `child` to exit (at most [`CHILD_TIMEOUT`]) and collects what it printed.
pub(crate) async fn finished(child: tokio::process::Child) -> Finished {
    // Guards against a hang: on timeout the child is dropped, which kills it.
    let output = tokio::time::timeout(CHILD_TIMEOUT, child.wait_with_output())
        .await
        .expect("noetic did not exit in time")
        .expect("waiting for noetic");
    Finished {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8(output.stdout).expect("stdout is UTF-8"),
        stderr: String::from_utf8(output.stderr).expect("stderr is UTF-8"),
    }
}

/// The options pointing the CLI at `server` as an OpenResponses server, with `--model test-model`.
pub(crate) fn mock_options(server: &MockServer) -> Vec<String> {
    vec![
        "--provider".to_owned(),
        "responses".to_owned(),
        "--base-url".to_owned(),
        server.base_url(),
        "--model".to_owned(),
        MODEL.to_owned(),
    ]
}

/// `first` then `rest` as one argument list.
pub(crate) fn args(first: &[&str], rest: &[String]) -> Vec<String> {
    first
        .iter()
        .map(|arg| (*arg).to_owned())
        .chain(rest.iter().cloned())
        .collect()
}

/// The `usage` object of a `response.completed` event (no cached tokens unless given).
pub(crate) fn usage(input: u64, output: u64, cached: Option<u64>) -> Value {
    let mut usage =
        json!({"input_tokens": input, "output_tokens": output, "total_tokens": input + output});
    if let Some(cached) = cached {
        usage["input_tokens_details"] = json!({"cached_tokens": cached});
    }
    usage
}

/// The OpenResponses events of an assistant message streamed as `deltas`, with `usage`.
pub(crate) fn text_events(deltas: &[&str], usage: Value) -> Vec<Value> {
    let text: String = deltas.concat();
    let done_item = json!({
        "id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}]
    });
    let mut events = vec![
        json!({"type": "response.created", "response": {"id": "resp_1", "status": "in_progress", "output": []}}),
        json!({"type": "response.output_item.added", "output_index": 0, "item": {
            "id": "msg_1", "type": "message", "role": "assistant", "status": "in_progress", "content": []
        }}),
        json!({"type": "response.content_part.added", "item_id": "msg_1", "output_index": 0,
            "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}}),
    ];
    events.extend(deltas.iter().map(|delta| {
        json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0,
            "content_index": 0, "delta": delta})
    }));
    events.extend([
        json!({"type": "response.output_text.done", "item_id": "msg_1", "output_index": 0,
            "content_index": 0, "text": text}),
        json!({"type": "response.output_item.done", "output_index": 0, "item": done_item}),
        json!({"type": "response.completed", "response": {
            "id": "resp_1", "status": "completed", "output": [done_item], "usage": usage
        }}),
    ]);
    events
}

/// A reply streaming `text` word by word (12 input and 5 output tokens, no cached tokens reported).
pub(crate) fn text_reply(text: &str) -> MockReply {
    let words: Vec<String> = text
        .split_inclusive(' ')
        .map(str::to_owned)
        .collect::<Vec<_>>();
    let deltas: Vec<&str> = words.iter().map(String::as_str).collect();
    MockReply::sse_events(text_events(&deltas, usage(12, 5, None)))
}

/// A reply calling the tool `name` with `arguments` (a JSON object), as call `call_1`.
pub(crate) fn call_reply(name: &str, arguments: &Value) -> MockReply {
    let arguments = arguments.to_string();
    let item = |status: &str, arguments: &str| {
        json!({"id": "fc_1", "type": "function_call", "status": status, "call_id": "call_1",
            "name": name, "arguments": arguments})
    };
    MockReply::sse_events([
        json!({"type": "response.created", "response": {"id": "resp_0", "status": "in_progress", "output": []}}),
        json!({"type": "response.output_item.added", "output_index": 0, "item": item("in_progress", "")}),
        json!({"type": "response.function_call_arguments.delta", "item_id": "fc_1", "output_index": 0,
            "delta": arguments}),
        json!({"type": "response.function_call_arguments.done", "item_id": "fc_1", "output_index": 0,
            "arguments": arguments}),
        json!({"type": "response.output_item.done", "output_index": 0, "item": item("completed", &arguments)}),
        json!({"type": "response.completed", "response": {
            "id": "resp_0", "status": "completed", "output": [item("completed", &arguments)],
            "usage": usage(10, 3, None)
        }}),
    ])
}

/// A reply answering with the output of the last tool call the request carries
/// (`The tool said <output>`): the final answer shows what the tool computed.
pub(crate) fn answer_with_tool_output(request: &RecordedHttpRequest) -> MockReply {
    let output = request.body["input"]
        .as_array()
        .and_then(|items| {
            items
                .iter()
                .rev()
                .find(|item| item["type"] == "function_call_output")
        })
        .map(|item| item["output"].as_str().unwrap_or_default().to_owned())
        .unwrap_or_default();
    MockReply::answer(&format!("The tool said {output}"))
}

/// Whether a request's `input` already carries a tool's output (the model has called a tool).
pub(crate) fn has_tool_output(request: &RecordedHttpRequest) -> bool {
    request.body["input"].as_array().is_some_and(|items| {
        items
            .iter()
            .any(|item| item["type"] == "function_call_output")
    })
}

/// The `type` of every line of `--events jsonl` output.
pub(crate) fn event_types(lines: &[Value]) -> Vec<String> {
    lines
        .iter()
        .map(|line| {
            line["type"]
                .as_str()
                .unwrap_or_else(|| panic!("an event without a type: {line}"))
                .to_owned()
        })
        .collect()
}

/// The index of the first event of type `kind`, panicking with the types seen if there is none.
#[track_caller]
pub(crate) fn position(types: &[String], kind: &str) -> usize {
    types
        .iter()
        .position(|seen| seen == kind)
        .unwrap_or_else(|| panic!("no {kind} event in {types:#?}"))
}

/// A directory under the system temp dir, removed with its contents when dropped.
pub(crate) struct TempDir {
    path: PathBuf,
}

impl TempDir {
    pub(crate) fn new() -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "noetic-cli-test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        // A leftover of an earlier run with the same process id is stale.
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create the temp dir");
        TempDir { path }
    }

    /// The directory's path.
    pub(crate) fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// Writes `document` as `name` in the directory and returns its path as a string.
    pub(crate) fn write(&self, name: &str, document: &Value) -> String {
        let path = self.path.join(name);
        std::fs::write(&path, document.to_string()).expect("write the workflow");
        path.to_str().expect("a UTF-8 temp path").to_owned()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// A one-node workflow: a `callModel` without a model (so `--model` applies) offering `echo`.
pub(crate) fn echo_flow() -> Value {
    json!({
        "version": 1,
        "root": {
            "kind": "callModel",
            "id": "assistant",
            "instructions": "You are a helpful assistant.",
            "tools": [{"type": "echo"}]
        }
    })
}
