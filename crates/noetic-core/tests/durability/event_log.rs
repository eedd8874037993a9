//! Threads' durable event logs (`AgentHarnessBuilder::event_log`): a reader resumes after any number
//! it saw — after a restart, from the log — and on threads shared by hosts every host streams a
//! turn live with the numbers of the host that runs it.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use noetic_core::adapter::durable::DurableStore;
use noetic_core::{
    AgentHarness, EventLogOptions, ExecuteOptions, FrameworkEvent, KvDurableStore, Replay,
    ResponseEvent, Scope, SequencedEvent, StreamEvent, call_model,
};
use noetic_test_support::{ScriptedModel, ScriptedResponse};
use tokio::sync::oneshot;

use crate::support::serve;

fn harness(
    store: &Arc<KvDurableStore>,
    model: &ScriptedModel,
    shared: bool,
    log: EventLogOptions,
) -> AgentHarness {
    harness_with_lease(store, model, shared, log, Duration::from_secs(10))
}

fn harness_with_lease(
    store: &Arc<KvDurableStore>,
    model: &ScriptedModel,
    shared: bool,
    log: EventLogOptions,
    lease: Duration,
) -> AgentHarness {
    let mut builder = AgentHarness::builder("log")
        .provider("scripted", model.clone())
        .agent_graph(
            call_model("chat")
                .model("scripted-model")
                .instructions("Chat."),
        )
        .durable(store.clone())
        .lease_ttl(lease)
        .event_log(Some(log));
    if shared {
        builder = builder.shared_threads();
    }
    builder.build().unwrap()
}

fn ends_turn(event: &SequencedEvent) -> bool {
    matches!(
        *event.event,
        StreamEvent::Framework(
            FrameworkEvent::TurnCompleted { .. } | FrameworkEvent::TurnAborted { .. }
        )
    )
}

/// Reads `stream` up to and including the `turns`-th turn end (at most 20 s).
async fn through_turn_ends(
    stream: &mut BoxStream<'static, SequencedEvent>,
    turns: usize,
) -> Vec<SequencedEvent> {
    let mut out = Vec::new();
    let mut ended = 0;
    tokio::time::timeout(Duration::from_secs(20), async {
        while ended < turns {
            let event = stream.next().await.expect("the stream never ends");
            ended += usize::from(ends_turn(&event));
            out.push(event);
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no turn end after 20 s; read {out:?}"));
    out
}

fn numbers(events: &[SequencedEvent]) -> Vec<u64> {
    events.iter().map(|event| event.seq).collect()
}

fn json(events: &[SequencedEvent]) -> Vec<serde_json::Value> {
    events
        .iter()
        .map(|event| event.event.to_json("log"))
        .collect()
}

/// The text a client shows for `events`: the text deltas, where a `round_restarted` voids those of
/// the round in flight (since the last completed model call).
fn shown_text(events: &[SequencedEvent]) -> String {
    let (mut text, mut settled) = (String::new(), 0);
    for event in events {
        match &*event.event {
            StreamEvent::Sdk(ResponseEvent::OutputTextDelta { delta, .. }) => text.push_str(delta),
            StreamEvent::Framework(FrameworkEvent::ModelCallCompleted { .. }) => {
                settled = text.len();
            }
            StreamEvent::Framework(FrameworkEvent::RoundRestarted { .. }) => {
                text.truncate(settled);
            }
            _ => {}
        }
    }
    text
}

fn text_turn(text: &str) -> ScriptedResponse {
    ScriptedResponse::text_in_deltas(text, 3)
}

#[tokio::test]
async fn a_restarted_harness_replays_what_a_client_missed_from_the_log_and_numbers_on() {
    let store = Arc::new(KvDurableStore::in_memory());
    let model = ScriptedModel::with_responses([
        text_turn("the first answer, in several deltas"),
        text_turn("the second answer"),
    ]);
    let first = harness(&store, &model, false, EventLogOptions::new());
    let mut live = first.sequenced_events(Scope::thread("t"), Replay::None);
    first
        .execute("hello", ExecuteOptions::new().thread_id("t"))
        .await
        .unwrap();
    let before = through_turn_ends(&mut live, 1).await;
    assert!(before.len() > 8, "{before:?}");
    assert!(
        before
            .iter()
            .all(|event| !matches!(*event.event, StreamEvent::Lagged { .. })),
        "{before:?}"
    );
    assert_eq!(before[0].seq, 0, "a new thread's log starts at 0");
    assert!(
        before.windows(2).all(|pair| pair[1].seq == pair[0].seq + 1),
        "contiguous numbers: {:?}",
        numbers(&before)
    );
    // The process goes away; its session is let go first, which writes out the log.
    drop(live);
    assert_eq!(first.release_idle_sessions().await, 1);
    drop(first);
    assert_eq!(
        store.next_seq("thread/t/events").await.unwrap(),
        before.last().unwrap().seq + 1
    );

    // A client that saw the first few events reconnects to the next process: the rest of the
    // crashed run comes from the log, exactly, then the next turn live, numbered on.
    let second = harness(&store, &model, false, EventLogOptions::new());
    for cut in [1, 4, before.len() - 1] {
        let mut resumed =
            second.sequenced_events(Scope::thread("t"), Replay::After(before[cut - 1].seq));
        let mut got = Vec::new();
        while got.len() < before.len() - cut {
            got.push(
                tokio::time::timeout(Duration::from_secs(20), resumed.next())
                    .await
                    .expect("the log's events")
                    .unwrap(),
            );
        }
        assert_eq!(numbers(&got), numbers(&before[cut..]), "after {cut}");
        assert_eq!(json(&got), json(&before[cut..]), "after {cut}");
    }
    let mut resumed = second.sequenced_events(
        Scope::thread("t"),
        Replay::After(before.last().unwrap().seq),
    );
    second
        .execute("again", ExecuteOptions::new().thread_id("t"))
        .await
        .unwrap();
    let after = through_turn_ends(&mut resumed, 1).await;
    assert_eq!(after[0].seq, before.last().unwrap().seq + 1, "{after:?}");
    assert!(
        matches!(
            *after[0].event,
            StreamEvent::Framework(FrameworkEvent::TurnStarted { .. })
        ),
        "{after:?}"
    );
    assert!(after.windows(2).all(|pair| pair[1].seq == pair[0].seq + 1));
}

#[tokio::test]
async fn the_log_keeps_the_latest_events_and_an_older_cursor_gets_lagged_then_the_rest() {
    let store = Arc::new(KvDurableStore::in_memory());
    let model = ScriptedModel::with_responses([
        text_turn("one two three four five six seven eight nine ten"),
        text_turn("eleven twelve thirteen fourteen fifteen sixteen"),
    ]);
    let options = EventLogOptions::new().retain(8);
    let first = harness(&store, &model, false, options);
    let mut live = first.sequenced_events(Scope::thread("t"), Replay::None);
    let mut all = Vec::new();
    for message in ["a", "b"] {
        first
            .execute(message, ExecuteOptions::new().thread_id("t"))
            .await
            .unwrap();
        all.extend(through_turn_ends(&mut live, 1).await);
    }
    drop(live);
    assert_eq!(first.release_idle_sessions().await, 1);
    drop(first);
    let head = all.last().unwrap().seq + 1;
    let kept = store.read_log("thread/t/events", 0).await.unwrap();
    assert!(
        kept.len() >= 8 && (kept.len() as u64) < head,
        "{} of {head} kept",
        kept.len()
    );
    let oldest = kept[0].seq;

    let second = harness(&store, &model, false, options);
    let mut resumed = second.sequenced_events(Scope::thread("t"), Replay::After(0));
    let lag = tokio::time::timeout(Duration::from_secs(20), resumed.next())
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(*lag.event, StreamEvent::Lagged { skipped } if skipped == oldest - 1),
        "{lag:?}"
    );
    assert_eq!(lag.seq, oldest - 1);
    let rest = through_turn_ends(&mut resumed, 1).await;
    let from = all.iter().position(|event| event.seq == oldest).unwrap();
    assert_eq!(json(&rest), json(&all[from..]));
}

#[tokio::test]
async fn hosts_sharing_a_thread_stream_its_turns_live_with_the_running_host_s_numbers_and_answer_for_it()
 {
    let store = Arc::new(KvDurableStore::in_memory());
    let model = ScriptedModel::with_responses([
        text_turn("served by the worker, streamed to the front"),
        text_turn("and a second turn, after the thread was let go"),
    ]);
    let options = EventLogOptions::new().poll(Duration::from_millis(5));
    // `front` only accepts and streams; `worker` runs the turns.
    let front = harness(&store, &model, true, options);
    let worker = harness(&store, &model, true, options);
    let mut on_front = front.sequenced_events(Scope::thread("t"), Replay::None);
    let mut on_worker = worker.sequenced_events(Scope::thread("t"), Replay::None);

    let (stop, serving) = serve(&worker);
    front
        .execute("first", ExecuteOptions::new().thread_id("t"))
        .await
        .unwrap();
    let seen_on_worker = through_turn_ends(&mut on_worker, 1).await;
    let seen_on_front = through_turn_ends(&mut on_front, 1).await;
    assert_eq!(numbers(&seen_on_front), numbers(&seen_on_worker));
    assert_eq!(json(&seen_on_front), json(&seen_on_worker));
    assert!(
        seen_on_front
            .iter()
            .any(|event| matches!(&*event.event, StreamEvent::Sdk(_))),
        "token deltas reach the other host"
    );

    // The front answers for the thread it does not run, from the store, once the thread is settled.
    let answer = tokio::time::timeout(
        Duration::from_secs(20),
        front.agent_response(Scope::thread("t")),
    )
    .await
    .expect("an answer")
    .unwrap();
    assert_eq!(answer.text, "served by the worker, streamed to the front");
    // And its history is the store's, the same the worker has.
    let history = front.thread_history(Scope::thread("t")).await.unwrap();
    assert_eq!(history.len(), 2, "{history:?}");
    assert_eq!(
        history[1].text().as_deref(),
        Some("served by the worker, streamed to the front")
    );
    assert!(front.session_history(Scope::thread("t")).is_empty());

    // The next turn, after the worker let the thread go and claimed it again: both streams go on.
    front
        .execute("second", ExecuteOptions::new().thread_id("t"))
        .await
        .unwrap();
    let next_on_worker = through_turn_ends(&mut on_worker, 1).await;
    let next_on_front = through_turn_ends(&mut on_front, 1).await;
    assert_eq!(json(&next_on_front), json(&next_on_worker));
    assert_eq!(numbers(&next_on_front), numbers(&next_on_worker));
    assert!(next_on_front[0].seq > seen_on_front.last().unwrap().seq);

    // A client reconnecting to the front after any number it saw gets the rest, from the log.
    let everything: Vec<_> = seen_on_front
        .iter()
        .chain(&next_on_front)
        .cloned()
        .collect();
    let cut = everything.len() / 2;
    let mut resumed =
        front.sequenced_events(Scope::thread("t"), Replay::After(everything[cut].seq));
    let turns = everything[cut + 1..]
        .iter()
        .filter(|event| ends_turn(event))
        .count();
    let rest = through_turn_ends(&mut resumed, turns).await;
    assert_eq!(json(&rest), json(&everything[cut + 1..]));
    assert_eq!(numbers(&rest), numbers(&everything[cut + 1..]));

    stop.send(()).unwrap();
    serving.await.unwrap();
}

#[tokio::test]
async fn a_host_dying_mid_round_is_taken_over_and_other_hosts_see_the_round_restarted() {
    let store = Arc::new(KvDurableStore::in_memory());
    let options = EventLogOptions::new().poll(Duration::from_millis(5));
    let lease = Duration::from_millis(300);
    let answer = "the whole answer, streamed again";
    let front = harness_with_lease(&store, &ScriptedModel::new(), true, options, lease);
    let mut on_front = front.sequenced_events(Scope::thread("t"), Replay::None);
    front
        .execute("go", ExecuteOptions::new().thread_id("t"))
        .await
        .unwrap();

    // The dying host, on a runtime of its own: it streams part of the answer, then its model
    // stalls, and the runtime is dropped mid-round (nothing more is written).
    let (crash, crashed) = oneshot::channel::<()>();
    let (gone, dead) = oneshot::channel::<()>();
    let dying_store = store.clone();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let partial = text_turn("the whole").into_events();
            let stalled = ScriptedResponse::stall_after(partial[..partial.len() - 2].to_vec());
            let model = ScriptedModel::with_responses([stalled]);
            let dying = harness_with_lease(&dying_store, &model, true, options, lease);
            let _serving = serve(&dying);
            let _ = crashed.await;
        });
        drop(runtime);
        let _ = gone.send(());
    });
    // The front streams the partial text (read from the log the dying host wrote).
    let mut before = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), async {
        while !shown_text(&before).starts_with("the wh") {
            before.push(on_front.next().await.unwrap());
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no partial text: {before:?}"));
    crash.send(()).unwrap();
    dead.await.unwrap();

    let model = ScriptedModel::with_responses([text_turn(answer)]);
    let survivor = harness_with_lease(&store, &model, true, options, lease);
    let (stop, serving) = serve(&survivor);
    let mut after = through_turn_ends(&mut on_front, 1).await;
    let restarted = after
        .iter()
        .position(|event| {
            matches!(
                &*event.event,
                StreamEvent::Framework(FrameworkEvent::RoundRestarted { .. })
            )
        })
        .unwrap_or_else(|| panic!("no round_restarted: {after:?}"));
    assert!(
        after[..restarted]
            .iter()
            .all(|event| !matches!(&*event.event, StreamEvent::Framework(_))
                || matches!(
                    &*event.event,
                    StreamEvent::Framework(FrameworkEvent::ModelCallFirstEvent { .. })
                )),
        "only what the dying host streamed comes before: {after:?}"
    );
    let mut all = before;
    all.append(&mut after);
    assert!(
        all.windows(2).all(|pair| pair[1].seq == pair[0].seq + 1),
        "no gap, no duplicate: {:?}",
        numbers(&all)
    );
    assert_eq!(shown_text(&all), answer, "{all:?}");
    assert_eq!(model.request_count(), 1);
    stop.send(()).unwrap();
    serving.await.unwrap();
}

#[tokio::test]
async fn a_host_following_a_thread_knows_its_status_and_aborts_its_turn_where_it_runs() {
    let store = Arc::new(KvDurableStore::in_memory());
    let options = EventLogOptions::new().poll(Duration::from_millis(5));
    let partial = text_turn("an answer that stalls").into_events();
    let stalled = ScriptedResponse::stall_after(partial[..partial.len() - 3].to_vec());
    let front = harness(&store, &ScriptedModel::new(), true, options);
    let worker = harness(
        &store,
        &ScriptedModel::with_responses([stalled]),
        true,
        options,
    );
    let mut on_front = front.sequenced_events(Scope::thread("t"), Replay::None);
    let (stop, serving) = serve(&worker);
    front
        .execute("go", ExecuteOptions::new().thread_id("t"))
        .await
        .unwrap();
    let mut seen = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), async {
        while shown_text(&seen).is_empty() {
            seen.push(on_front.next().await.unwrap());
        }
    })
    .await
    .expect("the turn streams to the front");
    let Some(StreamEvent::Framework(FrameworkEvent::TurnStarted { turn_id, .. })) =
        seen.first().map(|event| (*event.event).clone())
    else {
        panic!("{seen:?}");
    };
    assert!(
        matches!(front.status(Scope::thread("t")), noetic_core::SessionStatus::Running { turn_id: ref running, .. } if *running == turn_id),
        "{:?}",
        front.status(Scope::thread("t"))
    );

    // Aborted from the front: the worker, which runs the turn, aborts it.
    let report = tokio::time::timeout(
        Duration::from_secs(20),
        front.abort(
            noetic_core::AbortOptions::new()
                .thread_id("t")
                .reason("from the front"),
        ),
    )
    .await
    .expect("the abort is answered");
    assert!(report.is_none(), "no drain asked: {report:?}");
    let rest = through_turn_ends(&mut on_front, 1).await;
    assert!(
        matches!(
            &*rest.last().unwrap().event,
            StreamEvent::Framework(FrameworkEvent::TurnAborted {
                error_kind: "CANCELLED",
                ..
            })
        ),
        "{rest:?}"
    );
    assert_eq!(
        front.status(Scope::thread("t")),
        noetic_core::SessionStatus::Idle
    );
    stop.send(()).unwrap();
    serving.await.unwrap();
}
