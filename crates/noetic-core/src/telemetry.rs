//! Spans: what a run looks like to `tracing` (and, through `noetic-otel`, to OpenTelemetry).
//!
//! Core speaks `tracing` only. Span and attribute names follow the OpenTelemetry GenAI semantic
//! conventions (`open-telemetry/semantic-conventions-genai`, the `gen-ai` spans and agent spans as of
//! semantic conventions v1.38.0; the deprecated constants of `opentelemetry-semantic-conventions` are
//! not used). The span tree:
//!
//! - `invoke_agent {harness}` — a root run (`AgentHarness::run`, `Context::run` on a root) or a
//!   session turn: `gen_ai.operation.name = invoke_agent`, `gen_ai.agent.name`,
//!   `gen_ai.conversation.id` (the thread), `noetic.execution.id`, `noetic.turn.id` (a turn);
//! - `noetic.step` — every step: `noetic.step.id`, `noetic.step.kind`;
//! - `chat {model}` — every model round, under its `call_model` step: `gen_ai.operation.name = chat`,
//!   `gen_ai.provider.name` (the provider's registered name), `gen_ai.request.model`,
//!   `gen_ai.request.temperature`, `gen_ai.request.top_p`, `gen_ai.request.max_tokens` (when the
//!   step sets them), then `gen_ai.response.model`, `gen_ai.response.id`, `gen_ai.response.finish_reasons`,
//!   `gen_ai.usage.input_tokens` (the provider's total input, cached included),
//!   `gen_ai.usage.output_tokens`, `gen_ai.usage.cache_read.input_tokens` (only when reported),
//!   `noetic.round`, `noetic.cost`;
//! - `execute_tool {tool}` — every tool call, under its round's step: `gen_ai.operation.name =
//!   execute_tool`, `gen_ai.tool.name`, `gen_ai.tool.call.id`;
//! - `workflow {root id}` — `parse_and_run_workflow`, around its run.
//!
//! Numbers are recorded as `i64` (counts, token usage, round numbers) or `f64` (temperature, cost),
//! never as `u64`: `tracing-opentelemetry` turns a `u64` field into a string attribute, and the
//! conventions type every `gen_ai.usage.*` attribute as an int, which backends sum and filter.
//!
//! A failed span gets `otel.status_code = ERROR`, `error.type` (the stable code) and the message as
//! `otel.status_description`. `otel.name` carries the dynamic span name (`chat gpt-4o`), as
//! `tracing-opentelemetry` expects.
//!
//! **Metrics.** Core emits measurements through `tracing` too, so it stays free of OpenTelemetry
//! types and costs nothing without a subscriber; `noetic-otel`'s metrics layer turns them into
//! instruments. The per-round histograms (`gen_ai.client.token.usage`,
//! `gen_ai.client.operation.duration`) and the turn counters are read from the spans above when
//! they close: what a span records is what its metrics say. Counts of things that are not spans
//! (steers applied, approvals requested, drains ended, paid calls left pending) are events at the
//! target [`METRICS_TARGET`]: the field `metric` names the counter ([`metric`]), `increment` says
//! by how much (1 when absent), every other field but the message is an attribute.
//!
//! **Content capture is off by default** (the conventions' rule): prompts, completions and tool
//! arguments are not recorded. Opt in with [`set_capture_content`] or the environment variable
//! `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true`; each `chat` span then also has
//! `gen_ai.system_instructions`, `gen_ai.input.messages` and `gen_ai.output.messages` (the items as
//! JSON). Only content: API keys never reach a span either way.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU8, Ordering};

use tracing::{Instrument, Span};

use crate::drain::{CallKind, DrainReport, PaidCall};
use crate::error::Error;
use crate::model::{ModelResponse, ResponseStatus};
use crate::steer::SteerPoint;

/// Attribute names (GenAI semantic conventions v1.38.0, plus noetic's own).
pub mod attr {
    /// `gen_ai.operation.name`: `chat`, `execute_tool`, `invoke_agent`.
    pub const OPERATION_NAME: &str = "gen_ai.operation.name";
    /// `gen_ai.provider.name`.
    pub const PROVIDER_NAME: &str = "gen_ai.provider.name";
    /// `gen_ai.request.model`.
    pub const REQUEST_MODEL: &str = "gen_ai.request.model";
    /// `gen_ai.request.temperature` (a double).
    pub const REQUEST_TEMPERATURE: &str = "gen_ai.request.temperature";
    /// `gen_ai.request.top_p` (a double).
    pub const REQUEST_TOP_P: &str = "gen_ai.request.top_p";
    /// `gen_ai.request.max_tokens` (an int): the step's cap on output tokens.
    pub const REQUEST_MAX_TOKENS: &str = "gen_ai.request.max_tokens";
    /// `gen_ai.response.model`.
    pub const RESPONSE_MODEL: &str = "gen_ai.response.model";
    /// `gen_ai.response.id`.
    pub const RESPONSE_ID: &str = "gen_ai.response.id";
    /// `gen_ai.response.finish_reasons` (comma-separated: `tracing` fields have no arrays).
    pub const FINISH_REASONS: &str = "gen_ai.response.finish_reasons";
    /// `gen_ai.usage.input_tokens`: the provider's total input, cached tokens included.
    pub const INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
    /// `gen_ai.usage.output_tokens`.
    pub const OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";
    /// `gen_ai.usage.cache_read.input_tokens`: only when the provider reported it.
    pub const CACHE_READ_INPUT_TOKENS: &str = "gen_ai.usage.cache_read.input_tokens";
    /// `gen_ai.usage.cache_creation.input_tokens`: input written to the prompt cache, only when the
    /// provider reported it (Anthropic).
    pub const CACHE_CREATION_INPUT_TOKENS: &str = "gen_ai.usage.cache_creation.input_tokens";
    /// `gen_ai.tool.name`.
    pub const TOOL_NAME: &str = "gen_ai.tool.name";
    /// `gen_ai.tool.call.id`.
    pub const TOOL_CALL_ID: &str = "gen_ai.tool.call.id";
    /// `gen_ai.agent.name`: the harness's name.
    pub const AGENT_NAME: &str = "gen_ai.agent.name";
    /// `gen_ai.conversation.id`: the session thread.
    pub const CONVERSATION_ID: &str = "gen_ai.conversation.id";
    /// `error.type`: the stable error code.
    pub const ERROR_TYPE: &str = "error.type";
    /// `noetic.execution.id`.
    pub const EXECUTION_ID: &str = "noetic.execution.id";
    /// `noetic.turn.id`.
    pub const TURN_ID: &str = "noetic.turn.id";
    /// `noetic.step.id`.
    pub const STEP_ID: &str = "noetic.step.id";
    /// `noetic.step.kind`.
    pub const STEP_KIND: &str = "noetic.step.kind";
    /// `noetic.round`: the round's number in its step.
    pub const ROUND: &str = "noetic.round";
    /// `noetic.cost`: the round's cost in USD, when reported.
    pub const COST: &str = "noetic.cost";
    /// `gen_ai.system_instructions` (content capture only).
    pub const SYSTEM_INSTRUCTIONS: &str = "gen_ai.system_instructions";
    /// `gen_ai.input.messages` (content capture only).
    pub const INPUT_MESSAGES: &str = "gen_ai.input.messages";
    /// `gen_ai.output.messages` (content capture only).
    pub const OUTPUT_MESSAGES: &str = "gen_ai.output.messages";
}

/// The `tracing` target of the events that bump a counter (see the module docs).
pub const METRICS_TARGET: &str = "noetic::metrics";

/// noetic's own counters: their names, and the fields of the events that bump them.
pub mod metric {
    /// `noetic.turns.started` (`{turn}`): session turns started, by `gen_ai.agent.name`. Read from
    /// the turn's `invoke_agent` span when it opens.
    pub const TURNS_STARTED: &str = "noetic.turns.started";
    /// `noetic.turns.ended` (`{turn}`): session turns ended, by `gen_ai.agent.name` and
    /// [`TURN_OUTCOME`] (with `error.type` unless completed). Read from the turn's span when it
    /// closes.
    pub const TURNS_ENDED: &str = "noetic.turns.ended";
    /// `noetic.steers.applied` (`{message}`): steering messages that joined a running turn, by
    /// `gen_ai.agent.name` and [`STEER_POINT`].
    pub const STEERS_APPLIED: &str = "noetic.steers.applied";
    /// `noetic.approvals.requested` (`{call}`): tool calls that waited for a person's approval, by
    /// `gen_ai.agent.name` and `gen_ai.tool.name`.
    pub const APPROVALS_REQUESTED: &str = "noetic.approvals.requested";
    /// `noetic.drains` (`{drain}`): graceful drains ended, by `gen_ai.agent.name` and
    /// [`DRAIN_REASON`].
    pub const DRAINS: &str = "noetic.drains";
    /// `noetic.paid_calls.left_pending` (`{call}`): model calls whose round ended unpriced (cut by a
    /// cancel, a steer or a broken stream), so their paid-call record stays pending for
    /// reconciliation; by `gen_ai.request.model` and [`CALL_KIND`].
    pub const PAID_CALLS_LEFT_PENDING: &str = "noetic.paid_calls.left_pending";

    /// The event field naming the counter.
    pub const NAME: &str = "metric";
    /// The event field saying by how much (an int; 1 when absent).
    pub const INCREMENT: &str = "increment";

    /// `noetic.turn.outcome`: `completed`, `cancelled` or `failed`.
    pub const TURN_OUTCOME: &str = "noetic.turn.outcome";
    /// `noetic.steer.point`: `item_done`, `before_tool_call` or `before_round`.
    pub const STEER_POINT: &str = "noetic.steer.point";
    /// `noetic.drain.reason`: `settled`, `deadline` or `stopped`.
    pub const DRAIN_REASON: &str = "noetic.drain.reason";
    /// `noetic.call.kind`: `model_round` or `decide`.
    pub const CALL_KIND: &str = "noetic.call.kind";
}

/// The variable that opts in to content capture (`true`), as GenAI instrumentations spell it.
pub const CAPTURE_CONTENT_ENV: &str = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT";

/// 0: not set (the environment decides), 1: off, 2: on.
static CAPTURE: AtomicU8 = AtomicU8::new(0);

/// Records prompts and completions on `chat` spans (`true`) or not (`false`, the default), for the
/// whole process; overrides [`CAPTURE_CONTENT_ENV`].
pub fn set_capture_content(capture: bool) {
    CAPTURE.store(if capture { 2 } else { 1 }, Ordering::Relaxed);
}

/// Whether `chat` spans record content: [`set_capture_content`], else [`CAPTURE_CONTENT_ENV`].
pub fn capture_content() -> bool {
    static FROM_ENV: OnceLock<bool> = OnceLock::new();
    match CAPTURE.load(Ordering::Relaxed) {
        1 => false,
        2 => true,
        _ => *FROM_ENV.get_or_init(|| {
            std::env::var(CAPTURE_CONTENT_ENV)
                .is_ok_and(|value| value.trim().eq_ignore_ascii_case("true"))
        }),
    }
}

/// A span for user code inside a step or a tool, parented to the current step (or tool call):
/// `noetic.user` named `name`.
///
/// ```
/// let span = noetic_core::create_span("rank results");
/// let _entered = span.enter();
/// ```
pub fn create_span(name: &str) -> Span {
    tracing::info_span!("noetic.user", otel.name = name)
}

/// The span of a root run or a session turn.
pub(crate) fn agent_span(
    agent: &str,
    thread: Option<&str>,
    execution_id: &str,
    turn_id: Option<&str>,
) -> Span {
    tracing::info_span!(
        "invoke_agent",
        otel.name = format_args!("invoke_agent {agent}"),
        otel.kind = "internal",
        gen_ai.operation.name = "invoke_agent",
        gen_ai.agent.name = agent,
        gen_ai.conversation.id = thread,
        noetic.execution.id = execution_id,
        noetic.turn.id = turn_id,
        otel.status_code = tracing::field::Empty,
        otel.status_description = tracing::field::Empty,
        error.type = tracing::field::Empty,
    )
}

/// The span of one step.
pub(crate) fn step_span(id: &str, kind: &str) -> Span {
    tracing::info_span!(
        "noetic.step",
        otel.name = format_args!("step {id}"),
        noetic.step.id = id,
        noetic.step.kind = kind,
        otel.status_code = tracing::field::Empty,
        otel.status_description = tracing::field::Empty,
        error.type = tracing::field::Empty,
    )
}

/// The span of one model round.
pub(crate) fn chat_span(provider: &str, model: &str, round: u32) -> Span {
    tracing::info_span!(
        "chat",
        otel.name = format_args!("chat {model}"),
        otel.kind = "client",
        gen_ai.operation.name = "chat",
        gen_ai.provider.name = provider,
        gen_ai.request.model = model,
        noetic.round = i64::from(round),
        gen_ai.request.temperature = tracing::field::Empty,
        gen_ai.request.top_p = tracing::field::Empty,
        gen_ai.request.max_tokens = tracing::field::Empty,
        gen_ai.response.model = tracing::field::Empty,
        gen_ai.response.id = tracing::field::Empty,
        gen_ai.response.finish_reasons = tracing::field::Empty,
        gen_ai.usage.input_tokens = tracing::field::Empty,
        gen_ai.usage.output_tokens = tracing::field::Empty,
        gen_ai.usage.cache_read.input_tokens = tracing::field::Empty,
        gen_ai.usage.cache_creation.input_tokens = tracing::field::Empty,
        noetic.cost = tracing::field::Empty,
        gen_ai.system_instructions = tracing::field::Empty,
        gen_ai.input.messages = tracing::field::Empty,
        gen_ai.output.messages = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
        otel.status_description = tracing::field::Empty,
        error.type = tracing::field::Empty,
    )
}

/// The span of one tool call.
pub(crate) fn tool_span(name: &str, call_id: &str) -> Span {
    tracing::info_span!(
        "execute_tool",
        otel.name = format_args!("execute_tool {name}"),
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = name,
        gen_ai.tool.call.id = call_id,
        otel.status_code = tracing::field::Empty,
        otel.status_description = tracing::field::Empty,
        error.type = tracing::field::Empty,
    )
}

/// The span of a workflow run.
pub(crate) fn workflow_span(root_id: &str) -> Span {
    tracing::info_span!(
        "noetic.workflow",
        otel.name = format_args!("workflow {root_id}"),
        noetic.step.id = root_id,
        otel.status_code = tracing::field::Empty,
        otel.status_description = tracing::field::Empty,
        error.type = tracing::field::Empty,
    )
}

/// Records the request's sampling parameters on a round's span, and its content when content
/// capture is on.
pub(crate) fn record_request(span: &Span, request: &crate::model::ModelRequest<'_>) {
    if span.is_disabled() {
        return;
    }
    let params = request.params;
    if let Some(temperature) = params.temperature {
        span.record(attr::REQUEST_TEMPERATURE, temperature);
    }
    if let Some(top_p) = params.top_p {
        span.record(attr::REQUEST_TOP_P, top_p);
    }
    if let Some(max_tokens) = params.max_output_tokens {
        span.record(attr::REQUEST_MAX_TOKENS, int(max_tokens));
    }
    if !capture_content() {
        return;
    }
    if let Some(instructions) = request.instructions {
        span.record("gen_ai.system_instructions", instructions);
    }
    if let Ok(input) = serde_json::to_string(request.input) {
        span.record("gen_ai.input.messages", input.as_str());
    }
}

/// Runs `work` inside `span` and marks the span failed when the work fails.
pub(crate) async fn traced<T>(
    span: Span,
    work: impl Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    let result = work.instrument(span.clone()).await;
    if let Err(error) = &result {
        record_error(&span, error);
    }
    result
}

/// Marks `span` failed with `error`'s code and message.
pub(crate) fn record_error(span: &Span, error: &Error) {
    if span.is_disabled() {
        return;
    }
    span.record("otel.status_code", "ERROR");
    span.record("error.type", error.code());
    span.record("otel.status_description", tracing::field::display(error));
}

/// Marks a tool call's span failed: a tool's error is its output to the model, not an [`Error`].
pub(crate) fn record_tool_error(span: &Span) {
    if span.is_disabled() {
        return;
    }
    span.record("otel.status_code", "ERROR");
    span.record("error.type", "TOOL_ERROR");
}

/// Records what a finished round's response says of itself.
pub(crate) fn record_response(span: &Span, response: &ModelResponse) {
    if span.is_disabled() {
        return;
    }
    if let Some(model) = &response.model {
        span.record("gen_ai.response.model", model.as_str());
    }
    if let Some(id) = &response.id {
        span.record("gen_ai.response.id", id.as_str());
    }
    let reason = match response.status {
        ResponseStatus::Completed if response.function_calls().next().is_some() => "tool_calls",
        ResponseStatus::Completed => "stop",
        ResponseStatus::Incomplete => response.incomplete_reason.as_deref().unwrap_or("length"),
        _ => "error",
    };
    span.record("gen_ai.response.finish_reasons", reason);
    if let Some(usage) = &response.usage {
        span.record(attr::INPUT_TOKENS, int(usage.input_tokens));
        span.record(attr::OUTPUT_TOKENS, int(usage.output_tokens));
        if let Some(cached) = usage.cached_tokens {
            span.record(attr::CACHE_READ_INPUT_TOKENS, int(cached));
        }
        if let Some(written) = usage.cache_write_tokens {
            span.record(attr::CACHE_CREATION_INPUT_TOKENS, int(written));
        }
    }
    if let Some(cost) = response.cost {
        span.record("noetic.cost", cost);
    }
    if capture_content()
        && let Ok(output) = serde_json::to_string(&response.items)
    {
        span.record("gen_ai.output.messages", output.as_str());
    }
}

/// A count as the `i64` OpenTelemetry exports as an int (a `u64` field would arrive as a string);
/// saturating, though no count comes near `i64::MAX`.
fn int(count: u64) -> i64 {
    i64::try_from(count).unwrap_or(i64::MAX)
}

/// Counts `count` steering messages applied at `point` ([`metric::STEERS_APPLIED`]).
pub(crate) fn steers_applied(agent: &str, count: usize, point: SteerPoint) {
    let point = match point {
        SteerPoint::ItemDone => "item_done",
        SteerPoint::BeforeToolCall => "before_tool_call",
        SteerPoint::BeforeRound => "before_round",
    };
    tracing::info!(
        target: METRICS_TARGET,
        metric = metric::STEERS_APPLIED,
        increment = int(u64::try_from(count).unwrap_or(u64::MAX)),
        gen_ai.agent.name = agent,
        noetic.steer.point = point,
        "steers applied"
    );
}

/// Counts a tool call waiting for approval ([`metric::APPROVALS_REQUESTED`]).
pub(crate) fn approval_requested(agent: &str, tool: &str) {
    tracing::info!(
        target: METRICS_TARGET,
        metric = metric::APPROVALS_REQUESTED,
        gen_ai.agent.name = agent,
        gen_ai.tool.name = tool,
        "approval requested"
    );
}

/// Counts an ended drain by its reason ([`metric::DRAINS`]): for the drain's task
/// (`context/drain.rs`) to call with the report it publishes.
pub(crate) fn drain_finished(agent: &str, report: &DrainReport) {
    tracing::info!(
        target: METRICS_TARGET,
        metric = metric::DRAINS,
        gen_ai.agent.name = agent,
        noetic.drain.reason = report.reason.as_str(),
        "drain finished"
    );
}

/// Counts a paid call whose round ended unpriced ([`metric::PAID_CALLS_LEFT_PENDING`]).
pub(crate) fn paid_call_left_pending(call: &PaidCall) {
    let kind = match call.kind {
        CallKind::ModelRound => "model_round",
        CallKind::Decide => "decide",
        CallKind::AgentTurn => "agent_turn",
    };
    tracing::info!(
        target: METRICS_TARGET,
        metric = metric::PAID_CALLS_LEFT_PENDING,
        gen_ai.request.model = call.model.as_str(),
        noetic.call.kind = kind,
        "paid call left pending"
    );
}
