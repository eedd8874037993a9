//! The session surface of [`AgentHarness`]: `execute`, responses, status, usage, abort, history and
//! streams, all scoped by thread.

use std::sync::Arc;
use std::time::SystemTime;

use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use serde_json::Value;

use super::bus::Replay;
use super::runner::Message;
use super::streams::{ItemSnapshot, SessionChunk, item_snapshots, text_chunks};
use super::{DEFAULT_THREAD, DeliveryMode};
use crate::context::ContextOptions;
use crate::event::StreamEvent;
use crate::harness::AgentHarness;
use crate::item::Item;
use crate::layer::{LayerUsage, by_slot};
use crate::model::{ReasoningKind, ResponseEvent};
use crate::step::call_model::assemble_request;
use crate::usage::{Spend, TokenUsage};
use crate::{Error, Result};

/// What `execute` accepts: text (one user message with one `input_text` part), one item, or several
/// items, used as given. Empty text and an empty list are rejected (`INVALID_ARGUMENT`): they would
/// start a paid model turn with nothing new.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Input {
    /// A user message's text.
    Text(String),
    /// One item.
    Item(Item),
    /// Several items.
    Items(Vec<Item>),
}

impl Input {
    pub(crate) fn into_items(self) -> Vec<Item> {
        match self {
            Input::Text(text) if text.is_empty() => Vec::new(),
            Input::Text(text) => vec![Item::user_text(text)],
            Input::Item(item) => vec![item],
            Input::Items(items) => items,
        }
    }
}

impl From<&str> for Input {
    fn from(text: &str) -> Self {
        Input::Text(text.to_owned())
    }
}

impl From<String> for Input {
    fn from(text: String) -> Self {
        Input::Text(text)
    }
}

impl From<Item> for Input {
    fn from(item: Item) -> Self {
        Input::Item(item)
    }
}

impl From<Vec<Item>> for Input {
    fn from(items: Vec<Item>) -> Self {
        Input::Items(items)
    }
}

/// Options of [`AgentHarness::execute`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExecuteOptions {
    /// The thread (default [`DEFAULT_THREAD`]).
    pub thread_id: Option<String>,
    /// The resource (user, tenant) the turn runs for; model calls see it.
    pub resource_id: Option<String>,
    /// How the message meets a running turn (default: the harness's, else `next-turn`).
    pub delivery_mode: Option<DeliveryMode>,
    /// The message's id (default `msg-<unique id>`), as it appears in `turn_started` and steer events.
    pub message_id: Option<String>,
}

impl ExecuteOptions {
    /// Sets the thread.
    pub fn thread_id(mut self, thread_id: impl Into<String>) -> Self {
        self.thread_id = Some(thread_id.into());
        self
    }

    /// Sets the resource id.
    pub fn resource_id(mut self, resource_id: impl Into<String>) -> Self {
        self.resource_id = Some(resource_id.into());
        self
    }

    /// Sets the delivery mode.
    pub fn delivery_mode(mut self, mode: DeliveryMode) -> Self {
        self.delivery_mode = Some(mode);
        self
    }

    /// Sets the message id.
    pub fn message_id(mut self, message_id: impl Into<String>) -> Self {
        self.message_id = Some(message_id.into());
        self
    }
}

/// Which session an accessor looks at.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scope {
    /// The thread (default [`DEFAULT_THREAD`]).
    pub thread_id: Option<String>,
}

impl Scope {
    /// The scope of `thread_id`.
    pub fn thread(thread_id: impl Into<String>) -> Self {
        Scope {
            thread_id: Some(thread_id.into()),
        }
    }

    fn thread_id(&self) -> &str {
        self.thread_id.as_deref().unwrap_or(DEFAULT_THREAD)
    }
}

/// Options of [`AgentHarness::abort`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AbortOptions {
    /// The thread (default [`DEFAULT_THREAD`]).
    pub thread_id: Option<String>,
    /// Why (becomes the turn's `CANCELLED` reason).
    pub reason: Option<String>,
}

/// What a session is doing.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SessionStatus {
    /// No turn is running and nothing is queued.
    Idle,
    /// Messages are accepted and waiting, and no turn is running yet: the next turn is about to start.
    Queued {
        /// How many messages wait.
        queued: usize,
    },
    /// A turn is running.
    Running {
        /// The turn's id.
        turn_id: String,
        /// When it started.
        started_at: SystemTime,
    },
    /// The running turn was asked to stop and has not stopped yet.
    Aborting {
        /// The turn's id.
        turn_id: String,
    },
}

/// The outcome of a session turn.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct HarnessResponse {
    /// The whole conversation after the turn (seeded history, earlier turns, this turn).
    pub items: Vec<Item>,
    /// Tokens this turn used.
    pub usage: TokenUsage,
    /// What this turn cost, when reported.
    pub cost: Option<f64>,
    /// The agent graph's output as text (a string output as is, anything else as JSON).
    pub text: String,
    /// The agent graph's output.
    pub output: Value,
    /// What each context layer contributed to the turn's last model request (slot order).
    pub last_layer_usage: Vec<LayerUsage>,
}

impl AgentHarness {
    /// Queues `input` on the thread's session and returns once it is accepted — before the model
    /// answers. Turns run one at a time per thread; see [`crate::session`] for delivery modes.
    ///
    /// # Errors
    /// [`Error::NoStepConfigured`] when the harness has no agent graph; [`Error::InvalidArgument`]
    /// (`input`) for empty text or an empty item list. Nothing is queued then.
    ///
    /// # Cancel safety
    /// Cancel safe: the message is queued before the first await point (there is none).
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
        let session = self.sessions().get_or_create(thread_id);
        let message = Message {
            id: options
                .message_id
                .unwrap_or_else(|| format!("msg-{}", crate::id::new_id())),
            items,
            mode: options
                .delivery_mode
                .unwrap_or_else(|| self.default_delivery_mode()),
            resource_id: options.resource_id,
        };
        session.enqueue(self, graph, message);
        Ok(())
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

    /// What the thread is doing: `Queued` from the moment a message is accepted until its turn
    /// starts, `Running` while a turn runs, `Idle` when nothing runs or waits (also for a thread never
    /// used).
    pub fn status(&self, scope: Scope) -> SessionStatus {
        self.sessions()
            .get(scope.thread_id())
            .map_or(SessionStatus::Idle, |session| session.status())
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

    /// The thread's conversation history (empty for a thread never used).
    pub fn session_history(&self, scope: Scope) -> Vec<Item> {
        self.sessions()
            .get(scope.thread_id())
            .map(|session| session.history())
            .unwrap_or_default()
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
    /// # Cancel safety
    /// Cancel safe: the abort is requested before the first await point.
    pub async fn abort(&self, options: AbortOptions) {
        let thread_id = options.thread_id.as_deref().unwrap_or(DEFAULT_THREAD);
        if let Some(session) = self.sessions().get(thread_id) {
            session.abort(options.reason).await;
        }
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
        self.sessions()
            .get_or_create(scope.thread_id())
            .subscribe(replay)
            .into_stream()
            .boxed()
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
