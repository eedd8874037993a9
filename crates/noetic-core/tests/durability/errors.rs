//! Bad checkpoints and leases: each a clear error with its code, and nothing else lost.

use std::sync::Arc;

use noetic_core::adapter::DurableStore;
use noetic_core::{
    AgentHarness, Commit, ContextOptions, KvDurableStore, LeaseRequest, LedgerRetention,
    RestoreOptions, run_code,
};
use tokio::sync::mpsc;

use crate::support::{Counts, INPUT, echo_tool, harness, model, run_until};

/// Two completed executions on one store; returns the harness and their ids.
async fn two_executions(store: &Arc<KvDurableStore>) -> (AgentHarness, String, String) {
    let counts = Arc::new(Counts::default());
    let harness = AgentHarness::builder("errors")
        .agent_graph(run_code("double", |n: i64, _| async move {
            Ok::<_, std::convert::Infallible>(n * 2)
        }))
        .durable(store.clone())
        .build()
        .unwrap();
    let _ = counts;
    let mut ids = Vec::new();
    for n in [1, 2] {
        let ctx = harness.create_context(ContextOptions::new());
        let graph = harness.agent_graph::<i64, i64>().unwrap();
        assert_eq!(harness.run(&graph, n, &ctx).await.unwrap(), n * 2);
        ctx.close().await;
        ids.push(ctx.id().to_owned());
    }
    let second = ids.pop().unwrap();
    (harness, ids.pop().unwrap(), second)
}

async fn restore_code(harness: &AgentHarness, id: &str) -> String {
    harness
        .restore(id, RestoreOptions::new())
        .await
        .err()
        .map(|error| {
            let message = error.to_string();
            assert!(
                message.contains(id),
                "the error names the execution: {message}"
            );
            error.code().to_owned()
        })
        .unwrap_or_else(|| "restored".to_owned())
}

#[tokio::test]
async fn an_unknown_execution_is_checkpoint_not_found_naming_it() {
    let store = Arc::new(KvDurableStore::in_memory());
    let (harness, _, _) = two_executions(&store).await;
    assert_eq!(
        restore_code(&harness, "no-such-execution").await,
        "CHECKPOINT_NOT_FOUND"
    );
    assert_eq!(
        harness
            .resume::<i64>("no-such-execution")
            .await
            .unwrap_err()
            .code(),
        "CHECKPOINT_NOT_FOUND"
    );
}

#[tokio::test]
async fn corrupt_rows_are_checkpoint_corrupt_naming_the_key_and_other_executions_still_restore() {
    let store = Arc::new(KvDurableStore::in_memory());
    let (harness, first, second) = two_executions(&store).await;
    for (key, bytes) in [
        (
            format!("exec/{first}/state"),
            &b"{\"schema_version\": 1, \"item_c"[..],
        ),
        (
            format!("exec/{first}/state"),
            &b"{\"schema_version\": 1, \"item_count\": \"many\"}"[..],
        ),
        (format!("exec/{first}/header"), &b"not json"[..]),
    ] {
        store
            .commit(Commit::new().put(key.clone(), bytes))
            .await
            .unwrap();
        let error = harness
            .restore(&first, RestoreOptions::new())
            .await
            .unwrap_err();
        assert_eq!(error.code(), "CHECKPOINT_CORRUPT", "{key}");
        assert!(error.to_string().contains(&key), "{error}");
        // The other execution is untouched.
        assert_eq!(restore_code(&harness, &second).await, "restored");
        assert_eq!(harness.resume::<i64>(&second).await.unwrap(), 4);
    }
    // A corrupt item row names its entry.
    let store = Arc::new(KvDurableStore::in_memory());
    let counts = Arc::new(Counts::default());
    let (stalled, mut stop) = mpsc::unbounded_channel();
    let model = model(0, Some(1), Some(stalled));
    let cut = harness_with_items(&store, &model, &counts);
    let id = run_until(&cut, &mut stop).await;
    let key = format!("durable/l/exec/{id}/items/{:020}", 0);
    noetic_core::StorageAdapter::set(&**store.storage(), &key, b"{\"type\": 7}".to_vec())
        .await
        .unwrap();
    let error = cut.restore(&id, RestoreOptions::new()).await.unwrap_err();
    assert_eq!(error.code(), "CHECKPOINT_CORRUPT");
    assert!(
        error.to_string().contains(&format!("exec/{id}/items#0")),
        "{error}"
    );
}

fn harness_with_items(
    store: &Arc<KvDurableStore>,
    model: &noetic_test_support::ScriptedModel,
    counts: &Arc<Counts>,
) -> AgentHarness {
    harness(
        store,
        model,
        echo_tool(counts.clone(), None),
        counts.clone(),
    )
}

#[tokio::test]
async fn an_unknown_schema_version_is_checkpoint_schema_mismatch() {
    let store = Arc::new(KvDurableStore::in_memory());
    let (harness, first, second) = two_executions(&store).await;
    let header =
        noetic_core::adapter::DurableStore::record(&*store, &format!("exec/{first}/header"))
            .await
            .unwrap()
            .unwrap();
    let mut header: serde_json::Value = serde_json::from_slice(&header).unwrap();
    header["schema_version"] = 99.into();
    store
        .commit(Commit::new().put(format!("exec/{first}/header"), header.to_string()))
        .await
        .unwrap();
    let error = harness
        .restore(&first, RestoreOptions::new())
        .await
        .unwrap_err();
    assert_eq!(error.code(), "CHECKPOINT_SCHEMA_MISMATCH");
    assert!(error.to_string().contains("99"), "{error}");
    assert_eq!(restore_code(&harness, &second).await, "restored");
}

#[test]
fn ledger_retention_caps_of_zero_are_step_ledger_retention_invalid() {
    for (bytes, entries, field) in [(0, 10, "max_entry_bytes"), (10, 0, "max_entries")] {
        let error = LedgerRetention::new(bytes, entries).unwrap_err();
        assert_eq!(error.code(), "STEP_LEDGER_RETENTION_INVALID");
        assert!(error.to_string().contains(field), "{error}");
    }
    assert!(LedgerRetention::new(1, 1).is_ok());
}

#[tokio::test]
async fn a_second_runtime_gets_lease_held_while_the_first_runs_it() {
    let store = Arc::new(KvDurableStore::in_memory());
    let counts = Arc::new(Counts::default());
    let (stalled, mut stop) = mpsc::unbounded_channel();
    let first_model = model(0, Some(1), Some(stalled));
    let first = harness(
        &store,
        &first_model,
        echo_tool(counts.clone(), None),
        counts.clone(),
    );
    let ctx = first.create_context(ContextOptions::new());
    let graph = first.agent_graph::<String, String>().unwrap();
    let run = first.run(&graph, INPUT.to_owned(), &ctx);
    tokio::pin!(run);
    tokio::select! {
        result = &mut run => panic!("ended: {result:?}"),
        _ = stop.recv() => {}
    }
    // The first harness is inside request 1, holding the lease.
    let second_model = model(1, None, None);
    let second = harness(
        &store,
        &second_model,
        echo_tool(counts.clone(), None),
        counts.clone(),
    );
    let error = second.resume::<String>(ctx.id()).await.unwrap_err();
    assert_eq!(error.code(), "LEASE_HELD");
    assert!(error.to_string().contains(ctx.id()), "{error}");
    assert!(
        second_model.requests().is_empty(),
        "the refused harness sent nothing"
    );
}

#[tokio::test]
async fn a_holder_whose_lease_was_taken_over_fails_its_next_checkpoint_with_lease_lost() {
    let store = Arc::new(KvDurableStore::in_memory());
    let counts = Arc::new(Counts::default());
    let (started, mut stop) = mpsc::unbounded_channel();
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    let released = Arc::new(tokio::sync::Mutex::new(Some(released)));
    let tool = noetic_core::Tool::new(
        "echo",
        "Echoes the text once released",
        move |args: crate::support::EchoArgs, _ctx: noetic_core::ToolContext| {
            let started = started.clone();
            let released = released.clone();
            async move {
                let _ = started.send(());
                if let Some(released) = released.lock().await.take() {
                    let _ = released.await;
                }
                Ok::<_, noetic_core::ToolError>(args.text)
            }
        },
    );
    let model = model(0, None, None);
    let holder = harness(&store, &model, tool, counts);
    let ctx = holder.create_context(ContextOptions::new());
    let graph = holder.agent_graph::<String, String>().unwrap();
    let run = holder.run(&graph, INPUT.to_owned(), &ctx);
    tokio::pin!(run);
    tokio::select! {
        result = &mut run => panic!("ended: {result:?}"),
        _ = stop.recv() => {}
    }
    // Another runtime takes the lease over as if the holder's had expired (its clock is far ahead).
    let name = format!("execution/{}", ctx.id());
    let far_future = u64::MAX / 2;
    let taken = store
        .acquire_lease(LeaseRequest::new(
            &name,
            "another-runtime",
            60_000,
            far_future,
        ))
        .await
        .unwrap();
    assert_eq!(taken.epoch, 2);
    release.send(()).unwrap();
    let error = run.await.unwrap_err();
    assert_eq!(error.code(), "LEASE_LOST");
    assert!(error.to_string().contains(&name), "{error}");
}

#[tokio::test]
async fn a_holder_whose_lease_lapsed_with_nobody_taking_it_retakes_it_and_finishes() {
    let store = Arc::new(KvDurableStore::in_memory());
    let counts = Arc::new(Counts::default());
    let (started, mut stop) = mpsc::unbounded_channel();
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    let released = Arc::new(tokio::sync::Mutex::new(Some(released)));
    let tool = noetic_core::Tool::new(
        "echo",
        "Echoes the text once released",
        move |args: crate::support::EchoArgs, _ctx: noetic_core::ToolContext| {
            let started = started.clone();
            let released = released.clone();
            async move {
                let _ = started.send(());
                if let Some(released) = released.lock().await.take() {
                    let _ = released.await;
                }
                Ok::<_, noetic_core::ToolError>(args.text)
            }
        },
    );
    let model = model(0, None, None);
    let holder = harness(&store, &model, tool, counts);
    let ctx = holder.create_context(ContextOptions::new());
    let graph = holder.agent_graph::<String, String>().unwrap();
    let run = holder.run(&graph, INPUT.to_owned(), &ctx);
    tokio::pin!(run);
    tokio::select! {
        result = &mut run => panic!("ended: {result:?}"),
        _ = stop.recv() => {}
    }
    // The lease lapses (as if the holder had been paused past its TTL) and nobody takes it.
    let name = format!("execution/{}", ctx.id());
    let lease = store.lease(&name).await.unwrap().unwrap();
    store.release_lease(&lease).await.unwrap();
    release.send(()).unwrap();
    // Nobody took it: the fence (the epoch) still holds and the run finishes and records its output.
    assert_eq!(run.await.unwrap(), "the answer is three");
    let execution = holder.execution(ctx.id()).await.unwrap().unwrap();
    assert_eq!(execution.status, noetic_core::ExecutionStatus::Completed);
}
