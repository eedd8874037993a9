//! `conditional`: routing to a step, or passing the input through.

use std::sync::atomic::Ordering;

use noetic_core::{Context, Step, conditional, run_code};

use crate::support::{Never, count, counter, harness, root, slot, take};

#[tokio::test]
async fn no_route_passes_the_input_through() {
    let harness = harness();
    let calls = counter();
    let negate: Step<i64, i64> = {
        let calls = calls.clone();
        run_code("negate", move |n: i64, _ctx: Context| {
            calls.fetch_add(1, Ordering::SeqCst);
            async move { Ok::<_, Never>(-n) }
        })
        .build()
    };
    let abs = conditional("abs", move |n: &i64, _ctx: &Context| {
        (*n < 0).then(|| negate.clone())
    });

    assert_eq!(harness.run(&abs, 7, &root(&harness)).await.unwrap(), 7);
    assert_eq!(count(&calls), 0);
}

#[tokio::test]
async fn a_routed_step_runs_with_the_same_input_and_context() {
    let harness = harness();
    let ctx = root(&harness);
    let seen = slot::<(i64, String)>();
    let negate: Step<i64, i64> = {
        let seen = seen.clone();
        run_code("negate", move |n: i64, ctx: Context| {
            *seen.lock().unwrap() = Some((n, ctx.id().to_owned()));
            async move { Ok::<_, Never>(-n) }
        })
        .build()
    };
    let abs = conditional("abs", move |n: &i64, _ctx: &Context| {
        (*n < 0).then(|| negate.clone())
    });

    assert_eq!(harness.run(&abs, -5, &ctx).await.unwrap(), 5);
    assert_eq!(take(&seen), (-5, ctx.id().to_owned()));
}
