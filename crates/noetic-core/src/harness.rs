//! The [`AgentHarness`]: holds the agent graph, providers, tools, layers and hooks, creates contexts
//! and runs step trees on them. Its session surface (`execute`, streams, …) is in [`crate::session`].

use std::any::{Any, TypeId};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;

use crate::adapter::{InMemoryStorage, StorageAdapter};
use crate::connection::Connection;
use crate::context::{Context, ContextOptions};
use crate::layer::ContextLayer;
use crate::model::ModelProvider;
use crate::session::{DeliveryMode, OnSteer, Sessions, Steer, SteerDecision, SteerPoint};
use crate::step::{Origin, Step, StepRef, decode, encode, execute};
use crate::tool::Tool;
use crate::workflow::WorkflowRegistry;
use crate::{Error, Result};
use tokio_util::task::TaskTracker;

/// The default stream idle timeout of a model round.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(120);

/// The execution engine. Cheap to clone, `Send + Sync`.
#[derive(Clone)]
pub struct AgentHarness {
    inner: Arc<HarnessInner>,
}

struct HarnessInner {
    name: String,
    agent_graph: Option<(Arc<crate::step::StepNode>, GraphTypes)>,
    params: Arc<dyn Any + Send + Sync>,
    providers: Vec<(String, Arc<dyn ModelProvider>)>,
    defaults: CallModelDefaults,
    hooks: AgentHooks,
    tools: Vec<Tool>,
    layers: Arc<[Arc<dyn ContextLayer>]>,
    default_delivery_mode: DeliveryMode,
    on_steer: Option<Arc<OnSteer>>,
    /// What workflow documents' names resolve to (`parse_and_run_workflow`).
    workflow_registry: WorkflowRegistry,
    /// What `run()` checks the steps' declared needs against.
    connections: Vec<Arc<dyn Connection>>,
    /// Where layer state (and later checkpoints) persist.
    storage: Arc<dyn StorageAdapter>,
    sessions: Sessions,
    /// The session runner tasks; tracked so none is detached from the harness.
    tasks: TaskTracker,
}

/// Defaults for every `call_model` step of a harness.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct CallModelDefaults {
    /// The provider name to use (default: the only registered provider, else `openrouter`).
    pub provider: Option<String>,
    /// The stream idle timeout of each round (default 120 s).
    pub idle_timeout: Duration,
}

impl Default for CallModelDefaults {
    fn default() -> Self {
        CallModelDefaults {
            provider: None,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
        }
    }
}

impl CallModelDefaults {
    /// Defaults with the given provider.
    pub fn provider(mut self, provider: impl Into<String>) -> Self {
        self.provider = Some(provider.into());
        self
    }

    /// Defaults with the given idle timeout.
    pub fn idle_timeout(mut self, idle_timeout: Duration) -> Self {
        self.idle_timeout = idle_timeout;
        self
    }
}

type BeforeStep = dyn Fn(StepRef, Context) -> BoxFuture<'static, ()> + Send + Sync;
type AfterStep = dyn Fn(StepRef, Value, Context) -> BoxFuture<'static, ()> + Send + Sync;

/// Hooks called around every step: `before_step` after the step is counted and before `step_started`,
/// `after_step` with the step's output after `step_completed`.
#[derive(Clone, Default)]
pub struct AgentHooks {
    pub(crate) before_step: Option<Arc<BeforeStep>>,
    pub(crate) after_step: Option<Arc<AfterStep>>,
}

impl AgentHooks {
    /// No hooks.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the hook called before each step.
    pub fn before_step<F, Fut>(mut self, hook: F) -> Self
    where
        F: Fn(StepRef, Context) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.before_step = Some(Arc::new(move |step, ctx| Box::pin(hook(step, ctx))));
        self
    }

    /// Sets the hook called after each successful step, with its output.
    pub fn after_step<F, Fut>(mut self, hook: F) -> Self
    where
        F: Fn(StepRef, Value, Context) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.after_step = Some(Arc::new(move |step, output, ctx| {
            Box::pin(hook(step, output, ctx))
        }));
        self
    }
}

impl std::fmt::Debug for AgentHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentHooks")
            .field("before_step", &self.before_step.is_some())
            .field("after_step", &self.after_step.is_some())
            .finish()
    }
}

/// The input and output types an agent graph was built with, so that asking for it with other types
/// is an error instead of a surprise at run time.
#[derive(Debug, Clone, Copy)]
struct GraphTypes {
    input: (TypeId, &'static str),
    output: (TypeId, &'static str),
}

impl GraphTypes {
    fn of<I: 'static, O: 'static>() -> Self {
        GraphTypes {
            input: (TypeId::of::<I>(), std::any::type_name::<I>()),
            output: (TypeId::of::<O>(), std::any::type_name::<O>()),
        }
    }

    /// Whether a graph of these types may be handed out as `requested`: each side must be the same
    /// type, unless either is `serde_json::Value`, which every step value converts to and from.
    fn admits(&self, requested: &GraphTypes) -> bool {
        let value = TypeId::of::<Value>();
        let side = |graph: (TypeId, &str), asked: (TypeId, &str)| {
            graph.0 == asked.0 || graph.0 == value || asked.0 == value
        };
        side(self.input, requested.input) && side(self.output, requested.output)
    }
}

/// Builds an [`AgentHarness`]; see [`AgentHarness::builder`].
#[must_use = "call .build() to get the harness"]
pub struct AgentHarnessBuilder {
    name: String,
    agent_graph: Option<(Arc<crate::step::StepNode>, GraphTypes)>,
    params: Arc<dyn Any + Send + Sync>,
    providers: Vec<(String, Arc<dyn ModelProvider>)>,
    defaults: CallModelDefaults,
    hooks: AgentHooks,
    tools: Vec<Tool>,
    layers: Vec<Arc<dyn ContextLayer>>,
    default_delivery_mode: DeliveryMode,
    on_steer: Option<Arc<OnSteer>>,
    workflow_registry: WorkflowRegistry,
    connections: Vec<Arc<dyn Connection>>,
    storage: Option<Arc<dyn StorageAdapter>>,
}

impl AgentHarness {
    /// Starts building a harness called `name` (the prefix of its framework events).
    ///
    /// # Examples
    /// ```
    /// use noetic_core::{AgentHarness, ContextOptions, run_code, Context};
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let harness = AgentHarness::builder("calc").build()?;
    /// let double = run_code("double", |n: i64, _: Context| async move { Ok::<_, std::convert::Infallible>(n * 2) }).build();
    /// let ctx = harness.create_context(ContextOptions::default());
    /// assert_eq!(harness.run(&double, 21, &ctx).await?, 42);
    /// # Ok::<(), noetic_core::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn builder(name: impl Into<String>) -> AgentHarnessBuilder {
        AgentHarnessBuilder {
            name: name.into(),
            agent_graph: None,
            params: Arc::new(()),
            providers: Vec::new(),
            defaults: CallModelDefaults::default(),
            hooks: AgentHooks::default(),
            tools: Vec::new(),
            layers: Vec::new(),
            default_delivery_mode: DeliveryMode::NextTurn,
            on_steer: None,
            workflow_registry: WorkflowRegistry::default(),
            connections: Vec::new(),
            storage: None,
        }
    }

    /// The harness's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The typed params given to the builder, when they are a `P`.
    pub fn params<P: Any + Send + Sync>(&self) -> Option<&P> {
        self.inner.params.downcast_ref::<P>()
    }

    /// The agent graph, when one was configured, as a `Step<I, O>`.
    ///
    /// `I` and `O` must be the types the graph was built with, except that `serde_json::Value` on
    /// either side matches any type: a JSON workflow's graph (`Value → Value`) can be asked for as
    /// `Step<String, String>`, and any graph as `Step<Value, Value>`. The values are then converted
    /// by serde when the graph runs (a mismatch there is `STEP_FAILED`, type mismatch).
    ///
    /// # Errors
    /// [`Error::NoStepConfigured`] when none was; [`Error::InvalidArgument`] naming both pairs of
    /// types when `I` or `O` differs from the graph's.
    pub fn agent_graph<I: 'static, O: 'static>(&self) -> Result<Step<I, O>> {
        let (node, types) = self
            .inner
            .agent_graph
            .as_ref()
            .ok_or(Error::NoStepConfigured)?;
        let requested = GraphTypes::of::<I, O>();
        if !types.admits(&requested) {
            return Err(Error::InvalidArgument {
                argument: "agent_graph",
                message: format!(
                    "the agent graph is a `Step<{}, {}>`, not the requested `Step<{}, {}>` \
                     (`serde_json::Value` on either side matches any type)",
                    types.input.1, types.output.1, requested.input.1, requested.output.1
                ),
            });
        }
        Ok(Step::from_arc(node.clone()))
    }

    /// A new root context (or a child, with `options.parent`).
    pub fn create_context(&self, options: ContextOptions) -> Context {
        Context::new(self.clone(), options)
    }

    /// Runs a step tree on `ctx` and returns its output.
    ///
    /// Before anything runs, the context's layers that are not initialized on it yet get `init`: once
    /// per context, so repeated and nested runs on the same context never re-initialize. Nothing is
    /// completed when the run ends: the layers' `on_complete` and `dispose` run when the context is
    /// closed with [`AgentHarness::close_context`] (see [`crate::layer`]), which reports how the last
    /// run ended.
    ///
    /// # Errors
    /// The step's error; [`Error::InvalidStep`] or [`Error::MissingModel`] before anything runs when the
    /// tree is malformed; [`Error::ConnectionUnsatisfied`] before anything runs when a step needs an
    /// operation no registered connection supports.
    ///
    /// # Cancel safety
    /// Dropping the future stops the tree at its current await point; spend already charged stays on the
    /// context, and the run's outcome is not recorded for `close_context`. Abort the context instead to
    /// let steps observe `CANCELLED`.
    pub async fn run<I: Serialize, O: DeserializeOwned>(
        &self,
        step: &Step<I, O>,
        input: I,
        ctx: &Context,
    ) -> Result<O> {
        step.validate()?;
        crate::connection::check(self, &step.node)?;
        let input = encode(step.id(), "input", input)?;
        // The outermost run() on a root bounds its execution for channel handles: when it ends, however
        // it ends, external handles close; nested runs on the root and runs on children close nothing.
        let _channels = crate::channel::RunGuard::enter(ctx);
        let result = match crate::layer::lifecycle::init(ctx, &ctx.layers()).await {
            Ok(()) => execute(&step.node, input, Origin::Root, ctx).await,
            Err(error) => Err(error),
        };
        crate::layer::lifecycle::finished(ctx, &result);
        decode(step.id(), "output", result?)
    }

    /// Ends a context's execution: its layers get `on_complete` and then `dispose` — first those of its
    /// descendants that are still open (children made by hand with `ContextOptions::parent`; `spawn`
    /// and parallel paths close their own), then its own, in reverse slot order.
    ///
    /// The outcome is `Aborted` when the context was aborted, else that of the last `run()` on it
    /// (`Success` when none finished). Closing a closed context does nothing; a later `run()` on it
    /// initializes its layers again (a new execution). Close a context once its runs have ended.
    ///
    /// A context dropped without being closed never completes its layers (async hooks cannot run on
    /// drop), and a warning is logged. Session turns need none of this: each turn's context is closed
    /// when the turn ends.
    ///
    /// # Cancel safety
    /// Dropping the future mid-way leaves the hooks not yet called uncalled; the context counts as
    /// closed.
    pub async fn close_context(&self, ctx: &Context) {
        let outcome = crate::layer::lifecycle::closing_outcome(ctx);
        crate::layer::lifecycle::close(ctx, outcome).await;
    }

    /// The storage adapter (an [`InMemoryStorage`] unless the builder was given one).
    pub fn storage(&self) -> &Arc<dyn StorageAdapter> {
        &self.inner.storage
    }

    /// The connection registered under `name`.
    pub fn connection(&self, name: &str) -> Option<&Arc<dyn Connection>> {
        self.inner
            .connections
            .iter()
            .find(|connection| connection.name() == name)
    }

    /// The harness-wide tools (offered to every `call_model` after the step's own).
    pub fn tools(&self) -> &[Tool] {
        &self.inner.tools
    }

    /// The registry that workflow documents' names resolve against.
    pub fn workflow_registry(&self) -> &WorkflowRegistry {
        &self.inner.workflow_registry
    }

    /// The `call_model` defaults.
    pub fn call_model_defaults(&self) -> &CallModelDefaults {
        &self.inner.defaults
    }

    pub(crate) fn idle_timeout(&self) -> Duration {
        self.inner.defaults.idle_timeout
    }

    pub(crate) fn hooks(&self) -> &AgentHooks {
        &self.inner.hooks
    }

    pub(crate) fn layers(&self) -> Arc<[Arc<dyn ContextLayer>]> {
        self.inner.layers.clone()
    }

    pub(crate) fn agent_graph_node(&self) -> Option<Arc<crate::step::StepNode>> {
        self.inner
            .agent_graph
            .as_ref()
            .map(|(node, _)| node.clone())
    }

    pub(crate) fn sessions(&self) -> &Sessions {
        &self.inner.sessions
    }

    pub(crate) fn default_delivery_mode(&self) -> DeliveryMode {
        self.inner.default_delivery_mode
    }

    pub(crate) fn on_steer_hook(&self) -> Option<Arc<OnSteer>> {
        self.inner.on_steer.clone()
    }

    pub(crate) fn spawn_session_task(
        &self,
        task: impl std::future::Future<Output = ()> + Send + 'static,
    ) {
        self.inner.tasks.spawn(task);
    }

    /// The number of sessions (threads) this harness holds.
    pub fn session_count(&self) -> usize {
        self.inner.sessions.len()
    }

    /// Waits until every session runner has finished its queued turns.
    ///
    /// # Cancel safety
    /// Cancel safe: it only waits.
    pub async fn wait_idle(&self) {
        let tracker = &self.inner.tasks;
        tracker.close();
        tracker.wait().await;
        tracker.reopen();
    }

    /// Finds the provider for a model call: the step's choice, else the harness default, else the only
    /// registered provider, else `openrouter`.
    ///
    /// # Errors
    /// [`Error::NoLlmProvider`], with a hint naming the env var that would configure it.
    pub fn resolve_provider(
        &self,
        step_provider: Option<&str>,
        model: &str,
    ) -> Result<(String, Arc<dyn ModelProvider>)> {
        let providers = &self.inner.providers;
        let name = match step_provider.or(self.inner.defaults.provider.as_deref()) {
            Some(name) => name,
            None if providers.len() == 1 => providers[0].0.as_str(),
            None => "openrouter",
        };
        match providers.iter().find(|(registered, _)| registered == name) {
            Some((name, provider)) => Ok((name.clone(), provider.clone())),
            None => Err(Error::NoLlmProvider {
                provider: name.to_owned(),
                model: model.to_owned(),
                hint: provider_hint(name),
            }),
        }
    }
}

fn provider_hint(name: &str) -> String {
    match name {
        "openrouter" => "set OPENROUTER_API_KEY and register `OpenRouter::from_env()?` with `.provider(\"openrouter\", …)`".to_owned(),
        "openai" => "set OPENAI_API_KEY and register `OpenAI::from_env()?` with `.provider(\"openai\", …)`".to_owned(),
        other => format!("register a provider named `{other}` with `.provider(\"{other}\", …)`"),
    }
}

impl std::fmt::Debug for AgentHarness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentHarness")
            .field("name", &self.inner.name)
            .field(
                "providers",
                &self
                    .inner
                    .providers
                    .iter()
                    .map(|(name, _)| name.as_str())
                    .collect::<Vec<_>>(),
            )
            .field("tools", &self.inner.tools.len())
            .field("layers", &self.inner.layers.len())
            .finish_non_exhaustive()
    }
}

impl AgentHarnessBuilder {
    /// The agent graph that `execute()` runs. Its input and output types are recorded for
    /// [`AgentHarness::agent_graph`].
    pub fn agent_graph<I: 'static, O: 'static>(mut self, step: impl Into<Step<I, O>>) -> Self {
        self.agent_graph = Some((step.into().node, GraphTypes::of::<I, O>()));
        self
    }

    /// Typed params, readable by steps and tools through `ctx.harness().params::<P>()`.
    pub fn params<P: Any + Send + Sync>(mut self, params: P) -> Self {
        self.params = Arc::new(params);
        self
    }

    /// Registers a model provider under `name`.
    pub fn provider(mut self, name: impl Into<String>, provider: impl ModelProvider) -> Self {
        let name = name.into();
        self.providers.retain(|(registered, _)| *registered != name);
        self.providers.push((name, Arc::new(provider)));
        self
    }

    /// Defaults for every `call_model`.
    pub fn call_model_defaults(mut self, defaults: CallModelDefaults) -> Self {
        self.defaults = defaults;
        self
    }

    /// The stream idle timeout of each model round (default 120 s).
    pub fn idle_timeout(mut self, idle_timeout: Duration) -> Self {
        self.defaults.idle_timeout = idle_timeout;
        self
    }

    /// Hooks around every step.
    pub fn hooks(mut self, hooks: AgentHooks) -> Self {
        self.hooks = hooks;
        self
    }

    /// A tool offered to every `call_model`.
    pub fn tool(mut self, tool: Tool) -> Self {
        self.tools.push(tool);
        self
    }

    /// The delivery mode of messages whose `ExecuteOptions` name none (default `next-turn`).
    pub fn default_delivery_mode(mut self, mode: DeliveryMode) -> Self {
        self.default_delivery_mode = mode;
        self
    }

    /// A hook deciding what happens to each steering message at each steer point (before the context
    /// layers' `on_steer`); `None` leaves the decision to them, then to the defaults.
    pub fn on_steer(
        mut self,
        hook: impl Fn(&Steer, SteerPoint, &Context) -> Option<SteerDecision> + Send + Sync + 'static,
    ) -> Self {
        self.on_steer = Some(Arc::new(hook));
        self
    }

    /// Registers a connection; `run()` checks the steps' declared needs against the registered ones. A
    /// later connection with the same name replaces an earlier one.
    pub fn connection(mut self, connection: impl Connection) -> Self {
        let connection: Arc<dyn Connection> = Arc::new(connection);
        self.connections
            .retain(|registered| registered.name() != connection.name());
        self.connections.push(connection);
        self
    }

    /// The registry that [`AgentHarness::parse_and_run_workflow`] resolves names against (the
    /// harness's own tools resolve names it lacks).
    pub fn workflow_registry(mut self, registry: WorkflowRegistry) -> Self {
        self.workflow_registry = registry;
        self
    }

    /// Context layers of every context this harness creates.
    pub fn context_layers(
        mut self,
        layers: impl IntoIterator<Item = Arc<dyn ContextLayer>>,
    ) -> Self {
        self.layers.extend(layers);
        self
    }

    /// The storage adapter for layer state (default: a fresh [`InMemoryStorage`]). Share one
    /// `Arc<InMemoryStorage>` between harnesses to share their state.
    pub fn storage(mut self, storage: impl StorageAdapter) -> Self {
        self.storage = Some(Arc::new(storage));
        self
    }

    /// Builds the harness.
    ///
    /// # Errors
    /// [`Error::InvalidStep`] or [`Error::MissingModel`] when the agent graph is malformed.
    pub fn build(self) -> Result<AgentHarness> {
        if let Some((graph, _)) = &self.agent_graph {
            graph.validate()?;
        }
        Ok(AgentHarness {
            inner: Arc::new(HarnessInner {
                name: self.name,
                agent_graph: self.agent_graph,
                params: self.params,
                providers: self.providers,
                defaults: self.defaults,
                hooks: self.hooks,
                tools: self.tools,
                layers: self.layers.into(),
                default_delivery_mode: self.default_delivery_mode,
                on_steer: self.on_steer,
                workflow_registry: self.workflow_registry,
                connections: self.connections,
                storage: self
                    .storage
                    .unwrap_or_else(|| Arc::new(InMemoryStorage::new())),
                sessions: Sessions::default(),
                tasks: TaskTracker::new(),
            }),
        })
    }
}

impl std::fmt::Debug for AgentHarnessBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentHarnessBuilder")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}
