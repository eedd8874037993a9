//! [`StepRegistry`]: the steps a program runs by id in a child process.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;

use crate::adapter::StepRequest;
use crate::context::{Context, ContextOptions};
use crate::event::EventSink;
use crate::runtime::Runtime;
use crate::step::{Origin, Step, StepNode};
use crate::{Error, Result};

/// The steps a program can run by id in a child process.
///
/// A step holds closures, which cannot cross a process boundary; instead both the host and the child
/// (the same binary, re-executed) build the same registry, the host sends a step's id and its input as
/// JSON, and the child runs its own copy. An out-of-process subprocess adapter runs exactly the steps
/// of its registry out of process, and every other step in the caller.
///
/// # Examples
/// ```
/// use noetic_core::{Context, StepRegistry, run_code};
/// let heavy = run_code("heavy", |n: u64, _: Context| async move { Ok::<_, std::convert::Infallible>(n * n) });
/// let registry = StepRegistry::new().register(heavy);
/// assert!(registry.contains("heavy"));
/// ```
#[derive(Clone, Default)]
pub struct StepRegistry {
    steps: BTreeMap<String, Arc<StepNode>>,
}

impl StepRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `step` under its id (replacing a step of the same id).
    pub fn register<I, O>(mut self, step: impl Into<Step<I, O>>) -> Self {
        let step = step.into();
        self.steps.insert(step.id().to_owned(), step.node);
        self
    }

    /// Whether a step is registered under `id`.
    pub fn contains(&self, id: &str) -> bool {
        self.steps.contains_key(id)
    }

    /// The registered ids, sorted.
    pub fn ids(&self) -> impl Iterator<Item = &str> {
        self.steps.keys().map(String::as_str)
    }

    /// The root context a child process runs `request` on: on `runtime`, with the request's
    /// execution id as its id (a detached child's handle id), its thread and resource, events to `sink`.
    pub fn context_for(
        &self,
        runtime: &Arc<Runtime>,
        request: &StepRequest,
        sink: Option<Arc<dyn EventSink>>,
    ) -> Context {
        let mut options = ContextOptions::new();
        options.id = Some(request.execution_id.clone());
        options.thread_id = request.thread_id.clone();
        options.resource_id = request.resource_id.clone();
        options.event_sink = sink;
        Context::new(runtime.clone(), options)
    }

    /// Runs the step `request` names on `ctx`, as a child process does: this step runs here whatever
    /// its subprocess adapter says (steps inside it are routed as usual).
    ///
    /// # Errors
    /// [`Error::NotFound`] (kind `step`) when no step is registered under the request's step id; else
    /// the step's own error.
    pub async fn run(&self, request: &StepRequest, ctx: &Context) -> Result<Value> {
        let Some(node) = self.steps.get(&request.step_id) else {
            return Err(Error::NotFound {
                kind: "step",
                id: request.step_id.clone(),
                hint: "register the step in the child program's StepRegistry under the same id",
            });
        };
        node.validate()?;
        crate::exec::run_routed(ctx, node, request.input.clone(), Origin::Root, false).await
    }
}

impl std::fmt::Debug for StepRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StepRegistry")
            .field("steps", &self.steps.keys().collect::<Vec<_>>())
            .finish()
    }
}
