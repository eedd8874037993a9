//! `abort` on a session turn (acceptance point 3).

use std::sync::Arc;

use noetic_core::item::Item;
use noetic_core::{
    AbortOptions, Context, Error, ExecuteOptions, FrameworkEvent, Scope, SessionStatus, Spend,
    TokenUsage, run_code,
};
use noetic_test_support::PacedModel;
use tokio::sync::{Semaphore, mpsc};

use crate::support::{
    Events, Gate, Stubborn, guarded, llm_with, paced_builder, paced_harness, text_events,
    tool_call_events, turn_aborts, turn_message_ids,
};

fn abort_options(reason: &str) -> AbortOptions {
    AbortOptions::new().reason(reason)
}

fn tokens(input: u64, output: u64) -> Spend {
    Spend {
        usage: TokenUsage {
            input_tokens: input,
            output_tokens: output,
            ..TokenUsage::default()
        },
        cost: None,
    }
}

#[tokio::test]
async fn abort_mid_stream_cuts_the_stream_keeps_usage_and_input_and_runs_queued_messages() {
    let model = PacedModel::new();
    let gate = Gate::new();
    let harness = paced_builder(&model)
        .agent_graph(llm_with(vec![gate.tool()]))
        .build()
        .unwrap();
    let mut events = Events::subscribe(&harness, Scope::default());
    harness
        .execute("first", ExecuteOptions::default().message_id("m1"))
        .await
        .unwrap();
    // Round 0 finishes (10 in / 5 out) and its tool runs; round 1 is streaming when the abort comes.
    let round0 = guarded("round 0", model.next_call()).await;
    round0.send_all(tool_call_events(&[("c1", "wait")]));
    gate.started().await;
    gate.release();
    let round1 = guarded("round 1", model.next_call()).await;
    let mut partial = text_events("an answer cut short");
    partial.truncate(3);
    round1.send_all(partial);
    harness
        .execute("follow-up", ExecuteOptions::default().message_id("m2"))
        .await
        .unwrap();

    guarded("abort", harness.abort(abort_options("user pressed stop"))).await;
    assert!(round1.is_dropped(), "the running request was cut");
    assert_eq!(
        harness.usage(Scope::default()),
        tokens(10, 5),
        "the finished round stays charged"
    );

    // The queued message still runs, on a history that kept the aborted turn's input and completed
    // items but not the partial answer.
    let follow_up = guarded("the follow-up turn's request", model.next_call()).await;
    assert_eq!(
        follow_up.request.input,
        [
            Item::user_text("first"),
            Item::function_call("c1", "wait", "{}"),
            Item::function_call_output("c1", "released c1"),
            Item::user_text("follow-up"),
        ]
    );
    follow_up.send_all(text_events("follow-up answer"));
    let response = harness.agent_response(Scope::default()).await.unwrap();
    assert_eq!(response.text, "follow-up answer");
    assert_eq!(harness.usage(Scope::default()), tokens(20, 10));

    let seen = events.turns(2).await;
    assert_eq!(turn_message_ids(&seen), [vec!["m1"], vec!["m2"]]);
    let aborts = turn_aborts(&seen);
    assert_eq!(aborts.len(), 1);
    assert_eq!(aborts[0].1, "CANCELLED");
    assert!(aborts[0].0.contains("user pressed stop"), "{}", aborts[0].0);
}

#[tokio::test]
async fn abort_during_tool_calls_answers_the_calls_that_never_ran() {
    let model = PacedModel::new();
    let gate = Gate::new();
    let harness = paced_builder(&model)
        .agent_graph(llm_with(vec![gate.tool()]))
        .build()
        .unwrap();
    harness
        .execute("two calls", ExecuteOptions::default())
        .await
        .unwrap();
    let round0 = guarded("round 0", model.next_call()).await;
    round0.send_all(tool_call_events(&[("c1", "wait"), ("c2", "wait")]));
    assert_eq!(gate.started().await, "c1");
    guarded("abort", harness.abort(AbortOptions::default())).await;

    let error = harness.agent_response(Scope::default()).await.unwrap_err();
    assert!(matches!(error, Error::TurnFailed { .. }), "{error:?}");
    assert_eq!(error.code(), "CANCELLED");
    assert_eq!(gate.runs(), 1, "c2 never ran");
    assert_eq!(
        harness.session_history(Scope::default()),
        [
            Item::user_text("two calls"),
            Item::function_call("c1", "wait", "{}"),
            Item::function_call("c2", "wait", "{}"),
            // c1's tool returned an error when the abort reached it: a failed call.
            Item::function_call_error("c1", "Error: aborted"),
            Item::function_call_output(
                "c2",
                "Tool call not run: the turn was aborted before it ran."
            ),
        ],
        "every call has exactly one output"
    );
    assert_eq!(harness.usage(Scope::default()), tokens(10, 5));
}

#[tokio::test]
async fn abort_drops_a_tool_that_ignores_cancellation() {
    let model = PacedModel::new();
    let stubborn = Stubborn::new();
    let harness = paced_builder(&model)
        .agent_graph(llm_with(vec![stubborn.tool()]))
        .build()
        .unwrap();
    harness
        .execute("go", ExecuteOptions::default())
        .await
        .unwrap();
    let round0 = guarded("round 0", model.next_call()).await;
    round0.send_all(tool_call_events(&[("c1", "stubborn")]));
    assert_eq!(stubborn.started().await, "c1");

    guarded("abort", harness.abort(abort_options("stop"))).await;

    assert!(stubborn.dropped(), "the tool's future was dropped");
    assert_eq!(harness.status(Scope::default()), SessionStatus::Idle);
    let error = harness.agent_response(Scope::default()).await.unwrap_err();
    assert_eq!(error.code(), "CANCELLED");
    assert_eq!(
        harness.session_history(Scope::default()),
        [
            Item::user_text("go"),
            Item::function_call("c1", "stubborn", "{}"),
            Item::function_call_output(
                "c1",
                "Tool call aborted: the run was cancelled while the tool was running."
            ),
        ],
        "the call still has its output"
    );
}

#[tokio::test]
async fn interrupt_drops_a_tool_that_ignores_cancellation_and_starts_the_next_turn() {
    let model = PacedModel::new();
    let stubborn = Stubborn::new();
    let harness = paced_builder(&model)
        .agent_graph(llm_with(vec![stubborn.tool()]))
        .build()
        .unwrap();
    harness
        .execute("go", ExecuteOptions::default())
        .await
        .unwrap();
    let round0 = guarded("round 0", model.next_call()).await;
    round0.send_all(tool_call_events(&[("c1", "stubborn")]));
    stubborn.started().await;

    harness
        .execute(
            "never mind",
            ExecuteOptions::default().delivery_mode(noetic_core::DeliveryMode::Interrupt),
        )
        .await
        .unwrap();

    let next = guarded("the interrupting turn's request", model.next_call()).await;
    assert!(stubborn.dropped(), "the tool's future was dropped");
    assert_eq!(
        next.request.input,
        [
            Item::user_text("go"),
            Item::function_call("c1", "stubborn", "{}"),
            Item::function_call_output(
                "c1",
                "Tool call aborted: the run was cancelled while the tool was running."
            ),
            Item::user_text("never mind"),
        ]
    );
    next.send_all(text_events("ok"));
    assert_eq!(
        harness.agent_response(Scope::default()).await.unwrap().text,
        "ok"
    );
}

#[tokio::test]
async fn abort_returns_at_once_when_nothing_runs() {
    let model = PacedModel::new();
    let harness = paced_harness(&model);
    guarded(
        "abort on an unknown thread",
        harness.abort(AbortOptions::default()),
    )
    .await;
    assert_eq!(harness.session_count(), 0, "abort creates no session");

    harness
        .execute("hi", ExecuteOptions::default())
        .await
        .unwrap();
    guarded("the request", model.next_call())
        .await
        .send_all(text_events("hello"));
    harness.agent_response(Scope::default()).await.unwrap();
    guarded(
        "abort on an idle thread",
        harness.abort(AbortOptions::default()),
    )
    .await;
    assert_eq!(
        harness.agent_response(Scope::default()).await.unwrap().text,
        "hello",
        "aborting an idle thread changes nothing"
    );
}

#[tokio::test]
async fn status_is_aborting_until_the_turn_has_stopped() {
    let (saw_abort_tx, mut saw_abort) = mpsc::unbounded_channel::<()>();
    let (started_tx, mut started) = mpsc::unbounded_channel::<()>();
    let finish = Arc::new(Semaphore::new(0));
    let graph = {
        let finish = finish.clone();
        run_code("slow-to-stop", move |_: String, ctx: Context| {
            let saw_abort = saw_abort_tx.clone();
            let started = started_tx.clone();
            let finish = finish.clone();
            async move {
                let _ = started.send(());
                ctx.cancelled().await;
                let _ = saw_abort.send(());
                // Cleanup takes a while: the turn has not stopped yet.
                finish.acquire().await.expect("open").forget();
                Err::<String, _>(Error::cancelled(ctx.abort_reason()))
            }
        })
    };
    let harness = noetic_core::AgentHarness::builder("agent")
        .agent_graph(graph)
        .build()
        .unwrap();
    let mut events = Events::subscribe(&harness, Scope::default());
    harness
        .execute("work", ExecuteOptions::default())
        .await
        .unwrap();
    guarded("the step to start", started.recv()).await;
    let SessionStatus::Running { turn_id, .. } = harness.status(Scope::default()) else {
        panic!("expected running");
    };
    let aborting = tokio::spawn({
        let harness = harness.clone();
        async move { harness.abort(abort_options("enough")).await }
    });
    guarded("the step to see the abort", saw_abort.recv()).await;
    assert_eq!(
        harness.status(Scope::default()),
        SessionStatus::Aborting {
            turn_id: turn_id.clone()
        }
    );
    assert!(!aborting.is_finished(), "abort waits for the turn to end");
    finish.add_permits(1);
    guarded("abort to return", aborting).await.unwrap();
    assert_eq!(harness.status(Scope::default()), SessionStatus::Idle);
    let seen = events.turn().await;
    assert!(seen.iter().any(|event| matches!(
        &**event,
        noetic_core::StreamEvent::Framework(FrameworkEvent::TurnAborted { turn_id: ended, error_kind: "CANCELLED", .. })
            if *ended == turn_id
    )));
}
