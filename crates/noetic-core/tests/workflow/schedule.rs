//! The `schedule` step (core): runs a step every interval until cancelled or `max_runs`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use noetic_core::{
    AgentHarness, Context, ContextOptions, ScheduleOnError, Step, StepKind, run_code, schedule,
};
use tokio::time::Instant;

fn counter() -> (Arc<AtomicU32>, Step<u32, u32>) {
    let runs = Arc::new(AtomicU32::new(0));
    let step =
        run_code("tick", {
            let runs = runs.clone();
            move |n: u32, _: Context| {
                let runs = runs.clone();
                async move {
                    Ok::<_, std::convert::Infallible>(n + runs.fetch_add(1, Ordering::SeqCst) + 1)
                }
            }
        })
        .build();
    (runs, step)
}

fn setup() -> (AgentHarness, Context) {
    let harness = AgentHarness::builder("schedule").build().unwrap();
    let ctx = harness.create_context(ContextOptions::default());
    (harness, ctx)
}

#[tokio::test(start_paused = true)]
async fn max_runs_ends_with_the_last_output_after_waiting_each_interval() {
    let (harness, ctx) = setup();
    let (runs, tick) = counter();
    let ticker = schedule("ticker", tick, Duration::from_secs(1))
        .max_runs(3)
        .build();
    assert_eq!(ticker.kind(), StepKind::Schedule);
    let started = Instant::now();
    // Every run gets the schedule's input (10); the last is 10 + 3.
    assert_eq!(harness.run(&ticker, 10, &ctx).await.unwrap(), Some(13));
    assert_eq!(runs.load(Ordering::SeqCst), 3);
    // Two waits between three runs.
    assert_eq!(started.elapsed(), Duration::from_secs(2));
    // The schedule and each run are steps.
    assert_eq!(ctx.step_count(), 4);
}

#[tokio::test(start_paused = true)]
async fn without_max_runs_it_runs_until_cancelled() {
    let (harness, ctx) = setup();
    let (runs, tick) = counter();
    let ticker = schedule("ticker", tick, Duration::from_secs(60)).build();
    let canceller = {
        let ctx = ctx.clone();
        async move {
            tokio::time::sleep(Duration::from_secs(150)).await;
            ctx.abort(Some("shutting down".to_owned()));
        }
    };
    let (result, ()) = tokio::join!(harness.run(&ticker, 0, &ctx), canceller);
    let error = result.unwrap_err();
    assert_eq!(error.code(), "CANCELLED");
    assert!(error.to_string().contains("shutting down"), "{error}");
    // Runs at 0, 60 and 120 s.
    assert_eq!(runs.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn on_error_continue_skips_failures_and_fail_stops() {
    let (harness, ctx) = setup();
    let failing = || {
        run_code("boom", |_: u32, _: Context| async move {
            Err::<u32, _>("boom".to_owned())
        })
        .build()
    };
    let continuing = schedule("c", failing(), Duration::ZERO).max_runs(3).build();
    assert_eq!(harness.run(&continuing, 0, &ctx).await.unwrap(), None);
    let failing_fast = schedule("f", failing(), Duration::ZERO)
        .on_error(ScheduleOnError::Fail)
        .max_runs(3)
        .build();
    let error = harness.run(&failing_fast, 0, &ctx).await.unwrap_err();
    assert_eq!(error.code(), "STEP_FAILED");
}

#[tokio::test]
async fn a_cancelled_run_ends_the_schedule_even_under_continue() {
    let (harness, ctx) = setup();
    let cancelling = run_code("stop", |_: u32, ctx: Context| async move {
        ctx.abort(Some("from inside".to_owned()));
        Err::<u32, _>(noetic_core::Error::cancelled(Some(
            "from inside".to_owned(),
        )))
    })
    .build();
    let ticker = schedule("ticker", cancelling, Duration::ZERO)
        .max_runs(5)
        .build();
    let error = harness.run(&ticker, 0, &ctx).await.unwrap_err();
    assert_eq!(error.code(), "CANCELLED");
}

#[tokio::test]
async fn zero_max_runs_is_rejected_when_validated() {
    let (harness, ctx) = setup();
    let (_, tick) = counter();
    let ticker = schedule("ticker", tick, Duration::ZERO).max_runs(0).build();
    let error = harness.run(&ticker, 0, &ctx).await.unwrap_err();
    assert_eq!(error.code(), "INVALID_STEP");
}
