//! The step ledger: replay by path, a changed step running fresh, retention.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use noetic_core::{
    AgentHarness, Context, ContextOptions, FrameworkEvent, KvDurableStore, LedgerRetention,
    RestoreOptions, Step, StreamEvent, loop_step, run_code, sequence, until,
};

/// A counting step `id` that adds `add` and, when `fail_at` equals its run count, fails once.
fn counted(id: &'static str, add: i64, runs: Arc<AtomicUsize>) -> Step<i64, i64> {
    run_code(id, move |n: i64, _: Context| {
        let runs = runs.clone();
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok::<_, std::convert::Infallible>(n + add)
        }
    })
    .build()
}

fn durable(store: &Arc<KvDurableStore>, graph: Step<i64, i64>) -> AgentHarness {
    AgentHarness::builder("ledger")
        .agent_graph(graph)
        .durable(store.clone())
        .build()
        .unwrap()
}

/// Runs `graph` with the step `fail` failing (it returns an error on the first run), so the execution
/// stops after the steps before it; returns the id.
async fn run_failing(store: &Arc<KvDurableStore>, graph: Step<i64, i64>) -> String {
    let harness = durable(store, graph);
    let ctx = harness.create_context(ContextOptions::new());
    let graph = harness.agent_graph::<i64, i64>().unwrap();
    let error = harness.run(&graph, 1, &ctx).await.unwrap_err();
    assert_eq!(error.code(), "STEP_FAILED");
    ctx.close().await;
    ctx.id().to_owned()
}

fn failing_once(id: &'static str, failed: Arc<AtomicUsize>) -> Step<i64, i64> {
    run_code(id, move |n: i64, _: Context| {
        let failed = failed.clone();
        async move {
            if failed.fetch_add(1, Ordering::SeqCst) == 0 {
                return Err(std::io::Error::other("the first attempt fails"));
            }
            Ok(n)
        }
    })
    .build()
}

#[tokio::test]
async fn completed_steps_replay_with_step_replayed_and_loop_iterations_have_their_own_paths() {
    let store = Arc::new(KvDurableStore::in_memory());
    let (a, body, fail) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
    );
    let graph = || {
        sequence("flow")
            .step(counted("a", 1, a.clone()))
            .step(
                loop_step("twice")
                    .step(counted("body", 10, body.clone()))
                    .until(until::max_steps(2))
                    .build(),
            )
            .step(failing_once("fail", fail.clone()))
            .build()
    };
    let id = run_failing(&store, graph()).await;
    assert_eq!(
        (a.load(Ordering::SeqCst), body.load(Ordering::SeqCst)),
        (1, 2)
    );

    let harness = durable(&store, graph());
    let replayed = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = replayed.clone();
    let ctx = harness
        .restore(
            &id,
            RestoreOptions::new().event_sink(Arc::new(move |event: StreamEvent| {
                if let StreamEvent::Framework(FrameworkEvent::StepReplayed { path, .. }) = event {
                    sink.lock().unwrap().push(path);
                }
            })),
        )
        .await
        .unwrap();
    let graph = harness.agent_graph::<i64, i64>().unwrap();
    assert_eq!(harness.resume_with(&graph, &ctx).await.unwrap(), 22);
    // `a` and the whole loop were recorded: neither ran again; `fail` ran again and passed.
    assert_eq!(
        (a.load(Ordering::SeqCst), body.load(Ordering::SeqCst)),
        (1, 2)
    );
    assert_eq!(fail.load(Ordering::SeqCst), 2);
    assert_eq!(
        *replayed.lock().unwrap(),
        vec!["/flow#0/a#0".to_owned(), "/flow#0/twice#0".to_owned()]
    );
}

#[tokio::test]
async fn a_changed_step_at_a_recorded_path_runs_fresh() {
    let store = Arc::new(KvDurableStore::in_memory());
    let (a, b, fail) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
        Arc::new(AtomicUsize::new(0)),
    );
    let first = sequence("flow")
        .step(counted("a", 1, a.clone()))
        .step(failing_once("fail", fail.clone()))
        .build();
    let id = run_failing(&store, first).await;
    // The tree changed: another step id where `a` was.
    let changed = sequence("flow")
        .step(counted("b", 100, b.clone()))
        .step(failing_once("fail", fail.clone()))
        .build();
    let harness = durable(&store, changed);
    let ctx = harness.restore(&id, RestoreOptions::new()).await.unwrap();
    let graph = harness.agent_graph::<i64, i64>().unwrap();
    assert_eq!(harness.resume_with(&graph, &ctx).await.unwrap(), 101);
    assert_eq!(a.load(Ordering::SeqCst), 1);
    assert_eq!(b.load(Ordering::SeqCst), 1, "the changed step ran");
}

#[tokio::test]
async fn an_output_over_max_entry_bytes_is_not_recorded_and_its_step_runs_again() {
    let store = Arc::new(KvDurableStore::in_memory());
    let (big, fail) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let graph = || {
        let big = big.clone();
        sequence("flow")
            .step(
                run_code("big", move |_: i64, _: Context| {
                    let big = big.clone();
                    async move {
                        big.fetch_add(1, Ordering::SeqCst);
                        Ok::<_, std::convert::Infallible>(1_000_000_i64)
                    }
                })
                .build(),
            )
            .step(failing_once("fail", fail.clone()))
            .build()
    };
    let harness = AgentHarness::builder("ledger")
        .agent_graph(graph())
        .durable(store.clone())
        .ledger_retention(LedgerRetention::new(4, 1000).unwrap())
        .build()
        .unwrap();
    let ctx = harness.create_context(ContextOptions::new());
    let graph_step = harness.agent_graph::<i64, i64>().unwrap();
    assert!(harness.run(&graph_step, 1, &ctx).await.is_err());
    ctx.close().await;
    // `1000000` is 7 bytes of JSON, over the 4-byte cap: not recorded, so it runs again.
    let resumed: i64 = harness.resume(ctx.id()).await.unwrap();
    assert_eq!(resumed, 1_000_000);
    assert_eq!(big.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn the_ledger_keeps_at_most_max_entries_rows() {
    let store = Arc::new(KvDurableStore::in_memory());
    let runs = Arc::new(AtomicUsize::new(0));
    let graph = loop_step("many")
        .step(counted("step", 1, runs.clone()))
        .until(until::max_steps(50))
        .max_iterations(50)
        .build();
    let harness = AgentHarness::builder("ledger")
        .agent_graph(graph)
        .durable(store.clone())
        .ledger_retention(LedgerRetention::new(1024, 10).unwrap())
        .build()
        .unwrap();
    let ctx = harness.create_context(ContextOptions::new());
    let graph = harness.agent_graph::<i64, i64>().unwrap();
    assert_eq!(harness.run(&graph, 0, &ctx).await.unwrap(), 50);
    let rows = noetic_core::adapter::DurableStore::read_log(
        &*store,
        &format!("exec/{}/ledger", ctx.id()),
        0,
    )
    .await
    .unwrap();
    assert_eq!(rows.len(), 10, "trimmed to max_entries");
    assert_eq!(rows.last().unwrap().seq, 50, "the newest rows are kept");
}
