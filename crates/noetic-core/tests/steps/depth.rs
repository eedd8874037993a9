//! The interpreter's entry checks: the depth limit and an aborted context.

use std::sync::atomic::Ordering;

use noetic_core::{
    AgentHarness, Context, ContextOptions, MAX_DEPTH, Step, StepFailure, run_code, spawn,
};

use crate::support::{
    Never, cancelled_reason, count, counter, counting_inc, harness, root, step_failure,
};

/// A chain of `depth` nested contexts under a root.
fn nested(harness: &AgentHarness, depth: u32) -> Context {
    let mut ctx = root(harness);
    for _ in 0..depth {
        ctx = harness.create_context(ContextOptions::new().parent(&ctx));
    }
    ctx
}

#[tokio::test]
async fn a_context_at_the_depth_limit_refuses_to_run_steps() {
    let harness = harness();
    let ctx = nested(&harness, MAX_DEPTH);
    assert_eq!(ctx.depth(), 64);
    let calls = counter();

    let error = harness
        .run(&counting_inc("too-deep", &calls), 0, &ctx)
        .await
        .unwrap_err();

    let (step_id, cause) = step_failure(error);
    assert_eq!(step_id, "too-deep");
    assert!(
        matches!(cause, StepFailure::DepthLimit { limit: 64 }),
        "{cause:?}"
    );
    assert_eq!(count(&calls), 0);
}

#[tokio::test]
async fn one_level_below_the_limit_runs_but_cannot_spawn() {
    let harness = harness();
    let ctx = nested(&harness, MAX_DEPTH - 1);
    let calls = counter();

    assert_eq!(
        harness
            .run(&counting_inc("fits", &calls), 1, &ctx)
            .await
            .unwrap(),
        2
    );

    let step: Step<i64, i64> = spawn("deeper", counting_inc("child", &calls)).build();
    let error = harness.run(&step, 1, &ctx).await.unwrap_err();

    let (step_id, cause) = step_failure(error);
    assert_eq!(step_id, "child");
    assert!(matches!(cause, StepFailure::DepthLimit { .. }), "{cause:?}");
    assert_eq!(count(&calls), 1, "only the first run reached a body");
}

#[tokio::test]
async fn an_aborted_context_is_cancelled_before_anything_runs() {
    let harness = harness();
    let ctx = root(&harness);
    ctx.abort(Some("stopped early".to_owned()));
    let calls = counter();
    let step = {
        let calls = calls.clone();
        run_code("never", move |n: i64, _ctx: Context| {
            calls.fetch_add(1, Ordering::SeqCst);
            async move { Ok::<_, Never>(n) }
        })
        .build()
    };

    let error = harness.run(&step, 0, &ctx).await.unwrap_err();

    assert_eq!(cancelled_reason(error).as_deref(), Some("stopped early"));
    assert_eq!(count(&calls), 0);
    assert_eq!(ctx.step_count(), 0, "a refused step is not counted");
}
