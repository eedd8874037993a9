//! [`ToolCallsLayer`]: remembers the calls of tracked tools.

use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::Result;
use crate::item::Item;
use crate::layer::{Band, ContextLayer, LayerCtx, LayerScope, RecallLayerOutput};
use crate::tool::wire_name;

/// The state key the call records are stored under.
const CALLS_KEY: &str = "calls";
/// The longest output kept per call, in characters.
const MAX_OUTPUT_CHARS: usize = 200;

/// Per-tool state declared by tools: records each call of a tracked tool (its arguments and output)
/// and recalls a short summary before the history, as one developer message:
///
/// ```text
/// Earlier calls:
/// - search({"query":"rust"}) → 3 results
/// ```
///
/// Calls are recorded in `store` from the items a `call_model` step appended (a call is recorded once
/// its output is there), in [`LayerScope::Execution`] under `layer/tool_calls/{context id}/calls`;
/// the newest [`ToolCallsLayer::max_entries`] calls are kept (default 20), outputs cut to 200
/// characters.
///
/// # Examples
/// ```
/// use noetic_core::layer::builtin::ToolCallsLayer;
/// let layer = ToolCallsLayer::new().track("search").track("fetch");
/// assert_eq!(layer.tracked(), ["search", "fetch"]);
/// ```
#[derive(Debug, Clone)]
pub struct ToolCallsLayer {
    tracked: Vec<String>,
    max_entries: usize,
}

/// One recorded call.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct CallRecord {
    name: String,
    arguments: String,
    output: String,
}

impl Default for ToolCallsLayer {
    fn default() -> Self {
        Self::new()
    }
}

impl ToolCallsLayer {
    /// A layer tracking no tool yet (id `tool_calls`, slot 110).
    pub fn new() -> Self {
        ToolCallsLayer {
            tracked: Vec::new(),
            max_entries: 20,
        }
    }

    /// Records the calls of `tool_name` too.
    pub fn track(mut self, tool_name: impl Into<String>) -> Self {
        self.tracked.push(tool_name.into());
        self
    }

    /// Keeps at most `max_entries` calls (the newest; at least 1).
    pub fn max_entries(mut self, max_entries: usize) -> Self {
        self.max_entries = max_entries.max(1);
        self
    }

    /// The tracked tools' names.
    pub fn tracked(&self) -> &[String] {
        &self.tracked
    }

    /// The tracked name a call's wire name belongs to.
    fn tracked_name(&self, called: &str) -> Option<&str> {
        self.tracked
            .iter()
            .find(|name| name.as_str() == called || wire_name(name) == called)
            .map(String::as_str)
    }
}

fn output_text(output: &Value) -> String {
    let text = match output {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    match text.char_indices().nth(MAX_OUTPUT_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

impl ContextLayer for ToolCallsLayer {
    fn id(&self) -> &str {
        "tool_calls"
    }

    fn slot(&self) -> i32 {
        110
    }

    fn band(&self) -> Band {
        Band::BeforeHistory
    }

    fn store<'a>(&'a self, ctx: LayerCtx<'a>, new_items: &'a [Item]) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let mut fresh = Vec::new();
            for call in new_items.iter().filter_map(Item::as_function_call) {
                let Some(name) = self.tracked_name(&call.name) else {
                    continue;
                };
                let output = new_items.iter().find_map(|item| match item {
                    Item::FunctionCallOutput(output) if output.call_id == call.call_id => {
                        Some(output_text(&output.output))
                    }
                    _ => None,
                });
                if let Some(output) = output {
                    fresh.push(CallRecord {
                        name: name.to_owned(),
                        arguments: call.arguments.clone(),
                        output,
                    });
                }
            }
            if fresh.is_empty() {
                return Ok(());
            }
            let mut calls: Vec<CallRecord> = ctx
                .state_get(LayerScope::Execution, CALLS_KEY)
                .await?
                .unwrap_or_default();
            calls.extend(fresh);
            let excess = calls.len().saturating_sub(self.max_entries);
            calls.drain(..excess);
            ctx.state_set(LayerScope::Execution, CALLS_KEY, &calls)
                .await
        })
    }

    fn recall<'a>(
        &'a self,
        ctx: LayerCtx<'a>,
        _query: &'a str,
    ) -> BoxFuture<'a, Result<Option<RecallLayerOutput>>> {
        Box::pin(async move {
            let calls: Vec<CallRecord> = ctx
                .state_get(LayerScope::Execution, CALLS_KEY)
                .await?
                .unwrap_or_default();
            if calls.is_empty() {
                return Ok(None);
            }
            let mut text = String::from("Earlier calls:");
            for call in &calls {
                text.push_str(&format!(
                    "\n- {}({}) → {}",
                    call.name, call.arguments, call.output
                ));
            }
            Ok(Some(RecallLayerOutput::text("tool_calls", text)))
        })
    }
}
