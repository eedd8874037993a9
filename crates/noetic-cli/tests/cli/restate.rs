//! `noetic serve --engine restate=URL --storage sqlite:PATH`: a real `noetic serve` process whose
//! turns run on a real Restate server (the pinned `restate-server`; skipped with a line saying so
//! when it is absent). The process serves the thread object to Restate and registers it; a message
//! POSTed over HTTP becomes a Restate invocation, its gated call is listed and decided over HTTP
//! (a Restate signal underneath), and the turn's events stream to the client from the store's
//! event log, where the history is read back from.

use noetic_test_support::{MockServer, restate_or_skip};
use serde_json::json;

use crate::fleet::{Host, shown_text};
use crate::{TempDir, call_reply, echo_flow, text_reply};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_on_restate_runs_an_http_message_s_turn_there_with_its_approval_and_stream() {
    let restate = restate_or_skip!();
    let dir = TempDir::new();
    let flow = dir.write("flow.json", &echo_flow());
    let mock = MockServer::start().await;
    mock.push(call_reply("echo", &json!({"text": "journaled"})));
    mock.push(text_reply("the tool said journaled"));
    let store = format!("sqlite:{}", dir.path().join("threads.db").display());
    let engine = format!("restate={}", restate.ingress_url());
    let admin = restate.admin_url();
    let host = Host::start(
        &flow,
        &store,
        &mock,
        &[
            "--engine",
            &engine,
            "--restate-admin",
            &admin,
            "--restate-endpoint",
            "127.0.0.1:0",
            "--needs-approval",
            "echo",
        ],
    )
    .await;

    let (status, body) = host
        .post(
            "/v1/threads/t1/messages",
            json!({"input": "echo it", "message_id": "m-1"}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    // Everything after the turn's first event (`turn_started`, number 0 of the thread's log): from
    // the log, or live as the host relays it.
    let mut events = host.events("t1", Some(0)).await;
    let waiting = events.until(":approval_requested").await;
    let requested = waiting.last().unwrap();
    let approval_id = requested.data["data"]["approval_id"]
        .as_str()
        .unwrap()
        .to_owned();

    // Listed by the thread's status and its approvals, as Restate's inbox has them.
    let (_, state) = host.get("/v1/threads/t1").await;
    assert_eq!(state["status"], "awaiting_approval", "{state}");
    let (_, listed) = host.get("/v1/threads/t1/approvals").await;
    assert_eq!(listed["approvals"][0]["approval_id"], approval_id.as_str());
    assert_eq!(
        listed["approvals"][0]["arguments"],
        json!({"text": "journaled"})
    );
    let (status, decided) = host
        .post(
            &format!("/v1/threads/t1/approvals/{approval_id}"),
            json!({"decision": "approve"}),
        )
        .await;
    assert_eq!(status, 200, "{decided}");
    assert_eq!(decided["decided"]["tool"], "echo");

    let rest = events.until(":turn_completed").await;
    // The round's deltas are written by the attempt that ran it (in Restate's "always replay"
    // mode that attempt never gets to: its replay has none).
    let always_replay = std::env::var(noetic_test_support::restate::ALWAYS_REPLAY_ENV)
        .is_ok_and(|value| value == "1");
    if !always_replay {
        assert_eq!(shown_text(&rest), "the tool said journaled");
    }
    let (_, items) = host.get("/v1/threads/t1/items").await;
    let items = items["items"].as_array().unwrap();
    assert_eq!(items.len(), 4, "{items:?}");
    assert_eq!(items[0]["content"][0]["text"], "echo it");
    assert_eq!(items[3]["content"][0]["text"], "the tool said journaled");
    let (_, state) = host.get("/v1/threads/t1").await;
    assert_eq!(state["status"], "idle", "{state}");

    // The same message id again is the same turn: nothing more is asked of the model.
    let (status, _) = host
        .post(
            "/v1/threads/t1/messages",
            json!({"input": "echo it", "message_id": "m-1"}),
        )
        .await;
    assert!(status < 300, "{status}");
    assert_eq!(mock.request_count(), 2);

    // A turn waiting for a person is aborted over HTTP: Restate cancels it, and the thread is idle.
    mock.push(call_reply("echo", &json!({"text": "never"})));
    let (status, _) = host
        .post(
            "/v1/threads/t1/messages",
            json!({"input": "echo again", "message_id": "m-2"}),
        )
        .await;
    assert_eq!(status, 202);
    let mut events = host.events("t1", Some(last_id(&rest))).await;
    events.until(":approval_requested").await;
    let (status, aborted) = host.post("/v1/threads/t1/abort", json!({})).await;
    assert_eq!(status, 200, "{aborted}");
    let ended = events.until(":turn_aborted").await;
    assert_eq!(
        ended.last().unwrap().data["data"]["error_kind"],
        "CANCELLED",
        "{ended:?}"
    );
    let (_, state) = host.get("/v1/threads/t1").await;
    assert_eq!(state["status"], "idle", "{state}");
    assert_eq!(mock.request_count(), 3, "nothing ran after the abort");
}

/// The sequence number of the last of `events`.
fn last_id(events: &[crate::fleet::Event]) -> u64 {
    events.iter().rev().find_map(|event| event.id).unwrap()
}
