//! The round loop of a `call_model` step.
//!
//! Limits, as documented in `docs/steps.md`:
//! - At most [`MAX_TOOL_ROUNDS`] (32) rounds whose function calls run. A response past that cap that still
//!   calls tools is discarded (its calls do not run) and the next request is a *recovery round* carrying
//!   an ephemeral user `continue` message; after [`MAX_RECOVERIES`] (3) such rounds the step fails with
//!   `TOOL_ROUND_LIMIT`. A model that always calls tools therefore gets 32 + 3 = 35 requests.
//! - An `incomplete` or `failed` response, or a `completed` one with no output, is discarded and
//!   followed by a recovery round the same way; after 3 in a row the step fails with `MODEL_CALL_FAILED`.
//!   Two incomplete reasons are not recovered that way: a `refusal` fails the step at once (asking to
//!   continue cannot change it), and a `pause_turn` (a provider's server-tool loop paused, Anthropic)
//!   keeps its output in the conversation and repeats the request as it is, at most
//!   [`MAX_TOOL_ROUNDS`] times in a step.
//! - The `continue` message is never stored: it exists only in the request that carries it.
//! - Every round is charged, discarded ones included: the provider billed it.

use std::sync::Arc;

use serde_json::Value;

use super::durable::{self, DurableSteps, StepRecord};
use super::request::{assemble_step_request, step_input, store};
use super::stream::{RoundEnv, RoundOutcome, run_round};
use super::tools::{SKIPPED_BY_STEER, ToolSet, run_calls};
use super::{CallModelSpec, EmitPolicy};
use crate::checkpoint::record::Cursor;
use crate::context::Applied;
use crate::context::{Context, StepMeta};
use crate::event::FrameworkEvent;
use crate::item::{FunctionCallItem, Item};
use crate::layer::{ContextLayer, LayerDecision, LayerUsage, by_slot, gate_response};
use crate::model::{ModelRequest, ModelResponse, ResponseStatus};
use crate::steer::SteerPoint;
use crate::step::Origin;
use crate::usage::Spend;
use crate::{Error, Result};

/// Rounds whose tool calls run.
pub const MAX_TOOL_ROUNDS: u32 = 32;
/// Recovery rounds allowed in a row.
pub const MAX_RECOVERIES: u32 = 3;
/// The text of the ephemeral recovery message.
const CONTINUE: &str = "continue";
/// The incomplete reason of a round whose provider-side tool loop paused: its output is kept and the
/// request repeated.
const PAUSE_TURN: &str = "pause_turn";
/// The incomplete reason of a refusal: no recovery round can change it.
const REFUSAL: &str = "refusal";
/// How many times per step the layers' `after_model_call` may guide the model before its answer is
/// accepted anyway.
const MAX_GUIDES: u32 = 3;

pub(crate) async fn execute(
    step_id: &str,
    spec: &CallModelSpec,
    input: Value,
    origin: &Origin,
    ctx: &Context,
) -> Result<Value> {
    if spec.model.trim().is_empty() {
        return Err(Error::MissingModel {
            step_id: step_id.to_owned(),
        });
    }
    let runtime = ctx.runtime();
    let (provider_name, provider) =
        runtime.resolve_provider(spec.provider.as_deref(), &spec.model)?;

    // Where this step's rounds are recorded, and where it stood at the last record when it is being
    // resumed (its completed rounds are in the log already; none of them is requested again).
    let steps = durable::steps(ctx);
    let record = steps.record(ctx);
    let resumed = record.resumed.as_ref();
    // Where the step's new items start, for the layers' `store` (its input message included).
    let (step_start, step_input, first_new_item) = match resumed {
        Some(cursor) => {
            // A root input was stored when the step first started; anything else is request-only.
            let step_input = match origin {
                Origin::Root => None,
                _ => step_input(ctx, origin, &input),
            };
            (cursor.step_start, step_input, cursor.first_new_item)
        }
        None => {
            let step_start = ctx.item_count();
            let step_input = step_input(ctx, origin, &input);
            (step_start, step_input, ctx.item_count())
        }
    };
    let tools = spec.tool_set(runtime);
    let emit = &spec.emit;
    if resumed.is_some() {
        // Calls of the last recorded round that have no output were in flight at the crash: they run
        // again now (at-least-once; their idempotency keys are unchanged), before the next request.
        let pending = unanswered_calls(&ctx.items_since(first_new_item));
        if !pending.is_empty() {
            run_calls(&pending, &tools, ctx, spec.tool_concurrency, emit).await?;
        }
    }
    let layers = by_slot(&ctx.layers());
    // A resumed step's request is rebuilt as the first one was — from the history before the step —
    // followed by the items of its recorded rounds, in order.
    let history_end = resumed.map(|_| first_new_item);
    let (instructions, mut conversation, layer_usage) = assemble_step_request(
        ctx,
        &layers,
        spec.instructions.as_deref(),
        &input,
        step_input,
        spec.token_budget,
        history_end,
    )
    .await;
    if resumed.is_some() {
        conversation.extend(ctx.items_since(first_new_item));
    }
    let env = RoundEnv {
        provider: &*provider,
        provider_name: &provider_name,
        ctx,
        idle_timeout: spec.idle_timeout.unwrap_or_else(|| runtime.idle_timeout()),
        emit,
    };
    let mut rounds = RoundLoop {
        step_id,
        spec,
        ctx,
        env,
        tools,
        layers: &layers,
        instructions: instructions.as_deref(),
        conversation,
        steps,
        record: &record,
        step_start,
        first_new_item,
        state: RoundState::new(resumed),
    };
    let text = match rounds.run().await {
        Ok(text) => text,
        Err(Stop::Failed(error)) => return Err(error),
        Err(Stop::ToolRoundLimit(error)) => {
            let state = rounds.state;
            finish_meta(
                ctx,
                first_new_item,
                state.tool_calls,
                true,
                state.spend,
                layer_usage,
            );
            return Err(error);
        }
    };

    let state = rounds.state;
    finish_meta(
        ctx,
        first_new_item,
        state.tool_calls,
        false,
        state.spend,
        layer_usage,
    );
    if !layers.is_empty() {
        store(ctx, &layers, step_start).await;
    }
    ctx.check_aborted()?;
    match &spec.output {
        None => Ok(Value::String(text)),
        Some(output) => (output.parse)(&text).map_err(|message| Error::ModelParseError {
            step_id: step_id.to_owned(),
            raw: text,
            message,
        }),
    }
}

/// Where a step's rounds stand: the counters its limits read, and what they spent and called.
struct RoundState {
    /// The next request's round number.
    round: u32,
    /// Rounds whose tool calls ran.
    tool_rounds: u32,
    /// Discarded (failed, incomplete or empty) responses in a row.
    failures: u32,
    /// Paused rounds kept (`pause_turn`).
    pauses: u32,
    /// Recovery rounds asked for since the tool-round cap was reached.
    limit_attempts: u32,
    /// How often the layers guided the model.
    guides: u32,
    /// Whether the next request carries the ephemeral `continue`.
    carry_continue: bool,
    /// What the step's rounds have spent.
    spend: Spend,
    /// Every function call the step's rounds made.
    tool_calls: Vec<FunctionCallItem>,
}

impl RoundState {
    fn new(resumed: Option<&Cursor>) -> Self {
        RoundState {
            round: resumed.map_or(0, |cursor| cursor.round),
            tool_rounds: resumed.map_or(0, |cursor| cursor.tool_rounds),
            failures: 0,
            pauses: 0,
            limit_attempts: 0,
            guides: 0,
            carry_continue: false,
            spend: resumed.map(|cursor| cursor.spend).unwrap_or_default(),
            tool_calls: Vec::new(),
        }
    }

    /// The next request is a recovery round, carrying `continue`.
    fn ask_to_continue(&mut self) {
        self.carry_continue = true;
        self.round += 1;
    }
}

/// Why the round loop stopped without a response.
enum Stop {
    Failed(Error),
    /// `TOOL_ROUND_LIMIT`: the step's meta still records the calls it made.
    ToolRoundLimit(Error),
}

impl From<Error> for Stop {
    fn from(error: Error) -> Self {
        Stop::Failed(error)
    }
}

/// One `call_model` step's round loop: what every round reads, the conversation it sends, and its
/// [`RoundState`].
struct RoundLoop<'a> {
    step_id: &'a str,
    spec: &'a CallModelSpec,
    ctx: &'a Context,
    env: RoundEnv<'a>,
    /// The tools of the current round: asked for again before each request, so a tool source's
    /// changed list reaches the next one; a round's calls run with the set it offered.
    tools: Arc<ToolSet>,
    layers: &'a [Arc<dyn ContextLayer>],
    instructions: Option<&'a str>,
    /// What the next request sends as input.
    conversation: Vec<Item>,
    /// How the step's rounds and calls are made durable, and where its rounds are recorded.
    steps: &'a dyn DurableSteps,
    record: &'a StepRecord<'a>,
    step_start: usize,
    first_new_item: usize,
    state: RoundState,
}

impl RoundLoop<'_> {
    /// Runs rounds until a response has no function calls, and returns its text (its items are in the
    /// log).
    async fn run(&mut self) -> std::result::Result<String, Stop> {
        loop {
            self.ctx.check_aborted()?;
            let applied = self
                .steps
                .steers_before_round(self.ctx, self.step_id, self.state.round)
                .await?;
            self.apply_steers(applied, SteerPoint::BeforeRound);
            let response = match self.request().await? {
                RoundOutcome::Finished(response) => response,
                RoundOutcome::Steered { completed, applied } => {
                    self.keep_cut_round(completed, applied).await?;
                    continue;
                }
            };
            let round_spend = Spend {
                usage: response.usage.unwrap_or_default(),
                cost: response.cost,
            };
            self.ctx.charge(round_spend);
            self.state.spend += round_spend;

            if self.paused(&response) {
                self.keep_paused_round(response.items).await?;
                continue;
            }
            if response.status != ResponseStatus::Completed || response.items.is_empty() {
                self.discard_failed(&response)?;
                continue;
            }
            self.state.failures = 0;
            let (ctx, emit) = (self.ctx, self.env.emit);
            if emit.active(ctx) {
                emit.emit(
                    ctx,
                    FrameworkEvent::ModelCallCompleted {
                        round: self.state.round,
                        item_count: response.items.len(),
                    },
                );
            }
            if self.guided(&response).await? {
                continue;
            }
            let calls: Vec<FunctionCallItem> = response.function_calls().cloned().collect();
            if calls.is_empty() {
                let text = response.text().unwrap_or_default();
                for item in response.items {
                    ctx.append_item(item);
                }
                return Ok(text);
            }
            if self.state.tool_rounds >= MAX_TOOL_ROUNDS {
                // A recovery round that still calls tools: its calls do not run and it is not stored.
                self.state.limit_attempts += 1;
                if self.state.limit_attempts > MAX_RECOVERIES {
                    return Err(Stop::ToolRoundLimit(Error::ToolRoundLimit {
                        step_id: self.step_id.to_owned(),
                        max_rounds: MAX_TOOL_ROUNDS,
                    }));
                }
                limit_exceeded(ctx, emit, self.state.limit_attempts);
                self.state.ask_to_continue();
                continue;
            }
            self.tool_round(response.items, calls).await?;
        }
    }

    /// Sends the next request (with `continue` when it is a recovery round) and consumes its stream.
    async fn request(&mut self) -> Result<RoundOutcome> {
        let (ctx, emit, spec) = (self.ctx, self.env.emit, self.spec);
        let carry_continue = std::mem::take(&mut self.state.carry_continue);
        if carry_continue {
            self.conversation.push(Item::user_text(CONTINUE));
        }
        self.tools = spec.tool_set(ctx.runtime());
        if emit.active(ctx) {
            emit.emit(
                ctx,
                FrameworkEvent::ModelCallStarted {
                    round: self.state.round,
                    message_count: self.conversation.len(),
                    tool_count: self.tools.specs.len(),
                    recovery_continuation: carry_continue,
                },
            );
        }
        let mut request = ModelRequest::new(&spec.model, &self.conversation, &spec.params)
            .with_instructions(self.instructions)
            .with_tools(&self.tools.specs)
            .with_output(spec.output.as_ref().map(|output| &output.format));
        request.round = self.state.round;
        request.thread_id = ctx.thread_id();
        request.resource_id = ctx.resource_id();
        let run = Box::pin(run_round(&self.env, &request));
        let result = self.steps.round(self.step_id, self.state.round, run).await;
        if carry_continue {
            self.conversation.pop();
        }
        result
    }

    /// A round cut by a steer at an `item_done` point: keeps what completed, answers its calls as
    /// skipped, then the steer; the next request asks again.
    async fn keep_cut_round(&mut self, completed: Vec<Item>, applied: Applied) -> Result<()> {
        let calls: Vec<FunctionCallItem> = completed
            .iter()
            .filter_map(Item::as_function_call)
            .cloned()
            .collect();
        for item in completed {
            self.ctx.append_item(item.clone());
            self.conversation.push(item);
        }
        for call in &calls {
            let output = Item::function_call_output(call.call_id.clone(), SKIPPED_BY_STEER);
            self.ctx.append_item(output.clone());
            self.conversation.push(output);
        }
        self.state.tool_calls.extend(calls);
        self.apply_steers(applied, SteerPoint::ItemDone);
        self.record_round(self.state.tool_rounds).await?;
        self.state.round += 1;
        Ok(())
    }

    /// Whether `response` is a paused server-tool loop to continue: output and no function calls to
    /// answer, under the step's cap.
    fn paused(&self, response: &ModelResponse) -> bool {
        response.status == ResponseStatus::Incomplete
            && response.incomplete_reason.as_deref() == Some(PAUSE_TURN)
            && !response.items.is_empty()
            && response.function_calls().next().is_none()
            && self.state.pauses < MAX_TOOL_ROUNDS
    }

    /// A paused round: its output joins the conversation and the log as it is, and the next request
    /// repeats it so the provider continues where it paused.
    async fn keep_paused_round(&mut self, items: Vec<Item>) -> Result<()> {
        self.state.pauses += 1;
        self.state.failures = 0;
        for item in items {
            self.ctx.append_item(item.clone());
            self.conversation.push(item);
        }
        self.record_round(self.state.tool_rounds).await?;
        self.state.round += 1;
        Ok(())
    }

    /// A failed, incomplete or empty response: discarded, and a recovery round follows unless there
    /// were too many in a row, or it is a refusal (`MODEL_CALL_FAILED`).
    fn discard_failed(&mut self, response: &ModelResponse) -> Result<()> {
        let (ctx, emit, round) = (self.ctx, self.env.emit, self.state.round);
        self.state.failures += 1;
        let refused = response.status == ResponseStatus::Incomplete
            && response.incomplete_reason.as_deref() == Some(REFUSAL);
        let recoverable = self.state.failures <= MAX_RECOVERIES && !refused;
        let message = failure_message(response);
        if emit.active(ctx) {
            emit.emit(
                ctx,
                FrameworkEvent::ModelCallFailed {
                    round,
                    status: response.status,
                    error: message.clone(),
                    recoverable,
                },
            );
        }
        if !recoverable {
            return Err(Error::ModelCallFailed {
                step_id: self.step_id.to_owned(),
                round,
                status: response.status,
                message,
            });
        }
        if emit.active(ctx) {
            emit.emit(
                ctx,
                FrameworkEvent::ModelCallRecoveryContinue {
                    round,
                    status: response.status,
                    attempt: self.state.failures,
                    max_attempts: MAX_RECOVERIES,
                },
            );
        }
        self.state.ask_to_continue();
        Ok(())
    }

    /// The layers' `after_model_call` gate: `true` when they guided the model (the response is
    /// discarded and the guidance joins the next request, not the log).
    async fn guided(&mut self, response: &ModelResponse) -> Result<bool> {
        if self.layers.is_empty() {
            return Ok(false);
        }
        match gate_response(self.ctx, self.layers, &response.items).await {
            LayerDecision::Deny { guidance } => Err(Error::SteeringDenied { guidance }),
            LayerDecision::Guide { guidance } if self.state.guides < MAX_GUIDES => {
                self.state.guides += 1;
                self.conversation.push(Item::developer_text(guidance));
                self.state.round += 1;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// Records the response, runs its calls and appends their outputs (and any steer that cut them).
    async fn tool_round(&mut self, items: Vec<Item>, calls: Vec<FunctionCallItem>) -> Result<()> {
        let (ctx, emit, round) = (self.ctx, self.env.emit, self.state.round);
        for item in items {
            ctx.append_item(item.clone());
            self.conversation.push(item);
        }
        // The response is recorded before its calls run, so a crash from here on never asks for it
        // again: the calls without outputs run on resume.
        self.record_round(self.state.tool_rounds + 1).await?;
        if emit.active(ctx) {
            emit.emit(
                ctx,
                FrameworkEvent::ToolRoundStarted {
                    round,
                    tool_count: calls.len(),
                },
            );
        }
        let outcome = run_calls(&calls, &self.tools, ctx, self.spec.tool_concurrency, emit).await?;
        if emit.active(ctx) {
            emit.emit(
                ctx,
                FrameworkEvent::ToolRoundCompleted {
                    round,
                    tool_count: calls.len(),
                },
            );
        }
        self.conversation.extend(outcome.outputs);
        self.state.tool_calls.extend(calls);
        if let Some(applied) = outcome.steered {
            self.apply_steers(applied, SteerPoint::BeforeToolCall);
        }
        self.state.tool_rounds += 1;
        if self.state.tool_rounds == MAX_TOOL_ROUNDS {
            self.state.limit_attempts = 1;
            limit_exceeded(ctx, emit, self.state.limit_attempts);
            self.state.carry_continue = true;
        }
        self.state.round += 1;
        Ok(())
    }

    /// Records a round boundary: the round's items are in the log, the next request is `round + 1`
    /// and `tool_rounds` rounds' calls ran (or are running).
    async fn record_round(&self, tool_rounds: u32) -> Result<()> {
        let cursor = Cursor {
            step_start: self.step_start,
            first_new_item: self.first_new_item,
            round: self.state.round + 1,
            tool_rounds,
            spend: self.state.spend,
        };
        self.steps.round_kept(self.ctx, self.record, cursor).await
    }

    /// Appends applied steers (role and content parts as sent) to the log and the conversation, and
    /// emits `steer_applied` (a session event: not subject to the step's `emit` policy).
    fn apply_steers(&mut self, applied: Applied, point: SteerPoint) {
        if applied.is_empty() {
            return;
        }
        for item in applied.items {
            self.ctx.append_item(item.clone());
            self.conversation.push(item);
        }
        crate::telemetry::steers_applied(
            self.ctx.runtime().name(),
            applied.message_ids.len(),
            point,
        );
        self.ctx.emit(FrameworkEvent::SteerApplied {
            message_ids: applied.message_ids,
            point,
            round: self.state.round,
        });
    }
}

/// The function calls among `items` that no `function_call_output` among them answers, in order.
fn unanswered_calls(items: &[Item]) -> Vec<FunctionCallItem> {
    let answered: std::collections::HashSet<&str> = items
        .iter()
        .filter_map(|item| match item {
            Item::FunctionCallOutput(output) => Some(output.call_id.as_str()),
            _ => None,
        })
        .collect();
    items
        .iter()
        .filter_map(Item::as_function_call)
        .filter(|call| !answered.contains(call.call_id.as_str()))
        .cloned()
        .collect()
}

fn failure_message(response: &ModelResponse) -> String {
    match response.status {
        ResponseStatus::Incomplete => format!(
            "response incomplete: {}",
            response
                .incomplete_reason
                .as_deref()
                .unwrap_or("no reason given")
        ),
        ResponseStatus::Failed => {
            format!(
                "response failed: {}",
                response.error.as_deref().unwrap_or("no message given")
            )
        }
        _ => "response completed with no output items".to_owned(),
    }
}

fn limit_exceeded(ctx: &Context, emit: &EmitPolicy, attempt: u32) {
    if emit.active(ctx) {
        emit.emit(
            ctx,
            FrameworkEvent::ToolRoundLimitExceeded {
                max_tool_rounds: MAX_TOOL_ROUNDS,
                attempt,
                max_attempts: MAX_RECOVERIES,
            },
        );
    }
}

fn finish_meta(
    ctx: &Context,
    first_new_item: usize,
    tool_calls: Vec<FunctionCallItem>,
    ended_with_tool_calls: bool,
    spend: Spend,
    last_layer_usage: Vec<LayerUsage>,
) {
    let response_items = ctx.items_since(first_new_item);
    ctx.set_last_step_meta(StepMeta {
        tool_calls,
        ended_with_tool_calls,
        usage: spend.usage,
        cost: spend.cost,
        response_items,
        last_layer_usage,
    });
}
