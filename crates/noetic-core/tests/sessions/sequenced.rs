//! Events with their sequence numbers (`sequenced_events`): resuming after a number a client saw
//! gives exactly the events after it, a cursor that fell off the ring gets a `Lagged` first, and a
//! bus's numbers are above any earlier bus's (a cursor from before a restart is behind, not ahead).

use futures_util::{FutureExt, StreamExt};
use noetic_core::session::Replay;
use noetic_core::{Scope, SequencedEvent, StreamEvent};
use noetic_test_support::{ScriptedModel, ScriptedResponse};

use crate::support::{run_turn, scripted_harness};

/// Everything `stream` has ready now (after the turn ended, all of it is).
fn ready(
    stream: &mut futures_util::stream::BoxStream<'static, SequencedEvent>,
) -> Vec<SequencedEvent> {
    let mut out = Vec::new();
    while let Some(Some(event)) = stream.next().now_or_never() {
        out.push(event);
    }
    out
}

#[tokio::test]
async fn resuming_after_a_seen_number_gives_exactly_the_rest_in_order() {
    let model =
        ScriptedModel::with_responses([ScriptedResponse::text_in_deltas("one two three four", 2)]);
    let harness = scripted_harness(&model);
    let mut live = harness.sequenced_events(Scope::default(), Replay::None);
    run_turn(&harness, "go").await;
    let everything = ready(&mut live);
    assert!(everything.len() > 6, "{everything:?}");
    assert!(
        everything.windows(2).all(|pair| pair[0].seq < pair[1].seq),
        "numbers increase"
    );
    // What the session keeps of the ended turn (its deltas compacted away, a lagged in their place).
    let kept = ready(&mut harness.sequenced_events(Scope::default(), Replay::Retained));
    let seqs = |events: &[SequencedEvent]| events.iter().map(|event| event.seq).collect::<Vec<_>>();
    // A client that saw up to any point reconnects with the last number it saw: it gets exactly
    // what follows, as a subscriber that never left would have read it.
    for cut in 1..kept.len() {
        let rest = ready(
            &mut harness.sequenced_events(Scope::default(), Replay::After(kept[cut - 1].seq)),
        );
        assert_eq!(
            seqs(&rest),
            seqs(&kept[cut..]),
            "no gap, no duplicate after {cut}"
        );
        for (got, want) in rest.iter().zip(&kept[cut..]) {
            assert_eq!(got.event.to_json("t"), want.event.to_json("t"));
        }
    }
    // Every kept event is one the live subscriber read, with the same number.
    for event in kept
        .iter()
        .filter(|event| !matches!(*event.event, StreamEvent::Lagged { .. }))
    {
        assert!(
            everything
                .iter()
                .any(|seen| seen.seq == event.seq
                    && seen.event.to_json("t") == event.event.to_json("t")),
            "{event:?}"
        );
    }
    // After the last one: nothing until the next event.
    let last = everything.last().unwrap().seq;
    assert!(ready(&mut harness.sequenced_events(Scope::default(), Replay::After(last))).is_empty());
}

#[tokio::test]
async fn a_cursor_behind_what_is_kept_gets_a_lagged_that_resumes_at_the_next_kept_event() {
    let answer = "word ".repeat(50);
    let model = ScriptedModel::with_responses([ScriptedResponse::text_in_deltas(&answer, 1)]);
    let harness = scripted_harness(&model);
    let mut live = harness.sequenced_events(Scope::default(), Replay::None);
    run_turn(&harness, "talk").await;
    let everything = ready(&mut live);
    drop(live);
    // The turn ended and nobody reads: its deltas were compacted away. A client that saw the first
    // delta resumes after it.
    let first_delta = everything
        .iter()
        .find(|event| matches!(*event.event, StreamEvent::Sdk(_)))
        .unwrap()
        .seq;
    let mut resumed = harness.sequenced_events(Scope::default(), Replay::After(first_delta));
    let replay = ready(&mut resumed);
    let StreamEvent::Lagged { skipped } = *replay[0].event else {
        panic!("a lagged first: {replay:?}");
    };
    assert!(skipped > 0);
    assert!(
        replay.len() > 1 && replay[0].seq < replay[1].seq,
        "the lagged's number is the last skipped, below the next kept event's: {replay:?}"
    );
    assert_eq!(replay[0].seq, first_delta + skipped);
}

#[tokio::test]
async fn a_cursor_from_an_earlier_bus_is_behind_this_one_and_lags() {
    let model = ScriptedModel::with_responses([
        ScriptedResponse::text("first life"),
        ScriptedResponse::text("second life"),
    ]);
    let earlier = scripted_harness(&model);
    let mut live = earlier.sequenced_events(Scope::default(), Replay::None);
    run_turn(&earlier, "go").await;
    let old = ready(&mut live).last().unwrap().seq;
    drop(live);
    drop(earlier);

    // A new harness (a restart): its numbers are all above the old ones.
    let later = scripted_harness(&model);
    let mut live = later.sequenced_events(Scope::default(), Replay::None);
    run_turn(&later, "again").await;
    let new = ready(&mut live);
    assert!(new[0].seq > old, "{} <= {old}", new[0].seq);
    assert!(
        new.last().unwrap().seq < 1 << 53,
        "exact as a JavaScript number"
    );
    let mut resumed = later.sequenced_events(Scope::default(), Replay::After(old));
    let replay = ready(&mut resumed);
    // A `Lagged` first for the numbers between the old cursor and the new bus's first (none when
    // the new bus was made within the same millisecond: it starts right after the old one's last).
    let gap = new[0].seq - old - 1;
    let rest = if gap > 0 {
        assert!(
            matches!(*replay[0].event, StreamEvent::Lagged { skipped } if skipped == gap),
            "{replay:?}"
        );
        &replay[1..]
    } else {
        &replay[..]
    };
    assert_eq!(
        rest.first().map(|first| first.seq),
        Some(new[0].seq),
        "then the new bus's events: {replay:?}"
    );
}
