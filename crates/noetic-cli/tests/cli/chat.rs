//! `noetic chat`: a steer sent as a JSON line while a slow stream runs joins the running turn; a failed
//! turn does not end the chat; plain lines and other threads run turns.

use std::time::Duration;

use noetic_test_support::{MockReply, MockServer};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::task::JoinHandle;

use crate::{
    CHILD_TIMEOUT, TempDir, args, echo_flow, event_types, mock_options, noetic, position,
    run_noetic, text_events, text_reply, usage,
};

/// Whether a request's `input` has a user message mentioning `text`.
fn mentions(body: &Value, text: &str) -> bool {
    body["input"].as_array().is_some_and(|items| {
        items
            .iter()
            .any(|item| item["role"] == "user" && item["content"].to_string().contains(text))
    })
}

/// A `noetic chat --jsonl --events jsonl` child driven line by line.
struct JsonChat {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Lines<BufReader<ChildStdout>>,
    stderr: JoinHandle<String>,
    /// Every event line read so far.
    lines: Vec<Value>,
}

impl JsonChat {
    fn start(server: &MockServer, flow: &str) -> Self {
        let mut child = noetic(args(
            &["chat", flow, "--jsonl", "--events", "jsonl"],
            &mock_options(server),
        ))
        .spawn()
        .unwrap();
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut stderr = child.stderr.take().unwrap();
        let stderr = tokio::spawn(async move {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text).await;
            text
        });
        JsonChat {
            child,
            stdin,
            stdout,
            stderr,
            lines: Vec::new(),
        }
    }

    async fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin is open");
        stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
    }

    /// Reads event lines until one of type `kind`; returns its index in [`Self::lines`].
    async fn read_until(&mut self, kind: &str) -> usize {
        // Bounded: guards against a hang if the event never comes.
        tokio::time::timeout(CHILD_TIMEOUT, async {
            loop {
                let line =
                    self.stdout.next_line().await.unwrap().unwrap_or_else(|| {
                        panic!("stdout closed before {kind}: {:#?}", self.lines)
                    });
                let event: Value = serde_json::from_str(&line).unwrap();
                let found = event["type"] == kind;
                self.lines.push(event);
                if found {
                    return self.lines.len() - 1;
                }
            }
        })
        .await
        .unwrap_or_else(|_| panic!("no {kind} within the timeout"))
    }

    /// Closes stdin, reads the rest of stdout and waits for the exit: the exit code and stderr.
    async fn finish(mut self) -> (Option<i32>, String, Vec<Value>) {
        drop(self.stdin.take());
        // Bounded: guards against a chat that never quits.
        let status = tokio::time::timeout(CHILD_TIMEOUT, async {
            while let Some(line) = self.stdout.next_line().await.unwrap() {
                self.lines.push(serde_json::from_str(&line).unwrap());
            }
            self.child.wait().await.unwrap()
        })
        .await
        .expect("the chat exits");
        let stderr = tokio::time::timeout(CHILD_TIMEOUT, self.stderr)
            .await
            .expect("stderr closes")
            .unwrap();
        (status.code(), stderr, self.lines)
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_next_item_steer_during_a_slow_stream_is_applied_to_the_running_turn() {
    let server = MockServer::start().await;
    // The first answer streams slowly (50 deltas over about 2 s): the steer, sent as soon as the first
    // delta shows, arrives long before the message item ends, where a `next-item` steer applies. The
    // round is then cut and a second request carries the steer.
    let words: Vec<String> = (0..50).map(|index| format!("word{index} ")).collect();
    let deltas: Vec<&str> = words.iter().map(String::as_str).collect();
    server.push(
        MockReply::sse_events(text_events(&deltas, usage(20, 50, None)))
            .chunk_size(64)
            .delay_between_chunks(Duration::from_millis(20)),
    );
    server.push(text_reply("Steered answer"));
    let dir = TempDir::new();
    let flow = dir.write("flow.json", &echo_flow());
    let mut chat = JsonChat::start(&server, &flow);

    chat.send(r#"{"input":"Write a long story","messageId":"first-1"}"#)
        .await;
    let first_delta = chat.read_until("response.output_text.delta").await;
    chat.send(r#"{"input":"Use bullet points","deliveryMode":"next-item","messageId":"steer-1"}"#)
        .await;
    chat.send(r#"{"command":"quit"}"#).await;
    let (code, stderr, lines) = chat.finish().await;

    assert_eq!(code, Some(0), "stderr: {stderr}");
    let types = event_types(&lines);
    let steer = position(&types, "noetic:steer_applied");
    let completed = position(&types, "noetic:turn_completed");
    assert!(first_delta < steer && steer < completed, "{types:#?}");
    assert_eq!(lines[steer]["data"]["message_ids"], json!(["steer-1"]));
    assert_eq!(lines[steer]["data"]["point"], "item_done");
    // The steer joined the running turn instead of starting another one.
    let starts: Vec<&Value> = lines
        .iter()
        .filter(|line| line["type"] == "noetic:turn_started")
        .collect();
    assert_eq!(starts.len(), 1, "{types:#?}");
    assert_eq!(starts[0]["data"]["message_ids"], json!(["first-1"]));
    // The round after the cut answered with the second reply, and its request carried the steer.
    let after: String = lines[steer..]
        .iter()
        .filter(|line| line["type"] == "response.output_text.delta")
        .filter_map(|line| line["data"]["delta"].as_str())
        .collect();
    assert_eq!(after, "Steered answer");
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert!(!mentions(&requests[0].body, "Use bullet points"));
    assert!(mentions(&requests[1].body, "Write a long story"));
    assert!(mentions(&requests[1].body, "Use bullet points"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_turn_does_not_end_the_chat() {
    let server = MockServer::start().await;
    server.push(MockReply::json(
        401,
        json!({"error": {"message": "invalid api key"}}),
    ));
    server.push(text_reply("Back again"));
    let dir = TempDir::new();
    let flow = dir.write("flow.json", &echo_flow());
    let mut chat = JsonChat::start(&server, &flow);

    chat.send(r#"{"input":"first"}"#).await;
    let aborted = chat.read_until("noetic:turn_aborted").await;
    chat.send(r#"{"input":"second"}"#).await;
    let completed = chat.read_until("noetic:turn_completed").await;
    let (code, stderr, lines) = chat.finish().await;

    assert_eq!(code, Some(0), "stderr: {stderr}");
    assert_eq!(lines[aborted]["data"]["error_kind"], "PROVIDER_ERROR");
    assert!(
        lines[aborted]["data"]["reason"]
            .as_str()
            .unwrap()
            .contains("401"),
        "{}",
        lines[aborted]
    );
    assert!(aborted < completed);
    assert_eq!(server.request_count(), 2);
    // The second turn still sees the first message, kept in the history.
    let requests = server.requests();
    assert!(mentions(&requests[1].body, "first"));
    assert!(mentions(&requests[1].body, "second"));
}

#[tokio::test(flavor = "multi_thread")]
async fn plain_chat_lines_run_a_turn_and_report_bad_commands() {
    let server = MockServer::start().await;
    server.push(text_reply("First answer"));
    let dir = TempDir::new();
    let flow = dir.write("flow.json", &echo_flow());

    // A bad command, a blank line, a message, then end of input: the turn runs before the chat exits.
    let finished = run_noetic(
        args(&["chat", &flow], &mock_options(&server)),
        "/bogus x\n\nfirst question\n",
    )
    .await;

    finished.assert_code(0);
    assert_eq!(finished.stdout, "First answer\n");
    assert!(
        finished
            .stderr
            .contains("error: unknown or incomplete command `/bogus x`"),
        "{}",
        finished.stderr
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 1, "only the message reached the model");
    assert!(mentions(&requests[0].body, "first question"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bad_chat_line_is_reported_and_the_chat_goes_on() {
    let server = MockServer::start().await;
    server.push(text_reply("Still here"));
    let dir = TempDir::new();
    let flow = dir.write("flow.json", &echo_flow());

    let finished = run_noetic(
        args(&["chat", &flow, "--jsonl"], &mock_options(&server)),
        "{oops\n{\"input\":\"hello\"}\n{\"command\":\"quit\"}\n",
    )
    .await;

    finished.assert_code(0);
    assert!(
        finished.stderr.contains("error: not a JSON line"),
        "{}",
        finished.stderr
    );
    assert_eq!(finished.stdout, "Still here\n");
    assert_eq!(server.request_count(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_message_to_another_thread_runs_and_is_shown_before_the_chat_quits() {
    let server = MockServer::start().await;
    server.push(text_reply("Other thread answer"));
    let dir = TempDir::new();
    let flow = dir.write("flow.json", &echo_flow());

    let finished = run_noetic(
        args(
            &["chat", &flow, "--jsonl", "--events", "jsonl"],
            &mock_options(&server),
        ),
        "{\"input\":\"hello there\",\"threadId\":\"side\"}\n{\"command\":\"quit\"}\n",
    )
    .await;

    finished.assert_code(0);
    let lines = finished.json_lines();
    let types = event_types(&lines);
    let completed = position(&types, "noetic:turn_completed");
    // Lines of a thread other than the chat's own say which thread they belong to.
    assert!(
        lines.iter().all(|line| line["threadId"] == "side"),
        "{lines:#?}"
    );
    let text: String = lines[..completed]
        .iter()
        .filter(|line| line["type"] == "response.output_text.delta")
        .filter_map(|line| line["data"]["delta"].as_str())
        .collect();
    assert_eq!(text, "Other thread answer");
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert!(mentions(&requests[0].body, "hello there"));
}
