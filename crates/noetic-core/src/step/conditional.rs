//! `conditional`: a route function picks the next step, or none (then the output is the input).

use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{Origin, Step, StepBody, StepNode, decode, execute as execute_step};
use crate::Result;
use crate::context::Context;

type Route = dyn Fn(&Value, &Context) -> Result<Option<Arc<StepNode>>> + Send + Sync;

pub(crate) struct ConditionalSpec {
    route: Box<Route>,
}

/// A step that routes its input: `route` returns the step to run with the same input and context, or
/// `None` to pass the input through unchanged.
///
/// # Examples
/// ```
/// use noetic_core::{conditional, run_code, Context, Step};
/// let negate: Step<i64, i64> = run_code("negate", |n: i64, _: Context| async move { Ok::<_, std::convert::Infallible>(-n) }).build();
/// let abs = conditional("abs", move |n: &i64, _ctx: &Context| (*n < 0).then(|| negate.clone()));
/// assert_eq!(abs.id(), "abs");
/// ```
pub fn conditional<I, F>(id: impl Into<String>, route: F) -> Step<I, I>
where
    I: DeserializeOwned + 'static,
    F: Fn(&I, &Context) -> Option<Step<I, I>> + Send + Sync + 'static,
{
    let id = id.into();
    let step_id = id.clone();
    let erased = move |input: &Value, ctx: &Context| -> Result<Option<Arc<StepNode>>> {
        let typed: I = decode(&step_id, "input", input.clone())?;
        Ok(route(&typed, ctx).map(|step| step.node))
    };
    Step::from_node(StepNode {
        id,
        body: StepBody::Conditional(ConditionalSpec {
            route: Box::new(erased),
        }),
    })
}

pub(crate) async fn execute(
    spec: &ConditionalSpec,
    input: Value,
    origin: Origin,
    ctx: &Context,
) -> Result<Value> {
    match (spec.route)(&input, ctx)? {
        Some(next) => {
            // The routed step was not part of the tree checked before the run: check it now.
            next.validate()?;
            execute_step(&next, input, origin, ctx).await
        }
        None => Ok(input),
    }
}
