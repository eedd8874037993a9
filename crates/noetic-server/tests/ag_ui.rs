//! AG-UI (`POST /v1/ag-ui`) end to end over real HTTP (reqwest against the served router on a
//! loopback port), with the scripted and paced models: a text run's events in order, tool calls with
//! their results, a run parked on an approval that ends with an interrupt and the resume that
//! approves it and finishes the same turn, a rejection, a steer while a turn runs, noetic-only
//! events as `CUSTOM`, a retried run that runs nothing twice, and the 400/404 paths.

#![allow(clippy::unwrap_used)]

#[allow(dead_code)]
#[path = "native/support.rs"]
mod support;

use noetic_core::{Scope, SessionStatus};
use noetic_server::ServeConfig;
use noetic_test_support::{PacedModel, ScriptedModel, ScriptedResponse};
use serde_json::{Value, json};
use support::{Served, SseReader, bounded, delta, echo_tool, harness, status_and_json};

/// A `RunAgentInput` as `HttpAgent` sends it: the whole history, the new user message last.
fn input(thread: &str, run: &str, messages: Value) -> Value {
    json!({
        "threadId": thread,
        "runId": run,
        "state": {},
        "messages": messages,
        "tools": [],
        "context": [],
        "forwardedProps": {},
    })
}

fn user(id: &str, text: &str) -> Value {
    json!({"id": id, "role": "user", "content": text})
}

/// Posts `body` to the AG-UI route.
async fn post(served: &Served, body: &Value) -> reqwest::Response {
    bounded(
        "the AG-UI response",
        served
            .client
            .post(served.url("/v1/ag-ui"))
            .header("accept", "text/event-stream")
            .json(body)
            .send(),
    )
    .await
    .unwrap()
}

/// Posts a run and checks the response is an event stream.
async fn open(served: &Served, body: &Value) -> SseReader {
    let response = post(served, body).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    assert_eq!(response.headers()["cache-control"], "no-cache");
    SseReader::new(response)
}

/// The rest of a run's events.
async fn events(reader: &mut SseReader) -> Vec<Value> {
    let mut events = Vec::new();
    while let Some(event) = reader.next().await {
        events.push(event.data);
    }
    events
}

/// Runs one request to its end, its events checked with [`check_order`].
async fn run(served: &Served, body: &Value) -> Vec<Value> {
    let events = events(&mut open(served, body).await).await;
    check_order(&events);
    events
}

/// Checks `events` as `@ag-ui/client`'s verifier would: first `RUN_STARTED` or `RUN_ERROR`, one
/// run, messages, calls, reasoning and steps closed before its end.
fn check_order(events: &[Value]) {
    let kinds = types(events);
    assert!(
        matches!(kinds.first(), Some(&("RUN_STARTED" | "RUN_ERROR"))),
        "{kinds:?}"
    );
    assert!(
        matches!(kinds.last(), Some(&("RUN_FINISHED" | "RUN_ERROR"))),
        "{kinds:?}"
    );
    let mut open: Vec<String> = Vec::new();
    for event in &events[..events.len() - 1] {
        let kind = event["type"].as_str().unwrap();
        assert!(
            !kind.starts_with("RUN_") || kind == "RUN_STARTED" && event == &events[0],
            "one run per response: {kinds:?}"
        );
        let id = ["messageId", "toolCallId", "stepName"]
            .iter()
            .find_map(|key| event[key].as_str())
            .unwrap_or("");
        let span = |prefix: &str| format!("{prefix}:{id}");
        match kind {
            "TEXT_MESSAGE_START"
            | "TOOL_CALL_START"
            | "STEP_STARTED"
            | "REASONING_START"
            | "REASONING_MESSAGE_START" => {
                let key = span(kind.trim_end_matches("_START").trim_end_matches("_STARTED"));
                assert!(!open.contains(&key), "{key} opened twice: {kinds:?}");
                open.push(key);
            }
            "TEXT_MESSAGE_CONTENT" | "TOOL_CALL_ARGS" | "REASONING_MESSAGE_CONTENT" => {
                let key = span(kind.trim_end_matches("_CONTENT").trim_end_matches("_ARGS"));
                assert!(open.contains(&key), "{kind} outside its span: {events:#?}");
            }
            "TEXT_MESSAGE_END"
            | "TOOL_CALL_END"
            | "STEP_FINISHED"
            | "REASONING_END"
            | "REASONING_MESSAGE_END" => {
                let key = span(kind.trim_end_matches("_END").trim_end_matches("_FINISHED"));
                let at = open
                    .iter()
                    .position(|open| *open == key)
                    .unwrap_or_else(|| panic!("{key} closed but not open: {events:#?}"));
                open.remove(at);
            }
            _ => {}
        }
    }
    assert!(open.is_empty(), "left open at the run's end: {open:?}");
}

fn types(events: &[Value]) -> Vec<&str> {
    events
        .iter()
        .map(|event| event["type"].as_str().unwrap())
        .collect()
}

/// The event types, `CUSTOM` left out.
fn shape(events: &[Value]) -> Vec<&str> {
    types(events)
        .into_iter()
        .filter(|kind| *kind != "CUSTOM")
        .collect()
}

fn find<'a>(events: &'a [Value], kind: &str) -> &'a Value {
    events
        .iter()
        .find(|event| event["type"] == kind)
        .unwrap_or_else(|| panic!("no {kind}: {events:#?}"))
}

fn text_of(events: &[Value]) -> String {
    events
        .iter()
        .filter(|event| event["type"] == "TEXT_MESSAGE_CONTENT")
        .map(|event| event["delta"].as_str().unwrap().to_owned())
        .collect()
}

fn custom<'a>(events: &'a [Value], name: &str) -> Option<&'a Value> {
    events
        .iter()
        .find(|event| event["type"] == "CUSTOM" && event["name"] == name)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_text_run_streams_run_started_the_message_and_run_finished() {
    let model = ScriptedModel::with_responses([ScriptedResponse::text_in_deltas(
        "Hello from the harness",
        5,
    )]);
    let served = Served::start(harness(model.clone(), vec![]), ServeConfig::new()).await;
    let body = input(
        "t",
        "run-1",
        json!([
            user("old-user", "ignored history"),
            {"id": "old-answer", "role": "assistant", "content": "ignored"},
            user("u1", "hi"),
        ]),
    );
    let events = run(&served, &body).await;
    assert_eq!(
        shape(&events),
        [
            "RUN_STARTED",
            "STEP_STARTED",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "STEP_FINISHED",
            "RUN_FINISHED"
        ]
    );
    let started = &events[0];
    assert_eq!(started["threadId"], "t");
    assert_eq!(started["runId"], "run-1");
    let turn = started["metadata"]["turnId"].as_str().unwrap();
    assert!(turn.len() > 4, "{started}");
    let message = find(&events, "TEXT_MESSAGE_START");
    assert_eq!(message["role"], "assistant");
    assert!(
        message["messageId"].as_str().unwrap().starts_with(turn),
        "message ids are unique to the turn: {message}"
    );
    assert_eq!(text_of(&events), "Hello from the harness");
    let finished = events.last().unwrap();
    assert_eq!(finished["runId"], "run-1");
    assert_eq!(finished["threadId"], "t");
    assert_eq!(finished["outcome"], json!({"type": "success"}));
    // Only the new user message was taken; the re-sent history was not.
    assert_eq!(model.requests()[0].user_texts(), ["hi"]);

    // The same run sent again (a retry): nothing runs twice, the run just ends.
    let again = run(&served, &body).await;
    assert_eq!(shape(&again), ["RUN_STARTED", "RUN_FINISHED"]);
    assert_eq!(again[0]["metadata"], json!({}), "no turn to follow");
    assert_eq!(model.request_count(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn tool_calls_stream_with_their_results_and_noetic_events_come_as_custom() {
    let model = ScriptedModel::with_responses([
        ScriptedResponse::tool_call("call-1", "echo", json!({"text": "x"})),
        ScriptedResponse::text("The tool said: echoed x"),
    ]);
    let served = Served::start(
        harness(model.clone(), vec![echo_tool(false)]),
        ServeConfig::new(),
    )
    .await;
    let events = run(&served, &input("c", "r", json!([user("u1", "go")]))).await;
    assert_eq!(
        shape(&events),
        [
            "RUN_STARTED",
            "STEP_STARTED",
            "TOOL_CALL_START",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_END",
            "STEP_FINISHED",
            "TOOL_CALL_RESULT",
            "STEP_STARTED",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "STEP_FINISHED",
            "RUN_FINISHED"
        ]
    );
    let start = find(&events, "TOOL_CALL_START");
    assert_eq!(start["toolCallId"], "call-1");
    assert_eq!(start["toolCallName"], "echo");
    let args: String = events
        .iter()
        .filter(|event| event["type"] == "TOOL_CALL_ARGS")
        .map(|event| event["delta"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&args).unwrap(),
        json!({"text": "x"})
    );
    let result = find(&events, "TOOL_CALL_RESULT");
    assert_eq!(result["toolCallId"], "call-1");
    assert_eq!(result["role"], "tool");
    assert!(
        result["content"].as_str().unwrap().contains("echoed x"),
        "{result}"
    );
    assert_ne!(
        result["messageId"],
        find(&events, "TEXT_MESSAGE_START")["messageId"]
    );
    assert_eq!(text_of(&events), "The tool said: echoed x");
    // Steps are named per model call, and the events AG-UI has no type for are CUSTOM.
    assert_eq!(find(&events, "STEP_STARTED")["stepName"], "model_call_1");
    let round = custom(&events, "noetic.tool_round_started").expect("a CUSTOM tool round");
    assert_eq!(round["value"]["tool_count"], 1);
    let call = custom(&events, "noetic.tool_call_started").expect("a CUSTOM tool call start");
    assert_eq!(call["value"]["call_id"], "call-1");
}

/// The `resume` answering every interrupt of `finished` (a `RUN_FINISHED`) with `payload`.
fn resume(thread: &str, finished: &Value, status: &str, payload: Value) -> Value {
    let interrupts = finished["outcome"]["interrupts"].as_array().unwrap();
    let mut body = input(
        thread,
        "run-2",
        json!([
            user("u1", "go"),
            {"id": "a1", "role": "assistant", "toolCalls": [
                {"id": "call-1", "type": "function", "function": {"name": "echo", "arguments": "{\"text\":\"x\"}"}}
            ]},
        ]),
    );
    body["resume"] = interrupts
        .iter()
        .map(|interrupt| json!({"interruptId": interrupt["id"], "status": status, "payload": payload}))
        .collect();
    body
}

#[tokio::test(flavor = "multi_thread")]
async fn an_approval_ends_the_run_with_an_interrupt_and_the_resume_finishes_the_turn() {
    let model = ScriptedModel::with_responses([
        ScriptedResponse::tool_call("call-1", "echo", json!({"text": "x"})),
        ScriptedResponse::text("The tool said: echoed x"),
    ]);
    let served = Served::start(
        harness(model.clone(), vec![echo_tool(true)]),
        ServeConfig::new(),
    )
    .await;
    let first = run(&served, &input("a", "run-1", json!([user("u1", "go")]))).await;
    assert_eq!(
        shape(&first),
        [
            "RUN_STARTED",
            "STEP_STARTED",
            "TOOL_CALL_START",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_END",
            "STEP_FINISHED",
            "RUN_FINISHED"
        ]
    );
    let finished = first.last().unwrap();
    assert_eq!(finished["outcome"]["type"], "interrupt");
    let interrupts = finished["outcome"]["interrupts"].as_array().unwrap();
    assert_eq!(interrupts.len(), 1);
    let interrupt = &interrupts[0];
    assert_eq!(interrupt["reason"], "tool_call");
    assert_eq!(interrupt["toolCallId"], "call-1");
    assert_eq!(interrupt["metadata"]["toolName"], "echo");
    assert_eq!(interrupt["metadata"]["arguments"], json!({"text": "x"}));
    assert_eq!(
        interrupt["responseSchema"]["properties"]["approved"]["type"],
        "boolean"
    );
    // The turn stays parked server side, waiting for exactly that approval.
    let status = served.server.harness().status(Scope::thread("a"));
    let SessionStatus::AwaitingApproval { calls, turn_id } = &status else {
        panic!("{status:?}");
    };
    assert_eq!(calls[0].approval_id, interrupt["id"].as_str().unwrap());
    assert_eq!(turn_id, first[0]["metadata"]["turnId"].as_str().unwrap());

    // A new message while the interrupt is open is refused with RUN_ERROR (AG-UI's rule).
    let refused = run(
        &served,
        &input("a", "run-x", json!([user("u1", "go"), user("u2", "and?")])),
    )
    .await;
    assert_eq!(types(&refused), ["RUN_ERROR"]);
    assert_eq!(refused[0]["code"], "SERVER_INTERRUPT_PENDING");
    assert_eq!(model.request_count(), 1);

    let rest = run(
        &served,
        &resume("a", finished, "resolved", json!({"approved": true})),
    )
    .await;
    assert_eq!(
        shape(&rest),
        [
            "RUN_STARTED",
            "TOOL_CALL_RESULT",
            "STEP_STARTED",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_CONTENT",
            "TEXT_MESSAGE_END",
            "STEP_FINISHED",
            "RUN_FINISHED"
        ],
        "the resumed run sends the result without the call again: {rest:#?}"
    );
    assert_eq!(rest[0]["runId"], "run-2");
    assert_eq!(
        rest[0]["metadata"]["turnId"],
        first[0]["metadata"]["turnId"]
    );
    let result = find(&rest, "TOOL_CALL_RESULT");
    assert_eq!(result["toolCallId"], "call-1");
    assert!(result["content"].as_str().unwrap().contains("echoed x"));
    assert_eq!(text_of(&rest), "The tool said: echoed x");
    assert_eq!(rest.last().unwrap()["outcome"], json!({"type": "success"}));
    let decided = custom(&rest, "noetic.approval_decided").expect("the decision, as CUSTOM");
    assert_eq!(decided["value"]["approved"], true);
    assert_eq!(model.request_count(), 2);
    assert!(matches!(
        served.server.harness().status(Scope::thread("a")),
        SessionStatus::Idle
    ));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rejection_sends_the_denial_as_the_result_and_the_turn_answers() {
    let model = ScriptedModel::with_responses([
        ScriptedResponse::tool_call("call-1", "echo", json!({"text": "x"})),
        ScriptedResponse::text("Not run, then."),
        ScriptedResponse::tool_call("call-1", "echo", json!({"text": "x"})),
        ScriptedResponse::text("Cancelled, then."),
    ]);
    let served = Served::start(
        harness(model.clone(), vec![echo_tool(true)]),
        ServeConfig::new(),
    )
    .await;
    let first = run(&served, &input("r", "run-1", json!([user("u1", "go")]))).await;
    let answer = resume(
        "r",
        first.last().unwrap(),
        "resolved",
        json!({"approved": false, "reason": "not now"}),
    );
    let rest = run(&served, &answer).await;
    let result = find(&rest, "TOOL_CALL_RESULT");
    assert_eq!(result["toolCallId"], "call-1");
    assert!(
        result["content"].as_str().unwrap().contains("not now"),
        "{result}"
    );
    assert_eq!(text_of(&rest), "Not run, then.");
    assert!(
        model.requests()[1].tool_outputs()[0].contains("not now"),
        "the reason reached the model"
    );
    assert_eq!(rest.last().unwrap()["outcome"]["type"], "success");

    // `status: "cancelled"` rejects too.
    let second = run(&served, &input("r", "run-3", json!([user("u3", "again")]))).await;
    assert_eq!(second.last().unwrap()["outcome"]["type"], "interrupt");
    let cancelled = run(
        &served,
        &resume("r", second.last().unwrap(), "cancelled", Value::Null),
    )
    .await;
    assert!(
        find(&cancelled, "TOOL_CALL_RESULT")["content"]
            .as_str()
            .unwrap()
            .contains("rejected"),
        "{cancelled:#?}"
    );
    assert_eq!(text_of(&cancelled), "Cancelled, then.");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_message_while_a_turn_runs_steers_it_and_the_run_follows_that_turn() {
    let model = PacedModel::new();
    let served = Served::start(
        harness(model.clone(), vec![echo_tool(false)]),
        ServeConfig::new(),
    )
    .await;
    let mut first = open(&served, &input("s", "run-1", json!([user("u1", "first")]))).await;
    let call = bounded("round 1", model.next_call()).await;
    let opening = first.next().await.unwrap().data;
    assert_eq!(opening["type"], "RUN_STARTED");
    // The client sends its history with the new message: u1 is the server's already.
    let mut steer = open(
        &served,
        &input(
            "s",
            "run-2",
            json!([user("u1", "first"), user("u2", "also mention steering")]),
        ),
    )
    .await;
    // The response's headers came once the message was accepted, as a steer of the running turn.
    call.send(delta("thinking "));
    call.send_all(
        ScriptedResponse::tool_call("call-1", "echo", json!({"text": "x"})).into_events(),
    );
    drop(call);
    let second = bounded("round 2", model.next_call()).await;
    assert!(
        second
            .request
            .user_texts()
            .iter()
            .any(|text| text == "also mention steering"),
        "{:?}",
        second.request.user_texts()
    );
    second.send_all(ScriptedResponse::text("done").into_events());
    drop(second);
    let steered = events(&mut steer).await;
    check_order(&steered);
    assert_eq!(steered[0]["runId"], "run-2");
    assert_eq!(
        steered[0]["metadata"]["turnId"], opening["metadata"]["turnId"],
        "the steering run follows the running turn: {steered:#?}"
    );
    let applied = custom(&steered, "noetic.steer_applied").expect("the steer, as CUSTOM");
    assert_eq!(applied["value"]["message_ids"], json!(["u2"]));
    assert_eq!(text_of(&steered), "done");
    assert_eq!(steered.last().unwrap()["outcome"]["type"], "success");
    // The first run saw the whole turn, steer included.
    let mut whole = vec![opening];
    whole.extend(events(&mut first).await);
    check_order(&whole);
    assert_eq!(text_of(&whole), "thinking done");
    assert!(custom(&whole, "noetic.steer_applied").is_some());
    assert_eq!(model.call_count(), 2, "one turn: the steer joined it");
}

#[tokio::test(flavor = "multi_thread")]
async fn requests_it_cannot_act_on_are_json_errors_naming_the_field() {
    let model = ScriptedModel::with_responses([ScriptedResponse::text("hi")]);
    let served = Served::start(harness(model.clone(), vec![]), ServeConfig::new()).await;
    let resume_with = |entry: Value| {
        let mut body = input("e", "r", json!([]));
        body["resume"] = json!([entry]);
        body
    };
    let cases = [
        (json!({"runId": "r", "messages": []}), 400, "threadId"),
        (input("e", "r", json!([])), 400, "no user message"),
        (
            input(
                "e",
                "r",
                json!([{"id": "a", "role": "assistant", "content": "hi"}]),
            ),
            400,
            "no user message",
        ),
        (
            input("e", "r", json!([{"id": "u", "role": "user", "content": 3}])),
            400,
            "messages[0].content",
        ),
        (
            input("e", "r", json!([{"role": "user", "content": "hi"}])),
            400,
            "messages[0].id",
        ),
        (
            resume_with(json!({"interruptId": "x", "status": "maybe"})),
            400,
            "resume[0].status",
        ),
        (
            resume_with(json!({"status": "resolved", "payload": {"approved": true}})),
            400,
            "resume[0].interruptId",
        ),
        (
            resume_with(json!({"interruptId": "x", "status": "resolved", "payload": {"ok": 1}})),
            400,
            "resume[0].payload.approved",
        ),
        (
            resume_with(
                json!({"interruptId": "x", "status": "resolved", "payload": {"approved": true, "editedArgs": {}}}),
            ),
            400,
            "resume[0].payload.editedArgs",
        ),
        (
            {
                let mut body = input("e", "r", json!([user("u", "hi")]));
                body["forwardedProps"] = json!({"delivery": "soon"});
                body
            },
            400,
            "forwardedProps.delivery",
        ),
        (
            {
                let mut body = resume_with(
                    json!({"interruptId": "x", "status": "resolved", "payload": {"approved": true}}),
                );
                body["threadId"] = json!("never-used");
                body
            },
            404,
            "never-used",
        ),
    ];
    for (body, status, names) in cases {
        let (got, error) = status_and_json(post(&served, &body).await).await;
        assert_eq!(got, status, "{body}: {error}");
        let code = error["error"]["code"].as_str().unwrap();
        assert_eq!(
            code,
            if status == 404 {
                "SERVER_NOT_FOUND"
            } else {
                "SERVER_BAD_REQUEST"
            },
            "{error}"
        );
        let message = error["error"]["message"].as_str().unwrap();
        assert!(message.contains(names), "{message} names {names}");
    }
    // Not JSON at all.
    let response = bounded(
        "the response",
        served
            .client
            .post(served.url("/v1/ag-ui"))
            .header("content-type", "application/json")
            .body("{not json")
            .send(),
    )
    .await
    .unwrap();
    let (status, error) = status_and_json(response).await;
    assert_eq!(status, 400);
    assert_eq!(error["error"]["code"], "SERVER_BAD_REQUEST");
    assert_eq!(model.request_count(), 0, "nothing ran");
    // Content as parts, no runId: accepted.
    let events = run(
        &served,
        &json!({"threadId": "e", "messages": [
            {"id": "u", "role": "user", "content": [{"type": "text", "text": "hi"}]}
        ]}),
    )
    .await;
    assert!(events[0]["runId"].as_str().unwrap().starts_with("run-"));
    assert_eq!(events.last().unwrap()["outcome"]["type"], "success");
    assert_eq!(model.requests()[0].user_texts(), ["hi"]);
}
