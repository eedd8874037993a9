//! The request side of Chat Completions: a round's request as a streaming `POST /chat/completions`
//! body (the items themselves become `messages` in [`super::messages`]).

use noetic_core::model::{ModelParams, ModelRequest, OutputFormat, ToolChoice};
use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};
use serde_json::{Map, Value};

use super::messages::{ChatMessage, messages};
use crate::body::{put, put_extra};
use crate::error::ProviderError;

/// Serializes a round's request as a streaming `POST /chat/completions` body; `extra` fields replace
/// the body's own of the same name (`provider`, `reasoning`, `max_completion_tokens`, …; see
/// [`crate::body`]).
///
/// # Errors
/// [`ProviderError::InvalidConfig`] when an item cannot be expressed in Chat Completions (an image given
/// only by `file_id`, a file part with no data) or the body does not serialize.
pub(crate) fn request_body(
    request: &ModelRequest<'_>,
    extra: &Map<String, Value>,
) -> Result<Vec<u8>, ProviderError> {
    let body = Body {
        model: request.model,
        messages: messages(request)?,
        tools: request
            .tools
            .iter()
            .map(|tool| Tool {
                kind: "function",
                function: FunctionDef {
                    name: &tool.name,
                    description: &tool.description,
                    parameters: &tool.parameters,
                },
            })
            .collect(),
        params: request.params,
        output: request.output,
        extra,
    };
    serde_json::to_vec(&body).map_err(|error| ProviderError::InvalidConfig {
        field: "request",
        message: error.to_string(),
    })
}

struct Body<'a> {
    model: &'a str,
    messages: Vec<ChatMessage<'a>>,
    tools: Vec<Tool<'a>>,
    params: &'a ModelParams,
    output: Option<&'a OutputFormat>,
    extra: &'a Map<String, Value>,
}

impl Serialize for Body<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let extra = self.extra;
        let mut map = serializer.serialize_map(None)?;
        put(&mut map, extra, "model", self.model)?;
        put(&mut map, extra, "messages", &self.messages)?;
        if !self.tools.is_empty() {
            put(&mut map, extra, "tools", &self.tools)?;
            if let Some(choice) = &self.params.tool_choice {
                put(&mut map, extra, "tool_choice", &tool_choice(choice))?;
            }
        }
        put(&mut map, extra, "stream", &true)?;
        put(
            &mut map,
            extra,
            "stream_options",
            &StreamOptions {
                include_usage: true,
            },
        )?;
        if let Some(temperature) = self.params.temperature {
            put(&mut map, extra, "temperature", &temperature)?;
        }
        if let Some(top_p) = self.params.top_p {
            put(&mut map, extra, "top_p", &top_p)?;
        }
        if let Some(max_tokens) = self.params.max_output_tokens {
            put(&mut map, extra, "max_tokens", &max_tokens)?;
        }
        if !self.params.stop.is_empty() {
            put(&mut map, extra, "stop", &self.params.stop)?;
        }
        if let Some(output) = self.output {
            let format = ResponseFormat {
                kind: "json_schema",
                json_schema: JsonSchema {
                    name: &output.name,
                    schema: &output.schema,
                    strict: false,
                },
            };
            put(&mut map, extra, "response_format", &format)?;
        }
        put_extra(&mut map, extra)?;
        map.end()
    }
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Serialize)]
struct Tool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: FunctionDef<'a>,
}

#[derive(Serialize)]
struct FunctionDef<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
}

#[derive(Serialize)]
struct ResponseFormat<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    json_schema: JsonSchema<'a>,
}

#[derive(Serialize)]
struct JsonSchema<'a> {
    name: &'a str,
    schema: &'a Value,
    strict: bool,
}

/// `tool_choice` as Chat Completions spells it.
fn tool_choice(choice: &ToolChoice) -> Value {
    match choice {
        ToolChoice::None => Value::from("none"),
        ToolChoice::Required => Value::from("required"),
        ToolChoice::Tool(name) => {
            serde_json::json!({"type": "function", "function": {"name": name}})
        }
        // `Auto`, and choices newer than this wire.
        _ => Value::from("auto"),
    }
}
