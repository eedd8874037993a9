//! The response side of OpenResponses: stream events in (one JSON event per SSE event), and whole JSON
//! responses from servers that ignore `stream: true`.

use std::borrow::Cow;

use noetic_core::item::Item;
use noetic_core::model::{ReasoningKind, ResponseSnapshot, ResponseStatus};
use noetic_core::{ResponseEvent, TokenUsage};
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::decode::{WireDecoder, code_text};
use crate::error::ProviderError;

/// Decodes OpenResponses events: one JSON event per SSE event.
pub(crate) struct ResponsesDecoder;

impl WireDecoder for ResponsesDecoder {
    fn decode(&mut self, data: &str, out: &mut Vec<ResponseEvent>) -> Result<(), ProviderError> {
        out.extend(parse_event(data)?);
        Ok(())
    }

    fn finish(&mut self, _out: &mut Vec<ResponseEvent>) -> Result<(), ProviderError> {
        Ok(())
    }
}

/// The fields of a stream event that the framework reads, borrowed from the event's JSON.
#[derive(Deserialize)]
struct Header<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default)]
    output_index: Option<u32>,
    #[serde(default)]
    content_index: Option<u32>,
    #[serde(default)]
    summary_index: Option<u32>,
    #[serde(default, borrow)]
    delta: Option<Cow<'a, str>>,
    #[serde(default)]
    arguments: Option<String>,
    #[serde(default, borrow)]
    item: Option<&'a RawValue>,
    #[serde(default, borrow)]
    response: Option<&'a RawValue>,
    #[serde(default, borrow)]
    error: Option<&'a RawValue>,
    #[serde(default)]
    code: Option<Value>,
    #[serde(default)]
    message: Option<String>,
}

/// The event types the framework interprets; every other type is passed through.
const INTERPRETED: &[&str] = &[
    "response.created",
    "response.output_item.added",
    "response.output_text.delta",
    "response.reasoning_text.delta",
    "response.reasoning.delta",
    "response.reasoning_summary_text.delta",
    "response.function_call_arguments.delta",
    "response.function_call_arguments.done",
    "response.output_item.done",
    "response.completed",
    "response.incomplete",
    "response.failed",
    "error",
];

/// Parses one event's data. `Ok(None)` for the `[DONE]` terminator.
///
/// # Errors
/// [`ProviderError::Event`] when the data is not JSON, or when an interpreted event lacks a field it
/// needs; unknown event types never fail.
pub(crate) fn parse_event(data: &str) -> Result<Option<ResponseEvent>, ProviderError> {
    if data == "[DONE]" {
        return Ok(None);
    }
    let header: Header<'_> = match serde_json::from_str(data) {
        Ok(header) => header,
        Err(error) => return other_event(data, error),
    };
    let kind = header.kind.as_ref();
    let need_index = || {
        let index = header
            .output_index
            .ok_or_else(|| ProviderError::event(kind, "missing `output_index`", data))?;
        bounded(kind, "output_index", index, data)
    };
    let part_index =
        |field: &'static str, index: Option<u32>| bounded(kind, field, index.unwrap_or(0), data);
    let need_delta = || {
        header
            .delta
            .as_deref()
            .map(str::to_owned)
            .ok_or_else(|| ProviderError::event(kind, "missing `delta`", data))
    };
    let need_item = || -> Result<Item, ProviderError> {
        let raw = header
            .item
            .ok_or_else(|| ProviderError::event(kind, "missing `item`", data))?;
        serde_json::from_str(raw.get())
            .map_err(|error| ProviderError::event(kind, format!("bad `item`: {error}"), data))
    };
    let event = match kind {
        "response.created" => {
            let (response_id, model) = match header.response {
                Some(raw) => {
                    let head: ResponseHead = serde_json::from_str(raw.get()).map_err(|error| {
                        ProviderError::event(kind, format!("bad `response`: {error}"), data)
                    })?;
                    (head.id, head.model)
                }
                None => (None, None),
            };
            ResponseEvent::Created { response_id, model }
        }
        "response.output_item.added" => ResponseEvent::OutputItemAdded {
            output_index: need_index()?,
            item: need_item()?,
        },
        "response.output_item.done" => ResponseEvent::OutputItemDone {
            output_index: need_index()?,
            item: need_item()?,
        },
        "response.output_text.delta" => ResponseEvent::OutputTextDelta {
            output_index: need_index()?,
            content_index: part_index("content_index", header.content_index)?,
            delta: need_delta()?,
        },
        "response.reasoning_text.delta" | "response.reasoning.delta" => {
            ResponseEvent::ReasoningDelta {
                kind: ReasoningKind::Text,
                output_index: need_index()?,
                part_index: part_index("content_index", header.content_index)?,
                delta: need_delta()?,
            }
        }
        "response.reasoning_summary_text.delta" => ResponseEvent::ReasoningDelta {
            kind: ReasoningKind::Summary,
            output_index: need_index()?,
            part_index: part_index("summary_index", header.summary_index)?,
            delta: need_delta()?,
        },
        "response.function_call_arguments.delta" => ResponseEvent::FunctionCallArgumentsDelta {
            output_index: need_index()?,
            delta: need_delta()?,
        },
        "response.function_call_arguments.done" => ResponseEvent::FunctionCallArgumentsDone {
            output_index: need_index()?,
            arguments: header
                .arguments
                .ok_or_else(|| ProviderError::event(kind, "missing `arguments`", data))?,
        },
        "response.completed" | "response.incomplete" | "response.failed" => {
            let status = match kind {
                "response.completed" => ResponseStatus::Completed,
                "response.incomplete" => ResponseStatus::Incomplete,
                _ => ResponseStatus::Failed,
            };
            let raw = header
                .response
                .ok_or_else(|| ProviderError::event(kind, "missing `response`", data))?;
            let wire: WireResponse = serde_json::from_str(raw.get()).map_err(|error| {
                ProviderError::event(kind, format!("bad `response`: {error}"), data)
            })?;
            ResponseEvent::Finished(Box::new(wire.into_snapshot(Some(status))))
        }
        "error" => {
            let (code, message) = match header.error {
                Some(raw) => {
                    let error: WireError = serde_json::from_str(raw.get()).map_err(|error| {
                        ProviderError::event(kind, format!("bad `error`: {error}"), data)
                    })?;
                    (
                        error.code.and_then(code_text),
                        error.message.unwrap_or_default(),
                    )
                }
                None => (
                    header.code.and_then(code_text),
                    header.message.unwrap_or_default(),
                ),
            };
            ResponseEvent::Error { code, message }
        }
        _ => ResponseEvent::Other {
            event_type: kind.to_owned(),
            data: parse_value(kind, data)?,
        },
    };
    Ok(Some(event))
}

/// The largest output, content or summary index accepted. Indexes address items and parts in order
/// (consumers keep a slot per index), so a corrupt one in the billions must not become an allocation.
pub(crate) const MAX_INDEX: u32 = 1 << 16;

fn bounded(kind: &str, field: &str, index: u32, data: &str) -> Result<u32, ProviderError> {
    if index > MAX_INDEX {
        return Err(ProviderError::event(
            kind,
            format!("`{field}` {index} is past the {MAX_INDEX} limit"),
            data,
        ));
    }
    Ok(index)
}

/// An event whose fields did not fit the header: fine for a type we pass through, an error for one we
/// interpret.
fn other_event(
    data: &str,
    header_error: serde_json::Error,
) -> Result<Option<ResponseEvent>, ProviderError> {
    let value: Value =
        serde_json::from_str(data).map_err(|error| ProviderError::event("unknown", error, data))?;
    let kind = value
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("unknown")
        .to_owned();
    if INTERPRETED.contains(&kind.as_str()) || kind == "unknown" {
        return Err(ProviderError::event(&kind, header_error, data));
    }
    Ok(Some(ResponseEvent::Other {
        event_type: kind,
        data: value,
    }))
}

fn parse_value(kind: &str, data: &str) -> Result<Value, ProviderError> {
    serde_json::from_str(data).map_err(|error| ProviderError::event(kind, error, data))
}

#[derive(Deserialize)]
struct ResponseHead {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    model: Option<String>,
}

/// A response object (the terminal event's snapshot, or a non-streaming body).
#[derive(Deserialize)]
struct WireResponse {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    output: Vec<Item>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<WireError>,
    #[serde(default)]
    incomplete_details: Option<IncompleteDetails>,
}

impl WireResponse {
    /// The snapshot, with `status` from the event type when given (else from the body).
    fn into_snapshot(self, status: Option<ResponseStatus>) -> ResponseSnapshot {
        let status = status.or(match self.status.as_deref() {
            Some("completed") => Some(ResponseStatus::Completed),
            Some("incomplete") => Some(ResponseStatus::Incomplete),
            Some("failed" | "cancelled") => Some(ResponseStatus::Failed),
            _ => None,
        });
        let cost = self.usage.as_ref().and_then(|usage| usage.cost);
        ResponseSnapshot {
            id: self.id,
            model: self.model,
            status,
            output: self.output,
            usage: self.usage.map(WireUsage::into_usage),
            cost,
            error: self.error.map(
                |error| match (error.code.and_then(code_text), error.message) {
                    (Some(code), Some(message)) => format!("{code}: {message}"),
                    (None, Some(message)) => message,
                    (Some(code), None) => code,
                    (None, None) => "unknown error".to_owned(),
                },
            ),
            incomplete_reason: self.incomplete_details.and_then(|details| details.reason),
        }
    }
}

#[derive(Deserialize)]
struct WireError {
    #[serde(default)]
    code: Option<Value>,
    #[serde(default)]
    message: Option<String>,
}

#[derive(Deserialize)]
struct IncompleteDetails {
    #[serde(default)]
    reason: Option<String>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
    #[serde(default)]
    input_tokens_details: Option<InputDetails>,
    #[serde(default)]
    output_tokens_details: Option<OutputDetails>,
    #[serde(default)]
    cost: Option<f64>,
}

#[derive(Deserialize)]
struct InputDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct OutputDetails {
    #[serde(default)]
    reasoning_tokens: Option<u64>,
}

impl WireUsage {
    fn into_usage(self) -> TokenUsage {
        TokenUsage {
            input_tokens: self.input_tokens,
            output_tokens: self.output_tokens,
            cached_tokens: self
                .input_tokens_details
                .and_then(|details| details.cached_tokens),
            cache_write_tokens: None,
            reasoning_tokens: self
                .output_tokens_details
                .and_then(|details| details.reasoning_tokens),
        }
    }
}

/// The events a streamed response would have carried, from a whole (non-streaming) response body.
///
/// # Errors
/// [`ProviderError::Event`] when the body is not a response object.
pub(crate) fn whole_response_events(body: &[u8]) -> Result<Vec<ResponseEvent>, ProviderError> {
    let text = String::from_utf8_lossy(body);
    let wire: WireResponse = serde_json::from_slice(body)
        .map_err(|error| ProviderError::event("response", error, &text))?;
    let snapshot = wire.into_snapshot(None);
    let mut events = vec![ResponseEvent::Created {
        response_id: snapshot.id.clone(),
        model: snapshot.model.clone(),
    }];
    for (index, item) in snapshot.output.iter().enumerate() {
        let output_index = u32::try_from(index).unwrap_or(u32::MAX);
        events.push(ResponseEvent::OutputItemDone {
            output_index,
            item: item.clone(),
        });
    }
    events.push(ResponseEvent::Finished(Box::new(snapshot)));
    Ok(events)
}
