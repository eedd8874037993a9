//! `with_context`: runs a step on the same context with different layers.
//!
//! The child shares the context (item log, state, spend, cancellation); only the layers change for the
//! duration: the context's layers minus those with the same ids as the given ones, then the given ones
//! (given layers win). The previous layers are restored afterwards, whether the child succeeds, fails or
//! is cancelled.

use std::sync::Arc;

use serde_json::Value;

use super::{Origin, Step, StepBody, StepNode, execute as execute_step};
use crate::Result;
use crate::context::Context;
use crate::layer::ContextLayer;

pub(crate) struct WithContextSpec {
    pub(crate) child: Arc<StepNode>,
    layers: Vec<Arc<dyn ContextLayer>>,
}

/// A step that runs `child` on the same context with `layers` added (replacing layers of the same id).
///
/// # Examples
/// ```
/// use noetic_core::{with_context, run_code, Context};
/// let work = run_code("work", |n: i64, _: Context| async move { Ok::<_, std::convert::Infallible>(n) });
/// let step = with_context("with-memory", work, Vec::new());
/// assert_eq!(step.id(), "with-memory");
/// ```
pub fn with_context<I, O>(
    id: impl Into<String>,
    child: impl Into<Step<I, O>>,
    layers: Vec<Arc<dyn ContextLayer>>,
) -> Step<I, O> {
    Step::from_node(StepNode {
        id: id.into(),
        body: StepBody::WithContext(WithContextSpec {
            child: child.into().node,
            layers,
        }),
    })
}

/// Restores the previous layers when dropped, so a failing or cancelled child cannot leave them changed.
struct Restore<'a> {
    ctx: &'a Context,
    previous: Option<Arc<[Arc<dyn ContextLayer>]>>,
}

impl Drop for Restore<'_> {
    fn drop(&mut self) {
        if let Some(previous) = self.previous.take() {
            self.ctx.replace_layers(previous);
        }
    }
}

pub(crate) async fn execute(
    spec: &WithContextSpec,
    input: Value,
    origin: Origin,
    ctx: &Context,
) -> Result<Value> {
    let current = ctx.layers();
    let mut merged: Vec<Arc<dyn ContextLayer>> = current
        .iter()
        .filter(|layer| !spec.layers.iter().any(|given| given.id() == layer.id()))
        .cloned()
        .collect();
    merged.extend(spec.layers.iter().cloned());
    let previous = ctx.replace_layers(merged.into());
    let _restore = Restore {
        ctx,
        previous: Some(previous),
    };
    // The given layers are initialized on this context (once; completed when it is closed).
    crate::layer::lifecycle::init(ctx, &spec.layers).await?;
    execute_step(&spec.child, input, origin, ctx).await
}
