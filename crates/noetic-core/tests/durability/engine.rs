//! The engine seam (`noetic_core::engine::StepJournal`): a context given a journal runs its model
//! rounds and tool calls through it, so an engine that replays an invocation gets the recorded
//! results back without paying or running them again. The journal here is an in-memory one with the
//! semantics of a real engine's (Restate's `ctx.run`): results recorded in order, a replay answering
//! from the record and checking each step's name.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;
use noetic_core::engine::StepJournal;
use noetic_core::{
    AgentHarness, ApprovalDecision, ApprovalRequest, ContextOptions, DeliveryMode, Error, Item,
    Steer, call_model,
};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::support::{Counts, INPUT, agent, echo_tool, model};

/// An invocation's journal: what was recorded before it (replayed in order), then what it records.
/// Its approval decisions come from `decide` (a person, answering at once) and are recorded too.
struct Recorded {
    entries: Mutex<Vec<(String, Value)>>,
    next: AtomicUsize,
    decide: Option<ApprovalDecision>,
    /// Steers waiting for the turn, taken whole at the next steer point.
    inbox: Mutex<Vec<(String, String)>>,
}

impl Recorded {
    fn new(entries: Vec<(String, Value)>) -> Arc<Self> {
        Self::deciding(entries, None)
    }

    fn deciding(entries: Vec<(String, Value)>, decide: Option<ApprovalDecision>) -> Arc<Self> {
        Arc::new(Recorded {
            entries: Mutex::new(entries),
            next: AtomicUsize::new(0),
            decide,
            inbox: Mutex::new(Vec::new()),
        })
    }

    fn entries(&self) -> Vec<(String, Value)> {
        self.entries.lock().unwrap().clone()
    }

    fn names(&self) -> Vec<String> {
        self.entries().into_iter().map(|(name, _)| name).collect()
    }
}

impl StepJournal for Recorded {
    fn step<'a>(
        &'a self,
        name: String,
        step: BoxFuture<'a, noetic_core::Result<Value>>,
    ) -> BoxFuture<'a, noetic_core::Result<Value>> {
        Box::pin(async move {
            let at = self.next.fetch_add(1, Ordering::SeqCst);
            let recorded = self.entries.lock().unwrap().get(at).cloned();
            if let Some((expected, value)) = recorded {
                if expected != name {
                    return Err(Error::EngineJournal {
                        step: name,
                        message: format!("the replay reached it where `{expected}` was recorded"),
                    });
                }
                return Ok(value);
            }
            let value = step.await?;
            self.entries.lock().unwrap().push((name, value.clone()));
            Ok(value)
        })
    }

    fn decides_approvals(&self) -> bool {
        true
    }

    fn decision<'a>(
        &'a self,
        request: &'a ApprovalRequest,
    ) -> BoxFuture<'a, noetic_core::Result<ApprovalDecision>> {
        let decide = self.decide.clone();
        let step = Box::pin(async move {
            let decision = decide.ok_or_else(|| Error::EngineJournal {
                step: String::new(),
                message: "asked for a decision the record should have".to_owned(),
            })?;
            Ok(serde_json::to_value(decision).unwrap())
        });
        Box::pin(async move {
            let value = self
                .step(format!("approval:{}", request.approval_id), step)
                .await?;
            Ok(serde_json::from_value(value).unwrap())
        })
    }

    fn steers(&self, name: String) -> BoxFuture<'_, noetic_core::Result<Vec<Steer>>> {
        Box::pin(async move {
            let taken = std::mem::take(&mut *self.inbox.lock().unwrap());
            let value = self
                .step(name, Box::pin(async move { Ok(serde_json::json!(taken)) }))
                .await?;
            let taken: Vec<(String, String)> = serde_json::from_value(value).unwrap();
            Ok(taken
                .into_iter()
                .map(|(id, text)| {
                    Steer::new(id, DeliveryMode::BetweenRounds, vec![Item::user_text(text)])
                })
                .collect())
        })
    }
}

/// What the support agent's turn journals, in order: two tool rounds, their calls and the steer
/// points before each request of `gather` but its first, then its answer and `answer`'s round.
const REACT_STEPS: [&str; 8] = [
    "round:gather:0",
    "tool:call_a",
    "steers:gather:1",
    "round:gather:1",
    "tool:call_b",
    "steers:gather:2",
    "round:gather:2",
    "round:answer:0",
];

fn harness(model: &noetic_test_support::ScriptedModel, counts: &Arc<Counts>) -> AgentHarness {
    AgentHarness::builder("engine")
        .provider("scripted", model.clone())
        .agent_graph(agent(echo_tool(counts.clone(), None), counts.clone()))
        .build()
        .unwrap()
}

async fn run(harness: &AgentHarness, journal: &Arc<Recorded>) -> noetic_core::Result<String> {
    let ctx = harness.create_context(ContextOptions::new().step_journal(journal.clone() as Arc<_>));
    let graph = harness.agent_graph::<String, String>().unwrap();
    let result = harness.run(&graph, INPUT.to_owned(), &ctx).await;
    ctx.close().await;
    result
}

#[tokio::test]
async fn a_journaled_run_records_every_round_and_call_and_a_replay_pays_and_runs_none_again() {
    let counts = Arc::new(Counts::default());
    let first_model = model(0, None, None);
    let journal = Recorded::new(Vec::new());
    let output = run(&harness(&first_model, &counts), &journal)
        .await
        .unwrap();
    assert_eq!(output, "the answer is three");
    assert_eq!(journal.names(), REACT_STEPS);
    assert_eq!(first_model.request_count(), 4);

    // The engine replays the whole invocation (say, the handler's process was replaced after the
    // last step): every round and call comes from the record.
    let replay_model = model(0, None, None);
    let replay = Recorded::new(journal.entries());
    let again = run(&harness(&replay_model, &counts), &replay)
        .await
        .unwrap();
    assert_eq!(again, output);
    assert_eq!(replay_model.request_count(), 0, "no round paid again");
    assert_eq!(
        counts.call_runs().values().copied().collect::<Vec<_>>(),
        [1, 1],
        "no call ran again"
    );
    assert_eq!(replay.entries(), journal.entries(), "nothing new recorded");
}

#[tokio::test]
async fn a_crash_mid_round_pays_that_round_once_more_and_nothing_recorded_before_it() {
    let counts = Arc::new(Counts::default());
    let (stalled_tx, mut stalled) = mpsc::unbounded_channel();
    // The second request never ends: the process "dies" in round `gather:1`.
    let crashed_model = model(0, Some(1), Some(stalled_tx));
    let journal = Recorded::new(Vec::new());
    let crashed = harness(&crashed_model, &counts);
    tokio::select! {
        result = run(&crashed, &journal) => panic!("meant to be cut, ended: {result:?}"),
        _ = stalled.recv() => {}
    }
    assert_eq!(
        journal.names(),
        ["round:gather:0", "tool:call_a", "steers:gather:1"]
    );

    let resumed_model = model(1, None, None);
    let resumed = Recorded::new(journal.entries());
    let output = run(&harness(&resumed_model, &counts), &resumed)
        .await
        .unwrap();
    assert_eq!(output, "the answer is three");
    assert_eq!(
        crashed_model.request_count() + resumed_model.request_count(),
        5,
        "four rounds, the one in flight paid twice"
    );
    assert_eq!(
        counts.call_runs().get("call_a"),
        Some(&1),
        "the recorded call did not run again"
    );
    assert_eq!(resumed.names().len(), 8);
}

#[tokio::test]
async fn a_replay_that_reaches_another_step_than_recorded_fails_with_engine_journal() {
    let counts = Arc::new(Counts::default());
    let journal = Recorded::new(vec![("round:elsewhere:0".to_owned(), Value::Null)]);
    let error = run(&harness(&model(0, None, None), &counts), &journal)
        .await
        .unwrap_err();
    assert_eq!(error.code(), "ENGINE_JOURNAL", "{error}");
    assert!(error.to_string().contains("round:gather:0"), "{error}");
    assert!(error.to_string().contains("round:elsewhere:0"), "{error}");

    // A recorded value that is not what the step records is a clear error too.
    let journal = Recorded::new(vec![("round:gather:0".to_owned(), Value::from(7))]);
    let error = run(&harness(&model(0, None, None), &counts), &journal)
        .await
        .unwrap_err();
    assert_eq!(error.code(), "ENGINE_JOURNAL", "{error}");
}

#[tokio::test]
async fn a_gated_call_waits_for_the_journal_s_decision_and_a_replay_takes_the_recorded_one() {
    let counts = Arc::new(Counts::default());
    let gated_harness = |model: &noetic_test_support::ScriptedModel| {
        AgentHarness::builder("engine")
            .provider("scripted", model.clone())
            .agent_graph(
                call_model("gather")
                    .model("scripted-model")
                    .instructions("Gather with echo.")
                    .tool(echo_tool(counts.clone(), None).needs_approval(true)),
            )
            .build()
            .unwrap()
    };
    let run_as = async |harness: &AgentHarness, journal: &Arc<Recorded>| {
        // The same root id on every attempt, as an engine gives its invocation's.
        let ctx = harness.create_context(
            ContextOptions::new()
                .id("invocation-1")
                .step_journal(journal.clone() as Arc<_>),
        );
        let graph = harness.agent_graph::<String, String>().unwrap();
        let result = harness.run(&graph, INPUT.to_owned(), &ctx).await;
        ctx.close().await;
        result
    };
    let first_model = model(0, None, None);
    let journal = Recorded::deciding(Vec::new(), Some(ApprovalDecision::Approved));
    let harness = gated_harness(&first_model);
    let output = run_as(&harness, &journal).await.unwrap();
    assert_eq!(output, "gathered one and two");
    assert_eq!(
        journal.names(),
        [
            "round:gather:0",
            "approval:invocation-1:call_a",
            "tool:call_a",
            "steers:gather:1",
            "round:gather:1",
            "approval:invocation-1:call_b",
            "tool:call_b",
            "steers:gather:2",
            "round:gather:2"
        ]
    );
    assert!(
        harness
            .pending_approvals(noetic_core::Scope::thread("__default__"))
            .await
            .unwrap()
            .is_empty(),
        "the engine's waits are not the harness's in-process approvals"
    );

    // Replayed with no one to decide: the recorded decisions answer, nothing runs again.
    let replay_model = model(0, None, None);
    let replay = Recorded::deciding(journal.entries(), None);
    let again = run_as(&gated_harness(&replay_model), &replay)
        .await
        .unwrap();
    assert_eq!(again, output);
    assert_eq!(replay_model.request_count(), 0);
    assert_eq!(
        counts.call_runs().values().copied().collect::<Vec<_>>(),
        [1, 1]
    );

    // A rejection is the call's output, and the tool does not run.
    let rejecting_model = model(0, None, None);
    let rejecting = Recorded::deciding(
        Vec::new(),
        Some(ApprovalDecision::Rejected {
            reason: "not today".to_owned(),
        }),
    );
    run_as(&gated_harness(&rejecting_model), &rejecting)
        .await
        .unwrap();
    let outputs = rejecting_model.requests()[1].tool_outputs();
    assert_eq!(outputs, ["Tool call rejected: not today"]);
    assert_eq!(
        counts.call_runs().values().copied().collect::<Vec<_>>(),
        [1, 1]
    );
}

#[tokio::test]
async fn steers_the_journal_hands_over_join_the_next_round_and_a_replay_applies_the_same() {
    let counts = Arc::new(Counts::default());
    let first_model = model(0, None, None);
    let journal = Recorded::new(Vec::new());
    journal
        .inbox
        .lock()
        .unwrap()
        .push(("steer-1".to_owned(), "also say hello".to_owned()));
    let steered = harness(&first_model, &counts);
    let events = noetic_test_support::EventLog::new();
    let ctx = steered.create_context(
        ContextOptions::new()
            .step_journal(journal.clone() as Arc<_>)
            .event_sink(events.sink()),
    );
    let graph = steered.agent_graph::<String, String>().unwrap();
    steered.run(&graph, INPUT.to_owned(), &ctx).await.unwrap();
    ctx.close().await;
    assert_eq!(
        journal.names(),
        REACT_STEPS,
        "steers are taken before each request but a step's first"
    );
    let requests = first_model.requests();
    let has_steer = |index: usize| {
        requests[index]
            .user_texts()
            .iter()
            .any(|text| text == "also say hello")
    };
    assert!(!has_steer(0));
    assert!(has_steer(1), "the steer joined the second round");
    let applied: Vec<String> = events
        .framework()
        .into_iter()
        .filter_map(|event| match event {
            noetic_core::FrameworkEvent::SteerApplied { message_ids, .. } => Some(message_ids),
            _ => None,
        })
        .flatten()
        .collect();
    assert_eq!(applied, ["steer-1"]);

    // A replay takes the recorded steers, not the (now empty) inbox's.
    let replay_model = model(0, None, None);
    let replay = Recorded::new(journal.entries());
    let replayed = harness_items(&harness(&replay_model, &counts), &replay).await;
    assert!(
        replayed
            .iter()
            .any(|item| item.text().as_deref() == Some("also say hello")),
        "the replay applied the recorded steer: {replayed:?}"
    );
    assert_eq!(replay_model.request_count(), 0);
}

/// Runs the graph under `journal` and returns the context's items.
async fn harness_items(harness: &AgentHarness, journal: &Arc<Recorded>) -> Vec<Item> {
    let ctx = harness.create_context(ContextOptions::new().step_journal(journal.clone() as Arc<_>));
    let graph = harness.agent_graph::<String, String>().unwrap();
    harness.run(&graph, INPUT.to_owned(), &ctx).await.unwrap();
    ctx.close().await;
    ctx.items()
}

#[tokio::test]
async fn a_thread_recorder_writes_the_session_format_once_per_turn_and_step() {
    use noetic_core::adapter::durable::DurableStore as _;
    use noetic_core::session::{EngineMessage, EngineTurn, ThreadRecorder};
    use noetic_core::{FrameworkEvent, KvDurableStore, StreamEvent};

    let store = Arc::new(KvDurableStore::in_memory());
    let recorder = ThreadRecorder::new(store.clone());
    assert_eq!(recorder.history_count("t").await.unwrap(), 0);
    let started = StreamEvent::Framework(FrameworkEvent::TurnStarted {
        turn_id: "turn-1".to_owned(),
        message_ids: vec!["m-1".to_owned()],
    });
    recorder
        .append_events(
            "t",
            "turn-1",
            "round:chat:0",
            std::slice::from_ref(&started),
        )
        .await
        .unwrap();
    // A replay writing the same step again writes nothing.
    recorder
        .append_events(
            "t",
            "turn-1",
            "round:chat:0",
            &[started.clone(), started.clone()],
        )
        .await
        .unwrap();
    assert_eq!(store.next_seq("thread/t/events").await.unwrap(), 1);

    let turn = EngineTurn {
        turn_id: "turn-1".to_owned(),
        messages: vec![EngineMessage {
            id: "m-1".to_owned(),
            items: vec![Item::user_text("hello")],
        }],
        items: vec![Item::user_text("hello"), Item::assistant_text("hi")],
        outcome: Ok(Value::String("hi".to_owned())),
        spend: noetic_core::Spend::default(),
    };
    recorder.record_turn("t", &turn).await.unwrap();
    recorder.record_turn("t", &turn).await.unwrap();
    assert_eq!(recorder.history_count("t").await.unwrap(), 2);
    assert_eq!(recorder.history("t", Some(1)).await.unwrap().len(), 1);

    // A durable harness on the store reads the thread as one of its own sessions' records.
    let counts = Arc::new(Counts::default());
    let reader = AgentHarness::builder("reader")
        .provider("scripted", model(0, None, None))
        .agent_graph(agent(echo_tool(counts.clone(), None), counts))
        .durable(store.clone())
        .shared_threads()
        .build()
        .unwrap();
    let stored = reader.stored_thread("t").await.unwrap().unwrap();
    assert_eq!(stored.history, turn.items);
    assert_eq!((stored.accepted, stored.pending), (1, 0));
    assert_eq!(stored.last_output, Some(Value::String("hi".to_owned())));

    // A failed turn settles its messages (two, coalesced) and is the thread's last, adding no
    // history.
    let message = |id: &str, text: &str| EngineMessage {
        id: id.to_owned(),
        items: vec![Item::user_text(text)],
    };
    let failed = EngineTurn {
        turn_id: "turn-2".to_owned(),
        messages: vec![message("m-2", "again"), message("m-3", "and again")],
        items: Vec::new(),
        outcome: Err(("CANCELLED".to_owned(), "aborted".to_owned())),
        spend: noetic_core::Spend::default(),
    };
    recorder.record_turn("t", &failed).await.unwrap();
    let stored = reader.stored_thread("t").await.unwrap().unwrap();
    assert_eq!(
        (stored.history.len(), stored.accepted, stored.pending),
        (2, 3, 0)
    );
    assert_eq!(
        stored.last_error,
        Some(("CANCELLED".to_owned(), "aborted".to_owned()))
    );
}

/// The round loop's two durabilities: noetic's checkpoints on a durable store, and an engine's
/// journal. One contract, checked on each: a turn cut while request `k` is in flight and then
/// carried on (restored from its checkpoint, or replayed from the top against the journal) ends as
/// an uncut one, asks for only the cut round and those after it, and runs each tool call once.
#[derive(Clone, Copy, Debug)]
enum Durability {
    Checkpoints,
    Journal,
}

/// What a cut-and-carried-on turn gave: output, items, the requests the second attempt made, and how
/// often each call ran.
struct CarriedOn {
    output: String,
    items: Value,
    requests: Vec<noetic_test_support::RecordedRequest>,
    call_runs: Vec<usize>,
}

async fn cut_and_carry_on(durability: Durability, k: usize) -> CarriedOn {
    use crate::support::{harness as durable_harness, json_of, run_until};

    let counts = Arc::new(Counts::default());
    let (stalled, mut stop) = mpsc::unbounded_channel();
    let first = model(0, Some(k), Some(stalled));
    let second = model(k, None, None);
    let (output, items) = match durability {
        Durability::Checkpoints => {
            let store = Arc::new(noetic_core::KvDurableStore::in_memory());
            let tool = || echo_tool(counts.clone(), None);
            let crashed = durable_harness(&store, &first, tool(), counts.clone());
            let id = run_until(&crashed, &mut stop).await;
            let resumed = durable_harness(&store, &second, tool(), counts.clone());
            let ctx = resumed
                .restore(&id, noetic_core::RestoreOptions::new())
                .await
                .unwrap();
            let graph = resumed.agent_graph::<String, String>().unwrap();
            let output = resumed.resume_with(&graph, &ctx).await.unwrap();
            ctx.close().await;
            (output, json_of(&ctx.items()))
        }
        Durability::Journal => {
            let journal = Recorded::new(Vec::new());
            let crashed = harness(&first, &counts);
            tokio::select! {
                result = run(&crashed, &journal) => {
                    panic!("meant to be cut, ended: {result:?}")
                }
                _ = stop.recv() => {}
            }
            let replay = Recorded::new(journal.entries());
            let items = harness_items(&harness(&second, &counts), &replay).await;
            let output = items.last().and_then(Item::text).unwrap_or_default();
            (output, json_of(&items))
        }
    };
    assert_eq!(
        first.request_count(),
        k + 1,
        "{durability:?}: cut at request {k}"
    );
    CarriedOn {
        output,
        items,
        requests: second.requests(),
        call_runs: counts.call_runs().values().copied().collect(),
    }
}

#[tokio::test]
async fn either_durability_carries_a_cut_turn_on_paying_only_the_round_in_flight() {
    let uncut_model = model(0, None, None);
    let counts = Arc::new(Counts::default());
    let uncut = harness_items(&harness(&uncut_model, &counts), &Recorded::new(Vec::new())).await;
    let uncut_requests = uncut_model.requests();
    for durability in [Durability::Checkpoints, Durability::Journal] {
        for k in 0..4 {
            let carried = cut_and_carry_on(durability, k).await;
            assert_eq!(
                carried.output, "the answer is three",
                "{durability:?} at {k}"
            );
            assert_eq!(
                carried.items,
                crate::support::json_of(&uncut),
                "{durability:?} at {k}: the same log as an uncut turn"
            );
            assert_eq!(
                carried.requests,
                uncut_requests[k..],
                "{durability:?} at {k}: only the cut round and the later ones asked again"
            );
            assert!(
                carried.call_runs.iter().all(|runs| *runs == 1),
                "{durability:?} at {k}: {:?}",
                carried.call_runs
            );
        }
    }
}

#[tokio::test]
async fn run_turn_appends_a_turn_s_coalesced_messages_once_as_a_session_turn_does() {
    let model = noetic_test_support::ScriptedModel::responding(|_| {
        noetic_test_support::ScriptedResponse::text("both read")
    });
    let harness = AgentHarness::builder("engine")
        .provider("scripted", model.clone())
        .agent_graph(call_model("chat").model("scripted-model"))
        .build()
        .unwrap();
    let graph = harness.agent_graph::<Value, Value>().unwrap();
    let history = vec![Item::user_text("before"), Item::assistant_text("noted")];
    let ctx = harness.create_context(ContextOptions::new().items(history.clone()));
    let messages = vec![Item::user_text("first"), Item::user_text("second")];
    let output = ctx.run_turn(&graph, messages.clone()).await.unwrap();
    ctx.close().await;
    assert_eq!(output, Value::String("both read".to_owned()));
    // Each message once, as sent (not their joined text as a third message), then the answer.
    let items = ctx.items();
    assert_eq!(items[..2], history[..]);
    assert_eq!(items[2..4], messages[..]);
    assert_eq!(items.len(), 5, "{items:?}");
    assert_eq!(items[4].text().as_deref(), Some("both read"));
    assert_eq!(
        model.requests()[0].user_texts(),
        ["before", "first", "second"]
    );

    let error = harness
        .create_context(ContextOptions::new())
        .run_turn(&graph, Vec::new())
        .await
        .unwrap_err();
    assert_eq!(error.code(), "INVALID_ARGUMENT");
    assert!(error.to_string().contains("messages"), "{error}");
}

#[tokio::test]
async fn a_running_step_s_parts_are_written_once_and_a_later_attempt_s_first_restarts_the_round() {
    use noetic_core::adapter::durable::DurableStore as _;
    use noetic_core::session::ThreadRecorder;
    use noetic_core::{FrameworkEvent, KvDurableStore, ResponseEvent, StreamEvent};

    let store = Arc::new(KvDurableStore::in_memory());
    let recorder = ThreadRecorder::new(store.clone());
    let delta = |text: &str| {
        StreamEvent::Sdk(ResponseEvent::OutputTextDelta {
            output_index: 0,
            content_index: 0,
            delta: text.to_owned(),
        })
    };
    let restarted = StreamEvent::Framework(FrameworkEvent::RoundRestarted {
        turn_id: "turn-1".to_owned(),
        message_ids: vec!["m-1".to_owned()],
    });
    // A write of `step` by `attempt`: part `Some(n)` while it runs, `None` its own once journaled.
    let write =
        |step: &'static str, attempt: &'static str, part: Option<usize>, text: &'static str| {
            let (recorder, restarted) = (recorder.clone(), restarted.clone());
            async move {
                recorder
                    .append_part(
                        "t",
                        "turn-1",
                        step,
                        attempt,
                        part,
                        &[delta(text)],
                        restarted,
                    )
                    .await
                    .unwrap();
            }
        };
    // A replay's write of `step`.
    let replayed = |step: &'static str, text: &'static str| {
        let recorder = recorder.clone();
        async move {
            recorder
                .append_events("t", "turn-1", step, &[delta(text)])
                .await
                .unwrap();
        }
    };
    let (first, second, third) = ("1:round:chat:0", "2:round:chat:1", "3:round:chat:2");
    // The first attempt streams two parts (the second written twice: once), then dies.
    write(first, "a", Some(0), "Hel").await;
    write(first, "a", Some(1), "lo").await;
    write(first, "a", Some(1), "lo").await;
    // The next attempt runs the round again: its first part comes after `round_restarted`.
    write(first, "b", Some(0), "Hello").await;
    write(first, "b", Some(1), " again").await;
    // Its step's own write once journaled: the events after its last part; a replay's write of
    // the step after it is a no-op.
    write(first, "b", None, "!").await;
    replayed(first, "?").await;
    // An attempt that ran a round within one part's time writes it whole with the step: after
    // `round_restarted` too when an earlier attempt wrote parts of it.
    write(second, "c", Some(0), "Par").await;
    write(second, "d", None, "Whole").await;
    // A step whose running attempt wrote it in parts and was journaled: a replay's write of it
    // (its lifecycle again) is not written.
    write(third, "e", Some(0), "Done").await;
    replayed(third, "again?").await;
    let log: Vec<String> = store
        .read_log("thread/t/events", 0)
        .await
        .unwrap()
        .into_iter()
        .map(|entry| String::from_utf8(entry.value).unwrap())
        .collect();
    assert_eq!(log.len(), 10, "{log:#?}");
    assert!(log[2].contains("round_restarted"), "{log:#?}");
    assert!(log[7].contains("round_restarted"), "{log:#?}");
    for (at, text) in [
        (0, "Hel"),
        (1, "lo"),
        (3, "Hello"),
        (4, " again"),
        (5, "!"),
        (6, "Par"),
        (8, "Whole"),
        (9, "Done"),
    ] {
        assert!(log[at].contains(&format!("\"{text}\"")), "{at}: {log:#?}");
    }
}
