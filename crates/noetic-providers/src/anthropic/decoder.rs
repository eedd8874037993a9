//! [`AnthropicDecoder`]: the state machine that turns the events of one streamed Messages response
//! into the OpenResponses events a Responses server would have sent.
//!
//! Each content block becomes one output item, in block order: `text` a message with one
//! `output_text` part (its citations as the part's `annotations`), `thinking` a reasoning item whose
//! `content` is the thinking text and whose `encrypted_content` is the signature, `redacted_thinking`
//! a reasoning item with the data as `encrypted_content` (both marked `"anthropic": <block type>`),
//! `tool_use` a function call (arguments the joined JSON, `{}` when none came), and every other block
//! (server tools and their results, block types this crate does not know) an [`Item::Other`] holding
//! the block as received, so the history sends it back unchanged.

use std::borrow::Cow;

use noetic_core::ResponseEvent;
use noetic_core::item::{ContentPart, FunctionCallItem, Item, MessageItem, ReasoningItem, Role};
use noetic_core::model::{ReasoningKind, ResponseSnapshot, ResponseStatus};
use serde_json::{Map, Value, json};

use super::events::{Delta, DeltaKind, Event, StartMessage, WireUsage, quick_delta};
use crate::decode::WireDecoder;
use crate::error::ProviderError;

/// The `extra` key marking a reasoning item that came from an Anthropic block, with the block's
/// type (`thinking` or `redacted_thinking`) as its value: only such items are replayed (another
/// provider's encrypted reasoning is no Anthropic signature).
pub(super) const BLOCK_MARK: &str = "anthropic";

/// Translates one streamed Messages response into OpenResponses events.
///
/// Blocks are keyed by their `index`, never by "the current block". The terminal event comes at
/// `message_stop` (blocks still open are closed as incomplete), or at once after an `error` event;
/// a stream that ends with neither emits none, and the accumulator reports it cut short.
#[derive(Debug, Default)]
pub(crate) struct AnthropicDecoder {
    /// The terminal event has been emitted; later data is ignored.
    done: bool,
    response_id: Option<String>,
    model: Option<String>,
    next_output_index: u32,
    /// The blocks open now, by wire index.
    open: Vec<(u32, Block)>,
    /// The usage so far: `message_start`'s, overwritten field by field by each `message_delta`.
    usage: Option<WireUsage>,
    stop_reason: Option<String>,
    /// The first `error` event, as `type: message`.
    error: Option<String>,
    /// Deltas of a type this decoder does not know, skipped (the API adds them under its
    /// versioning policy).
    skipped: u64,
}

#[derive(Debug)]
enum Block {
    Text {
        output_index: u32,
        text: String,
        citations: Vec<Value>,
    },
    Thinking {
        output_index: u32,
        text: String,
        signature: String,
    },
    /// `redacted_thinking`: complete at its start.
    Redacted { output_index: u32, data: String },
    ToolUse {
        output_index: u32,
        id: String,
        name: String,
        json: String,
    },
    /// Any other block, kept as received; `json` collects its input deltas (server tool calls).
    Verbatim {
        output_index: u32,
        block: Map<String, Value>,
        json: String,
    },
}

/// What an event's data is named in decoding errors when its `type` cannot be read.
const EVENT_TYPE: &str = "anthropic event";

impl AnthropicDecoder {
    /// A decoder for one response.
    pub(crate) fn new() -> Self {
        Self::default()
    }
}

impl WireDecoder for AnthropicDecoder {
    fn decode(&mut self, data: &str, out: &mut Vec<ResponseEvent>) -> Result<(), ProviderError> {
        if self.done {
            return Ok(());
        }
        if let Some((index, kind, text)) = quick_delta(data) {
            self.delta(
                index,
                Delta {
                    kind: Some(kind),
                    text: Some(text),
                    citation: None,
                    stop_reason: None,
                },
                out,
            );
            return Ok(());
        }
        let event: Event<'_> = serde_json::from_str(data)
            .map_err(|error| ProviderError::event(EVENT_TYPE, error, data))?;
        match event.kind.as_ref() {
            "content_block_delta" => {
                let index = need_index(&event, data)?;
                if let Some(delta) = event.delta {
                    self.delta(index, delta, out);
                }
            }
            "ping" => {}
            "message_start" => {
                if let Some(message) = event.message {
                    let StartMessage { id, model, usage } = *message;
                    self.response_id = id;
                    self.model = model;
                    self.usage = usage;
                }
                out.push(ResponseEvent::Created {
                    response_id: self.response_id.clone(),
                    model: self.model.clone(),
                });
            }
            "content_block_start" => {
                let index = need_index(&event, data)?;
                let block = event.content_block.map(|block| *block).unwrap_or_default();
                self.start(index, block, out);
            }
            "content_block_stop" => {
                let index = need_index(&event, data)?;
                if let Some(position) = self.open.iter().position(|(at, _)| *at == index) {
                    let (_, block) = self.open.remove(position);
                    block.close(false, self.response_id.as_deref(), out);
                }
            }
            "message_delta" => {
                if let Some(reason) = event.delta.and_then(|delta| delta.stop_reason) {
                    self.stop_reason = Some(reason.into_owned());
                }
                if let Some(later) = event.usage {
                    self.usage.get_or_insert_default().overwrite_with(*later);
                }
            }
            "message_stop" => self.end(out),
            "error" => {
                let (code, message) = match event.error {
                    Some(error) => (error.kind, error.message.unwrap_or_default()),
                    None => (None, String::new()),
                };
                self.error = Some(match &code {
                    Some(code) => format!("{code}: {message}"),
                    None => message.clone(),
                });
                out.push(ResponseEvent::Error { code, message });
                self.end(out);
            }
            other => {
                let data: Value = serde_json::from_str(data)
                    .map_err(|error| ProviderError::event(other, error, data))?;
                out.push(ResponseEvent::Other {
                    event_type: other.to_owned(),
                    data,
                });
            }
        }
        Ok(())
    }

    fn finish(&mut self, _out: &mut Vec<ResponseEvent>) -> Result<(), ProviderError> {
        if self.skipped > 0 {
            tracing::debug!(
                skipped = self.skipped,
                "anthropic deltas of unknown types skipped"
            );
        }
        Ok(())
    }
}

fn need_index(event: &Event<'_>, data: &str) -> Result<u32, ProviderError> {
    event
        .index
        .ok_or_else(|| ProviderError::event(&event.kind, "no `index`", data))
}

impl AnthropicDecoder {
    fn start(&mut self, index: u32, mut block: Map<String, Value>, out: &mut Vec<ResponseEvent>) {
        let output_index = self.next_output_index;
        self.next_output_index += 1;
        let text_field = |block: &mut Map<String, Value>, name: &str| match block.remove(name) {
            Some(Value::String(text)) => text,
            _ => String::new(),
        };
        let (block, item) = match block.get("type").and_then(Value::as_str) {
            Some("text") => {
                let text = text_field(&mut block, "text");
                let citations = match block.remove("citations") {
                    Some(Value::Array(citations)) => citations,
                    _ => Vec::new(),
                };
                let item = message_item(None, None);
                (
                    Block::Text {
                        output_index,
                        text,
                        citations,
                    },
                    item,
                )
            }
            Some("thinking") => {
                let text = text_field(&mut block, "thinking");
                let signature = text_field(&mut block, "signature");
                let item = reasoning_item(None, None, None, Map::new());
                (
                    Block::Thinking {
                        output_index,
                        text,
                        signature,
                    },
                    item,
                )
            }
            Some("redacted_thinking") => {
                let data = text_field(&mut block, "data");
                let item =
                    reasoning_item(None, None, Some(data.clone()), mark("redacted_thinking"));
                (Block::Redacted { output_index, data }, item)
            }
            Some("tool_use") => {
                let id = text_field(&mut block, "id");
                let name = text_field(&mut block, "name");
                // The input may come whole in the start event (it is `{}` when deltas follow).
                let json = match block.get("input") {
                    Some(Value::Object(input)) if !input.is_empty() => {
                        Value::Object(input.clone()).to_string()
                    }
                    _ => String::new(),
                };
                let item = Item::FunctionCall(FunctionCallItem {
                    id: Some(id.clone()),
                    call_id: id.clone(),
                    name: name.clone(),
                    arguments: String::new(),
                    extra: Map::new(),
                });
                (
                    Block::ToolUse {
                        output_index,
                        id,
                        name,
                        json,
                    },
                    item,
                )
            }
            _ => {
                let item = Item::Other(Value::Object(block.clone()));
                (
                    Block::Verbatim {
                        output_index,
                        block,
                        json: String::new(),
                    },
                    item,
                )
            }
        };
        out.push(ResponseEvent::OutputItemAdded { output_index, item });
        // A second start of one index replaces the first (never seen on the wire).
        self.open.retain(|(at, _)| *at != index);
        self.open.push((index, block));
    }

    fn delta(&mut self, index: u32, delta: Delta<'_>, out: &mut Vec<ResponseEvent>) {
        let Some((_, block)) = self.open.iter_mut().find(|(at, _)| *at == index) else {
            // A delta for a block never started: nothing to attach it to.
            self.skipped += 1;
            return;
        };
        let kind = delta.kind.unwrap_or(DeltaKind::Other);
        match (kind, block) {
            (
                DeltaKind::TextDelta,
                Block::Text {
                    output_index, text, ..
                },
            ) => {
                if let Some(piece) = delta.text.filter(|piece| !piece.is_empty()) {
                    text.push_str(&piece);
                    out.push(ResponseEvent::OutputTextDelta {
                        output_index: *output_index,
                        content_index: 0,
                        delta: piece.into_owned(),
                    });
                }
            }
            (DeltaKind::CitationsDelta, Block::Text { citations, .. }) => {
                if let Some(citation) = delta.citation {
                    citations.push(*citation);
                }
            }
            (
                DeltaKind::ThinkingDelta,
                Block::Thinking {
                    output_index, text, ..
                },
            ) => {
                if let Some(piece) = delta.text.filter(|piece| !piece.is_empty()) {
                    text.push_str(&piece);
                    out.push(ResponseEvent::ReasoningDelta {
                        kind: ReasoningKind::Text,
                        output_index: *output_index,
                        part_index: 0,
                        delta: piece.into_owned(),
                    });
                }
            }
            (DeltaKind::SignatureDelta, Block::Thinking { signature, .. }) => {
                if let Some(piece) = delta.text {
                    signature.push_str(&piece);
                }
            }
            (
                DeltaKind::InputJsonDelta,
                Block::ToolUse {
                    output_index, json, ..
                },
            ) => {
                if let Some(piece) = delta.text.filter(|piece| !piece.is_empty()) {
                    json.push_str(&piece);
                    out.push(ResponseEvent::FunctionCallArgumentsDelta {
                        output_index: *output_index,
                        delta: piece.into_owned(),
                    });
                }
            }
            (DeltaKind::InputJsonDelta, Block::Verbatim { json, .. }) => {
                if let Some(piece) = delta.text {
                    json.push_str(&piece);
                }
            }
            _ => self.skipped += 1,
        }
    }

    /// Closes what is still open (as incomplete) and emits the terminal event.
    fn end(&mut self, out: &mut Vec<ResponseEvent>) {
        for (_, block) in std::mem::take(&mut self.open) {
            block.close(true, self.response_id.as_deref(), out);
        }
        let (status, error, incomplete_reason) = match (&self.error, self.stop_reason.as_deref()) {
            (Some(error), _) => (ResponseStatus::Failed, Some(error.clone()), None),
            (None, Some("max_tokens")) => (
                ResponseStatus::Incomplete,
                None,
                Some("max_output_tokens".to_owned()),
            ),
            (None, Some(reason @ ("pause_turn" | "refusal" | "model_context_window_exceeded"))) => {
                (ResponseStatus::Incomplete, None, Some(reason.to_owned()))
            }
            // `end_turn`, `tool_use`, `stop_sequence`, and reasons this crate does not know.
            (None, _) => (ResponseStatus::Completed, None, None),
        };
        out.push(ResponseEvent::Finished(Box::new(ResponseSnapshot {
            id: self.response_id.clone(),
            model: self.model.clone(),
            status: Some(status),
            output: Vec::new(),
            usage: self.usage.as_ref().map(WireUsage::to_usage),
            cost: None,
            error,
            incomplete_reason,
        })));
        self.done = true;
    }
}

impl Block {
    /// The complete item: `OutputItemDone` (after `FunctionCallArgumentsDone` for a tool call),
    /// `status: incomplete` when the block was cut off.
    fn close(self, incomplete: bool, response_id: Option<&str>, out: &mut Vec<ResponseEvent>) {
        let status = |extra: &mut Map<String, Value>| {
            if incomplete {
                extra.insert("status".to_owned(), Value::from("incomplete"));
            }
        };
        let (output_index, item) = match self {
            Block::Text {
                output_index,
                text,
                citations,
            } => {
                let mut part_extra = Map::new();
                if !citations.is_empty() {
                    part_extra.insert("annotations".to_owned(), Value::Array(citations));
                }
                let mut item = message_item(
                    Some(item_id(response_id, output_index)),
                    Some((text, part_extra)),
                );
                if let Item::Message(message) = &mut item {
                    status(&mut message.extra);
                }
                (output_index, item)
            }
            Block::Thinking {
                output_index,
                text,
                signature,
            } => {
                let mut extra = mark("thinking");
                status(&mut extra);
                let item = reasoning_item(
                    Some(item_id(response_id, output_index)),
                    Some(text),
                    (!signature.is_empty()).then_some(signature),
                    extra,
                );
                (output_index, item)
            }
            Block::Redacted { output_index, data } => {
                let mut extra = mark("redacted_thinking");
                status(&mut extra);
                let item = reasoning_item(
                    Some(item_id(response_id, output_index)),
                    None,
                    Some(data),
                    extra,
                );
                (output_index, item)
            }
            Block::ToolUse {
                output_index,
                id,
                name,
                json,
            } => {
                // No input deltas (or one empty piece) means the `{}` of the start event.
                let arguments = if json.trim().is_empty() {
                    "{}".to_owned()
                } else {
                    json
                };
                out.push(ResponseEvent::FunctionCallArgumentsDone {
                    output_index,
                    arguments: arguments.clone(),
                });
                let mut extra = Map::new();
                status(&mut extra);
                let item = Item::FunctionCall(FunctionCallItem {
                    id: Some(id.clone()),
                    call_id: id,
                    name,
                    arguments,
                    extra,
                });
                (output_index, item)
            }
            Block::Verbatim {
                output_index,
                mut block,
                json,
            } => {
                if !json.trim().is_empty() {
                    let input = serde_json::from_str(&json).unwrap_or(Value::String(json));
                    block.insert("input".to_owned(), input);
                }
                (output_index, Item::Other(Value::Object(block)))
            }
        };
        out.push(ResponseEvent::OutputItemDone { output_index, item });
    }
}

/// The `extra` of a reasoning item from a block of type `kind`.
fn mark(kind: &str) -> Map<String, Value> {
    let mut extra = Map::new();
    extra.insert(BLOCK_MARK.to_owned(), Value::from(kind));
    extra
}

/// An assistant message: one `output_text` part (its text and extra fields), or no parts while it
/// opens.
fn message_item(id: Option<String>, part: Option<(String, Map<String, Value>)>) -> Item {
    let content = part
        .map(|(text, extra)| ContentPart::OutputText { text, extra })
        .into_iter()
        .collect();
    Item::Message(MessageItem {
        id,
        role: Role::Assistant,
        content,
        cache_breakpoint: false,
        extra: Map::new(),
    })
}

fn reasoning_item(
    id: Option<String>,
    text: Option<String>,
    encrypted: Option<String>,
    extra: Map<String, Value>,
) -> Item {
    Item::Reasoning(ReasoningItem {
        id,
        summary: Vec::new(),
        content: text.map(|text| vec![json!({"type": "reasoning_text", "text": text})]),
        encrypted_content: encrypted,
        extra,
    })
}

/// `<message id>_<output index>` (the message id alone names the response).
fn item_id(response_id: Option<&str>, output_index: u32) -> String {
    let base: Cow<'_, str> = response_id.map_or(Cow::Borrowed("msg"), Cow::Borrowed);
    format!("{base}_{output_index}")
}

/// The events of a whole (non-streaming) Messages response: its blocks replayed through the
/// decoder as the stream would have carried them (each block complete in its start event).
///
/// # Errors
/// [`ProviderError::Event`] for a body that is not a message.
pub(crate) fn whole_message_events(body: &[u8]) -> Result<Vec<ResponseEvent>, ProviderError> {
    let text = String::from_utf8_lossy(body);
    let mut message: Map<String, Value> = serde_json::from_slice(body)
        .map_err(|error| ProviderError::event("message", error, &text))?;
    let blocks = match message.remove("content") {
        Some(Value::Array(blocks)) => blocks,
        _ => Vec::new(),
    };
    let stop_reason = message.remove("stop_reason").unwrap_or(Value::Null);
    let usage = message.get("usage").cloned().unwrap_or(Value::Null);
    let mut decoder = AnthropicDecoder::new();
    let mut out = Vec::new();
    let mut feed = |event: Value| decoder.decode(&event.to_string(), &mut out);
    feed(json!({"type": "message_start", "message": Value::Object(message)}))?;
    for (index, block) in blocks.into_iter().enumerate() {
        feed(json!({"type": "content_block_start", "index": index, "content_block": block}))?;
        feed(json!({"type": "content_block_stop", "index": index}))?;
    }
    feed(json!({"type": "message_delta", "delta": {"stop_reason": stop_reason}, "usage": usage}))?;
    feed(json!({"type": "message_stop"}))?;
    Ok(out)
}
