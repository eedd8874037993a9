//! One round: send the request, consume the stream under the idle watchdog, fold it into a response.

use std::time::Duration;
use tracing::Instrument;

use futures_util::StreamExt;
use tokio::time::Instant;

use super::EmitPolicy;
use crate::context::Applied;
use crate::context::Context;
use crate::event::{FrameworkEvent, StreamEvent};
use crate::item::Item;
use crate::model::{
    ModelProvider, ModelRequest, ModelResponse, ResponseAccumulator, ResponseEvent,
};
use crate::steer::SteerPoint;
use crate::{Error, Result};

/// What a round needs besides the request.
pub(super) struct RoundEnv<'a> {
    pub(super) provider: &'a dyn ModelProvider,
    pub(super) provider_name: &'a str,
    pub(super) ctx: &'a Context,
    pub(super) idle_timeout: Duration,
    pub(super) emit: &'a EmitPolicy,
}

/// How a round ended.
pub(super) enum RoundOutcome {
    /// The response finished.
    Finished(ModelResponse),
    /// A steer was applied when an item finished: the rest of the stream was cut.
    Steered {
        /// The items completed before the cut, in output order.
        completed: Vec<Item>,
        /// The steers to append.
        applied: Applied,
    },
}

/// Runs one round.
///
/// The idle watchdog covers the wait for the response to start and every gap between events. It is
/// re-armed lazily: each event only records its arrival time, and the timer, when it fires, is pushed
/// back to `last event + idle` if an event came since. So a busy stream costs one clock read per event,
/// not a timer re-registration.
///
/// When the context takes steers, every finished output item is an `item_done` steer point: if a steer
/// applies there, the stream is dropped (the request is cancelled) and the completed items returned.
///
/// # Errors
/// `CANCELLED` when the context is aborted (the request is dropped at once), `MODEL_STREAM_STALLED` when
/// the watchdog fires (after emitting `model_call_stalled`), the provider's error, or `PROVIDER_ERROR`
/// for a stream that ends without a terminal event.
pub(super) async fn run_round(
    env: &RoundEnv<'_>,
    request: &ModelRequest<'_>,
) -> Result<RoundOutcome> {
    let span = crate::telemetry::chat_span(env.provider_name, request.model, request.round);
    crate::telemetry::record_request(&span, request);
    let outcome = run_round_traced(env, request)
        .instrument(span.clone())
        .await;
    match &outcome {
        Ok(RoundOutcome::Finished(response)) => crate::telemetry::record_response(&span, response),
        Ok(_) => {}
        Err(error) => crate::telemetry::record_error(&span, error),
    }
    outcome
}

async fn run_round_traced(env: &RoundEnv<'_>, request: &ModelRequest<'_>) -> Result<RoundOutcome> {
    let RoundEnv {
        provider,
        provider_name,
        ctx,
        idle_timeout,
        emit,
    } = *env;
    let round = request.round;
    let stalled = || {
        let idle_timeout_ms = u64::try_from(idle_timeout.as_millis()).unwrap_or(u64::MAX);
        if emit.active(ctx) {
            emit.emit(
                ctx,
                FrameworkEvent::ModelCallStalled {
                    round,
                    idle_timeout_ms,
                },
            );
        }
        Error::ModelStreamStalled {
            round,
            idle_timeout_ms,
        }
    };
    // The paid-call record comes first: under a drain the request is not sent at all. The
    // record's futures (a store write with durable storage) are boxed: held inline, they would grow
    // every live round's state machine for work done once per round.
    let call = Box::pin(ctx.dispatch_call(request.model, round)).await?;
    let watchdog = tokio::time::sleep(idle_timeout);
    tokio::pin!(watchdog);

    let started = tokio::select! {
        biased;
        () = ctx.cancelled() => return Err(Error::cancelled(ctx.abort_reason())),
        () = &mut watchdog => return Err(stalled()),
        started = provider.stream(request) => match started {
            Ok(started) => started,
            Err(error) => {
                // Refused before any response (an error status, no connection): nothing was billed.
                Box::pin(call.refused()).await;
                return Err(error.in_round(round));
            }
        },
    };
    if let Some(generation_id) = started.generation_id.as_deref() {
        Box::pin(call.generation(generation_id)).await;
    }
    let mut events = started.events;
    let mut accumulator = ResponseAccumulator::new();
    let mut last_event = Instant::now();
    watchdog.as_mut().reset(last_event + idle_timeout);
    let mut first = true;
    // A recorded round is whole where its durability asks it (an engine's journal): no steer cuts it.
    let steers = ctx
        .steers()
        .filter(|_| super::durable::steps(ctx).cuts_rounds());
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
        let event = event.map_err(|error| error.in_round(round))?;
        last_event = Instant::now();
        if first {
            first = false;
            if emit.active(ctx) {
                emit.emit(ctx, FrameworkEvent::ModelCallFirstEvent { round });
            }
        }
        if let ResponseEvent::Created {
            response_id: Some(id),
            ..
        } = &event
        {
            Box::pin(call.generation(id)).await;
        }
        let item_done = accumulator.push(&event).is_some();
        let terminal = matches!(event, ResponseEvent::Finished(_));
        if ctx.has_event_sink() {
            ctx.emit_stream(StreamEvent::Sdk(event));
        }
        if terminal {
            break;
        }
        if item_done && let Some(inbox) = steers.filter(|inbox| inbox.has_pending()) {
            let applied = inbox.take(SteerPoint::ItemDone, ctx);
            if !applied.is_empty() {
                // Dropping `events` here cancels the rest of the response.
                let completed = accumulator.completed_items().cloned().collect();
                return Ok(RoundOutcome::Steered { completed, applied });
            }
        }
    }
    let response = accumulator.finish(provider_name, round)?;
    Box::pin(call.priced(response.usage, response.cost)).await;
    Ok(RoundOutcome::Finished(response))
}
