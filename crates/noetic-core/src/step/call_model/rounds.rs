//! The round loop of a `call_model` step.
//!
//! Limits, as documented in `docs/steps.md`:
//! - At most [`MAX_TOOL_ROUNDS`] (32) rounds whose function calls run. A response past that cap that still
//!   calls tools is discarded (its calls do not run) and the next request is a *recovery round* carrying
//!   an ephemeral user `continue` message; after [`MAX_RECOVERIES`] (3) such rounds the step fails with
//!   `TOOL_ROUND_LIMIT`. A model that always calls tools therefore gets 32 + 3 = 35 requests.
//! - An `incomplete` or `failed` response, or a `completed` one with no output, is discarded and
//!   followed by a recovery round the same way; after 3 in a row the step fails with `MODEL_CALL_FAILED`.
//! - The `continue` message is never stored: it exists only in the request that carries it.
//! - Every round is charged, discarded ones included: the provider billed it.

use serde_json::Value;

use super::stream::{RoundEnv, RoundOutcome, run_round};
use super::tools::{SKIPPED_BY_STEER, ToolSet, run_calls};
use super::{CallModelSpec, EmitPolicy};
use crate::checkpoint::record::Cursor;
use crate::context::{Context, StepMeta};
use crate::event::FrameworkEvent;
use crate::item::{FunctionCallItem, Item, Role};
use crate::layer::{
    Band, ContextLayer, LayerCtx, LayerDecision, LayerUsage, RecallLayerOutput, allocate_budget,
    by_slot, estimate_tokens, fit_history, fit_items, gate_response, project_history,
};
use crate::model::{ModelRequest, ModelResponse, ResponseStatus};
use crate::session::Applied;
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

    // On a durable root: this step's ledger path, and where it stood at the last checkpoint when it is
    // being resumed (its completed rounds are in the log already; none of them is requested again).
    let journal = ctx.journal();
    let path = journal.map(|journal| journal.current_path());
    let resumed = journal
        .zip(path.as_deref())
        .and_then(|(journal, path)| journal.cursor(path));
    // Where the step's new items start, for the layers' `store` (its input message included).
    let (step_start, step_input, first_new_item) = match &resumed {
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
    let tools = ToolSet::new(&spec.tools, runtime.tools());
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
    let history_end = resumed.as_ref().map(|_| first_new_item);
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
    let mut guides = 0u32;
    let env = RoundEnv {
        provider: &*provider,
        provider_name: &provider_name,
        ctx,
        idle_timeout: spec.idle_timeout.unwrap_or_else(|| runtime.idle_timeout()),
        emit,
    };

    let mut spend = resumed
        .as_ref()
        .map(|cursor| cursor.spend)
        .unwrap_or_default();
    let mut tool_calls: Vec<FunctionCallItem> = Vec::new();
    let mut round = resumed.as_ref().map_or(0, |cursor| cursor.round);
    let mut tool_rounds = resumed.as_ref().map_or(0, |cursor| cursor.tool_rounds);
    // Records a round boundary: the round's items are in the log; the next request is `round + 1`.
    let record_round = async |round: u32, tool_rounds: u32, spend: Spend| -> Result<()> {
        let (Some(journal), Some(path)) = (journal, path.as_deref()) else {
            return Ok(());
        };
        journal.set_cursor(
            path,
            Cursor {
                step_start,
                first_new_item,
                round: round + 1,
                tool_rounds,
                spend,
            },
        );
        ctx.checkpoint().await
    };
    let mut failures = 0u32;
    let mut limit_attempts = 0u32;
    let mut carry_continue = false;
    let response = loop {
        ctx.check_aborted()?;
        if let Some(inbox) = ctx.steers() {
            // `before_round` is offered before every request of the turn but its first.
            if inbox.mark_request() && inbox.has_pending() {
                let applied = inbox.take(SteerPoint::BeforeRound, ctx);
                apply_steers(
                    ctx,
                    &mut conversation,
                    applied,
                    SteerPoint::BeforeRound,
                    round,
                );
            }
        }
        if carry_continue {
            conversation.push(Item::user_text(CONTINUE));
        }
        if emit.active(ctx) {
            emit.emit(
                ctx,
                FrameworkEvent::ModelCallStarted {
                    round,
                    message_count: conversation.len(),
                    tool_count: tools.specs.len(),
                    recovery_continuation: carry_continue,
                },
            );
        }
        let mut request = ModelRequest::new(&spec.model, &conversation, &spec.params)
            .with_instructions(instructions.as_deref())
            .with_tools(&tools.specs)
            .with_output(spec.output.as_ref().map(|output| &output.format));
        request.round = round;
        request.thread_id = ctx.thread_id();
        request.resource_id = ctx.resource_id();
        let result = run_round(&env, &request).await;
        if carry_continue {
            conversation.pop();
            carry_continue = false;
        }
        let response = match result? {
            RoundOutcome::Finished(response) => response,
            RoundOutcome::Steered { completed, applied } => {
                // The round was cut at an `item_done` point: keep what completed, answer its calls,
                // then the steer, then ask again.
                let calls: Vec<FunctionCallItem> = completed
                    .iter()
                    .filter_map(Item::as_function_call)
                    .cloned()
                    .collect();
                for item in completed {
                    ctx.append_item(item.clone());
                    conversation.push(item);
                }
                for call in &calls {
                    let output = Item::function_call_output(call.call_id.clone(), SKIPPED_BY_STEER);
                    ctx.append_item(output.clone());
                    conversation.push(output);
                }
                tool_calls.extend(calls);
                apply_steers(ctx, &mut conversation, applied, SteerPoint::ItemDone, round);
                record_round(round, tool_rounds, spend).await?;
                round += 1;
                continue;
            }
        };
        let round_spend = Spend {
            usage: response.usage.unwrap_or_default(),
            cost: response.cost,
        };
        ctx.charge(round_spend);
        spend += round_spend;

        if response.status != ResponseStatus::Completed || response.items.is_empty() {
            failures += 1;
            let recoverable = failures <= MAX_RECOVERIES;
            let message = failure_message(&response);
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
                    step_id: step_id.to_owned(),
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
                        attempt: failures,
                        max_attempts: MAX_RECOVERIES,
                    },
                );
            }
            carry_continue = true;
            round += 1;
            continue;
        }
        failures = 0;
        if emit.active(ctx) {
            emit.emit(
                ctx,
                FrameworkEvent::ModelCallCompleted {
                    round,
                    item_count: response.items.len(),
                },
            );
        }

        if !layers.is_empty() {
            match gate_response(ctx, &layers, &response.items).await {
                LayerDecision::Deny { guidance } => return Err(Error::SteeringDenied { guidance }),
                LayerDecision::Guide { guidance } if guides < MAX_GUIDES => {
                    // The response is discarded; the guidance joins the request (not the log).
                    guides += 1;
                    conversation.push(Item::developer_text(guidance));
                    round += 1;
                    continue;
                }
                _ => {}
            }
        }

        let calls: Vec<FunctionCallItem> = response.function_calls().cloned().collect();
        if calls.is_empty() {
            for item in &response.items {
                ctx.append_item(item.clone());
            }
            break response;
        }
        if tool_rounds >= MAX_TOOL_ROUNDS {
            // A recovery round that still calls tools: its calls do not run and it is not stored.
            limit_attempts += 1;
            if limit_attempts > MAX_RECOVERIES {
                finish_meta(ctx, first_new_item, tool_calls, true, spend, layer_usage);
                return Err(Error::ToolRoundLimit {
                    step_id: step_id.to_owned(),
                    max_rounds: MAX_TOOL_ROUNDS,
                });
            }
            limit_exceeded(ctx, emit, limit_attempts);
            carry_continue = true;
            round += 1;
            continue;
        }

        for item in response.items {
            ctx.append_item(item.clone());
            conversation.push(item);
        }
        // The response is recorded before its calls run, so a crash from here on never asks for it
        // again: the calls without outputs run on resume.
        record_round(round, tool_rounds + 1, spend).await?;
        if emit.active(ctx) {
            emit.emit(
                ctx,
                FrameworkEvent::ToolRoundStarted {
                    round,
                    tool_count: calls.len(),
                },
            );
        }
        let outcome = run_calls(&calls, &tools, ctx, spec.tool_concurrency, emit).await?;
        if emit.active(ctx) {
            emit.emit(
                ctx,
                FrameworkEvent::ToolRoundCompleted {
                    round,
                    tool_count: calls.len(),
                },
            );
        }
        conversation.extend(outcome.outputs);
        tool_calls.extend(calls);
        if let Some(applied) = outcome.steered {
            apply_steers(
                ctx,
                &mut conversation,
                applied,
                SteerPoint::BeforeToolCall,
                round,
            );
        }
        tool_rounds += 1;
        if tool_rounds == MAX_TOOL_ROUNDS {
            limit_attempts = 1;
            limit_exceeded(ctx, emit, limit_attempts);
            carry_continue = true;
        }
        round += 1;
    };

    let text = response.text().unwrap_or_default();
    finish_meta(ctx, first_new_item, tool_calls, false, spend, layer_usage);
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

/// What the step does with its input (see [`Origin`]): a root string input is appended to the log as
/// a user message; a forwarded string that is not already the newest assistant message of the log is
/// returned, to be sent with the step's requests without being stored; anything else is neither.
fn step_input(ctx: &Context, origin: &Origin, input: &Value) -> Option<Item> {
    let Value::String(text) = input else {
        return None;
    };
    if text.is_empty() {
        return None;
    }
    match origin {
        Origin::Root => {
            ctx.append_item(Item::user_text(text.as_str()));
            None
        }
        Origin::Forwarded if !ctx.newest_assistant_text_is(text) => {
            Some(Item::user_text(text.as_str()))
        }
        Origin::Forwarded | Origin::FedBack | Origin::Turn(_) => None,
    }
}

/// The first request's instructions and conversation, built from the context's item log: system
/// items become instructions, the layers (`layers`, in slot order) project the history and recall
/// around it, within `token_budget` when one is set. Also what each layer contributed.
pub(crate) async fn assemble_request(
    ctx: &Context,
    layers: &[std::sync::Arc<dyn ContextLayer>],
    step_instructions: Option<&str>,
    input: &Value,
    token_budget: Option<usize>,
) -> (Option<String>, Vec<Item>, Vec<LayerUsage>) {
    assemble_step_request(
        ctx,
        layers,
        step_instructions,
        input,
        None,
        token_budget,
        None,
    )
    .await
}

/// [`assemble_request`] with the step's request-only input (`step_input`) after the history, inside
/// the recall placement and the budget; the history is the log's first `history_end` items when given.
async fn assemble_step_request(
    ctx: &Context,
    layers: &[std::sync::Arc<dyn ContextLayer>],
    step_instructions: Option<&str>,
    input: &Value,
    step_input: Option<Item>,
    token_budget: Option<usize>,
    history_end: Option<usize>,
) -> (Option<String>, Vec<Item>, Vec<LayerUsage>) {
    let mut history = ctx.items();
    if let Some(end) = history_end {
        history.truncate(end);
    }
    let (instructions, mut conversation) = assemble(step_instructions, history);
    if !layers.is_empty() {
        conversation = project_history(layers, conversation);
    }
    conversation.extend(step_input);
    let mut layer_usage: Vec<LayerUsage> = Vec::new();
    if !layers.is_empty() || token_budget.is_some() {
        let query = query_text(input, &conversation);
        let recalled = recall(ctx, layers, &query).await;
        (conversation, layer_usage) = place_recall(conversation, recalled, token_budget);
    }
    (instructions, conversation, layer_usage)
}

/// Appends applied steers (role and content parts as sent) to the log and the conversation, and emits
/// `steer_applied` (a session event: not subject to the step's `emit` policy).
fn apply_steers(
    ctx: &Context,
    conversation: &mut Vec<Item>,
    applied: Applied,
    point: SteerPoint,
    round: u32,
) {
    if applied.is_empty() {
        return;
    }
    for item in applied.items {
        ctx.append_item(item.clone());
        conversation.push(item);
    }
    ctx.emit(FrameworkEvent::SteerApplied {
        message_ids: applied.message_ids,
        point,
        round,
    });
}

/// Splits the log into instructions (the step's, then the texts of system items, blank-line separated)
/// and the conversation sent as input.
fn assemble(step_instructions: Option<&str>, log: Vec<Item>) -> (Option<String>, Vec<Item>) {
    let mut instructions = step_instructions.map(str::to_owned);
    let mut conversation = Vec::with_capacity(log.len() + 4);
    for item in log {
        if item.role() == Some(Role::System) {
            let text = item.text().unwrap_or_default();
            match &mut instructions {
                Some(existing) => {
                    existing.push_str("\n\n");
                    existing.push_str(&text);
                }
                None => instructions = Some(text),
            }
        } else {
            conversation.push(item);
        }
    }
    (instructions, conversation)
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

/// The recall query: the step's input text, else the newest user message's text.
fn query_text(input: &Value, conversation: &[Item]) -> String {
    match input {
        Value::String(text) if !text.is_empty() => text.clone(),
        _ => conversation
            .iter()
            .rev()
            .find(|item| item.role() == Some(Role::User))
            .and_then(Item::text)
            .unwrap_or_default(),
    }
}

/// What one layer recalled, with what the budget needs to know.
struct Recalled {
    band: Band,
    min_tokens: usize,
    output: RecallLayerOutput,
}

/// Calls `recall` on each layer in slot order; a failing layer is logged and skipped.
async fn recall(
    ctx: &Context,
    layers: &[std::sync::Arc<dyn ContextLayer>],
    query: &str,
) -> Vec<Recalled> {
    let mut recalled = Vec::new();
    for layer in layers {
        match layer.recall(LayerCtx::new(ctx, layer.id()), query).await {
            Ok(Some(output)) => recalled.push(Recalled {
                band: layer.band(),
                min_tokens: layer.min_tokens(),
                output,
            }),
            Ok(None) => {}
            Err(error) => tracing::warn!(layer = layer.id(), %error, "layer recall failed"),
        }
    }
    recalled
}

/// Places recalled items before or after the history (cutting both to the budget, when one is
/// set) and reports what each layer contributed.
fn place_recall(
    history: Vec<Item>,
    mut recalled: Vec<Recalled>,
    budget: Option<usize>,
) -> (Vec<Item>, Vec<LayerUsage>) {
    let history = match budget {
        None => history,
        Some(total) => {
            let wants: Vec<(usize, usize)> = recalled
                .iter()
                .map(|entry| (entry.min_tokens, entry.output.token_count))
                .collect();
            let history_wanted = history.iter().map(estimate_tokens).sum();
            let plan = allocate_budget(total, &wants, history_wanted);
            for (entry, tokens) in recalled.iter_mut().zip(plan.layer_tokens) {
                if entry.output.token_count > tokens {
                    entry.output.items = fit_items(&entry.output.items, tokens);
                    entry.output.token_count = entry.output.items.iter().map(estimate_tokens).sum();
                }
            }
            fit_history(&history, plan.history_tokens)
        }
    };
    let usage = recalled
        .iter()
        .map(|entry| LayerUsage {
            layer_id: entry.output.layer_id.clone(),
            token_count: entry.output.token_count,
        })
        .collect();
    let mut conversation = Vec::with_capacity(history.len() + recalled.len());
    let mut after = Vec::new();
    for entry in recalled {
        match entry.band {
            Band::AfterHistory => after.extend(entry.output.items),
            _ => conversation.extend(entry.output.items),
        }
    }
    conversation.extend(history);
    conversation.extend(after);
    (conversation, usage)
}

/// Calls `store` on each layer in slot order with the items the step appended; failures are logged.
async fn store(ctx: &Context, layers: &[std::sync::Arc<dyn ContextLayer>], step_start: usize) {
    let new_items = ctx.items_since(step_start);
    for layer in layers {
        if let Err(error) = layer
            .store(LayerCtx::new(ctx, layer.id()), &new_items)
            .await
        {
            tracing::warn!(layer = layer.id(), %error, "layer store failed");
        }
    }
}
