//! Sessions through the public API: `execute`, queues, delivery modes, steering and streams, with a
//! paced model so each test decides when every stream event is emitted.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

use futures_util::StreamExt;
use noetic_core::item::Item;
use noetic_core::{
    AgentHarness, DeliveryMode, ExecuteOptions, FrameworkEvent, ResponseEvent, Scope,
    SessionStatus, StreamEvent, call_model,
};
use noetic_test_support::{PacedModel, ScriptedResponse};

fn harness(model: &PacedModel) -> AgentHarness {
    AgentHarness::builder("agent")
        .provider("paced", model.clone())
        .agent_graph(call_model("llm").model("m"))
        .build()
        .unwrap()
}

/// The events of a text answer, split so a test can stop between items.
fn text_events(text: &str) -> Vec<ResponseEvent> {
    ScriptedResponse::text(text).into_events()
}

#[tokio::test]
async fn execute_returns_before_the_model_answers() {
    let model = PacedModel::new();
    let harness = harness(&model);
    harness
        .execute("hello", ExecuteOptions::default())
        .await
        .unwrap();
    let call = model.next_call().await;
    assert!(matches!(
        harness.status(Scope::default()),
        SessionStatus::Running { .. }
    ));
    assert_eq!(call.request.user_texts(), ["hello"]);
    call.send_all(text_events("hi there"));
    let response = harness.agent_response(Scope::default()).await.unwrap();
    assert_eq!(response.text, "hi there");
    assert_eq!(harness.status(Scope::default()), SessionStatus::Idle);
}

#[tokio::test]
async fn a_next_item_steer_cuts_the_round_at_the_next_item_done() {
    let model = PacedModel::new();
    let harness = harness(&model);
    let mut events = harness.events(Scope::default());
    harness
        .execute("write two paragraphs", ExecuteOptions::default())
        .await
        .unwrap();
    let first = model.next_call().await;
    // The model streams a reasoning item, then starts a message.
    let mut stream = text_events("first paragraph");
    let completed = stream.pop().unwrap();
    let done = stream.pop().unwrap();
    first.send_all(stream); // created, added, deltas: the message is still open
    harness
        .execute(
            Item::user_text("use bullet points"),
            ExecuteOptions::default()
                .delivery_mode(DeliveryMode::NextItem)
                .message_id("steer-1"),
        )
        .await
        .unwrap();
    first.send(done); // item_done: the steer applies here and the stream is cut
    first.dropped().await;
    drop(completed);
    let second = model.next_call().await;
    let texts: Vec<String> = second.request.input.iter().filter_map(Item::text).collect();
    assert_eq!(
        texts,
        [
            "write two paragraphs",
            "first paragraph",
            "use bullet points"
        ]
    );
    second.send_all(text_events("- done"));
    let response = harness.agent_response(Scope::default()).await.unwrap();
    assert_eq!(response.text, "- done");
    let mut applied = None;
    while let Some(event) = events.next().await {
        if let StreamEvent::Framework(FrameworkEvent::SteerApplied {
            message_ids,
            point,
            round,
        }) = &*event
        {
            applied = Some((message_ids.clone(), *point, *round));
        }
        if let StreamEvent::Framework(FrameworkEvent::TurnCompleted { .. }) = &*event {
            break;
        }
    }
    assert_eq!(
        applied,
        Some((
            vec!["steer-1".to_owned()],
            noetic_core::SteerPoint::ItemDone,
            0
        ))
    );
}
