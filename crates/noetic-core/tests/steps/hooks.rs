//! `AgentHooks` and the step events around every step.

use noetic_core::{
    AgentHarness, AgentHooks, Context, ContextOptions, FrameworkEvent, StepRef, loop_step,
    run_code, sequence, spawn, until,
};
use noetic_test_support::EventLog;
use serde_json::{Value, json};

use crate::support::{Never, Record, counter, counting_inc, record, recorded, root};

/// Hooks that record `(phase, step id, depth)` and, after a step, its output.
fn recording_hooks(
    calls: &Record<(&'static str, String, u32)>,
    outputs: &Record<(String, Value)>,
) -> AgentHooks {
    let before = calls.clone();
    let after = calls.clone();
    let outputs = outputs.clone();
    AgentHooks::new()
        .before_step(move |step: StepRef, ctx: Context| {
            before
                .lock()
                .unwrap()
                .push(("before", step.id().to_owned(), ctx.depth()));
            async {}
        })
        .after_step(move |step: StepRef, output: Value, ctx: Context| {
            after
                .lock()
                .unwrap()
                .push(("after", step.id().to_owned(), ctx.depth()));
            outputs.lock().unwrap().push((step.id().to_owned(), output));
            async {}
        })
}

#[tokio::test]
async fn hooks_and_events_surround_every_step_in_order() {
    let calls = record();
    let outputs = record();
    let harness = AgentHarness::builder("hooked")
        .hooks(recording_hooks(&calls, &outputs))
        .build()
        .unwrap();
    let log = EventLog::new();
    let ctx = harness.create_context(ContextOptions::new().event_sink(log.sink()));
    let double = run_code("double", |n: i64, _ctx: Context| async move {
        Ok::<_, Never>(n * 2)
    });
    let step = sequence("seq")
        .step(counting_inc("inc", &counter()))
        .step(spawn("sp", double))
        .build();

    assert_eq!(harness.run(&step, 1, &ctx).await.unwrap(), 4);

    let expected = [
        ("before", "seq", 0),
        ("before", "inc", 0),
        ("after", "inc", 0),
        ("before", "sp", 0),
        ("before", "double", 1),
        ("after", "double", 1),
        ("after", "sp", 0),
        ("after", "seq", 0),
    ];
    let calls = recorded(&calls);
    let calls: Vec<(&str, &str, u32)> = calls
        .iter()
        .map(|(phase, id, depth)| (*phase, id.as_str(), *depth))
        .collect();
    assert_eq!(calls, expected);
    assert_eq!(
        recorded(&outputs),
        [
            ("inc".to_owned(), json!(2)),
            ("double".to_owned(), json!(4)),
            ("sp".to_owned(), json!(4)),
            ("seq".to_owned(), json!(4)),
        ]
    );

    let events: Vec<(&str, String)> = log
        .framework()
        .into_iter()
        .filter_map(|event| match event {
            FrameworkEvent::StepStarted { step_id, .. } => Some(("before", step_id)),
            FrameworkEvent::StepCompleted { step_id, .. } => Some(("after", step_id)),
            _ => None,
        })
        .collect();
    let expected_events: Vec<(&str, String)> = expected
        .iter()
        .map(|(phase, id, _)| (*phase, (*id).to_owned()))
        .collect();
    assert_eq!(events, expected_events);
}

#[tokio::test]
async fn after_step_is_not_called_for_a_failing_step() {
    let calls = record();
    let outputs = record();
    let harness = AgentHarness::builder("hooked")
        .hooks(recording_hooks(&calls, &outputs))
        .build()
        .unwrap();
    let step = crate::support::failing("fails");

    harness.run(&step, 0, &root(&harness)).await.unwrap_err();

    let phases: Vec<&str> = recorded(&calls)
        .iter()
        .map(|(phase, _, _)| *phase)
        .collect();
    assert_eq!(phases, ["before"]);
    assert!(recorded(&outputs).is_empty());
}

#[tokio::test]
async fn step_count_counts_composite_steps_too() {
    let harness = crate::support::harness();
    let ctx = root(&harness);
    let step = sequence("seq")
        .step(counting_inc("a", &counter()))
        .step(counting_inc("b", &counter()))
        .build();

    harness.run(&step, 0, &ctx).await.unwrap();
    assert_eq!(ctx.step_count(), 3, "the sequence and its two steps");

    let looped = loop_step("loop")
        .step(counting_inc("inc", &counter()))
        .until(until::max_steps(3))
        .build();
    harness.run(&looped, 0, &ctx).await.unwrap();
    assert_eq!(ctx.step_count(), 3 + 1 + 3, "the loop and three body runs");
}
