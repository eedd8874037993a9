//! The output items a Chat Completions stream has open, and how they close into complete
//! OpenResponses items.

use noetic_core::ResponseEvent;
use noetic_core::item::{ContentPart, FunctionCallItem, Item, MessageItem, ReasoningItem, Role};
use serde_json::{Map, Value};

/// The items open while the stream runs: one kind at a time.
#[derive(Debug, Default)]
pub(super) enum Open {
    #[default]
    Nothing,
    Message(OpenMessage),
    Reasoning(OpenReasoning),
    /// Parallel calls, in output order.
    Calls(Vec<OpenCall>),
}

#[derive(Debug)]
pub(super) struct OpenMessage {
    pub(super) output_index: u32,
    pub(super) id: String,
    pub(super) text: String,
    pub(super) refusal: String,
}

#[derive(Debug)]
pub(super) struct OpenReasoning {
    pub(super) output_index: u32,
    pub(super) id: String,
    pub(super) text: String,
    /// OpenRouter's `reasoning_details` entries, merged by `index`.
    pub(super) details: Vec<Map<String, Value>>,
}

#[derive(Debug)]
pub(super) struct OpenCall {
    /// `tool_calls[].index`, which later fragments name.
    pub(super) wire_index: Option<u32>,
    pub(super) output_index: u32,
    pub(super) call_id: String,
    pub(super) name: String,
    pub(super) arguments: String,
}

impl Open {
    /// Closes the open items in output order, marking them `status: incomplete` when cut off.
    pub(super) fn close(self, incomplete: bool, out: &mut Vec<ResponseEvent>) {
        match self {
            Open::Nothing => {}
            Open::Message(message) => {
                let mut content = Vec::with_capacity(1);
                if !message.text.is_empty() || message.refusal.is_empty() {
                    content.push(ContentPart::OutputText {
                        text: message.text,
                        extra: Map::new(),
                    });
                }
                if !message.refusal.is_empty() {
                    content.push(ContentPart::Refusal {
                        refusal: message.refusal,
                    });
                }
                out.push(ResponseEvent::OutputItemDone {
                    output_index: message.output_index,
                    item: Item::Message(MessageItem {
                        id: Some(message.id),
                        role: Role::Assistant,
                        content,
                        cache_breakpoint: false,
                        extra: status_extra(incomplete),
                    }),
                });
            }
            Open::Reasoning(reasoning) => {
                let mut extra = status_extra(incomplete);
                if !reasoning.details.is_empty() {
                    let details = reasoning.details.into_iter().map(Value::Object).collect();
                    extra.insert("reasoning_details".to_owned(), Value::Array(details));
                }
                let content = (!reasoning.text.is_empty()).then(|| {
                    let mut part = Map::new();
                    part.insert("type".to_owned(), Value::from("reasoning_text"));
                    part.insert("text".to_owned(), Value::String(reasoning.text));
                    vec![Value::Object(part)]
                });
                out.push(ResponseEvent::OutputItemDone {
                    output_index: reasoning.output_index,
                    item: Item::Reasoning(ReasoningItem {
                        id: Some(reasoning.id),
                        summary: Vec::new(),
                        content,
                        encrypted_content: None,
                        extra,
                    }),
                });
            }
            Open::Calls(calls) => {
                for call in calls {
                    out.push(ResponseEvent::FunctionCallArgumentsDone {
                        output_index: call.output_index,
                        arguments: call.arguments.clone(),
                    });
                    out.push(ResponseEvent::OutputItemDone {
                        output_index: call.output_index,
                        item: Item::FunctionCall(FunctionCallItem {
                            id: Some(format!("fc_{}", call.call_id)),
                            call_id: call.call_id,
                            name: call.name,
                            arguments: call.arguments,
                            extra: status_extra(incomplete),
                        }),
                    });
                }
            }
        }
    }
}

/// The open call a fragment continues: by `index` (unless it names another call id), else by call id,
/// else the last one.
pub(super) fn find_call(
    calls: &[OpenCall],
    wire_index: Option<u32>,
    call_id: Option<&str>,
) -> Option<usize> {
    let same_id = |call: &OpenCall| call_id.is_none_or(|id| call.call_id == id);
    match wire_index {
        Some(index) => calls
            .iter()
            .position(|call| call.wire_index == Some(index) && same_id(call)),
        None if call_id.is_some() => calls.iter().position(same_id),
        None => calls.len().checked_sub(1),
    }
}

/// Folds one `reasoning_details` entry into the list: an entry with the `index` (and `type`) of an
/// earlier one continues it (texts concatenate; other fields take the latest non-null value, which is
/// how the signature arrives), any other entry is new.
pub(super) fn merge_detail(details: &mut Vec<Map<String, Value>>, detail: Map<String, Value>) {
    let index = detail.get("index").and_then(Value::as_u64);
    let kind = detail.get("type").and_then(Value::as_str);
    let position = index.and_then(|index| {
        details.iter().rposition(|entry| {
            entry.get("index").and_then(Value::as_u64) == Some(index)
                && (kind.is_none() || entry.get("type").and_then(Value::as_str) == kind)
        })
    });
    let Some(entry) = position.and_then(|position| details.get_mut(position)) else {
        details.push(detail);
        return;
    };
    for (key, value) in detail {
        match (entry.get_mut(&key), value) {
            (Some(_), Value::Null) => {}
            (Some(Value::String(existing)), Value::String(more))
                if key == "text" || key == "summary" =>
            {
                existing.push_str(&more);
            }
            (_, value) => {
                entry.insert(key, value);
            }
        }
    }
}

/// The reasoning text inside `reasoning_details` entries, for servers that send no `reasoning` string.
pub(super) fn details_text(details: &[Map<String, Value>]) -> String {
    details
        .iter()
        .filter_map(|entry| {
            entry
                .get("text")
                .or_else(|| entry.get("summary"))
                .and_then(Value::as_str)
        })
        .collect()
}

pub(super) fn status_extra(incomplete: bool) -> Map<String, Value> {
    let mut extra = Map::new();
    if incomplete {
        extra.insert("status".to_owned(), Value::from("incomplete"));
    }
    extra
}
