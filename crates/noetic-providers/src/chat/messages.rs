//! A round's items as chat `messages`: function calls join the assistant message right before them as
//! `tool_calls`, their outputs become `tool` messages, content parts become chat parts, and reasoning
//! items are dropped except OpenRouter's `reasoning_details`, which ride on the next assistant message.

use std::borrow::Cow;

use noetic_core::item::{ContentPart, Item, Role};
use noetic_core::model::ModelRequest;
use serde::Serialize;
use serde_json::{Map, Value};

use crate::error::ProviderError;

#[derive(Serialize)]
pub(super) struct ChatMessage<'a> {
    role: &'static str,
    /// `null` only on an assistant message that carries nothing but tool calls.
    content: Option<Content<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<ToolCall<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    reasoning_details: Vec<&'a Value>,
}

impl<'a> ChatMessage<'a> {
    fn new(role: &'static str, content: Option<Content<'a>>) -> Self {
        ChatMessage {
            role,
            content,
            tool_calls: Vec::new(),
            tool_call_id: None,
            reasoning_details: Vec::new(),
        }
    }
}

#[derive(Serialize)]
#[serde(untagged)]
enum Content<'a> {
    Text(Cow<'a, str>),
    Parts(Vec<Part<'a>>),
}

#[derive(Serialize)]
#[serde(untagged)]
enum Part<'a> {
    Text {
        #[serde(rename = "type")]
        kind: &'static str,
        text: &'a str,
    },
    Image {
        #[serde(rename = "type")]
        kind: &'static str,
        image_url: ImageUrl<'a>,
    },
    File {
        #[serde(rename = "type")]
        kind: &'static str,
        file: FileRef<'a>,
    },
    /// A part we do not translate, sent as given.
    Raw(&'a Value),
}

#[derive(Serialize)]
struct ImageUrl<'a> {
    url: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    detail: Option<&'a str>,
}

#[derive(Serialize)]
struct FileRef<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    file_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    file_data: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    filename: Option<&'a str>,
}

#[derive(Serialize)]
struct ToolCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: CallFunction<'a>,
}

#[derive(Serialize)]
struct CallFunction<'a> {
    name: &'a str,
    arguments: &'a str,
}

/// The chat `messages`: instructions, then the items in order.
pub(super) fn messages<'a>(
    request: &ModelRequest<'a>,
) -> Result<Vec<ChatMessage<'a>>, ProviderError> {
    let mut messages = Vec::with_capacity(request.input.len() + 1);
    if let Some(instructions) = request.instructions {
        messages.push(ChatMessage::new(
            "system",
            Some(Content::Text(Cow::Borrowed(instructions))),
        ));
    }
    // The assistant message that function calls right after it join.
    let mut open_assistant: Option<usize> = None;
    // `reasoning_details` waiting for the next assistant message of the same turn.
    let mut pending_details: Vec<&'a Value> = Vec::new();
    for item in request.input {
        match item {
            Item::Message(message) if message.role == Role::Assistant => {
                let mut chat =
                    ChatMessage::new("assistant", Some(message_content(&message.content)?));
                chat.reasoning_details = std::mem::take(&mut pending_details);
                open_assistant = Some(messages.len());
                messages.push(chat);
            }
            Item::Message(message) => {
                open_assistant = None;
                pending_details.clear();
                messages.push(ChatMessage::new(
                    role_name(message.role),
                    Some(message_content(&message.content)?),
                ));
            }
            Item::FunctionCall(call) => {
                // An empty argument string is not JSON: some servers reject it on replay.
                let arguments = if call.arguments.is_empty() {
                    "{}"
                } else {
                    &call.arguments
                };
                let tool_call = ToolCall {
                    id: &call.call_id,
                    kind: "function",
                    function: CallFunction {
                        name: &call.name,
                        arguments,
                    },
                };
                match open_assistant.and_then(|index| messages.get_mut(index)) {
                    Some(chat) => {
                        chat.tool_calls.push(tool_call);
                        chat.reasoning_details.append(&mut pending_details);
                    }
                    None => {
                        let mut chat = ChatMessage::new("assistant", None);
                        chat.tool_calls.push(tool_call);
                        chat.reasoning_details = std::mem::take(&mut pending_details);
                        open_assistant = Some(messages.len());
                        messages.push(chat);
                    }
                }
            }
            Item::FunctionCallOutput(output) => {
                open_assistant = None;
                pending_details.clear();
                let mut chat = ChatMessage::new("tool", Some(output_content(&output.output)?));
                chat.tool_call_id = Some(&output.call_id);
                messages.push(chat);
            }
            Item::Reasoning(reasoning) => {
                // Chat servers take no reasoning input, except OpenRouter's details.
                if let Some(Value::Array(details)) = reasoning.extra.get("reasoning_details") {
                    pending_details.extend(details);
                }
            }
            // `Item::Other` (hosted tool calls, compaction, …) has no chat form.
            _ => {}
        }
    }
    Ok(messages)
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::System => "system",
        Role::Developer => "developer",
    }
}

/// A message's content: a string when it is all text (the form every server accepts), else parts.
fn message_content(parts: &[ContentPart]) -> Result<Content<'_>, ProviderError> {
    let mut chat = Vec::with_capacity(parts.len());
    for part in parts {
        let converted = match part {
            ContentPart::InputText { text } | ContentPart::OutputText { text, .. } => {
                Part::text(text)
            }
            ContentPart::Refusal { refusal } => Part::text(refusal),
            ContentPart::InputImage(fields) => image_part(fields)?,
            ContentPart::InputFile(fields) => file_part(fields)?,
            ContentPart::Other(value) => value_part(value)?,
            _ => continue,
        };
        chat.push(converted);
    }
    Ok(content_from_parts(chat))
}

/// A function call output: a string as is, content parts translated, any other JSON as its text.
fn output_content(output: &Value) -> Result<Content<'_>, ProviderError> {
    match output {
        Value::String(text) => Ok(Content::Text(Cow::Borrowed(text))),
        Value::Array(parts) => {
            let chat = parts
                .iter()
                .map(value_part)
                .collect::<Result<Vec<_>, _>>()?;
            Ok(content_from_parts(chat))
        }
        other => Ok(Content::Text(Cow::Owned(other.to_string()))),
    }
}

fn content_from_parts(parts: Vec<Part<'_>>) -> Content<'_> {
    let mut texts = Vec::new();
    for part in &parts {
        match part {
            Part::Text { text, .. } => texts.push(*text),
            _ => return Content::Parts(parts),
        }
    }
    match texts.as_slice() {
        [] => Content::Text(Cow::Borrowed("")),
        [text] => Content::Text(Cow::Borrowed(text)),
        _ => Content::Text(Cow::Owned(texts.concat())),
    }
}

impl<'a> Part<'a> {
    fn text(text: &'a str) -> Self {
        Part::Text { kind: "text", text }
    }
}

/// An OpenResponses part given as JSON (unmodelled parts, function call output parts).
fn value_part(value: &Value) -> Result<Part<'_>, ProviderError> {
    let Some(fields) = value.as_object() else {
        return Ok(Part::Raw(value));
    };
    let text = fields.get("text").and_then(Value::as_str);
    Ok(match (fields.get("type").and_then(Value::as_str), text) {
        (Some("input_text" | "output_text" | "text"), Some(text)) => Part::text(text),
        (Some("input_image"), _) => image_part(fields)?,
        (Some("input_file"), _) => file_part(fields)?,
        _ => Part::Raw(value),
    })
}

fn image_part(fields: &Map<String, Value>) -> Result<Part<'_>, ProviderError> {
    let url = match fields.get("image_url") {
        Some(Value::String(url)) => Some(url.as_str()),
        Some(Value::Object(inner)) => inner.get("url").and_then(Value::as_str),
        _ => None,
    };
    let Some(url) = url else {
        return Err(ProviderError::InvalidConfig {
            field: "input",
            message: "an `input_image` part without `image_url` (e.g. by `file_id`) has no Chat \
                      Completions form"
                .to_owned(),
        });
    };
    Ok(Part::Image {
        kind: "image_url",
        image_url: ImageUrl {
            url,
            detail: fields.get("detail").and_then(Value::as_str),
        },
    })
}

fn file_part(fields: &Map<String, Value>) -> Result<Part<'_>, ProviderError> {
    let field = |key: &str| fields.get(key).and_then(Value::as_str);
    // Chat has no `file_url`; OpenRouter accepts a URL in `file_data`.
    let file = FileRef {
        file_id: field("file_id"),
        file_data: field("file_data").or_else(|| field("file_url")),
        filename: field("filename"),
    };
    if file.file_id.is_none() && file.file_data.is_none() {
        return Err(ProviderError::InvalidConfig {
            field: "input",
            message: "an `input_file` part needs `file_id`, `file_data` or `file_url`".to_owned(),
        });
    }
    Ok(Part::File { kind: "file", file })
}
