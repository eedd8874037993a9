//! `noetic serve --storage postgres://…`: several real `noetic serve` processes on one PostgreSQL
//! database, clients on each over HTTP. A turn one host runs streams live to a client on another,
//! with the running host's ids, and a client resumes on a third with `Last-Event-ID`; a host killed
//! with SIGKILL mid-turn is taken over, and the client's stream shows `round_restarted`, then the
//! answer as an uncrashed run gives it; a call waiting for approval on the running host is listed,
//! and decided, on another; an abort asked on another host drains and stops the running host's
//! turn and answers with its report. Skipped (with a line saying so) without PostgreSQL.

use std::process::Stdio;
use std::time::Duration;

use futures_util::StreamExt;
use noetic_test_support::{MockReply, MockServer, test_database_or_skip};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::{
    CHILD_TIMEOUT, TempDir, answer_with_tool_output, args, call_reply, echo_flow, has_tool_output,
    mock_options, noetic, text_reply,
};

/// A one-step flow.
fn flow() -> Value {
    json!({"version": 1, "root": {"kind": "callModel", "id": "answer", "instructions": "Answer."}})
}

/// 40 words.
fn long_text() -> String {
    (0..40).map(|n| format!("word{n} ")).collect()
}

/// `long_text` in 48-byte chunks 20 ms apart: about a second of stream.
fn slow_reply() -> MockReply {
    text_reply(&long_text())
        .chunk_size(48)
        .delay_between_chunks(Duration::from_millis(20))
}

/// One `noetic serve` process of the fleet.
pub(crate) struct Host {
    child: tokio::process::Child,
    base: String,
    client: reqwest::Client,
}

impl Host {
    /// Starts a host serving `flow` on the database `url`, answering from `mock`, on a port of its
    /// own; waits for its `listening on` line.
    pub(crate) async fn start(flow: &str, url: &str, mock: &MockServer, extra: &[&str]) -> Host {
        let mut rest = mock_options(mock);
        rest.extend(extra.iter().map(|arg| (*arg).to_owned()));
        let mut command = noetic(args(
            &["serve", flow, "--storage", url, "--listen", "127.0.0.1:0"],
            &rest,
        ));
        command.stdin(Stdio::null()).stdout(Stdio::null());
        let mut child = command.spawn().expect("the noetic binary starts");
        let stderr = child.stderr.take().expect("stderr is piped");
        let mut lines = BufReader::new(stderr).lines();
        let base = tokio::time::timeout(CHILD_TIMEOUT, async {
            while let Some(line) = lines.next_line().await.expect("read stderr") {
                if let Some(rest) = line.strip_prefix("listening on ") {
                    let url = rest.split_whitespace().next().unwrap_or(rest);
                    return url.trim_end_matches('/').to_owned();
                }
            }
            panic!("noetic serve ended before listening");
        })
        .await
        .expect("noetic serve listens in time");
        // Its stderr is read on (a full pipe would block it).
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Host {
            child,
            base,
            client: reqwest::Client::new(),
        }
    }

    pub(crate) async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let response = self
            .client
            .post(format!("{}{path}", self.base))
            .json(&body)
            .send()
            .await
            .expect("POST");
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    pub(crate) async fn get(&self, path: &str) -> (u16, Value) {
        let response = self
            .client
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .expect("GET");
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    /// The thread's event stream, after `last_event_id` when given (else from now on).
    pub(crate) async fn events(&self, thread: &str, last_event_id: Option<u64>) -> Sse {
        let mut request = self.client.get(format!(
            "{}/v1/threads/{thread}/events?replay=none",
            self.base
        ));
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id.to_string());
        }
        let response = request.send().await.expect("GET events");
        assert_eq!(response.status().as_u16(), 200);
        Sse {
            body: response
                .bytes_stream()
                .map(|chunk| chunk.expect("read the stream").to_vec())
                .boxed(),
            buffer: String::new(),
        }
    }

    /// Whether this host runs the thread's turn now.
    async fn runs(&self, thread: &str) -> bool {
        let (_, status) = self.get(&format!("/v1/threads/{thread}")).await;
        status["status"] == "running" && status["here"] == true
    }
}

/// An event of the native stream.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Event {
    pub(crate) id: Option<u64>,
    pub(crate) data: Value,
}

impl Event {
    pub(crate) fn kind(&self) -> &str {
        self.data["type"].as_str().unwrap_or_default()
    }

    fn delta(&self) -> Option<&str> {
        (self.kind() == "response.output_text.delta")
            .then(|| self.data["data"]["delta"].as_str())
            .flatten()
    }
}

pub(crate) struct Sse {
    body: futures_util::stream::BoxStream<'static, Vec<u8>>,
    buffer: String,
}

impl Sse {
    /// The next event (comments and `retry:` skipped), at most 30 s away.
    pub(crate) async fn next(&mut self) -> Event {
        tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                if let Some(end) = self.buffer.find("\n\n") {
                    let frame: String = self.buffer.drain(..end + 2).collect();
                    let mut event = Event {
                        id: None,
                        data: Value::Null,
                    };
                    for line in frame.lines() {
                        if let Some(id) = line.strip_prefix("id:") {
                            event.id = id.trim().parse().ok();
                        } else if let Some(data) = line.strip_prefix("data:") {
                            event.data = serde_json::from_str(data.trim()).expect("JSON data");
                        }
                    }
                    if !event.data.is_null() {
                        return event;
                    }
                    continue;
                }
                let chunk = self.body.next().await.expect("the stream goes on");
                self.buffer.push_str(&String::from_utf8_lossy(&chunk));
            }
        })
        .await
        .expect("an event within 30 s")
    }

    /// Events up to and including the first whose type ends with `suffix`.
    pub(crate) async fn until(&mut self, suffix: &str) -> Vec<Event> {
        let mut events = Vec::new();
        loop {
            let event = self.next().await;
            let done = event.kind().ends_with(suffix);
            events.push(event);
            if done {
                return events;
            }
        }
    }
}

/// The text a client shows: the text deltas, where a `round_restarted` voids those of the round in
/// flight (since the last completed model call).
pub(crate) fn shown_text(events: &[Event]) -> String {
    let (mut text, mut settled) = (String::new(), 0);
    for event in events {
        if let Some(delta) = event.delta() {
            text.push_str(delta);
        } else if event.kind().ends_with(":model_call_completed") {
            settled = text.len();
        } else if event.kind().ends_with(":round_restarted") {
            text.truncate(settled);
        }
    }
    text
}

fn ids(events: &[Event]) -> Vec<Option<u64>> {
    events.iter().map(|event| event.id).collect()
}

fn contiguous(events: &[Event]) -> bool {
    events
        .windows(2)
        .all(|pair| pair[1].id.unwrap() == pair[0].id.unwrap() + 1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_run_on_one_host_streams_live_to_another_and_resumes_on_a_third() {
    let database = test_database_or_skip!();
    let dir = TempDir::new();
    let flow = dir.write("flow.json", &flow());
    let mock = MockServer::start().await;
    mock.push(slow_reply());
    // Only `runner` runs turns; the clients are on the two others.
    let front = Host::start(&flow, database.url(), &mock, &["--accept-only"]).await;
    let runner = Host::start(&flow, database.url(), &mock, &[]).await;
    let third = Host::start(&flow, database.url(), &mock, &["--accept-only"]).await;

    assert_eq!(
        front.post("/v1/threads", json!({"thread_id": "t"})).await.0,
        201
    );
    let mut on_front = front.events("t", None).await;
    let (status, body) = front
        .post("/v1/threads/t/messages", json!({"input": "tell me"}))
        .await;
    assert_eq!(status, 202, "{body}");
    let mut events = Vec::new();
    loop {
        let event = on_front.next().await;
        let first_delta = event.delta().is_some() && shown_text(&events).is_empty();
        events.push(event);
        if first_delta {
            // Live: the runner's model round is still streaming.
            assert_eq!(
                mock.completed_replies(),
                0,
                "the first delta came after the round"
            );
            break;
        }
    }
    events.extend(on_front.until(":turn_completed").await);
    assert_eq!(shown_text(&events), long_text());
    assert!(contiguous(&events), "{:?}", ids(&events));
    assert!(
        events
            .iter()
            .all(|event| !event.kind().ends_with(":lagged")),
        "{events:#?}"
    );
    assert!(!front.runs("t").await && !third.runs("t").await);

    // The client moves to the third host after the 5th event: the rest, same ids, same data.
    let cut = 4;
    let mut on_third = third.events("t", events[cut].id).await;
    let rest = on_third.until(":turn_completed").await;
    assert_eq!(ids(&rest), ids(&events[cut + 1..]));
    assert_eq!(rest, events[cut + 1..].to_vec());

    // And the runner's own stream numbered them the same.
    let mut on_runner = runner.events("t", events[0].id).await;
    let same = on_runner.until(":turn_completed").await;
    assert_eq!(same, events[1..].to_vec());
    assert_eq!(mock.request_count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_killed_mid_turn_is_taken_over_and_the_client_sees_the_round_restarted() {
    let database = test_database_or_skip!();
    let dir = TempDir::new();
    let flow = dir.write("flow.json", &flow());
    let mock = MockServer::start().await;
    // The first host's round stalls mid-stream; the round sent again answers whole.
    mock.push(slow_reply().stall_after_events(12));
    mock.push(text_reply(&long_text()));
    let lease = ["--lease-ttl-ms", "1000"];
    let front = Host::start(&flow, database.url(), &mock, &["--accept-only"]).await;
    let mut workers = vec![
        Host::start(&flow, database.url(), &mock, &lease).await,
        Host::start(&flow, database.url(), &mock, &lease).await,
    ];

    assert_eq!(
        front.post("/v1/threads", json!({"thread_id": "t"})).await.0,
        201
    );
    let mut on_front = front.events("t", None).await;
    assert_eq!(
        front
            .post("/v1/threads/t/messages", json!({"input": "tell me"}))
            .await
            .0,
        202
    );
    let mut events = Vec::new();
    while shown_text(&events).is_empty() {
        events.push(on_front.next().await);
    }
    let mut running = None;
    for (index, worker) in workers.iter().enumerate() {
        if worker.runs("t").await {
            running = Some(index);
        }
    }
    let running = running.expect("one worker runs the turn");
    let mut victim = workers.remove(running);
    victim.child.start_kill().expect("SIGKILL");
    victim.child.wait().await.expect("reaped");

    events.extend(on_front.until(":turn_completed").await);
    let restarted = events
        .iter()
        .position(|event| event.kind().ends_with(":round_restarted"))
        .unwrap_or_else(|| panic!("no round_restarted: {events:#?}"));
    assert!(restarted > 0);
    assert!(contiguous(&events), "{:?}", ids(&events));
    assert_eq!(shown_text(&events), long_text(), "the uncrashed run's text");
    let (_, items) = front.get("/v1/threads/t/items").await;
    let last = items["items"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["content"][0]["text"], long_text(), "{items}");
    assert_eq!(
        mock.request_count(),
        2,
        "the round in flight was sent again, once"
    );
    assert!(workers[0].child.id().is_some(), "the survivor still serves");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_decided_on_one_host_resumes_the_turn_on_the_running_host() {
    let database = test_database_or_skip!();
    let dir = TempDir::new();
    let flow = dir.write("flow.json", &echo_flow());
    let mock = MockServer::start().await;
    mock.set_responder(|request| {
        if has_tool_output(request) {
            answer_with_tool_output(request)
        } else {
            call_reply("echo", &json!({"text": "sent"}))
        }
    });
    let gated = ["--needs-approval", "echo"];
    let front = Host::start(
        &flow,
        database.url(),
        &mock,
        &["--accept-only", gated[0], gated[1]],
    )
    .await;
    let runner = Host::start(&flow, database.url(), &mock, &gated).await;

    assert_eq!(
        front.post("/v1/threads", json!({"thread_id": "t"})).await.0,
        201
    );
    let mut on_front = front.events("t", None).await;
    front
        .post("/v1/threads/t/messages", json!({"input": "send it"}))
        .await;
    let asked = on_front.until(":approval_requested").await;
    let approval_id = asked.last().unwrap().data["data"]["approval_id"]
        .as_str()
        .unwrap()
        .to_owned();
    // The front lists the call waiting on the runner, and knows the turn waits for it.
    let (_, listed) = front.get("/v1/threads/t/approvals").await;
    assert_eq!(
        listed["approvals"][0]["approval_id"], approval_id,
        "{listed}"
    );
    let (_, status) = front.get("/v1/threads/t").await;
    assert_eq!(status["status"], "awaiting_approval", "{status}");
    assert_eq!(status["here"], false);
    let (_, status) = runner.get("/v1/threads/t").await;
    assert_eq!(
        (&status["status"], &status["here"]),
        (&json!("awaiting_approval"), &json!(true)),
        "{status}"
    );

    let (code, body) = front
        .post(
            &format!("/v1/threads/t/approvals/{approval_id}"),
            json!({"decision": "approve"}),
        )
        .await;
    assert_eq!(code, 200, "{body}");
    let rest = on_front.until(":turn_completed").await;
    let completed = rest
        .iter()
        .find(|event| event.kind().ends_with(":tool_call_completed"))
        .unwrap_or_else(|| panic!("the approved call ran: {rest:#?}"));
    assert_eq!(completed.data["data"]["output"], "sent");
    let (_, items) = front.get("/v1/threads/t/items").await;
    let last = items["items"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["content"][0]["text"], "The tool said sent", "{items}");
    assert_eq!(mock.request_count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abort_asked_on_one_host_drains_and_stops_the_turn_on_the_running_host() {
    let database = test_database_or_skip!();
    let dir = TempDir::new();
    let flow = dir.write("flow.json", &flow());
    let mock = MockServer::start().await;
    // About eight seconds of stream: the drain's deadline cuts it.
    mock.push(
        text_reply(&long_text())
            .chunk_size(48)
            .delay_between_chunks(Duration::from_millis(200)),
    );
    let front = Host::start(&flow, database.url(), &mock, &["--accept-only"]).await;
    let runner = Host::start(&flow, database.url(), &mock, &[]).await;

    assert_eq!(
        front.post("/v1/threads", json!({"thread_id": "t"})).await.0,
        201
    );
    let mut on_front = front.events("t", None).await;
    front
        .post("/v1/threads/t/messages", json!({"input": "go on"}))
        .await;
    let mut events = Vec::new();
    while shown_text(&events).is_empty() {
        events.push(on_front.next().await);
    }
    assert!(runner.runs("t").await);
    let (code, body) = front
        .post(
            "/v1/threads/t/abort",
            json!({"drain_ms": 300, "reason": "asked on the front"}),
        )
        .await;
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["aborted"], true, "{body}");
    let report = &body["drain_report"];
    assert_eq!(report["reason"], "deadline", "{body}");
    assert_eq!(report["cutOff"].as_array().map(Vec::len), Some(1), "{body}");
    let rest = on_front.until(":turn_aborted").await;
    let aborted = rest.last().unwrap();
    assert_eq!(
        aborted.data["data"]["reason"], "cancelled: asked on the front",
        "{rest:#?}"
    );
    assert_eq!(aborted.data["data"]["error_kind"], "CANCELLED");
    assert!(
        rest.iter()
            .any(|event| event.kind().ends_with(":drain_started")),
        "{rest:#?}"
    );
    assert_eq!(
        mock.completed_replies(),
        0,
        "the round was cut, not finished"
    );
}
