//! `spawn`: child contexts, timeouts, spend roll-up and layers.

use std::sync::Arc;
use std::time::Duration;

use noetic_core::item::Item;
use noetic_core::{
    AgentHarness, Context, ContextLayer, ContextOptions, Spend, StepFailure, TokenUsage, run_code,
    spawn,
};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::support::{NamedLayer, Never, harness, layer_ids, root, slot, step_failure, take};

/// What a child saw of its context.
#[derive(Debug, PartialEq)]
struct Seen {
    depth: u32,
    id: String,
    parent_id: Option<String>,
    items: usize,
    state: Value,
    thread_id: Option<String>,
}

#[tokio::test]
async fn child_runs_one_level_deeper_with_a_fresh_id_empty_log_and_state_copy() {
    let harness = harness();
    let ctx = harness.create_context(
        ContextOptions::new()
            .thread_id("thread-1")
            .state(json!({"k": 1}))
            .expect("a JSON value serializes")
            .items(vec![
                Item::user_text("earlier"),
                Item::assistant_text("reply"),
            ]),
    );
    let seen = slot();
    let child = {
        let seen = seen.clone();
        run_code("child", move |n: i64, ctx: Context| {
            *seen.lock().unwrap() = Some(Seen {
                depth: ctx.depth(),
                id: ctx.id().to_owned(),
                parent_id: ctx.parent().map(|parent| parent.id().to_owned()),
                items: ctx.item_count(),
                state: ctx.state(),
                thread_id: ctx.thread_id().map(str::to_owned),
            });
            ctx.update_state(|state| state["k"] = json!(2));
            ctx.append_item(Item::user_text("child only"));
            async move { Ok::<_, Never>(n * 2) }
        })
    };
    let step = spawn("isolated", child).build();

    assert_eq!(harness.run(&step, 21, &ctx).await.unwrap(), 42);

    let seen = take(&seen);
    assert_eq!(seen.depth, 1);
    assert_ne!(seen.id, ctx.id());
    assert_eq!(seen.parent_id.as_deref(), Some(ctx.id()));
    assert_eq!(seen.items, 0, "the parent's items are not visible");
    assert_eq!(seen.state, json!({"k": 1}));
    assert_eq!(seen.thread_id.as_deref(), Some("thread-1"));
    assert_eq!(ctx.state(), json!({"k": 1}), "the child's state is a copy");
    assert_eq!(ctx.item_count(), 2, "the child's items stay in the child");
}

#[tokio::test(start_paused = true)]
async fn timeout_fails_the_step_and_aborts_the_child() {
    let harness = harness();
    let ctx = root(&harness);
    let child_ctx = slot::<Context>();
    let stuck = {
        let child_ctx = child_ctx.clone();
        run_code("stuck", move |_: i64, ctx: Context| {
            *child_ctx.lock().unwrap() = Some(ctx);
            async move {
                std::future::pending::<()>().await;
                Ok::<i64, Never>(0)
            }
        })
    };
    let step = spawn("bounded", stuck)
        .timeout(Duration::from_secs(5))
        .build();
    let started = Instant::now();

    let error = harness.run(&step, 0, &ctx).await.unwrap_err();

    let (step_id, cause) = step_failure(error);
    assert_eq!(step_id, "bounded");
    assert!(
        matches!(cause, StepFailure::Timeout { after } if after == Duration::from_secs(5)),
        "{cause:?}"
    );
    assert_eq!(started.elapsed(), Duration::from_secs(5));
    assert!(take(&child_ctx).aborted(), "the child context is aborted");
    assert!(!ctx.aborted(), "the parent is not");
}

#[tokio::test(start_paused = true)]
async fn a_child_that_finishes_in_time_is_not_timed_out() {
    let harness = harness();
    let child = run_code("quick", |n: i64, _ctx: Context| async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        Ok::<_, Never>(n + 1)
    });
    let step = spawn("bounded", child)
        .timeout(Duration::from_secs(5))
        .build();

    assert_eq!(harness.run(&step, 1, &root(&harness)).await.unwrap(), 2);
}

fn spend(input: u64, output: u64, cost: f64) -> Spend {
    Spend {
        usage: TokenUsage {
            input_tokens: input,
            output_tokens: output,
            ..TokenUsage::default()
        },
        cost: Some(cost),
    }
}

#[tokio::test]
async fn child_spend_rolls_up_to_the_parent() {
    let harness = harness();
    let ctx = root(&harness);
    ctx.charge(spend(1, 1, 0.5));
    let child_ctx = slot::<Context>();
    let spender = {
        let child_ctx = child_ctx.clone();
        run_code("spender", move |_: i64, ctx: Context| {
            ctx.charge(spend(100, 20, 0.25));
            *child_ctx.lock().unwrap() = Some(ctx);
            async move { Ok::<_, Never>(0) }
        })
    };
    let step = spawn("spawned", spender).build();

    harness.run(&step, 0, &ctx).await.unwrap();

    let child_ctx = take(&child_ctx);
    assert_eq!(child_ctx.tokens().input_tokens, 100);
    assert_eq!(child_ctx.cost(), Some(0.25));
    assert_eq!(ctx.tokens().input_tokens, 101);
    assert_eq!(ctx.tokens().output_tokens, 21);
    assert_eq!(ctx.cost(), Some(0.75));
}

#[tokio::test]
async fn spend_of_a_failed_child_is_not_lost() {
    let harness = harness();
    let ctx = root(&harness);
    let spender = run_code("spender", |_: i64, ctx: Context| async move {
        ctx.charge(spend(40, 2, 0.02));
        Err::<i64, _>("failed after paying")
    });
    let step = spawn("spawned", spender).build();

    harness.run(&step, 0, &ctx).await.unwrap_err();

    assert_eq!(ctx.tokens().total(), 42);
    assert_eq!(ctx.cost(), Some(0.02));
}

fn layer_probe(seen: &crate::support::Slot<Vec<String>>) -> noetic_core::Step<i64, i64> {
    let seen = seen.clone();
    run_code("probe", move |n: i64, ctx: Context| {
        *seen.lock().unwrap() = Some(layer_ids(&ctx));
        async move { Ok::<_, Never>(n) }
    })
    .build()
}

fn layered_harness() -> AgentHarness {
    let parent_layer: Arc<dyn ContextLayer> = Arc::new(NamedLayer("parent-layer"));
    AgentHarness::builder("layered")
        .context_layers([parent_layer])
        .build()
        .unwrap()
}

#[tokio::test]
async fn child_inherits_the_parent_layers_by_default() {
    let harness = layered_harness();
    let ctx = root(&harness);
    let seen = slot();
    let step = spawn("inherits", layer_probe(&seen)).build();

    harness.run(&step, 0, &ctx).await.unwrap();

    assert_eq!(take(&seen), ["parent-layer"]);
}

#[tokio::test]
async fn layers_given_to_spawn_replace_the_parent_layers() {
    let harness = layered_harness();
    let ctx = root(&harness);
    let seen = slot();
    let child_layer: Arc<dyn ContextLayer> = Arc::new(NamedLayer("child-layer"));
    let other_layer: Arc<dyn ContextLayer> = Arc::new(NamedLayer("other-layer"));
    let step = spawn("replaces", layer_probe(&seen))
        .layers(vec![child_layer, other_layer])
        .build();

    harness.run(&step, 0, &ctx).await.unwrap();

    assert_eq!(take(&seen), ["child-layer", "other-layer"]);
    assert_eq!(
        layer_ids(&ctx),
        ["parent-layer"],
        "the parent keeps its own"
    );
}
