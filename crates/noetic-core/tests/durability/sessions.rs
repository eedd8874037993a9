//! Durable sessions in one process: a "crash" is a tokio runtime dropped with the harness's tasks in
//! it (nothing more is written); a second harness on the same store carries on. The same scenarios
//! with real processes and SIGKILL are in `noetic-storage-sqlite/tests/durable_sessions.rs`.

use std::sync::Arc;
use std::time::Duration;

use noetic_core::{
    AgentHarness, DeliveryMode, Error, ExecuteOptions, Item, KvDurableStore, Scope, call_model,
};
use noetic_test_support::{ScriptedModel, ScriptedResponse};
use serde_json::json;
use tokio::sync::mpsc;

use crate::support::{Counts, echo_tool};

const THREAD: &str = "t";

fn harness(
    store: &Arc<KvDurableStore>,
    model: &ScriptedModel,
    counts: &Arc<Counts>,
) -> AgentHarness {
    harness_with(store, model, echo_tool(counts.clone(), None))
}

fn harness_with(
    store: &Arc<KvDurableStore>,
    model: &ScriptedModel,
    tool: noetic_core::Tool,
) -> AgentHarness {
    AgentHarness::builder("sessions")
        .provider("scripted", model.clone())
        .agent_graph(
            call_model("chat")
                .model("scripted-model")
                .instructions("Chat.")
                .tool(tool),
        )
        .durable(store.clone())
        .lease_ttl(Duration::from_millis(200))
        .build()
        .unwrap()
}

fn on_thread() -> ExecuteOptions {
    ExecuteOptions::new().thread_id(THREAD)
}

/// Runs `crashing` on its own runtime, then drops the runtime: every task of the harness it built
/// stops where it is, as in a crash (its leases stay until they expire).
pub(crate) fn crash_after<F, Fut>(crashing: F)
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()>,
{
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(crashing());
        drop(runtime);
    })
    .join()
    .unwrap();
}

/// Waits until the wall clock (which leases use) has passed `expires_at_ms`.
async fn sleep_past(expires_at_ms: u64) {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    tokio::time::sleep(Duration::from_millis(expires_at_ms.saturating_sub(now) + 1)).await;
}

/// Reads the thread back once the crashed holder's lease has expired (the error says when).
async fn load_after_the_lease(harness: &AgentHarness) {
    for _ in 0..20 {
        match harness.load_thread(THREAD).await {
            Ok(()) => return,
            Err(Error::LeaseHeld { expires_at_ms, .. }) => sleep_past(expires_at_ms).await,
            Err(error) => panic!("{error}"),
        }
    }
    panic!("the lease never expired");
}

fn texts(items: &[Item]) -> Vec<String> {
    items
        .iter()
        .filter_map(|item| item.text().map(|text| format!("{:?}: {text}", item.role())))
        .collect()
}

#[tokio::test]
async fn a_queued_message_and_the_turn_in_flight_survive_a_crash_and_both_run_after_it() {
    let store = Arc::new(KvDurableStore::in_memory());
    let counts = Arc::new(Counts::default());
    {
        let (store, counts) = (store.clone(), counts.clone());
        crash_after(move || async move {
            let (stalled, mut stall) = mpsc::unbounded_channel();
            let model = ScriptedModel::responding(move |_| {
                let _ = stalled.send(());
                ScriptedResponse::stall_after(Vec::new())
            });
            let first = harness(&store, &model, &counts);
            first.execute("first", on_thread()).await.unwrap();
            stall.recv().await.unwrap();
            // The first turn's request is in flight; this one waits for the next turn.
            first.execute("second", on_thread()).await.unwrap();
        });
    }
    let model = ScriptedModel::responding(|request| {
        ScriptedResponse::text(&format!("re: {}", request.user_texts().join(" + ")))
    });
    let second = harness(&store, &model, &counts);
    // `recover` skips a thread whose lease is still live; once it has expired the thread is read
    // back and its work started.
    load_after_the_lease(&second).await;
    let response = second.agent_response(Scope::thread(THREAD)).await.unwrap();
    assert_eq!(response.text, "re: first + second");
    assert_eq!(
        texts(&second.session_history(Scope::thread(THREAD))),
        [
            "Some(User): first",
            "Some(Assistant): re: first",
            "Some(User): second",
            "Some(Assistant): re: first + second",
        ]
    );
    assert_eq!(model.request_count(), 2, "one request per turn");
}

#[tokio::test]
async fn a_steer_accepted_mid_turn_survives_a_crash_and_the_resumed_turn_applies_it() {
    let store = Arc::new(KvDurableStore::in_memory());
    {
        let store = store.clone();
        crash_after(move || async move {
            let counts = Arc::new(Counts::default());
            let (started, mut running) = mpsc::unbounded_channel();
            let model = ScriptedModel::with_responses([ScriptedResponse::tool_call(
                "call_1",
                "echo",
                json!({"text": "looked up"}),
            )]);
            let first = harness_with(&store, &model, echo_tool(counts, Some(("call_1", started))));
            first.execute("look it up", on_thread()).await.unwrap();
            // The round's response is recorded and its tool call in flight: a steer now waits for
            // the next round.
            running.recv().await.unwrap();
            first
                .execute(
                    "and be brief",
                    on_thread().delivery_mode(DeliveryMode::BetweenRounds),
                )
                .await
                .unwrap();
        });
    }
    let counts = Arc::new(Counts::default());
    let model = ScriptedModel::with_responses([ScriptedResponse::text("brief: looked up")]);
    let second = harness(&store, &model, &counts);
    load_after_the_lease(&second).await;
    let response = second.agent_response(Scope::thread(THREAD)).await.unwrap();
    assert_eq!(response.text, "brief: looked up");
    // The recorded round was not asked again: the only request is the next round, with the tool's
    // output and the steer.
    let requests = model.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].user_texts(), ["look it up", "and be brief"]);
    assert_eq!(requests[0].tool_outputs(), ["looked up"]);
    assert_eq!(
        counts.call_runs().get("call_1"),
        Some(&1),
        "the call in flight ran again"
    );
}

#[tokio::test]
async fn an_idle_durable_session_is_evicted_and_read_back_with_its_history_on_next_use() {
    let store = Arc::new(KvDurableStore::in_memory());
    let counts = Arc::new(Counts::default());
    let model = ScriptedModel::responding(|request| {
        ScriptedResponse::text(&format!("turn {}", request.user_texts().len()))
    });
    let harness = harness(&store, &model, &counts);
    harness.execute("one", on_thread()).await.unwrap();
    harness.agent_response(Scope::thread(THREAD)).await.unwrap();
    // The session keeper is not work `wait_idle` waits for.
    harness.wait_idle().await;
    assert_eq!(harness.session_count(), 1);
    assert_eq!(harness.evict_idle_sessions(Duration::ZERO).await, 1);
    assert_eq!(harness.session_count(), 0);
    assert!(harness.session_history(Scope::thread(THREAD)).is_empty());
    // Its lease was released: another harness could take the thread now.
    let lease = noetic_core::adapter::DurableStore::lease(&*store, "thread/t")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(lease.expires_at_ms, 0);

    harness.execute("two", on_thread()).await.unwrap();
    let response = harness.agent_response(Scope::thread(THREAD)).await.unwrap();
    assert_eq!(response.text, "turn 2");
    assert_eq!(
        texts(&response.items),
        [
            "Some(User): one",
            "Some(Assistant): turn 1",
            "Some(User): two",
            "Some(Assistant): turn 2",
        ]
    );
    // The turn's execution records were folded into the thread: only thread rows remain, and no
    // turn left its execution lease behind.
    let executions = harness.executions().await.unwrap();
    assert!(executions.is_empty(), "{executions:?}");
    let leases = noetic_core::StorageAdapter::list(&*store, "durable/lease/execution/")
        .await
        .unwrap();
    assert!(leases.is_empty(), "{leases:?}");
}

#[tokio::test]
async fn a_second_harness_on_a_held_thread_gets_lease_held_and_recover_skips_it() {
    let store = Arc::new(KvDurableStore::in_memory());
    let counts = Arc::new(Counts::default());
    let model = ScriptedModel::with_responses([ScriptedResponse::text("hello")]);
    let holder = harness(&store, &model, &counts);
    holder.execute("hi", on_thread()).await.unwrap();
    holder.agent_response(Scope::thread(THREAD)).await.unwrap();

    let other = harness(&store, &model, &counts);
    let error = other.execute("me too", on_thread()).await.unwrap_err();
    assert_eq!(error.code(), "LEASE_HELD", "{error}");
    assert!(error.to_string().contains("thread/t"), "{error}");
    assert_eq!(other.recover().await.unwrap(), Vec::<String>::new());
}

#[tokio::test]
async fn recover_lists_and_starts_the_threads_with_unfinished_work() {
    let store = Arc::new(KvDurableStore::in_memory());
    let counts = Arc::new(Counts::default());
    {
        let (store, counts) = (store.clone(), counts.clone());
        crash_after(move || async move {
            let model = ScriptedModel::responding(|_| ScriptedResponse::stall_after(Vec::new()));
            let first = harness(&store, &model, &counts);
            first.execute("pending", on_thread()).await.unwrap();
        });
    }
    // Once the crashed holder's thread lease has expired, `recover` finds the thread and runs it.
    let lease = noetic_core::adapter::DurableStore::lease(&*store, "thread/t")
        .await
        .unwrap()
        .unwrap();
    sleep_past(lease.expires_at_ms).await;
    let model = ScriptedModel::responding(|_| ScriptedResponse::text("done"));
    let second = harness(&store, &model, &counts);
    assert_eq!(second.recover().await.unwrap(), [THREAD]);
    let response = second.agent_response(Scope::thread(THREAD)).await.unwrap();
    assert_eq!(response.text, "done");
    // Nothing is left to recover once the thread finished.
    second.evict_idle_sessions(Duration::ZERO).await;
    let third = harness(&store, &model, &counts);
    assert_eq!(third.recover().await.unwrap(), Vec::<String>::new());
}

#[tokio::test]
async fn a_corrupt_or_newer_thread_record_is_named_and_other_threads_still_run() {
    use noetic_core::adapter::{Commit, DurableStore};
    let store = Arc::new(KvDurableStore::in_memory());
    let counts = Arc::new(Counts::default());
    let model = ScriptedModel::responding(|_| ScriptedResponse::text("fine"));
    store
        .commit(Commit::new().put("thread/t/record", b"{not json".to_vec()))
        .await
        .unwrap();
    store
        .commit(Commit::new().put(
            "thread/newer/record",
            json!({"schema_version": 99}).to_string(),
        ))
        .await
        .unwrap();
    let harness = harness(&store, &model, &counts);
    let error = harness.execute("hi", on_thread()).await.unwrap_err();
    assert_eq!(error.code(), "CHECKPOINT_CORRUPT", "{error}");
    assert!(error.to_string().contains("thread/t/record"), "{error}");
    let error = harness
        .execute("hi", ExecuteOptions::new().thread_id("newer"))
        .await
        .unwrap_err();
    assert_eq!(error.code(), "CHECKPOINT_SCHEMA_MISMATCH", "{error}");
    // Nothing was recorded for either, and another thread is unaffected.
    assert_eq!(
        store.record("thread/t/record").await.unwrap().unwrap(),
        b"{not json"
    );
    harness
        .execute("hello", ExecuteOptions::new().thread_id("other"))
        .await
        .unwrap();
    let response = harness
        .agent_response(Scope::thread("other"))
        .await
        .unwrap();
    assert_eq!(response.text, "fine");
}

#[tokio::test]
async fn a_thread_whose_last_turn_failed_reads_back_with_that_error_not_an_earlier_answer() {
    let store = Arc::new(KvDurableStore::in_memory());
    let counts = Arc::new(Counts::default());
    let model = ScriptedModel::with_responses([
        ScriptedResponse::text("first answer"),
        ScriptedResponse::provider_error(Some(400), "bad request"),
    ]);
    let harness = harness(&store, &model, &counts);
    harness.execute("one", on_thread()).await.unwrap();
    assert_eq!(
        harness
            .agent_response(Scope::thread(THREAD))
            .await
            .unwrap()
            .text,
        "first answer"
    );
    harness.execute("two", on_thread()).await.unwrap();
    let live = harness
        .agent_response(Scope::thread(THREAD))
        .await
        .unwrap_err();
    assert_eq!(live.code(), "PROVIDER_ERROR");
    harness.wait_idle().await;
    assert_eq!(harness.evict_idle_sessions(Duration::ZERO).await, 1);

    // Read back (as after a restart): the failure answers at once, with its code and message.
    harness.load_thread(THREAD).await.unwrap();
    let read_back = harness
        .agent_response(Scope::thread(THREAD))
        .await
        .unwrap_err();
    assert_eq!(read_back.code(), "PROVIDER_ERROR");
    assert!(read_back.to_string().contains("bad request"), "{read_back}");
    assert!(
        matches!(read_back, Error::TurnFailed { .. }),
        "{read_back:?}"
    );
}

#[tokio::test]
async fn a_call_awaiting_approval_is_listed_after_a_crash_and_runs_once_when_approved_there() {
    let store = Arc::new(KvDurableStore::in_memory());
    let counts = Arc::new(Counts::default());
    // Calls `echo` once, answers once it has the output.
    let model = || {
        ScriptedModel::responding(|request| {
            if request.tool_outputs().is_empty() {
                ScriptedResponse::tool_call("c1", "echo", json!({"text": "sent"}))
            } else {
                ScriptedResponse::text(&format!("done: {}", request.tool_outputs().join(",")))
            }
        })
    };
    let gated = |counts: &Arc<Counts>| echo_tool(counts.clone(), None).needs_approval(true);
    {
        let (store, counts, first_model) = (store.clone(), counts.clone(), model());
        crash_after(move || async move {
            let first = harness_with(&store, &first_model, gated(&counts));
            let mut events = first.events(Scope::thread(THREAD));
            first.execute("send it", on_thread()).await.unwrap();
            while let Some(event) = futures_util::StreamExt::next(&mut events).await {
                if matches!(
                    &*event,
                    noetic_core::StreamEvent::Framework(
                        noetic_core::FrameworkEvent::ApprovalRequested { .. }
                    )
                ) {
                    break;
                }
            }
            // Crash while the call waits for a person.
        });
    }
    assert!(
        counts.call_runs().is_empty(),
        "nothing ran before the decision"
    );

    let second = harness_with(&store, &model(), gated(&counts));
    // Listed from the store, before the thread is read back.
    let pending = second
        .pending_approvals(Scope::thread(THREAD))
        .await
        .unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].tool, "echo");
    assert_eq!(pending[0].arguments, json!({"text": "sent"}));
    let id = pending[0].approval_id.clone();
    // The decision is kept with the request (the crashed holder's lease may still be live).
    second.approve(THREAD, &id).await.unwrap();
    assert_eq!(
        second.approve(THREAD, &id).await.unwrap_err().code(),
        "APPROVAL_NOT_FOUND",
        "single-use across the restart too"
    );
    load_after_the_lease(&second).await;
    let response = second.agent_response(Scope::thread(THREAD)).await.unwrap();

    assert_eq!(response.text, "done: sent");
    assert_eq!(counts.call_runs().get("c1"), Some(&1), "ran exactly once");
    // Answered: the request is gone from the store.
    assert!(
        second
            .pending_approvals(Scope::thread(THREAD))
            .await
            .unwrap()
            .is_empty()
    );
}
