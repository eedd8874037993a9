//! A served durable harness (SQLite, with the threads' event log) that crashes while a call waits
//! for approval: the next server on the same file lists the thread and its pending approval, takes
//! the decision, resumes the turn once the crashed server's lease expired, and a client reconnecting
//! with an old `Last-Event-ID` gets what it missed of the crashed run from the durable event log,
//! with the same ids, then the resumed turn numbered on.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use noetic_core::{AgentHarness, EventLogOptions, Tool, ToolContext, ToolError, call_model};
use noetic_server::ServeConfig;
use noetic_storage_sqlite::SqliteStorage;
use noetic_test_support::{ScriptedModel, ScriptedResponse};
use serde_json::{Value, json};

use crate::support::{Served, bounded};

/// Short, so the crashed server's lease expires soon.
const LEASE: Duration = Duration::from_millis(400);

fn durable_harness(store: SqliteStorage, runs: Arc<AtomicUsize>) -> AgentHarness {
    let model = ScriptedModel::responding(|request| {
        if request.tool_outputs().is_empty() {
            ScriptedResponse::tool_call("c1", "echo", json!({"text": "sent"}))
        } else {
            ScriptedResponse::text(&format!("done: {}", request.tool_outputs().join(",")))
        }
    });
    let echo = Tool::dynamic(
        "echo",
        "Echoes once approved",
        json!({"type": "object", "properties": {"text": {"type": "string"}}}),
        move |args: Value, _: ToolContext| {
            runs.fetch_add(1, Ordering::SeqCst);
            async move { Ok::<_, ToolError>(args["text"].clone()) }
        },
    )
    .unwrap()
    .needs_approval(true);
    AgentHarness::builder("agent")
        .provider("p", model)
        .agent_graph(call_model("llm").model("m").tool(echo).build())
        .durable(store)
        .event_log(Some(EventLogOptions::new()))
        .lease_ttl(LEASE)
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pending_approval_survives_a_server_crash_and_the_stream_resumes_from_the_event_log() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("serve.db");
    let runs = Arc::new(AtomicUsize::new(0));

    // The first server, on a runtime of its own that is dropped mid-turn: a crash.
    let (first_path, first_runs) = (path.clone(), runs.clone());
    let seen = bounded(
        "the first server",
        tokio::task::spawn_blocking(move || {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .unwrap();
            let seen = runtime.block_on(async move {
                let store = SqliteStorage::open(&first_path).await.unwrap();
                let served =
                    Served::start(durable_harness(store, first_runs), ServeConfig::new()).await;
                served.post("/v1/threads", json!({"thread_id": "t"})).await;
                let mut events = served.events("t", "?replay=none", None).await;
                let (status, _) = served
                    .post("/v1/threads/t/messages", json!({"input": "send it"}))
                    .await;
                assert_eq!(status, 202);
                let asked = events.until(":approval_requested").await;
                std::mem::forget(served);
                asked
            });
            drop(runtime);
            seen
        }),
    )
    .await
    .unwrap();
    assert_eq!(
        runs.load(Ordering::SeqCst),
        0,
        "nothing ran before the decision"
    );

    let store = SqliteStorage::open(&path).await.unwrap();
    let served = Served::start(durable_harness(store, runs.clone()), ServeConfig::new()).await;
    // The thread is known from the store, and so is its pending approval.
    let (status, body) = served.get("/v1/threads/t/approvals").await;
    assert_eq!(status, 200, "{body}");
    let pending = body["approvals"].as_array().unwrap();
    assert_eq!(pending.len(), 1, "{body}");
    assert_eq!(pending[0]["tool"], "echo");
    let approval_id = pending[0]["approval_id"].as_str().unwrap().to_owned();

    // A client that read only the first events of the crashed run reconnects with the last id it
    // read: the rest of that run comes from the log, as it was streamed, then what follows.
    let cut = 2;
    let mut events = served.events("t", "", seen[cut].id).await;
    let mut missed = Vec::new();
    for _ in cut + 1..seen.len() {
        missed.push(events.next().await.unwrap());
    }
    let ids = |events: &[crate::support::SseEvent]| {
        events.iter().map(|event| event.id).collect::<Vec<_>>()
    };
    assert_eq!(ids(&missed), ids(&seen[cut + 1..]));
    assert_eq!(
        missed.iter().map(|event| &event.data).collect::<Vec<_>>(),
        seen[cut + 1..]
            .iter()
            .map(|event| &event.data)
            .collect::<Vec<_>>()
    );
    let (status, body) = served
        .post(
            &format!("/v1/threads/t/approvals/{approval_id}"),
            json!({"decision": "approve"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    // Once the crashed server's lease expired, the thread was read back and its turn finished,
    // numbered on from where the crashed server stopped.
    let rest = events.until(":turn_completed").await;
    let last_seen = seen.last().unwrap().id.unwrap();
    assert_eq!(rest[0].id, Some(last_seen + 1), "{rest:#?}");
    assert_eq!(rest[0].kind(), "agent:round_restarted", "{rest:#?}");
    assert!(
        rest.windows(2)
            .all(|pair| pair[1].id.unwrap() == pair[0].id.unwrap() + 1),
        "{rest:#?}"
    );
    assert!(
        rest.iter()
            .any(|event| event.kind() == "agent:tool_call_completed"),
        "{rest:#?}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1, "the approved call ran once");
    let (_, items) = served.get("/v1/threads/t/items").await;
    let last = items["items"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["content"][0]["text"], "done: sent", "{items}");
}
