//! `in_parallel`: `all`, `race` and `settle`, concurrency limits, state isolation and cancellation.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use noetic_core::{Context, ContextOptions, Error, Settled, Step, in_parallel, run_code};
use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc};

use crate::support::{
    Never, Record, cancelled_reason, constant, count, counter, failing, fork_partial, harness,
    record, recorded, root, slot, take,
};

/// Returns `value` once `gate` is notified, then records `index` as finished.
fn after(
    id: &str,
    gate: &Arc<Notify>,
    finished: &Record<usize>,
    index: usize,
    value: i64,
) -> Step<i64, i64> {
    let gate = gate.clone();
    let finished = finished.clone();
    run_code(id, move |_: i64, _ctx: Context| {
        let gate = gate.clone();
        let finished = finished.clone();
        async move {
            gate.notified().await;
            finished.lock().unwrap().push(index);
            Ok::<_, Never>(value)
        }
    })
    .build()
}

/// Notifies `gate`, records `index` as finished and returns `value`.
fn first(
    id: &str,
    gate: &Arc<Notify>,
    finished: &Record<usize>,
    index: usize,
    value: i64,
) -> Step<i64, i64> {
    let gate = gate.clone();
    let finished = finished.clone();
    run_code(id, move |_: i64, _ctx: Context| {
        gate.notify_one();
        finished.lock().unwrap().push(index);
        async move { Ok::<_, Never>(value) }
    })
    .build()
}

#[tokio::test]
async fn all_merges_outputs_in_path_order_not_finish_order() {
    let harness = harness();
    let gate = Arc::new(Notify::new());
    let finished = record();
    let step = in_parallel("both")
        .path(after("slow", &gate, &finished, 0, 10))
        .path(first("fast", &gate, &finished, 1, 20))
        .all(|outputs: Vec<i64>| outputs);

    let output = harness.run(&step, 0, &root(&harness)).await.unwrap();

    assert_eq!(
        recorded(&finished),
        [1, 0],
        "the second path finished first"
    );
    assert_eq!(output, [10, 20]);
}

#[tokio::test]
async fn all_runs_paths_computed_from_the_input() {
    let harness = harness();
    let step = in_parallel("fan-out")
        .paths(|n: &i64, _ctx: &Context| {
            (1..=*n)
                .map(|factor| {
                    run_code(
                        format!("times-{factor}"),
                        move |n: i64, _ctx: Context| async move { Ok::<_, Never>(n * factor) },
                    )
                    .build()
                })
                .collect()
        })
        .all(|outputs: Vec<i64>| outputs);

    let output = harness.run(&step, 3, &root(&harness)).await.unwrap();

    assert_eq!(output, [3, 6, 9]);
}

#[tokio::test]
async fn all_with_a_failing_path_is_fork_partial() {
    let harness = harness();
    let first_done = Arc::new(Notify::new());
    let third_started = Arc::new(Notify::new());
    let ok = {
        let first_done = first_done.clone();
        run_code("ok", move |_: i64, _ctx: Context| {
            first_done.notify_one();
            async move { Ok::<_, Never>(1) }
        })
        .build()
    };
    let fails = {
        let first_done = first_done.clone();
        let third_started = third_started.clone();
        run_code("fails", move |_: i64, _ctx: Context| {
            let first_done = first_done.clone();
            let third_started = third_started.clone();
            async move {
                first_done.notified().await;
                third_started.notified().await;
                Err::<i64, _>("path failed")
            }
        })
        .build()
    };
    let blocked = {
        let third_started = third_started.clone();
        run_code("blocked", move |_: i64, ctx: Context| {
            third_started.notify_one();
            async move {
                ctx.cancelled().await;
                Err::<i64, _>(Error::cancelled(ctx.abort_reason()))
            }
        })
        .build()
    };
    let step = in_parallel("fork")
        .path(ok)
        .path(fails)
        .path(blocked)
        .all(|outputs: Vec<i64>| outputs);

    let error = harness.run(&step, 0, &root(&harness)).await.unwrap_err();

    let (succeeded, failed, cancelled) = fork_partial(error);
    assert_eq!(succeeded, [0]);
    assert_eq!(failed, [(1, "STEP_FAILED".to_owned())]);
    assert_eq!(
        cancelled,
        [(2, "CANCELLED: stopped: a sibling path failed".to_owned())]
    );
}

#[tokio::test]
async fn all_never_starts_a_path_queued_behind_a_failure() {
    let harness = harness();
    let calls = counter();
    let queued = {
        let calls = calls.clone();
        run_code("queued", move |n: i64, _ctx: Context| {
            calls.fetch_add(1, Ordering::SeqCst);
            async move { Ok::<_, Never>(n) }
        })
        .build()
    };
    let step = in_parallel("one-at-a-time")
        .path(failing("fails"))
        .path(queued)
        .concurrency(1)
        .all(|outputs: Vec<i64>| outputs);

    let error = harness.run(&step, 0, &root(&harness)).await.unwrap_err();

    let (succeeded, failed, cancelled) = fork_partial(error);
    assert!(succeeded.is_empty());
    assert_eq!(failed, [(0, "STEP_FAILED".to_owned())]);
    assert_eq!(
        cancelled,
        [(1, "CANCELLED: not run: a sibling path failed".to_owned())]
    );
    assert_eq!(count(&calls), 0, "the queued path never ran");
}

#[tokio::test]
async fn concurrency_limits_paths_in_flight() {
    let harness = harness();
    let in_flight = Arc::new(AtomicUsize::new(0));
    let peak = Arc::new(AtomicUsize::new(0));
    let path = |id: String| {
        let in_flight = in_flight.clone();
        let peak = peak.clone();
        run_code(id, move |n: i64, _ctx: Context| {
            let in_flight = in_flight.clone();
            let peak = peak.clone();
            async move {
                let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                for _ in 0..3 {
                    tokio::task::yield_now().await;
                }
                in_flight.fetch_sub(1, Ordering::SeqCst);
                Ok::<_, Never>(n)
            }
        })
        .build()
    };
    let limited = (0..4)
        .fold(in_parallel("limited"), |builder, index| {
            builder.path(path(format!("p{index}")))
        })
        .concurrency(2)
        .all(|outputs: Vec<i64>| outputs.len());

    assert_eq!(harness.run(&limited, 0, &root(&harness)).await.unwrap(), 4);
    assert_eq!(peak.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn race_first_success_wins_with_its_state_and_losers_are_aborted() {
    let harness = harness();
    let ctx = harness.create_context(
        ContextOptions::new()
            .state(json!({"x": 0, "kept": true}))
            .unwrap(),
    );
    let loser_started = Arc::new(Notify::new());
    let loser_ctx = slot::<Context>();
    let aborted_when_dropped = Arc::new(AtomicBool::new(false));

    /// Records whether the loser's context was aborted when its body was torn down.
    struct Guard(Context, Arc<AtomicBool>);
    impl Drop for Guard {
        fn drop(&mut self) {
            self.1.store(self.0.aborted(), Ordering::SeqCst);
        }
    }

    let loser = {
        let loser_started = loser_started.clone();
        let loser_ctx = loser_ctx.clone();
        let aborted_when_dropped = aborted_when_dropped.clone();
        run_code("loser", move |_: i64, ctx: Context| {
            ctx.update_state(|state| state["x"] = json!("loser"));
            *loser_ctx.lock().unwrap() = Some(ctx.clone());
            loser_started.notify_one();
            let guard = Guard(ctx.clone(), aborted_when_dropped.clone());
            async move {
                let _guard = guard;
                ctx.cancelled().await;
                Err::<String, _>(Error::cancelled(ctx.abort_reason()))
            }
        })
        .build()
    };
    let winner = {
        let loser_started = loser_started.clone();
        run_code("winner", move |_: i64, ctx: Context| {
            let loser_started = loser_started.clone();
            async move {
                loser_started.notified().await;
                ctx.update_state(|state| state["x"] = json!("winner"));
                Ok::<_, Never>("winner".to_owned())
            }
        })
        .build()
    };
    let step = in_parallel("race").path(loser).path(winner).race();

    let output = harness.run(&step, 0, &ctx).await.unwrap();

    assert_eq!(output, "winner");
    assert_eq!(ctx.state(), json!({"x": "winner", "kept": true}));
    let loser_ctx = take(&loser_ctx);
    assert!(loser_ctx.aborted());
    assert!(
        aborted_when_dropped.load(Ordering::SeqCst),
        "the loser saw its abort"
    );
    assert!(!ctx.aborted(), "the parent is not aborted");
}

#[tokio::test]
async fn race_ignores_failures_before_the_first_success() {
    let harness = harness();
    let failed = Arc::new(Notify::new());
    let fails_first = {
        let failed = failed.clone();
        run_code("fails-first", move |_: i64, _ctx: Context| {
            failed.notify_one();
            async move { Err::<i64, _>("no luck") }
        })
        .build()
    };
    let succeeds_later = {
        let failed = failed.clone();
        run_code("succeeds-later", move |_: i64, _ctx: Context| {
            let failed = failed.clone();
            async move {
                failed.notified().await;
                Ok::<_, Never>(7)
            }
        })
        .build()
    };
    let step = in_parallel("race")
        .path(fails_first)
        .path(succeeds_later)
        .race();

    assert_eq!(harness.run(&step, 0, &root(&harness)).await.unwrap(), 7);
}

#[tokio::test]
async fn race_where_every_path_fails_is_fork_partial() {
    let harness = harness();
    let step = in_parallel("race")
        .path(failing("a"))
        .path(failing("b"))
        .race();

    let error = harness.run(&step, 0, &root(&harness)).await.unwrap_err();

    let (succeeded, failed, cancelled) = fork_partial(error);
    assert!(succeeded.is_empty());
    assert_eq!(
        failed,
        [(0, "STEP_FAILED".to_owned()), (1, "STEP_FAILED".to_owned())]
    );
    assert!(cancelled.is_empty());
}

fn describe(outcomes: Vec<Settled<i64>>) -> Vec<String> {
    outcomes
        .into_iter()
        .map(|outcome| match outcome {
            Settled::Fulfilled { step_id, value } => format!("fulfilled {step_id} {value}"),
            Settled::Rejected { step_id, error } => format!("rejected {step_id} {}", error.code()),
            other => panic!("unexpected outcome {other:?}"),
        })
        .collect()
}

#[tokio::test]
async fn settle_reports_every_outcome_in_path_order() {
    let harness = harness();
    let failed = Arc::new(Notify::new());
    let slow_ok = {
        let failed = failed.clone();
        run_code("slow-ok", move |_: i64, _ctx: Context| {
            let failed = failed.clone();
            async move {
                failed.notified().await;
                Ok::<_, Never>(1)
            }
        })
        .build()
    };
    let fast_fail = {
        let failed = failed.clone();
        run_code("fast-fail", move |_: i64, _ctx: Context| {
            failed.notify_one();
            async move { Err::<i64, _>("broken") }
        })
        .build()
    };
    let step = in_parallel("settle")
        .path(slow_ok)
        .path(fast_fail)
        .settle(describe);

    let output = harness.run(&step, 0, &root(&harness)).await.unwrap();

    assert_eq!(
        output,
        ["fulfilled slow-ok 1", "rejected fast-fail STEP_FAILED"]
    );
}

#[tokio::test]
async fn paths_get_a_copy_of_the_state_and_never_see_each_others_writes() {
    let harness = harness();
    let ctx = harness.create_context(ContextOptions::new().state(json!({"n": 0})).unwrap());
    let a_wrote = Arc::new(Notify::new());
    let writes_a = {
        let a_wrote = a_wrote.clone();
        run_code("writes-a", move |_: i64, ctx: Context| {
            ctx.update_state(|state| state["a"] = json!(1));
            a_wrote.notify_one();
            async move { Ok::<_, Never>(ctx.state()) }
        })
        .build()
    };
    let writes_b = {
        let a_wrote = a_wrote.clone();
        run_code("writes-b", move |_: i64, ctx: Context| {
            let a_wrote = a_wrote.clone();
            async move {
                a_wrote.notified().await;
                ctx.update_state(|state| state["b"] = json!(2));
                Ok::<_, Never>(ctx.state())
            }
        })
        .build()
    };
    let step = in_parallel("isolated")
        .path(writes_a)
        .path(writes_b)
        .all(|states: Vec<Value>| states);

    let states = harness.run(&step, 0, &ctx).await.unwrap();

    assert_eq!(states, [json!({"n": 0, "a": 1}), json!({"n": 0, "b": 2})]);
    assert_eq!(
        ctx.state(),
        json!({"n": 0}),
        "`all` leaves the parent's state alone"
    );
}

#[tokio::test]
async fn parent_aborted_mid_all_is_cancelled_not_fork_partial() {
    let harness = harness();
    let ctx = root(&harness);
    let (started, mut started_rx) = mpsc::unbounded_channel::<Context>();
    let waits = |id: &str| {
        let started = started.clone();
        run_code(id, move |_: i64, ctx: Context| {
            let _ = started.send(ctx.clone());
            async move {
                ctx.cancelled().await;
                Err::<i64, _>(Error::cancelled(ctx.abort_reason()))
            }
        })
        .build()
    };
    let step = in_parallel("waiting")
        .path(waits("a"))
        .path(waits("b"))
        .all(|outputs: Vec<i64>| outputs);

    let (result, paths) = tokio::join!(harness.run(&step, 0, &ctx), async {
        let a = started_rx.recv().await.unwrap();
        let b = started_rx.recv().await.unwrap();
        ctx.abort(Some("user stop".to_owned()));
        [a, b]
    });

    assert_eq!(
        cancelled_reason(result.unwrap_err()).as_deref(),
        Some("user stop")
    );
    for path in paths {
        assert_eq!(
            path.abort_reason().as_deref(),
            Some("user stop"),
            "the paths keep the reason of the abort that stopped them"
        );
    }
}

#[tokio::test]
async fn parent_aborted_mid_settle_is_cancelled() {
    let harness = harness();
    let ctx = root(&harness);
    let started = Arc::new(Notify::new());
    let waits = {
        let started = started.clone();
        run_code("waits", move |_: i64, ctx: Context| {
            started.notify_one();
            async move {
                ctx.cancelled().await;
                Err::<i64, _>(Error::cancelled(ctx.abort_reason()))
            }
        })
        .build()
    };
    let step = in_parallel("settle")
        .path(constant("done", 1))
        .path(waits)
        .settle(describe);

    let (result, ()) = tokio::join!(harness.run(&step, 0, &ctx), async {
        started.notified().await;
        ctx.abort(Some("user stop".to_owned()));
    });

    assert_eq!(
        cancelled_reason(result.unwrap_err()).as_deref(),
        Some("user stop")
    );
}

#[tokio::test]
async fn empty_all_and_settle_merge_nothing() {
    let harness = harness();
    let ctx = root(&harness);
    let all = in_parallel::<i64, i64>("none").all(|outputs: Vec<i64>| outputs.len() + 100);
    let settle = in_parallel::<i64, i64>("none").settle(|outcomes| outcomes.len() + 200);

    assert_eq!(harness.run(&all, 0, &ctx).await.unwrap(), 100);
    assert_eq!(harness.run(&settle, 0, &ctx).await.unwrap(), 200);
}

#[tokio::test]
async fn empty_race_is_fork_partial() {
    let harness = harness();
    let race = in_parallel::<i64, i64>("none").race();

    let error = harness.run(&race, 0, &root(&harness)).await.unwrap_err();

    let (succeeded, failed, cancelled) = fork_partial(error);
    assert!(succeeded.is_empty());
    assert!(failed.is_empty());
    assert!(cancelled.is_empty());
}

#[tokio::test]
async fn paths_run_one_level_deeper_in_fresh_contexts() {
    let harness = harness();
    let ctx = root(&harness);
    let seen = record();
    let probe = |id: &str| {
        let seen = seen.clone();
        run_code(id, move |n: i64, ctx: Context| {
            seen.lock()
                .unwrap()
                .push((ctx.depth(), ctx.id().to_owned()));
            async move { Ok::<_, Never>(n) }
        })
        .build()
    };
    let step = in_parallel("probe")
        .path(probe("a"))
        .path(probe("b"))
        .all(|outputs: Vec<i64>| outputs);

    harness.run(&step, 0, &ctx).await.unwrap();

    let seen = recorded(&seen);
    assert_eq!(seen.len(), 2);
    assert!(seen.iter().all(|(depth, _)| *depth == 1));
    assert_ne!(seen[0].1, seen[1].1);
    assert!(seen.iter().all(|(_, id)| id != ctx.id()));
}

#[tokio::test]
async fn a_sibling_stopped_by_a_failure_counts_as_cancelled_not_failed() {
    let harness = harness();
    let blocked_started = Arc::new(Notify::new());
    let blocked = {
        let blocked_started = blocked_started.clone();
        run_code("blocked", move |_: i64, ctx: Context| {
            blocked_started.notify_one();
            async move {
                ctx.cancelled().await;
                Err::<i64, _>(Error::cancelled(ctx.abort_reason()))
            }
        })
        .build()
    };
    let fails = {
        let blocked_started = blocked_started.clone();
        run_code("fails", move |_: i64, _ctx: Context| {
            let blocked_started = blocked_started.clone();
            async move {
                blocked_started.notified().await;
                Err::<i64, _>("path failed")
            }
        })
        .build()
    };
    let step = in_parallel("fork")
        .path(blocked)
        .path(fails)
        .all(|outputs: Vec<i64>| outputs);

    let error = harness.run(&step, 0, &root(&harness)).await.unwrap_err();

    assert_eq!(
        error.to_string(),
        "step `fork`: 1 of 2 parallel paths failed, 1 cancelled"
    );
    let (succeeded, failed, cancelled) = fork_partial(error);
    assert!(succeeded.is_empty());
    assert_eq!(failed, [(1, "STEP_FAILED".to_owned())]);
    assert_eq!(
        cancelled,
        [(0, "CANCELLED: stopped: a sibling path failed".to_owned())]
    );
}
