//! `invoke_tool`: runs one tool directly, with validated arguments.

use std::marker::PhantomData;
use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;
use serde::Serialize;
use serde_json::{Map, Value};

use super::call_model::{ABORTED_WHILE_RUNNING, until_cancelled};
use super::{Step, StepBody, StepNode};
use crate::context::Context;
use crate::error::StepFailure;
use crate::event::FrameworkEvent;
use crate::tool::{Tool, ToolContext, output_text};
use crate::{Error, Result};

pub(crate) struct InvokeToolSpec {
    tool: Tool,
    preset: Map<String, Value>,
}

/// Builds an `invoke_tool` step; see [`invoke_tool`].
#[must_use = "a builder does nothing until turned into a step"]
pub struct InvokeToolBuilder<I, O> {
    id: String,
    spec: InvokeToolSpec,
    _types: PhantomData<fn(I) -> O>,
}

/// A step that runs `tool` with its input as arguments (an object), preset arguments taking precedence.
/// Invalid arguments or a failing tool fail the step with `STEP_FAILED`. When the context is cancelled
/// while the tool runs, the tool's future is dropped and the step fails with `CANCELLED` (see
/// [`Tool`]'s cancellation contract).
pub fn invoke_tool<I, O>(id: impl Into<String>, tool: Tool) -> InvokeToolBuilder<I, O> {
    InvokeToolBuilder {
        id: id.into(),
        spec: InvokeToolSpec {
            tool,
            preset: Map::new(),
        },
        _types: PhantomData,
    }
}

impl<I, O> InvokeToolBuilder<I, O> {
    /// Preset arguments, merged over the input's fields (shallow).
    ///
    /// # Panics
    /// Never; a preset that does not serialize to an object is ignored.
    pub fn args(mut self, preset: impl Serialize) -> Self {
        if let Ok(Value::Object(map)) = serde_json::to_value(preset) {
            self.spec.preset = map;
        }
        self
    }

    /// The finished step.
    pub fn build(self) -> Step<I, O> {
        Step::from_node(StepNode {
            id: self.id,
            body: StepBody::InvokeTool(self.spec),
        })
    }
}

impl<I, O> From<InvokeToolBuilder<I, O>> for Step<I, O> {
    fn from(builder: InvokeToolBuilder<I, O>) -> Self {
        builder.build()
    }
}

pub(crate) async fn execute(
    step_id: &str,
    spec: &InvokeToolSpec,
    input: Value,
    ctx: &Context,
) -> Result<Value> {
    let tool = &spec.tool;
    let fail = |message: String| Error::StepFailed {
        step_id: step_id.to_owned(),
        cause: StepFailure::Tool {
            tool: tool.name().to_owned(),
            message,
        },
    };
    let mut arguments = match input {
        Value::Object(map) => map,
        Value::Null => Map::new(),
        other if spec.preset.is_empty() => {
            return Err(fail(format!(
                "input must be an object of arguments, got {other}"
            )));
        }
        _ => Map::new(),
    };
    for (key, value) in &spec.preset {
        arguments.insert(key.clone(), value.clone());
    }
    let arguments = Value::Object(arguments);
    tool.validate(&arguments)
        .map_err(|message| fail(format!("invalid arguments: {message}")))?;
    ctx.emit(FrameworkEvent::ToolCallStarted {
        name: tool.name().to_owned(),
        call_id: step_id.to_owned(),
    });
    let tool_ctx = ToolContext {
        ctx: ctx.clone(),
        call_id: step_id.to_owned(),
        tool_name: tool.name().to_owned(),
    };
    let outcome = until_cancelled(
        ctx,
        AssertUnwindSafe(tool.call(arguments, tool_ctx)).catch_unwind(),
    )
    .await;
    let (result, output) = match outcome {
        None => (
            Err(Error::cancelled(ctx.abort_reason())),
            ABORTED_WHILE_RUNNING.to_owned(),
        ),
        Some(Ok(Ok(value))) => {
            let text = output_text(&value);
            (Ok(value), text)
        }
        Some(Ok(Err(error))) => (Err(fail(error.to_string())), format!("Error: {error}")),
        Some(Err(_)) => (
            Err(fail("tool panicked".to_owned())),
            "Error: tool panicked".to_owned(),
        ),
    };
    ctx.emit(FrameworkEvent::ToolCallCompleted {
        name: tool.name().to_owned(),
        call_id: step_id.to_owned(),
        error: result.is_err(),
        output,
    });
    result
}
