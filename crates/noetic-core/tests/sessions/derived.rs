//! The derived streams (`text_stream`, `reasoning_stream`, `item_stream`): turn boundaries, "from now
//! on" by default, replay on request, and an explicit lag marker instead of a silent gap.

use futures_util::stream::BoxStream;
use futures_util::{FutureExt, StreamExt};
use noetic_core::model::ReasoningKind;
use noetic_core::session::Replay;
use noetic_core::{
    ExecuteOptions, FrameworkEvent, ItemSnapshot, ResponseEvent, Scope, SessionChunk, StreamEvent,
    TurnOutcome,
};
use noetic_test_support::{PacedModel, ScriptedModel, ScriptedResponse};

use crate::support::{Events, guarded, paced_harness, run_turn, scripted_harness, text_events};

/// Every chunk available right now.
fn drain<T>(stream: &mut BoxStream<'static, SessionChunk<T>>) -> Vec<SessionChunk<T>> {
    let mut seen = Vec::new();
    while let Some(Some(chunk)) = stream.next().now_or_never() {
        seen.push(chunk);
    }
    seen
}

/// The concatenated `Data` of `chunks`.
fn text_of(chunks: &[SessionChunk<String>]) -> String {
    chunks
        .iter()
        .filter_map(|chunk| match chunk {
            SessionChunk::Data(text) => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

/// The turn ids of the `turn_started` events among `events`.
fn started_turns(events: &[std::sync::Arc<StreamEvent>]) -> Vec<String> {
    events
        .iter()
        .filter_map(|event| match &**event {
            StreamEvent::Framework(FrameworkEvent::TurnStarted { turn_id, .. }) => {
                Some(turn_id.clone())
            }
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn an_idle_text_subscriber_behind_nine_thousand_deltas_gets_a_lag_marker_not_a_silent_gap() {
    let text: String = "abcdefghij".chars().cycle().take(9_000).collect();
    let model = ScriptedModel::with_responses([ScriptedResponse::text_in_deltas(&text, 1)]);
    let harness = scripted_harness(&model);
    // Subscribed before the turn and never polled while it runs.
    let mut stream = harness.text_stream(Scope::default());
    run_turn(&harness, "spell it out").await;

    let chunks = drain(&mut stream);
    // The turn's start was among the events the ring dropped: the first chunk says what was missed.
    let SessionChunk::Lagged { skipped } = chunks[0] else {
        panic!("expected a lag marker first, got {:?}", chunks[0]);
    };
    assert!(skipped > 0);
    let after = text_of(&chunks);
    assert!(!after.is_empty() && after.len() < text.len());
    assert!(
        text.ends_with(&after),
        "what follows the marker is contiguous"
    );
    assert_eq!(
        chunks
            .iter()
            .filter(|chunk| matches!(chunk, SessionChunk::Lagged { .. }))
            .count(),
        1,
        "one gap, one marker"
    );
    assert!(matches!(
        chunks.last().unwrap(),
        SessionChunk::TurnEnded {
            outcome: TurnOutcome::Completed,
            ..
        }
    ));
}

#[tokio::test]
async fn the_reasoning_and_item_streams_report_lag_too() {
    let mut events = ScriptedResponse::text_in_deltas("answer", 1).into_events();
    let reasoning = (0..5_000).map(|_| ResponseEvent::ReasoningDelta {
        kind: ReasoningKind::Text,
        output_index: 9,
        part_index: 0,
        delta: "r".into(),
    });
    events.splice(1..1, reasoning);
    let model = ScriptedModel::with_responses([ScriptedResponse::events(events)]);
    let harness = scripted_harness(&model);
    let mut reasoning = harness.reasoning_stream(Scope::default());
    let mut items = harness.item_stream(Scope::default());
    run_turn(&harness, "think hard").await;

    let reasoning = drain(&mut reasoning);
    assert!(
        matches!(reasoning[0], SessionChunk::Lagged { skipped } if skipped > 0),
        "{:?}",
        reasoning[0]
    );
    let items = drain(&mut items);
    assert!(
        matches!(items[0], SessionChunk::Lagged { skipped } if skipped > 0),
        "{:?}",
        items[0]
    );
    // The answer, streamed after the gap, still arrives complete.
    assert!(items.iter().any(|chunk| matches!(
        chunk,
        SessionChunk::Data(ItemSnapshot { item, is_complete: true, .. })
            if item.text().as_deref() == Some("answer")
    )));
}

#[tokio::test]
async fn a_text_stream_made_before_turn_four_yields_only_turn_four_between_its_boundaries() {
    let model = ScriptedModel::responding(|request| {
        let last = request.user_texts().pop().unwrap_or_default();
        ScriptedResponse::text_in_deltas(&format!("answer to {last}"), 4)
    });
    let harness = scripted_harness(&model);
    let mut events = Events::subscribe(&harness, Scope::default());
    for message in ["one", "two", "three"] {
        run_turn(&harness, message).await;
    }
    events.turns(3).await;

    let mut text = harness.text_stream(Scope::default());
    assert!(drain(&mut text).is_empty(), "no replay of turns 1–3");
    run_turn(&harness, "four").await;
    let turn_four = started_turns(&events.turn().await);

    let chunks = drain(&mut text);
    let SessionChunk::TurnStarted {
        turn_id,
        message_ids,
    } = &chunks[0]
    else {
        panic!("expected the turn's start first, got {:?}", chunks[0]);
    };
    assert_eq!(turn_four, std::slice::from_ref(turn_id));
    assert_eq!(message_ids.len(), 1);
    assert_eq!(
        chunks.last().unwrap(),
        &SessionChunk::TurnEnded {
            turn_id: turn_id.clone(),
            outcome: TurnOutcome::Completed,
        }
    );
    assert_eq!(text_of(&chunks), "answer to four");
    assert!(
        chunks[1..chunks.len() - 1]
            .iter()
            .all(|chunk| matches!(chunk, SessionChunk::Data(_))),
        "only text between the boundaries: {chunks:?}"
    );
}

#[tokio::test]
async fn a_failed_turn_ends_its_derived_streams_with_its_error_code() {
    let model =
        ScriptedModel::with_responses([ScriptedResponse::provider_error(Some(400), "bad request")]);
    let harness = scripted_harness(&model);
    let mut text = harness.text_stream(Scope::default());
    harness
        .execute("hi", ExecuteOptions::default())
        .await
        .unwrap();
    assert!(harness.agent_response(Scope::default()).await.is_err());
    let chunks = drain(&mut text);
    assert_eq!(chunks.len(), 2, "{chunks:?}");
    let SessionChunk::TurnEnded {
        outcome: TurnOutcome::Failed { error_kind, reason },
        ..
    } = &chunks[1]
    else {
        panic!("expected a failed end, got {:?}", chunks[1]);
    };
    assert_eq!(*error_kind, "PROVIDER_ERROR");
    assert!(reason.contains("bad request"), "{reason}");
}

#[tokio::test]
async fn joining_a_running_turn_with_current_turn_replay_yields_it_from_its_start() {
    let model = PacedModel::new();
    let harness = paced_harness(&model);
    run_turn_paced(&harness, &model, "earlier", "earlier answer").await;

    harness
        .execute("now", ExecuteOptions::default())
        .await
        .unwrap();
    let call = guarded("the request", model.next_call()).await;
    let mut events = ScriptedResponse::text_in_deltas("hello world", 5)
        .into_events()
        .into_iter();
    // Three events in (created, item added, the first delta), then the UI joins, then the rest.
    call.send_all(events.by_ref().take(3));
    let mut watcher = harness.events(Scope::default());
    guarded("the first delta to be published", async {
        loop {
            let event = watcher.next().await.unwrap();
            if matches!(&*event, StreamEvent::Sdk(sdk) if matches!(sdk, ResponseEvent::OutputTextDelta { .. }))
            {
                break;
            }
        }
    })
    .await;
    let mut joined = harness.text_stream_with(Scope::default(), Replay::CurrentTurn);
    let mut from_now = harness.text_stream(Scope::default());
    call.send_all(events);
    guarded("the response", harness.agent_response(Scope::default()))
        .await
        .unwrap();

    let joined = drain(&mut joined);
    assert!(matches!(joined[0], SessionChunk::TurnStarted { .. }));
    assert_eq!(
        text_of(&joined),
        "hello world",
        "the running turn from its start"
    );
    let from_now = drain(&mut from_now);
    assert!(
        !from_now
            .iter()
            .any(|chunk| matches!(chunk, SessionChunk::TurnStarted { .. })),
        "from now on: the turn had started before"
    );
    assert_eq!(text_of(&from_now), " world");
    assert!(matches!(
        from_now.last().unwrap(),
        SessionChunk::TurnEnded { .. }
    ));
}

async fn run_turn_paced(
    harness: &noetic_core::AgentHarness,
    model: &PacedModel,
    message: &str,
    answer: &str,
) {
    harness
        .execute(message, ExecuteOptions::default())
        .await
        .unwrap();
    let call = guarded("the request", model.next_call()).await;
    call.send_all(text_events(answer));
    guarded("the response", harness.agent_response(Scope::default()))
        .await
        .unwrap();
}

#[tokio::test]
async fn events_with_no_replay_start_from_now_and_by_default_replay_what_is_retained() {
    let model = ScriptedModel::with_responses([
        ScriptedResponse::text("first"),
        ScriptedResponse::text("second"),
    ]);
    let harness = scripted_harness(&model);
    run_turn(&harness, "one").await;
    let mut replayed = Events::new(harness.events(Scope::default()));
    let mut live = Events::new(harness.events_with(Scope::default(), Replay::None));
    assert!(live.ready().is_empty(), "nothing before now");
    let replay = replayed.ready();
    assert_eq!(
        started_turns(&replay).len(),
        1,
        "the default replays turn one"
    );
    run_turn(&harness, "two").await;
    let seen = live.turn().await;
    assert_eq!(started_turns(&seen).len(), 1);
    assert!(matches!(
        &*seen[0],
        StreamEvent::Framework(FrameworkEvent::TurnStarted { .. })
    ));
}
