//! `run_code`: retries, backoff, cancellation and input types.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use noetic_core::{
    AgentHarness, Backoff, Context, Error, RetryPolicy, RunCodeBuilder, Step, StepFailure, run_code,
};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::support::{
    Never, cancelled_reason, count, counter, harness, record, recorded, root, step_failure,
};

fn ms(millis: u64) -> Duration {
    Duration::from_millis(millis)
}

/// Fails its first `failures` calls (with "attempt N failed"), then returns `n + 1`.
fn flaky(calls: &Arc<AtomicUsize>, failures: usize) -> RunCodeBuilder<i64, i64> {
    let calls = calls.clone();
    run_code("flaky", move |n: i64, _ctx: Context| {
        let call = calls.fetch_add(1, Ordering::SeqCst);
        async move {
            if call < failures {
                Err(format!("attempt {} failed", call + 1))
            } else {
                Ok(n + 1)
            }
        }
    })
}

#[tokio::test(start_paused = true)]
async fn retry_succeeds_on_the_third_attempt() {
    let harness = harness();
    let calls = counter();
    let step = flaky(&calls, 2)
        .retry(RetryPolicy::new(3, Backoff::Fixed, ms(10)))
        .build();

    let output = harness.run(&step, 41, &root(&harness)).await.unwrap();

    assert_eq!(output, 42);
    assert_eq!(count(&calls), 3);
}

#[tokio::test(start_paused = true)]
async fn retries_exhausted_when_a_fourth_attempt_is_needed() {
    let harness = harness();
    let calls = counter();
    let step = flaky(&calls, 3)
        .retry(RetryPolicy::new(3, Backoff::Fixed, ms(10)))
        .build();

    let error = harness.run(&step, 0, &root(&harness)).await.unwrap_err();

    assert_eq!(error.code(), "STEP_FAILED");
    let (step_id, cause) = step_failure(error);
    assert_eq!(step_id, "flaky");
    match cause {
        StepFailure::Error {
            source,
            attempts,
            retries_exhausted,
        } => {
            assert_eq!(attempts, 3);
            assert!(retries_exhausted);
            assert_eq!(source.to_string(), "attempt 3 failed");
        }
        other => panic!("expected a user error, got {other:?}"),
    }
    assert_eq!(count(&calls), 3);
}

#[tokio::test]
async fn a_single_attempt_failure_has_not_exhausted_retries() {
    let harness = harness();
    let calls = counter();
    let step = flaky(&calls, 1).build();

    let error = harness.run(&step, 0, &root(&harness)).await.unwrap_err();

    let (_, cause) = step_failure(error);
    assert!(
        matches!(
            cause,
            StepFailure::Error {
                attempts: 1,
                retries_exhausted: false,
                ..
            }
        ),
        "{cause:?}"
    );
    assert_eq!(count(&calls), 1);
}

#[test]
fn exponential_delays_double_and_cap_at_thirty_seconds() {
    let policy = RetryPolicy::new(50, Backoff::Exponential, Duration::from_secs(1));
    assert_eq!(policy.max_delay, Duration::from_secs(30));

    let delays: Vec<u64> = (0..8)
        .map(|failed| policy.delay_after(failed).as_secs())
        .collect();
    assert_eq!(delays, [1, 2, 4, 8, 16, 30, 30, 30]);
    for failed in [31, 32, 64, 1000, u32::MAX] {
        assert_eq!(policy.delay_after(failed), Duration::from_secs(30));
    }
}

#[test]
fn exponential_delays_respect_a_smaller_max_delay() {
    let policy = RetryPolicy::new(5, Backoff::Exponential, ms(100)).max_delay(ms(350));
    let delays: Vec<Duration> = (0..4).map(|failed| policy.delay_after(failed)).collect();
    assert_eq!(delays, [ms(100), ms(200), ms(350), ms(350)]);
}

#[test]
fn linear_and_fixed_delays() {
    let linear = RetryPolicy::new(5, Backoff::Linear, ms(100));
    let delays: Vec<Duration> = (0..4).map(|failed| linear.delay_after(failed)).collect();
    assert_eq!(delays, [ms(100), ms(200), ms(300), ms(400)]);

    let capped = linear.max_delay(ms(250));
    assert_eq!(capped.delay_after(3), ms(250));

    let fixed = RetryPolicy::new(5, Backoff::Fixed, ms(100));
    for failed in [0, 1, 7, u32::MAX] {
        assert_eq!(fixed.delay_after(failed), ms(100));
    }
}

#[tokio::test(start_paused = true)]
async fn cancelled_from_the_body_is_never_retried() {
    let harness = harness();
    let calls = counter();
    let step = {
        let calls = calls.clone();
        run_code("gives-up", move |_: i64, _ctx: Context| {
            calls.fetch_add(1, Ordering::SeqCst);
            async move { Err::<i64, _>(Error::cancelled(Some("user stop".to_owned()))) }
        })
        .retry(RetryPolicy::new(5, Backoff::Fixed, ms(10)))
        .build()
    };

    let error = harness.run(&step, 0, &root(&harness)).await.unwrap_err();

    assert_eq!(cancelled_reason(error).as_deref(), Some("user stop"));
    assert_eq!(count(&calls), 1);
}

#[tokio::test(start_paused = true)]
async fn retry_waits_the_backoff_delays() {
    let harness = harness();
    let started = Instant::now();
    let attempts = record();
    let step = {
        let attempts = attempts.clone();
        run_code("slow-flaky", move |n: i64, _ctx: Context| {
            let attempt = {
                let mut attempts = attempts.lock().unwrap();
                attempts.push(started.elapsed());
                attempts.len()
            };
            async move {
                if attempt < 3 {
                    Err(format!("attempt {attempt} failed"))
                } else {
                    Ok(n)
                }
            }
        })
        .retry(RetryPolicy::new(3, Backoff::Linear, ms(100)))
        .build()
    };

    harness.run(&step, 1, &root(&harness)).await.unwrap();

    // Linear: 100 ms after the first failure, 200 ms after the second.
    assert_eq!(recorded(&attempts), [ms(0), ms(100), ms(300)]);
    assert_eq!(started.elapsed(), ms(300));
}

#[tokio::test(start_paused = true)]
async fn abort_during_a_backoff_delay_cancels_without_waiting() {
    let harness = harness();
    let ctx = root(&harness);
    let failed_once = Arc::new(Notify::new());
    let calls = counter();
    let step = {
        let failed_once = failed_once.clone();
        let calls = calls.clone();
        run_code("retrying", move |_: i64, _ctx: Context| {
            calls.fetch_add(1, Ordering::SeqCst);
            failed_once.notify_one();
            async move { Err::<i64, _>("not yet") }
        })
        .retry(RetryPolicy::new(3, Backoff::Fixed, Duration::from_secs(10)))
        .build()
    };
    let started = Instant::now();

    let (result, ()) = tokio::join!(harness.run(&step, 0, &ctx), async {
        failed_once.notified().await;
        ctx.abort(Some("shutting down".to_owned()));
    });

    assert_eq!(
        cancelled_reason(result.unwrap_err()).as_deref(),
        Some("shutting down")
    );
    assert_eq!(count(&calls), 1);
    assert_eq!(started.elapsed(), Duration::ZERO);
}

#[tokio::test]
async fn input_that_does_not_fit_the_step_type_is_a_type_mismatch() {
    let calls = counter();
    let typed = {
        let calls = calls.clone();
        run_code("typed", move |n: i64, _ctx: Context| {
            calls.fetch_add(1, Ordering::SeqCst);
            async move { Ok::<_, Never>(n) }
        })
        .retry(RetryPolicy::new(3, Backoff::Fixed, ms(1)))
    };
    let harness = AgentHarness::builder("typed")
        .agent_graph(typed)
        .build()
        .unwrap();
    // Asked for as JSON values, the graph takes any input: one that is not an `i64` fails at the step.
    let untyped: Step<serde_json::Value, i64> = harness.agent_graph().unwrap();

    let error = harness
        .run(&untyped, serde_json::json!("not a number"), &root(&harness))
        .await
        .unwrap_err();

    let (step_id, cause) = step_failure(error);
    assert_eq!(step_id, "typed");
    assert!(
        matches!(
            cause,
            StepFailure::TypeMismatch {
                direction: "input",
                ..
            }
        ),
        "{cause:?}"
    );
    assert_eq!(count(&calls), 0, "the body never runs, nor is retried");
}
