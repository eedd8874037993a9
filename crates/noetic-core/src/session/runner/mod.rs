//! The per-thread session: its queue, history and event bus, and the runner task that turns queued
//! messages into turns, one at a time.

mod start;
mod turn;

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, SystemTime};

use tokio::sync::watch;

use super::DeliveryMode;
use super::api::{HarnessResponse, SessionStatus};
use super::bus::{EventBus, Limits, Replay, Subscription};
use super::durable::{LoadedThread, ResumeTurn, ThreadJournal};
use super::event_log::EventTap;
use super::last::LastTurn;
use crate::context::Context;
use crate::context::SteerInbox;
use crate::drain::DrainReport;
use crate::event::{FrameworkEvent, StreamEvent};
use crate::item::Item;
use crate::runtime::Runtime;
use crate::steer::Steer;
use crate::step::StepNode;
use crate::usage::Spend;
use crate::{Error, Result};
use tokio_util::task::TaskTracker;
pub(crate) use turn::response_of;
use turn::run_session;

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
