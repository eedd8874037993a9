//! Running one round's function calls. No tool failure fails the step: each becomes the call's output.

use std::panic::AssertUnwindSafe;
use tracing::Instrument;

use futures_util::future::BoxFuture;
use futures_util::{FutureExt, StreamExt, TryStreamExt};
use serde_json::Value;

use super::EmitPolicy;
use super::durable::steps;
use crate::Result;
use crate::approval::{ApprovalDecision, ApprovalRequest};
use crate::context::Applied;
use crate::context::Context;
use crate::event::FrameworkEvent;
use crate::id::DEFAULT_THREAD;
use crate::item::{FunctionCallItem, Item};
use crate::layer::{LayerCtx, LayerDecision, ToolCallView, gate_tool_call};
use crate::model::ToolSpec;
use crate::steer::SteerPoint;
use crate::tool::{Tool, ToolContext, output_text};

/// The tools of one step: what is offered, and how wire names map back.
pub(crate) struct ToolSet {
    tools: Vec<Tool>,
    pub(super) specs: Vec<ToolSpec>,
    /// Whether any tool may need approval: without one, a round's calls are not looked at twice.
    gated: bool,
}

impl ToolSet {
    /// The tools of `groups` in order (the step's, its sources', the harness's, …); the first of a
    /// name wins.
    pub(super) fn new<'a>(groups: impl Iterator<Item = &'a [Tool]> + Clone) -> Self {
        let mut tools: Vec<Tool> = Vec::with_capacity(groups.clone().map(<[Tool]>::len).sum());
        for tool in groups.flatten() {
            if !tools.iter().any(|known| known.name() == tool.name()) {
                tools.push(tool.clone());
            }
        }
        let specs = tools.iter().map(Tool::spec).collect();
        let gated = tools.iter().any(Tool::may_need_approval);
        ToolSet {
            tools,
            specs,
            gated,
        }
    }

    /// Finds a tool by its wire name or its own name.
    fn find(&self, name: &str) -> Option<&Tool> {
        self.tools
            .iter()
            .find(|tool| tool.wire_name() == name)
            .or_else(|| self.tools.iter().find(|tool| tool.name() == name))
    }
}

/// The outcome of one call: the output text, whether it reports an error, and whether the call
/// failed (its output item is marked `is_error`) rather than never ran (skipped or aborted).
#[derive(serde::Serialize, serde::Deserialize)]
pub(super) struct CallOutcome {
    output: String,
    error: bool,
    failed: bool,
}

impl CallOutcome {
    /// The call failed, or was refused: `output` is its error.
    fn error(output: String) -> Self {
        CallOutcome {
            output,
            error: true,
            failed: true,
        }
    }

    /// The call never ran to an end (skipped by a steer, aborted): `output` says so.
    pub(super) fn not_run(output: String) -> Self {
        CallOutcome {
            output,
            error: true,
            failed: false,
        }
    }
}

/// The text a function call gets when a steer ended its round before it ran.
pub(crate) const SKIPPED_BY_STEER: &str =
    "Tool call skipped: the user sent a new message before it ran.";

/// The text a function call gets when its context was cancelled while the tool ran (its future was
/// dropped; what it had done stays done).
pub(crate) const ABORTED_WHILE_RUNNING: &str =
    "Tool call aborted: the run was cancelled while the tool was running.";

/// The text a call waiting for approval gets when its run is cancelled before the decision.
pub(crate) const ABORTED_AWAITING_APPROVAL: &str =
    "Tool call aborted: the run was cancelled while the call awaited approval.";

/// What running a round's calls produced.
pub(super) struct CallsOutcome {
    /// The `function_call_output` items, one per call, in call order.
    pub(super) outputs: Vec<Item>,
    /// Steers applied before a call (`before_tool_call`): that call and the later ones were skipped.
    pub(super) steered: Option<Applied>,
}

/// Runs the calls (up to `concurrency` at once), appends each `function_call_output` to the context's
/// log in call order, and returns those items.
///
/// When calls run one at a time and the context takes steers, each call is a `before_tool_call` steer
/// point: a steer applied there skips that call and the rest, each answered with [`SKIPPED_BY_STEER`]
/// so the history stays valid.
///
/// # Errors
/// `CANCELLED` when the context is aborted before a call starts; the calls after it do not run.
pub(super) async fn run_calls(
    calls: &[FunctionCallItem],
    tools: &ToolSet,
    ctx: &Context,
    concurrency: usize,
    emit: &EmitPolicy,
) -> Result<CallsOutcome> {
    if tools.gated || !ctx.layers().is_empty() {
        let asks: Vec<Option<ApprovalRequest>> = calls
            .iter()
            .map(|call| approval_needed(call, tools, ctx))
            .collect();
        if asks.iter().any(Option::is_some) {
            return steps(ctx).gated_calls(calls, asks, tools, ctx, emit).await;
        }
    }
    let steps = steps(ctx);
    let mut items = Vec::with_capacity(calls.len());
    if concurrency <= 1 {
        let steers = ctx.steers().filter(|_| steps.cuts_rounds());
        for (index, call) in calls.iter().enumerate() {
            if let Some(inbox) = steers.filter(|inbox| inbox.has_pending()) {
                let applied = inbox.take(SteerPoint::BeforeToolCall, ctx);
                if !applied.is_empty() {
                    for skipped in &calls[index..] {
                        let outcome = CallOutcome::not_run(SKIPPED_BY_STEER.to_owned());
                        items.push(record(ctx, skipped, outcome, emit));
                    }
                    return Ok(CallsOutcome {
                        outputs: items,
                        steered: Some(applied),
                    });
                }
            }
            let outcome = start_call(call, tools, ctx, emit).await?;
            items.push(record(ctx, call, outcome, emit));
            steps.call_kept(ctx).await?;
        }
        return Ok(CallsOutcome {
            outputs: items,
            steered: None,
        });
    }
    // Boxed so the stream's item type is concrete (closures returning borrowing async blocks trip the
    // compiler's `Send` inference for the enclosing future).
    let starts: Vec<BoxFuture<'_, Result<CallOutcome>>> = calls
        .iter()
        .map(|call| Box::pin(start_call(call, tools, ctx, emit)) as BoxFuture<'_, _>)
        .collect();
    let outcomes = futures_util::stream::iter(starts).buffered(concurrency);
    futures_util::pin_mut!(outcomes);
    let mut index = 0;
    while let Some(outcome) = outcomes.try_next().await? {
        items.push(record(ctx, &calls[index], outcome, emit));
        steps.call_kept(ctx).await?;
        index += 1;
    }
    Ok(CallsOutcome {
        outputs: items,
        steered: None,
    })
}

/// The approval request of `call`, when it needs one: its arguments parse and validate, its tool's
/// rule asks for approval, and the tool was not approved for good on the thread. (A call that will
/// fail anyway — malformed, unknown, invalid — runs at once to get its error output.)
fn approval_needed(
    call: &FunctionCallItem,
    tools: &ToolSet,
    ctx: &Context,
) -> Option<ApprovalRequest> {
    let arguments = parse_arguments(call).ok()?;
    let tool = tools.find(&call.name)?;
    let view = ToolCallView {
        name: tool.name(),
        call_id: &call.call_id,
        arguments: &arguments,
    };
    let layer_asks = ctx
        .layers()
        .iter()
        .any(|layer| layer.requires_approval(LayerCtx::new(ctx, layer.id()), view));
    // Most calls of most rounds: nothing can ask, so their arguments are not validated twice.
    if !layer_asks && !tool.may_need_approval() {
        return None;
    }
    tool.validate(&arguments).ok()?;
    let tool_ctx = ToolContext {
        ctx: ctx.clone(),
        call_id: call.call_id.clone(),
        tool_name: tool.name().to_owned(),
    };
    let thread = ctx.thread_id().unwrap_or(DEFAULT_THREAD);
    let asked = layer_asks || tool.requires_approval(&arguments, &tool_ctx);
    if !asked
        || ctx
            .runtime()
            .approvals()
            .always_approved(thread, tool.name())
    {
        return None;
    }
    Some(ApprovalRequest {
        approval_id: tool_ctx.idempotency_key(),
        thread_id: thread.to_owned(),
        call_id: call.call_id.clone(),
        tool: tool.name().to_owned(),
        arguments,
    })
}

/// A gated call once decided: `approval_decided` emitted, then the call run (approved) or answered
/// with its rejection.
pub(super) async fn decided(
    call: &FunctionCallItem,
    approval_id: String,
    decision: ApprovalDecision,
    tools: &ToolSet,
    ctx: &Context,
    emit: &EmitPolicy,
) -> Result<CallOutcome> {
    let rejected = match decision {
        ApprovalDecision::Approved => None,
        ApprovalDecision::Rejected { reason } => Some(reason),
    };
    if emit.active(ctx) {
        emit.emit(
            ctx,
            FrameworkEvent::ApprovalDecided {
                approval_id,
                call_id: call.call_id.clone(),
                approved: rejected.is_none(),
                reason: rejected.clone(),
            },
        );
    }
    match rejected {
        None => start_call(call, tools, ctx, emit).await,
        Some(reason) => Ok(CallOutcome::error(format!("Tool call rejected: {reason}"))),
    }
}

/// A call's arguments: its JSON text parsed (no text at all is an empty object: some providers send
/// none for a tool without parameters).
fn parse_arguments(call: &FunctionCallItem) -> std::result::Result<Value, ()> {
    if call.arguments.trim().is_empty() {
        Ok(Value::Object(Default::default()))
    } else {
        serde_json::from_str(&call.arguments).map_err(|_| ())
    }
}

/// Appends a call's output item and emits `tool_call_completed`.
pub(super) fn record(
    ctx: &Context,
    call: &FunctionCallItem,
    outcome: CallOutcome,
    emit: &EmitPolicy,
) -> Item {
    let item = if outcome.failed {
        Item::function_call_error(call.call_id.clone(), outcome.output.clone())
    } else {
        Item::function_call_output(call.call_id.clone(), outcome.output.clone())
    };
    ctx.append_item(item.clone());
    if emit.active(ctx) {
        emit.emit(
            ctx,
            FrameworkEvent::ToolCallCompleted {
                name: call.name.clone(),
                call_id: call.call_id.clone(),
                error: outcome.error,
                output: outcome.output,
            },
        );
    }
    item
}

pub(super) async fn start_call(
    call: &FunctionCallItem,
    tools: &ToolSet,
    ctx: &Context,
    emit: &EmitPolicy,
) -> Result<CallOutcome> {
    // Under a graceful drain no tool call starts: it waits for the cancel.
    ctx.hold_if_draining().await?;
    if emit.active(ctx) {
        emit.emit(
            ctx,
            FrameworkEvent::ToolCallStarted {
                name: call.name.clone(),
                call_id: call.call_id.clone(),
            },
        );
    }
    let span = crate::telemetry::tool_span(&call.name, &call.call_id);
    // Under an engine's journal a replayed, recorded call does not run again (see `durable`).
    let run = run_call(call, tools, ctx).instrument(span.clone()).map(Ok);
    let outcome = steps(ctx).tool_call(&call.call_id, Box::pin(run)).await?;
    if outcome.error {
        crate::telemetry::record_tool_error(&span);
    }
    Ok(outcome)
}

async fn run_call(call: &FunctionCallItem, tools: &ToolSet, ctx: &Context) -> CallOutcome {
    let Ok(arguments) = parse_arguments(call) else {
        return CallOutcome::error(format!(
            "Error: malformed JSON in tool arguments: {}",
            call.arguments
        ));
    };
    let Some(tool) = tools.find(&call.name) else {
        return CallOutcome::error(format!("Error: unknown tool '{}'", call.name));
    };
    let view = ToolCallView {
        name: tool.name(),
        call_id: &call.call_id,
        arguments: &arguments,
    };
    match gate_tool_call(ctx, view).await {
        LayerDecision::Allow => {}
        LayerDecision::Deny { guidance } => {
            return CallOutcome::error(format!(
                "Tool call denied: {}",
                guidance.as_deref().unwrap_or("steering rule violation")
            ));
        }
        LayerDecision::Guide { guidance } => {
            return CallOutcome::error(format!("Tool call redirected: {guidance}"));
        }
    }
    if let Err(message) = tool.validate(&arguments) {
        return CallOutcome::error(format!(
            "Error: invalid arguments for tool '{}': {message}",
            tool.name()
        ));
    }
    let tool_ctx = ToolContext {
        ctx: ctx.clone(),
        call_id: call.call_id.clone(),
        tool_name: tool.name().to_owned(),
    };
    let Some(outcome) = until_cancelled(
        ctx,
        AssertUnwindSafe(tool.call(arguments, tool_ctx)).catch_unwind(),
    )
    .await
    else {
        return CallOutcome::not_run(ABORTED_WHILE_RUNNING.to_owned());
    };
    match outcome {
        Ok(Ok(value)) => CallOutcome {
            output: output_text(&value),
            error: false,
            failed: false,
        },
        Ok(Err(error)) => CallOutcome::error(format!("Error: {error}")),
        Err(panic) => CallOutcome::error(format!(
            "Error: tool '{}' panicked: {}",
            tool.name(),
            panic_message(&*panic)
        )),
    }
}

/// Runs a tool's future until it finishes or `ctx` is cancelled, whichever comes first; `None` when
/// cancelled (the future is dropped). The tool is polled first, so once the context is cancelled it
/// gets one more poll in which a tool watching `ToolContext`'s cancellation can still return its own
/// output; a tool that ignores it is dropped.
pub(crate) async fn until_cancelled<F: std::future::Future>(
    ctx: &Context,
    tool: F,
) -> Option<F::Output> {
    tokio::select! {
        biased;
        output = tool => Some(output),
        () = ctx.cancelled() => None,
    }
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("unknown panic")
}
