//! What a session keeps for replay: bounded by bytes as well as by count, compacted when a turn ends
//! (provider events dropped, framework events kept within a small budget), and never at the expense
//! of a subscriber still reading; while nobody subscribes, only a small replay is kept.

use std::sync::Arc;

use futures_util::{FutureExt, StreamExt};
use noetic_core::model::ReasoningKind;
use noetic_core::session::{DEFAULT_EVENT_CAPACITY, IDLE_EVENT_BYTES, Replay};
use noetic_core::{
    AgentHarness, ExecuteOptions, FrameworkEvent, Item, ResponseEvent, Scope, SessionChunk,
    StreamEvent,
};
use noetic_test_support::{ScriptedModel, ScriptedResponse};

use crate::support::{
    Events, Gate, framework, guarded, is_turn_end, llm_with, run_turn, scripted_harness,
    tool_call_events,
};

fn is_sdk(event: &StreamEvent) -> bool {
    matches!(event, StreamEvent::Sdk(_))
}

fn skipped(events: &[Arc<StreamEvent>]) -> u64 {
    events
        .iter()
        .map(|event| match **event {
            StreamEvent::Lagged { skipped } => skipped,
            _ => 0,
        })
        .sum()
}

#[tokio::test]
async fn a_finished_turns_provider_events_are_not_kept_for_replay() {
    let answer: String = "word ".repeat(100);
    let model = ScriptedModel::with_responses([ScriptedResponse::text_in_deltas(&answer, 1)]);
    let harness = scripted_harness(&model);
    let mut early = Events::subscribe(&harness, Scope::default());
    run_turn(&harness, "talk").await;
    let everything = early.turn().await;
    assert!(early.ready().is_empty());
    assert!(everything.iter().filter(|event| is_sdk(event)).count() > 500);

    let mut late = Events::subscribe(&harness, Scope::default());
    let replay = late.ready();
    assert!(
        !replay.iter().any(|event| is_sdk(event)),
        "no provider event of a finished turn is kept"
    );
    assert_eq!(
        framework(&replay),
        framework(&everything),
        "its framework events are"
    );
    // Where provider events were dropped, the replay says how many: no silent gap.
    let kept = replay
        .iter()
        .filter(|event| !matches!(***event, StreamEvent::Lagged { .. }))
        .count() as u64;
    assert_eq!(kept + skipped(&replay), everything.len() as u64);
}

#[tokio::test]
async fn a_subscriber_behind_when_its_turn_ends_still_reads_every_delta() {
    let answer: String = "abcdefghij".repeat(30);
    let model = ScriptedModel::with_responses([ScriptedResponse::text_in_deltas(&answer, 1)]);
    let harness = scripted_harness(&model);
    let mut text = harness.text_stream(Scope::default());
    let mut events = harness.events(Scope::default());
    run_turn(&harness, "spell").await;

    // The turn has ended (and compacted) while neither subscriber read anything.
    let mut chunks = Vec::new();
    while let Some(Some(chunk)) = text.next().now_or_never() {
        chunks.push(chunk);
    }
    assert!(
        !chunks
            .iter()
            .any(|chunk| matches!(chunk, SessionChunk::Lagged { .. })),
        "nothing missed"
    );
    let read: String = chunks
        .iter()
        .filter_map(|chunk| match chunk {
            SessionChunk::Data(delta) => Some(delta.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(read, answer);
    let mut all = Vec::new();
    while let Some(Some(event)) = events.next().now_or_never() {
        all.push(event);
    }
    assert!(
        !all.iter()
            .any(|event| matches!(**event, StreamEvent::Lagged { .. }))
    );
    assert_eq!(all.iter().filter(|event| is_sdk(event)).count(), 300 + 4);
}

#[tokio::test]
async fn the_replay_kept_by_an_idle_session_is_bounded_in_bytes() {
    let answer = "x".repeat(2_000);
    let model = ScriptedModel::responding(move |_| ScriptedResponse::text(&answer));
    let harness = scripted_harness(&model);
    let mut early = Events::subscribe(&harness, Scope::default());
    let mut everything = Vec::new();
    for turn in 0..20 {
        run_turn(&harness, &format!("turn {turn}")).await;
        everything.extend(early.turn().await);
    }
    assert!(early.ready().is_empty());
    let last_turn_start = everything
        .iter()
        .rposition(|event| {
            matches!(
                **event,
                StreamEvent::Framework(FrameworkEvent::TurnStarted { .. })
            )
        })
        .unwrap();
    let last_turn = framework(&everything[last_turn_start..]);

    let replay = Events::subscribe(&harness, Scope::default()).ready();
    let replayed = framework(&replay);
    let turns = replayed
        .iter()
        .filter(|event| matches!(event, FrameworkEvent::TurnStarted { .. }))
        .count();
    assert!(
        (1..20).contains(&turns),
        "only the latest turns are kept: {turns}"
    );
    assert!(
        replayed.ends_with(&last_turn),
        "the last turn's framework events are kept whole"
    );
    let item_bytes: usize = replayed
        .iter()
        .filter_map(|event| match event {
            FrameworkEvent::ItemAppended { item } => item.text().map(|text| text.len()),
            _ => None,
        })
        .sum();
    assert!(
        item_bytes <= IDLE_EVENT_BYTES,
        "{item_bytes} bytes of items kept"
    );
    assert_eq!(
        harness.session_history(Scope::default()).len(),
        40,
        "the history keeps every item"
    );
}

#[tokio::test]
async fn a_slow_subscriber_lags_once_the_retained_events_pass_the_byte_bound() {
    // 200 deltas of 4 KiB: far fewer events than the count bound, far more bytes than the byte bound.
    let answer: String = "y".repeat(200 * 4096);
    let model = ScriptedModel::with_responses([ScriptedResponse::text_in_deltas(&answer, 4096)]);
    let harness = scripted_harness(&model);
    let mut slow = harness.events(Scope::default());
    run_turn(&harness, "a lot").await;
    let first = guarded("the first event", slow.next()).await.unwrap();
    let StreamEvent::Lagged { skipped } = *first else {
        panic!("expected lagged first, got {first:?}");
    };
    let mut rest = Vec::new();
    while let Some(Some(event)) = slow.next().now_or_never() {
        rest.push(event);
    }
    assert!(rest.len() + (skipped as usize) < DEFAULT_EVENT_CAPACITY);
    let deltas: usize = rest
        .iter()
        .filter_map(|event| match &**event {
            StreamEvent::Sdk(ResponseEvent::OutputTextDelta { delta, .. }) => Some(delta.len()),
            _ => None,
        })
        .sum();
    assert!(deltas < answer.len() / 2, "{deltas} bytes of deltas kept");
    assert!(is_turn_end(rest.last().unwrap()), "up to the turn's end");
    // The turn itself lost nothing.
    let history = harness.session_history(Scope::default());
    assert_eq!(history.last().and_then(Item::text), Some(answer));
}

#[tokio::test]
async fn while_nobody_subscribes_a_running_turn_keeps_only_a_small_replay() {
    // Round 1: 300 reasoning deltas of 100 bytes (about 140 KiB retained), then a call to `wait`.
    let mut first = tool_call_events(&[("c1", "wait")]);
    let reasoning = (0..300).map(|_| ResponseEvent::ReasoningDelta {
        kind: ReasoningKind::Text,
        output_index: 9,
        part_index: 0,
        delta: "r".repeat(100),
    });
    first.splice(1..1, reasoning);
    let model = ScriptedModel::with_responses([
        ScriptedResponse::events(first),
        ScriptedResponse::text("done"),
    ]);
    let gate = Gate::new();
    let harness = AgentHarness::builder("agent")
        .provider("scripted", model.clone())
        .agent_graph(llm_with(vec![gate.tool()]))
        .build()
        .unwrap();
    harness
        .execute("think", ExecuteOptions::default())
        .await
        .unwrap();
    // Every event of round 1 is published once its tool call runs.
    gate.started().await;
    let mut joined = Events::new(harness.events_with(Scope::default(), Replay::CurrentTurn));
    let replay = joined.ready();
    let StreamEvent::Lagged { skipped } = *replay[0] else {
        panic!("expected lagged first, got {:?}", replay[0]);
    };
    assert!(skipped > 150, "most of the round was not kept: {skipped}");
    let kept = replay.iter().filter(|event| is_sdk(event)).count();
    assert!(kept < 150, "{kept} provider events kept");
    // A subscriber now reads everything that follows.
    gate.release();
    let rest = joined.turn().await;
    assert!(
        !rest
            .iter()
            .any(|event| matches!(**event, StreamEvent::Lagged { .. }))
    );
    assert_eq!(
        harness.agent_response(Scope::default()).await.unwrap().text,
        "done"
    );
}
