//! One round: send the request, consume the stream under the idle watchdog, fold it into a response.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::time::Instant;

use crate::context::Context;
use crate::event::{FrameworkEvent, StreamEvent};
use crate::model::{ModelProvider, ModelRequest, ModelResponse, ResponseAccumulator};
use crate::{Error, Result};

/// What a round needs besides the request.
pub(super) struct RoundEnv<'a> {
    pub(super) provider: &'a dyn ModelProvider,
    pub(super) provider_name: &'a str,
    pub(super) ctx: &'a Context,
    pub(super) idle_timeout: Duration,
    pub(super) emit: bool,
}

/// Runs one round.
///
/// The idle watchdog covers the wait for the response to start and every gap between events. It is
/// re-armed lazily: each event only records its arrival time, and the timer, when it fires, is pushed
/// back to `last event + idle` if an event came since. So a busy stream costs one clock read per event,
/// not a timer re-registration.
///
/// # Errors
/// `CANCELLED` when the context is aborted (the request is dropped at once), `MODEL_STREAM_STALLED` when
/// the watchdog fires (after emitting `model_call_stalled`), the provider's error, or `PROVIDER_ERROR`
/// for a stream that ends without a terminal event.
pub(super) async fn run_round(
    env: &RoundEnv<'_>,
    request: &ModelRequest<'_>,
) -> Result<ModelResponse> {
    let RoundEnv {
        provider,
        provider_name,
        ctx,
        idle_timeout,
        emit,
    } = *env;
    let round = request.round;
    let stalled = || {
        if emit {
            ctx.emit(FrameworkEvent::ModelCallStalled {
                round,
                idle_timeout_ms: idle_timeout.as_millis() as u64,
            });
        }
        Error::ModelStreamStalled {
            round,
            idle_timeout_ms: idle_timeout.as_millis() as u64,
        }
    };
    let watchdog = tokio::time::sleep(idle_timeout);
    tokio::pin!(watchdog);

    let started = tokio::select! {
        biased;
        () = ctx.cancelled() => return Err(Error::cancelled(ctx.abort_reason())),
        () = &mut watchdog => return Err(stalled()),
        started = provider.stream(request) => started.map_err(|error| with_round(error, round))?,
    };
    let mut events = started.events;
    let mut accumulator = ResponseAccumulator::new();
    let mut last_event = Instant::now();
    watchdog.as_mut().reset(last_event + idle_timeout);
    let mut first = true;
    loop {
        let next = tokio::select! {
            biased;
            () = ctx.cancelled() => return Err(Error::cancelled(ctx.abort_reason())),
            next = events.next() => next,
            () = &mut watchdog => {
                let deadline = last_event + idle_timeout;
                if deadline > Instant::now() {
                    watchdog.as_mut().reset(deadline);
                    continue;
                }
                return Err(stalled());
            }
        };
        let Some(event) = next else { break };
        let event = event.map_err(|error| with_round(error, round))?;
        last_event = Instant::now();
        if first {
            first = false;
            if emit {
                ctx.emit(FrameworkEvent::ModelCallFirstEvent { round });
            }
        }
        accumulator.push(&event);
        let terminal =
            accumulator.is_terminal() && matches!(event, crate::model::ResponseEvent::Finished(_));
        if ctx.has_event_sink() {
            ctx.emit_stream(StreamEvent::Sdk(Arc::new(event)));
        }
        if terminal {
            break;
        }
    }
    accumulator.finish(provider_name, round)
}

/// Stamps the round on a provider error that does not carry one yet.
fn with_round(error: Error, round: u32) -> Error {
    match error {
        Error::Provider {
            provider,
            status,
            message,
            round: None,
        } => Error::Provider {
            provider,
            status,
            message,
            round: Some(round),
        },
        other => other,
    }
}
