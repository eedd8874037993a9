//! What an idle session keeps of its last successful turn.

use serde_json::Value;

use super::api::HarnessResponse;
use crate::item::Item;

/// The last successful turn's response as an idle session keeps it: without the copy of the history
/// (`items`) while the history is still the turn's, and without the copy of the answer (`text`) when
/// the output is that text.
pub(super) struct LastTurn {
    response: HarnessResponse,
    /// Whether `response.items` is the session's current history (not stored twice).
    items_are_history: bool,
}

impl LastTurn {
    /// Keeps `response` (built with empty `items`), dropping its text when the output carries it.
    pub(super) fn keep(mut response: HarnessResponse) -> Self {
        if matches!(&response.output, Value::String(text) if *text == response.text) {
            response.text = String::new();
        }
        LastTurn {
            response,
            items_are_history: true,
        }
    }

    /// The history is about to be replaced: keep the turn's own items.
    pub(super) fn detach(&mut self, history: Vec<Item>) {
        if self.items_are_history {
            self.response.items = history;
            self.items_are_history = false;
        }
    }

    /// The response as `agent_response` returns it.
    pub(super) fn response(&self, history: &[Item]) -> HarnessResponse {
        let mut response = self.response.clone();
        if self.items_are_history {
            response.items = history.to_vec();
        }
        if let Value::String(text) = &response.output {
            response.text.clone_from(text);
        }
        response
    }
}
