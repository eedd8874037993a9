//! The item model, aligned with the OpenResponses format.
//!
//! An [`Item`] is the unit of conversation history: a message with a role and content parts, a function
//! call, a function call's output, or a reasoning item. Items round-trip through serde without loss:
//! fields this crate does not model (ids, `status`, `phase`, annotations, provider extensions) are kept in
//! `extra` and written back, so replayed items reach the provider exactly as it sent them. Item types this
//! crate does not know at all (hosted tool calls, `compaction`, vendor extensions) are kept whole as
//! [`Item::Other`].

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

/// One item of conversation history.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Item {
    /// A message with a role and content parts.
    Message(MessageItem),
    /// A function (tool) call emitted by the model.
    FunctionCall(FunctionCallItem),
    /// The output of a function call, sent back to the model.
    FunctionCallOutput(FunctionCallOutputItem),
    /// A reasoning item (summary, raw reasoning text, encrypted content).
    Reasoning(ReasoningItem),
    /// An item type this crate does not model, kept verbatim.
    Other(Value),
}

/// The role of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The end user.
    User,
    /// The model.
    Assistant,
    /// System instructions.
    System,
    /// Developer instructions (higher priority than user, lower than system).
    Developer,
}

/// A message item.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MessageItem {
    /// The item id, when the provider assigned one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Who speaks.
    pub role: Role,
    /// The content parts.
    #[serde(deserialize_with = "content_from_string_or_parts")]
    pub content: Vec<ContentPart>,
    /// A prompt-cache breakpoint after this message, for providers that take explicit ones
    /// (Anthropic, with `PromptCache::Explicit`); the OpenResponses wire leaves it out. Serialized
    /// only when set. See [`Item::with_cache_breakpoint`].
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cache_breakpoint: bool,
    /// Fields not modelled here (`status`, `phase`, …), kept for exact replay.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A content part of a message.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ContentPart {
    /// Text from the user (or system/developer).
    InputText {
        /// The text.
        text: String,
    },
    /// Text from the model.
    OutputText {
        /// The text.
        text: String,
        /// Other fields (`annotations`, `logprobs`), kept for exact replay.
        extra: Map<String, Value>,
    },
    /// An image input (`image_url` or `file_id`, `detail`).
    InputImage(Map<String, Value>),
    /// A file input (`file_id`, `file_data`, `filename`, `file_url`).
    InputFile(Map<String, Value>),
    /// A refusal from the model.
    Refusal {
        /// The refusal text.
        refusal: String,
    },
    /// A part type this crate does not model, kept verbatim.
    Other(Value),
}

/// A function call emitted by the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionCallItem {
    /// The item id, when the provider assigned one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The call id that the output item must echo.
    pub call_id: String,
    /// The tool's name as sent on the wire.
    pub name: String,
    /// The raw JSON arguments text.
    pub arguments: String,
    /// Fields not modelled here (`status`, …).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The output of a function call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FunctionCallOutputItem {
    /// The item id, when assigned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The call this answers.
    pub call_id: String,
    /// The output: a string, or content parts as JSON.
    pub output: Value,
    /// Whether the call failed (the output is its error). Wires that mark failed results send it
    /// (Anthropic's `is_error`); the OpenResponses wire leaves it out. Serialized only when set.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
    /// Fields not modelled here.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A reasoning item.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReasoningItem {
    /// The item id, when assigned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Summary parts (`{type: "summary_text", text}`).
    #[serde(default)]
    pub summary: Vec<Value>,
    /// Raw reasoning parts (`{type: "reasoning_text", text}`), when the provider sends them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Vec<Value>>,
    /// Opaque encrypted reasoning, replayed verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted_content: Option<String>,
    /// Fields not modelled here.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Item {
    /// A user message with one `input_text` part.
    pub fn user_text(text: impl Into<String>) -> Self {
        Item::message(
            Role::User,
            vec![ContentPart::InputText { text: text.into() }],
        )
    }

    /// A developer message with one `input_text` part.
    pub fn developer_text(text: impl Into<String>) -> Self {
        Item::message(
            Role::Developer,
            vec![ContentPart::InputText { text: text.into() }],
        )
    }

    /// A system message with one `input_text` part.
    pub fn system_text(text: impl Into<String>) -> Self {
        Item::message(
            Role::System,
            vec![ContentPart::InputText { text: text.into() }],
        )
    }

    /// An assistant message with one `output_text` part.
    pub fn assistant_text(text: impl Into<String>) -> Self {
        Item::message(
            Role::Assistant,
            vec![ContentPart::OutputText {
                text: text.into(),
                extra: Map::new(),
            }],
        )
    }

    /// A message with the given role and parts.
    pub fn message(role: Role, content: Vec<ContentPart>) -> Self {
        Item::Message(MessageItem {
            id: None,
            role,
            content,
            cache_breakpoint: false,
            extra: Map::new(),
        })
    }

    /// A function call item.
    pub fn function_call(
        call_id: impl Into<String>,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> Self {
        Item::FunctionCall(FunctionCallItem {
            id: None,
            call_id: call_id.into(),
            name: name.into(),
            arguments: arguments.into(),
            extra: Map::new(),
        })
    }

    /// A function call output item with a text output.
    pub fn function_call_output(call_id: impl Into<String>, output: impl Into<String>) -> Self {
        Item::FunctionCallOutput(FunctionCallOutputItem {
            id: None,
            call_id: call_id.into(),
            output: Value::String(output.into()),
            is_error: false,
            extra: Map::new(),
        })
    }

    /// This message with a prompt-cache breakpoint after it (providers that take explicit
    /// breakpoints: Anthropic, with `PromptCache::Explicit`); any other item as it is.
    #[must_use]
    pub fn with_cache_breakpoint(mut self) -> Self {
        if let Item::Message(message) = &mut self {
            message.cache_breakpoint = true;
        }
        self
    }

    /// A function call output item whose text is the call's error.
    pub fn function_call_error(call_id: impl Into<String>, error: impl Into<String>) -> Self {
        Item::FunctionCallOutput(FunctionCallOutputItem {
            id: None,
            call_id: call_id.into(),
            output: Value::String(error.into()),
            is_error: true,
            extra: Map::new(),
        })
    }

    /// The item's `type` on the wire.
    pub fn item_type(&self) -> &str {
        match self {
            Item::Message(_) => "message",
            Item::FunctionCall(_) => "function_call",
            Item::FunctionCallOutput(_) => "function_call_output",
            Item::Reasoning(_) => "reasoning",
            Item::Other(value) => value
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or("unknown"),
        }
    }

    /// The item's id, when it has one.
    pub fn id(&self) -> Option<&str> {
        match self {
            Item::Message(m) => m.id.as_deref(),
            Item::FunctionCall(c) => c.id.as_deref(),
            Item::FunctionCallOutput(o) => o.id.as_deref(),
            Item::Reasoning(r) => r.id.as_deref(),
            Item::Other(value) => value.get("id").and_then(Value::as_str),
        }
    }

    /// The message role, for message items.
    pub fn role(&self) -> Option<Role> {
        match self {
            Item::Message(m) => Some(m.role),
            _ => None,
        }
    }

    /// The concatenated text of a message's text parts (`input_text`, `output_text`, `refusal`), or
    /// `None` for other items.
    pub fn text(&self) -> Option<String> {
        match self {
            Item::Message(m) => Some(m.text()),
            _ => None,
        }
    }

    /// The function call, when this is one.
    pub fn as_function_call(&self) -> Option<&FunctionCallItem> {
        match self {
            Item::FunctionCall(call) => Some(call),
            _ => None,
        }
    }

    /// Parses an item from JSON, naming the category on failure.
    ///
    /// # Errors
    /// [`crate::Error::ItemSchemaMismatch`] when the value is not a valid item.
    pub fn from_json(value: Value, category: &'static str) -> crate::Result<Self> {
        let item_type = value.get("type").and_then(Value::as_str).map(str::to_owned);
        serde_json::from_value(value).map_err(|source| crate::Error::ItemSchemaMismatch {
            category,
            item_type,
            message: source.to_string(),
        })
    }
}

impl MessageItem {
    /// The concatenated text of the text parts.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for part in &self.content {
            match part {
                ContentPart::InputText { text } | ContentPart::OutputText { text, .. } => {
                    out.push_str(text)
                }
                ContentPart::Refusal { refusal } => out.push_str(refusal),
                _ => {}
            }
        }
        out
    }
}

impl Serialize for Item {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // Write `type` first, then the variant's own fields, by going through a small tagged wrapper.
        #[derive(Serialize)]
        struct Tagged<'a, T: Serialize> {
            #[serde(rename = "type")]
            kind: &'static str,
            #[serde(flatten)]
            inner: &'a T,
        }
        match self {
            Item::Message(m) => Tagged {
                kind: "message",
                inner: m,
            }
            .serialize(serializer),
            Item::FunctionCall(c) => Tagged {
                kind: "function_call",
                inner: c,
            }
            .serialize(serializer),
            Item::FunctionCallOutput(o) => Tagged {
                kind: "function_call_output",
                inner: o,
            }
            .serialize(serializer),
            Item::Reasoning(r) => Tagged {
                kind: "reasoning",
                inner: r,
            }
            .serialize(serializer),
            Item::Other(value) => value.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for Item {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error as _;
        let mut map = Map::<String, Value>::deserialize(deserializer)?;
        // An input message may omit `type` (the "easy input message" form): a `role` makes it a message.
        let kind = match map.get("type") {
            Some(Value::String(kind)) => kind.clone(),
            Some(_) => return Err(D::Error::custom("item `type` must be a string")),
            None if map.contains_key("role") => "message".to_owned(),
            None => return Err(D::Error::custom("item has no `type`")),
        };
        let known = matches!(
            kind.as_str(),
            "message" | "function_call" | "function_call_output" | "reasoning"
        );
        if !known {
            return Ok(Item::Other(Value::Object(map)));
        }
        map.remove("type");
        let value = Value::Object(map);
        let item = match kind.as_str() {
            "message" => Item::Message(serde_json::from_value(value).map_err(D::Error::custom)?),
            "function_call" => {
                Item::FunctionCall(serde_json::from_value(value).map_err(D::Error::custom)?)
            }
            "function_call_output" => {
                Item::FunctionCallOutput(serde_json::from_value(value).map_err(D::Error::custom)?)
            }
            _ => Item::Reasoning(serde_json::from_value(value).map_err(D::Error::custom)?),
        };
        Ok(item)
    }
}

impl Serialize for ContentPart {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match self {
            ContentPart::InputText { text } => {
                let mut map = serializer.serialize_map(Some(2))?;
                map.serialize_entry("type", "input_text")?;
                map.serialize_entry("text", text)?;
                map.end()
            }
            ContentPart::OutputText { text, extra } => {
                let mut map = serializer.serialize_map(Some(2 + extra.len()))?;
                map.serialize_entry("type", "output_text")?;
                map.serialize_entry("text", text)?;
                for (key, value) in extra {
                    map.serialize_entry(key, value)?;
                }
                map.end()
            }
            ContentPart::InputImage(fields) => tagged_map(serializer, "input_image", fields),
            ContentPart::InputFile(fields) => tagged_map(serializer, "input_file", fields),
            ContentPart::Refusal { refusal } => {
                let mut map = serializer.serialize_map(Some(2))?;
                map.serialize_entry("type", "refusal")?;
                map.serialize_entry("refusal", refusal)?;
                map.end()
            }
            ContentPart::Other(value) => value.serialize(serializer),
        }
    }
}

fn tagged_map<S: Serializer>(
    serializer: S,
    kind: &str,
    fields: &Map<String, Value>,
) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut map = serializer.serialize_map(Some(1 + fields.len()))?;
    map.serialize_entry("type", kind)?;
    for (key, value) in fields {
        map.serialize_entry(key, value)?;
    }
    map.end()
}

impl<'de> Deserialize<'de> for ContentPart {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let map = Map::<String, Value>::deserialize(deserializer)?;
        Ok(ContentPart::from_map(map))
    }
}

impl ContentPart {
    fn from_map(mut map: Map<String, Value>) -> Self {
        let kind = map
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let text_only = |map: &Map<String, Value>, field: &str| {
            // A part round-trips as a typed variant only when it has exactly `type` and `field`.
            map.len() == 2 && map.get(field).is_some_and(Value::is_string)
        };
        match kind.as_str() {
            "input_text" if text_only(&map, "text") => ContentPart::InputText {
                text: take_string(&mut map, "text"),
            },
            "refusal" if text_only(&map, "refusal") => ContentPart::Refusal {
                refusal: take_string(&mut map, "refusal"),
            },
            "output_text" if map.get("text").is_some_and(Value::is_string) => {
                let text = take_string(&mut map, "text");
                map.remove("type");
                ContentPart::OutputText { text, extra: map }
            }
            "input_image" => {
                map.remove("type");
                ContentPart::InputImage(map)
            }
            "input_file" => {
                map.remove("type");
                ContentPart::InputFile(map)
            }
            _ => ContentPart::Other(Value::Object(map)),
        }
    }
}

fn take_string(map: &mut Map<String, Value>, field: &str) -> String {
    match map.remove(field) {
        Some(Value::String(text)) => text,
        _ => String::new(),
    }
}

/// Accepts message content as a plain string (the "easy input" form) or as a list of parts.
fn content_from_string_or_parts<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<ContentPart>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Content {
        Text(String),
        Parts(Vec<ContentPart>),
    }
    Ok(match Content::deserialize(deserializer)? {
        Content::Text(text) => vec![ContentPart::InputText { text }],
        Content::Parts(parts) => parts,
    })
}
