//! The [`AgentHarness`]: a [`Runtime`] plus the agent graph, the sessions, the workflow registry and
//! the session tasks. Everything public about it lives in this folder, by topic: building
//! (`builder.rs`), sessions (`session.rs`), workflows (`workflow.rs`), channels (`channels.rs`) and
//! durable executions (`durable.rs`).
//! Nothing outside `harness/` names `AgentHarness`: running steps reach configuration through
//! [`Context::runtime`].

mod approval;
mod builder;
mod cancel;
mod channels;
mod durable;
mod serve;
mod session;
mod workflow;

use std::any::{Any, TypeId};
use std::sync::Arc;

use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;
use tokio_util::task::TaskTracker;

pub use builder::AgentHarnessBuilder;
pub use serve::{ServeOptions, ServeReport};

use crate::adapter::StorageAdapter;
use crate::connection::Connection;
use crate::context::{Context, ContextOptions};
use crate::model::ModelProvider;
use crate::runtime::{CallModelDefaults, Runtime};
use crate::session::{DeliveryMode, Sessions};
use crate::step::{Step, StepNode};
use crate::tool::Tool;
use crate::workflow::WorkflowRegistry;
use crate::{Error, Result};

/// The execution engine. Cheap to clone, `Send + Sync`.
#[derive(Clone)]
pub struct AgentHarness {
    inner: Arc<HarnessInner>,
}

struct HarnessInner {
    runtime: Arc<Runtime>,
    agent_graph: Option<(Arc<StepNode>, GraphTypes)>,
    default_delivery_mode: DeliveryMode,
    /// What workflow documents' names resolve to (`parse_and_run_workflow`).
    workflow_registry: WorkflowRegistry,
    sessions: Arc<Sessions>,
    /// Threads are shared with other hosts on the durable store (`shared_threads`).
    shared_threads: bool,
    /// The session runner tasks; tracked so none is detached from the harness.
    tasks: TaskTracker,
    /// The root contexts made by `create_context` and `restore`, by execution id, for
    /// `execution_status` (weak: a dropped context is gone).
    executions: std::sync::Mutex<std::collections::HashMap<String, crate::context::WeakContext>>,
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

impl AgentHarness {
    /// The runtime (configuration) every context of this harness runs with.
    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.inner.runtime
    }

    /// The harness's name.
    pub fn name(&self) -> &str {
        self.inner.runtime.name()
    }

    /// Whether its threads are shared with other hosts
    /// ([`AgentHarnessBuilder::shared_threads`](crate::AgentHarnessBuilder::shared_threads)).
    pub fn shares_threads(&self) -> bool {
        self.inner.shared_threads
    }

    /// The typed params given to the builder, when they are a `P`.
    pub fn params<P: Any + Send + Sync>(&self) -> Option<&P> {
        self.inner.runtime.params::<P>()
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

    /// A new root context (or a child, with `options.parent`) on the harness's runtime.
    pub fn create_context(&self, options: ContextOptions) -> Context {
        self.known(Context::new(self.inner.runtime.clone(), options))
    }

    /// Starts `step` as a detached child of `ctx`; see [`Context::detached_spawn`].
    ///
    /// # Errors
    /// As [`Context::detached_spawn`].
    pub async fn detached_spawn<I: Serialize, O: DeserializeOwned>(
        &self,
        step: &Step<I, O>,
        input: I,
        ctx: &Context,
        options: crate::DetachedOptions,
    ) -> Result<crate::DetachedHandle<O>> {
        ctx.detached_spawn(step, input, options).await
    }

    /// Rejoins the live detached child of `execution_id` through the harness's subprocess adapter
    /// (after a host restart: its `list_live` names them); see [`crate::DetachedHandle::restore`].
    ///
    /// # Errors
    /// `HANDLE_EVICTED` when no live child works for `execution_id`.
    pub async fn restore_detached<O: DeserializeOwned>(
        &self,
        execution_id: &str,
    ) -> Result<crate::DetachedHandle<O>> {
        crate::DetachedHandle::restore(&**self.inner.runtime.subprocess(), execution_id).await
    }

    /// Remembers `ctx` (weakly) for `execution_status`, forgetting dropped ones now and then.
    pub(crate) fn known(&self, ctx: Context) -> Context {
        let mut executions = crate::sync::lock(&self.inner.executions);
        if executions.len() >= 64 && executions.len().is_power_of_two() {
            executions.retain(|_, weak| weak.upgrade().is_some());
        }
        executions.insert(ctx.id().to_owned(), ctx.downgrade());
        ctx
    }

    /// Runs a step tree on `ctx` and returns its output: the same as [`Context::run`].
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
        ctx.run(step, input).await
    }

    /// Ends a context's execution: the same as [`Context::close`].
    ///
    /// A context dropped without being closed never completes its layers (async hooks cannot run on
    /// drop), and a warning is logged. Session turns need none of this: each turn's context is closed
    /// when the turn ends.
    ///
    /// # Cancel safety
    /// Dropping the future mid-way leaves the hooks not yet called uncalled; the context counts as
    /// closed.
    pub async fn close_context(&self, ctx: &Context) {
        ctx.close().await;
    }

    /// The storage adapter (an [`crate::InMemoryStorage`] unless the builder was given one).
    pub fn storage(&self) -> &Arc<dyn StorageAdapter> {
        self.inner.runtime.storage()
    }

    /// The connection registered under `name`.
    pub fn connection(&self, name: &str) -> Option<&Arc<dyn Connection>> {
        self.inner.runtime.connection(name)
    }

    /// The harness-wide tools (offered to every `call_model` after the step's own).
    pub fn tools(&self) -> &[Tool] {
        self.inner.runtime.tools()
    }

    /// The registry that workflow documents' names resolve against.
    pub fn workflow_registry(&self) -> &WorkflowRegistry {
        &self.inner.workflow_registry
    }

    /// The `call_model` defaults.
    pub fn call_model_defaults(&self) -> &CallModelDefaults {
        self.inner.runtime.call_model_defaults()
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
        self.inner.runtime.resolve_provider(step_provider, model)
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

    fn agent_graph_node(&self) -> Option<Arc<StepNode>> {
        self.inner
            .agent_graph
            .as_ref()
            .map(|(node, _)| node.clone())
    }

    fn sessions(&self) -> &Arc<Sessions> {
        &self.inner.sessions
    }

    fn tasks(&self) -> &TaskTracker {
        &self.inner.tasks
    }

    fn default_delivery_mode(&self) -> DeliveryMode {
        self.inner.default_delivery_mode
    }
}

impl std::fmt::Debug for AgentHarness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let runtime = &self.inner.runtime;
        f.debug_struct("AgentHarness")
            .field("name", &runtime.name())
            .field("providers", &runtime.provider_names().collect::<Vec<_>>())
            .field("tools", &runtime.tools().len())
            .field("layers", &runtime.layer_count())
            .finish_non_exhaustive()
    }
}
