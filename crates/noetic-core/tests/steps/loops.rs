//! `loop_step` and the `until` predicates.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use noetic_core::until::{self, LoopSnapshot, Verification};
use noetic_core::{
    Context, Spend, Step, StepFailure, TokenUsage, Until, Verdict, all, any, loop_step, run_code,
};
use serde_json::{Value, json};

use crate::support::{
    Never, Record, cancelled_reason, count, counter, counting_inc, harness, record, recorded, root,
    step_failure,
};

/// Wraps a predicate so that every verdict it gives is recorded.
fn recording(inner: Until, verdicts: &Record<Verdict>) -> Until {
    let verdicts = verdicts.clone();
    until::custom(move |snapshot: &LoopSnapshot<'_>| {
        let verdict = inner.check(snapshot);
        verdicts.lock().unwrap().push(verdict.clone());
        verdict
    })
}

/// A predicate that always gives `verdict`.
fn always(verdict: Verdict) -> Until {
    until::custom(move |_: &LoopSnapshot<'_>| verdict.clone())
}

#[tokio::test]
async fn increments_until_max_steps() {
    let harness = harness();
    let calls = counter();
    let step = loop_step("count")
        .step(counting_inc("inc", &calls))
        .until(until::max_steps(3))
        .build();

    assert_eq!(harness.run(&step, 0, &root(&harness)).await.unwrap(), 3);
    assert_eq!(count(&calls), 3);
}

#[tokio::test]
async fn a_predicate_that_never_stops_fails_after_max_iterations() {
    let harness = harness();
    let calls = counter();
    let step = loop_step("forever")
        .step(counting_inc("inc", &calls))
        .until(until::never())
        .max_iterations(5)
        .build();

    let error = harness.run(&step, 0, &root(&harness)).await.unwrap_err();

    let (step_id, cause) = step_failure(error);
    assert_eq!(step_id, "forever");
    assert!(
        matches!(cause, StepFailure::MaxIterations { max_iterations: 5 }),
        "{cause:?}"
    );
    assert_eq!(count(&calls), 5);
}

#[tokio::test]
async fn zero_max_iterations_is_rejected_before_running() {
    let harness = harness();
    let calls = counter();
    let step = loop_step("zero")
        .step(counting_inc("inc", &calls))
        .until(until::max_steps(1))
        .max_iterations(0)
        .build();

    let error = harness.run(&step, 0, &root(&harness)).await.unwrap_err();

    let (_, cause) = step_failure(error);
    assert!(
        matches!(cause, StepFailure::InvalidMaxIterations),
        "{cause:?}"
    );
    assert_eq!(count(&calls), 0);
}

#[tokio::test]
async fn prepare_next_gets_the_output_and_the_verdict() {
    let harness = harness();
    let calls = counter();
    let seen = record::<(i64, bool, Option<String>)>();
    let step = {
        let seen = seen.clone();
        loop_step("scaled")
            .step(counting_inc("inc", &calls))
            .until(until::custom(|snapshot: &LoopSnapshot<'_>| {
                let output = snapshot.last_output.as_i64().unwrap_or_default();
                if output >= 100 {
                    Verdict::stop("big enough")
                } else {
                    Verdict::go_on().with_feedback(Some(format!("only {output}")))
                }
            }))
            .prepare_next(move |output: i64, verdict: &Verdict, _ctx: &Context| {
                seen.lock()
                    .unwrap()
                    .push((output, verdict.stop, verdict.feedback.clone()));
                output * 10
            })
            .build()
    };

    // 1 → 2 → (×10) 20 → 21 → (×10) 210 → 211: stop.
    assert_eq!(harness.run(&step, 1, &root(&harness)).await.unwrap(), 211);
    assert_eq!(
        recorded(&seen),
        [
            (2, false, Some("only 2".to_owned())),
            (21, false, Some("only 21".to_owned())),
        ]
    );
    assert_eq!(count(&calls), 3);
}

#[tokio::test]
async fn any_carries_the_verifier_feedback_to_prepare_next() {
    let harness = harness();
    let calls = counter();
    let feedback = record::<Option<String>>();
    let step = {
        let feedback = feedback.clone();
        loop_step("verify-retry")
            .step(counting_inc("inc", &calls))
            .until(any([
                until::verified(|n: &i64| Verification {
                    pass: *n >= 3,
                    feedback: (*n < 3).then(|| "X".to_owned()),
                }),
                until::max_steps(10),
            ]))
            .prepare_next(move |output: i64, verdict: &Verdict, _ctx: &Context| {
                feedback.lock().unwrap().push(verdict.feedback.clone());
                output
            })
            .build()
    };

    assert_eq!(harness.run(&step, 0, &root(&harness)).await.unwrap(), 3);
    assert_eq!(
        recorded(&feedback),
        [Some("X".to_owned()), Some("X".to_owned())]
    );
}

#[tokio::test]
async fn any_of_nothing_never_stops() {
    let harness = harness();
    let calls = counter();
    let step = loop_step("any-empty")
        .step(counting_inc("inc", &calls))
        .until(any([]))
        .max_iterations(3)
        .build();

    let error = harness.run(&step, 0, &root(&harness)).await.unwrap_err();

    let (_, cause) = step_failure(error);
    assert!(
        matches!(cause, StepFailure::MaxIterations { max_iterations: 3 }),
        "{cause:?}"
    );
    assert_eq!(count(&calls), 3);
}

#[tokio::test]
async fn all_of_nothing_stops_after_the_first_iteration() {
    let harness = harness();
    let calls = counter();
    let verdicts = record();
    let step = loop_step("all-empty")
        .step(counting_inc("inc", &calls))
        .until(recording(all([]), &verdicts))
        .build();

    assert_eq!(harness.run(&step, 0, &root(&harness)).await.unwrap(), 1);
    assert_eq!(count(&calls), 1);
    assert_eq!(
        recorded(&verdicts),
        [Verdict::stop("All predicates satisfied")]
    );
}

#[tokio::test]
async fn all_joins_the_reasons_of_every_predicate() {
    let harness = harness();
    let verdicts = record();
    let step = loop_step("all-stop")
        .step(counting_inc("inc", &counter()))
        .until(recording(
            all([always(Verdict::stop("a")), always(Verdict::stop("b"))]),
            &verdicts,
        ))
        .build();

    harness.run(&step, 0, &root(&harness)).await.unwrap();

    assert_eq!(recorded(&verdicts), [Verdict::stop("a; b")]);
}

#[tokio::test]
async fn all_goes_on_while_one_predicate_goes_on() {
    let harness = harness();
    let verdicts = record();
    let step = loop_step("all-partial")
        .step(counting_inc("inc", &counter()))
        .until(recording(
            all([always(Verdict::stop("a")), until::max_steps(2)]),
            &verdicts,
        ))
        .build();

    assert_eq!(harness.run(&step, 0, &root(&harness)).await.unwrap(), 2);
    assert_eq!(
        recorded(&verdicts),
        [Verdict::go_on(), Verdict::stop("a; Reached max steps (2)")]
    );
}

#[tokio::test]
async fn any_returns_the_first_stopping_verdict_as_is() {
    let harness = harness();
    let verdicts = record();
    let first = Verdict::stop("first").with_feedback(Some("from the first".to_owned()));
    let step = loop_step("any-first")
        .step(counting_inc("inc", &counter()))
        .until(recording(
            any([
                always(Verdict::go_on().with_feedback(Some("ignored".to_owned()))),
                always(first.clone()),
                always(Verdict::stop("second")),
            ]),
            &verdicts,
        ))
        .build();

    harness.run(&step, 0, &root(&harness)).await.unwrap();

    assert_eq!(recorded(&verdicts), [first]);
}

#[tokio::test]
async fn output_contains_stops_on_a_substring_of_the_text() {
    let harness = harness();
    let grow = run_code("grow", |text: String, _ctx: Context| async move {
        Ok::<_, Never>(text + "x")
    });
    let step = loop_step("grow")
        .step(grow)
        .until(until::output_contains("xxx"))
        .build();

    assert_eq!(
        harness
            .run(&step, "a".to_owned(), &root(&harness))
            .await
            .unwrap(),
        "axxx"
    );
}

#[tokio::test]
async fn output_contains_reads_the_text_field_of_an_object() {
    let harness = harness();
    let grow = run_code("grow", |value: Value, _ctx: Context| async move {
        let text = value["text"].as_str().unwrap_or_default().to_owned() + "ab";
        Ok::<_, Never>(json!({"text": text, "other": "done"}))
    });
    let step = loop_step("grow")
        .step(grow)
        // Matched against the whole JSON, "other" would stop the loop after the first iteration.
        .until(any([
            until::output_contains("other"),
            until::output_contains("abab"),
        ]))
        .build();

    let output = harness
        .run(&step, json!({"text": ""}), &root(&harness))
        .await
        .unwrap();

    assert_eq!(output["text"], "abab");
}

/// `n + 1`, charging `spend` to the context each time.
fn paying_inc(spend: Spend) -> Step<i64, i64> {
    run_code("paying", move |n: i64, ctx: Context| {
        ctx.charge(spend);
        async move { Ok::<_, Never>(n + 1) }
    })
    .build()
}

#[tokio::test]
async fn max_cost_stops_once_the_context_cost_reaches_the_limit() {
    let harness = harness();
    let quarter = Spend {
        usage: TokenUsage::default(),
        cost: Some(0.25),
    };
    let step = loop_step("budget")
        .step(paying_inc(quarter))
        .until(until::max_cost(1.0))
        .build();
    let ctx = root(&harness);

    assert_eq!(harness.run(&step, 0, &ctx).await.unwrap(), 4);
    assert_eq!(ctx.cost(), Some(1.0));
}

#[tokio::test]
async fn max_tokens_stops_once_the_context_tokens_reach_the_limit() {
    let harness = harness();
    let thirty = Spend {
        usage: TokenUsage {
            input_tokens: 20,
            output_tokens: 10,
            ..TokenUsage::default()
        },
        cost: None,
    };
    let step = loop_step("tokens")
        .step(paying_inc(thirty))
        .until(until::max_tokens(100))
        .build();
    let ctx = root(&harness);

    assert_eq!(harness.run(&step, 0, &ctx).await.unwrap(), 4);
    assert_eq!(ctx.tokens().total(), 120);
}

#[tokio::test]
async fn a_loop_without_until_is_an_invalid_step() {
    let harness = harness();
    let calls = counter();
    let step = loop_step("no-until")
        .step(counting_inc("inc", &calls))
        .build();

    let error = harness.run(&step, 0, &root(&harness)).await.unwrap_err();

    assert_eq!(error.code(), "INVALID_STEP");
    assert_eq!(count(&calls), 0);
}

#[tokio::test]
async fn a_custom_predicate_sees_each_iteration() {
    let harness = harness();
    let seen = record::<(u64, Value)>();
    let step = {
        let seen = seen.clone();
        loop_step("custom")
            .step(counting_inc("inc", &counter()))
            .until(until::custom(move |snapshot: &LoopSnapshot<'_>| {
                seen.lock()
                    .unwrap()
                    .push((snapshot.step_count, snapshot.last_output.clone()));
                if snapshot.last_output == &json!(13) {
                    Verdict::stop("thirteen")
                } else {
                    Verdict::go_on()
                }
            }))
            .build()
    };

    assert_eq!(harness.run(&step, 10, &root(&harness)).await.unwrap(), 13);
    assert_eq!(
        recorded(&seen),
        [(1, json!(11)), (2, json!(12)), (3, json!(13))]
    );
}

#[tokio::test]
async fn a_body_of_several_steps_chains_within_each_iteration() {
    let harness = harness();
    let double = run_code("double", |n: i64, _ctx: Context| async move {
        Ok::<_, Never>(n * 2)
    });
    let step = loop_step("inc-then-double")
        .step(counting_inc("inc", &counter()))
        .step(double)
        .until(until::max_steps(2))
        .build();

    // (0 + 1) × 2 = 2, then (2 + 1) × 2 = 6.
    assert_eq!(harness.run(&step, 0, &root(&harness)).await.unwrap(), 6);
}

#[tokio::test]
async fn aborting_inside_the_body_stops_the_loop_with_cancelled() {
    let harness = harness();
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let body = {
        let calls = calls.clone();
        run_code("aborts-second-time", move |n: i64, ctx: Context| {
            if calls.fetch_add(1, Ordering::SeqCst) == 1 {
                ctx.abort(Some("enough".to_owned()));
            }
            async move { Ok::<_, Never>(n + 1) }
        })
    };
    let step = loop_step("abortable")
        .step(body)
        .until(until::never())
        .build();

    let error = harness.run(&step, 0, &root(&harness)).await.unwrap_err();

    assert_eq!(cancelled_reason(error).as_deref(), Some("enough"));
    assert_eq!(count(&calls), 2);
}

#[tokio::test(start_paused = true)]
async fn max_duration_stops_once_the_loop_has_run_long_enough() {
    let harness = harness();
    let calls = counter();
    let slow = {
        let calls = calls.clone();
        run_code("slow", move |n: i64, _ctx: Context| {
            calls.fetch_add(1, Ordering::SeqCst);
            async move {
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                Ok::<_, Never>(n + 1)
            }
        })
    };
    let step = loop_step("timed")
        .step(slow)
        .until(until::max_duration(std::time::Duration::from_secs(3)))
        .build();

    assert_eq!(harness.run(&step, 0, &root(&harness)).await.unwrap(), 3);
    assert_eq!(count(&calls), 3);
}
