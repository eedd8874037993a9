//! The [`Runtime`]: the immutable configuration running steps read — name, params, providers, tools,
//! hooks, `call_model` defaults, the steering hook, connections, storage and default layers.
//!
//! A [`Context`] holds an `Arc<Runtime>`; steps, layers and tools reach configuration only through
//! [`Context::runtime`]. An [`crate::AgentHarness`] adds the agent graph, sessions and the workflow
//! registry on top of one, but a runtime needs no harness: [`Runtime::builder`] builds one on its own,
//! and [`Runtime::create_context`] (or [`Context::new`]) makes contexts that run steps with
//! [`Context::run`].

use std::any::Any;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::Value;

use crate::acp::{AcpAgentCommand, AcpRuntime};
use crate::adapter::{
    DurableStore, FsAdapter, InMemoryFs, InMemoryStorage, InProcess, NoShell, ShellAdapter,
    StorageAdapter, SubprocessAdapter,
};
use crate::approval::Approvals;
use crate::checkpoint::{DeferredDeletes, Durability, LedgerRetention};
use crate::connection::Connection;
use crate::context::OnSteer;
use crate::context::{Context, ContextOptions};
use crate::layer::ContextLayer;
use crate::model::ModelProvider;
use crate::paid::PaidCalls;
use crate::steer::{Steer, SteerDecision, SteerPoint};
use crate::step::StepRef;
use crate::tool::{Tool, ToolSource};
use crate::{Error, Result};

/// The default stream idle timeout of a model round.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(120);

/// The configuration every context of a harness (or of a bare runtime) runs with. Immutable once
/// built; shared as an `Arc`.
///
/// # Examples
/// ```
/// use noetic_core::{Context, ContextOptions, Runtime, run_code};
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let runtime = Runtime::builder("calc").build();
/// let double = run_code("double", |n: i64, _: Context| async move { Ok::<_, std::convert::Infallible>(n * 2) }).build();
/// let ctx = runtime.create_context(ContextOptions::default());
/// assert_eq!(ctx.run(&double, 21).await?, 42);
/// ctx.close().await;
/// # Ok::<(), noetic_core::Error>(())
/// # }).unwrap();
/// ```
pub struct Runtime {
    name: String,
    params: Arc<dyn Any + Send + Sync>,
    providers: Vec<(String, Arc<dyn ModelProvider>)>,
    defaults: CallModelDefaults,
    hooks: AgentHooks,
    /// Shared, so a `call_model` step can tell it is still looking at the same set (its cached
    /// tool specs).
    tools: Arc<[Tool]>,
    /// Sources whose current tools are offered to every `call_model` after the runtime's tools.
    tool_sources: Vec<Arc<dyn ToolSource>>,
    layers: Arc<[Arc<dyn ContextLayer>]>,
    on_steer: Option<Arc<OnSteer>>,
    /// What runs check the steps' declared needs against.
    connections: Vec<Arc<dyn Connection>>,
    /// Where layer state persists.
    storage: Arc<dyn StorageAdapter>,
    /// Where checkpoints, the step ledger and leases persist; `None` keeps every durability call a
    /// no-op.
    durability: Option<Durability>,
    /// The files tools read and write.
    fs: Arc<dyn FsAdapter>,
    /// Where shell commands run.
    shell: Arc<dyn ShellAdapter>,
    /// Where `run_code`, `spawn` and `detached_spawn` steps run.
    subprocess: Arc<dyn SubprocessAdapter>,
    /// The paid-call records of every model round run on this runtime (state: rounds add and end
    /// records as they run).
    paid_calls: Arc<PaidCalls>,
    /// The tool calls waiting for a person's approval (state: gated calls ask, `approve` and
    /// `reject` decide).
    approvals: Arc<Approvals>,
    /// What runs `acp_agent` steps, and the agents they may name.
    acp: Acp,
}

/// A runtime's ACP side: the runtime that runs `acp_agent` turns and the named agents.
#[derive(Default, Clone)]
struct Acp {
    runtime: Option<Arc<dyn AcpRuntime>>,
    agents: BTreeMap<String, AcpAgentCommand>,
}

impl Runtime {
    /// The paid-call records of this runtime's rounds.
    pub(crate) fn paid_calls(&self) -> &Arc<PaidCalls> {
        &self.paid_calls
    }

    /// The calls of this runtime's rounds waiting for approval.
    pub(crate) fn approvals(&self) -> &Arc<Approvals> {
        &self.approvals
    }

    /// Starts building a runtime called `name` (the prefix of its framework events).
    pub fn builder(name: impl Into<String>) -> RuntimeBuilder {
        RuntimeBuilder {
            name: name.into(),
            params: Arc::new(()),
            providers: Vec::new(),
            defaults: CallModelDefaults::default(),
            hooks: AgentHooks::default(),
            tools: Vec::new(),
            tool_sources: Vec::new(),
            layers: Vec::new(),
            on_steer: None,
            connections: Vec::new(),
            storage: None,
            fs: None,
            shell: None,
            subprocess: None,
            durable: None,
            acp: Acp::default(),
            lease_ttl: crate::checkpoint::DEFAULT_LEASE_TTL,
            retention: LedgerRetention::default(),
            event_log: None,
        }
    }

    /// A new root context running on this runtime (or a child, with `options.parent`); the same as
    /// [`Context::new`].
    pub fn create_context(self: &Arc<Self>, options: ContextOptions) -> Context {
        Context::new(self.clone(), options)
    }

    /// The runtime's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The typed params given to the builder, when they are a `P`.
    pub fn params<P: Any + Send + Sync>(&self) -> Option<&P> {
        self.params.downcast_ref::<P>()
    }

    /// The storage adapter (an [`InMemoryStorage`] unless the builder was given one).
    pub fn storage(&self) -> &Arc<dyn StorageAdapter> {
        &self.storage
    }

    /// The fs adapter (an [`InMemoryFs`] sandbox unless the builder was given one).
    pub fn fs(&self) -> &Arc<dyn FsAdapter> {
        &self.fs
    }

    /// The shell adapter ([`NoShell`], which answers exit 127, unless the builder was given one).
    pub fn shell(&self) -> &Arc<dyn ShellAdapter> {
        &self.shell
    }

    /// The subprocess adapter ([`InProcess`] unless the builder was given one).
    pub fn subprocess(&self) -> &Arc<dyn SubprocessAdapter> {
        &self.subprocess
    }

    /// What runs `acp_agent` steps, when the builder was given one ([`RuntimeBuilder::acp_runtime`]).
    pub fn acp_runtime(&self) -> Option<&Arc<dyn AcpRuntime>> {
        self.acp.runtime.as_ref()
    }

    /// The ACP agent registered under `name` ([`RuntimeBuilder::acp_agent`]).
    pub fn acp_agent(&self, name: &str) -> Option<&AcpAgentCommand> {
        self.acp.agents.get(name)
    }

    /// The names of the registered ACP agents, sorted.
    pub fn acp_agent_names(&self) -> impl Iterator<Item = &str> {
        self.acp.agents.keys().map(String::as_str)
    }

    /// The durable store, when the builder was given one ([`RuntimeBuilder::durable`]).
    pub fn durable(&self) -> Option<&Arc<dyn DurableStore>> {
        self.durability.as_ref().map(|durability| &durability.store)
    }

    /// How this runtime records durable executions, when it has a durable store.
    pub(crate) fn durability(&self) -> Option<&Durability> {
        self.durability.as_ref()
    }

    /// The connection registered under `name`.
    pub fn connection(&self, name: &str) -> Option<&Arc<dyn Connection>> {
        self.connections
            .iter()
            .find(|connection| connection.name() == name)
    }

    /// The runtime-wide tools (offered to every `call_model` after the step's own).
    pub fn tools(&self) -> &[Tool] {
        &self.tools
    }

    /// The runtime-wide tools, shared.
    pub(crate) fn shared_tools(&self) -> &Arc<[Tool]> {
        &self.tools
    }

    /// The runtime-wide tool sources (their tools offered to every `call_model` after the
    /// runtime's tools).
    pub fn tool_sources(&self) -> &[Arc<dyn ToolSource>] {
        &self.tool_sources
    }

    /// The `call_model` defaults.
    pub fn call_model_defaults(&self) -> &CallModelDefaults {
        &self.defaults
    }

    /// The default context layers of new root contexts.
    pub(crate) fn layers(&self) -> Arc<[Arc<dyn ContextLayer>]> {
        self.layers.clone()
    }

    pub(crate) fn layer_count(&self) -> usize {
        self.layers.len()
    }

    pub(crate) fn provider_names(&self) -> impl Iterator<Item = &str> {
        self.providers.iter().map(|(name, _)| name.as_str())
    }

    pub(crate) fn idle_timeout(&self) -> Duration {
        self.defaults.idle_timeout
    }

    pub(crate) fn hooks(&self) -> &AgentHooks {
        &self.hooks
    }

    pub(crate) fn on_steer_hook(&self) -> Option<Arc<OnSteer>> {
        self.on_steer.clone()
    }

    /// Finds the provider for a model call: the step's choice, else the default, else the only
    /// registered provider, else `openrouter`.
    ///
    /// # Errors
    /// [`Error::NoLlmProvider`], with a hint naming the env var that would configure it.
    pub(crate) fn resolve_provider(
        &self,
        step_provider: Option<&str>,
        model: &str,
    ) -> Result<(String, Arc<dyn ModelProvider>)> {
        let providers = &self.providers;
        let name = match step_provider.or(self.defaults.provider.as_deref()) {
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
        "anthropic" => "set ANTHROPIC_API_KEY and register `Anthropic::from_env()?` with `.provider(\"anthropic\", …)`".to_owned(),
        other => format!("register a provider named `{other}` with `.provider(\"{other}\", …)`"),
    }
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("name", &self.name)
            .field("providers", &self.provider_names().collect::<Vec<_>>())
            .field("tools", &self.tools.len())
            .field("layers", &self.layers.len())
            .finish_non_exhaustive()
    }
}

/// Builds a [`Runtime`]; see [`Runtime::builder`]. [`crate::AgentHarnessBuilder`] wraps one.
#[must_use = "call .build() to get the runtime"]
pub struct RuntimeBuilder {
    name: String,
    params: Arc<dyn Any + Send + Sync>,
    providers: Vec<(String, Arc<dyn ModelProvider>)>,
    defaults: CallModelDefaults,
    hooks: AgentHooks,
    tools: Vec<Tool>,
    tool_sources: Vec<Arc<dyn ToolSource>>,
    layers: Vec<Arc<dyn ContextLayer>>,
    on_steer: Option<Arc<OnSteer>>,
    connections: Vec<Arc<dyn Connection>>,
    storage: Option<Arc<dyn StorageAdapter>>,
    fs: Option<Arc<dyn FsAdapter>>,
    shell: Option<Arc<dyn ShellAdapter>>,
    subprocess: Option<Arc<dyn SubprocessAdapter>>,
    durable: Option<Arc<dyn DurableStore>>,
    acp: Acp,
    lease_ttl: Duration,
    retention: LedgerRetention,
    event_log: Option<crate::event::EventLogOptions>,
}

impl RuntimeBuilder {
    /// Typed params, readable by steps and tools through `ctx.runtime().params::<P>()`.
    pub fn params<P: Any + Send + Sync>(mut self, params: P) -> Self {
        self.params = Arc::new(params);
        self
    }

    /// Registers a model provider under `name` (replacing one of the same name).
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

    /// The current tools of `source` (an MCP server's, say), offered to every `call_model` after
    /// the runtime's tools and asked for again at every round.
    pub fn tools_from(mut self, source: impl ToolSource) -> Self {
        self.tool_sources.push(Arc::new(source));
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

    /// Registers a connection; runs check the steps' declared needs against the registered ones. A
    /// later connection with the same name replaces an earlier one.
    pub fn connection(mut self, connection: impl Connection) -> Self {
        let connection: Arc<dyn Connection> = Arc::new(connection);
        self.connections
            .retain(|registered| registered.name() != connection.name());
        self.connections.push(connection);
        self
    }

    /// Context layers of every root context made on this runtime.
    pub fn context_layers(
        mut self,
        layers: impl IntoIterator<Item = Arc<dyn ContextLayer>>,
    ) -> Self {
        self.layers.extend(layers);
        self
    }

    /// The storage adapter for layer state (default: a fresh [`InMemoryStorage`]). Share one
    /// `Arc<InMemoryStorage>` between runtimes to share their state.
    pub fn storage(mut self, storage: impl StorageAdapter) -> Self {
        self.storage = Some(Arc::new(storage));
        self
    }

    /// The files tools read and write (default: a fresh [`InMemoryFs`], a sandbox).
    pub fn fs(mut self, fs: impl FsAdapter) -> Self {
        self.fs = Some(Arc::new(fs));
        self
    }

    /// Where shell commands run (default: [`NoShell`], which runs nothing and answers exit 127).
    pub fn shell(mut self, shell: impl ShellAdapter) -> Self {
        self.shell = Some(Arc::new(shell));
        self
    }

    /// Where `run_code`, `spawn` and `detached_spawn` steps run unless the step (or the detached
    /// spawn) names its own (default: [`InProcess`]).
    pub fn subprocess(mut self, subprocess: impl SubprocessAdapter) -> Self {
        self.subprocess = Some(Arc::new(subprocess));
        self
    }

    /// What runs `acp_agent` steps (`noetic_acp::AcpClient`); without one such a step fails with
    /// `ACP_RUNTIME_MISSING`.
    pub fn acp_runtime(mut self, runtime: impl AcpRuntime) -> Self {
        self.acp.runtime = Some(Arc::new(runtime));
        self
    }

    /// Registers an ACP agent under `name`, for `acp_agent` steps (and JSON workflow nodes) that
    /// name it (replacing one of the same name).
    pub fn acp_agent(mut self, name: impl Into<String>, command: AcpAgentCommand) -> Self {
        self.acp.agents.insert(name.into(), command);
        self
    }

    /// Sets every adapter `environment` holds (the others keep their current values).
    pub fn environment(mut self, environment: Environment) -> Self {
        let Environment {
            storage,
            fs,
            shell,
            subprocess,
        } = environment;
        self.storage = storage.or(self.storage);
        self.fs = fs.or(self.fs);
        self.shell = shell.or(self.shell);
        self.subprocess = subprocess.or(self.subprocess);
        self
    }

    /// Makes the runtime durable on `store`, which then also holds layer state: checkpoints, the step
    /// ledger, durable sessions and leases are written to it. A SQLite file
    /// (`noetic_storage_sqlite::SqliteStorage`) survives the process; [`crate::KvDurableStore::in_memory`]
    /// lasts as long as the process does.
    pub fn durable<S: StorageAdapter + DurableStore>(mut self, store: S) -> Self {
        let store = Arc::new(store);
        self.storage = Some(store.clone());
        self.durable = Some(store);
        self
    }

    /// How long a durable execution's lease lasts unless renewed (default 30 s). A holder renews it at
    /// its checkpoints once half of it has passed; after a holder dies, another runtime can take the
    /// execution over once it expires.
    pub fn lease_ttl(mut self, ttl: Duration) -> Self {
        self.lease_ttl = ttl;
        self
    }

    /// Keeps each thread's session events in a durable event log (`thread/{id}/events`) when the
    /// runtime is durable: a subscriber resumes after any sequence number it saw, on any host
    /// sharing the store and across restarts (see [`crate::event::EventLogOptions`]). `None`
    /// (the default) keeps events in memory only. Ignored without a durable store.
    pub fn event_log(mut self, options: Option<crate::event::EventLogOptions>) -> Self {
        self.event_log = options;
        self
    }

    /// How much of each execution's step ledger is kept (default 128 KiB per output, 1000 rows).
    pub fn ledger_retention(mut self, retention: LedgerRetention) -> Self {
        self.retention = retention;
        self
    }

    /// The name given to [`Runtime::builder`].
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Builds the runtime.
    pub fn build(self) -> Arc<Runtime> {
        let durable_store = self.durable.clone();
        let deferred_deletes = Arc::new(DeferredDeletes::default());
        let paid_calls = Arc::new(PaidCalls::new(
            durable_store.clone(),
            Arc::clone(&deferred_deletes),
        ));
        Arc::new(Runtime {
            name: self.name,
            params: self.params,
            providers: self.providers,
            defaults: self.defaults,
            hooks: self.hooks,
            tools: self.tools.into(),
            tool_sources: self.tool_sources,
            layers: self.layers.into(),
            on_steer: self.on_steer,
            connections: self.connections,
            storage: self
                .storage
                .unwrap_or_else(|| Arc::new(InMemoryStorage::new())),
            fs: self.fs.unwrap_or_else(|| Arc::new(InMemoryFs::new())),
            shell: self.shell.unwrap_or_else(|| Arc::new(NoShell)),
            subprocess: self.subprocess.unwrap_or_else(|| Arc::new(InProcess)),
            durability: self.durable.map(|store| Durability {
                store,
                holder: crate::id::new_id(),
                lease_ttl: self.lease_ttl,
                retention: self.retention,
                event_log: self.event_log,
                deferred_deletes,
            }),
            approvals: Arc::new(Approvals::new(durable_store)),
            acp: self.acp,
            paid_calls,
        })
    }
}

impl std::fmt::Debug for RuntimeBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeBuilder")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// The surfaces a runtime's steps and tools run against, set together with
/// [`RuntimeBuilder::environment`] (or `AgentHarnessBuilder::environment`). Every field is optional and
/// defaults to a sandboxed in-memory adapter, so a zero-config runtime touches no file, runs no
/// command and starts no process.
///
/// # Examples
/// ```
/// use noetic_core::{Environment, Runtime, adapter::InMemoryFs};
/// let runtime = Runtime::builder("agent").environment(Environment::new().fs(InMemoryFs::new())).build();
/// # let _ = runtime;
/// ```
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct Environment {
    /// Key-value storage for layer state (default [`InMemoryStorage`]).
    pub storage: Option<Arc<dyn StorageAdapter>>,
    /// Files (default [`InMemoryFs`]).
    pub fs: Option<Arc<dyn FsAdapter>>,
    /// Shell commands (default [`NoShell`]).
    pub shell: Option<Arc<dyn ShellAdapter>>,
    /// Where steps run (default [`InProcess`]).
    pub subprocess: Option<Arc<dyn SubprocessAdapter>>,
}

impl Environment {
    /// Every adapter defaulted.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the storage adapter.
    pub fn storage(mut self, storage: impl StorageAdapter) -> Self {
        self.storage = Some(Arc::new(storage));
        self
    }

    /// Sets the fs adapter.
    pub fn fs(mut self, fs: impl FsAdapter) -> Self {
        self.fs = Some(Arc::new(fs));
        self
    }

    /// Sets the shell adapter.
    pub fn shell(mut self, shell: impl ShellAdapter) -> Self {
        self.shell = Some(Arc::new(shell));
        self
    }

    /// Sets the subprocess adapter.
    pub fn subprocess(mut self, subprocess: impl SubprocessAdapter) -> Self {
        self.subprocess = Some(Arc::new(subprocess));
        self
    }
}

impl std::fmt::Debug for Environment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Environment")
            .field("storage", &self.storage.is_some())
            .field("fs", &self.fs.is_some())
            .field("shell", &self.shell.is_some())
            .field("subprocess", &self.subprocess.is_some())
            .finish()
    }
}

/// Defaults for every `call_model` step of a runtime.
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
