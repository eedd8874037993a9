//! The one run protocol (connection check, channel run, layer init once per context, execution,
//! outcome) on each run path: `Context::run` on a bare `Runtime`, a session turn, and
//! `parse_and_run_workflow`, plus a nested `ctx.run` inside each.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use noetic_core::workflow::WorkflowRegistry;
use noetic_core::{
    AgentHarness, ConnectionSpec, Context, ContextOptions, ExecuteOptions, Outcome, Runtime, Scope,
    Step, run_code,
};
use serde_json::json;

use crate::support::{Probe, entries, hook_log, layer};

/// A step that runs `inner` on its own context with `ctx.run` (a nested run), then adds one.
fn nesting(inner: Step<u32, u32>) -> Step<u32, u32> {
    run_code("outer", move |n: u32, ctx: Context| {
        let inner = inner.clone();
        async move { ctx.run(&inner, n).await.map(|n| n + 1) }
    })
    .build()
}

fn counting(runs: &Arc<AtomicUsize>) -> Step<u32, u32> {
    let runs = runs.clone();
    run_code("count", move |n: u32, _: Context| {
        let runs = runs.clone();
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok::<_, Infallible>(n)
        }
    })
    .build()
}

fn needing_db_insert(runs: &Arc<AtomicUsize>) -> Step<u32, u32> {
    let runs = runs.clone();
    run_code("store", move |n: u32, _: Context| {
        let runs = runs.clone();
        async move {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok::<_, Infallible>(n)
        }
    })
    .requires("db", "insert")
    .build()
}

/// The error of a `run_code` step (`step_id`) whose nested run was refused for `db.insert`: the step
/// fails (`STEP_FAILED`) with the refusal as its cause.
fn assert_is_nested_unsatisfied(error: &noetic_core::Error, step_id: &str) {
    assert_eq!(error.code(), "STEP_FAILED", "{error:?}");
    let debug = format!("{error:?}");
    assert!(
        debug.contains(&format!("step_id: \"{step_id}\""))
            && debug.contains("ConnectionUnsatisfied { connection: \"db\", operation: \"insert\""),
        "{debug}"
    );
}

#[tokio::test]
async fn a_context_built_from_a_runtime_without_a_harness_runs_a_step() {
    let log = hook_log();
    let (probe, probe_layer) = layer(Probe::new("probe", 100, &log));
    let runtime = Runtime::builder("bare")
        .params(7_u32)
        .context_layers([probe_layer])
        .build();
    let step = run_code("scale", |n: u32, ctx: Context| async move {
        let factor = *ctx.runtime().params::<u32>().unwrap();
        Ok::<_, Infallible>(n * factor)
    })
    .build();

    let ctx = Context::new(runtime.clone(), ContextOptions::new());
    assert_eq!(ctx.run(&step, 6).await.unwrap(), 42);
    assert_eq!(ctx.runtime().name(), "bare");
    ctx.close().await;

    // `create_context` is the same thing.
    let other = runtime.create_context(ContextOptions::new());
    assert_eq!(other.run(&step, 1).await.unwrap(), 7);
    other.close().await;

    assert_eq!(
        entries(&log, &["init", "on_complete"]),
        [
            "probe:init@0",
            "probe:on_complete@0",
            "probe:init@0",
            "probe:on_complete@0"
        ]
    );
    assert_eq!(
        *probe.outcomes.lock().unwrap(),
        [Outcome::Success, Outcome::Success]
    );
}

#[tokio::test]
async fn context_run_initializes_layers_once_across_nested_and_repeated_runs() {
    let log = hook_log();
    let (_, probe_layer) = layer(Probe::new("probe", 100, &log));
    let runtime = Runtime::builder("runs")
        .context_layers([probe_layer])
        .build();
    let runs = Arc::new(AtomicUsize::new(0));
    let ctx = runtime.create_context(ContextOptions::new());

    assert_eq!(ctx.run(&nesting(counting(&runs)), 1).await.unwrap(), 2);
    assert_eq!(ctx.run(&counting(&runs), 1).await.unwrap(), 1);
    ctx.close().await;

    assert_eq!(runs.load(Ordering::SeqCst), 2);
    assert_eq!(entries(&log, &["init"]), ["probe:init@0"]);
}

#[tokio::test]
async fn a_session_turn_initializes_layers_once_per_turn_across_nested_runs() {
    let log = hook_log();
    let (_, probe_layer) = layer(Probe::new("probe", 100, &log));
    let runs = Arc::new(AtomicUsize::new(0));
    let graph = run_code("turn", {
        let inner = nesting(counting(&runs));
        move |text: String, ctx: Context| {
            let inner = inner.clone();
            async move {
                let n = ctx.run(&inner, 1).await?;
                Ok::<_, noetic_core::Error>(format!("{text}:{n}"))
            }
        }
    })
    .build();
    let harness = AgentHarness::builder("turns")
        .context_layers([probe_layer])
        .agent_graph(graph)
        .build()
        .unwrap();

    for message in ["a", "b"] {
        harness
            .execute(message, ExecuteOptions::default())
            .await
            .unwrap();
        let response = harness.agent_response(Scope::default()).await.unwrap();
        assert_eq!(response.text, format!("{message}:2"));
    }

    assert_eq!(runs.load(Ordering::SeqCst), 2);
    // One context per turn, each initialized once and closed when its turn ended.
    assert_eq!(
        entries(&log, &["init", "on_complete"]),
        [
            "probe:init@0",
            "probe:on_complete@0",
            "probe:init@0",
            "probe:on_complete@0"
        ]
    );
}

#[tokio::test]
async fn a_workflow_run_initializes_layers_once_across_nested_runs() {
    let log = hook_log();
    let (_, probe_layer) = layer(Probe::new("probe", 100, &log));
    let runs = Arc::new(AtomicUsize::new(0));
    let inner = nesting(counting(&runs));
    let registry = WorkflowRegistry::new().code("nest", move |n: u32, ctx: Context| {
        let inner = inner.clone();
        async move { ctx.run(&inner, n).await }
    });
    let harness = AgentHarness::builder("flows")
        .context_layers([probe_layer])
        .workflow_registry(registry)
        .build()
        .unwrap();
    let document = r#"{ "version": 1, "root": {
        "kind": "runCode", "id": "nest", "execute": "nest" } }"#;
    let ctx = harness.create_context(ContextOptions::new());

    let first = harness.parse_and_run_workflow(document, json!(1), &ctx);
    assert_eq!(first.await.unwrap(), json!(2));
    let second = harness.parse_and_run_workflow(document, json!(5), &ctx);
    assert_eq!(second.await.unwrap(), json!(6));
    harness.close_context(&ctx).await;

    assert_eq!(runs.load(Ordering::SeqCst), 2);
    assert_eq!(entries(&log, &["init"]), ["probe:init@0"]);
}

#[tokio::test]
async fn context_run_on_a_bare_runtime_checks_connections_before_anything_runs() {
    let runs = Arc::new(AtomicUsize::new(0));
    let runtime = Runtime::builder("needs")
        .connection(ConnectionSpec::new("db", ["query"]))
        .build();
    let ctx = runtime.create_context(ContextOptions::new());

    let error = ctx.run(&needing_db_insert(&runs), 1).await.unwrap_err();

    assert_eq!(error.code(), "CONNECTION_UNSATISFIED");
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert_eq!(ctx.step_count(), 0);
}

#[tokio::test]
async fn a_nested_run_checks_its_own_steps_connections() {
    let runs = Arc::new(AtomicUsize::new(0));
    let outer_runs = Arc::new(AtomicUsize::new(0));
    let outer = nesting(needing_db_insert(&runs));
    let runtime = Runtime::builder("nested-needs").build();
    let ctx = runtime.create_context(ContextOptions::new());

    // The outer tree declares no needs, so it starts; its nested run is refused before its step runs.
    let error = ctx
        .run(
            &noetic_core::sequence("root")
                .step(counting(&outer_runs))
                .step(outer)
                .build(),
            1,
        )
        .await
        .unwrap_err();

    assert_is_nested_unsatisfied(&error, "outer");
    assert_eq!(outer_runs.load(Ordering::SeqCst), 1);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_workflow_code_step_running_a_needy_step_is_checked() {
    let runs = Arc::new(AtomicUsize::new(0));
    let inner = needing_db_insert(&runs);
    let registry = WorkflowRegistry::new().code("store", move |n: u32, ctx: Context| {
        let inner = inner.clone();
        async move { ctx.run(&inner, n).await }
    });
    let harness = AgentHarness::builder("flow-needs")
        .connection(ConnectionSpec::new("db", ["query"]))
        .workflow_registry(registry)
        .build()
        .unwrap();
    let document = r#"{ "version": 1, "root": {
        "kind": "runCode", "id": "store", "execute": "store" } }"#;
    let ctx = harness.create_context(ContextOptions::new());

    let error = harness
        .parse_and_run_workflow(document, json!(1), &ctx)
        .await
        .unwrap_err();

    assert_is_nested_unsatisfied(&error, "store");
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}
