//! The event-log section of the conformance suite: a thread's durable event log
//! (`AgentHarnessBuilder::event_log`) written through the store and read back by a new harness on
//! a new handle, as after a restart.

use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use noetic_core::{
    AgentHarness, EventLogOptions, ExecuteOptions, FrameworkEvent, Replay, Scope, SequencedEvent,
    StreamEvent, call_model,
};

use super::{ConformanceStore, StoreOpener, within};
use crate::{ScriptedModel, ScriptedResponse};

fn harness<S: ConformanceStore>(store: S, retain: u64) -> AgentHarness {
    let model = ScriptedModel::responding(|request| {
        let asked = request.user_texts().join(" + ");
        ScriptedResponse::text_in_deltas(&format!("an answer to {asked}, in deltas"), 4)
    });
    AgentHarness::builder("events")
        .provider("scripted", model)
        .agent_graph(call_model("chat").model("scripted-model"))
        .durable(store)
        .event_log(Some(EventLogOptions::new().retain(retain)))
        .build()
        .expect("a valid harness")
}

/// Reads `stream` up to and including the next turn end.
async fn turn(stream: &mut BoxStream<'static, SequencedEvent>) -> Vec<SequencedEvent> {
    within("a turn's events", async {
        let mut events = Vec::new();
        loop {
            let event = stream.next().await.expect("the stream never ends");
            let end = matches!(
                *event.event,
                StreamEvent::Framework(
                    FrameworkEvent::TurnCompleted { .. } | FrameworkEvent::TurnAborted { .. }
                )
            );
            events.push(event);
            if end {
                return events;
            }
        }
    })
    .await
}

fn json(events: &[SequencedEvent]) -> Vec<(u64, serde_json::Value)> {
    events
        .iter()
        .map(|event| (event.seq, event.event.to_json("events")))
        .collect()
}

/// What a harness with an event log streamed of a thread's turns, a new harness on a new handle
/// gives a reader resuming after any of its ids: the same events with the same ids, read from the
/// store; its own turn is numbered on. With a small `retain`, the oldest events leave the store and a
/// reader resuming before them gets one `Lagged` for them, then the rest.
///
/// # Panics
/// When the store breaks the contract or fails.
///
/// # Cancel safety
/// Not meant to be cancelled: a dropped run leaves test data behind.
#[allow(clippy::unwrap_used)] // a test helper: a failure is a panic with the store's error
pub async fn event_log<S: ConformanceStore>(opener: &StoreOpener<S>) {
    let retain = 40;
    let first = harness(opener.open().await, retain);
    let mut live = first.sequenced_events(Scope::thread("log"), Replay::None);
    let mut streamed = Vec::new();
    for text in ["one", "two", "three"] {
        first
            .execute(text, ExecuteOptions::new().thread_id("log"))
            .await
            .unwrap();
        streamed.extend(turn(&mut live).await);
    }
    assert_eq!(streamed[0].seq, 0, "a new thread's log starts at 0");
    assert!(
        streamed
            .windows(2)
            .all(|pair| pair[1].seq == pair[0].seq + 1),
        "every event numbered, none skipped"
    );
    assert!(streamed.len() as u64 > retain, "{} events", streamed.len());
    drop(live);
    // Let go (as a host stopping does): its events are written out first.
    assert_eq!(first.release_idle_sessions().await, 1);
    drop(first);

    let second = harness(opener.open().await, retain);
    let kept_from = streamed.len() - retain as usize;
    for cut in [kept_from, streamed.len() - 7, streamed.len() - 1] {
        let after = streamed[cut - 1].seq;
        let mut resumed = second.sequenced_events(Scope::thread("log"), Replay::After(after));
        let mut got = Vec::new();
        while got.len() < streamed.len() - cut {
            got.push(within("a replayed event", resumed.next()).await.unwrap());
        }
        assert_eq!(json(&got), json(&streamed[cut..]), "after {after}");
    }
    // Before what the store keeps: one `Lagged` for the trimmed events, then the rest.
    let mut resumed = second.sequenced_events(Scope::thread("log"), Replay::After(0));
    let lag = within("the lag", resumed.next()).await.unwrap();
    let StreamEvent::Lagged { skipped } = *lag.event else {
        panic!("expected a lag first, got {lag:?}");
    };
    let oldest = lag.seq + 1;
    assert_eq!(skipped, oldest - 1);
    assert!(
        oldest as usize <= kept_from,
        "at most `retain` plus a quarter kept"
    );
    let next = within("the first kept event", resumed.next())
        .await
        .unwrap();
    assert_eq!(
        json(&[next]),
        json(&streamed[oldest as usize..=oldest as usize])
    );

    // The new harness numbers its own turn on from the log.
    let mut live = second.sequenced_events(
        Scope::thread("log"),
        Replay::After(streamed.last().unwrap().seq),
    );
    second
        .execute("four", ExecuteOptions::new().thread_id("log"))
        .await
        .unwrap();
    let fourth = turn(&mut live).await;
    assert_eq!(fourth[0].seq, streamed.last().unwrap().seq + 1);
    tokio::time::timeout(Duration::from_secs(20), second.release_idle_sessions())
        .await
        .unwrap();
}
