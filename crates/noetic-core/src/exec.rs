//! The one run protocol every run goes through — [`Context::run`] (and so `AgentHarness::run` and
//! `parse_and_run_workflow`), a session turn, and a step running a sub-step on its own context:
//!
//! 1. the steps' declared connection needs are checked against the runtime's connections (nothing runs
//!    when one is unmet);
//! 2. the run enters the root's channel [`RunGuard`](crate::channel::RunGuard) (the outermost run on a
//!    root closes external channel handles when it ends);
//! 3. the context's layers not initialized on it yet get `init` (once per context);
//! 4. on a durable root, the execution begins (its lease taken, its header written) before the tree
//!    executes, and its outcome is recorded when the tree ends;
//! 5. the tree executes;
//! 6. the outcome is recorded for the context's close.

use std::sync::Arc;

use serde_json::Value;

use crate::Error;
use crate::Result;
use crate::context::Context;
use crate::runtime::Runtime;
use crate::step::{Origin, StepNode, execute_routed};

/// Runs `node` on `ctx` with `input` by the protocol above.
///
/// # Cancel safety
/// Dropping the future stops the tree at its current await point; the outcome is then not recorded.
pub(crate) async fn run(
    ctx: &Context,
    node: &Arc<StepNode>,
    input: Value,
    origin: Origin,
) -> Result<Value> {
    run_routed(ctx, node, input, origin, true).await
}

/// [`run`], with `route: false` running `node` itself in this process whatever its subprocess adapter
/// says (a child process running the step it was sent; the steps inside are routed as usual).
pub(crate) async fn run_routed(
    ctx: &Context,
    node: &Arc<StepNode>,
    input: Value,
    origin: Origin,
    route: bool,
) -> Result<Value> {
    // A root run is an agent invocation (a session turn makes its own span, with the turn's id).
    if ctx.parent().is_some() || matches!(origin, Origin::Turn(_)) {
        return run_protocol(ctx, node, input, origin, route).await;
    }
    let span = crate::telemetry::agent_span(ctx.runtime().name(), ctx.thread_id(), ctx.id(), None);
    crate::telemetry::traced(span, run_protocol(ctx, node, input, origin, route)).await
}

async fn run_protocol(
    ctx: &Context,
    node: &Arc<StepNode>,
    input: Value,
    origin: Origin,
    route: bool,
) -> Result<Value> {
    check_connections(ctx.runtime(), node)?;
    let _running = ctx.enter_run();
    let _channels =
        crate::channel::RunGuard::enter(ctx.parent().is_none().then(|| ctx.root_channels()));
    let journal = ctx.journal();
    if let Some(journal) = journal {
        journal.begin(&input, ctx).await?;
    }
    let mut result = match crate::layer::lifecycle::init(ctx, &ctx.layers()).await {
        Ok(()) => execute_routed(node, input, origin, ctx, route).await,
        Err(error) => Err(error),
    };
    if let Some(journal) = journal
        && let Err(error) = journal.finish(&result, ctx).await
        && result.is_ok()
    {
        // The run's outcome could not be recorded: a durable run does not report success then.
        result = Err(error);
    }
    crate::layer::lifecycle::finished(ctx, &result);
    result
}

/// Checks every need declared in `node`'s tree against `runtime`'s connections.
///
/// # Errors
/// [`Error::ConnectionUnsatisfied`] for the first need (depth first, in tree order) that no connection
/// meets: `registered: false` when no connection has the name, `true` when it lacks the operation.
fn check_connections(runtime: &Runtime, node: &StepNode) -> Result<()> {
    node.try_for_each_need(&mut |need| {
        let registered = match runtime.connection(&need.connection) {
            Some(connection) if connection.supports(&need.operation) => return Ok(()),
            Some(_) => true,
            None => false,
        };
        Err(Error::ConnectionUnsatisfied {
            connection: need.connection.clone(),
            operation: need.operation.clone(),
            registered,
        })
    })
}
