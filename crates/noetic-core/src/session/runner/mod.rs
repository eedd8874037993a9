//! The per-thread session: its queue, history and event bus, and the runner task that turns queued
//! messages into turns, one at a time.

mod start;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, SystemTime};

use serde_json::Value;
use tokio::sync::watch;

use super::DeliveryMode;
use super::api::{HarnessResponse, SessionStatus};
use super::bus::{EventBus, Limits, Replay, Subscription};
use super::durable::{FailedTurn, LastRecord, LoadedThread, ResumeTurn, ThreadJournal, TurnEnd};
use super::event_log::EventTap;
use super::last::LastTurn;
use crate::context::Context;
use crate::context::SteerInbox;
use crate::drain::DrainReport;
use crate::event::{FrameworkEvent, StreamEvent};
use crate::item::Item;
use crate::runtime::Runtime;
use crate::steer::Steer;
use crate::step::{Origin, StepNode};
use crate::usage::Spend;
use crate::{Error, Result};
use start::{TurnStart, take_turn};
use tokio_util::task::TaskTracker;

/// The output given to a function call that never ran because its turn ended.
pub(crate) const ABORTED_CALL_OUTPUT: &str =
    "Tool call not run: the turn was aborted before it ran.";

/// The output given to a function call of a completed turn that never finished because the context
/// that made it (a losing `race` path, a path stopped by a failing sibling) was stopped first.
pub(crate) const CANCELLED_CALL_OUTPUT: &str =
    "Tool call cancelled before it finished: its part of the turn was stopped.";

/// A queued message.
#[derive(Debug, Clone)]
pub(crate) struct Message {
    pub(crate) id: String,
    pub(crate) items: Vec<Item>,
    pub(crate) mode: DeliveryMode,
    pub(crate) resource_id: Option<String>,
    /// Its sequence number in the thread's durable message log.
    pub(crate) seq: Option<u64>,
}

/// One thread's session.
pub(crate) struct Session {
    pub(super) thread_id: String,
    bus: Arc<EventBus>,
    state: Mutex<State>,
    /// Bumped after every change a waiter may care about (turn end, runner stop).
    changed: watch::Sender<u64>,
    /// On a durable runtime, the thread's durable side, once read back.
    pub(super) journal: OnceLock<ThreadJournal>,
    /// Held while the thread is read back.
    pub(super) loading: tokio::sync::Mutex<()>,
    /// Wakes the host driving a shared thread to look for messages other hosts accepted.
    pub(super) inbox_wake: tokio::sync::Notify,
    /// With an event log, on the host driving the thread: where its bus's events go to be written.
    event_tap: Mutex<Option<Arc<EventTap>>>,
    /// Whether a task relays the thread's event log to its bus (a thread another host drives).
    pub(super) relaying: std::sync::atomic::AtomicBool,
    /// What the relayed events say the thread is doing on the host that runs it.
    followed: Mutex<Option<SessionStatus>>,
}

#[derive(Default)]
pub(super) struct State {
    queue: VecDeque<Message>,
    history: Vec<Item>,
    running: Option<Running>,
    runner_active: bool,
    last: Option<std::result::Result<LastTurn, Arc<Error>>>,
    spend: Spend,
    /// Whether the history was seeded (`seed_session_history`) or read back.
    seeded: bool,
    /// Whether `history` is what the thread's durable history log holds (a durable turn then records
    /// only its own items).
    history_stored: bool,
    /// The turn a crash interrupted, resumed before anything queued.
    resume: Option<ResumeTurn>,
    /// The durable sequence numbers of the steers handed to the running turn.
    steer_seqs: HashMap<String, u64>,
    /// Evicted: no longer in the harness's map; a caller holding it must look the thread up again.
    pub(super) evicted: bool,
    /// When it was last used (a message accepted, a turn ended).
    last_used: Option<tokio::time::Instant>,
    /// No further turn starts (its host is letting a shared thread go): the runner stops after the
    /// running turn, leaving the queue to whoever takes the thread next.
    stopping: bool,
}

struct Running {
    turn_id: String,
    ctx: Context,
    inbox: Arc<SteerInbox>,
    started_at: SystemTime,
    aborting: bool,
}

impl Session {
    pub(super) fn new(thread_id: String) -> Self {
        Session {
            thread_id,
            bus: Arc::new(EventBus::new(Limits::default())),
            state: Mutex::new(State::default()),
            changed: watch::Sender::new(0),
            journal: OnceLock::new(),
            loading: tokio::sync::Mutex::new(()),
            inbox_wake: tokio::sync::Notify::new(),
            event_tap: Mutex::new(None),
            relaying: std::sync::atomic::AtomicBool::new(false),
            followed: Mutex::new(None),
        }
    }

    /// Forgets the followed status (its relay stopped).
    pub(super) fn stop_following(&self) {
        *crate::sync::lock(&self.followed) = None;
    }

    /// Follows what a relayed event (of a turn another host runs) says of the thread's status.
    pub(super) fn follow_status(&self, event: &StreamEvent) {
        let StreamEvent::Framework(event) = event else {
            return;
        };
        let mut followed = crate::sync::lock(&self.followed);
        match event {
            FrameworkEvent::TurnStarted { turn_id, .. }
            | FrameworkEvent::RoundRestarted { turn_id, .. } => {
                *followed = Some(SessionStatus::Running {
                    turn_id: turn_id.clone(),
                    started_at: SystemTime::now(),
                });
            }
            FrameworkEvent::ApprovalRequested {
                approval_id,
                call_id,
                tool,
                arguments,
            } => {
                let request = crate::approval::ApprovalRequest {
                    approval_id: approval_id.clone(),
                    thread_id: self.thread_id.clone(),
                    call_id: call_id.clone(),
                    tool: tool.clone(),
                    arguments: arguments.clone(),
                };
                *followed = match followed.take() {
                    Some(SessionStatus::AwaitingApproval { turn_id, mut calls }) => {
                        calls.push(request);
                        Some(SessionStatus::AwaitingApproval { turn_id, calls })
                    }
                    Some(SessionStatus::Running { turn_id, .. }) => {
                        Some(SessionStatus::AwaitingApproval {
                            turn_id,
                            calls: vec![request],
                        })
                    }
                    other => other,
                };
            }
            FrameworkEvent::ApprovalDecided { approval_id, .. } => {
                if let Some(SessionStatus::AwaitingApproval { turn_id, calls }) = followed.as_mut()
                {
                    calls.retain(|call| call.approval_id != *approval_id);
                    if calls.is_empty() {
                        *followed = Some(SessionStatus::Running {
                            turn_id: std::mem::take(turn_id),
                            started_at: SystemTime::now(),
                        });
                    }
                }
            }
            FrameworkEvent::TurnCompleted { .. } | FrameworkEvent::TurnAborted { .. } => {
                *followed = None;
            }
            _ => {}
        }
    }

    /// The thread's event bus.
    pub(super) fn bus(&self) -> &Arc<EventBus> {
        &self.bus
    }

    /// Where the bus's events go to be written (the host driving a thread with an event log).
    pub(super) fn event_tap(&self) -> Option<Arc<EventTap>> {
        crate::sync::lock(&self.event_tap).clone()
    }

    /// Writes out what is left of the event log and stops writing it (before the thread's lease is
    /// released: the next host to drive it reads the log's end), bounded by
    /// [`super::event_log::FLUSH_BOUND`].
    pub(super) async fn finish_events(&self) {
        let Some(tap) = crate::sync::lock(&self.event_tap).take() else {
            return;
        };
        self.bus.set_tap(None);
        tap.close();
        if !tap.flush(super::event_log::FLUSH_BOUND).await {
            tracing::warn!(thread_id = %self.thread_id, "event log not flushed before letting go");
        }
    }

    /// Marks the session gone from the harness's map: its readers look the thread up again.
    pub(super) fn retire(&self) {
        self.bus.retire();
    }

    /// Takes what was read back of the thread (the first time a durable harness touches it).
    pub(super) fn install(&self, loaded: LoadedThread) {
        let LoadedThread {
            journal,
            history,
            queue,
            resume,
            spend,
            last,
            events,
        } = loaded;
        if let Some(start) = events {
            self.bus.rebase(start.next);
            let tap = EventTap::start(
                start.store,
                &self.thread_id,
                self.bus.next_seq(),
                start.fence,
                start.options,
            );
            self.bus.set_tap(Some(tap.clone()));
            *crate::sync::lock(&self.event_tap) = Some(tap);
        }
        let mut state = self.state();
        // A history seeded in memory before the first durable use stays (the first turn records it).
        if !(state.seeded && history.is_empty()) {
            state.history = history;
            state.history_stored = true;
        }
        state.seeded = true;
        state.spend += spend;
        if let Some(last) = last {
            state.last = Some(match response_of(last) {
                Ok(response) => Ok(LastTurn::keep(response)),
                Err(error) => Err(Arc::new(error)),
            });
        }
        state.queue.extend(queue);
        state.resume = resume;
        state.last_used = Some(tokio::time::Instant::now());
        drop(state);
        // Installed under `loading`, once.
        let _ = self.journal.set(journal);
    }

    /// Starts the runner when there is work and none runs.
    pub(super) fn start_runner(
        self: &Arc<Self>,
        runtime: &Arc<Runtime>,
        tasks: &TaskTracker,
        graph: &Arc<StepNode>,
    ) {
        let mut state = self.state();
        if state.runner_active || (state.queue.is_empty() && state.resume.is_none()) {
            return;
        }
        state.runner_active = true;
        drop(state);
        tasks.spawn(run_session(self.clone(), runtime.clone(), graph.clone()));
    }

    /// A session this host only followed (another host runs the thread) that nobody watches any
    /// more: nothing of it is kept here (its history is the store's), so it may leave memory.
    pub(super) fn unwatched_follower(&self) -> bool {
        if self.journal.get().is_some()
            || !self.bus.is_based()
            || self.bus.subscriber_count() > 0
            || self.relaying.load(std::sync::atomic::Ordering::Acquire)
        {
            return false;
        }
        let state = self.state();
        state.running.is_none()
            && state.queue.is_empty()
            && state.resume.is_none()
            && !state.seeded
            && !state.runner_active
    }

    pub(super) fn evictable(&self, older_than: Duration) -> bool {
        self.journal.get().is_some() && self.evictable_locked(&self.state(), older_than)
    }

    pub(super) fn evictable_locked(&self, state: &State, older_than: Duration) -> bool {
        // A runner may still be active with nothing to run (about to stop): that does not hold the
        // session; a message accepted meanwhile finds it evicted and looks the thread up again.
        state.running.is_none()
            && state.queue.is_empty()
            && state.resume.is_none()
            && !state.evicted
            && state
                .last_used
                .is_none_or(|used| used.elapsed() >= older_than)
            && self.bus.subscriber_count() == 0
    }

    /// Records `message` durably (on a durable thread), then queues it as [`Session::enqueue`].
    /// Returns `Ok(false)` when the session was evicted meanwhile: look the thread up again.
    ///
    /// # Errors
    /// [`Error::LeaseLost`] when another runtime took the thread; storage errors. Nothing is queued
    /// then.
    pub(crate) async fn accept(
        self: &Arc<Self>,
        runtime: &Arc<Runtime>,
        tasks: &TaskTracker,
        graph: Arc<StepNode>,
        mut message: Message,
    ) -> Result<bool> {
        let Some(journal) = self.journal.get() else {
            self.enqueue(runtime, tasks, graph, message);
            return Ok(true);
        };
        let mut writer = journal.writer().await;
        if self.state().evicted {
            return Ok(false);
        }
        message.seq = Some(journal.accept(&mut writer, &message).await?);
        self.state().last_used = Some(tokio::time::Instant::now());
        // Queued while the writer is held, so a turn's start or end records it consistently.
        self.enqueue(runtime, tasks, graph, message);
        drop(writer);
        Ok(true)
    }

    /// Queues messages read from the store (accepted by other hosts), as [`Session::enqueue`] does.
    /// Called with the thread's writer held, as an accept is.
    pub(super) fn absorb(
        self: &Arc<Self>,
        runtime: &Arc<Runtime>,
        tasks: &TaskTracker,
        graph: &Arc<StepNode>,
        messages: Vec<Message>,
    ) {
        if messages.is_empty() {
            return;
        }
        self.state().last_used = Some(tokio::time::Instant::now());
        for message in messages {
            self.enqueue(runtime, tasks, graph.clone(), message);
        }
    }

    /// Wakes the host driving this shared thread to read the messages other hosts accepted.
    pub(crate) fn wake(&self) {
        self.inbox_wake.notify_one();
    }

    /// Whether no turn runs or waits to start and no runner is active.
    /// Whether this host drives the thread (holds it, read back).
    pub(crate) fn drives(&self) -> bool {
        self.journal.get().is_some()
    }

    /// Whether this host drives the thread and a turn of it runs here.
    pub(crate) fn runs_here(&self) -> bool {
        self.journal.get().is_some() && self.is_running()
    }

    /// Whether a turn runs.
    pub(crate) fn is_running(&self) -> bool {
        self.state().running.is_some()
    }

    pub(super) fn is_idle(&self) -> bool {
        let state = self.state();
        Self::between_turns(&state) && state.queue.is_empty() && state.resume.is_none()
    }

    /// Whether no turn runs and no runner is active (work may still be queued).
    pub(super) fn is_between_turns(&self) -> bool {
        Self::between_turns(&self.state())
    }

    fn between_turns(state: &State) -> bool {
        state.running.is_none() && !state.runner_active
    }

    /// Starts no further turn: the runner stops after the running one (see [`State::stopping`]).
    pub(super) fn stop_after_turn(&self) {
        self.state().stopping = true;
        self.bump();
    }

    /// Bumped after every change a waiter may care about (turn end, runner stop).
    pub(super) fn changes(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    pub(super) fn state(&self) -> MutexGuard<'_, State> {
        crate::sync::lock(&self.state)
    }

    fn bump(&self) {
        self.changed.send_modify(|version| *version += 1);
    }

    pub(crate) fn subscribe(&self, replay: Replay) -> Subscription {
        self.bus.subscribe(replay)
    }

    /// A subscription whose first event is number `next` (see [`EventBus::subscribe_at`]).
    pub(crate) fn subscribe_at(&self, next: u64) -> Subscription {
        self.bus.subscribe_at(next)
    }

    /// Whether the thread ever had a message accepted or its history seeded.
    pub(crate) fn is_known(&self) -> bool {
        let state = self.state();
        state.seeded || state.runner_active || state.running.is_some() || state.last.is_some()
    }

    /// Queues a message (or hands a steer to the running turn) and makes sure a runner is going (on
    /// `tasks`, running its turns on `runtime`).
    pub(crate) fn enqueue(
        self: &Arc<Self>,
        runtime: &Arc<Runtime>,
        tasks: &TaskTracker,
        graph: Arc<StepNode>,
        message: Message,
    ) {
        let mut guard = self.state();
        let state = &mut *guard;
        let running = state.running.as_mut().filter(|running| !running.aborting);
        match (message.mode, running) {
            (DeliveryMode::BetweenRounds | DeliveryMode::NextItem, Some(running)) => {
                if let Some(seq) = message.seq {
                    state.steer_seqs.insert(message.id.clone(), seq);
                }
                running.inbox.push(Steer {
                    message_id: message.id,
                    mode: message.mode,
                    items: message.items,
                });
                return;
            }
            (DeliveryMode::Interrupt, Some(running)) => {
                running.aborting = true;
                running.ctx.abort(Some("interrupt".to_owned()));
                state.queue.push_front(message);
            }
            _ => state.queue.push_back(message),
        }
        if !state.runner_active {
            state.runner_active = true;
            drop(guard);
            tasks.spawn(run_session(self.clone(), runtime.clone(), graph));
        }
    }

    pub(crate) fn seed_history(&self, items: Vec<Item>) {
        let mut state = self.state();
        let previous = std::mem::replace(&mut state.history, items);
        if let Some(Ok(last)) = &mut state.last {
            last.detach(previous);
        }
        state.seeded = true;
    }

    pub(crate) fn history(&self) -> Vec<Item> {
        self.state().history.clone()
    }

    pub(crate) fn status(&self) -> SessionStatus {
        if self.journal.get().is_none()
            && let Some(followed) = crate::sync::lock(&self.followed).clone()
        {
            return followed;
        }
        let state = self.state();
        // A turn a crash interrupted counts as queued until it runs again.
        let resuming = usize::from(state.resume.is_some());
        match &state.running {
            None if state.queue.is_empty() && resuming == 0 => SessionStatus::Idle,
            None => SessionStatus::Queued {
                queued: state.queue.len() + resuming,
            },
            Some(running) if running.aborting => SessionStatus::Aborting {
                turn_id: running.turn_id.clone(),
            },
            Some(running) => match running.ctx.drain_deadline() {
                Some(deadline) => SessionStatus::Draining {
                    turn_id: running.turn_id.clone(),
                    deadline,
                },
                // A drain that ended aborted the turn, even with nobody left waiting on it.
                None if running.ctx.aborted() => SessionStatus::Aborting {
                    turn_id: running.turn_id.clone(),
                },
                None => SessionStatus::Running {
                    turn_id: running.turn_id.clone(),
                    started_at: running.started_at,
                },
            },
        }
    }

    pub(crate) fn spend(&self) -> Spend {
        self.state().spend
    }

    pub(crate) fn queue_len(&self) -> usize {
        self.state().queue.len()
    }

    /// Aborts the running turn (if any) and waits until it has ended. Queued messages stay queued.
    ///
    /// With `drain`, the turn drains first (see `Context::drain`); during a drain, any abort stops
    /// it at once and shares its report. The drain runs on a task of its own, so a dropped abort
    /// still ends with the turn aborted.
    pub(crate) async fn abort(
        &self,
        reason: Option<String>,
        drain: Option<std::time::Duration>,
    ) -> Option<DrainReport> {
        // A drain first (or, during one, stopping it): the turn keeps running meanwhile.
        let draining = {
            let state = self.state();
            let running = state.running.as_ref()?;
            let drains = drain.is_some() || running.ctx.is_draining();
            (drains && !running.aborting).then(|| running.ctx.clone())
        };
        let report = match draining {
            Some(ctx) => {
                let drain = ctx.start_drain(drain.unwrap_or_default(), reason.clone());
                // `status` reports `Draining` from now on.
                self.bump();
                Some(drain.report().await)
            }
            None => None,
        };
        let turn_id = {
            let mut state = self.state();
            // The turn may have ended during the drain.
            let Some(running) = state.running.as_mut() else {
                return report;
            };
            if !running.aborting {
                running.aborting = true;
                running.ctx.abort(reason);
            }
            running.turn_id.clone()
        };
        let mut changes = self.changed.subscribe();
        loop {
            let still_running = self
                .state()
                .running
                .as_ref()
                .is_some_and(|running| running.turn_id == turn_id);
            if !still_running || changes.changed().await.is_err() {
                return report;
            }
        }
    }

    /// Waits until the session is idle with an empty queue and a turn has ended, then returns the last
    /// turn's outcome.
    pub(crate) async fn response(&self) -> Result<HarnessResponse> {
        let mut changes = self.changed.subscribe();
        loop {
            {
                let state = self.state();
                if !state.runner_active
                    && state.queue.is_empty()
                    && let Some(last) = &state.last
                {
                    return match last {
                        Ok(last) => Ok(last.response(&state.history)),
                        Err(error) => Err(Error::TurnFailed {
                            source: error.clone(),
                        }),
                    };
                }
            }
            if changes.changed().await.is_err() {
                return Err(Error::cancelled(Some("session closed".to_owned())));
            }
        }
    }
}

/// The runner: one turn per batch of queued messages until the queue is empty.
async fn run_session(session: Arc<Session>, runtime: Arc<Runtime>, graph: Arc<StepNode>) {
    while run_turn(&session, &runtime, &graph).await {}
}

/// Runs one turn: the turn a crash interrupted when there is one, else one for every queued message;
/// returns `false` (the runner stops) when there is nothing to run.
async fn run_turn(session: &Arc<Session>, runtime: &Arc<Runtime>, graph: &Arc<StepNode>) -> bool {
    let journal = session.journal.get();
    // A durable thread's writer is held while the turn starts, so what the start records (the batch,
    // the queue) is what memory holds.
    let mut writer = match journal {
        Some(journal) => Some(journal.writer().await),
        None => None,
    };
    // The interrupted turn stays in the state (the thread shows as queued) until it runs.
    let resume_id = session
        .state()
        .resume
        .as_ref()
        .map(|resume| resume.execution_id.clone());
    let mut restored = None;
    let mut begun: Result<()> = Ok(());
    if let (Some(execution_id), Some(durability)) = (&resume_id, runtime.durability()) {
        match crate::checkpoint::load(&*durability.store, execution_id).await {
            Ok(found) => restored = Some(found),
            // Cut before its execution recorded anything: it starts afresh.
            Err(Error::CheckpointNotFound { .. }) => {}
            Err(error) => begun = Err(error),
        }
    }
    let was_restored = restored.is_some();
    let Some(TurnStart {
        turn_id,
        started,
        inbox,
        ctx,
        message_ids,
        inputs,
        transcript,
        history_start,
        turn_start,
        begin,
    }) = take_turn(session, runtime, journal, writer.as_deref(), restored)
    else {
        drop(writer);
        session.bump();
        return false;
    };
    if let (Some(journal), Some(writer), Some((batch, queued)), Ok(())) =
        (journal, writer.as_deref_mut(), begin, &begun)
    {
        begun = journal
            .begin_turn(writer, &turn_id, ctx.id(), batch, queued)
            .await;
    }
    drop(writer);
    if resume_id.is_some() {
        // Its start and its messages were announced where it began.
        session
            .bus
            .publish_turn_start(FrameworkEvent::RoundRestarted {
                turn_id: turn_id.clone(),
                message_ids,
            });
    } else {
        session.bus.publish_turn_start(FrameworkEvent::TurnStarted {
            turn_id: turn_id.clone(),
            message_ids,
        });
        for item in inputs.iter() {
            session
                .bus
                .publish(StreamEvent::Framework(FrameworkEvent::ItemAppended {
                    item: item.clone(),
                }));
        }
    }
    // The graph's root input: the text of the turn's messages, which are already in the log. Marked
    // as the turn's messages, it is not appended again, and a spawn handed it starts its child with
    // the messages themselves (roles and parts as sent).
    let text = inputs
        .iter()
        .filter_map(Item::text)
        .filter(|text| !text.is_empty())
        .collect::<Vec<_>>()
        .join("\n\n");

    // The one run protocol (`exec`), then the turn's end closes its context (its layers complete,
    // children first); nothing was initialized when the protocol failed before running.
    let input = Value::String(text);
    let span =
        crate::telemetry::agent_span(runtime.name(), ctx.thread_id(), ctx.id(), Some(&turn_id));
    let result: Result<Value> = crate::telemetry::traced(span, async {
        let mut result: Result<Value> = begun.map(|()| Value::Null);
        let mut waits = 0;
        while result.is_ok() {
            result =
                crate::exec::run(&ctx, graph, input.clone(), Origin::Turn(inputs.clone())).await;
            match &result {
                // The thread is ours, but a dead holder's lease on the turn's execution outlives its
                // thread lease by a moment: wait it out (bounded) rather than fail the turn.
                Err(Error::LeaseHeld { expires_at_ms, .. }) if was_restored && waits < 3 => {
                    waits += 1;
                    let wait = expires_at_ms.saturating_sub(crate::checkpoint::now_ms()) + 1;
                    tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
                    result = Ok(Value::Null);
                }
                _ => break,
            }
        }
        result
    })
    .await;
    let outcome = crate::layer::lifecycle::outcome_of(&ctx, &result);
    crate::layer::lifecycle::close(&ctx, outcome).await;
    if let Some(journal) = ctx.journal() {
        journal.release().await;
    }

    let duration_ms = started.elapsed().as_millis() as u64;
    let mut writer = match journal {
        Some(journal) => Some(journal.writer().await),
        None => None,
    };
    let end = {
        let mut guard = session.state();
        let state = &mut *guard;
        state.running = None;
        // Drained under the session lock, after `running` is cleared: `enqueue` hands a steer to the
        // running turn under the same lock, so a steer sent as the turn ends is either drained here or
        // queued, never left in an inbox nobody reads.
        let held = inbox.drain();
        state.spend += ctx.spend();
        // The history before the turn, its messages, then everything appended in any context of the
        // turn (root and children), in order.
        let mut history = transcript.assemble(ctx.take_items(), turn_start);
        // Steers still held were never seen by the model: they start the next turn, in order.
        for steer in held.into_iter().rev() {
            let seq = state.steer_seqs.get(&steer.message_id).copied();
            state.queue.push_front(Message {
                id: steer.message_id,
                items: steer.items,
                mode: DeliveryMode::NextTurn,
                resource_id: None,
                seq,
            });
        }
        state.steer_seqs.clear();
        let mut last = None;
        let event = match result {
            Ok(output) => {
                // A cancelled child (a losing race path) may have left calls it never ran; earlier turns'
                // calls were answered when they ended.
                answer_unanswered_calls(&mut history, history_start, CANCELLED_CALL_OUTPUT);
                let spend = ctx.spend();
                if journal.is_some() {
                    last = Some(LastRecord {
                        output: output.clone(),
                        spend,
                        failed: None,
                    });
                }
                // `items` and `text` are filled in when the response is read (`LastTurn`): an idle
                // session keeps neither a second copy of its history nor of its answer.
                let response = HarnessResponse {
                    items: Vec::new(),
                    usage: spend.usage,
                    cost: spend.cost,
                    text: output_text(&output),
                    output,
                    last_layer_usage: ctx
                        .last_step_meta()
                        .map(|meta| meta.last_layer_usage)
                        .unwrap_or_default(),
                };
                state.history = history;
                state.last = Some(Ok(LastTurn::keep(response)));
                FrameworkEvent::TurnCompleted {
                    turn_id,
                    duration_ms,
                }
            }
            Err(error) => {
                answer_unanswered_calls(&mut history, 0, ABORTED_CALL_OUTPUT);
                state.history = history;
                let event = FrameworkEvent::TurnAborted {
                    turn_id,
                    reason: error.to_string(),
                    error_kind: error.code(),
                };
                if journal.is_some() {
                    // Read back, the thread answers `agent_response` with this error, not with an
                    // earlier turn's answer.
                    last = Some(LastRecord {
                        output: Value::Null,
                        spend: ctx.spend(),
                        failed: Some(FailedTurn::of(&error)),
                    });
                }
                state.last = Some(Err(Arc::new(error)));
                event
            }
        };
        state.last_used = Some(tokio::time::Instant::now());
        // What the store records of the turn's end: the history's new items (all of it when the
        // stored one no longer matched), the queue and the spend.
        let end = journal.map(|_| {
            let delta = if state.history_stored {
                HistoryDelta::Append(history_start)
            } else {
                HistoryDelta::Replace
            };
            let entries = match delta {
                HistoryDelta::Append(from) => state.history.get(from..).unwrap_or_default(),
                HistoryDelta::Replace => &state.history[..],
            }
            .iter()
            .map(crate::checkpoint::to_bytes)
            .collect::<Result<Vec<_>>>();
            state.history_stored = true;
            TurnEnd {
                execution_id: ctx.id().to_owned(),
                replace: matches!(delta, HistoryDelta::Replace),
                entries,
                history_count: state.history.len() as u64,
                queued: state
                    .queue
                    .iter()
                    .filter_map(|message| message.seq)
                    .collect(),
                spend: state.spend,
                last,
            }
        });
        // Published before the lock is released, so whoever sees the turn gone (`abort`, `status`)
        // finds its end event already on the stream; held back from the event log until the store
        // has the turn's end, so a host reading the end from the log finds the turn's history.
        let hold = end.as_ref().and_then(|_| session.bus.hold_log());
        session.bus.publish_turn_end(event);
        (end, hold)
    };
    let (end, hold) = end;
    if let (Some(journal), Some(writer), Some(end)) = (journal, writer.as_deref_mut(), end)
        && let Err(error) = journal.end_turn(writer, end).await
    {
        // Memory has the turn; the store still has it in flight, so a restart resumes it again.
        tracing::error!(thread_id = %session.thread_id, %error, "could not record the end of a turn");
    }
    drop(hold);
    drop(writer);
    session.bump();
    true
}

/// A turn's output as text: a string as is, nothing for null, anything else as JSON.
/// A turn's end as the store recorded it, as `agent_response` gives it (without the turn's items,
/// which the history holds): its response, or its error.
pub(crate) fn response_of(last: LastRecord) -> Result<HarnessResponse> {
    match last {
        LastRecord {
            failed: Some(failed),
            ..
        } => Err(failed.into_error()),
        LastRecord { output, spend, .. } => Ok(HarnessResponse {
            items: Vec::new(),
            usage: spend.usage,
            cost: spend.cost,
            text: output_text(&output),
            output,
            last_layer_usage: Vec::new(),
        }),
    }
}

fn output_text(output: &Value) -> String {
    match output {
        Value::String(text) => text.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// Which of a turn's history the store gets at its end.
enum HistoryDelta {
    /// The items from this index on, appended.
    Append(usize),
    /// All of it, as a new generation.
    Replace,
}

/// Gives every function call from `history[from..]` without an output the output `text` (saying why it
/// never ran), so the history stays valid for every provider.
fn answer_unanswered_calls(history: &mut Vec<Item>, from: usize, text: &str) {
    let scanned = history.get(from..).unwrap_or_default();
    if !scanned.iter().any(|item| item.as_function_call().is_some()) {
        return;
    }
    let answered: HashSet<&str> = scanned
        .iter()
        .filter_map(|item| match item {
            Item::FunctionCallOutput(output) => Some(output.call_id.as_str()),
            _ => None,
        })
        .collect();
    let missing: Vec<String> = scanned
        .iter()
        .filter_map(Item::as_function_call)
        .filter(|call| !answered.contains(call.call_id.as_str()))
        .map(|call| call.call_id.clone())
        .collect();
    for call_id in missing {
        history.push(Item::function_call_output(call_id, text));
    }
}
