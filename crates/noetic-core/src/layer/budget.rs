//! Token budgets: how a `call_model` step's `token_budget` is shared between layers and the history.
//!
//! Pure functions, so the numbers are testable without a model. Tokens are estimated as the item's
//! JSON length / 4, rounded up.

use std::collections::HashSet;

use crate::item::Item;

/// How a budget was shared: per layer (in the order given) and for the history.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct BudgetPlan {
    /// The tokens each layer may use, in the order the layers were given.
    pub layer_tokens: Vec<usize>,
    /// The tokens the history may use.
    pub history_tokens: usize,
}

/// The estimated tokens of an item: its JSON length / 4, rounded up.
pub fn estimate_tokens(item: &Item) -> usize {
    serde_json::to_string(item)
        .map(|json| json.len().div_ceil(4))
        .unwrap_or(0)
}

/// Shares `total` tokens between layers, given as `(min_tokens, wanted_tokens)` in slot order, and a
/// history that wants `history_wanted`.
///
/// 1. Each layer first gets its minimum (never more than it wants). If the minimums exceed `total`, they
///    are scaled down proportionally (floored) and the history gets nothing.
/// 2. What remains is shared: the layers' extra wants are served in order from a pool of half the
///    remainder, or more when the history wants less than the other half; the history gets the rest.
///
/// # Examples
/// ```
/// use noetic_core::layer::allocate_budget;
/// let plan = allocate_budget(1000, &[(100, 300), (0, 1000)], 400);
/// assert_eq!(plan.layer_tokens, vec![300, 300]);
/// assert_eq!(plan.history_tokens, 400);
/// ```
pub fn allocate_budget(
    total: usize,
    layers: &[(usize, usize)],
    history_wanted: usize,
) -> BudgetPlan {
    let grants: Vec<usize> = layers
        .iter()
        .map(|&(min, wanted)| min.min(wanted))
        .collect();
    let granted: usize = grants.iter().sum();
    if granted > total {
        return BudgetPlan {
            layer_tokens: grants
                .iter()
                .map(|grant| (*grant as u128 * total as u128 / granted as u128) as usize)
                .collect(),
            history_tokens: 0,
        };
    }
    let remaining = total - granted;
    let pool_size = (remaining / 2).max(remaining.saturating_sub(history_wanted));
    let mut pool = pool_size;
    let mut layer_tokens = Vec::with_capacity(layers.len());
    for (&(_, wanted), grant) in layers.iter().zip(grants) {
        let extra = wanted.saturating_sub(grant).min(pool);
        pool -= extra;
        layer_tokens.push(grant + extra);
    }
    let used: usize = layer_tokens.iter().sum();
    BudgetPlan {
        layer_tokens,
        history_tokens: total - used,
    }
}

/// The newest items of `history` that fit in `budget` tokens, in order, with no
/// `function_call_output` whose `function_call` was cut (a call is never separated from its output).
///
/// # Examples
/// ```
/// use noetic_core::{Item, layer::{estimate_tokens, fit_history}};
/// let history = vec![Item::user_text("old"), Item::user_text("new")];
/// let kept = fit_history(&history, estimate_tokens(&history[1]));
/// assert_eq!(kept, vec![Item::user_text("new")]);
/// ```
pub fn fit_history(history: &[Item], budget: usize) -> Vec<Item> {
    let mut used = 0;
    let mut start = history.len();
    while start > 0 {
        let cost = estimate_tokens(&history[start - 1]);
        if used + cost > budget {
            break;
        }
        used += cost;
        start -= 1;
    }
    let kept = &history[start..];
    let calls: HashSet<&str> = kept
        .iter()
        .filter_map(Item::as_function_call)
        .map(|call| call.call_id.as_str())
        .collect();
    kept.iter()
        .filter(|item| match item {
            Item::FunctionCallOutput(output) => calls.contains(output.call_id.as_str()),
            _ => true,
        })
        .cloned()
        .collect()
}

/// The items of a layer's output that fit in `budget` tokens: in order, each item that does not fit
/// skipped on its own.
pub fn fit_items(items: &[Item], budget: usize) -> Vec<Item> {
    let mut used = 0;
    items
        .iter()
        .filter(|item| {
            let cost = estimate_tokens(item);
            let fits = used + cost <= budget;
            if fits {
                used += cost;
            }
            fits
        })
        .cloned()
        .collect()
}
