//! Hook order and lifecycle: slot order, reverse disposal, children first, init once per context,
//! completion when the context is closed.

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
    harness.close_context(&ctx).await;

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
        ctx.run(&inner, n).await
    })
    .build();
    let ctx = harness.create_context(ContextOptions::new());
    assert_eq!(harness.run(&nested, 1, &ctx).await.unwrap(), 2);
    // A second run on the same context does not initialize again either.
    harness.run(&noop(), 1, &ctx).await.unwrap();
    harness.close_context(&ctx).await;

    assert_eq!(
        entries(&log, &["init", "on_complete", "dispose"]),
        ["root:init@0", "root:on_complete@0", "root:dispose@0"]
    );
    assert_eq!(*probe.outcomes.lock().unwrap(), [Outcome::Success]);
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
    harness.close_context(&ctx).await;

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
    harness.close_context(&ctx).await;

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
    harness.close_context(&ctx).await;

    let aborting = run_code("abort", |_: u32, ctx: Context| async move {
        ctx.abort(Some("stop".to_owned()));
        ctx.check_aborted().map(|()| 0u32)
    })
    .build();
    let ctx = harness.create_context(ContextOptions::new());
    let error: Error = harness.run(&aborting, 1, &ctx).await.unwrap_err();
    assert!(error.is_cancelled() || ctx.aborted());
    harness.close_context(&ctx).await;

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
    harness.close_context(&ctx).await;
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

#[tokio::test]
async fn repeated_runs_on_one_context_init_once_and_complete_when_it_is_closed() {
    let log = hook_log();
    let (probe, probe_layer) = layer(Probe::new("memory", 100, &log));
    let harness = AgentHarness::builder("repeated")
        .context_layers([probe_layer])
        .build()
        .unwrap();
    let ctx = harness.create_context(ContextOptions::new());

    for n in 0..4 {
        assert_eq!(harness.run(&noop(), n, &ctx).await.unwrap(), n);
    }

    assert_eq!(
        entries(&log, &["init", "on_complete", "dispose"]),
        ["memory:init@0"],
        "four runs, one init, nothing completed while the context is open"
    );
    harness.close_context(&ctx).await;
    assert_eq!(
        entries(&log, &["init", "on_complete", "dispose"]),
        ["memory:init@0", "memory:on_complete@0", "memory:dispose@0"]
    );
    assert_eq!(*probe.outcomes.lock().unwrap(), [Outcome::Success]);
    harness.close_context(&ctx).await;
    assert_eq!(
        entries(&log, &["on_complete"]).len(),
        1,
        "closing twice completes once"
    );
}

#[tokio::test]
async fn a_run_after_close_initializes_again() {
    let log = hook_log();
    let (_, probe_layer) = layer(Probe::new("memory", 100, &log));
    let harness = AgentHarness::builder("reopened")
        .context_layers([probe_layer])
        .build()
        .unwrap();
    let ctx = harness.create_context(ContextOptions::new());

    harness.run(&noop(), 1, &ctx).await.unwrap();
    harness.close_context(&ctx).await;
    harness.run(&noop(), 2, &ctx).await.unwrap();
    harness.close_context(&ctx).await;

    assert_eq!(
        entries(&log, &["init", "on_complete", "dispose"]),
        [
            "memory:init@0",
            "memory:on_complete@0",
            "memory:dispose@0",
            "memory:init@0",
            "memory:on_complete@0",
            "memory:dispose@0",
        ]
    );
}

#[tokio::test]
async fn closing_a_context_closes_its_open_children_first() {
    let log = hook_log();
    let (_, parent_layer) = layer(Probe::new("parent", 100, &log));
    let (_, child_layer) = layer(Probe::new("child", 100, &log));
    let harness = AgentHarness::builder("tree")
        .context_layers([parent_layer])
        .build()
        .unwrap();
    let ctx = harness.create_context(ContextOptions::new());
    let child =
        harness.create_context(ContextOptions::new().parent(&ctx).layers(vec![child_layer]));

    harness.run(&noop(), 1, &ctx).await.unwrap();
    harness.run(&noop(), 1, &child).await.unwrap();
    harness.close_context(&ctx).await;

    assert_eq!(
        entries(&log, &["init", "on_complete", "dispose"]),
        [
            "parent:init@0",
            "child:init@1",
            "child:on_complete@1",
            "child:dispose@1",
            "parent:on_complete@0",
            "parent:dispose@0",
        ]
    );
}

#[tokio::test]
async fn the_outcome_on_close_is_that_of_the_last_run() {
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

    harness.run(&noop(), 1, &ctx).await.unwrap();
    harness.run(&failing, 1, &ctx).await.unwrap_err();
    harness.close_context(&ctx).await;

    assert_eq!(*probe.outcomes.lock().unwrap(), [Outcome::Failure]);
}

#[tokio::test]
async fn a_context_dropped_without_close_never_completes_its_layers() {
    let log = hook_log();
    let (_, probe_layer) = layer(Probe::new("dropped", 100, &log));
    let harness = AgentHarness::builder("dropped")
        .context_layers([probe_layer])
        .build()
        .unwrap();
    let ctx = harness.create_context(ContextOptions::new());
    harness.run(&noop(), 1, &ctx).await.unwrap();

    drop(ctx);

    assert_eq!(
        entries(&log, &["init", "on_complete", "dispose"]),
        ["dropped:init@0"],
        "async hooks cannot run on drop: close the context to complete its layers"
    );
}

#[tokio::test]
async fn a_spawned_childs_layers_complete_when_the_spawn_step_ends() {
    let log = hook_log();
    let (_, child_layer) = layer(Probe::new("child", 100, &log));
    let harness = AgentHarness::builder("spawn-ends").build().unwrap();
    let marker = {
        let log = log.clone();
        run_code("after", move |n: u32, _: Context| {
            log.lock().unwrap().push("next:step@0".to_owned());
            async move { Ok::<_, Infallible>(n) }
        })
    };
    let failing_child = run_code("fail", |_: u32, _: Context| async move {
        Err::<u32, _>(std::io::Error::other("boom"))
    });
    let graph = sequence("both")
        .step(spawn("ok", noop()).layers(vec![child_layer.clone()]))
        .step(marker)
        .build();
    let ctx = harness.create_context(ContextOptions::new());

    harness.run(&graph, 1, &ctx).await.unwrap();
    let failed = spawn("fails", failing_child)
        .layers(vec![child_layer])
        .build();
    harness.run(&failed, 1, &ctx).await.unwrap_err();

    assert_eq!(
        entries(&log, &["init", "on_complete", "dispose", "step"]),
        [
            "child:init@1",
            "child:on_complete@1",
            "child:dispose@1",
            "next:step@0",
            "child:init@1",
            "child:on_complete@1",
            "child:dispose@1",
        ],
        "each spawn's child is closed as its step ends, with no close_context needed"
    );
}
