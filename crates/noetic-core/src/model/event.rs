//! Streamed response events in the OpenResponses format.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::item::Item;
use crate::usage::TokenUsage;

/// One streamed event of a model response.
///
/// The variants cover the events the framework acts on; every other event type (content-part
/// bookkeeping, hosted-tool progress, vendor extensions) is passed through as [`ResponseEvent::Other`] and
/// never fails a round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ResponseEvent {
    /// `response.created` / `response.in_progress`: the response exists.
    Created {
        /// The response id (`resp_…`, or OpenRouter's `gen-…`).
        response_id: Option<String>,
        /// The model that serves the response.
        model: Option<String>,
    },
    /// `response.output_item.added`: an output item opened.
    OutputItemAdded {
        /// Position of the item in the response's output.
        output_index: u32,
        /// The item as opened (status `in_progress`, possibly empty).
        item: Item,
    },
    /// `response.output_text.delta`: more text for a message part.
    OutputTextDelta {
        /// The item's position.
        output_index: u32,
        /// The content part's position.
        content_index: u32,
        /// The new text.
        delta: String,
    },
    /// Reasoning text or reasoning summary text arrived.
    ReasoningDelta {
        /// Raw reasoning or summary.
        kind: ReasoningKind,
        /// The item's position.
        output_index: u32,
        /// The part's position (`content_index` or `summary_index`).
        part_index: u32,
        /// The new text.
        delta: String,
    },
    /// `response.function_call_arguments.delta`: more argument text for a function call.
    FunctionCallArgumentsDelta {
        /// The item's position.
        output_index: u32,
        /// The new argument text.
        delta: String,
    },
    /// `response.function_call_arguments.done`: a function call's complete arguments.
    FunctionCallArgumentsDone {
        /// The item's position.
        output_index: u32,
        /// The complete argument JSON text.
        arguments: String,
    },
    /// `response.output_item.done`: an output item is complete.
    OutputItemDone {
        /// The item's position.
        output_index: u32,
        /// The complete item.
        item: Item,
    },
    /// `response.completed`, `response.incomplete` or `response.failed`: the terminal event.
    Finished(Box<ResponseSnapshot>),
    /// `error`: the provider reported an error inside the stream.
    Error {
        /// The provider's error code, when given.
        code: Option<String>,
        /// The provider's message.
        message: String,
    },
    /// Any other event, passed through untouched.
    Other {
        /// The event's `type`.
        event_type: String,
        /// The whole event object.
        data: Value,
    },
}

/// Which reasoning text a [`ResponseEvent::ReasoningDelta`] carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ReasoningKind {
    /// Raw reasoning text (`response.reasoning_text.delta`).
    Text,
    /// A reasoning summary (`response.reasoning_summary_text.delta`).
    Summary,
}

pub use crate::error::ResponseStatus;

/// The final snapshot carried by the terminal event.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ResponseSnapshot {
    /// The response id.
    pub id: Option<String>,
    /// The model that served it.
    pub model: Option<String>,
    /// The terminal status (`None` means `completed`).
    pub status: Option<ResponseStatus>,
    /// The final output items (may be empty; then the items from `output_item.done` events stand).
    pub output: Vec<Item>,
    /// Token usage, when reported.
    pub usage: Option<TokenUsage>,
    /// Cost in USD, when reported (OpenRouter's `usage.cost`).
    pub cost: Option<f64>,
    /// The error message of a failed response.
    pub error: Option<String>,
    /// The reason of an incomplete response (`max_output_tokens`, …).
    pub incomplete_reason: Option<String>,
}

impl ResponseEvent {
    /// The event's `type` on the wire.
    pub fn event_type(&self) -> &str {
        match self {
            ResponseEvent::Created { .. } => "response.created",
            ResponseEvent::OutputItemAdded { .. } => "response.output_item.added",
            ResponseEvent::OutputTextDelta { .. } => "response.output_text.delta",
            ResponseEvent::ReasoningDelta {
                kind: ReasoningKind::Text,
                ..
            } => "response.reasoning_text.delta",
            ResponseEvent::ReasoningDelta {
                kind: ReasoningKind::Summary,
                ..
            } => "response.reasoning_summary_text.delta",
            ResponseEvent::FunctionCallArgumentsDelta { .. } => {
                "response.function_call_arguments.delta"
            }
            ResponseEvent::FunctionCallArgumentsDone { .. } => {
                "response.function_call_arguments.done"
            }
            ResponseEvent::OutputItemDone { .. } => "response.output_item.done",
            ResponseEvent::Finished(snapshot) => match snapshot.status {
                None | Some(ResponseStatus::Completed) => "response.completed",
                Some(ResponseStatus::Incomplete) => "response.incomplete",
                Some(ResponseStatus::Failed) => "response.failed",
            },
            ResponseEvent::Error { .. } => "error",
            ResponseEvent::Other { event_type, .. } => event_type,
        }
    }

    /// The event as the OpenResponses wire object (`{"type": …, …}`), for `source: "sdk"` stream events.
    pub fn to_wire_json(&self) -> Value {
        use serde_json::json;
        let kind = self.event_type();
        match self {
            ResponseEvent::Created { response_id, model } => {
                json!({"type": kind, "response": {"id": response_id, "model": model, "status": "in_progress"}})
            }
            ResponseEvent::OutputItemAdded { output_index, item }
            | ResponseEvent::OutputItemDone { output_index, item } => {
                json!({"type": kind, "output_index": output_index, "item": item})
            }
            ResponseEvent::OutputTextDelta {
                output_index,
                content_index,
                delta,
            } => {
                json!({"type": kind, "output_index": output_index, "content_index": content_index, "delta": delta})
            }
            ResponseEvent::ReasoningDelta {
                kind: ReasoningKind::Summary,
                output_index,
                part_index,
                delta,
            } => {
                json!({"type": kind, "output_index": output_index, "summary_index": part_index, "delta": delta})
            }
            ResponseEvent::ReasoningDelta {
                output_index,
                part_index,
                delta,
                ..
            } => {
                json!({"type": kind, "output_index": output_index, "content_index": part_index, "delta": delta})
            }
            ResponseEvent::FunctionCallArgumentsDelta {
                output_index,
                delta,
            } => {
                json!({"type": kind, "output_index": output_index, "delta": delta})
            }
            ResponseEvent::FunctionCallArgumentsDone {
                output_index,
                arguments,
            } => {
                json!({"type": kind, "output_index": output_index, "arguments": arguments})
            }
            ResponseEvent::Finished(snapshot) => {
                let status = match snapshot.status {
                    None | Some(ResponseStatus::Completed) => "completed",
                    Some(ResponseStatus::Incomplete) => "incomplete",
                    Some(ResponseStatus::Failed) => "failed",
                };
                let usage = snapshot.usage.map(|usage| {
                    json!({
                        "input_tokens": usage.input_tokens,
                        "output_tokens": usage.output_tokens,
                        "total_tokens": usage.total(),
                        "input_tokens_details": {"cached_tokens": usage.cached_tokens},
                        "output_tokens_details": {"reasoning_tokens": usage.reasoning_tokens},
                        "cost": snapshot.cost,
                    })
                });
                json!({"type": kind, "response": {
                    "id": snapshot.id, "model": snapshot.model, "status": status, "output": snapshot.output,
                    "usage": usage, "error": snapshot.error.as_ref().map(|message| json!({"message": message})),
                    "incomplete_details": snapshot.incomplete_reason.as_ref().map(|reason| json!({"reason": reason})),
                }})
            }
            ResponseEvent::Error { code, message } => {
                json!({"type": kind, "error": {"code": code, "message": message}})
            }
            ResponseEvent::Other { data, .. } => data.clone(),
        }
    }

    /// A `response.completed` event with the given usage and no snapshot output.
    pub fn completed(usage: Option<TokenUsage>) -> Self {
        ResponseEvent::Finished(Box::new(ResponseSnapshot {
            status: Some(ResponseStatus::Completed),
            usage,
            ..ResponseSnapshot::default()
        }))
    }
}
