//! Stream events: provider events passed through, and the framework's own lifecycle events.
//!
//! Events go to an [`EventSink`] attached to a context (the session runtime attaches one per thread).
//! Emission is synchronous and must never block: a sink that cannot keep up drops or reports lag itself.
//! Without a sink, no event is even built: [`crate::Context`] checks for a sink before constructing one.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::item::Item;
use crate::model::{ResponseEvent, ResponseStatus};
use crate::step_kind::StepKind;

/// An event of a running agent.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum StreamEvent {
    /// A provider event (`source: "sdk"`).
    Sdk(ResponseEvent),
    /// A framework lifecycle event (`source: "framework"`).
    Framework(FrameworkEvent),
    /// This subscriber fell behind and `skipped` events were dropped for it (never a silent gap).
    Lagged {
        /// How many events this subscriber missed.
        skipped: u64,
    },
}

/// A framework lifecycle event. Serialized as `{"type": "<snake_case name>", "data": {…}}`; on the
/// session streams the type is prefixed with the harness name (`researcher:step_started`), see
/// [`StreamEvent::to_json`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "data", rename_all = "snake_case")]
#[non_exhaustive]
pub enum FrameworkEvent {
    /// A session turn started.
    TurnStarted {
        /// The turn's id.
        turn_id: String,
        /// The ids of the messages the turn answers, in order.
        message_ids: Vec<String>,
    },
    /// A session turn cut short where it ran (its host crashed, was killed, or lost the thread's
    /// lease) goes on here, from its last checkpoint: what it streamed after that checkpoint (the
    /// model round in flight: its text deltas) is void and streams again after this event. Starts
    /// the turn on the bus as [`FrameworkEvent::TurnStarted`] does; its messages' items are not
    /// announced again.
    RoundRestarted {
        /// The turn's id (the same as its `turn_started`'s).
        turn_id: String,
        /// The ids of the messages the turn answers, in order.
        message_ids: Vec<String>,
    },
    /// A session turn finished successfully.
    TurnCompleted {
        /// The turn's id.
        turn_id: String,
        /// How long it ran, in milliseconds.
        duration_ms: u64,
    },
    /// A graceful drain began: the model calls in flight it waits for.
    DrainStarted {
        /// The calls in flight when it began.
        calls: Vec<crate::drain::PaidCall>,
    },
    /// A graceful drain ended (the cancel then proceeds).
    DrainFinished {
        /// What it did.
        report: crate::drain::DrainReport,
    },
    /// A session turn failed or was aborted.
    TurnAborted {
        /// The turn's id.
        turn_id: String,
        /// The error's message (for an idle timeout: `model stream idle timeout after <N>ms`).
        reason: String,
        /// The error's stable code (`CANCELLED`, `STEP_FAILED`, …).
        #[serde(deserialize_with = "static_code")]
        error_kind: &'static str,
    },
    /// Steering messages joined the running turn.
    SteerApplied {
        /// The applied messages' ids, in the order the model sees them.
        message_ids: Vec<String>,
        /// Where they were applied.
        point: crate::steer::SteerPoint,
        /// The round of the model call that applied them (the next request carries them).
        round: u32,
    },
    /// A steering message was dropped by an `on_steer` hook.
    SteerDropped {
        /// The message's id.
        message_id: String,
        /// Where it was dropped.
        point: crate::steer::SteerPoint,
    },
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
    /// A step of a resumed execution completed before the crash: its recorded output was returned and it
    /// did not run again.
    StepReplayed {
        /// The step's id.
        step_id: String,
        /// The step's kind.
        kind: StepKind,
        /// Its path in the tree (`/flow#0/gather#0`), the step ledger's key.
        path: String,
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
    /// A tool call waits for a person's approval before it runs ([`crate::AgentHarness::approve`]).
    ApprovalRequested {
        /// The approval's id (what `approve` / `reject` take).
        approval_id: String,
        /// The call id.
        call_id: String,
        /// The tool's name.
        tool: String,
        /// The arguments it will run with, exactly.
        arguments: serde_json::Value,
    },
    /// A person decided on a waiting call; approved, it runs next.
    ApprovalDecided {
        /// The approval's id.
        approval_id: String,
        /// The call id.
        call_id: String,
        /// Whether it was approved.
        approved: bool,
        /// A rejection's reason.
        #[serde(skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
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
    /// An event of a step running in a child process (see `adapter::SubprocessAdapter`), as the
    /// child emitted it.
    SubprocessEvent {
        /// The child's handle id.
        handle_id: String,
        /// The step the child runs.
        step_id: String,
        /// The child's event, in its [`StreamEvent::to_json`] shape.
        event: serde_json::Value,
    },
    /// An `acp_agent` step's turn started: the agent is being prompted.
    AcpTurnStarted {
        /// The step.
        step_id: String,
        /// The agent's name.
        agent: String,
    },
    /// An `acp_agent` step's turn ended, always once after [`FrameworkEvent::AcpTurnStarted`].
    AcpTurnFinished {
        /// The step.
        step_id: String,
        /// The agent's stop reason, when it answered the prompt.
        #[serde(skip_serializing_if = "Option::is_none")]
        stop_reason: Option<String>,
        /// The error code the turn failed with.
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// What an ACP agent streamed (every `session/update`, plans included), as received.
    AcpUpdate {
        /// The step.
        step_id: String,
        /// The update object (`sessionUpdate` and its fields).
        update: serde_json::Value,
    },
    /// A request of an ACP agent to the client (a file read or write, a terminal), served or
    /// refused.
    AcpClientActivity {
        /// The step.
        step_id: String,
        /// The method.
        method: String,
        /// The path or command it named.
        #[serde(skip_serializing_if = "Option::is_none")]
        target: Option<String>,
        /// Whether it was served.
        served: bool,
        /// Why not.
        #[serde(skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
    },
}

impl FrameworkEvent {
    /// A child process's event, tagged with the child that sent it.
    pub(crate) fn subprocess(handle_id: &str, step_id: &str, event: serde_json::Value) -> Self {
        FrameworkEvent::SubprocessEvent {
            handle_id: handle_id.to_owned(),
            step_id: step_id.to_owned(),
            event,
        }
    }

    /// The event's kind: what filters (`call_model(..).emit_filter`) match on.
    pub fn kind(&self) -> FrameworkEventKind {
        match self {
            FrameworkEvent::TurnStarted { .. } => FrameworkEventKind::TurnStarted,
            FrameworkEvent::RoundRestarted { .. } => FrameworkEventKind::RoundRestarted,
            FrameworkEvent::TurnCompleted { .. } => FrameworkEventKind::TurnCompleted,
            FrameworkEvent::TurnAborted { .. } => FrameworkEventKind::TurnAborted,
            FrameworkEvent::DrainStarted { .. } => FrameworkEventKind::DrainStarted,
            FrameworkEvent::DrainFinished { .. } => FrameworkEventKind::DrainFinished,
            FrameworkEvent::SteerApplied { .. } => FrameworkEventKind::SteerApplied,
            FrameworkEvent::SteerDropped { .. } => FrameworkEventKind::SteerDropped,
            FrameworkEvent::StepStarted { .. } => FrameworkEventKind::StepStarted,
            FrameworkEvent::StepCompleted { .. } => FrameworkEventKind::StepCompleted,
            FrameworkEvent::StepReplayed { .. } => FrameworkEventKind::StepReplayed,
            FrameworkEvent::ItemAppended { .. } => FrameworkEventKind::ItemAppended,
            FrameworkEvent::ModelCallStarted { .. } => FrameworkEventKind::ModelCallStarted,
            FrameworkEvent::ModelCallFirstEvent { .. } => FrameworkEventKind::ModelCallFirstEvent,
            FrameworkEvent::ModelCallCompleted { .. } => FrameworkEventKind::ModelCallCompleted,
            FrameworkEvent::ModelCallStalled { .. } => FrameworkEventKind::ModelCallStalled,
            FrameworkEvent::ModelCallFailed { .. } => FrameworkEventKind::ModelCallFailed,
            FrameworkEvent::ModelCallRecoveryContinue { .. } => {
                FrameworkEventKind::ModelCallRecoveryContinue
            }
            FrameworkEvent::ToolRoundStarted { .. } => FrameworkEventKind::ToolRoundStarted,
            FrameworkEvent::ToolRoundCompleted { .. } => FrameworkEventKind::ToolRoundCompleted,
            FrameworkEvent::ToolCallStarted { .. } => FrameworkEventKind::ToolCallStarted,
            FrameworkEvent::ToolCallCompleted { .. } => FrameworkEventKind::ToolCallCompleted,
            FrameworkEvent::ApprovalRequested { .. } => FrameworkEventKind::ApprovalRequested,
            FrameworkEvent::ApprovalDecided { .. } => FrameworkEventKind::ApprovalDecided,
            FrameworkEvent::ToolRoundLimitExceeded { .. } => {
                FrameworkEventKind::ToolRoundLimitExceeded
            }
            FrameworkEvent::SubprocessEvent { .. } => FrameworkEventKind::SubprocessEvent,
            FrameworkEvent::AcpTurnStarted { .. } => FrameworkEventKind::AcpTurnStarted,
            FrameworkEvent::AcpTurnFinished { .. } => FrameworkEventKind::AcpTurnFinished,
            FrameworkEvent::AcpUpdate { .. } => FrameworkEventKind::AcpUpdate,
            FrameworkEvent::AcpClientActivity { .. } => FrameworkEventKind::AcpClientActivity,
        }
    }

    /// The event's unprefixed type name (`step_started`, …).
    pub fn event_type(&self) -> &'static str {
        self.kind().as_str()
    }
}

/// The kind of a [`FrameworkEvent`], without its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FrameworkEventKind {
    /// `turn_started`: [`FrameworkEvent::TurnStarted`].
    TurnStarted,
    /// `round_restarted`: [`FrameworkEvent::RoundRestarted`].
    RoundRestarted,
    /// `turn_completed`: [`FrameworkEvent::TurnCompleted`].
    TurnCompleted,
    /// `turn_aborted`: [`FrameworkEvent::TurnAborted`].
    TurnAborted,
    /// `steer_applied`: [`FrameworkEvent::SteerApplied`].
    SteerApplied,
    /// `steer_dropped`: [`FrameworkEvent::SteerDropped`].
    SteerDropped,
    /// `step_started`: [`FrameworkEvent::StepStarted`].
    StepStarted,
    /// `step_completed`: [`FrameworkEvent::StepCompleted`].
    StepCompleted,
    /// `step_replayed`: [`FrameworkEvent::StepReplayed`].
    StepReplayed,
    /// `item_appended`: [`FrameworkEvent::ItemAppended`].
    ItemAppended,
    /// `model_call_started`: [`FrameworkEvent::ModelCallStarted`].
    ModelCallStarted,
    /// `model_call_first_event`: [`FrameworkEvent::ModelCallFirstEvent`].
    ModelCallFirstEvent,
    /// `model_call_completed`: [`FrameworkEvent::ModelCallCompleted`].
    ModelCallCompleted,
    /// `model_call_stalled`: [`FrameworkEvent::ModelCallStalled`].
    ModelCallStalled,
    /// `model_call_failed`: [`FrameworkEvent::ModelCallFailed`].
    ModelCallFailed,
    /// `model_call_recovery_continue`: [`FrameworkEvent::ModelCallRecoveryContinue`].
    ModelCallRecoveryContinue,
    /// `tool_round_started`: [`FrameworkEvent::ToolRoundStarted`].
    ToolRoundStarted,
    /// `tool_round_completed`: [`FrameworkEvent::ToolRoundCompleted`].
    ToolRoundCompleted,
    /// `tool_call_started`: [`FrameworkEvent::ToolCallStarted`].
    ToolCallStarted,
    /// `approval_requested`: [`FrameworkEvent::ApprovalRequested`].
    ApprovalRequested,
    /// `approval_decided`: [`FrameworkEvent::ApprovalDecided`].
    ApprovalDecided,
    /// `tool_call_completed`: [`FrameworkEvent::ToolCallCompleted`].
    ToolCallCompleted,
    /// `tool_round_limit_exceeded`: [`FrameworkEvent::ToolRoundLimitExceeded`].
    ToolRoundLimitExceeded,
    /// `drain_started`: [`FrameworkEvent::DrainStarted`].
    DrainStarted,
    /// `drain_finished`: [`FrameworkEvent::DrainFinished`].
    DrainFinished,
    /// `subprocess_event`: [`FrameworkEvent::SubprocessEvent`].
    SubprocessEvent,
    /// `acp_turn_started`: [`FrameworkEvent::AcpTurnStarted`].
    AcpTurnStarted,
    /// `acp_turn_finished`: [`FrameworkEvent::AcpTurnFinished`].
    AcpTurnFinished,
    /// `acp_update`: [`FrameworkEvent::AcpUpdate`].
    AcpUpdate,
    /// `acp_client_activity`: [`FrameworkEvent::AcpClientActivity`].
    AcpClientActivity,
}

impl FrameworkEventKind {
    /// Every kind, in declaration order.
    pub const ALL: &'static [FrameworkEventKind] = &[
        FrameworkEventKind::TurnStarted,
        FrameworkEventKind::RoundRestarted,
        FrameworkEventKind::TurnCompleted,
        FrameworkEventKind::TurnAborted,
        FrameworkEventKind::SteerApplied,
        FrameworkEventKind::SteerDropped,
        FrameworkEventKind::StepStarted,
        FrameworkEventKind::StepCompleted,
        FrameworkEventKind::StepReplayed,
        FrameworkEventKind::ItemAppended,
        FrameworkEventKind::ModelCallStarted,
        FrameworkEventKind::ModelCallFirstEvent,
        FrameworkEventKind::ModelCallCompleted,
        FrameworkEventKind::ModelCallStalled,
        FrameworkEventKind::ModelCallFailed,
        FrameworkEventKind::ModelCallRecoveryContinue,
        FrameworkEventKind::ToolRoundStarted,
        FrameworkEventKind::ToolRoundCompleted,
        FrameworkEventKind::ToolCallStarted,
        FrameworkEventKind::ToolCallCompleted,
        FrameworkEventKind::ApprovalRequested,
        FrameworkEventKind::ApprovalDecided,
        FrameworkEventKind::ToolRoundLimitExceeded,
        FrameworkEventKind::DrainStarted,
        FrameworkEventKind::DrainFinished,
        FrameworkEventKind::SubprocessEvent,
        FrameworkEventKind::AcpTurnStarted,
        FrameworkEventKind::AcpTurnFinished,
        FrameworkEventKind::AcpUpdate,
        FrameworkEventKind::AcpClientActivity,
    ];

    /// The unprefixed type name (`step_started`, …), as in the JSON of the event.
    pub fn as_str(self) -> &'static str {
        match self {
            FrameworkEventKind::TurnStarted => "turn_started",
            FrameworkEventKind::RoundRestarted => "round_restarted",
            FrameworkEventKind::TurnCompleted => "turn_completed",
            FrameworkEventKind::TurnAborted => "turn_aborted",
            FrameworkEventKind::SteerApplied => "steer_applied",
            FrameworkEventKind::SteerDropped => "steer_dropped",
            FrameworkEventKind::StepStarted => "step_started",
            FrameworkEventKind::StepCompleted => "step_completed",
            FrameworkEventKind::StepReplayed => "step_replayed",
            FrameworkEventKind::ItemAppended => "item_appended",
            FrameworkEventKind::ModelCallStarted => "model_call_started",
            FrameworkEventKind::ModelCallFirstEvent => "model_call_first_event",
            FrameworkEventKind::ModelCallCompleted => "model_call_completed",
            FrameworkEventKind::ModelCallStalled => "model_call_stalled",
            FrameworkEventKind::ModelCallFailed => "model_call_failed",
            FrameworkEventKind::ModelCallRecoveryContinue => "model_call_recovery_continue",
            FrameworkEventKind::ToolRoundStarted => "tool_round_started",
            FrameworkEventKind::ToolRoundCompleted => "tool_round_completed",
            FrameworkEventKind::ToolCallStarted => "tool_call_started",
            FrameworkEventKind::ToolCallCompleted => "tool_call_completed",
            FrameworkEventKind::ApprovalRequested => "approval_requested",
            FrameworkEventKind::ApprovalDecided => "approval_decided",
            FrameworkEventKind::ToolRoundLimitExceeded => "tool_round_limit_exceeded",
            FrameworkEventKind::DrainStarted => "drain_started",
            FrameworkEventKind::DrainFinished => "drain_finished",
            FrameworkEventKind::SubprocessEvent => "subprocess_event",
            FrameworkEventKind::AcpTurnStarted => "acp_turn_started",
            FrameworkEventKind::AcpTurnFinished => "acp_turn_finished",
            FrameworkEventKind::AcpUpdate => "acp_update",
            FrameworkEventKind::AcpClientActivity => "acp_client_activity",
        }
    }

    /// The kind named `name` (an unprefixed type name such as `tool_call_completed`).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|kind| kind.as_str() == name)
    }
}

impl std::fmt::Display for FrameworkEventKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl StreamEvent {
    /// The event as `{"source", "type", "data"}`, the shape of the original's stream events:
    /// provider events as `source: "sdk"` with their wire type and object; framework events as
    /// `source: "framework"` with the type prefixed by `harness_name` (`researcher:turn_started`).
    pub fn to_json(&self, harness_name: &str) -> serde_json::Value {
        use serde_json::json;
        match self {
            StreamEvent::Sdk(event) => {
                json!({"source": "sdk", "type": event.event_type(), "data": event.to_wire_json()})
            }
            StreamEvent::Framework(event) => {
                let data = match serde_json::to_value(event) {
                    Ok(serde_json::Value::Object(mut map)) => {
                        map.remove("data").unwrap_or(serde_json::Value::Null)
                    }
                    _ => serde_json::Value::Null,
                };
                json!({"source": "framework", "type": format!("{harness_name}:{}", event.event_type()), "data": data})
            }
            StreamEvent::Lagged { skipped } => {
                json!({"source": "framework", "type": format!("{harness_name}:lagged"), "data": {"skipped": skipped}})
            }
        }
    }
}

/// An error code read back (an event from a durable event log) as the codes are: see
/// [`crate::error::static_code`].
fn static_code<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<&'static str, D::Error> {
    String::deserialize(deserializer).map(|code| crate::error::static_code(&code))
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

/// How a harness keeps its threads' event logs (see
/// [`AgentHarnessBuilder::event_log`](crate::AgentHarnessBuilder::event_log)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct EventLogOptions {
    /// How many of a thread's latest events its log keeps (default 10,000); older ones are trimmed
    /// as new ones are written, and a reader asking for them gets a `Lagged`.
    pub retain: u64,
    /// How often, at worst, a host following a thread another host drives reads its log for new
    /// events (default 50 ms): each write wakes it at once where the store can tell
    /// (PostgreSQL's `NOTIFY`); otherwise this is the delay a follower adds, one read per followed
    /// thread per period.
    pub poll: Duration,
}

impl Default for EventLogOptions {
    fn default() -> Self {
        EventLogOptions {
            retain: 10_000,
            poll: Duration::from_millis(50),
        }
    }
}

impl EventLogOptions {
    /// The defaults.
    pub fn new() -> Self {
        EventLogOptions::default()
    }

    /// Keeps a thread's latest `events` (at least 1).
    pub fn retain(mut self, events: u64) -> Self {
        self.retain = events.max(1);
        self
    }

    /// Reads a followed thread's log every `period`.
    pub fn poll(mut self, period: Duration) -> Self {
        self.poll = period.max(Duration::from_millis(1));
        self
    }
}
