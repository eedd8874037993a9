//! A `call_model` step's first request: instructions and conversation from the context's log, the
//! layers' projection and recall within the token budget, and the step's input; and handing the
//! step's new items to the layers' `store` afterwards.

use serde_json::Value;

use crate::context::Context;
use crate::item::{Item, Role};
use crate::layer::{
    Band, ContextLayer, LayerCtx, LayerUsage, RecallLayerOutput, allocate_budget, estimate_tokens,
    fit_history, fit_items, project_history,
};
use crate::step::Origin;

/// What the step does with its input (see [`Origin`]): a root string input is appended to the log as
/// a user message; a forwarded string that is not already the newest assistant message of the log is
/// returned, to be sent with the step's requests without being stored; anything else is neither.
pub(super) fn step_input(ctx: &Context, origin: &Origin, input: &Value) -> Option<Item> {
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
pub(super) async fn assemble_step_request(
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
pub(super) async fn store(
    ctx: &Context,
    layers: &[std::sync::Arc<dyn ContextLayer>],
    step_start: usize,
) {
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
