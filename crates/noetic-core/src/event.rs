//! Stream events: provider events passed through, and the framework's own lifecycle events.
//!
//! Events go to an [`EventSink`] attached to a context (the session runtime attaches one per thread).
//! Emission is synchronous and must never block: a sink that cannot keep up drops or reports lag itself.
//! Without a sink, no event is even built: [`crate::Context`] checks for a sink before constructing one.

use std::sync::Arc;

use serde::Serialize;

use crate::item::Item;
use crate::model::{ResponseEvent, ResponseStatus};
use crate::step::StepKind;

/// An event of a running agent.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum StreamEvent {
    /// A provider event (`source: "sdk"`), shared with every subscriber.
    Sdk(Arc<ResponseEvent>),
    /// A framework lifecycle event (`source: "framework"`).
    Framework(FrameworkEvent),
}

/// A framework lifecycle event. Serialized as `{"type": "<snake_case name>", "data": {…}}`; the session
/// runtime prefixes the type with the harness name (`researcher:step_started`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", content = "data", rename_all = "snake_case")]
#[non_exhaustive]
pub enum FrameworkEvent {
    /// A step is about to run.
    StepStarted {
        /// The step's id.
        step_id: String,
        /// The step's kind.
        kind: StepKind,
    },
    /// A step finished successfully.
    StepCompleted {
        /// The step's id.
        step_id: String,
        /// The step's kind.
        kind: StepKind,
    },
    /// An item was appended to a context's item log.
    ItemAppended {
        /// The item.
        item: Item,
    },
    /// A model round is about to send its request.
    ModelCallStarted {
        /// 0-based round within the step.
        round: u32,
        /// Items sent.
        message_count: usize,
        /// Tools offered.
        tool_count: usize,
        /// Whether the request carries the ephemeral recovery `continue`.
        recovery_continuation: bool,
    },
    /// The first stream event of a round arrived.
    ModelCallFirstEvent {
        /// The round.
        round: u32,
    },
    /// A round's response is complete.
    ModelCallCompleted {
        /// The round.
        round: u32,
        /// Output items received.
        item_count: usize,
    },
    /// A round's stream went idle past the timeout.
    ModelCallStalled {
        /// The round.
        round: u32,
        /// The idle timeout, in milliseconds.
        idle_timeout_ms: u64,
    },
    /// A round's response was unusable (incomplete, failed, empty).
    ModelCallFailed {
        /// The round.
        round: u32,
        /// Its status.
        status: ResponseStatus,
        /// The provider's message or incomplete reason.
        error: String,
        /// Whether a recovery round follows.
        recoverable: bool,
    },
    /// A recovery round with the ephemeral `continue` follows.
    ModelCallRecoveryContinue {
        /// The round that failed.
        round: u32,
        /// Its status.
        status: ResponseStatus,
        /// 1-based recovery attempt.
        attempt: u32,
        /// The recovery cap (3).
        max_attempts: u32,
    },
    /// A round's tool calls are about to run.
    ToolRoundStarted {
        /// The round.
        round: u32,
        /// Number of calls.
        tool_count: usize,
    },
    /// A round's tool calls have run.
    ToolRoundCompleted {
        /// The round.
        round: u32,
        /// Number of calls.
        tool_count: usize,
    },
    /// A tool call is about to run.
    ToolCallStarted {
        /// The tool's name.
        name: String,
        /// The call id.
        call_id: String,
    },
    /// A tool call finished (successfully or with an error fed back to the model).
    ToolCallCompleted {
        /// The tool's name.
        name: String,
        /// The call id.
        call_id: String,
        /// Whether the output is an error text.
        error: bool,
        /// The output sent to the model.
        output: String,
    },
    /// The tool-round cap was reached; a recovery round follows or the step fails.
    ToolRoundLimitExceeded {
        /// The cap (32).
        max_tool_rounds: u32,
        /// 1-based recovery attempt.
        attempt: u32,
        /// The recovery cap (3).
        max_attempts: u32,
    },
}

impl FrameworkEvent {
    /// The event's unprefixed type name (`step_started`, …).
    pub fn event_type(&self) -> &'static str {
        match self {
            FrameworkEvent::StepStarted { .. } => "step_started",
            FrameworkEvent::StepCompleted { .. } => "step_completed",
            FrameworkEvent::ItemAppended { .. } => "item_appended",
            FrameworkEvent::ModelCallStarted { .. } => "model_call_started",
            FrameworkEvent::ModelCallFirstEvent { .. } => "model_call_first_event",
            FrameworkEvent::ModelCallCompleted { .. } => "model_call_completed",
            FrameworkEvent::ModelCallStalled { .. } => "model_call_stalled",
            FrameworkEvent::ModelCallFailed { .. } => "model_call_failed",
            FrameworkEvent::ModelCallRecoveryContinue { .. } => "model_call_recovery_continue",
            FrameworkEvent::ToolRoundStarted { .. } => "tool_round_started",
            FrameworkEvent::ToolRoundCompleted { .. } => "tool_round_completed",
            FrameworkEvent::ToolCallStarted { .. } => "tool_call_started",
            FrameworkEvent::ToolCallCompleted { .. } => "tool_call_completed",
            FrameworkEvent::ToolRoundLimitExceeded { .. } => "tool_round_limit_exceeded",
        }
    }
}

/// Receives the events of the contexts it is attached to.
///
/// `emit` is called inline on the hot path (every stream event): it must be cheap and must not block.
pub trait EventSink: Send + Sync + 'static {
    /// Takes one event.
    fn emit(&self, event: StreamEvent);
}

impl<F: Fn(StreamEvent) + Send + Sync + 'static> EventSink for F {
    fn emit(&self, event: StreamEvent) {
        self(event)
    }
}
