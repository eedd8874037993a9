//! Hook order and lifecycle: slot order, reverse disposal, children first, init once per context.

use std::convert::Infallible;

use noetic_core::{
    AgentHarness, Context, ContextOptions, Error, ExecuteOptions, Outcome, Scope, call_model,
    run_code, sequence, spawn, with_context,
};
use noetic_test_support::{ScriptedModel, ScriptedResponse, harness_with};

use crate::support::{Probe, entries, hook_log, layer};

fn noop() -> noetic_core::Step<u32, u32> {
    run_code("noop", |n: u32, _: Context| async move {
        Ok::<_, Infallible>(n)
    })
    .build()
}

#[tokio::test]
async fn hooks_run_in_slot_order_and_complete_in_reverse() {
    let log = hook_log();
    let (_, late) = layer(Probe::new("late", 200, &log));
    let (_, early) = layer(Probe::new("early", 50, &log));
    let (_, middle) = layer(Probe::new("middle", 100, &log));
    let harness = AgentHarness::builder("order")
        .context_layers([late, early, middle])
        .build()
        .unwrap();
    let ctx = harness.create_context(ContextOptions::new());
    harness.run(&noop(), 1, &ctx).await.unwrap();

    assert_eq!(
        entries(&log, &["init", "on_complete", "dispose"]),
        [
            "early:init@0",
            "middle:init@0",
            "late:init@0",
            "late:on_complete@0",
            "middle:on_complete@0",
            "early:on_complete@0",
            "late:dispose@0",
            "middle:dispose@0",
            "early:dispose@0",
        ]
    );
}

#[tokio::test]
async fn nested_runs_init_and_complete_once() {
    let log = hook_log();
    let (probe, root_layer) = layer(Probe::new("root", 100, &log));
    let harness = AgentHarness::builder("nested")
        .context_layers([root_layer])
        .build()
        .unwrap();
    let nested = run_code("outer", |n: u32, ctx: Context| async move {
        let inner = run_code("inner", |n: u32, _: Context| async move {
            Ok::<_, Infallible>(n + 1)
        })
        .build();
        ctx.harness().run(&inner, n, &ctx).await
    })
    .build();
    let ctx = harness.create_context(ContextOptions::new());
    assert_eq!(harness.run(&nested, 1, &ctx).await.unwrap(), 2);

    assert_eq!(
        entries(&log, &["init", "on_complete", "dispose"]),
        ["root:init@0", "root:on_complete@0", "root:dispose@0"]
    );
    assert_eq!(*probe.outcomes.lock().unwrap(), [Outcome::Success]);

    // A second outermost run on the same context is a new execution: init again.
    harness.run(&noop(), 1, &ctx).await.unwrap();
    assert_eq!(entries(&log, &["init"]).len(), 2);
}

#[tokio::test]
async fn spawned_layers_init_on_the_child_and_complete_first() {
    let log = hook_log();
    let (_, parent_layer) = layer(Probe::new("parent", 10, &log));
    let (_, child_layer) = layer(Probe::new("child", 500, &log));
    let harness = AgentHarness::builder("spawn")
        .context_layers([parent_layer])
        .build()
        .unwrap();
    let step = spawn("child", noop()).layers(vec![child_layer]).build();
    let ctx = harness.create_context(ContextOptions::new());
    harness.run(&step, 1, &ctx).await.unwrap();

    assert_eq!(
        entries(
            &log,
            &["init", "on_spawn", "on_return", "on_complete", "dispose"]
        ),
        [
            "parent:init@0",
            "child:init@1",
            "parent:on_spawn@0",
            "parent:on_return@0",
            "child:on_complete@1",
            "child:dispose@1",
            "parent:on_complete@0",
            "parent:dispose@0",
        ]
    );
}

#[tokio::test]
async fn with_context_layers_are_initialized_once_on_the_context() {
    let log = hook_log();
    let (_, extra) = layer(Probe::new("extra", 100, &log));
    let harness = AgentHarness::builder("with").build().unwrap();
    let twice = sequence("twice")
        .step(with_context("first", noop(), vec![extra.clone()]))
        .step(with_context("second", noop(), vec![extra]))
        .build();
    let ctx = harness.create_context(ContextOptions::new());
    harness.run(&twice, 1, &ctx).await.unwrap();

    assert_eq!(
        entries(&log, &["init", "on_complete", "dispose"]),
        ["extra:init@0", "extra:on_complete@0", "extra:dispose@0"]
    );
}

#[tokio::test]
async fn each_session_turn_inits_and_disposes_its_context() {
    let log = hook_log();
    let (_, probe_layer) = layer(Probe::new("turns", 100, &log));
    let model = ScriptedModel::with_responses([
        ScriptedResponse::text("one"),
        ScriptedResponse::text("two"),
    ]);
    let harness = harness_with("turns", &model)
        .context_layers([probe_layer])
        .agent_graph(call_model("llm").model("m"))
        .build()
        .unwrap();
    for text in ["first", "second"] {
        harness
            .execute(text, ExecuteOptions::default())
            .await
            .unwrap();
        harness.agent_response(Scope::default()).await.unwrap();
    }
    assert_eq!(
        entries(&log, &["init", "on_complete", "dispose"]),
        [
            "turns:init@0",
            "turns:on_complete@0",
            "turns:dispose@0",
            "turns:init@0",
            "turns:on_complete@0",
            "turns:dispose@0",
        ]
    );
}

#[tokio::test]
async fn on_complete_reports_failure_and_abort() {
    let log = hook_log();
    let (probe, probe_layer) = layer(Probe::new("outcome", 100, &log));
    let harness = AgentHarness::builder("outcomes")
        .context_layers([probe_layer])
        .build()
        .unwrap();
    let failing = run_code("fail", |_: u32, _: Context| async move {
        Err::<u32, _>(std::io::Error::other("boom"))
    })
    .build();
    let ctx = harness.create_context(ContextOptions::new());
    assert!(harness.run(&failing, 1, &ctx).await.is_err());

    let aborting = run_code("abort", |_: u32, ctx: Context| async move {
        ctx.abort(Some("stop".to_owned()));
        ctx.check_aborted().map(|()| 0u32)
    })
    .build();
    let ctx = harness.create_context(ContextOptions::new());
    let error: Error = harness.run(&aborting, 1, &ctx).await.unwrap_err();
    assert!(error.is_cancelled() || ctx.aborted());

    assert_eq!(
        *probe.outcomes.lock().unwrap(),
        [Outcome::Failure, Outcome::Aborted]
    );
}

#[tokio::test]
async fn option_and_vec_are_layers() {
    let log = hook_log();
    let stack: Vec<Option<Probe>> = vec![
        Some(Probe::new("one", 100, &log)),
        None,
        Some(Probe::new("two", 100, &log)),
    ];
    let stack: std::sync::Arc<dyn noetic_core::ContextLayer> = std::sync::Arc::new(stack);
    assert_eq!(stack.id(), "one");
    let harness = AgentHarness::builder("stack")
        .context_layers([stack])
        .build()
        .unwrap();
    let ctx = harness.create_context(ContextOptions::new());
    harness.run(&noop(), 1, &ctx).await.unwrap();
    assert_eq!(
        entries(&log, &["init", "on_complete", "dispose"]),
        [
            "one:init@0",
            "two:init@0",
            "one:on_complete@0",
            "two:on_complete@0",
            "two:dispose@0",
            "one:dispose@0",
        ]
    );
}
