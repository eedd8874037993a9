//! Session streams across turns, and lag (acceptance point 2). `emit(false)` is scenario 17, item
//! snapshots scenarios 22 and 23 (see `scenarios.rs`).

use std::sync::Arc;

use futures_util::stream::BoxStream;
use futures_util::{FutureExt, StreamExt};
use noetic_core::model::ReasoningKind;
use noetic_core::session::DEFAULT_EVENT_CAPACITY;
use noetic_core::{
    ExecuteOptions, FrameworkEvent, ResponseEvent, Scope, SessionChunk, StreamEvent,
};
use noetic_test_support::{PacedModel, ScriptedModel, ScriptedResponse};

use crate::support::{
    Events, guarded, is_turn_end, paced_harness, scripted_harness, sdk, text_events,
    turn_message_ids,
};

/// Every chunk available right now.
fn drain(stream: &mut BoxStream<'static, SessionChunk<String>>) -> Vec<SessionChunk<String>> {
    let mut seen = Vec::new();
    while let Some(Some(chunk)) = stream.next().now_or_never() {
        seen.push(chunk);
    }
    seen
}

/// A label per event: the framework event's type, or `sdk:<wire type>`.
fn labels(events: &[Arc<StreamEvent>]) -> Vec<String> {
    events
        .iter()
        .map(|event| match &**event {
            StreamEvent::Framework(event) => event.event_type().to_owned(),
            StreamEvent::Sdk(event) => format!("sdk:{}", event.event_type()),
            StreamEvent::Lagged { skipped } => format!("lagged:{skipped}"),
            _ => "other".to_owned(),
        })
        .collect()
}

#[tokio::test]
async fn a_subscriber_made_before_the_first_execute_sees_every_event_of_two_turns_in_order() {
    let model = PacedModel::new();
    let harness = paced_harness(&model);
    let mut events = Events::subscribe(&harness, Scope::default());
    for (message, answer) in [("one", "first answer"), ("two", "second answer")] {
        harness
            .execute(message, ExecuteOptions::default().message_id(message))
            .await
            .unwrap();
        let call = guarded("the request", model.next_call()).await;
        call.send_all(text_events(answer));
        harness.agent_response(Scope::default()).await.unwrap();
    }
    let seen = events.turns(2).await;
    assert!(events.ready().is_empty(), "nothing after the second turn");

    let one_turn = [
        "turn_started",
        "item_appended", // the user's message
        "step_started",
        "model_call_started",
        "model_call_first_event",
        "sdk:response.created",
        "sdk:response.output_item.added",
        "sdk:response.output_text.delta",
        "sdk:response.output_item.done",
        "sdk:response.completed",
        "model_call_completed",
        "item_appended", // the answer
        "step_completed",
        "turn_completed",
    ];
    assert_eq!(labels(&seen), [one_turn, one_turn].concat());
    // The provider events are exactly those the model sent, in order.
    assert_eq!(
        sdk(&seen),
        [text_events("first answer"), text_events("second answer")].concat()
    );
    assert_eq!(turn_message_ids(&seen), [vec!["one"], vec!["two"]]);
}

#[tokio::test]
async fn the_text_stream_yields_exactly_the_deltas() {
    let mut first = ScriptedResponse::text_in_deltas("hello world", 3).into_events();
    // A reasoning delta goes to the reasoning stream, not the text stream.
    first.insert(
        1,
        ResponseEvent::ReasoningDelta {
            kind: ReasoningKind::Summary,
            output_index: 9,
            part_index: 0,
            delta: "thinking".into(),
        },
    );
    let model = ScriptedModel::with_responses([
        ScriptedResponse::events(first),
        ScriptedResponse::text_in_deltas("second turn", 4),
    ]);
    let harness = scripted_harness(&model);
    let mut text = harness.text_stream(Scope::default());
    let mut reasoning = harness.reasoning_stream(Scope::default());
    for message in ["a", "b"] {
        harness
            .execute(message, ExecuteOptions::default())
            .await
            .unwrap();
        harness.agent_response(Scope::default()).await.unwrap();
    }
    let data = |chunks: Vec<SessionChunk<String>>| -> Vec<String> {
        chunks
            .into_iter()
            .filter_map(|chunk| match chunk {
                SessionChunk::Data(delta) => Some(delta),
                SessionChunk::Lagged { skipped } => panic!("lagged by {skipped}"),
                _ => None,
            })
            .collect()
    };
    let expected = ["hel", "lo ", "wor", "ld", "seco", "nd t", "urn"];
    assert_eq!(data(drain(&mut text)), expected);
    assert_eq!(
        data(drain(&mut reasoning)),
        ["thinking"],
        "no other reasoning"
    );
}

#[tokio::test]
async fn a_slow_subscriber_gets_lagged_while_the_turn_finishes_unimpeded() {
    let text: String = "abcdefghij".chars().cycle().take(5_000).collect();
    let model = ScriptedModel::with_responses([ScriptedResponse::text_in_deltas(&text, 1)]);
    let harness = scripted_harness(&model);
    // Subscribed before the turn and never polled while it runs.
    let mut slow = harness.events(Scope::default());
    harness
        .execute("spell it out", ExecuteOptions::default())
        .await
        .unwrap();
    // The turn completes without waiting for the slow subscriber.
    let response = guarded("the response", harness.agent_response(Scope::default()))
        .await
        .unwrap();
    assert_eq!(response.text, text);

    // The first thing the slow subscriber reads is an explicit lag notice.
    let first = guarded("the lag notice", slow.next()).await.unwrap();
    let StreamEvent::Lagged { skipped } = *first else {
        panic!("expected lagged first, got {first:?}");
    };
    let mut retained = Vec::new();
    while let Some(Some(event)) = slow.next().now_or_never() {
        retained.push(event);
    }
    // Then it resumes at the oldest retained event, with no further gap, up to the turn's end.
    assert!(retained.len() <= DEFAULT_EVENT_CAPACITY);
    assert!(is_turn_end(retained.last().unwrap()));
    let deltas: String = sdk(&retained)
        .into_iter()
        .filter_map(|event| match event {
            ResponseEvent::OutputTextDelta { delta, .. } => Some(delta),
            _ => None,
        })
        .collect();
    assert!(!deltas.is_empty() && deltas.len() < text.len());
    assert!(
        text.ends_with(&deltas),
        "the retained deltas are contiguous"
    );
    // 5,000 deltas and the turn's other events did not fit: what it missed is counted exactly.
    let missed_deltas = (text.len() - deltas.len()) as u64;
    assert!(
        skipped >= missed_deltas,
        "skipped {skipped} < {missed_deltas}"
    );
    assert!(
        skipped < missed_deltas + 10,
        "only the turn's first few framework events besides the deltas: skipped {skipped}"
    );

    // Live again: the next turn's events arrive normally.
    model.push(ScriptedResponse::text("more"));
    harness
        .execute("again", ExecuteOptions::default())
        .await
        .unwrap();
    let next = guarded("the next turn's first event", slow.next())
        .await
        .unwrap();
    assert!(matches!(
        &*next,
        StreamEvent::Framework(FrameworkEvent::TurnStarted { .. })
    ));
    assert_eq!(
        harness.agent_response(Scope::default()).await.unwrap().text,
        "more"
    );
}
