//! [`WorkflowRegistry`]: what a workflow's names resolve to (tools, code steps, layers, subflow
//! documents), and [`HydrateOptions`].

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;

use serde::{Serialize, de::DeserializeOwned};

use super::document::WorkflowDocument;
use crate::adapter::SubprocessAdapter;
use crate::context::Context;
use crate::error::BoxError;
use crate::layer::ContextLayer;
use crate::step::{RetryPolicy, Step, run_code};
use crate::tool::{Tool, ToolSource};

/// Makes a `run_code` step with the given id and retry policy from a registered code body.
pub(crate) type CodeFactory = dyn Fn(
        String,
        Option<RetryPolicy>,
        Option<Arc<dyn SubprocessAdapter>>,
    ) -> Step<serde_json::Value, serde_json::Value>
    + Send
    + Sync;

/// The names a workflow document may use, and what they resolve to.
///
/// Built in builder style and cheap to clone (every entry is shared). Give it to the harness with
/// [`crate::AgentHarnessBuilder::workflow_registry`] for [`crate::AgentHarness::parse_and_run_workflow`],
/// or pass it to [`WorkflowDocument::hydrate`] directly.
///
/// # Examples
/// ```
/// use noetic_core::{Context, Tool, ToolContext};
/// use noetic_core::workflow::WorkflowRegistry;
/// use serde_json::Value;
/// # #[derive(serde::Deserialize, schemars::JsonSchema)] struct Args { text: String }
/// let registry = WorkflowRegistry::new()
///     .code("upper", |input: String, _ctx: Context| async move {
///         Ok::<_, std::convert::Infallible>(input.to_uppercase())
///     })
///     .tool(Tool::new("echo", "Echo the text", |args: Args, _: ToolContext| async move { Ok(args.text) }));
/// assert!(registry.has_code("upper"));
/// assert!(registry.tool_named("echo").is_some());
/// ```
#[derive(Clone, Default)]
#[must_use]
pub struct WorkflowRegistry {
    tools: BTreeMap<String, Tool>,
    code: BTreeMap<String, Arc<CodeFactory>>,
    layers: BTreeMap<String, Arc<dyn ContextLayer>>,
    documents: BTreeMap<String, Arc<WorkflowDocument>>,
    subprocesses: BTreeMap<String, Arc<dyn SubprocessAdapter>>,
    tool_sources: BTreeMap<String, Arc<dyn ToolSource>>,
    options: HydrateOptions,
}

/// Options of hydration that are not names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct HydrateOptions {
    /// The model of every `callModel` node that names none. Without it, such a node is
    /// `WORKFLOW_INVALID` (`MISSING_MODEL`) at hydration.
    pub default_model: Option<String>,
    /// Ends every `schedule` node after this many runs (see [`crate::ScheduleBuilder::max_runs`]).
    /// `None` (the default) lets schedules run until the context is cancelled, as the format intends.
    pub schedule_max_runs: Option<u32>,
}

impl HydrateOptions {
    /// Default options: no default model, schedules run until cancelled.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the default model.
    #[must_use]
    pub fn default_model(mut self, model: impl Into<String>) -> Self {
        self.default_model = Some(model.into());
        self
    }

    /// Ends every `schedule` node after `runs` runs.
    #[must_use]
    pub fn schedule_max_runs(mut self, runs: u32) -> Self {
        self.schedule_max_runs = Some(runs);
        self
    }
}

impl WorkflowRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a tool under its own name (for `invokeTool.toolName` and `callModel.tools[].type`).
    pub fn tool(mut self, tool: Tool) -> Self {
        self.tools.insert(tool.name().to_owned(), tool);
        self
    }

    /// Registers a code step under `name` (for `runCode.execute`). The body is a `run_code` body: it
    /// gets the input decoded as `I` and the context, and returns `Result<O, E>`.
    pub fn code<I, O, E, F, Fut>(mut self, name: impl Into<String>, body: F) -> Self
    where
        I: DeserializeOwned + Send + 'static,
        O: Serialize + Send + 'static,
        E: Into<BoxError> + 'static,
        F: Fn(I, Context) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<O, E>> + Send + 'static,
    {
        let body = Arc::new(body);
        let factory = move |id: String,
                            retry: Option<RetryPolicy>,
                            subprocess: Option<Arc<dyn SubprocessAdapter>>| {
            let body = body.clone();
            let mut builder = run_code(id, move |input: I, ctx: Context| body(input, ctx));
            if let Some(policy) = retry {
                builder = builder.retry(policy);
            }
            if let Some(adapter) = subprocess {
                builder = builder.subprocess_shared(adapter);
            }
            let step: Step<I, O> = builder.build();
            Step::from_arc(step.node)
        };
        self.code.insert(name.into(), Arc::new(factory));
        self
    }

    /// Registers a context layer under `name` (for `spawn.layers` and `withContext.layers`).
    pub fn layer(mut self, name: impl Into<String>, layer: Arc<dyn ContextLayer>) -> Self {
        self.layers.insert(name.into(), layer);
        self
    }

    /// Registers a subprocess adapter under `name` (for `runCode.subprocess`): such a step runs
    /// through `adapter` instead of the runtime's (out of process when the adapter says so for the
    /// node's id, as a `LocalSubprocess` does for the ids of its `StepRegistry`).
    pub fn subprocess(mut self, name: impl Into<String>, adapter: impl SubprocessAdapter) -> Self {
        self.subprocesses.insert(name.into(), Arc::new(adapter));
        self
    }

    /// Registers a tool source under `name` (a connection the document declares, say: an MCP
    /// server): a `callModel` tool entry `{"type": "<name>"}` offers its current tools.
    pub fn tool_source(mut self, name: impl Into<String>, source: impl ToolSource) -> Self {
        self.tool_sources.insert(name.into(), Arc::new(source));
        self
    }

    /// The tool source registered under `name`.
    pub fn tool_source_named(&self, name: &str) -> Option<&Arc<dyn ToolSource>> {
        self.tool_sources.get(name)
    }

    pub(crate) fn tool_source_names(&self) -> impl Iterator<Item = &str> {
        self.tool_sources.keys().map(String::as_str)
    }

    /// Registers a document under `name` (for `subflow.ref`).
    pub fn document(mut self, name: impl Into<String>, document: WorkflowDocument) -> Self {
        self.documents.insert(name.into(), Arc::new(document));
        self
    }

    /// Sets the options that [`crate::AgentHarness::parse_and_run_workflow`] hydrates with.
    pub fn options(mut self, options: HydrateOptions) -> Self {
        self.options = options;
        self
    }

    /// Sets the default model of `callModel` nodes that name none (shorthand for
    /// [`WorkflowRegistry::options`]).
    pub fn default_model(mut self, model: impl Into<String>) -> Self {
        self.options.default_model = Some(model.into());
        self
    }

    /// The options [`crate::AgentHarness::parse_and_run_workflow`] hydrates with.
    pub fn hydrate_options(&self) -> &HydrateOptions {
        &self.options
    }

    /// The tool registered under `name`.
    pub fn tool_named(&self, name: &str) -> Option<&Tool> {
        self.tools.get(name)
    }

    /// Whether a code step is registered under `name`.
    pub fn has_code(&self, name: &str) -> bool {
        self.code.contains_key(name)
    }

    /// The layer registered under `name`.
    pub fn layer_named(&self, name: &str) -> Option<&Arc<dyn ContextLayer>> {
        self.layers.get(name)
    }

    /// The document registered under `name`.
    pub fn document_named(&self, name: &str) -> Option<&WorkflowDocument> {
        self.documents.get(name).map(|document| &**document)
    }

    /// Hydrates `document` with this registry's options; `extra_tools` (a runtime's own) resolve
    /// names the registry lacks.
    pub(crate) fn hydrate_with_tools(
        &self,
        document: &WorkflowDocument,
        extra_tools: &[Tool],
    ) -> crate::Result<super::WorkflowStep> {
        super::hydrate::hydrate(document, self, &self.options, extra_tools)
    }

    pub(crate) fn code_factory(&self, name: &str) -> Option<&Arc<CodeFactory>> {
        self.code.get(name)
    }

    pub(crate) fn tool_names(&self) -> impl Iterator<Item = &str> {
        self.tools.keys().map(String::as_str)
    }

    pub(crate) fn code_names(&self) -> impl Iterator<Item = &str> {
        self.code.keys().map(String::as_str)
    }

    pub(crate) fn layer_names(&self) -> impl Iterator<Item = &str> {
        self.layers.keys().map(String::as_str)
    }

    pub(crate) fn subprocess_adapter(&self, name: &str) -> Option<&Arc<dyn SubprocessAdapter>> {
        self.subprocesses.get(name)
    }

    pub(crate) fn subprocess_names(&self) -> impl Iterator<Item = &str> {
        self.subprocesses.keys().map(String::as_str)
    }

    pub(crate) fn document_names(&self) -> impl Iterator<Item = &str> {
        self.documents.keys().map(String::as_str)
    }
}

impl fmt::Debug for WorkflowRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkflowRegistry")
            .field("tools", &self.tools.keys().collect::<Vec<_>>())
            .field("code", &self.code.keys().collect::<Vec<_>>())
            .field("layers", &self.layers.keys().collect::<Vec<_>>())
            .field("documents", &self.documents.keys().collect::<Vec<_>>())
            .field(
                "subprocesses",
                &self.subprocesses.keys().collect::<Vec<_>>(),
            )
            .field(
                "tool_sources",
                &self.tool_sources.keys().collect::<Vec<_>>(),
            )
            .field("options", &self.options)
            .finish()
    }
}
