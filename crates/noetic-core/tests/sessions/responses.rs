//! `status` with queued work, empty input, and `agent_response` for a thread that never ran.

use std::time::Duration;

use noetic_core::item::Item;
use noetic_core::{
    DEFAULT_THREAD, DeliveryMode, Error, ExecuteOptions, Input, Scope, SessionStatus,
};
use noetic_test_support::{PacedModel, ScriptedModel, ScriptedResponse};

use crate::support::{echo_model, guarded, paced_harness, scripted_harness, text_events};

#[tokio::test]
async fn a_session_with_a_queued_message_is_not_idle() {
    let model = echo_model();
    let harness = scripted_harness(&model);
    harness
        .execute("hello", ExecuteOptions::default())
        .await
        .unwrap();
    // The runner has not had a chance to start the turn yet (nothing has yielded to it).
    assert_eq!(harness.queue_len(Scope::default()), 1);
    assert_eq!(
        harness.status(Scope::default()),
        SessionStatus::Queued { queued: 1 }
    );
    harness.agent_response(Scope::default()).await.unwrap();
    assert_eq!(harness.status(Scope::default()), SessionStatus::Idle);
}

#[tokio::test]
async fn a_running_session_with_a_follow_up_queued_reports_running() {
    let model = PacedModel::new();
    let harness = paced_harness(&model);
    harness
        .execute("one", ExecuteOptions::default())
        .await
        .unwrap();
    let call = guarded("the request", model.next_call()).await;
    harness
        .execute("two", ExecuteOptions::default())
        .await
        .unwrap();
    assert!(matches!(
        harness.status(Scope::default()),
        SessionStatus::Running { .. }
    ));
    assert_eq!(harness.queue_len(Scope::default()), 1);
    call.send_all(text_events("first"));
    let second = guarded("the follow-up's request", model.next_call()).await;
    second.send_all(text_events("second"));
    guarded("the response", harness.agent_response(Scope::default()))
        .await
        .unwrap();
    assert_eq!(harness.status(Scope::default()), SessionStatus::Idle);
}

fn assert_invalid_input(error: &Error) {
    assert_eq!(error.code(), "INVALID_ARGUMENT");
    assert!(
        matches!(
            error,
            Error::InvalidArgument {
                argument: "input",
                ..
            }
        ),
        "{error:?}"
    );
    assert!(error.to_string().contains("input"), "{error}");
}

#[tokio::test]
async fn empty_input_is_rejected_before_anything_is_queued_or_requested() {
    let model = ScriptedModel::with_responses([ScriptedResponse::text("paid")]);
    let harness = scripted_harness(&model);
    let empty: [Input; 3] = [
        Input::from(""),
        Input::from(String::new()),
        Input::from(Vec::<Item>::new()),
    ];
    for input in empty {
        for mode in [
            DeliveryMode::NextTurn,
            DeliveryMode::NextItem,
            DeliveryMode::Interrupt,
        ] {
            let error = harness
                .execute(input.clone(), ExecuteOptions::default().delivery_mode(mode))
                .await
                .unwrap_err();
            assert_invalid_input(&error);
        }
    }
    assert_eq!(harness.queue_len(Scope::default()), 0);
    assert_eq!(harness.status(Scope::default()), SessionStatus::Idle);
    harness.wait_idle().await;
    assert_eq!(model.request_count(), 0, "no paid request");
    assert_eq!(harness.session_count(), 0, "no session was made");
}

#[tokio::test]
async fn empty_input_does_not_interrupt_a_running_turn() {
    let model = PacedModel::new();
    let harness = paced_harness(&model);
    harness
        .execute("one", ExecuteOptions::default())
        .await
        .unwrap();
    let call = guarded("the request", model.next_call()).await;
    let error = harness
        .execute(
            "",
            ExecuteOptions::default().delivery_mode(DeliveryMode::Interrupt),
        )
        .await
        .unwrap_err();
    assert_invalid_input(&error);
    assert!(!call.is_dropped(), "the running turn goes on");
    call.send_all(text_events("answer"));
    let response = guarded("the response", harness.agent_response(Scope::default()))
        .await
        .unwrap();
    assert_eq!(response.text, "answer");
    assert_eq!(model.call_count(), 1);
}

#[tokio::test]
async fn agent_response_for_a_thread_that_never_received_a_message_is_not_found() {
    let model = echo_model();
    let harness = scripted_harness(&model);
    let error = guarded(
        "agent_response",
        harness.agent_response(Scope::thread("nobody")),
    )
    .await
    .unwrap_err();
    assert_eq!(error.code(), "NOT_FOUND");
    assert!(error.to_string().contains("nobody"), "{error}");
    assert_eq!(harness.session_count(), 0, "no session was made");

    // A thread someone only subscribed to has still received nothing.
    let _events = harness.events(Scope::thread("watched"));
    let error = guarded(
        "agent_response",
        harness.agent_response(Scope::thread("watched")),
    )
    .await
    .unwrap_err();
    assert_eq!(error.code(), "NOT_FOUND");
}

#[tokio::test(start_paused = true)]
async fn agent_response_for_a_seeded_thread_waits_for_its_first_turn() {
    let model = echo_model();
    let harness = scripted_harness(&model);
    harness.seed_session_history("seeded", vec![Item::user_text("from disk")]);
    let scope = Scope::thread("seeded");
    // Seeded but never run: it waits (under paused time, a minute passes at once).
    assert!(
        tokio::time::timeout(
            Duration::from_secs(60),
            harness.agent_response(scope.clone())
        )
        .await
        .is_err()
    );
    let waiting = tokio::spawn({
        let harness = harness.clone();
        let scope = scope.clone();
        async move { harness.agent_response(scope).await }
    });
    harness
        .execute("hello", ExecuteOptions::default().thread_id("seeded"))
        .await
        .unwrap();
    let response = guarded("the first turn", waiting).await.unwrap().unwrap();
    assert_eq!(response.text, "echo: hello");
}

#[tokio::test]
async fn agent_response_right_after_execute_waits_for_the_first_turn() {
    let model = echo_model();
    let harness = scripted_harness(&model);
    harness
        .execute("hi", ExecuteOptions::default().thread_id("fresh"))
        .await
        .unwrap();
    let response = guarded(
        "the first turn",
        harness.agent_response(Scope::thread("fresh")),
    )
    .await
    .unwrap();
    assert_eq!(response.text, "echo: hi");
}

#[tokio::test]
async fn the_last_response_keeps_its_turns_items_after_the_history_is_seeded_again() {
    let model = echo_model();
    let harness = scripted_harness(&model);
    harness
        .execute("hi", ExecuteOptions::default())
        .await
        .unwrap();
    let first = harness.agent_response(Scope::default()).await.unwrap();
    assert_eq!(first.items.len(), 2);
    assert_eq!(first.text, "echo: hi");
    harness.seed_session_history(DEFAULT_THREAD, vec![Item::user_text("replaced")]);
    let again = harness.agent_response(Scope::default()).await.unwrap();
    assert_eq!(
        again, first,
        "the turn's own conversation, not the new history"
    );
    assert_eq!(
        harness.session_history(Scope::default()),
        [Item::user_text("replaced")]
    );
}
