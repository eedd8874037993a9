//! The native API end to end over real HTTP (reqwest against the axum server on a loopback port),
//! with the scripted, paced and mock-server providers: streaming, `Last-Event-ID` resume across a
//! forced disconnect, lagged, steering, approvals, abort with drain, idempotent POSTs, and the
//! 401/403/404/409/413/429 paths.

#![allow(clippy::unwrap_used)]

mod errors;
mod restart;
mod support;

use noetic_core::ResponseEvent;
use noetic_server::ServeConfig;
use noetic_test_support::{MockReply, MockServer, PacedModel, ScriptedModel, ScriptedResponse};
use serde_json::json;

use support::{Served, bounded, delta, echo_tool, harness, text_of};

async fn create(served: &Served, thread: &str) {
    let (status, body) = served
        .post("/v1/threads", json!({"thread_id": thread}))
        .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["thread_id"], thread);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_turn_streams_over_sse_with_increasing_ids_and_its_status_and_items_follow() {
    let model = ScriptedModel::with_responses([ScriptedResponse::text_in_deltas(
        "Hello from the harness",
        4,
    )]);
    let served = Served::start(harness(model, vec![]), ServeConfig::new()).await;
    create(&served, "t").await;
    served.post("/v1/threads", json!({"thread_id": "t"})).await;
    let mut events = served.events("t", "?replay=none", None).await;
    let (status, body) = served
        .post("/v1/threads/t/messages", json!({"input": "hi"}))
        .await;
    assert_eq!(status, 202, "{body}");
    assert!(body["message_id"].as_str().unwrap().starts_with("msg-"));
    let turn = events.until(":turn_completed").await;
    assert_eq!(turn[0].kind(), "agent:turn_started");
    assert_eq!(text_of(&turn), "Hello from the harness");
    let ids: Vec<u64> = turn.iter().map(|event| event.id.unwrap()).collect();
    assert!(ids.windows(2).all(|pair| pair[0] < pair[1]), "{ids:?}");
    assert!(
        turn.iter()
            .all(|event| event.data["seq"] == json!(event.id.unwrap())),
        "the data's seq is the id"
    );

    let (_, status) = served.get("/v1/threads/t").await;
    assert_eq!(status["status"], "idle");
    assert_eq!(status["queue_len"], 0);
    let (_, items) = served.get("/v1/threads/t/items").await;
    let items = items["items"].as_array().unwrap().clone();
    assert_eq!(items.len(), 2, "{items:?}");
    assert_eq!(items[1]["content"][0]["text"], "Hello from the harness");
    let (_, threads) = served.get("/v1/threads").await;
    assert_eq!(threads["threads"][0]["thread_id"], "t");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_mock_provider_s_wire_reaches_the_client_through_both_servers() {
    let provider_server = MockServer::start().await;
    provider_server.push(MockReply::answer("Streamed over two hops.").chunk_size(7));
    let provider = noetic_providers::OpenResponses::builder(provider_server.base_url())
        .build()
        .unwrap();
    let served = Served::start(harness(provider, vec![]), ServeConfig::new()).await;
    served
        .post("/v1/threads", json!({"thread_id": "wire"}))
        .await;
    let mut events = served.events("wire", "?replay=none", None).await;
    let (status, _) = served
        .post("/v1/threads/wire/messages", json!({"input": "go"}))
        .await;
    assert_eq!(status, 202);
    let turn = events.until(":turn_completed").await;
    assert_eq!(text_of(&turn), "Streamed over two hops.");
    assert_eq!(provider_server.request_count(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn last_event_id_resumes_a_running_turn_without_gap_or_duplicate_after_a_disconnect() {
    let model = PacedModel::new();
    let served = Served::start(harness(model.clone(), vec![]), ServeConfig::new()).await;
    create(&served, "r").await;
    // A client that stays connected throughout, to compare with.
    served.post("/v1/threads", json!({"thread_id": "r"})).await;
    let mut steady = served.events("r", "?replay=none", None).await;
    served.post("/v1/threads", json!({"thread_id": "r"})).await;
    let mut client = served.events("r", "?replay=none", None).await;
    served
        .post("/v1/threads/r/messages", json!({"input": "count"}))
        .await;
    let call = bounded("the model call", model.next_call()).await;
    call.send(ResponseEvent::Created {
        response_id: Some("resp".to_owned()),
        model: None,
    });
    call.send(delta("one "));
    call.send(delta("two "));
    let mut before = client.until("response.output_text.delta").await;
    before.extend(client.until("response.output_text.delta").await);
    let last_seen = before.last().unwrap().id.unwrap();
    // A forced disconnect: the connection is dropped mid-turn; the turn goes on.
    drop(client);
    call.send(delta("three "));
    call.send(delta("four"));
    // It reconnects while the turn still runs, with the last id it saw.
    let mut resumed = served.events("r", "", Some(last_seen)).await;
    let mut after = resumed.until("response.output_text.delta").await;
    after.extend(resumed.until("response.output_text.delta").await);
    call.send_all(
        ScriptedResponse::text("one two three four")
            .into_events()
            .into_iter()
            .filter(|event| !matches!(event, ResponseEvent::OutputTextDelta { .. })),
    );
    drop(call);
    after.extend(resumed.until(":turn_completed").await);
    let everything = steady.until(":turn_completed").await;

    let mut ids: Vec<u64> = before.iter().chain(&after).map(|e| e.id.unwrap()).collect();
    let steady_ids: Vec<u64> = everything.iter().map(|e| e.id.unwrap()).collect();
    assert_eq!(ids, steady_ids, "no gap, no duplicate");
    ids.dedup();
    assert_eq!(ids.len(), steady_ids.len());
    assert_eq!(
        format!("{}{}", text_of(&before), text_of(&after)),
        "one two three four"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cursor_that_fell_off_what_is_kept_gets_lagged_first() {
    let model =
        ScriptedModel::with_responses([ScriptedResponse::text_in_deltas(&"word ".repeat(40), 1)]);
    let served = Served::start(harness(model, vec![]), ServeConfig::new()).await;
    served.post("/v1/threads", json!({"thread_id": "l"})).await;
    let mut live = served.events("l", "?replay=none", None).await;
    served
        .post("/v1/threads/l/messages", json!({"input": "talk"}))
        .await;
    let turn = live.until(":turn_completed").await;
    drop(live);
    let first_delta = turn
        .iter()
        .find(|event| event.kind() == "response.output_text.delta")
        .unwrap()
        .id
        .unwrap();
    // The ended turn's deltas were compacted: resuming after the first one cannot be exact.
    let mut late = served
        .events("l", &format!("?after={first_delta}"), None)
        .await;
    let first = late.next().await.unwrap();
    assert_eq!(first.kind(), "agent:lagged", "{first:?}");
    assert!(first.data["data"]["skipped"].as_u64().unwrap() > 0);
    let next = late.next().await.unwrap();
    assert!(next.id.unwrap() > first.id.unwrap());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_message_with_a_delivery_mode_steers_the_running_turn() {
    let model = PacedModel::new();
    let served = Served::start(
        harness(model.clone(), vec![echo_tool(false)]),
        ServeConfig::new(),
    )
    .await;
    served.post("/v1/threads", json!({"thread_id": "s"})).await;
    let mut events = served.events("s", "?replay=none", None).await;
    served
        .post("/v1/threads/s/messages", json!({"input": "first"}))
        .await;
    let first = bounded("round 1", model.next_call()).await;
    // Steered while round 1 streams: it joins the turn before its next model request.
    let (status, body) = served
        .post(
            "/v1/threads/s/messages",
            json!({"input": "also mention steering", "delivery": "between-rounds", "message_id": "steer-1"}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["queued"], true, "a turn was running");
    first.send_all(
        ScriptedResponse::tool_call("call_1", "echo", json!({"text": "x"})).into_events(),
    );
    drop(first);
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
    let turn = events.until(":turn_completed").await;
    let applied = turn
        .iter()
        .find(|event| event.kind() == "agent:steer_applied")
        .expect("a steer_applied event");
    assert!(applied.data.to_string().contains("steer-1"), "{applied:?}");
    assert_eq!(
        turn.iter()
            .filter(|event| event.kind() == "agent:turn_started")
            .count(),
        1,
        "one turn: the steer joined it"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_approval_is_listed_decided_over_http_and_the_turn_goes_on() {
    let model = ScriptedModel::with_responses([
        ScriptedResponse::tool_call("call_1", "echo", json!({"text": "ship it"})),
        ScriptedResponse::text("Sent."),
    ]);
    let served = Served::start(
        harness(model.clone(), vec![echo_tool(true)]),
        ServeConfig::new(),
    )
    .await;
    served.post("/v1/threads", json!({"thread_id": "a"})).await;
    let mut events = served.events("a", "?replay=none", None).await;
    served
        .post("/v1/threads/a/messages", json!({"input": "send"}))
        .await;
    let asked = events.until(":approval_requested").await;
    let approval_id = asked.last().unwrap().data["data"]["approval_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (_, status) = served.get("/v1/threads/a").await;
    assert_eq!(status["status"], "awaiting_approval");
    let (_, pending) = served.get("/v1/threads/a/approvals").await;
    assert_eq!(pending["approvals"][0]["approval_id"], approval_id.as_str());
    assert_eq!(pending["approvals"][0]["tool"], "echo");

    let (status, body) = served
        .post(
            &format!("/v1/threads/a/approvals/{approval_id}"),
            json!({"decision": "approve"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let rest = events.until(":turn_completed").await;
    let completed = rest
        .iter()
        .find(|event| event.kind() == "agent:tool_call_completed")
        .unwrap();
    assert!(
        completed.data.to_string().contains("echoed ship it"),
        "{completed:?}"
    );
    assert_eq!(text_of(&rest), "Sent.");
    // Single use: deciding again is a 404 with the harness's code.
    let (status, body) = served
        .post(
            &format!("/v1/threads/a/approvals/{approval_id}"),
            json!({"decision": "reject", "reason": "late"}),
        )
        .await;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["code"], "APPROVAL_NOT_FOUND");
}

#[tokio::test(flavor = "multi_thread")]
async fn abort_with_drain_lets_the_round_in_flight_finish_and_reports_it() {
    let model = PacedModel::new();
    let served = Served::start(harness(model.clone(), vec![]), ServeConfig::new()).await;
    served.post("/v1/threads", json!({"thread_id": "d"})).await;
    let mut events = served.events("d", "?replay=none", None).await;
    served
        .post("/v1/threads/d/messages", json!({"input": "long answer"}))
        .await;
    let call = bounded("the model call", model.next_call()).await;
    call.send(delta("partial "));
    events.until("response.output_text.delta").await;
    let abort = served.post(
        "/v1/threads/d/abort",
        json!({"reason": "user stop", "drain_ms": 10_000}),
    );
    let finish = async {
        // The drain has started (its event is published before the abort waits): finish the round.
        events.until(":drain_started").await;
        call.send_all(ScriptedResponse::text("partial answer").into_events());
        drop(call);
    };
    let ((status, body), ()) = bounded("the drain", async { tokio::join!(abort, finish) }).await;
    assert_eq!(status, 200, "{body}");
    let report = &body["drain_report"];
    assert_eq!(report["finished"].as_array().unwrap().len(), 1, "{report}");
    assert!(report["cutOff"].as_array().unwrap().is_empty(), "{report}");
    // The round finished within the window, so the turn ended with its answer; the drain reported.
    let rest = events.until(":drain_finished").await;
    assert_eq!(text_of(&rest), "partial answer");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_retried_post_with_the_same_message_id_is_accepted_once() {
    let model = ScriptedModel::responding(|request| {
        ScriptedResponse::text(&format!("got {}", request.user_texts().join("+")))
    });
    let served = Served::start(harness(model.clone(), vec![]), ServeConfig::new()).await;
    served.post("/v1/threads", json!({"thread_id": "i"})).await;
    let mut events = served.events("i", "?replay=none", None).await;
    let body = json!({"input": "once", "message_id": "client-42"});
    let (first, first_body) = served.post("/v1/threads/i/messages", body.clone()).await;
    let (second, second_body) = served.post("/v1/threads/i/messages", body).await;
    assert_eq!(first, 202, "{first_body}");
    assert_eq!(second, 200, "{second_body}");
    assert_eq!(second_body["duplicate"], true);
    assert_eq!(second_body["message_id"], "client-42");
    events.until(":turn_completed").await;
    let (_, items) = served.get("/v1/threads/i/items").await;
    let users = items["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|item| item["role"] == "user")
        .count();
    assert_eq!(users, 1, "{items}");
    assert_eq!(model.request_count(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn stopping_the_server_ends_every_stream_with_a_final_event_and_no_turn_is_lost() {
    let model = ScriptedModel::with_responses([ScriptedResponse::text("kept")]);
    let served = Served::start(harness(model, vec![]), ServeConfig::new()).await;
    create(&served, "x").await;
    let mut watchers = vec![
        served.events("x", "?replay=none", None).await,
        served.events("x", "?replay=none", None).await,
    ];
    served
        .post("/v1/threads/x/messages", json!({"input": "hi"}))
        .await;
    for watcher in &mut watchers {
        watcher.until(":turn_completed").await;
    }
    let harness = served.server.harness().clone();
    served.shutdown().await;
    for mut watcher in watchers {
        let last = watcher.next().await.expect("a final event");
        assert_eq!(last.kind(), "server_shutdown");
        assert_eq!(
            last.id, None,
            "not a bus event: a resume starts after the last real one"
        );
        assert!(watcher.next().await.is_none(), "then the stream ends");
    }
    let response = harness
        .agent_response(noetic_core::Scope::thread("x"))
        .await
        .unwrap();
    assert_eq!(response.text, "kept");
}
