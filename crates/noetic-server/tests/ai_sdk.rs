//! The AI SDK UI message stream end to end over real HTTP (reqwest against the axum server on a
//! loopback port), with the scripted and paced models: a text turn's chunks, an approval that closes
//! the response and its answer that continues the same turn, a rejection, approvals asked in one
//! round, idempotent re-POSTs, resume (204 idle, a replay from `start` mid-turn), abort, a client
//! gone, the server stopping, and the 400/404 paths.

#![allow(clippy::unwrap_used)]

#[allow(dead_code)]
#[path = "native/support.rs"]
mod support;

use futures_util::StreamExt;
use noetic_core::{AgentHarness, ResponseEvent, Scope};
use noetic_server::{NoeticServer, ServeConfig};
use noetic_test_support::{PacedModel, ScriptedModel, ScriptedResponse};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use support::{bounded, delta, echo_tool, harness};

fn text_end(text: &str) -> Vec<ResponseEvent> {
    ScriptedResponse::text(text)
        .into_events()
        .into_iter()
        .filter(|event| {
            !matches!(
                event,
                ResponseEvent::OutputTextDelta { .. }
                    | ResponseEvent::OutputItemAdded { .. }
                    | ResponseEvent::Created { .. }
            )
        })
        .collect()
}

/// The start of a paced text answer.
fn text_start() -> Vec<ResponseEvent> {
    ScriptedResponse::text("x")
        .into_events()
        .into_iter()
        .take_while(|event| !matches!(event, ResponseEvent::OutputTextDelta { .. }))
        .collect()
}

/// A harness served on 127.0.0.1 (an ephemeral port) until dropped.
struct Served {
    server: NoeticServer,
    base: String,
    client: reqwest::Client,
    stop: CancellationToken,
}

impl Served {
    async fn start(harness: AgentHarness) -> Served {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let server = NoeticServer::new(harness, ServeConfig::new());
        let stop = CancellationToken::new();
        let router = server.router();
        let stopped = stop.clone();
        tokio::spawn(async move {
            axum::serve(listener, router)
                .with_graceful_shutdown(stopped.cancelled_owned())
                .await
                .unwrap();
        });
        Served {
            server,
            base: format!("http://{address}"),
            client: reqwest::Client::new(),
            stop,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Posts `body` to the chat route as `DefaultChatTransport` does.
    async fn chat(&self, body: Value) -> reqwest::Response {
        bounded(
            "the chat response",
            self.client
                .post(self.url("/v1/ai-sdk/chat"))
                .header("content-type", "application/json")
                .json(&body)
                .send(),
        )
        .await
        .unwrap()
    }

    /// Posts a user message and checks the response is a UI message stream.
    async fn say(&self, chat: &str, id: &str, text: &str) -> UiStream {
        let response = self.chat(user_message(chat, id, text)).await;
        UiStream::open(response)
    }

    async fn resume(&self, chat: &str) -> reqwest::Response {
        bounded(
            "the resume response",
            self.client
                .get(self.url(&format!("/v1/ai-sdk/chat/{chat}/stream")))
                .send(),
        )
        .await
        .unwrap()
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// The body `DefaultChatTransport` sends for a new user message (with an earlier exchange, which
/// the server ignores).
fn user_message(chat: &str, id: &str, text: &str) -> Value {
    json!({
        "id": chat,
        "messages": [
            {"id": "old-user", "role": "user", "parts": [{"type": "text", "text": "ignored history"}]},
            {"id": "old-answer", "role": "assistant", "parts": [{"type": "text", "text": "ignored"}]},
            {"id": id, "role": "user", "parts": [{"type": "text", "text": text}]},
        ],
        "trigger": "submit-message",
    })
}

/// The body sent once the user answered the approval requests of `first` (a response's chunks):
/// the assistant message as the client assembled it, its tool parts `approval-responded`.
fn approval_answer(chat: &str, first: &[Value], approved: bool) -> Value {
    let message_id = first[0]["messageId"].as_str().unwrap();
    let mut parts = vec![json!({"type": "step-start"})];
    for request in first
        .iter()
        .filter(|chunk| chunk["type"] == "tool-approval-request")
    {
        let mut approval = json!({"id": request["approvalId"], "approved": approved});
        if !approved {
            approval["reason"] = json!("not now");
        }
        parts.push(json!({
            "type": "tool-echo",
            "toolCallId": request["toolCallId"],
            "state": "approval-responded",
            "input": {"text": "x"},
            "approval": approval,
        }));
    }
    json!({
        "id": chat,
        "messages": [
            {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "go"}]},
            {"id": message_id, "role": "assistant", "parts": parts},
        ],
        "trigger": "submit-message",
        "messageId": message_id,
    })
}

/// A UI message stream read off a response body.
struct UiStream {
    body: futures_util::stream::BoxStream<'static, reqwest::Result<axum::body::Bytes>>,
    buffer: String,
    done: bool,
}

impl UiStream {
    fn open(response: reqwest::Response) -> UiStream {
        assert_eq!(response.status(), 200);
        let headers = response.headers();
        assert_eq!(headers["content-type"], "text/event-stream");
        assert_eq!(headers["x-vercel-ai-ui-message-stream"], "v1");
        assert_eq!(headers["cache-control"], "no-cache");
        UiStream {
            body: response.bytes_stream().boxed(),
            buffer: String::new(),
            done: false,
        }
    }

    /// The next chunk; `None` after `data: [DONE]` (which must end the body).
    async fn next(&mut self) -> Option<Value> {
        bounded("a chunk", async {
            loop {
                while let Some(end) = self.buffer.find("\n\n") {
                    let frame: String = self.buffer.drain(..end + 2).collect();
                    if frame.starts_with(':') {
                        continue;
                    }
                    let data = frame
                        .strip_prefix("data: ")
                        .unwrap_or_else(|| panic!("a frame is one data line: {frame:?}"))
                        .trim_end();
                    assert!(!data.contains('\n'), "one line per frame: {frame:?}");
                    if data == "[DONE]" {
                        self.done = true;
                        return None;
                    }
                    return Some(serde_json::from_str(data).unwrap());
                }
                match self.body.next().await {
                    Some(Ok(bytes)) => {
                        assert!(!self.done, "nothing after [DONE]");
                        self.buffer.push_str(std::str::from_utf8(&bytes).unwrap());
                    }
                    _ => {
                        assert!(
                            self.done,
                            "the body ended without [DONE]: {:?}",
                            self.buffer
                        );
                        return None;
                    }
                }
            }
        })
        .await
    }

    /// Every chunk up to `[DONE]`, then checks the body ends there.
    async fn rest(&mut self) -> Vec<Value> {
        let mut chunks = Vec::new();
        while let Some(chunk) = self.next().await {
            chunks.push(chunk);
        }
        assert!(self.done, "the stream ends with [DONE]");
        assert!(
            bounded("the body's end", self.body.next()).await.is_none(),
            "the body ends after [DONE]"
        );
        chunks
    }

    /// Chunks up to and including the first of type `kind`.
    async fn until(&mut self, kind: &str) -> Vec<Value> {
        let mut chunks = Vec::new();
        loop {
            let chunk = self
                .next()
                .await
                .unwrap_or_else(|| panic!("the stream ended before `{kind}`: {chunks:#?}"));
            let found = chunk["type"] == kind;
            chunks.push(chunk);
            if found {
                return chunks;
            }
        }
    }
}

/// The chunk types, the transient data parts skipped.
fn shape(chunks: &[Value]) -> Vec<&str> {
    for chunk in chunks {
        if chunk["type"].as_str().unwrap().starts_with("data-noetic-") {
            assert_eq!(chunk["transient"], true, "{chunk}");
        }
    }
    chunks
        .iter()
        .map(|chunk| chunk["type"].as_str().unwrap())
        .filter(|kind| !kind.starts_with("data-"))
        .collect()
}

/// The text of the `text-delta` chunks, joined.
fn text_of(chunks: &[Value]) -> String {
    chunks
        .iter()
        .filter(|chunk| chunk["type"] == "text-delta")
        .map(|chunk| chunk["delta"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_text_turn_streams_as_ui_message_chunks() {
    let model = ScriptedModel::with_responses([ScriptedResponse::text_in_deltas(
        "Hello from the harness",
        5,
    )]);
    let served = Served::start(harness(model.clone(), vec![])).await;
    let chunks = served.say("t", "u1", "hi").await.rest().await;
    assert_eq!(
        shape(&chunks),
        [
            "start",
            "start-step",
            "text-start",
            "text-delta",
            "text-delta",
            "text-delta",
            "text-delta",
            "text-delta",
            "text-end",
            "finish-step",
            "finish"
        ]
    );
    assert_eq!(text_of(&chunks), "Hello from the harness");
    assert!(chunks[0]["messageId"].as_str().unwrap().len() > 4);
    assert_eq!(chunks.last().unwrap()["finishReason"], "stop");
    let text_ids: Vec<&Value> = chunks
        .iter()
        .filter(|chunk| chunk["type"].as_str().unwrap().starts_with("text-"))
        .map(|chunk| &chunk["id"])
        .collect();
    assert!(text_ids.iter().all(|id| *id == text_ids[0]), "{text_ids:?}");
    // The noetic events with no counterpart came as transient data parts.
    assert!(
        chunks
            .iter()
            .any(|chunk| chunk["type"] == "data-noetic-step_started"),
        "{chunks:#?}"
    );
    // Only the last message was taken.
    assert_eq!(model.requests()[0].user_texts(), ["hi"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_approval_closes_the_response_and_its_answer_continues_the_same_turn() {
    let model = ScriptedModel::with_responses([
        ScriptedResponse::tool_call("call-1", "echo", json!({"text": "x"})),
        ScriptedResponse::text("The tool said: echoed x"),
    ]);
    let served = Served::start(harness(model.clone(), vec![echo_tool(true)])).await;
    let first = served.say("a", "u1", "go").await.rest().await;
    assert_eq!(
        shape(&first),
        [
            "start",
            "start-step",
            "tool-input-start",
            "tool-input-delta",
            "tool-input-available",
            "tool-approval-request",
            "finish-step",
            "finish"
        ]
    );
    let start = first
        .iter()
        .find(|chunk| chunk["type"] == "tool-input-start")
        .unwrap();
    assert_eq!(start["toolName"], "echo");
    assert_eq!(start["toolCallId"], "call-1");
    let available = first
        .iter()
        .find(|chunk| chunk["type"] == "tool-input-available")
        .unwrap();
    assert_eq!(available["input"], json!({"text": "x"}));
    let request = first
        .iter()
        .find(|chunk| chunk["type"] == "tool-approval-request")
        .unwrap();
    assert_eq!(request["toolCallId"], "call-1");
    assert_eq!(first.last().unwrap()["finishReason"], "tool-calls");
    // The turn stays parked server side.
    let turn = first[0]["messageId"].as_str().unwrap();
    let status = served.server.harness().status(Scope::thread("a"));
    assert!(
        matches!(&status, noetic_core::SessionStatus::AwaitingApproval { turn_id, .. } if turn_id == turn),
        "{status:?}"
    );

    // A new user message meanwhile is refused (it would wait behind the approval): answer first.
    let refused = served
        .chat(user_message("a", "u2", "and another thing"))
        .await;
    assert_eq!(refused.status().as_u16(), 409);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "SERVER_AWAITING_APPROVAL", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains(request["approvalId"].as_str().unwrap()),
        "{body}"
    );
    // The re-post of the message that is waiting still joins its turn (it is no new message).
    let again = served.say("a", "u1", "go").await.rest().await;
    assert_eq!(
        again.last().unwrap()["finishReason"],
        "tool-calls",
        "{again:?}"
    );

    let response = served.chat(approval_answer("a", &first, true)).await;
    let rest = UiStream::open(response).rest().await;
    assert_eq!(
        shape(&rest),
        [
            "start",
            "tool-output-available",
            "start-step",
            "text-start",
            "text-delta",
            "text-delta",
            "text-end",
            "finish-step",
            "finish"
        ]
    );
    assert_eq!(rest[0]["messageId"], turn, "the same message goes on");
    let output = rest
        .iter()
        .find(|chunk| chunk["type"] == "tool-output-available")
        .unwrap();
    assert_eq!(output["toolCallId"], "call-1");
    assert!(output["output"].as_str().unwrap().contains("echoed x"));
    assert_eq!(text_of(&rest), "The tool said: echoed x");
    assert_eq!(rest.last().unwrap()["finishReason"], "stop");
    assert_eq!(model.request_count(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rejection_shows_the_call_denied_and_the_turn_answers() {
    let model = ScriptedModel::with_responses([
        ScriptedResponse::tool_call("call-1", "echo", json!({"text": "x"})),
        ScriptedResponse::text("Not run, then."),
    ]);
    let served = Served::start(harness(model.clone(), vec![echo_tool(true)])).await;
    let first = served.say("r", "u1", "go").await.rest().await;
    let response = served.chat(approval_answer("r", &first, false)).await;
    let rest = UiStream::open(response).rest().await;
    assert_eq!(
        shape(&rest),
        [
            "start",
            "tool-output-denied",
            "start-step",
            "text-start",
            "text-delta",
            "text-end",
            "finish-step",
            "finish"
        ]
    );
    let denied = rest
        .iter()
        .find(|chunk| chunk["type"] == "tool-output-denied")
        .unwrap();
    assert_eq!(denied["toolCallId"], "call-1");
    assert!(
        model.requests()[1].tool_outputs()[0].contains("not now"),
        "the reason reached the model"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn approvals_asked_in_one_round_are_all_shown_and_answered() {
    let model = ScriptedModel::with_responses([
        ScriptedResponse::tool_calls(&[
            ("c1", "echo", json!({"text": "a"})),
            ("c2", "echo", json!({"text": "b"})),
        ]),
        ScriptedResponse::text("Both ran."),
    ]);
    let served = Served::start(harness(model.clone(), vec![echo_tool(true)])).await;
    let mut response = served.say("p", "u1", "go").await.rest().await;
    let mut asked = Vec::new();
    let mut outputs = Vec::new();
    let mut rounds = 0;
    // The second request may come in this response or the next: answer whatever was asked.
    while response.last().unwrap()["finishReason"] == "tool-calls" {
        rounds += 1;
        assert!(rounds <= 3, "every request is shown by the third response");
        asked.extend(
            response
                .iter()
                .filter(|chunk| chunk["type"] == "tool-approval-request")
                .map(|chunk| chunk["toolCallId"].as_str().unwrap().to_owned()),
        );
        let answer = approval_answer("p", &response, true);
        response = UiStream::open(served.chat(answer).await).rest().await;
        outputs.extend(
            response
                .iter()
                .filter(|chunk| chunk["type"] == "tool-output-available")
                .map(|chunk| chunk["toolCallId"].as_str().unwrap().to_owned()),
        );
        assert!(
            !response
                .iter()
                .any(|chunk| chunk["type"] == "tool-input-start"),
            "a continuation sends no part twice: {response:#?}"
        );
    }
    asked.sort();
    outputs.sort();
    assert_eq!(asked, ["c1", "c2"]);
    assert_eq!(outputs, ["c1", "c2"]);
    assert_eq!(text_of(&response), "Both ran.");
    assert_eq!(response.last().unwrap()["finishReason"], "stop");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_re_post_of_a_message_joins_its_turn_and_runs_nothing_twice() {
    let model = PacedModel::new();
    let served = Served::start(harness(model.clone(), vec![])).await;
    let mut first = served.say("i", "u1", "count").await;
    let call = bounded("the model call", model.next_call()).await;
    call.send_all(text_start());
    call.send(delta("one "));
    let before = first.until("text-delta").await;
    // The client retries (its first response got lost, say) while the turn runs.
    let mut retry = served.say("i", "u1", "count").await;
    let replayed = retry.until("text-delta").await;
    assert_eq!(replayed[0], before[0], "the same turn, from its start");
    assert_eq!(text_of(&replayed), "one ");
    call.send(delta("two"));
    call.send_all(text_end("one two"));
    drop(call);
    let first_rest = first.rest().await;
    let retry_rest = retry.rest().await;
    assert_eq!(text_of(&first_rest), "two");
    assert_eq!(text_of(&retry_rest), "two");
    assert_eq!(first_rest.last().unwrap()["finishReason"], "stop");
    assert_eq!(retry_rest.last().unwrap()["finishReason"], "stop");
    // Once the turn is over, a retry has nothing to stream, and nothing runs again.
    let late = served.say("i", "u1", "count").await.rest().await;
    assert_eq!(shape(&late), ["start", "finish"]);
    assert_eq!(model.call_count(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn resume_is_204_when_idle_and_a_replay_from_start_mid_turn() {
    let model = PacedModel::new();
    let served = Served::start(harness(model.clone(), vec![])).await;
    assert_eq!(served.resume("never-used").await.status(), 204);
    let mut live = served.say("s", "u1", "count").await;
    let call = bounded("the model call", model.next_call()).await;
    call.send_all(text_start());
    call.send(delta("one "));
    let seen = live.until("text-delta").await;
    // The page reloads: the client asks for the stream of its chat.
    let mut resumed = UiStream::open(served.resume("s").await);
    let replay = resumed.until("text-delta").await;
    assert_eq!(replay[0]["type"], "start", "a replay starts with `start`");
    assert_eq!(replay[0]["messageId"], seen[0]["messageId"]);
    assert_eq!(shape(&replay), shape(&seen));
    call.send(delta("two"));
    call.send_all(text_end("one two"));
    drop(call);
    let rest = resumed.rest().await;
    assert_eq!(text_of(&rest), "two");
    assert_eq!(rest.last().unwrap()["finishReason"], "stop");
    live.rest().await;
    assert_eq!(served.resume("s").await.status(), 204, "idle again");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_abort_ends_the_response_with_abort_and_closes_its_parts() {
    let model = PacedModel::new();
    let served = Served::start(harness(model.clone(), vec![])).await;
    let mut live = served.say("b", "u1", "count").await;
    let call = bounded("the model call", model.next_call()).await;
    call.send_all(text_start());
    call.send(delta("one "));
    live.until("text-delta").await;
    let aborted = bounded(
        "the abort",
        served
            .client
            .post(served.url("/v1/threads/b/abort"))
            .json(&json!({"reason": "user pressed stop"}))
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(aborted.status(), 200);
    let rest = live.rest().await;
    assert_eq!(
        shape(&rest),
        ["text-end", "finish-step", "abort", "finish"],
        "{rest:#?}"
    );
    let abort = rest.iter().find(|chunk| chunk["type"] == "abort").unwrap();
    assert!(
        abort["reason"]
            .as_str()
            .unwrap()
            .contains("user pressed stop")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_client_gone_does_not_cancel_the_turn() {
    let model = PacedModel::new();
    let served = Served::start(harness(model.clone(), vec![])).await;
    let mut live = served.say("g", "u1", "count").await;
    let call = bounded("the model call", model.next_call()).await;
    call.send_all(text_start());
    call.send(delta("one "));
    live.until("text-delta").await;
    drop(live);
    call.send(delta("two"));
    call.send_all(text_end("one two"));
    drop(call);
    let answer = bounded(
        "the turn's end",
        served.server.harness().agent_response(Scope::thread("g")),
    )
    .await
    .unwrap();
    assert_eq!(answer.text, "one two");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_server_stopping_ends_the_response_with_finish_and_done() {
    let model = PacedModel::new();
    let served = Served::start(harness(model.clone(), vec![])).await;
    let mut live = served.say("z", "u1", "count").await;
    let call = bounded("the model call", model.next_call()).await;
    call.send_all(text_start());
    call.send(delta("one "));
    live.until("text-delta").await;
    bounded("the stop", served.server.stop(None)).await;
    let rest = live.rest().await;
    assert_eq!(
        shape(&rest),
        ["text-end", "finish-step", "finish"],
        "{rest:#?}"
    );
    assert!(
        rest.iter()
            .any(|chunk| chunk["type"] == "data-noetic-server_shutdown")
    );
    drop(call);
}

#[tokio::test(flavor = "multi_thread")]
async fn requests_it_cannot_act_on_are_json_errors() {
    let model = ScriptedModel::with_responses([ScriptedResponse::text("hi")]);
    let served = Served::start(harness(model, vec![])).await;
    let cases = [
        (json!({"id": "e", "messages": []}), 400),
        (
            json!({"id": "e", "messages": [{"id": "u", "role": "user", "parts": []}]}),
            400,
        ),
        (
            json!({"id": "e", "trigger": "regenerate-message", "messages": [{"id": "u", "role": "user", "parts": [{"type": "text", "text": "hi"}]}]}),
            400,
        ),
        (
            json!({"id": "e", "messages": [{"id": "m", "role": "assistant", "parts": [{"type": "text", "text": "hi"}]}]}),
            400,
        ),
        (
            json!({"id": "unknown", "messages": [{"id": "m", "role": "assistant", "parts": [
                {"type": "tool-echo", "toolCallId": "c", "state": "approval-responded",
                 "approval": {"id": "nope", "approved": true}}
            ]}]}),
            404,
        ),
        (json!({"messages": []}), 400),
    ];
    for (body, status) in cases {
        let response = served.chat(body.clone()).await;
        assert_eq!(response.status(), status, "{body}");
        let error: Value = response.json().await.unwrap();
        assert!(
            error["error"]["code"]
                .as_str()
                .unwrap()
                .starts_with("SERVER_"),
            "{error}"
        );
    }
    // `{id, message}`, the shape of a `prepareSendMessagesRequest` sending only the last message.
    let response = served
        .chat(json!({"id": "e", "message": {"id": "u", "role": "user", "parts": [{"type": "text", "text": "hi"}]}}))
        .await;
    let chunks = UiStream::open(response).rest().await;
    assert_eq!(chunks.last().unwrap()["finishReason"], "stop");
}
