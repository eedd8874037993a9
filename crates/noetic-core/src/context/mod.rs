//! The execution context: identity, state, spend, item log and cancellation of one step tree.
//!
//! A [`Context`] is cheap to clone (an `Arc`). Children (spawn, parallel paths) get their own id, item
//! log and state copy, sit one level deeper, and join their parent's cancellation: aborting a context
//! aborts all its descendants, never its parent or siblings. Spend is charged to a context and all of its
//! ancestors at once, so nothing a provider billed is ever lost when a child fails or is cancelled.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::channel::RootChannels;

mod channels;
mod detached;
mod drain;
mod durable;
mod steers;
mod transcript;
mod turn;

use crate::engine::StepJournal;
use crate::event::{EventSink, FrameworkEvent, StreamEvent};
use crate::item::{FunctionCallItem, Item};
use crate::layer::lifecycle::LayerLife;
use crate::layer::{ContextLayer, LayerCtx, LayerUsage};
use crate::runtime::Runtime;
use crate::usage::{Spend, TokenUsage};
use crate::{Error, Result};
pub use detached::{DetachedHandle, DetachedOptions};
pub use durable::RestoreOptions;
pub use steers::OnSteer;
pub(crate) use steers::{Applied, SteerInbox};
pub(crate) use transcript::Transcript;
use transcript::TranscriptRef;
pub(crate) use turn::turn_text;

/// The deepest a context may be nested before steps refuse to run.
pub const MAX_DEPTH: u32 = 64;

/// Options for [`Context::new`] (and `create_context` of a runtime or harness).
#[derive(Default, Clone)]
#[non_exhaustive]
pub struct ContextOptions {
    /// Initial state (default: `{}`).
    pub state: Option<Value>,
    /// The session thread this context belongs to.
    pub thread_id: Option<String>,
    /// The resource (user, tenant) it runs for.
    pub resource_id: Option<String>,
    /// A parent: the new context is its child (depth + 1, joins its cancellation).
    pub parent: Option<Context>,
    /// Context layers (default: the parent's, else the runtime's).
    pub layers: Option<Vec<Arc<dyn ContextLayer>>>,
    /// Initial item log.
    pub items: Vec<Item>,
    /// Where events go (default: the parent's sink, else none).
    pub event_sink: Option<Arc<dyn EventSink>>,
    /// The session turn's steer inbox (set by the session runner).
    pub(crate) steers: Option<Arc<SteerInbox>>,
    /// The session turn's transcript, which this context (the turn's root) owns (set by the session
    /// runner; children join their parent's).
    pub(crate) transcript: Option<Arc<Transcript>>,
    pub(crate) metadata: Option<Value>,
    /// The id of a new root (default: a fresh one); a child process's root takes its handle's.
    pub(crate) id: Option<String>,
    /// On a durable runtime: where the first items are recorded already (a session turn's history).
    pub(crate) durable_base: Option<crate::checkpoint::Base>,
    /// An engine's journal for the root's paid and effectful steps (see [`crate::engine`]).
    pub(crate) step_journal: Option<Arc<dyn StepJournal>>,
}

impl ContextOptions {
    /// Options with everything defaulted.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the initial state.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] (argument `state`) when `state` does not serialize to JSON; nothing
    /// is silently replaced by `{}`.
    pub fn state(mut self, state: impl Serialize) -> Result<Self> {
        let state = serde_json::to_value(state).map_err(|source| Error::InvalidArgument {
            argument: "state",
            message: format!("the initial state does not serialize: {source}"),
        })?;
        self.state = Some(state);
        Ok(self)
    }

    /// Sets the thread id.
    pub fn thread_id(mut self, thread_id: impl Into<String>) -> Self {
        self.thread_id = Some(thread_id.into());
        self
    }

    /// Sets the resource id.
    pub fn resource_id(mut self, resource_id: impl Into<String>) -> Self {
        self.resource_id = Some(resource_id.into());
        self
    }

    /// Makes the context a child of `parent`.
    pub fn parent(mut self, parent: &Context) -> Self {
        self.parent = Some(parent.clone());
        self
    }

    /// Sets the initial item log.
    pub fn items(mut self, items: Vec<Item>) -> Self {
        self.items = items;
        self
    }

    /// Sets the context layers.
    pub fn layers(mut self, layers: Vec<Arc<dyn ContextLayer>>) -> Self {
        self.layers = Some(layers);
        self
    }

    /// Sends this context's events (and its children's) to `sink`.
    pub fn event_sink(mut self, sink: Arc<dyn EventSink>) -> Self {
        self.event_sink = Some(sink);
        self
    }

    /// The id of the new root context (default: a fresh one). Tool calls' idempotency keys and
    /// approval ids derive from it (`{id}:{call_id}`), so an engine replaying a run passes the same
    /// id on every attempt (its invocation's id). Ignored for a child.
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// Runs the root's model rounds and tool calls through `journal`, an engine's (see
    /// [`crate::engine`]): the engine, not noetic's checkpoints, makes the run durable, so the root
    /// keeps no checkpoint journal even on a durable runtime. Ignored for a child (children use
    /// their root's).
    pub fn step_journal(mut self, journal: Arc<dyn StepJournal>) -> Self {
        self.step_journal = Some(journal);
        self
    }

    /// What a durable root context records with its execution's header (readable again through
    /// [`crate::AgentHarness::execution`]); ignored without a durable store. The CLI keeps the workflow
    /// document there, so `noetic resume` can rebuild the run. Never put secrets in it.
    pub fn metadata(mut self, metadata: Value) -> Self {
        self.metadata = Some(metadata);
        self
    }
}

impl std::fmt::Debug for ContextOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContextOptions")
            .field("thread_id", &self.thread_id)
            .field("resource_id", &self.resource_id)
            .field("parent", &self.parent.as_ref().map(Context::id))
            .field("items", &self.items.len())
            .finish_non_exhaustive()
    }
}

/// What the last `call_model` step of a context produced, beyond its output value.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct StepMeta {
    /// Every function call the model made, across all rounds of the step.
    pub tool_calls: Vec<FunctionCallItem>,
    /// Whether the step's final response still had function calls (only when it hit a limit).
    pub ended_with_tool_calls: bool,
    /// Tokens the step used (all rounds, discarded ones included).
    pub usage: TokenUsage,
    /// Cost the step incurred, when reported.
    pub cost: Option<f64>,
    /// The items the step appended (model outputs and tool outputs), in order.
    pub response_items: Vec<Item>,
    /// What each layer contributed to the step's request (slot order; layers that recalled nothing
    /// are absent).
    pub last_layer_usage: Vec<LayerUsage>,
}

/// An execution context. See the module docs.
#[derive(Clone)]
pub struct Context {
    inner: Arc<ContextInner>,
}

struct ContextInner {
    id: String,
    parent: Option<Context>,
    depth: u32,
    runtime: Arc<Runtime>,
    thread_id: Option<String>,
    resource_id: Option<String>,
    state: Mutex<Value>,
    spend: Mutex<Spend>,
    step_count: AtomicU64,
    items: Mutex<Vec<Item>>,
    last_step_meta: Mutex<Option<StepMeta>>,
    cancel: CancellationToken,
    abort_reason: OnceLock<Option<String>>,
    sink: Option<Arc<dyn EventSink>>,
    /// Swappable so `with_context` can change the layers of the same context for a while.
    layers: Mutex<Arc<[Arc<dyn ContextLayer>]>>,
    /// Whether `layers` is non-empty, so `append_item` skips the layer lock when there are none.
    has_layers: AtomicBool,
    /// The layers initialized on this context and its descendants still to close (see
    /// `layer::lifecycle`).
    layer_life: LayerLife,
    steers: Option<Arc<SteerInbox>>,
    started: Instant,
    /// The channels of the execution this context is the root of (unused on children, which share their
    /// root's; see `channel`). Allocates nothing until a channel is used.
    channels: RootChannels,
    /// The durable journal of a root context on a durable runtime (`None` otherwise, and for children).
    journal: Option<Arc<crate::checkpoint::Journal>>,
    /// An engine's journal of the root's steps (`None` otherwise, and for children).
    step_journal: Option<Arc<dyn StepJournal>>,
    /// The session turn's transcript this context records its appends in, when it belongs to a turn.
    transcript: Option<TranscriptRef>,
    /// The graceful drain of a cancel on this context, once one started (`drain.rs`).
    drain: OnceLock<Arc<drain::Drain>>,
    /// How many runs (`exec::run`) are on this context now.
    active_runs: AtomicU32,
}

/// What a new context is made of, before its parent's part is filled in.
struct Fields {
    runtime: Arc<Runtime>,
    thread_id: Option<String>,
    resource_id: Option<String>,
    state: Value,
    items: Vec<Item>,
    sink: Option<Arc<dyn EventSink>>,
    layers: Option<Arc<[Arc<dyn ContextLayer>]>>,
    steers: Option<Arc<SteerInbox>>,
    transcript: Option<TranscriptRef>,
    /// The id of a root: given for a restored execution, else new.
    id: Option<String>,
    journal: Option<Arc<crate::checkpoint::Journal>>,
    step_journal: Option<Arc<dyn StepJournal>>,
}

/// What a child context inherits or replaces; used by spawn and parallel paths.
pub(crate) struct ChildSpec {
    pub(crate) items: Vec<Item>,
    pub(crate) layers: Option<Arc<[Arc<dyn ContextLayer>]>>,
    /// Whether the child's model calls take the turn's steers (`spawn(..).steers(Forward)`).
    pub(crate) forward_steers: bool,
}

use crate::sync::lock;

impl Context {
    /// A new root context running on `runtime` (or a child, with `options.parent`: depth + 1, joins
    /// its cancellation, inherits its thread, resource, sink and layers unless `options` sets them).
    pub fn new(runtime: Arc<Runtime>, options: ContextOptions) -> Self {
        let ContextOptions {
            state,
            thread_id,
            resource_id,
            parent,
            layers,
            items,
            event_sink,
            steers,
            transcript,
            metadata,
            id,
            durable_base,
            step_journal,
        } = options;
        let transcript = match transcript {
            Some(transcript) => Some(TranscriptRef::Root(transcript)),
            None => parent
                .as_ref()
                .and_then(|parent| parent.inner.transcript.as_ref())
                .map(TranscriptRef::member),
        };
        let layers: Option<Arc<[Arc<dyn ContextLayer>]>> = layers.map(Into::into);
        let state = state.unwrap_or_else(|| Value::Object(Default::default()));
        match parent {
            Some(parent) => parent.make_child(Fields {
                runtime,
                thread_id,
                resource_id,
                state,
                items,
                sink: event_sink,
                layers,
                steers,
                transcript,
                id: None,
                journal: None,
                step_journal: None,
            }),
            None => {
                let id = id.unwrap_or_else(crate::id::new_id);
                // Every root on a durable runtime is an execution; a session turn's starts with its
                // thread's history (`durable_base`).
                let journal =
                    runtime
                        .durability()
                        .filter(|_| step_journal.is_none())
                        .map(|durability| {
                            Arc::new(crate::checkpoint::Journal::new(
                                durability.clone(),
                                id.clone(),
                                metadata.unwrap_or(Value::Null),
                                thread_id.clone(),
                                resource_id.clone(),
                                durable_base,
                            ))
                        });
                Context::make(
                    Fields {
                        layers: Some(layers.unwrap_or_else(|| runtime.layers())),
                        runtime,
                        thread_id,
                        resource_id,
                        state,
                        items,
                        sink: event_sink,
                        steers,
                        transcript,
                        id: Some(id),
                        journal,
                        step_journal,
                    },
                    None,
                    0,
                    CancellationToken::new(),
                )
            }
        }
    }

    /// A child for spawn or a parallel path: fresh id, depth + 1, a copy of the state, the given items.
    pub(crate) fn child(&self, spec: ChildSpec) -> Context {
        let inner = &self.inner;
        self.make_child(Fields {
            runtime: inner.runtime.clone(),
            thread_id: None,
            resource_id: None,
            state: self.state(),
            items: spec.items,
            sink: None,
            layers: spec.layers,
            steers: if spec.forward_steers {
                inner.steers.clone()
            } else {
                None
            },
            transcript: inner.transcript.as_ref().map(TranscriptRef::member),
            id: None,
            journal: None,
            step_journal: None,
        })
    }

    /// A child of `self` with `fields`; what they leave unset (thread, resource, sink, layers) is the
    /// parent's.
    fn make_child(&self, mut fields: Fields) -> Context {
        let inner = &self.inner;
        fields.thread_id = fields.thread_id.or_else(|| inner.thread_id.clone());
        fields.resource_id = fields.resource_id.or_else(|| inner.resource_id.clone());
        fields.sink = fields.sink.or_else(|| inner.sink.clone());
        fields.layers = Some(fields.layers.unwrap_or_else(|| self.layers()));
        // A child's steps are its root's: journaled in the one journal.
        fields.step_journal = inner.step_journal.clone();
        Context::make(
            fields,
            Some(self.clone()),
            inner.depth + 1,
            inner.cancel.child_token(),
        )
    }

    /// The one constructor body of roots and children.
    fn make(
        fields: Fields,
        parent: Option<Context>,
        depth: u32,
        cancel: CancellationToken,
    ) -> Self {
        let layers = fields.layers.unwrap_or_else(|| Arc::from(Vec::new()));
        Context {
            inner: Arc::new(ContextInner {
                id: fields.id.unwrap_or_else(crate::id::new_id),
                parent,
                depth,
                runtime: fields.runtime,
                thread_id: fields.thread_id,
                resource_id: fields.resource_id,
                state: Mutex::new(fields.state),
                spend: Mutex::new(Spend::default()),
                step_count: AtomicU64::new(0),
                items: Mutex::new(fields.items),
                last_step_meta: Mutex::new(None),
                cancel,
                abort_reason: OnceLock::new(),
                sink: fields.sink,
                has_layers: AtomicBool::new(!layers.is_empty()),
                layers: Mutex::new(layers),
                layer_life: LayerLife::default(),
                steers: fields.steers,
                started: Instant::now(),
                channels: RootChannels::default(),
                transcript: fields.transcript,
                journal: fields.journal,
                step_journal: fields.step_journal,
                drain: OnceLock::new(),
                active_runs: AtomicU32::new(0),
            }),
        }
    }

    /// Runs a step tree on this context and returns its output, by the one run protocol (see
    /// [`crate::AgentHarness::run`], which is this): connection needs checked, the channel run entered,
    /// layers initialized once per context, the tree executed and its outcome recorded for
    /// [`Context::close`]. A step that runs a sub-step on its own context calls this.
    ///
    /// # Errors
    /// The step's error; [`Error::InvalidStep`] or [`Error::MissingModel`] before anything runs when the
    /// tree is malformed; [`Error::ConnectionUnsatisfied`] before anything runs when a step needs an
    /// operation no registered connection supports.
    ///
    /// # Cancel safety
    /// Dropping the future stops the tree at its current await point; spend already charged stays on the
    /// context, and the run's outcome is not recorded. Abort the context instead to let steps observe
    /// `CANCELLED`.
    pub async fn run<I: Serialize, O: DeserializeOwned>(
        &self,
        step: &crate::step::Step<I, O>,
        input: I,
    ) -> Result<O> {
        step.validate()?;
        let input = crate::step::encode(step.id(), "input", input)?;
        let output = crate::exec::run(self, &step.node, input, crate::step::Origin::Root).await?;
        crate::step::decode(step.id(), "output", output)
    }

    /// Ends this context's execution: its layers get `on_complete` and then `dispose` — first those of
    /// its descendants that are still open (children made by hand with `ContextOptions::parent`; `spawn`
    /// and parallel paths close their own), then its own, in reverse slot order.
    ///
    /// The outcome is `Aborted` when the context was aborted, else that of the last [`Context::run`] on
    /// it (`Success` when none finished). Closing a closed context does nothing; a later run on it
    /// initializes its layers again (a new execution). Close a context once its runs have ended.
    ///
    /// # Cancel safety
    /// Dropping the future mid-way leaves the hooks not yet called uncalled; the context counts as
    /// closed.
    pub async fn close(&self) {
        let outcome = crate::layer::lifecycle::closing_outcome(self);
        crate::layer::lifecycle::close(self, outcome).await;
        if let Some(journal) = self.journal() {
            journal.release().await;
        }
    }

    /// This context's unique id (the execution id of a root).
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// The parent context, for children.
    pub fn parent(&self) -> Option<&Context> {
        self.inner.parent.as_ref()
    }

    /// The channels of this context's root execution (the root's own for a root).
    pub(crate) fn root_channels(&self) -> &RootChannels {
        &self.root().inner.channels
    }

    /// The root of this context's tree (itself for a root).
    pub fn root(&self) -> &Context {
        let mut root = self;
        while let Some(parent) = root.parent() {
            root = parent;
        }
        root
    }

    /// The layer lifecycle bookkeeping of this context.
    pub(crate) fn layer_life(&self) -> &LayerLife {
        &self.inner.layer_life
    }

    /// A handle that does not keep the context alive.
    pub(crate) fn downgrade(&self) -> WeakContext {
        WeakContext(Arc::downgrade(&self.inner))
    }

    /// Nesting depth: 0 for a root.
    pub fn depth(&self) -> u32 {
        self.inner.depth
    }

    /// The runtime (configuration) this context runs with.
    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.inner.runtime
    }

    /// The session thread, when set.
    pub fn thread_id(&self) -> Option<&str> {
        self.inner.thread_id.as_deref()
    }

    /// The resource id, when set.
    pub fn resource_id(&self) -> Option<&str> {
        self.inner.resource_id.as_deref()
    }

    /// How long ago the context was created.
    pub fn elapsed(&self) -> Duration {
        self.inner.started.elapsed()
    }

    /// A copy of the state.
    pub fn state(&self) -> Value {
        lock(&self.inner.state).clone()
    }

    /// The state as a typed value.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the state does not deserialize into `T`.
    pub fn state_as<T: DeserializeOwned>(&self) -> Result<T> {
        T::deserialize(&*lock(&self.inner.state)).map_err(|source| Error::InvalidArgument {
            argument: "state",
            message: source.to_string(),
        })
    }

    /// Replaces the state.
    pub fn set_state(&self, state: Value) {
        *lock(&self.inner.state) = state;
    }

    /// Changes the state in place.
    pub fn update_state<R>(&self, update: impl FnOnce(&mut Value) -> R) -> R {
        update(&mut lock(&self.inner.state))
    }

    /// Tokens used by this context and its descendants.
    pub fn tokens(&self) -> TokenUsage {
        lock(&self.inner.spend).usage
    }

    /// Cost (USD) incurred by this context and its descendants, when any was reported.
    pub fn cost(&self) -> Option<f64> {
        lock(&self.inner.spend).cost
    }

    /// Tokens and cost together.
    pub fn spend(&self) -> Spend {
        *lock(&self.inner.spend)
    }

    /// Charges spend to this context and every ancestor.
    pub fn charge(&self, spend: Spend) {
        let mut current = Some(self);
        while let Some(context) = current {
            *lock(&context.inner.spend) += spend;
            current = context.parent();
        }
    }

    /// Steps run on this context so far (composites included).
    pub fn step_count(&self) -> u64 {
        self.inner.step_count.load(Ordering::Relaxed)
    }

    pub(crate) fn count_step(&self) {
        self.inner.step_count.fetch_add(1, Ordering::Relaxed);
    }

    /// A snapshot of the item log.
    pub fn items(&self) -> Vec<Item> {
        lock(&self.inner.items).clone()
    }

    /// A copy of the items from position `start` on (empty when `start` is past the end): what a step
    /// appended, without copying the history before it.
    pub fn items_since(&self, start: usize) -> Vec<Item> {
        let items = lock(&self.inner.items);
        items.get(start..).map(<[Item]>::to_vec).unwrap_or_default()
    }

    /// Takes the whole log out of the context (a session turn's context, once the turn has ended).
    pub(crate) fn take_items(&self) -> Vec<Item> {
        std::mem::take(&mut *lock(&self.inner.items))
    }

    /// Whether the newest assistant message of the log has exactly `text` (a previous `call_model`'s
    /// answer, which a following step must not be sent again).
    pub(crate) fn newest_assistant_text_is(&self, text: &str) -> bool {
        lock(&self.inner.items)
            .iter()
            .rev()
            .find(|item| item.role() == Some(crate::item::Role::Assistant))
            .and_then(Item::text)
            .is_some_and(|newest| newest == text)
    }

    /// The number of items in the log.
    pub fn item_count(&self) -> usize {
        lock(&self.inner.items).len()
    }

    /// Appends an item to the log, emits `item_appended` and calls the layers' `on_item_append`. In a
    /// session turn, the item also joins the turn's transcript, so it reaches the session history
    /// whichever context of the turn (root, spawned child, parallel path) appended it.
    pub fn append_item(&self, item: Item) {
        if self.inner.sink.is_some() {
            self.emit(FrameworkEvent::ItemAppended { item: item.clone() });
        }
        if let Some(transcript) = &self.inner.transcript {
            transcript.record(&item);
        }
        if !self.inner.has_layers.load(Ordering::Relaxed) {
            lock(&self.inner.items).push(item);
            return;
        }
        lock(&self.inner.items).push(item.clone());
        // Called with no lock held: a hook may read the context.
        let layers = self.layers();
        for layer in layers.iter() {
            layer.on_item_append(LayerCtx::new(self, layer.id()), &item);
        }
    }

    /// What the last `call_model` step produced.
    pub fn last_step_meta(&self) -> Option<StepMeta> {
        lock(&self.inner.last_step_meta).clone()
    }

    pub(crate) fn with_last_step_meta<R>(&self, read: impl FnOnce(Option<&StepMeta>) -> R) -> R {
        read(lock(&self.inner.last_step_meta).as_ref())
    }

    pub(crate) fn set_last_step_meta(&self, meta: StepMeta) {
        *lock(&self.inner.last_step_meta) = Some(meta);
    }

    /// Aborts this context and all its descendants. The first reason wins: aborting a context that is
    /// already aborted (itself or through an ancestor) keeps the reason it already has. Synchronous.
    pub fn abort(&self, reason: Option<String>) {
        let reason = if self.aborted() {
            self.abort_reason().or(reason)
        } else {
            reason
        };
        let _ = self.inner.abort_reason.set(reason);
        self.inner.cancel.cancel();
    }

    /// Whether this context (or an ancestor) was aborted.
    pub fn aborted(&self) -> bool {
        self.inner.cancel.is_cancelled()
    }

    /// The abort reason: this context's own, else the nearest aborted ancestor's.
    pub fn abort_reason(&self) -> Option<String> {
        let mut current = Some(self);
        while let Some(context) = current {
            if let Some(reason) = context.inner.abort_reason.get() {
                return reason.clone();
            }
            current = context.parent();
        }
        None
    }

    /// A token that is cancelled when this context is aborted.
    pub fn cancellation_token(&self) -> &CancellationToken {
        &self.inner.cancel
    }

    /// Resolves when the context is aborted.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future loses nothing.
    pub async fn cancelled(&self) {
        self.inner.cancel.cancelled().await
    }

    /// `Err(Cancelled)` when aborted.
    ///
    /// # Errors
    /// [`Error::Cancelled`] with the abort reason.
    pub fn check_aborted(&self) -> Result<()> {
        if self.aborted() {
            Err(Error::cancelled(self.abort_reason()))
        } else {
            Ok(())
        }
    }

    /// The context's layers, in order.
    pub fn layers(&self) -> Arc<[Arc<dyn ContextLayer>]> {
        lock(&self.inner.layers).clone()
    }

    /// Replaces the layers, returning the previous ones (`with_context` restores them after its child).
    pub(crate) fn replace_layers(
        &self,
        layers: Arc<[Arc<dyn ContextLayer>]>,
    ) -> Arc<[Arc<dyn ContextLayer>]> {
        self.inner
            .has_layers
            .store(!layers.is_empty(), Ordering::Relaxed);
        std::mem::replace(&mut *lock(&self.inner.layers), layers)
    }

    /// The turn's steer inbox, when this context takes steers.
    pub(crate) fn steers(&self) -> Option<&Arc<SteerInbox>> {
        self.inner.steers.as_ref()
    }

    /// Whether anything listens to this context's events.
    pub fn has_event_sink(&self) -> bool {
        self.inner.sink.is_some()
    }

    /// Where this context's events go, if anywhere.
    pub(crate) fn sink(&self) -> Option<&Arc<dyn EventSink>> {
        self.inner.sink.as_ref()
    }

    /// Emits a framework event, when a sink is attached.
    pub fn emit(&self, event: FrameworkEvent) {
        if let Some(sink) = &self.inner.sink {
            sink.emit(StreamEvent::Framework(event));
        }
    }

    /// Emits a stream event, when a sink is attached.
    pub fn emit_stream(&self, event: StreamEvent) {
        if let Some(sink) = &self.inner.sink {
            sink.emit(event);
        }
    }
}

/// A [`Context`] handle that does not keep it alive (a parent's list of children to close).
pub(crate) struct WeakContext(Weak<ContextInner>);

impl WeakContext {
    /// The context, if it is still alive.
    pub(crate) fn upgrade(&self) -> Option<Context> {
        self.0.upgrade().map(|inner| Context { inner })
    }

    /// Whether this is a handle to `ctx`.
    pub(crate) fn is(&self, ctx: &Context) -> bool {
        std::ptr::eq(self.0.as_ptr(), Arc::as_ptr(&ctx.inner))
    }
}

impl Drop for ContextInner {
    fn drop(&mut self) {
        let open = self.layer_life.open_layers();
        if open > 0 {
            // Async hooks cannot run here: say what was lost, so the missing close can be found.
            tracing::warn!(
                context = %self.id,
                layers = open,
                "context dropped without Context::close: its layers' on_complete and dispose never ran"
            );
        }
    }
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("id", &self.inner.id)
            .field("depth", &self.inner.depth)
            .field("thread_id", &self.inner.thread_id)
            .field("step_count", &self.step_count())
            .field("aborted", &self.aborted())
            .finish_non_exhaustive()
    }
}
