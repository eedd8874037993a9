//! Building an [`AgentHarness`]: a [`RuntimeBuilder`] plus the harness's own parts.

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::task::TaskTracker;

use super::{AgentHarness, GraphTypes, HarnessInner};
use crate::Result;
use crate::adapter::StorageAdapter;
use crate::connection::Connection;
use crate::context::Context;
use crate::layer::ContextLayer;
use crate::model::ModelProvider;
use crate::runtime::{AgentHooks, CallModelDefaults, Runtime, RuntimeBuilder};
use crate::session::Sessions;
use crate::steer::{DeliveryMode, Steer, SteerDecision, SteerPoint};
use crate::step::{Step, StepNode};
use crate::tool::{Tool, ToolSource};
use crate::workflow::WorkflowRegistry;

/// Builds an [`AgentHarness`]; see [`AgentHarness::builder`].
#[must_use = "call .build() to get the harness"]
pub struct AgentHarnessBuilder {
    runtime: RuntimeBuilder,
    agent_graph: Option<(Arc<StepNode>, GraphTypes)>,
    default_delivery_mode: DeliveryMode,
    workflow_registry: WorkflowRegistry,
    session_idle_ttl: std::time::Duration,
    shared_threads: bool,
    /// `Some` once `event_log` was called.
    event_log: Option<Option<crate::event::EventLogOptions>>,
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
            runtime: Runtime::builder(name),
            agent_graph: None,
            default_delivery_mode: DeliveryMode::NextTurn,
            workflow_registry: WorkflowRegistry::default(),
            session_idle_ttl: crate::session::DEFAULT_SESSION_IDLE_TTL,
            shared_threads: false,
            event_log: None,
        }
    }
}

impl AgentHarnessBuilder {
    /// The agent graph that `execute()` runs. Its input and output types are recorded for
    /// [`AgentHarness::agent_graph`].
    pub fn agent_graph<I: 'static, O: 'static>(mut self, step: impl Into<Step<I, O>>) -> Self {
        self.agent_graph = Some((step.into().node, GraphTypes::of::<I, O>()));
        self
    }

    /// Typed params, readable by steps and tools through `ctx.runtime().params::<P>()`.
    pub fn params<P: Any + Send + Sync>(mut self, params: P) -> Self {
        self.runtime = self.runtime.params(params);
        self
    }

    /// Registers a model provider under `name`.
    pub fn provider(mut self, name: impl Into<String>, provider: impl ModelProvider) -> Self {
        self.runtime = self.runtime.provider(name, provider);
        self
    }

    /// Defaults for every `call_model`.
    pub fn call_model_defaults(mut self, defaults: CallModelDefaults) -> Self {
        self.runtime = self.runtime.call_model_defaults(defaults);
        self
    }

    /// The stream idle timeout of each model round (default 120 s).
    pub fn idle_timeout(mut self, idle_timeout: Duration) -> Self {
        self.runtime = self.runtime.idle_timeout(idle_timeout);
        self
    }

    /// Hooks around every step.
    pub fn hooks(mut self, hooks: AgentHooks) -> Self {
        self.runtime = self.runtime.hooks(hooks);
        self
    }

    /// A tool offered to every `call_model`.
    pub fn tool(mut self, tool: Tool) -> Self {
        self.runtime = self.runtime.tool(tool);
        self
    }

    /// The current tools of `source` (an MCP server's, say), offered to every `call_model` after the
    /// harness's tools and asked for again at every round.
    pub fn tools_from(mut self, source: impl ToolSource) -> Self {
        self.runtime = self.runtime.tools_from(source);
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
        self.runtime = self.runtime.on_steer(hook);
        self
    }

    /// Registers a connection; `run()` checks the steps' declared needs against the registered ones. A
    /// later connection with the same name replaces an earlier one.
    pub fn connection(mut self, connection: impl Connection) -> Self {
        self.runtime = self.runtime.connection(connection);
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
        self.runtime = self.runtime.context_layers(layers);
        self
    }

    /// The storage adapter for layer state (default: a fresh [`crate::InMemoryStorage`]). Share one
    /// `Arc<InMemoryStorage>` between harnesses to share their state.
    pub fn storage(mut self, storage: impl StorageAdapter) -> Self {
        self.runtime = self.runtime.storage(storage);
        self
    }

    /// The files tools read and write (default: an in-memory sandbox); see
    /// [`crate::RuntimeBuilder::fs`].
    pub fn fs(mut self, fs: impl crate::adapter::FsAdapter) -> Self {
        self.runtime = self.runtime.fs(fs);
        self
    }

    /// Where shell commands run (default: none, exit 127); see [`crate::RuntimeBuilder::shell`].
    pub fn shell(mut self, shell: impl crate::adapter::ShellAdapter) -> Self {
        self.runtime = self.runtime.shell(shell);
        self
    }

    /// What runs `acp_agent` steps (`noetic_acp::AcpClient`); see
    /// [`crate::RuntimeBuilder::acp_runtime`].
    pub fn acp_runtime(mut self, runtime: impl crate::acp::AcpRuntime) -> Self {
        self.runtime = self.runtime.acp_runtime(runtime);
        self
    }

    /// Registers an ACP agent under `name` for `acp_agent` steps and workflow nodes that name it;
    /// see [`crate::RuntimeBuilder::acp_agent`].
    pub fn acp_agent(
        mut self,
        name: impl Into<String>,
        command: crate::acp::AcpAgentCommand,
    ) -> Self {
        self.runtime = self.runtime.acp_agent(name, command);
        self
    }

    /// Where `run_code`, `spawn` and `detached_spawn` steps run (default: in process); see
    /// [`crate::RuntimeBuilder::subprocess`].
    pub fn subprocess(mut self, subprocess: impl crate::adapter::SubprocessAdapter) -> Self {
        self.runtime = self.runtime.subprocess(subprocess);
        self
    }

    /// Sets every adapter `environment` holds (storage, fs, shell, subprocess); see
    /// [`crate::Environment`].
    pub fn environment(mut self, environment: crate::Environment) -> Self {
        self.runtime = self.runtime.environment(environment);
        self
    }

    /// Makes the harness durable on `store` (see [`crate::RuntimeBuilder::durable`]).
    pub fn durable<S: StorageAdapter + crate::DurableStore>(mut self, store: S) -> Self {
        self.runtime = self.runtime.durable(store);
        self
    }

    /// How long a durable execution's lease lasts unless renewed (see
    /// [`crate::RuntimeBuilder::lease_ttl`]).
    pub fn lease_ttl(mut self, ttl: std::time::Duration) -> Self {
        self.runtime = self.runtime.lease_ttl(ttl);
        self
    }

    /// How long a session of a durable harness stays in memory after its last use (no turn, nothing
    /// queued, no subscriber) before it is evicted; its next use reads it back from the store
    /// (default [`crate::session::DEFAULT_SESSION_IDLE_TTL`], 10 minutes). So the threads one host
    /// serves are bounded by storage, not memory. Sessions without a durable store stay.
    pub fn session_idle_ttl(mut self, ttl: std::time::Duration) -> Self {
        self.session_idle_ttl = ttl;
        self
    }

    /// Shares this harness's threads with the other hosts on the same durable store (PostgreSQL's
    /// `noetic-storage-postgres`, or one SQLite file): [`AgentHarness::execute`] records the
    /// message and marks its thread runnable instead of taking the thread, and turns run on the hosts
    /// that [`serve`](AgentHarness::serve). Every host of a fleet is built with it — those that only
    /// accept messages too. Read a thread another host runs with [`AgentHarness::stored_thread`];
    /// `load_thread` and `recover` are refused (serving replaces them). See `docs/scaling.md`.
    pub fn shared_threads(mut self) -> Self {
        self.shared_threads = true;
        self
    }

    /// Keeps each thread's events in a durable event log (`options`; `None` keeps them in memory
    /// only): [`AgentHarness::sequenced_events`] and [`AgentHarness::events`] then resume after
    /// any sequence number a reader saw — across a restart, and on every host sharing the store,
    /// where a thread another host drives is followed live from the log. The default is on for
    /// [`AgentHarnessBuilder::shared_threads`] and off otherwise; ignored without a durable store.
    /// See `docs/serve.md` and `docs/scaling.md`.
    pub fn event_log(mut self, options: Option<crate::event::EventLogOptions>) -> Self {
        self.event_log = Some(options);
        self
    }

    /// How much of each execution's step ledger is kept (see
    /// [`crate::RuntimeBuilder::ledger_retention`]).
    pub fn ledger_retention(mut self, retention: crate::LedgerRetention) -> Self {
        self.runtime = self.runtime.ledger_retention(retention);
        self
    }

    /// Builds the harness.
    ///
    /// # Errors
    /// [`crate::Error::InvalidStep`] or [`crate::Error::MissingModel`] when the agent graph is
    /// malformed.
    pub fn build(mut self) -> Result<AgentHarness> {
        if let Some((graph, _)) = &self.agent_graph {
            graph.validate()?;
        }
        let event_log = self.event_log.unwrap_or_else(|| {
            self.shared_threads
                .then(crate::event::EventLogOptions::default)
        });
        self.runtime = self.runtime.event_log(event_log);
        Ok(AgentHarness {
            inner: Arc::new(HarnessInner {
                runtime: self.runtime.build(),
                agent_graph: self.agent_graph,
                default_delivery_mode: self.default_delivery_mode,
                workflow_registry: self.workflow_registry,
                sessions: Arc::new(Sessions::new(self.session_idle_ttl)),
                shared_threads: self.shared_threads,
                tasks: TaskTracker::new(),
                executions: std::sync::Mutex::default(),
            }),
        })
    }
}

impl std::fmt::Debug for AgentHarnessBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentHarnessBuilder")
            .field("name", &self.runtime.name())
            .finish_non_exhaustive()
    }
}
