//! The request side of OpenResponses: a round's request as a streaming `POST /responses` body.

use std::borrow::Cow;

use noetic_core::item::Item;
use noetic_core::model::{ModelRequest, ToolChoice};
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};
use serde_json::{Map, Value};

use crate::body::{put, put_extra};
use crate::error::ProviderError;

/// Settings that shape the request body beyond the round's own request.
#[derive(Debug, Clone, Default)]
pub(crate) struct BodyOptions {
    /// `store` (OpenAI keeps responses server-side unless told not to).
    pub(crate) store: Option<bool>,
    /// `include` (e.g. `reasoning.encrypted_content`, needed to replay reasoning with `store: false`).
    pub(crate) include: Vec<String>,
    /// Send tools with `strict: true` and strict-mode-safe schemas.
    pub(crate) strict_tools: bool,
}

/// The body of `POST /responses`; `extra` fields replace ours of the same name (see [`crate::body`]).
struct Body<'a> {
    model: &'a str,
    instructions: Option<&'a str>,
    input: &'a [Item],
    tools: Vec<FunctionTool<'a>>,
    tool_choice: Option<&'a ToolChoice>,
    temperature: Option<f64>,
    top_p: Option<f64>,
    max_output_tokens: Option<u64>,
    text: Option<TextOptions<'a>>,
    store: Option<bool>,
    include: &'a [String],
    extra: &'a Map<String, Value>,
}

impl Serialize for Body<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let extra = self.extra;
        let mut map = serializer.serialize_map(None)?;
        put(&mut map, extra, "model", self.model)?;
        if let Some(instructions) = self.instructions {
            put(&mut map, extra, "instructions", instructions)?;
        }
        put(&mut map, extra, "input", &Input(self.input))?;
        if !self.tools.is_empty() {
            put(&mut map, extra, "tools", &self.tools)?;
            if let Some(choice) = self.tool_choice {
                put(&mut map, extra, "tool_choice", &tool_choice(choice))?;
            }
        }
        put(&mut map, extra, "stream", &true)?;
        if let Some(temperature) = self.temperature {
            put(&mut map, extra, "temperature", &temperature)?;
        }
        if let Some(top_p) = self.top_p {
            put(&mut map, extra, "top_p", &top_p)?;
        }
        if let Some(max_output_tokens) = self.max_output_tokens {
            put(&mut map, extra, "max_output_tokens", &max_output_tokens)?;
        }
        if let Some(text) = &self.text {
            put(&mut map, extra, "text", text)?;
        }
        if let Some(store) = self.store {
            put(&mut map, extra, "store", &store)?;
        }
        if !self.include.is_empty() {
            put(&mut map, extra, "include", self.include)?;
        }
        put_extra(&mut map, extra)?;
        map.end()
    }
}

#[derive(Serialize)]
struct FunctionTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    name: &'a str,
    description: &'a str,
    parameters: std::borrow::Cow<'a, Value>,
    strict: bool,
}

#[derive(Serialize)]
struct TextOptions<'a> {
    format: JsonSchemaFormat<'a>,
}

#[derive(Serialize)]
struct JsonSchemaFormat<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    name: &'a str,
    schema: &'a Value,
    strict: bool,
}

/// Serializes a round's request as a streaming `POST /responses` body; `extra` fields replace the
/// body's own of the same name (see [`crate::body`]).
///
/// # Errors
/// [`ProviderError::InvalidConfig`] when the body does not serialize.
pub(crate) fn request_body(
    request: &ModelRequest<'_>,
    options: &BodyOptions,
    extra: &Map<String, Value>,
) -> Result<Vec<u8>, ProviderError> {
    let body = Body {
        model: request.model,
        instructions: request.instructions,
        input: request.input,
        tools: request
            .tools
            .iter()
            .map(|tool| FunctionTool {
                kind: "function",
                name: &tool.name,
                description: &tool.description,
                parameters: if options.strict_tools {
                    Cow::Owned(crate::strict::strict_schema(&tool.parameters))
                } else {
                    Cow::Borrowed(&tool.parameters)
                },
                strict: options.strict_tools,
            })
            .collect(),
        tool_choice: request.params.tool_choice.as_ref(),
        temperature: request.params.temperature,
        top_p: request.params.top_p,
        max_output_tokens: request.params.max_output_tokens,
        text: request.output.map(|output| TextOptions {
            format: JsonSchemaFormat {
                kind: "json_schema",
                name: &output.name,
                schema: &output.schema,
                strict: false,
            },
        }),
        store: options.store,
        include: &options.include,
        extra,
    };
    serde_json::to_vec(&body).map_err(|error| ProviderError::InvalidConfig {
        field: "request",
        message: error.to_string(),
    })
}

/// `tool_choice` as OpenResponses spells it.
fn tool_choice(choice: &ToolChoice) -> Value {
    match choice {
        ToolChoice::None => Value::from("none"),
        ToolChoice::Required => Value::from("required"),
        ToolChoice::Tool(name) => serde_json::json!({"type": "function", "name": name}),
        // `Auto`, and choices newer than this wire.
        _ => Value::from("auto"),
    }
}

/// The input items as OpenResponses takes them: without our `is_error` (a failed call's output) and
/// `cache_breakpoint` (a marked message): the wire has no such fields, and a strict server refuses
/// unknown ones.
struct Input<'a>(&'a [Item]);

impl Serialize for Input<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq;
        let mut seq = serializer.serialize_seq(Some(self.0.len()))?;
        for item in self.0 {
            match item {
                Item::FunctionCallOutput(output) if output.is_error => {
                    let mut plain = output.clone();
                    plain.is_error = false;
                    seq.serialize_element(&Item::FunctionCallOutput(plain))?;
                }
                Item::Message(message) if message.cache_breakpoint => {
                    let mut plain = message.clone();
                    plain.cache_breakpoint = false;
                    seq.serialize_element(&Item::Message(plain))?;
                }
                other => seq.serialize_element(other)?,
            }
        }
        seq.end()
    }
}
