//! The session surface of [`AgentHarness`]: `execute`, responses, status, usage, abort, history and
//! streams, all scoped by thread.

use std::sync::Arc;

use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use serde_json::Value;

use super::AgentHarness;
use crate::context::ContextOptions;
use crate::event::StreamEvent;
use crate::item::Item;
use crate::layer::by_slot;
use crate::model::{ReasoningKind, ResponseEvent};
use crate::session::{
    AbortOptions, DEFAULT_THREAD, ExecuteOptions, HarnessResponse, Input, ItemSnapshot, Message,
    Replay, Scope, SessionChunk, SessionStatus, item_snapshots, text_chunks,
};
use crate::step::call_model::assemble_request;
use crate::usage::Spend;
use crate::{Error, Result};

impl AgentHarness {
    /// Queues `input` on the thread's session and returns once it is accepted — before the model
    /// answers. Turns run one at a time per thread; see [`crate::session`] for delivery modes.
    ///
    /// On a durable harness ([`crate::AgentHarnessBuilder::durable`]) it returns only once the message
    /// is recorded, so a crash after it loses nothing; the first use of a thread by this harness reads
    /// it back from the store and first finishes a turn a crash interrupted (with the steers it had
    /// been sent), then whatever was queued.
    ///
    /// # Errors
    /// [`Error::NoStepConfigured`] when the harness has no agent graph; [`Error::InvalidArgument`]
    /// (`input`) for empty text or an empty item list. On a durable harness, [`Error::LeaseHeld`]
    /// while another harness holds the thread, [`Error::LeaseLost`] when one took it over, corrupt
    /// rows and storage errors. Nothing is queued then.
    ///
    /// # Cancel safety
    /// Without a durable store the message is queued before the first await point (there is none).
    /// On a durable harness, dropping the future before it returns may leave the message recorded
    /// (it then runs on the thread's next read-back) or not at all.
    pub async fn execute(&self, input: impl Into<Input>, options: ExecuteOptions) -> Result<()> {
        let graph = self.agent_graph_node().ok_or(Error::NoStepConfigured)?;
        let items = input.into().into_items();
        if items.is_empty() {
            return Err(Error::InvalidArgument {
                argument: "input",
                message:
                    "it is empty: give text or at least one item (an empty message would start a \
                          model turn with nothing new)"
                        .to_owned(),
            });
        }
        let thread_id = options.thread_id.as_deref().unwrap_or(DEFAULT_THREAD);
        let message = Message {
            id: options
                .message_id
                .unwrap_or_else(|| format!("msg-{}", crate::id::new_id())),
            items,
            mode: options
                .delivery_mode
                .unwrap_or_else(|| self.default_delivery_mode()),
            resource_id: options.resource_id,
            seq: None,
        };
        if self.inner.shared_threads
            && let Some(durability) = self.runtime().durability()
        {
            // A reader here that is not on the event log's numbers yet gets them first, so it
            // streams this message's turn from its start wherever it runs.
            if let Some(follow) = self.follow()
                && let Some(session) = self.sessions().get(thread_id)
            {
                follow.base(&session).await?;
            }
            crate::session::accept_shared(durability, thread_id, &message).await?;
            // A thread this host drives reads it at once; another host's on its wake-up.
            if let Some(session) = self.sessions().get(thread_id) {
                session.wake();
            }
            return Ok(());
        }
        loop {
            let session = self
                .sessions()
                .get_or_load(self.runtime(), self.tasks(), Some(&graph), thread_id)
                .await?;
            // `false`: evicted between the look-up and the write; look it up again.
            if session
                .accept(self.runtime(), self.tasks(), graph.clone(), message.clone())
                .await?
            {
                return Ok(());
            }
        }
    }

    /// Reads back every thread of the durable store with unfinished work (a turn a crash interrupted,
    /// or accepted messages no turn has taken) and starts it: each resumes its interrupted turn
    /// first, with the steers it had been sent, then runs what was queued. Returns their thread ids.
    /// A thread another harness holds is skipped (with a warning) and not listed.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] without a durable store; [`Error::NoStepConfigured`] without an
    /// agent graph; storage errors.
    ///
    /// # Cancel safety
    /// Cancel safe: a thread read back before the cut keeps running.
    pub async fn recover(&self) -> Result<Vec<String>> {
        let graph = self.agent_graph_node().ok_or(Error::NoStepConfigured)?;
        self.not_shared("recover")?;
        let durability = self
            .runtime()
            .durability()
            .ok_or_else(|| Error::InvalidArgument {
                argument: "durable",
                message: "this harness has no durable store: build it with `.durable(store)`"
                    .to_owned(),
            })?;
        let mut recovered = Vec::new();
        for thread_id in crate::session::threads_with_work(durability).await? {
            match self
                .sessions()
                .get_or_load(self.runtime(), self.tasks(), Some(&graph), &thread_id)
                .await
            {
                Ok(_) => recovered.push(thread_id),
                Err(
                    error @ (Error::LeaseHeld { .. }
                    | Error::CheckpointCorrupt { .. }
                    | Error::CheckpointSchemaMismatch { .. }),
                ) => {
                    tracing::warn!(%thread_id, %error, "thread not recovered");
                }
                Err(error) => return Err(error),
            }
        }
        Ok(recovered)
    }

    /// Reads back thread `thread_id` from the durable store (when this harness has not yet) and
    /// starts its unfinished work, as the first `execute` on it would; afterwards its history, status
    /// and usage are readable. Without a durable store it only makes sure the session exists.
    ///
    /// # Errors
    /// As [`AgentHarness::execute`] for a durable thread.
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn load_thread(&self, thread_id: &str) -> Result<()> {
        let graph = self.agent_graph_node();
        self.not_shared("load_thread")?;
        self.sessions()
            .get_or_load(self.runtime(), self.tasks(), graph.as_ref(), thread_id)
            .await
            .map(|_| ())
    }

    /// Evicts every durable session idle (no turn running, nothing queued, no event subscriber) for
    /// at least `older_than`: it leaves memory, its thread lease is released, and its next use reads
    /// it back. The harness does this by itself after
    /// [`crate::AgentHarnessBuilder::session_idle_ttl`]; returns how many were evicted. Sessions of a
    /// harness without a durable store are never evicted (they would be lost).
    pub async fn evict_idle_sessions(&self, older_than: std::time::Duration) -> usize {
        self.sessions().evict_idle(older_than, false).await
    }

    /// Evicts every idle durable session now, waiting for writes in progress, so their thread leases
    /// are released: call it before the process exits, and another process can take the threads at
    /// once instead of after the leases' TTL. Sessions still running or with queued messages stay.
    /// Returns how many were released.
    pub async fn release_idle_sessions(&self) -> usize {
        self.sessions()
            .evict_idle(std::time::Duration::ZERO, true)
            .await
    }

    /// Waits until the thread is idle with an empty queue, then returns the last turn's response.
    /// Before any turn (a message accepted, or history seeded, but no turn ended yet) it waits for
    /// the first one.
    ///
    /// # Errors
    /// [`Error::TurnFailed`] (with the turn's own error and code) when the last turn failed;
    /// [`Error::NotFound`] (`NOT_FOUND`, naming the thread) at once for a thread that never had a
    /// message accepted nor its history seeded — it creates no session.
    ///
    /// # Cancel safety
    /// Cancel safe: it only waits.
    pub async fn agent_response(&self, scope: Scope) -> Result<HarnessResponse> {
        let thread_id = scope.thread_id();
        if self.inner.shared_threads
            && self
                .sessions()
                .get(thread_id)
                .is_none_or(|session| !session.drives())
        {
            return self.shared_response(scope).await;
        }
        let session = self
            .sessions()
            .get(thread_id)
            .filter(|session| session.is_known())
            .ok_or_else(|| Error::NotFound {
                kind: "thread",
                id: thread_id.to_owned(),
                hint: "no message was accepted on it and no history was seeded",
            })?;
        session.response().await
    }

    /// `agent_response` of a thread this host does not drive: read from the store once the thread
    /// has no work left, looking again at each turn end another host streams (through the event
    /// log) and every second.
    async fn shared_response(&self, scope: Scope) -> Result<HarnessResponse> {
        let Some(durability) = self.runtime().durability() else {
            return Err(Error::NoStepConfigured);
        };
        let thread_id = scope.thread_id().to_owned();
        let mut events = self.sequenced_events(scope, Replay::None);
        loop {
            if let Some(last) = crate::session::settled_last(durability, &thread_id).await? {
                return crate::session::response_of(last).map_err(|error| Error::TurnFailed {
                    source: std::sync::Arc::new(error),
                });
            }
            let _ = tokio::time::timeout(std::time::Duration::from_secs(1), async {
                while let Some(event) = events.next().await {
                    if matches!(
                        *event.event,
                        StreamEvent::Framework(
                            crate::FrameworkEvent::TurnCompleted { .. }
                                | crate::FrameworkEvent::TurnAborted { .. }
                        )
                    ) {
                        return;
                    }
                }
            })
            .await;
        }
    }

    /// What the thread is doing: `Queued` from the moment a message is accepted until its turn
    /// starts, `Running` while a turn runs (`AwaitingApproval` while it waits for a person's
    /// decision), `Idle` when nothing runs or waits (also for a thread never used).
    ///
    /// On a harness with [`shared_threads`](crate::AgentHarnessBuilder::shared_threads), a turn
    /// another host runs shows here (`Running`, `AwaitingApproval`) while this host follows the
    /// thread's events (someone here subscribed to them); otherwise the thread is `Idle` here, and
    /// [`AgentHarness::stored_thread`] says what the store holds of it.
    pub fn status(&self, scope: Scope) -> SessionStatus {
        let status = self
            .sessions()
            .get(scope.thread_id())
            .map_or(SessionStatus::Idle, |session| session.status());
        match status {
            SessionStatus::Running {
                turn_id,
                started_at,
            } => {
                let calls = self.runtime().approvals().pending(scope.thread_id());
                if calls.is_empty() {
                    SessionStatus::Running {
                        turn_id,
                        started_at,
                    }
                } else {
                    SessionStatus::AwaitingApproval { turn_id, calls }
                }
            }
            other => other,
        }
    }

    /// Whether a turn of the thread runs on this host now (on a harness sharing threads, another
    /// host's turn that [`AgentHarness::status`] shows is not).
    pub fn runs_turn_here(&self, scope: Scope) -> bool {
        self.sessions()
            .get(scope.thread_id())
            .is_some_and(|session| {
                session.is_running() && (!self.inner.shared_threads || session.drives())
            })
    }

    /// Tokens and cost of every turn of the thread so far, failed ones included.
    pub fn usage(&self, scope: Scope) -> Spend {
        self.sessions()
            .get(scope.thread_id())
            .map(|session| session.spend())
            .unwrap_or_default()
    }

    /// Messages waiting for the thread's next turn.
    pub fn queue_len(&self, scope: Scope) -> usize {
        self.sessions()
            .get(scope.thread_id())
            .map_or(0, |session| session.queue_len())
    }

    /// The thread's conversation history (empty for a thread never used). On a harness with
    /// [`shared_threads`](crate::AgentHarnessBuilder::shared_threads) this is this host's session:
    /// see [`AgentHarness::thread_history`] for a thread another host runs.
    pub fn session_history(&self, scope: Scope) -> Vec<Item> {
        self.sessions()
            .get(scope.thread_id())
            .map(|session| session.history())
            .unwrap_or_default()
    }

    /// The thread's conversation history wherever its turns run: this host's session when it
    /// drives the thread (always, without `shared_threads`), otherwise the store's, as the thread's
    /// last turn left it (a turn running on another host adds its items when it ends).
    ///
    /// # Errors
    /// On a host sharing threads, the store's errors and bad rows.
    pub async fn thread_history(&self, scope: Scope) -> Result<Vec<Item>> {
        let thread_id = scope.thread_id();
        if self.inner.shared_threads
            && let Some(durability) = self.runtime().durability()
            && self
                .sessions()
                .get(thread_id)
                .is_none_or(|session| !session.drives())
        {
            let stored = crate::session::read_stored(durability, thread_id).await?;
            return Ok(stored.map(|thread| thread.history).unwrap_or_default());
        }
        Ok(self.session_history(scope))
    }

    /// What the model would see as the input of the thread's next request: the thread's history
    /// (without its system items, which become instructions) shaped by the harness's layers'
    /// `project_history`, with their `recall` placed around it — the same assembly a `call_model`
    /// step does, on a fresh context of the thread.
    ///
    /// A preview, not a turn: layers are not `init`ed and nothing is stored; queued messages, the
    /// step's own instructions and any `token_budget` are not applied; the recall query is the
    /// newest user message's text. A layer failing to recall is skipped, as in a request.
    ///
    /// # Cancel safety
    /// Cancel safe as far as the harness goes (it writes nothing); a layer's `recall` may be cut short.
    pub async fn preview_request_items(&self, scope: Scope) -> Vec<Item> {
        let options = ContextOptions::new()
            .thread_id(scope.thread_id())
            .items(self.session_history(scope));
        let ctx = self.create_context(options);
        let layers = by_slot(&ctx.layers());
        let (_, conversation, _) =
            assemble_request(&ctx, &layers, None, &Value::String(String::new()), None).await;
        conversation
    }

    /// Aborts the thread's running turn and waits until it has ended (`CANCELLED`, with `reason`).
    /// Messages queued behind it still run.
    ///
    /// With [`AbortOptions::drain`], the turn drains first, as [`AgentHarness::cancel`] drains a
    /// context: nothing new starts, the model rounds in flight may finish within the window, and
    /// [`AgentHarness::status`] reports [`crate::SessionStatus::Draining`] meanwhile. Resolves with
    /// the drain's report (`None` without a drain, or with no turn running); a second abort during
    /// the drain stops it at once and resolves with the same report.
    ///
    /// On a harness with [`shared_threads`](crate::AgentHarnessBuilder::shared_threads), a turn
    /// another host runs is aborted there: the request goes through the store, that host drains
    /// and aborts its turn at its next look (a wake-up, or its poll interval), and its report comes
    /// back the same way (waited for at most the drain plus twice the lease TTL plus a second).
    ///
    /// # Cancel safety
    /// Without a drain, cancel safe: the abort is requested before the first await point. Dropped
    /// during a drain, the drain runs on to its deadline and the turn is not aborted.
    pub async fn abort(&self, options: AbortOptions) -> Option<crate::DrainReport> {
        let thread_id = options.thread_id.as_deref().unwrap_or(DEFAULT_THREAD);
        let session = self.sessions().get(thread_id);
        if self.inner.shared_threads
            && let Some(durability) = self.runtime().durability()
            && session.as_ref().is_none_or(|session| !session.runs_here())
        {
            // The turn runs on another host (or nowhere): ask whichever host runs it.
            return match crate::session::request_abort(
                durability,
                thread_id,
                options.reason,
                options.drain,
            )
            .await
            {
                Ok(report) => report,
                Err(error) => {
                    tracing::warn!(thread_id, %error, "could not ask for the abort");
                    None
                }
            };
        }
        session?.abort(options.reason, options.drain).await
    }

    /// Replaces the thread's history before its next turn (e.g. items read back from disk).
    pub fn seed_session_history(&self, thread_id: &str, items: Vec<Item>) {
        self.sessions().get_or_create(thread_id).seed_history(items);
    }

    /// Every event of the thread's turns: provider events, framework events, and `Lagged { skipped }`
    /// when this subscriber fell behind. Starts with a replay of what the session keeps
    /// ([`Replay::Retained`]): subscribe before the first `execute` to see everything; a later
    /// subscriber first gets the compacted past (the framework events of ended turns, a `Lagged`
    /// standing for their dropped provider events) and the running turn so far. The stream never ends
    /// by itself. See [`AgentHarness::events_with`] to start elsewhere.
    pub fn events(&self, scope: Scope) -> BoxStream<'static, Arc<StreamEvent>> {
        self.events_with(scope, Replay::Retained)
    }

    /// The thread's events, starting where `replay` says: with what the session keeps
    /// ([`Replay::Retained`]), with the running turn from its start ([`Replay::CurrentTurn`]), or with
    /// the next event published ([`Replay::None`]).
    pub fn events_with(
        &self,
        scope: Scope,
        replay: Replay,
    ) -> BoxStream<'static, Arc<StreamEvent>> {
        if let Some(follow) = self.follow() {
            return crate::session::follow(follow, scope.thread_id().to_owned(), replay)
                .map(|event| event.event)
                .boxed();
        }
        self.sessions()
            .get_or_create(scope.thread_id())
            .subscribe(replay)
            .into_stream()
            .boxed()
    }

    /// The thread's events with their sequence numbers on the session's bus, starting where `replay`
    /// says ([`Replay::After`] resumes after a number a client saw, as an SSE `Last-Event-ID`).
    /// See [`crate::SequencedEvent`] for what the numbers promise.
    pub fn sequenced_events(
        &self,
        scope: Scope,
        replay: Replay,
    ) -> BoxStream<'static, crate::SequencedEvent> {
        if let Some(follow) = self.follow() {
            return crate::session::follow(follow, scope.thread_id().to_owned(), replay).boxed();
        }
        self.sessions()
            .get_or_create(scope.thread_id())
            .subscribe(replay)
            .into_sequenced_stream()
            .boxed()
    }

    /// With an event log: what a reader of a thread's events needs.
    fn follow(&self) -> Option<crate::session::Follow> {
        let durability = self.runtime().durability()?;
        Some(crate::session::Follow {
            sessions: self.sessions().clone(),
            store: durability.store.clone(),
            options: durability.event_log?,
            shared: self.inner.shared_threads,
            runtime: self.runtime().clone(),
        })
    }

    /// The text deltas of the thread's model calls, from now on ([`Replay::None`]): each turn as
    /// [`SessionChunk::TurnStarted`], its deltas as [`SessionChunk::Data`], then
    /// [`SessionChunk::TurnEnded`]; [`SessionChunk::Lagged`] where this subscriber fell behind.
    /// Subscribe before `execute` to see the whole turn, or use [`AgentHarness::text_stream_with`]
    /// with [`Replay::CurrentTurn`] to join a running one from its start.
    pub fn text_stream(&self, scope: Scope) -> BoxStream<'static, SessionChunk<String>> {
        self.text_stream_with(scope, Replay::None)
    }

    /// [`AgentHarness::text_stream`], starting where `replay` says.
    pub fn text_stream_with(
        &self,
        scope: Scope,
        replay: Replay,
    ) -> BoxStream<'static, SessionChunk<String>> {
        text_chunks(self.events_with(scope, replay), |event| match event {
            ResponseEvent::OutputTextDelta { delta, .. } => Some(delta),
            _ => None,
        })
        .boxed()
    }

    /// The reasoning deltas (raw reasoning text and summaries) of the thread's model calls, from now
    /// on, in the chunks of [`AgentHarness::text_stream`].
    pub fn reasoning_stream(&self, scope: Scope) -> BoxStream<'static, SessionChunk<String>> {
        self.reasoning_stream_with(scope, Replay::None)
    }

    /// [`AgentHarness::reasoning_stream`], starting where `replay` says.
    pub fn reasoning_stream_with(
        &self,
        scope: Scope,
        replay: Replay,
    ) -> BoxStream<'static, SessionChunk<String>> {
        text_chunks(self.events_with(scope, replay), |event| match event {
            ResponseEvent::ReasoningDelta {
                kind: ReasoningKind::Text | ReasoningKind::Summary,
                delta,
                ..
            } => Some(delta),
            _ => None,
        })
        .boxed()
    }

    /// Item snapshots of the thread, from now on, in the chunks of [`AgentHarness::text_stream`]:
    /// inputs and tool outputs complete, model output items as they stream (incomplete, then
    /// complete). Replace snapshots by [`ItemSnapshot::key`]. After a `Lagged`, an item that was
    /// streaming is next shown complete.
    pub fn item_stream(&self, scope: Scope) -> BoxStream<'static, SessionChunk<ItemSnapshot>> {
        self.item_stream_with(scope, Replay::None)
    }

    /// [`AgentHarness::item_stream`], starting where `replay` says.
    pub fn item_stream_with(
        &self,
        scope: Scope,
        replay: Replay,
    ) -> BoxStream<'static, SessionChunk<ItemSnapshot>> {
        item_snapshots(self.events_with(scope, replay)).boxed()
    }
}
