//! `spawn`: runs a step in a child context with its own item log.
//!
//! The child gets a fresh id, its own item log, a copy of the parent's state, depth + 1, and the
//! parent's layers unless [`SpawnBuilder::layers`] replaces them (given layers are initialized on the
//! child). The child is its own root: its log starts empty and its input is a root input (a string
//! becomes its first user message), except when it is handed a session turn's messages unchanged —
//! then its log starts with those messages, as sent, and nothing is appended again. Its spend is charged to the parent as it happens (so it is rolled up on success, and nothing
//! billed is lost on failure). A timeout, when set, is enforced: the child is aborted and the step fails
//! with `STEP_FAILED` (`timed out`). When the step ends, however it ends, the child context is closed:
//! the layers initialized on it complete (after the parent's `on_return`).

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::{Origin, Step, StepBody, StepNode, execute as execute_step};
use crate::adapter::SubprocessAdapter;
use crate::context::{ChildSpec, Context};
use crate::error::StepFailure;
use crate::layer::ContextLayer;
use crate::{Error, Result};

pub(crate) struct SpawnSpec {
    pub(crate) child: Arc<StepNode>,
    timeout: Option<Duration>,
    layers: Option<Arc<[Arc<dyn ContextLayer>]>>,
    steers: SteerMode,
    /// Where the child runs, when not the runtime's adapter.
    pub(crate) subprocess: Option<Arc<dyn SubprocessAdapter>>,
}

/// Whether a spawned child's model calls take the session turn's steering messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum SteerMode {
    /// The child never sees steers; the parent applies them at its next steer point (default).
    #[default]
    Isolated,
    /// The child's model calls take steers at their own steer points.
    Forward,
}

/// Builds a `spawn` step; see [`spawn`].
#[must_use = "a builder does nothing until turned into a step"]
pub struct SpawnBuilder<I, O> {
    id: String,
    spec: SpawnSpec,
    _types: std::marker::PhantomData<fn(I) -> O>,
}

/// A step that runs `child` in a child context.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use noetic_core::{spawn, run_code, Context};
/// let work = run_code("work", |n: i64, _: Context| async move { Ok::<_, std::convert::Infallible>(n + 1) });
/// let isolated = spawn("isolated", work).timeout(Duration::from_secs(5)).build();
/// assert_eq!(isolated.id(), "isolated");
/// ```
pub fn spawn<I, O>(id: impl Into<String>, child: impl Into<Step<I, O>>) -> SpawnBuilder<I, O> {
    SpawnBuilder {
        id: id.into(),
        spec: SpawnSpec {
            child: child.into().node,
            timeout: None,
            layers: None,
            steers: SteerMode::Isolated,
            subprocess: None,
        },
        _types: std::marker::PhantomData,
    }
}

impl<I, O> SpawnBuilder<I, O> {
    /// Fails the step (and aborts the child) if the child runs longer than `timeout`.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.spec.timeout = Some(timeout);
        self
    }

    /// Replaces the parent's layers in the child.
    pub fn layers(mut self, layers: Vec<Arc<dyn ContextLayer>>) -> Self {
        self.spec.layers = Some(layers.into());
        self
    }

    /// Whether the child's model calls take the session turn's steering messages (default
    /// [`SteerMode::Isolated`]: the parent applies them at its next steer point).
    pub fn steers(mut self, mode: SteerMode) -> Self {
        self.spec.steers = mode;
        self
    }

    /// Runs the child through `adapter` instead of the runtime's subprocess adapter: in a child
    /// process when that adapter runs this step's id out of process (the child process runs the step
    /// its own program registered under this spawn's id).
    pub fn subprocess(mut self, adapter: impl SubprocessAdapter) -> Self {
        self.spec.subprocess = Some(Arc::new(adapter));
        self
    }

    /// The finished step.
    pub fn build(self) -> Step<I, O> {
        Step::from_node(StepNode {
            id: self.id,
            body: StepBody::Spawn(self.spec),
        })
    }
}

impl<I, O> From<SpawnBuilder<I, O>> for Step<I, O> {
    fn from(builder: SpawnBuilder<I, O>) -> Self {
        builder.build()
    }
}

pub(crate) async fn execute(
    step_id: &str,
    spec: &SpawnSpec,
    input: Value,
    origin: Origin,
    ctx: &Context,
) -> Result<Value> {
    // The child is its own root: handed a session turn's messages unchanged, it starts with them in its
    // log (as sent); handed anything else, it starts empty and its input is a root input (a string
    // becomes its user message).
    let (items, child_origin) = match origin {
        Origin::Turn(messages) => (messages.to_vec(), Origin::Turn(messages)),
        Origin::Root | Origin::Forwarded | Origin::FedBack => (Vec::new(), Origin::Root),
    };
    let child = ctx.child(ChildSpec {
        items,
        layers: spec.layers.clone(),
        forward_steers: spec.steers == SteerMode::Forward,
    });
    let result = async {
        // Layers given to the spawn are initialized for the child; inherited ones were initialized
        // on the parent already.
        if let Some(layers) = &spec.layers {
            crate::layer::lifecycle::init(&child, layers).await?;
        }
        crate::layer::lifecycle::spawned(ctx, &child).await?;
        let output = run_child(step_id, spec, input, child_origin, &child).await?;
        crate::layer::lifecycle::returned(ctx, &child).await?;
        Ok(output)
    }
    .await;
    // The child is done with the step, however it ended: its layers complete now, before the parent's.
    if crate::layer::lifecycle::is_open(&child) {
        let outcome = crate::layer::lifecycle::outcome_of(&child, &result);
        crate::layer::lifecycle::close(&child, outcome).await;
    }
    result
}

async fn run_child(
    step_id: &str,
    spec: &SpawnSpec,
    input: Value,
    origin: Origin,
    child: &Context,
) -> Result<Value> {
    let run = execute_step(&spec.child, input, origin, child);
    match spec.timeout {
        None => run.await,
        Some(after) => match tokio::time::timeout(after, run).await {
            Ok(result) => result,
            Err(_) => {
                child.abort(Some(format!("spawn `{step_id}` timed out")));
                Err(Error::StepFailed {
                    step_id: step_id.to_owned(),
                    cause: StepFailure::Timeout { after },
                })
            }
        },
    }
}
