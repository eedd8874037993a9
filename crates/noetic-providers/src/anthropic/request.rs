//! The request side of the Messages API: a round's request as a streaming `POST /messages` body.
//!
//! Instructions become the top-level `system`; the items become alternating `user` / `assistant`
//! messages of content blocks (consecutive items of one role share a message, as the API requires):
//! text parts `text` blocks, images and PDF files `image` / `document` blocks, function calls
//! `tool_use` blocks (the input parsed, `{}` when empty), their outputs `tool_result` blocks in the
//! next user message, reasoning items back as the `thinking` (with its signature) or
//! `redacted_thinking` blocks they came from, in place, and [`Item::Other`] blocks (server tools and
//! their results) as received. Reasoning with no signature (cut off) or from another provider (no
//! `"anthropic"` mark) cannot be replayed and is left out.

use noetic_core::item::{ContentPart, Item, Role};
use noetic_core::model::{ModelRequest, PromptCache, ToolChoice};
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};
use serde_json::{Map, Value, json};

use super::decoder::BLOCK_MARK;
use crate::body::{put, put_extra};
use crate::error::ProviderError;

/// The most cache breakpoints a request may carry.
const MAX_BREAKPOINTS: usize = 4;

/// `max_tokens` when the step sets no `max_output_tokens` (the API requires one).
pub const DEFAULT_MAX_TOKENS: u64 = 4096;

/// The wire's own body settings.
#[derive(Debug, Clone, Default)]
pub(crate) struct BodyOptions {
    /// `thinking: {"type": "enabled", "budget_tokens": N}` when set and the step sets none.
    pub(crate) thinking_budget: Option<u64>,
    /// The breakpoints when the step sets none.
    pub(crate) cache: PromptCache,
    /// `max_tokens` when the request sets none (else [`DEFAULT_MAX_TOKENS`]).
    pub(crate) max_tokens: Option<u64>,
}

/// Serializes a round's request as a streaming `POST /messages` body; `extra` fields replace the
/// body's own of the same name (see [`crate::body`]).
///
/// # Errors
/// [`ProviderError::InvalidConfig`] when an item cannot be expressed on this wire (a function call
/// whose arguments are not a JSON object, an image or file given only by an id), naming it.
pub(crate) fn request_body(
    request: &ModelRequest<'_>,
    options: &BodyOptions,
    extra: &Map<String, Value>,
) -> Result<Vec<u8>, ProviderError> {
    let (mut messages, breakpoints) = messages(request.input)?;
    let mut tools: Vec<Value> = request
        .tools
        .iter()
        .map(|tool| {
            json!({
                "name": tool.name,
                "description": tool.description,
                "input_schema": tool.parameters,
            })
        })
        .collect();
    let mut system: Option<Value> = request
        .instructions
        .map(|text| json!([{"type": "text", "text": text}]));
    let mark = |block: Option<&mut Value>| {
        if let Some(Value::Object(block)) = block {
            block.insert("cache_control".to_owned(), json!({"type": "ephemeral"}));
        }
    };
    match request.params.prompt_cache.unwrap_or(options.cache) {
        PromptCache::Auto => {
            if let Some(Value::Array(blocks)) = &mut system {
                mark(blocks.last_mut());
            }
            mark(tools.last_mut());
            if let Some(message) = messages.last_mut() {
                mark(message.content.last_mut());
            }
        }
        PromptCache::Explicit => {
            // The API takes four breakpoints at most: the last four marks.
            let skip = breakpoints.len().saturating_sub(MAX_BREAKPOINTS);
            for &(message, block) in &breakpoints[skip..] {
                mark(messages[message].content.get_mut(block));
            }
        }
        // `Off`, and modes newer than this wire.
        _ => {}
    }
    let model = model_id(request.model);
    let body = Body {
        model: &model,
        system,
        messages,
        tools,
        request,
        options,
        extra,
    };
    serde_json::to_vec(&body).map_err(|error| ProviderError::InvalidConfig {
        field: "request",
        message: error.to_string(),
    })
}

/// The model id as the Anthropic API names it: an OpenRouter-style id (`anthropic/claude-sonnet-4.5`)
/// loses its vendor prefix and writes its version with dashes (`claude-sonnet-4-5`), so a step written
/// for OpenRouter runs unchanged; any other id is sent as given.
pub(crate) fn model_id(model: &str) -> std::borrow::Cow<'_, str> {
    let Some(bare) = model.strip_prefix("anthropic/") else {
        return std::borrow::Cow::Borrowed(model);
    };
    let bytes = bare.as_bytes();
    let dashed: String = bare
        .char_indices()
        .map(|(at, c)| {
            let between_digits = at > 0
                && bytes[at - 1].is_ascii_digit()
                && bytes.get(at + 1).is_some_and(u8::is_ascii_digit);
            if c == '.' && between_digits { '-' } else { c }
        })
        .collect();
    std::borrow::Cow::Owned(dashed)
}

struct Body<'a> {
    model: &'a str,
    system: Option<Value>,
    messages: Vec<Message>,
    tools: Vec<Value>,
    request: &'a ModelRequest<'a>,
    options: &'a BodyOptions,
    extra: &'a Map<String, Value>,
}

impl Serialize for Body<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let extra = self.extra;
        let params = self.request.params;
        let mut map = serializer.serialize_map(None)?;
        put(&mut map, extra, "model", self.model)?;
        let max_tokens = params
            .max_output_tokens
            .or(self.options.max_tokens)
            .unwrap_or(DEFAULT_MAX_TOKENS);
        put(&mut map, extra, "max_tokens", &max_tokens)?;
        if let Some(system) = &self.system {
            put(&mut map, extra, "system", system)?;
        }
        put(&mut map, extra, "messages", &self.messages)?;
        if !self.tools.is_empty() {
            put(&mut map, extra, "tools", &self.tools)?;
            if let Some(choice) = &params.tool_choice {
                put(&mut map, extra, "tool_choice", &tool_choice(choice))?;
            }
        }
        if let Some(budget) = params.thinking_budget.or(self.options.thinking_budget) {
            let thinking = json!({"type": "enabled", "budget_tokens": budget});
            put(&mut map, extra, "thinking", &thinking)?;
        }
        if let Some(temperature) = params.temperature {
            put(&mut map, extra, "temperature", &temperature)?;
        }
        if let Some(top_p) = params.top_p {
            put(&mut map, extra, "top_p", &top_p)?;
        }
        if !params.stop.is_empty() {
            put(&mut map, extra, "stop_sequences", &params.stop)?;
        }
        if let Some(output) = self.request.output {
            // Structured outputs (beta `structured-outputs-2025-11-13`: send that `anthropic-beta`).
            let format = json!({"type": "json_schema", "schema": output.schema});
            put(&mut map, extra, "output_format", &format)?;
        }
        put(&mut map, extra, "stream", &true)?;
        put_extra(&mut map, extra)?;
        map.end()
    }
}

/// One message: a role and its content blocks.
#[derive(Serialize, Debug)]
pub(super) struct Message {
    role: &'static str,
    pub(super) content: Vec<Value>,
}

/// Appends `block` to the last message when it has `role`, else as a new message.
fn push_block(messages: &mut Vec<Message>, role: &'static str, block: Value) {
    match messages.last_mut() {
        Some(last) if last.role == role => last.content.push(block),
        _ => messages.push(Message {
            role,
            content: vec![block],
        }),
    }
}

/// Where a block sits: `(message, block)` indexes.
type BlockAt = (usize, usize);

/// The items as messages, consecutive blocks of one role in one message; and where the messages
/// marked as cache breakpoints end.
fn messages(items: &[Item]) -> Result<(Vec<Message>, Vec<BlockAt>), ProviderError> {
    let mut messages: Vec<Message> = Vec::with_capacity(items.len());
    let mut breakpoints = Vec::new();
    for item in items {
        let mut push = |role: &'static str, block: Value| push_block(&mut messages, role, block);
        match item {
            Item::Message(message) => {
                let role = match message.role {
                    Role::Assistant => "assistant",
                    // System items are instructions already; developer text is the user's side.
                    Role::User | Role::Developer | Role::System => "user",
                };
                for part in &message.content {
                    if let Some(block) = part_block(part)? {
                        push(role, block);
                    }
                }
                if message.cache_breakpoint
                    && let Some(last) = messages.last()
                {
                    breakpoints.push((messages.len() - 1, last.content.len() - 1));
                }
            }
            Item::FunctionCall(call) => {
                let input = if call.arguments.trim().is_empty() {
                    Value::Object(Map::new())
                } else {
                    match serde_json::from_str::<Value>(&call.arguments) {
                        Ok(input @ Value::Object(_)) => input,
                        _ => {
                            return Err(ProviderError::InvalidConfig {
                                field: "input",
                                message: format!(
                                    "the arguments of function call `{}` are not a JSON object",
                                    call.call_id
                                ),
                            });
                        }
                    }
                };
                push(
                    "assistant",
                    json!({"type": "tool_use", "id": call.call_id, "name": call.name, "input": input}),
                );
            }
            Item::FunctionCallOutput(output) => {
                let content = match &output.output {
                    Value::String(text) => Value::String(text.clone()),
                    Value::Array(parts) => Value::Array(
                        parts
                            .iter()
                            .map(|part| match part.get("type").and_then(Value::as_str) {
                                Some("input_text" | "output_text") => json!({
                                    "type": "text",
                                    "text": part.get("text").cloned().unwrap_or_default(),
                                }),
                                _ => part.clone(),
                            })
                            .collect(),
                    ),
                    other => Value::String(other.to_string()),
                };
                let mut block = json!({"type": "tool_result", "tool_use_id": output.call_id, "content": content});
                if output.is_error {
                    block["is_error"] = Value::Bool(true);
                }
                push("user", block);
            }
            Item::Reasoning(reasoning) => {
                let block = reasoning.extra.get(BLOCK_MARK).and_then(Value::as_str);
                match (block, &reasoning.encrypted_content) {
                    (Some("redacted_thinking"), Some(data)) => {
                        push(
                            "assistant",
                            json!({"type": "redacted_thinking", "data": data}),
                        );
                    }
                    (Some("thinking"), Some(signature)) => {
                        let text: String = reasoning
                            .content
                            .iter()
                            .flatten()
                            .filter_map(|part| part.get("text").and_then(Value::as_str))
                            .collect();
                        push(
                            "assistant",
                            json!({"type": "thinking", "thinking": text, "signature": signature}),
                        );
                    }
                    // No signature (cut off), or another provider's reasoning: the API would
                    // refuse it.
                    _ => {}
                }
            }
            Item::Other(block) => push("assistant", block.clone()),
            // An item kind newer than this wire: nothing to send it as.
            _ => {}
        }
    }
    Ok((messages, breakpoints))
}

/// A content part as a block; `None` for an empty text.
fn part_block(part: &ContentPart) -> Result<Option<Value>, ProviderError> {
    Ok(match part {
        ContentPart::InputText { text } => {
            (!text.is_empty()).then(|| json!({"type": "text", "text": text}))
        }
        ContentPart::OutputText { text, extra } => {
            if text.is_empty() {
                None
            } else {
                let mut block = json!({"type": "text", "text": text});
                if let Some(Value::Array(citations)) = extra.get("annotations")
                    && !citations.is_empty()
                {
                    block["citations"] = Value::Array(citations.clone());
                }
                Some(block)
            }
        }
        ContentPart::Refusal { refusal } => Some(json!({"type": "text", "text": refusal})),
        ContentPart::InputImage(image) => {
            let url = image.get("image_url").and_then(Value::as_str);
            Some(json!({"type": "image", "source": source(url, "image")?}))
        }
        ContentPart::InputFile(file) => {
            let url = file
                .get("file_data")
                .or_else(|| file.get("file_url"))
                .and_then(Value::as_str);
            Some(json!({"type": "document", "source": source(url, "file")?}))
        }
        ContentPart::Other(value) => Some(value.clone()),
        // `ContentPart` is non-exhaustive: a part this wire does not know goes as its JSON.
        other => Some(serde_json::to_value(other).unwrap_or(Value::Null)),
    })
}

/// An image or file source: a `data:` URL as base64, any other URL as `url`.
fn source(url: Option<&str>, what: &str) -> Result<Value, ProviderError> {
    let Some(url) = url else {
        return Err(ProviderError::InvalidConfig {
            field: "input",
            message: format!("an {what} part needs a URL or data URL on the Anthropic wire"),
        });
    };
    Ok(
        match url
            .strip_prefix("data:")
            .and_then(|rest| rest.split_once(";base64,"))
        {
            Some((media_type, data)) => {
                json!({"type": "base64", "media_type": media_type, "data": data})
            }
            None => json!({"type": "url", "url": url}),
        },
    )
}

/// `tool_choice` as the Messages API spells it (`any` is "required").
fn tool_choice(choice: &ToolChoice) -> Value {
    match choice {
        ToolChoice::None => json!({"type": "none"}),
        ToolChoice::Required => json!({"type": "any"}),
        ToolChoice::Tool(name) => json!({"type": "tool", "name": name}),
        // `Auto`, and choices newer than this wire.
        _ => json!({"type": "auto"}),
    }
}
