//! [`HistoryLayer`]: a window over the conversation history.

use std::collections::HashSet;

use crate::item::Item;
use crate::layer::ContextLayer;

/// Limits the history a `call_model` step sends to its newest `n` items, through
/// [`ContextLayer::project_history`].
///
/// A `function_call_output` whose `function_call` fell out of the window is dropped with it, so a call
/// is never separated from its output (the same rule as [`fit_history`](crate::layer::fit_history));
/// the window may therefore hold fewer than `n` items. The item log itself is never cut, and system
/// items (instructions) are not part of the history.
///
/// # Examples
/// ```
/// use noetic_core::layer::builtin::HistoryLayer;
/// let layer = HistoryLayer::window(20);
/// assert_eq!(layer.max_items(), 20);
/// ```
#[derive(Debug, Clone)]
pub struct HistoryLayer {
    max_items: usize,
}

impl HistoryLayer {
    /// A window of the newest `max_items` items (at least 1).
    pub fn window(max_items: usize) -> Self {
        HistoryLayer {
            max_items: max_items.max(1),
        }
    }

    /// The window's size.
    pub fn max_items(&self) -> usize {
        self.max_items
    }
}

impl ContextLayer for HistoryLayer {
    fn id(&self) -> &str {
        "history"
    }

    fn slot(&self) -> i32 {
        275
    }

    fn project_history(&self, items: &[Item]) -> Option<Vec<Item>> {
        if items.len() <= self.max_items {
            return None;
        }
        let kept = &items[items.len() - self.max_items..];
        let calls: HashSet<&str> = kept
            .iter()
            .filter_map(Item::as_function_call)
            .map(|call| call.call_id.as_str())
            .collect();
        Some(
            kept.iter()
                .filter(|item| match item {
                    Item::FunctionCallOutput(output) => calls.contains(output.call_id.as_str()),
                    _ => true,
                })
                .cloned()
                .collect(),
        )
    }
}
