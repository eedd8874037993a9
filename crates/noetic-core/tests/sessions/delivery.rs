//! `execute`, per-thread queues and delivery modes (acceptance point 1, queue part).

use noetic_core::{DeliveryMode, ExecuteOptions, Scope, SessionStatus};
use noetic_test_support::{PacedCall, PacedModel};

use crate::support::{
    Events, guarded, paced_harness, text_events, texts, turn_aborts, turn_message_ids,
};

fn is_running(status: SessionStatus) -> bool {
    matches!(status, SessionStatus::Running { .. })
}

#[tokio::test]
async fn execute_returns_before_the_model_answers() {
    let model = PacedModel::new();
    let harness = paced_harness(&model);
    harness
        .execute("hello", ExecuteOptions::default())
        .await
        .unwrap();
    let call = guarded("the request", model.next_call()).await;
    assert!(is_running(harness.status(Scope::default())));
    assert_eq!(call.request.user_texts(), ["hello"]);
    call.send_all(text_events("hi there"));
    let response = harness.agent_response(Scope::default()).await.unwrap();
    assert_eq!(response.text, "hi there");
    assert_eq!(harness.status(Scope::default()), SessionStatus::Idle);
}

/// Orders two calls as (thread `a`, thread `b`).
fn by_thread(first: PacedCall, second: PacedCall) -> (PacedCall, PacedCall) {
    if first.request.thread_id.as_deref() == Some("a") {
        (first, second)
    } else {
        (second, first)
    }
}

#[tokio::test]
async fn two_threads_run_concurrently_and_keep_their_own_histories() {
    let model = PacedModel::new();
    let harness = paced_harness(&model);
    let on = |thread: &str| ExecuteOptions::default().thread_id(thread);
    harness.execute("a1", on("a")).await.unwrap();
    harness.execute("b1", on("b")).await.unwrap();
    // Both requests are out before either is answered: the threads run at the same time.
    let (call_a, call_b) = by_thread(
        guarded("a request", model.next_call()).await,
        guarded("another request", model.next_call()).await,
    );
    assert_eq!(call_a.request.thread_id.as_deref(), Some("a"));
    assert_eq!(call_b.request.thread_id.as_deref(), Some("b"));
    assert!(is_running(harness.status(Scope::thread("a"))));
    assert!(is_running(harness.status(Scope::thread("b"))));

    // Thread b finishes while thread a still waits for its model.
    call_b.send_all(text_events("answer b1"));
    let response_b = harness.agent_response(Scope::thread("b")).await.unwrap();
    assert_eq!(response_b.text, "answer b1");
    assert!(is_running(harness.status(Scope::thread("a"))));
    call_a.send_all(text_events("answer a1"));
    let response_a = harness.agent_response(Scope::thread("a")).await.unwrap();
    assert_eq!(response_a.text, "answer a1");

    // Second turns see only their own thread's history.
    harness.execute("a2", on("a")).await.unwrap();
    harness.execute("b2", on("b")).await.unwrap();
    let (call_a, call_b) = by_thread(
        guarded("a request", model.next_call()).await,
        guarded("another request", model.next_call()).await,
    );
    assert_eq!(texts(&call_a.request.input), ["a1", "answer a1", "a2"]);
    assert_eq!(texts(&call_b.request.input), ["b1", "answer b1", "b2"]);
    call_a.send_all(text_events("answer a2"));
    call_b.send_all(text_events("answer b2"));
    harness.agent_response(Scope::thread("a")).await.unwrap();
    harness.agent_response(Scope::thread("b")).await.unwrap();
    assert_eq!(
        texts(&harness.session_history(Scope::thread("a"))),
        ["a1", "answer a1", "a2", "answer a2"]
    );
    assert_eq!(
        texts(&harness.session_history(Scope::thread("b"))),
        ["b1", "answer b1", "b2", "answer b2"]
    );
    assert!(harness.session_history(Scope::default()).is_empty());
}

#[tokio::test]
async fn queued_next_turn_messages_coalesce_in_order() {
    let model = PacedModel::new();
    let harness = paced_harness(&model);
    let mut events = Events::subscribe(&harness, Scope::default());
    let send = |id: &'static str| harness.execute(id, ExecuteOptions::default().message_id(id));
    send("m1").await.unwrap();
    let first = guarded("the first request", model.next_call()).await;
    send("m2").await.unwrap();
    send("m3").await.unwrap();
    send("m4").await.unwrap();
    assert_eq!(harness.queue_len(Scope::default()), 3);
    assert_eq!(first.request.user_texts(), ["m1"]);

    first.send_all(text_events("r1"));
    let second = guarded("the second request", model.next_call()).await;
    assert_eq!(second.request.user_texts(), ["m1", "m2", "m3", "m4"]);
    assert_eq!(harness.queue_len(Scope::default()), 0);
    second.send_all(text_events("r2"));
    let response = harness.agent_response(Scope::default()).await.unwrap();
    assert_eq!(response.text, "r2");
    assert_eq!(model.call_count(), 2, "one turn for all queued messages");
    let seen = events.turns(2).await;
    assert_eq!(
        turn_message_ids(&seen),
        [vec!["m1"], vec!["m2", "m3", "m4"]]
    );
}

#[tokio::test]
async fn interrupt_aborts_the_running_turn_and_starts_a_new_one_with_the_message_first() {
    let model = PacedModel::new();
    let harness = paced_harness(&model);
    let mut events = Events::subscribe(&harness, Scope::default());
    harness
        .execute("m1", ExecuteOptions::default().message_id("m1"))
        .await
        .unwrap();
    let first = guarded("the first request", model.next_call()).await;
    let mut answer = text_events("a long answer that never finishes");
    answer.truncate(3); // created, item added, one delta
    first.send_all(answer);
    harness
        .execute("queued", ExecuteOptions::default().message_id("q"))
        .await
        .unwrap();
    harness
        .execute(
            "stop, do this instead",
            ExecuteOptions::default()
                .message_id("i")
                .delivery_mode(DeliveryMode::Interrupt),
        )
        .await
        .unwrap();
    // The running request is cut.
    guarded("the first stream to be dropped", first.dropped()).await;

    let second = guarded("the second request", model.next_call()).await;
    // The aborted turn's input stays in the history (DESIGN §6), its partial answer does not; the new
    // turn begins with the interrupting message, then the one queued before it.
    assert_eq!(
        texts(&second.request.input),
        ["m1", "stop, do this instead", "queued"]
    );
    second.send_all(text_events("done"));
    let response = harness.agent_response(Scope::default()).await.unwrap();
    assert_eq!(response.text, "done");
    assert_eq!(harness.status(Scope::default()), SessionStatus::Idle);

    let seen = events.turns(2).await;
    assert_eq!(turn_message_ids(&seen), [vec!["m1"], vec!["i", "q"]]);
    let aborts = turn_aborts(&seen);
    assert_eq!(aborts.len(), 1);
    assert_eq!(aborts[0].1, "CANCELLED");
    assert!(aborts[0].0.contains("interrupt"), "reason: {}", aborts[0].0);
}

#[tokio::test]
async fn steers_sent_when_idle_start_a_turn() {
    for mode in [DeliveryMode::NextItem, DeliveryMode::BetweenRounds] {
        let model = PacedModel::new();
        let harness = paced_harness(&model);
        let mut events = Events::subscribe(&harness, Scope::default());
        harness
            .execute(
                "steer while idle",
                ExecuteOptions::default()
                    .message_id("s")
                    .delivery_mode(mode),
            )
            .await
            .unwrap();
        let call = guarded("the request", model.next_call()).await;
        assert_eq!(call.request.user_texts(), ["steer while idle"], "{mode:?}");
        call.send_all(text_events("ok"));
        let response = harness.agent_response(Scope::default()).await.unwrap();
        assert_eq!(response.text, "ok");
        assert_eq!(
            turn_message_ids(&events.turn().await),
            [vec!["s"]],
            "{mode:?}"
        );
    }
}
