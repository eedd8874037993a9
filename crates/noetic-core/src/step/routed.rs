//! Routing: the kernel side of [`crate::adapter::SubprocessAdapter`].
//!
//! A `run_code` or `spawn` whose adapter (the step's own, else the runtime's) says it runs out of
//! process is sent to a child; its events come back as `subprocess_event`s, its spend is charged to
//! the caller's context, and a cancel of the caller asks the child to cancel, then stops its process
//! group. The child runs its own copy of the step (see [`super::StepRegistry`]); detached children
//! (`Context::detached_spawn`) are read through the same [`pump`].

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::adapter::{ChildError, ChildMessage, ChildProcess, StepRequest, SubprocessAdapter};
use crate::context::Context;
use crate::error::StepFailure;
use crate::event::FrameworkEvent;
use crate::{Error, Result};

/// How long a cancelled child has to finish (and report its spend) before its process group is
/// stopped.
pub const CANCEL_GRACE: Duration = Duration::from_secs(2);
/// How long a stopped child's group has between SIGTERM and SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(1);

/// The adapter a step with its own adapter `own` runs through on `ctx`, when that adapter runs it out
/// of process.
pub(crate) fn route<'a>(
    own: Option<&'a Arc<dyn SubprocessAdapter>>,
    step_id: &str,
    ctx: &'a Context,
) -> Option<&'a Arc<dyn SubprocessAdapter>> {
    let adapter = own.unwrap_or_else(|| ctx.runtime().subprocess());
    adapter.runs_out_of_process(step_id).then_some(adapter)
}

/// Runs `step_id` in a child process started by `adapter`, for `ctx`'s execution.
pub(crate) async fn run_routed(
    adapter: &Arc<dyn SubprocessAdapter>,
    step_id: &str,
    input: Value,
    ctx: &Context,
) -> Result<Value> {
    ctx.check_aborted()?;
    let mut request = StepRequest::new(crate::id::new_id(), step_id, input, ctx.root().id());
    request.thread_id = ctx.thread_id().map(str::to_owned);
    request.resource_id = ctx.resource_id().map(str::to_owned);
    let mut child = adapter.spawn(request).await?;
    pump(&mut *child, step_id, Some(ctx), ctx.cancellation_token()).await
}

/// Reads `child`'s messages to its end: events re-emitted on `ctx`, spend charged to it. A cancel of
/// `cancel` asks the child to cancel and, after [`CANCEL_GRACE`] (or once it finished), stops its
/// process group.
pub(crate) async fn pump(
    child: &mut dyn ChildProcess,
    step_id: &str,
    ctx: Option<&Context>,
    cancel: &tokio_util::sync::CancellationToken,
) -> Result<Value> {
    let handle_id = child.handle_id().to_owned();
    let mut cancelled_at: Option<tokio::time::Instant> = None;
    loop {
        let grace = async {
            match cancelled_at {
                Some(at) => tokio::time::sleep_until(at + CANCEL_GRACE).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            message = child.next() => match message {
                Some(ChildMessage::Event { event }) => {
                    if let Some(ctx) = ctx.filter(|ctx| ctx.has_event_sink()) {
                        ctx.emit(FrameworkEvent::subprocess(&handle_id, step_id, event));
                    }
                }
                Some(ChildMessage::Spend { spend }) => {
                    if let Some(ctx) = ctx {
                        ctx.charge(spend);
                    }
                }
                Some(ChildMessage::Finished { result }) => {
                    if cancelled_at.is_some() {
                        // What the child started may still run in its group.
                        child.stop(STOP_GRACE).await;
                    }
                    return result.map_err(|error| from_child(step_id, error));
                }
                None => {
                    if cancelled_at.is_some() {
                        child.stop(STOP_GRACE).await;
                        return Err(Error::cancelled(ctx.and_then(Context::abort_reason)));
                    }
                    return Err(Error::HandleEvicted { handle_id });
                }
            },
            () = cancel.cancelled(), if cancelled_at.is_none() => {
                child.cancel(ctx.and_then(Context::abort_reason)).await;
                cancelled_at = Some(tokio::time::Instant::now());
            }
            () = grace => {
                child.stop(STOP_GRACE).await;
                return Err(Error::cancelled(ctx.and_then(Context::abort_reason)));
            }
        }
    }
}

/// The caller's error for a child's: `CANCELLED` stays a cancel; anything else fails the step,
/// keeping the child's code and message.
fn from_child(step_id: &str, error: ChildError) -> Error {
    match error.code.as_str() {
        "CANCELLED" => Error::cancelled(Some(error.message)),
        "HANDLE_EVICTED" => Error::HandleEvicted {
            handle_id: error.message,
        },
        _ => Error::StepFailed {
            step_id: step_id.to_owned(),
            cause: StepFailure::Error {
                source: Box::new(error),
                attempts: 1,
                retries_exhausted: false,
            },
        },
    }
}
