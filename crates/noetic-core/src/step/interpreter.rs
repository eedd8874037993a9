//! The interpreter: the per-step protocol around every dispatch.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde_json::Value;

use super::{
    Origin, StepBody, StepNode, call_model, conditional, invoke_tool, loop_step, parallel,
    run_code, schedule, spawn, with_context,
};
use crate::checkpoint::Entered;
use crate::context::{Context, MAX_DEPTH};
use crate::error::StepFailure;
use crate::event::{FrameworkEvent, FrameworkEventKind};
use crate::{Error, Result};

/// Runs one step on `ctx`.
///
/// Order: refuse depth ≥ 64; `CANCELLED` if aborted; on a durable root, return the recorded output
/// of a step the ledger has at this path (`step_replayed`); count the step; `hooks.before_step`;
/// `step_started`; dispatch; on a durable root, record the output and checkpoint; `step_completed`;
/// `hooks.after_step` with the result.
///
/// `origin` says where the input came from (see [`Origin`]): only a root input becomes a user message
/// in a `call_model`, and a session turn's messages reach a spawned child.
pub(crate) fn execute<'a>(
    node: &'a Arc<StepNode>,
    input: Value,
    origin: Origin,
    ctx: &'a Context,
) -> BoxFuture<'a, Result<Value>> {
    execute_routed(node, input, origin, ctx, true)
}

/// [`execute`]; with `route: false` a `run_code` or `spawn` runs here even when its subprocess
/// adapter runs it out of process (the child process running it).
pub(crate) fn execute_routed<'a>(
    node: &'a Arc<StepNode>,
    input: Value,
    origin: Origin,
    ctx: &'a Context,
    route: bool,
) -> BoxFuture<'a, Result<Value>> {
    let span = crate::telemetry::step_span(&node.id, node.kind().as_str());
    Box::pin(crate::telemetry::traced(
        span,
        execute_in_span(node, input, origin, ctx, route),
    ))
}

async fn execute_in_span(
    node: &Arc<StepNode>,
    input: Value,
    origin: Origin,
    ctx: &Context,
    route: bool,
) -> Result<Value> {
    {
        if ctx.depth() >= MAX_DEPTH {
            return Err(Error::StepFailed {
                step_id: node.id.clone(),
                cause: StepFailure::DepthLimit { limit: MAX_DEPTH },
            });
        }
        // Under a graceful drain nothing new starts: the step waits for the cancel.
        ctx.hold_if_draining().await?;
        let kind = node.kind();
        let journal = ctx.journal();
        let path = match journal.map(|journal| journal.enter(&node.id, kind)) {
            None => None,
            Some(Entered::Run { path }) => Some(path),
            Some(Entered::Replayed { path, output }) => {
                // Completed before a crash: its recorded output stands in for running it again.
                if ctx.has_event_sink() {
                    ctx.emit(FrameworkEvent::StepReplayed {
                        step_id: node.id.clone(),
                        kind,
                        path,
                    });
                }
                return Ok(output);
            }
        };
        ctx.count_step();
        let hooks = ctx.runtime().hooks();
        if let Some(before) = &hooks.before_step {
            before(super::StepRef { node: node.clone() }, ctx.clone()).await;
        }
        // A `call_model`'s emit policy decides its own step events, each by its kind.
        let emits = |kind: FrameworkEventKind| match &node.body {
            StepBody::CallModel(spec) => spec.emit.allows(kind),
            _ => true,
        };
        if ctx.has_event_sink() && emits(FrameworkEventKind::StepStarted) {
            ctx.emit(FrameworkEvent::StepStarted {
                step_id: node.id.clone(),
                kind,
            });
        }
        let id = node.id.as_str();
        let output = match &node.body {
            StepBody::RunCode(spec) => match routed(route, spec.subprocess.as_ref(), id, ctx) {
                Some(adapter) => super::routed::run_routed(adapter, id, input, ctx).await,
                None => run_code::execute(id, spec, input, ctx).await,
            },
            StepBody::CallModel(spec) => call_model::execute(id, spec, input, &origin, ctx).await,
            StepBody::InvokeTool(spec) => invoke_tool::execute(id, spec, input, ctx).await,
            StepBody::Conditional(spec) => conditional::execute(spec, input, origin, ctx).await,
            StepBody::InParallel(spec) => parallel::execute(id, spec, input, origin, ctx).await,
            StepBody::Spawn(spec) => match routed(route, spec.subprocess.as_ref(), id, ctx) {
                Some(adapter) => super::routed::run_routed(adapter, id, input, ctx).await,
                None => spawn::execute(id, spec, input, origin, ctx).await,
            },
            StepBody::WithContext(spec) => with_context::execute(spec, input, origin, ctx).await,
            StepBody::Loop(spec) => loop_step::execute_loop(id, spec, input, origin, ctx).await,
            StepBody::Sequence(body) => loop_step::run_body(body, input, origin, ctx).await,
            StepBody::Schedule(spec) => schedule::execute(id, spec, input, origin, ctx).await,
            StepBody::AcpAgent(spec) => {
                super::acp_agent::execute(id, spec, input, &origin, ctx).await
            }
        };
        if let (Some(journal), Some(path)) = (journal, &path) {
            journal.exit(path, id, kind, output.as_ref().ok());
            if output.is_ok() {
                // A completed step is recorded before anything after it runs.
                journal.checkpoint(ctx).await?;
            }
        }
        let output = output?;
        if ctx.has_event_sink() && emits(FrameworkEventKind::StepCompleted) {
            ctx.emit(FrameworkEvent::StepCompleted {
                step_id: node.id.clone(),
                kind,
            });
        }
        if let Some(after) = &hooks.after_step {
            after(
                super::StepRef { node: node.clone() },
                output.clone(),
                ctx.clone(),
            )
            .await;
        }
        Ok(output)
    }
}

/// The adapter that runs step `id` out of process, if routing is on and one does.
fn routed<'a>(
    route: bool,
    own: Option<&'a Arc<dyn crate::adapter::SubprocessAdapter>>,
    id: &str,
    ctx: &'a Context,
) -> Option<&'a Arc<dyn crate::adapter::SubprocessAdapter>> {
    if route {
        super::routed::route(own, id, ctx)
    } else {
        None
    }
}
