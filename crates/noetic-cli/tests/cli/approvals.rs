//! `--needs-approval TOOL`: `chat` shows each request and takes the decision (JSON lines with
//! `--jsonl`, `/approve` and `/reject` in plain mode); `run` cannot ask and exits 1 unless
//! `--approve-all`.

use noetic_test_support::MockServer;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout};

use crate::{
    CHILD_TIMEOUT, TempDir, answer_with_tool_output, args, call_reply, echo_flow, mock_options,
    noetic, run_noetic,
};

/// A provider whose every fresh question calls `echo` with the user's text, then answers with the
/// tool's output.
fn echoing_provider(server: &MockServer) {
    server.set_responder(|request| {
        let last_is_user = request.body["input"]
            .as_array()
            .and_then(|items| items.last())
            .is_some_and(|item| item["role"] == "user");
        if last_is_user {
            let text = request.body["input"]
                .as_array()
                .and_then(|items| items.last())
                .map(|item| item["content"].to_string())
                .unwrap_or_default();
            let said = if text.contains("second") {
                "two"
            } else {
                "one"
            };
            call_reply("echo", &json!({ "text": said }))
        } else {
            answer_with_tool_output(request)
        }
    });
}

/// A chat child, its stdout and stderr read line by line.
pub(crate) struct Chat {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Lines<BufReader<ChildStdout>>,
    stderr: Lines<BufReader<ChildStderr>>,
}

impl Chat {
    fn start(server: &MockServer, flow: &str, extra: &[&str]) -> Self {
        let mut first = vec!["chat", flow, "--needs-approval", "echo"];
        first.extend_from_slice(extra);
        Self::spawn(args(&first, &mock_options(server)))
    }

    /// `noetic ARGS` (a `chat` command line), started.
    pub(crate) fn spawn(arguments: Vec<String>) -> Self {
        let mut child = noetic(arguments).spawn().unwrap();
        Chat {
            stdin: child.stdin.take(),
            stdout: BufReader::new(child.stdout.take().unwrap()).lines(),
            stderr: BufReader::new(child.stderr.take().unwrap()).lines(),
            child,
        }
    }

    pub(crate) async fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
    }

    /// The next stdout line satisfying `wanted` (bounded).
    pub(crate) async fn stdout_line(&mut self, wanted: impl Fn(&str) -> bool) -> String {
        tokio::time::timeout(CHILD_TIMEOUT, async {
            loop {
                let line = self.stdout.next_line().await.unwrap().expect("stdout open");
                if wanted(&line) {
                    return line;
                }
            }
        })
        .await
        .expect("the line came")
    }

    /// The next stderr line satisfying `wanted` (bounded).
    pub(crate) async fn stderr_line(&mut self, wanted: impl Fn(&str) -> bool) -> String {
        tokio::time::timeout(CHILD_TIMEOUT, async {
            loop {
                let line = self.stderr.next_line().await.unwrap().expect("stderr open");
                if wanted(&line) {
                    return line;
                }
            }
        })
        .await
        .expect("the line came")
    }

    pub(crate) async fn finish(mut self) -> i32 {
        drop(self.stdin.take());
        let status = tokio::time::timeout(CHILD_TIMEOUT, self.child.wait())
            .await
            .expect("the chat exits")
            .unwrap();
        status.code().unwrap_or(-1)
    }
}

/// The `approvalId` of an `approval_requested` JSON line.
fn approval_id(line: &str) -> String {
    let event: Value = serde_json::from_str(line).unwrap();
    assert_eq!(event["type"], "noetic:approval_requested", "{line}");
    assert_eq!(event["data"]["tool"], "echo");
    event["data"]["approval_id"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn chat_jsonl_prints_approval_requests_and_takes_approve_and_reject_lines() {
    let server = MockServer::start().await;
    echoing_provider(&server);
    let dir = TempDir::new();
    let flow = dir.write("flow.json", &echo_flow());
    let mut chat = Chat::start(&server, &flow, &["--jsonl"]);

    chat.send(r#"{"input": "first"}"#).await;
    let first = approval_id(&chat.stdout_line(|line| line.starts_with('{')).await);
    // Nothing ran yet: the model has been asked once.
    assert_eq!(server.request_count(), 1);
    chat.send(&json!({"command": "approve", "approvalId": first}).to_string())
        .await;
    chat.stdout_line(|line| line == "The tool said one").await;

    chat.send(r#"{"input": "second"}"#).await;
    let second = approval_id(&chat.stdout_line(|line| line.starts_with('{')).await);
    assert_ne!(first, second);
    chat.send(&json!({"command": "reject", "approvalId": second, "reason": "not now"}).to_string())
        .await;
    chat.stdout_line(|line| line == "The tool said Tool call rejected: not now")
        .await;
    // Single-use: deciding again is refused, and the chat goes on.
    chat.send(&json!({"command": "approve", "approvalId": first}).to_string())
        .await;
    chat.stderr_line(|line| line.contains("error[APPROVAL_NOT_FOUND]"))
        .await;
    assert_eq!(chat.finish().await, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn plain_chat_prompts_and_takes_slash_approve() {
    let server = MockServer::start().await;
    echoing_provider(&server);
    let dir = TempDir::new();
    let flow = dir.write("flow.json", &echo_flow());
    let mut chat = Chat::start(&server, &flow, &[]);

    chat.send("first").await;
    let prompt = chat
        .stderr_line(|line| line.starts_with("approval needed:"))
        .await;
    assert!(prompt.contains("echo"), "{prompt}");
    let id = prompt
        .split("/approve ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .unwrap()
        .to_owned();
    chat.send(&format!("/approve {id}")).await;
    chat.stdout_line(|line| line == "The tool said one").await;
    assert_eq!(chat.finish().await, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn run_cannot_ask_so_it_exits_1_unless_approve_all() {
    let server = MockServer::start().await;
    echoing_provider(&server);
    let dir = TempDir::new();
    let flow = dir.write("flow.json", &echo_flow());

    let refused = run_noetic(
        args(
            &["run", &flow, "first", "--needs-approval", "echo"],
            &mock_options(&server),
        ),
        "",
    )
    .await;
    refused.assert_code(1);
    assert!(
        refused.stderr.contains("error[APPROVAL_REQUIRED]") && refused.stderr.contains("`echo`"),
        "{}",
        refused.stderr
    );
    assert_eq!(
        server.request_count(),
        1,
        "the call did not run, no answer was asked for"
    );

    let approved = run_noetic(
        args(
            &[
                "run",
                &flow,
                "first",
                "--needs-approval",
                "echo",
                "--approve-all",
            ],
            &mock_options(&server),
        ),
        "",
    )
    .await;
    approved.assert_code(0);
    assert_eq!(approved.stdout, "The tool said one\n");

    let typo = run_noetic(
        args(
            &["run", &flow, "first", "--needs-approval", "ecoh"],
            &mock_options(&server),
        ),
        "",
    )
    .await;
    typo.assert_code(2);
    assert!(
        typo.stderr.contains("--needs-approval ecoh"),
        "{}",
        typo.stderr
    );
}
