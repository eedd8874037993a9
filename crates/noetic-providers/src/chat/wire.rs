//! The Chat Completions wire format (`POST {base}/chat/completions`), translated to and from the
//! OpenResponses model so the rest of the system sees one format.
//!
//! Out: a round's items become chat `messages`. Function calls join the assistant message right before
//! them as `tool_calls`, their outputs become `tool` messages, and reasoning items are dropped, except
//! OpenRouter's `reasoning_details`, which ride on the next assistant message (Anthropic models need
//! their signed reasoning replayed).
//!
//! In: [`ChatDecoder`] assembles output items from the chunks' deltas and emits the OpenResponses events
//! a Responses server would have sent: `output_item.added`, text/reasoning/argument deltas,
//! `output_item.done` with the complete item, and one terminal event carrying status, usage and cost.

use std::borrow::Cow;

use noetic_core::item::{ContentPart, FunctionCallItem, Item, MessageItem, ReasoningItem, Role};
use noetic_core::model::{
    ModelParams, ModelRequest, OutputFormat, ReasoningKind, ResponseSnapshot, ResponseStatus,
};
use noetic_core::{ResponseEvent, TokenUsage};
use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::decode::WireDecoder;
use crate::error::ProviderError;

/// Settings that shape the request body beyond the round's own request.
#[derive(Debug, Clone, Default)]
pub(crate) struct ChatBodyOptions {
    /// Extra top-level fields, merged last: a key given here replaces the body's own field of that
    /// name (`provider`, `reasoning`, `max_completion_tokens`, …).
    pub(crate) extra: Map<String, Value>,
}

/// Serializes a round's request as a streaming `POST /chat/completions` body.
///
/// # Errors
/// [`ProviderError::InvalidConfig`] when an item cannot be expressed in Chat Completions (an image given
/// only by `file_id`, a file part with no data) or the body does not serialize.
pub(crate) fn request_body(
    request: &ModelRequest<'_>,
    options: &ChatBodyOptions,
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
        extra: &options.extra,
    };
    serde_json::to_vec(&body).map_err(|error| ProviderError::InvalidConfig {
        field: "request",
        message: error.to_string(),
    })
}

/// Translates one streamed Chat Completions response into OpenResponses events.
///
/// Items open in the order their first delta arrives and get output indexes 0, 1, 2, … in that order.
/// One kind of item is open at a time (a message, a reasoning item, or a group of parallel function
/// calls): when another kind starts, at `finish_reason`, and at the end, the open items close in output
/// order with their complete contents. The terminal event comes at `[DONE]`, or at the end of the bytes
/// when the server sent a `finish_reason` (or an error) but no `[DONE]`.
#[derive(Debug, Default)]
pub(crate) struct ChatDecoder {
    /// `Created` has been emitted (on the first chunk).
    started: bool,
    /// The terminal event has been emitted; later data is ignored.
    done: bool,
    /// The chunk `id` (OpenRouter's generation id), for the snapshot and the item ids.
    response_id: Option<String>,
    /// The chunk `model`.
    model: Option<String>,
    /// The output index the next item gets.
    next_output_index: u32,
    /// The items currently open.
    open: Open,
    /// The first `finish_reason` (an `error` one overrides it).
    finish: Option<Finish>,
    /// The last usage reported.
    usage: Option<TokenUsage>,
    /// OpenRouter's `usage.cost`.
    cost: Option<f64>,
    /// The first mid-stream error, as `code: message`.
    error: Option<String>,
}

impl ChatDecoder {
    /// A decoder for one response.
    pub(crate) fn new() -> Self {
        Self::default()
    }
}

impl WireDecoder for ChatDecoder {
    fn decode(&mut self, data: &str, out: &mut Vec<ResponseEvent>) -> Result<(), ProviderError> {
        if self.done {
            return Ok(());
        }
        if data.trim_ascii() == "[DONE]" {
            self.end(out);
            return Ok(());
        }
        let chunk: Chunk<'_> = serde_json::from_str(data)
            .map_err(|error| ProviderError::event(CHUNK_TYPE, error, data))?;
        if !self.started {
            self.started = true;
            self.response_id = chunk.id.map(Cow::into_owned);
            self.model = chunk.model.map(Cow::into_owned);
            out.push(ResponseEvent::Created {
                response_id: self.response_id.clone(),
                model: self.model.clone(),
            });
        }
        // Only the first choice is a response: we never ask for `n > 1`.
        for choice in chunk.choices.into_iter().flatten() {
            if choice.index.unwrap_or(0) != 0 {
                continue;
            }
            if let Some(delta) = choice.delta {
                self.delta(delta, out);
            }
            if let Some(reason) = choice.finish_reason {
                self.finish_reason(&reason, out);
            }
        }
        if let Some(error) = chunk.error {
            let code = error.code.and_then(code_text);
            let message = error.message.unwrap_or_default();
            if self.error.is_none() {
                self.error = Some(match &code {
                    Some(code) => format!("{code}: {message}"),
                    None => message.clone(),
                });
            }
            out.push(ResponseEvent::Error { code, message });
        }
        if let Some(usage) = chunk.usage {
            if usage.cost.is_some() {
                self.cost = usage.cost;
            }
            self.usage = Some(usage.into_usage());
        }
        Ok(())
    }

    fn finish(&mut self, out: &mut Vec<ResponseEvent>) -> Result<(), ProviderError> {
        // Some servers omit `[DONE]`; a `finish_reason` (or an error) still makes the response whole.
        if !self.done && (self.finish.is_some() || self.error.is_some()) {
            self.end(out);
        }
        Ok(())
    }
}

/// The event type named in decoding errors.
const CHUNK_TYPE: &str = "chat.completion.chunk";

/// How the response ended, from `finish_reason`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Finish {
    /// `stop`, `tool_calls`, `function_call`, or a reason we do not know.
    Completed,
    /// `length`: the output token cap.
    Length,
    /// `content_filter`.
    ContentFilter,
    /// `error`.
    Error,
}

impl Finish {
    fn parse(reason: &str) -> Self {
        match reason {
            "length" => Finish::Length,
            "content_filter" => Finish::ContentFilter,
            "error" => Finish::Error,
            // Servers invent reasons (`eos`, `end_turn`); the text stands as given.
            _ => Finish::Completed,
        }
    }

    /// Whether items cut off by this finish are incomplete.
    fn cuts_items(self) -> bool {
        matches!(self, Finish::Length | Finish::ContentFilter)
    }
}

/// The items open while the stream runs: one kind at a time.
#[derive(Debug, Default)]
enum Open {
    #[default]
    Nothing,
    Message(OpenMessage),
    Reasoning(OpenReasoning),
    /// Parallel calls, in output order.
    Calls(Vec<OpenCall>),
}

#[derive(Debug)]
struct OpenMessage {
    output_index: u32,
    id: String,
    text: String,
    refusal: String,
}

#[derive(Debug)]
struct OpenReasoning {
    output_index: u32,
    id: String,
    text: String,
    /// OpenRouter's `reasoning_details` entries, merged by `index`.
    details: Vec<Map<String, Value>>,
}

#[derive(Debug)]
struct OpenCall {
    /// `tool_calls[].index`, which later fragments name.
    wire_index: Option<u32>,
    output_index: u32,
    call_id: String,
    name: String,
    arguments: String,
}

impl ChatDecoder {
    fn delta(&mut self, delta: Delta<'_>, out: &mut Vec<ResponseEvent>) {
        // Within one chunk, reasoning precedes the answer it leads to.
        let details = delta.reasoning_details.unwrap_or_default();
        let reasoning = delta
            .reasoning
            .filter(|text| !text.is_empty())
            .or(delta.reasoning_content.filter(|text| !text.is_empty()));
        if reasoning.is_some() || !details.is_empty() {
            // OpenRouter sends the text twice, as `reasoning` and inside `reasoning_details`: the
            // details' text counts only when `reasoning` is absent.
            let text = reasoning.unwrap_or_else(|| Cow::Owned(details_text(&details)));
            self.reasoning(&text, details, out);
        }
        if let Some(content) = delta.content.filter(|text| !text.is_empty()) {
            self.content(&content, out);
        }
        if let Some(refusal) = delta.refusal.filter(|text| !text.is_empty()) {
            self.ensure_message(out);
            if let Open::Message(message) = &mut self.open {
                message.refusal.push_str(&refusal);
            }
        }
        for call in delta.tool_calls.into_iter().flatten() {
            self.tool_call(call, out);
        }
    }

    fn reasoning(
        &mut self,
        text: &str,
        details: Vec<Map<String, Value>>,
        out: &mut Vec<ResponseEvent>,
    ) {
        if !matches!(self.open, Open::Reasoning(_)) {
            self.close(false, out);
            let output_index = self.take_output_index();
            let id = self.item_id("rs", output_index);
            out.push(ResponseEvent::OutputItemAdded {
                output_index,
                item: Item::Reasoning(ReasoningItem {
                    id: Some(id.clone()),
                    summary: Vec::new(),
                    content: None,
                    encrypted_content: None,
                    extra: Map::new(),
                }),
            });
            self.open = Open::Reasoning(OpenReasoning {
                output_index,
                id,
                text: String::new(),
                details: Vec::new(),
            });
        }
        if let Open::Reasoning(reasoning) = &mut self.open {
            if !text.is_empty() {
                reasoning.text.push_str(text);
                out.push(ResponseEvent::ReasoningDelta {
                    kind: ReasoningKind::Text,
                    output_index: reasoning.output_index,
                    part_index: 0,
                    delta: text.to_owned(),
                });
            }
            for detail in details {
                merge_detail(&mut reasoning.details, detail);
            }
        }
    }

    fn content(&mut self, text: &str, out: &mut Vec<ResponseEvent>) {
        self.ensure_message(out);
        if let Open::Message(message) = &mut self.open {
            message.text.push_str(text);
            out.push(ResponseEvent::OutputTextDelta {
                output_index: message.output_index,
                content_index: 0,
                delta: text.to_owned(),
            });
        }
    }

    fn ensure_message(&mut self, out: &mut Vec<ResponseEvent>) {
        if matches!(self.open, Open::Message(_)) {
            return;
        }
        self.close(false, out);
        let output_index = self.take_output_index();
        let id = self.item_id("msg", output_index);
        out.push(ResponseEvent::OutputItemAdded {
            output_index,
            item: Item::Message(MessageItem {
                id: Some(id.clone()),
                role: Role::Assistant,
                content: Vec::new(),
                extra: Map::new(),
            }),
        });
        self.open = Open::Message(OpenMessage {
            output_index,
            id,
            text: String::new(),
            refusal: String::new(),
        });
    }

    fn tool_call(&mut self, call: ToolCallDelta<'_>, out: &mut Vec<ResponseEvent>) {
        let call_id = call.id.filter(|id| !id.is_empty());
        let (name, arguments) = match call.function {
            Some(function) => (function.name, function.arguments),
            None => (None, None),
        };
        let position = match &self.open {
            Open::Calls(calls) => find_call(calls, call.index, call_id.as_deref()),
            _ => None,
        };
        let position = match position {
            Some(position) => position,
            None => self.open_call(call.index, call_id, name.as_deref(), out),
        };
        let Open::Calls(calls) = &mut self.open else {
            return;
        };
        let Some(open) = calls.get_mut(position) else {
            return;
        };
        // Some servers repeat the whole name on every fragment: the first one stands.
        if open.name.is_empty()
            && let Some(name) = name
        {
            open.name.push_str(&name);
        }
        if let Some(arguments) = arguments.filter(|text| !text.is_empty()) {
            open.arguments.push_str(&arguments);
            out.push(ResponseEvent::FunctionCallArgumentsDelta {
                output_index: open.output_index,
                delta: arguments.into_owned(),
            });
        }
    }

    /// Opens a function call item; returns its position among the open calls.
    fn open_call(
        &mut self,
        wire_index: Option<u32>,
        call_id: Option<Cow<'_, str>>,
        name: Option<&str>,
        out: &mut Vec<ResponseEvent>,
    ) -> usize {
        if !matches!(self.open, Open::Calls(_)) {
            self.close(false, out);
            self.open = Open::Calls(Vec::new());
        }
        let output_index = self.take_output_index();
        // A call needs an id for its output to echo; servers that send none get a stable one.
        let call_id = match call_id {
            Some(call_id) => call_id.into_owned(),
            None => self.item_id("call", output_index),
        };
        let name = name.unwrap_or_default().to_owned();
        out.push(ResponseEvent::OutputItemAdded {
            output_index,
            item: Item::FunctionCall(FunctionCallItem {
                id: Some(format!("fc_{call_id}")),
                call_id: call_id.clone(),
                name: name.clone(),
                arguments: String::new(),
                extra: Map::new(),
            }),
        });
        let Open::Calls(calls) = &mut self.open else {
            return 0;
        };
        calls.push(OpenCall {
            wire_index,
            output_index,
            call_id,
            name,
            arguments: String::new(),
        });
        calls.len() - 1
    }

    fn finish_reason(&mut self, reason: &str, out: &mut Vec<ResponseEvent>) {
        let finish = Finish::parse(reason);
        // Anthropic models repeat `finish_reason` on the usage chunk: the first one stands, unless a
        // later one reports an error.
        if self.finish.is_none() || finish == Finish::Error {
            self.finish = Some(finish);
        }
        self.close(finish.cuts_items(), out);
    }

    /// Closes the open items and emits the terminal event.
    fn end(&mut self, out: &mut Vec<ResponseEvent>) {
        let finish = self.finish.unwrap_or(Finish::Completed);
        self.close(finish.cuts_items(), out);
        let (status, error, incomplete_reason) = match (&self.error, finish) {
            (Some(error), _) => (ResponseStatus::Failed, Some(error.clone()), None),
            (None, Finish::Error) => (
                ResponseStatus::Failed,
                Some("the provider ended the response with finish_reason `error`".to_owned()),
                None,
            ),
            (None, Finish::Length) => (
                ResponseStatus::Incomplete,
                None,
                Some("max_output_tokens".to_owned()),
            ),
            (None, Finish::ContentFilter) => (
                ResponseStatus::Incomplete,
                None,
                Some("content_filter".to_owned()),
            ),
            (None, Finish::Completed) => (ResponseStatus::Completed, None, None),
        };
        out.push(ResponseEvent::Finished(Box::new(ResponseSnapshot {
            id: self.response_id.clone(),
            model: self.model.clone(),
            status: Some(status),
            output: Vec::new(),
            usage: self.usage,
            cost: self.cost,
            error,
            incomplete_reason,
        })));
        self.done = true;
    }

    /// Closes the open items in output order, marking them `status: incomplete` when cut off.
    fn close(&mut self, incomplete: bool, out: &mut Vec<ResponseEvent>) {
        match std::mem::take(&mut self.open) {
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

    fn take_output_index(&mut self) -> u32 {
        let index = self.next_output_index;
        self.next_output_index += 1;
        index
    }

    /// `msg_<response id>` for the first item (the usual single message), suffixed with the output
    /// index for later ones so ids stay unique within the response.
    fn item_id(&self, prefix: &str, output_index: u32) -> String {
        let base = self.response_id.as_deref().unwrap_or("chat");
        if output_index == 0 {
            format!("{prefix}_{base}")
        } else {
            format!("{prefix}_{base}_{output_index}")
        }
    }
}

/// The open call a fragment continues: by `index` (unless it names another call id), else by call id,
/// else the last one.
fn find_call(calls: &[OpenCall], wire_index: Option<u32>, call_id: Option<&str>) -> Option<usize> {
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
fn merge_detail(details: &mut Vec<Map<String, Value>>, detail: Map<String, Value>) {
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
fn details_text(details: &[Map<String, Value>]) -> String {
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

fn status_extra(incomplete: bool) -> Map<String, Value> {
    let mut extra = Map::new();
    if incomplete {
        extra.insert("status".to_owned(), Value::from("incomplete"));
    }
    extra
}

fn code_text(code: Value) -> Option<String> {
    match code {
        Value::Null => None,
        Value::String(text) => Some(text),
        other => Some(other.to_string()),
    }
}

// ---- Stream chunks: the fields we read, borrowed from the chunk's JSON. ----

#[derive(Deserialize)]
struct Chunk<'a> {
    #[serde(default, borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    model: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    choices: Option<Vec<Choice<'a>>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<WireError>,
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(default)]
    index: Option<u32>,
    #[serde(default, borrow)]
    delta: Option<Delta<'a>>,
    #[serde(default, borrow)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(default, borrow)]
    content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    refusal: Option<Cow<'a, str>>,
    /// OpenRouter (and vLLM's newer reasoning parsers).
    #[serde(default, borrow)]
    reasoning: Option<Cow<'a, str>>,
    /// DeepSeek, vLLM, llama.cpp.
    #[serde(default, borrow)]
    reasoning_content: Option<Cow<'a, str>>,
    /// OpenRouter's structured reasoning (text with a later signature, or encrypted data).
    #[serde(default)]
    reasoning_details: Option<Vec<Map<String, Value>>>,
    #[serde(default, borrow)]
    tool_calls: Option<Vec<ToolCallDelta<'a>>>,
}

#[derive(Deserialize)]
struct ToolCallDelta<'a> {
    #[serde(default)]
    index: Option<u32>,
    #[serde(default, borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    function: Option<FunctionDelta<'a>>,
}

#[derive(Deserialize)]
struct FunctionDelta<'a> {
    #[serde(default, borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    arguments: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    #[serde(default)]
    prompt_tokens_details: Option<PromptDetails>,
    #[serde(default)]
    completion_tokens_details: Option<CompletionDetails>,
    /// OpenRouter's cost in USD.
    #[serde(default)]
    cost: Option<f64>,
}

#[derive(Deserialize)]
struct PromptDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct CompletionDetails {
    #[serde(default)]
    reasoning_tokens: Option<u64>,
}

impl WireUsage {
    fn into_usage(self) -> TokenUsage {
        TokenUsage {
            input_tokens: self.prompt_tokens,
            output_tokens: self.completion_tokens,
            cached_tokens: self
                .prompt_tokens_details
                .and_then(|details| details.cached_tokens),
            reasoning_tokens: self
                .completion_tokens_details
                .and_then(|details| details.reasoning_tokens),
        }
    }
}

/// A mid-stream `error` object (OpenRouter: `{code: 400, message}`).
#[derive(Deserialize)]
struct WireError {
    #[serde(default)]
    code: Option<Value>,
    #[serde(default)]
    message: Option<String>,
}

// ---- Request body. ----

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
        for (key, value) in extra {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

/// Writes one of the body's own fields, unless `extra` replaces it (no duplicate keys on the wire).
fn put<M: SerializeMap, V: Serialize + ?Sized>(
    map: &mut M,
    extra: &Map<String, Value>,
    key: &str,
    value: &V,
) -> Result<(), M::Error> {
    if extra.contains_key(key) {
        return Ok(());
    }
    map.serialize_entry(key, value)
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

#[derive(Serialize)]
struct ChatMessage<'a> {
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
fn messages<'a>(request: &ModelRequest<'a>) -> Result<Vec<ChatMessage<'a>>, ProviderError> {
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

#[cfg(test)]
mod tests {
    use noetic_core::model::{ModelResponse, ResponseAccumulator, ToolSpec};
    use serde_json::json;

    use super::*;
    use crate::sse::SseDecoder;

    /// The `data:` payloads of a recorded stream, in order.
    fn fixture_data(name: &str) -> Vec<String> {
        let path = format!(
            "{}/../../fixtures/openresponses/{name}",
            env!("CARGO_MANIFEST_DIR")
        );
        let bytes = std::fs::read(&path).unwrap_or_else(|error| panic!("{path}: {error}"));
        let mut data = Vec::new();
        let mut sse = SseDecoder::default();
        sse.feed(&bytes, &mut |event| data.push(event.data))
            .unwrap();
        assert!(!sse.has_pending(), "{name} ends mid-event");
        data
    }

    /// Decodes the payloads (then ends the stream) and checks the event grammar.
    fn decode_all<S: AsRef<str>>(data: &[S]) -> Vec<ResponseEvent> {
        let mut decoder = ChatDecoder::new();
        let mut events = Vec::new();
        for payload in data {
            decoder.decode(payload.as_ref(), &mut events).unwrap();
        }
        decoder.finish(&mut events).unwrap();
        check_grammar(&events);
        events
    }

    fn fold(events: &[ResponseEvent]) -> ModelResponse {
        let mut accumulator = ResponseAccumulator::new();
        for event in events {
            accumulator.push(event);
        }
        accumulator.finish("test", 0).unwrap()
    }

    fn replay(name: &str) -> (Vec<ResponseEvent>, ModelResponse) {
        let events = decode_all(&fixture_data(name));
        let response = fold(&events);
        (events, response)
    }

    /// The OpenResponses order rules: `Created` first; items open at output indexes 0, 1, 2, …; deltas
    /// only for open items; each item closes once, in output order; one terminal event, last, after
    /// every item closed.
    fn check_grammar(events: &[ResponseEvent]) {
        let mut open: Vec<bool> = Vec::new();
        let mut last_done: Option<u32> = None;
        let mut finished = false;
        for (position, event) in events.iter().enumerate() {
            assert!(!finished, "event after the terminal event: {event:?}");
            match event {
                ResponseEvent::Created { .. } => assert_eq!(position, 0, "Created is first"),
                ResponseEvent::OutputItemAdded { output_index, .. } => {
                    assert_eq!(*output_index as usize, open.len(), "indexes open in order");
                    open.push(true);
                }
                ResponseEvent::OutputTextDelta { output_index, .. }
                | ResponseEvent::ReasoningDelta { output_index, .. }
                | ResponseEvent::FunctionCallArgumentsDelta { output_index, .. }
                | ResponseEvent::FunctionCallArgumentsDone { output_index, .. } => {
                    assert!(open[*output_index as usize], "{event:?} for a closed item");
                }
                ResponseEvent::OutputItemDone { output_index, .. } => {
                    assert!(open[*output_index as usize], "{event:?} closes twice");
                    assert!(
                        last_done < Some(*output_index),
                        "items close in output order"
                    );
                    open[*output_index as usize] = false;
                    last_done = Some(*output_index);
                }
                ResponseEvent::Finished(_) => {
                    assert!(open.iter().all(|open| !open), "items open at the end");
                    finished = true;
                }
                _ => {}
            }
        }
    }

    fn finished(events: &[ResponseEvent]) -> Vec<&ResponseSnapshot> {
        events
            .iter()
            .filter_map(|event| match event {
                ResponseEvent::Finished(snapshot) => Some(&**snapshot),
                _ => None,
            })
            .collect()
    }

    fn usage(input: u64, output: u64, cached: Option<u64>, reasoning: Option<u64>) -> TokenUsage {
        TokenUsage {
            input_tokens: input,
            output_tokens: output,
            cached_tokens: cached,
            reasoning_tokens: reasoning,
        }
    }

    fn arguments(call: &FunctionCallItem) -> Value {
        serde_json::from_str(&call.arguments).unwrap()
    }

    fn reasoning(item: &Item) -> &ReasoningItem {
        match item {
            Item::Reasoning(reasoning) => reasoning,
            other => panic!("not reasoning: {other:?}"),
        }
    }

    fn chunk(delta: Value, finish_reason: Option<&str>) -> String {
        json!({
            "id": "chatcmpl-1",
            "model": "test-model",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        })
        .to_string()
    }

    // ---- Recorded streams. ----

    #[test]
    fn openai_parallel_tool_calls_become_two_complete_calls() {
        let (events, response) = replay("openai-chat.parallel-tool-calls.gpt-4o.sse");
        assert_eq!(
            events[0],
            ResponseEvent::Created {
                response_id: Some("chatcmpl-CMKAuuvC6E26nL6HLZzTrysEvC8Ln".to_owned()),
                model: Some("gpt-4o-2024-08-06".to_owned()),
            }
        );
        assert_eq!(response.status, ResponseStatus::Completed);
        // The opening chunk's `content: null` opens no message: the response is the two calls.
        assert_eq!(response.items.len(), 2);
        let calls: Vec<_> = response.function_calls().collect();
        assert_eq!(calls[0].call_id, "call_NS4iQj14cDFwc0BnrKqDHavt");
        assert_eq!(calls[0].name, "get_weather");
        assert_eq!(arguments(calls[0]), json!({"city": "Mexico City"}));
        assert_eq!(calls[1].call_id, "call_SkGkkGDvHQEEk0CGbnAh2AQw");
        assert_eq!(calls[1].name, "get_product_name");
        assert_eq!(arguments(calls[1]), json!({}));
        // Five argument fragments for the first call, one for the second.
        let deltas = |index| {
            events
                .iter()
                .filter(|event| {
                    matches!(event, ResponseEvent::FunctionCallArgumentsDelta { output_index, .. } if *output_index == index)
                })
                .count()
        };
        assert_eq!((deltas(0), deltas(1)), (5, 1));
        assert_eq!(response.usage, Some(usage(417, 44, Some(0), Some(0))));
        assert_eq!(response.cost, None);
        assert_eq!(response.error, None);
        assert_eq!(finished(&events).len(), 1);
    }

    #[test]
    fn openrouter_text_with_usage_and_cost() {
        let (events, response) = replay("openrouter-chat.text-usage-cost.claude-haiku-4.5.sse");
        assert_eq!(
            response.id.as_deref(),
            Some("gen-1780944361-X5HAtL0Z2NQp8nHAiT6F")
        );
        assert_eq!(
            response.model.as_deref(),
            Some("anthropic/claude-4.5-haiku-20251001")
        );
        assert_eq!(response.status, ResponseStatus::Completed);
        assert_eq!(response.text().as_deref(), Some("1\n2\n3"));
        assert_eq!(response.items.len(), 1);
        assert_eq!(
            response.items[0].id(),
            Some("msg_gen-1780944361-X5HAtL0Z2NQp8nHAiT6F")
        );
        assert_eq!(response.usage, Some(usage(15, 9, Some(0), Some(0))));
        assert_eq!(response.cost, Some(0.00006));
        // The usage chunk repeats `finish_reason: stop`: still one terminal event.
        assert_eq!(finished(&events).len(), 1);
    }

    #[test]
    fn openrouter_reasoning_details_then_tool_call() {
        let (_, response) =
            replay("openrouter-chat.reasoning-details-then-tool-call.claude-haiku-4.5.sse");
        const THOUGHT: &str = "The user is asking for the weather in Berlin and specifically \
            requesting that I use the reasoning_weather tool. I have all the required parameters:\n\
            - city: \"Berlin\"\n\nLet me call the function with this parameter.";
        assert_eq!(response.status, ResponseStatus::Completed);
        assert_eq!(response.items.len(), 2);
        let thought = reasoning(&response.items[0]);
        assert_eq!(
            thought.content,
            Some(vec![json!({"type": "reasoning_text", "text": THOUGHT})])
        );
        // Fifteen `reasoning.text` fragments and the signature fragment merge into one entry.
        let details = &thought.extra["reasoning_details"];
        assert_eq!(details.as_array().map(Vec::len), Some(1));
        assert_eq!(details[0]["type"], "reasoning.text");
        assert_eq!(details[0]["text"], THOUGHT);
        assert_eq!(details[0]["format"], "anthropic-claude-v1");
        assert_eq!(details[0]["index"], 0);
        let signature = details[0]["signature"].as_str().unwrap();
        assert!(signature.starts_with("EvsCCkgIEBABGAIqQNe/") && signature.ends_with("RgB"));
        let call = response.items[1].as_function_call().unwrap();
        assert_eq!(call.call_id, "toolu_bdrk_01L9pX1Wp4FAEq9TT2Z6UAe7");
        assert_eq!(call.name, "reasoning_weather");
        assert_eq!(arguments(call), json!({"city": "Berlin"}));
        assert_eq!(response.usage, Some(usage(626, 106, Some(0), Some(54))));
        assert_eq!(response.cost, Some(0.001156));
    }

    #[test]
    fn openrouter_mid_stream_error_fails_the_response() {
        let (events, response) = replay("openrouter-chat.mid-stream-error.minimax-m2.sse");
        assert!(events.contains(&ResponseEvent::Error {
            code: Some("400".to_owned()),
            message: "Token limit reached".to_owned(),
        }));
        assert_eq!(response.status, ResponseStatus::Failed);
        assert_eq!(response.error.as_deref(), Some("400: Token limit reached"));
        assert_eq!(response.incomplete_reason, None);
        // The reasoning was cut off by `finish_reason: length` and says so.
        assert_eq!(response.items.len(), 1);
        let thought = reasoning(&response.items[0]);
        const THOUGHT: &str = "We need to respond to a greeting. The user";
        assert_eq!(
            thought.content,
            Some(vec![json!({"type": "reasoning_text", "text": THOUGHT})])
        );
        assert_eq!(thought.extra["status"], "incomplete");
        assert_eq!(
            thought.extra["reasoning_details"],
            json!([{"type": "reasoning.text", "text": THOUGHT, "index": 0, "format": null}])
        );
        // The error chunk carries the usage: more reasoning tokens than completion tokens, as sent.
        assert_eq!(response.usage, Some(usage(43, 10, Some(0), Some(11))));
        assert_eq!(response.cost, Some(0.0));
        assert_eq!(finished(&events).len(), 1);
    }

    #[test]
    fn openrouter_encrypted_reasoning_and_cached_tokens() {
        let (_, response) = replay("openrouter-chat.cached-tokens-cost.grok-4.sse");
        assert_eq!(response.status, ResponseStatus::Completed);
        assert_eq!(response.model.as_deref(), Some("x-ai/grok-4"));
        assert_eq!(response.items.len(), 2);
        // xAI reasons in private: one encrypted detail, no text.
        let thought = reasoning(&response.items[0]);
        assert_eq!(thought.content, None);
        let details = thought.extra["reasoning_details"].as_array().unwrap();
        assert_eq!(details.len(), 1);
        assert_eq!(details[0]["type"], "reasoning.encrypted");
        assert_eq!(
            details[0]["id"],
            "rs_619f3702-e30e-6ba5-7b57-466db8036365_us-east-1"
        );
        assert_eq!(details[0]["format"], "xai-responses-v1");
        assert!(
            details[0]["data"]
                .as_str()
                .unwrap()
                .starts_with("B7oH6rUO9kQM")
        );
        assert_eq!(
            response.text().as_deref(),
            Some(
                "I'm Grok, an AI built by xAI. I'm designed to be helpful, maximally truthful, and \
                 a bit witty—think a mix of the Hitchhiker's Guide to the Galaxy and JARVIS from Iron \
                 Man. My goal is to help you understand the universe (and maybe crack a few jokes \
                 along the way). What's on your mind?"
            )
        );
        assert_eq!(response.usage, Some(usage(687, 187, Some(679), Some(118))));
        assert_eq!(response.cost, Some(0.00333825));
    }

    // ---- Synthetic streams for what the recordings lack. ----

    #[test]
    fn interleaved_parallel_calls_keep_their_arguments_apart() {
        let call = |index: u32, id: Option<&str>, name: Option<&str>, arguments: &str| {
            let mut function = json!({"arguments": arguments});
            if let Some(name) = name {
                function["name"] = json!(name);
            }
            let mut call = json!({"index": index, "function": function});
            if let Some(id) = id {
                call["id"] = json!(id);
            }
            chunk(json!({"tool_calls": [call]}), None)
        };
        let data = [
            chunk(json!({"content": "Checking."}), None),
            call(0, Some("call_a"), Some("lookup"), "{\"q\":"),
            call(1, Some("call_b"), Some("lookup"), "{\"q\":"),
            call(0, None, None, "\"x\"}"),
            call(1, None, None, "\"y\"}"),
            chunk(json!({}), Some("tool_calls")),
            "[DONE]".to_owned(),
        ];
        let response = fold(&decode_all(&data));
        assert_eq!(response.text().as_deref(), Some("Checking."));
        let calls: Vec<_> = response
            .function_calls()
            .map(|call| (call.call_id.as_str(), call.name.as_str(), arguments(call)))
            .collect();
        assert_eq!(
            calls,
            [
                ("call_a", "lookup", json!({"q": "x"})),
                ("call_b", "lookup", json!({"q": "y"}))
            ]
        );
        assert_eq!(response.items[1].id(), Some("fc_call_a"));
    }

    #[test]
    fn absent_cached_tokens_stay_absent() {
        let data = [
            chunk(json!({"content": "hi"}), Some("stop")),
            json!({"id": "chatcmpl-1", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 1}})
                .to_string(),
            "[DONE]".to_owned(),
        ];
        let response = fold(&decode_all(&data));
        assert_eq!(response.usage, Some(usage(5, 1, None, None)));
        assert_eq!(response.cost, None);
    }

    #[test]
    fn reasoning_content_then_text_are_two_items() {
        let data = [
            chunk(
                json!({"role": "assistant", "reasoning_content": "Think"}),
                None,
            ),
            chunk(json!({"reasoning_content": "ing."}), None),
            chunk(json!({"content": "Done."}), None),
            chunk(json!({}), Some("stop")),
            "[DONE]".to_owned(),
        ];
        let events = decode_all(&data);
        let response = fold(&events);
        assert_eq!(response.items.len(), 2);
        let thought = reasoning(&response.items[0]);
        assert_eq!(
            thought.content,
            Some(vec![json!({"type": "reasoning_text", "text": "Thinking."})])
        );
        assert!(!thought.extra.contains_key("reasoning_details"));
        assert_eq!(response.text().as_deref(), Some("Done."));
        assert_eq!(response.items[1].id(), Some("msg_chatcmpl-1_1"));
    }

    #[test]
    fn finish_reason_without_done_finishes_at_the_end() {
        let events = decode_all(&[chunk(json!({"content": "hi"}), Some("stop"))]);
        assert_eq!(finished(&events).len(), 1);
        assert_eq!(fold(&events).text().as_deref(), Some("hi"));
    }

    #[test]
    fn a_stream_without_finish_reason_or_done_is_truncated() {
        let events = decode_all(&[chunk(json!({"content": "hi"}), None)]);
        assert!(finished(&events).is_empty());
        let mut accumulator = ResponseAccumulator::new();
        for event in &events {
            accumulator.push(event);
        }
        assert!(accumulator.finish("test", 0).is_err());
    }

    #[test]
    fn length_and_content_filter_are_incomplete() {
        for (reason, expected) in [
            ("length", "max_output_tokens"),
            ("content_filter", "content_filter"),
        ] {
            let data = [
                chunk(json!({"content": "cut"}), Some(reason)),
                "[DONE]".to_owned(),
            ];
            let response = fold(&decode_all(&data));
            assert_eq!(response.status, ResponseStatus::Incomplete);
            assert_eq!(response.incomplete_reason.as_deref(), Some(expected));
            let Item::Message(message) = &response.items[0] else {
                panic!("not a message: {:?}", response.items[0]);
            };
            assert_eq!(message.extra["status"], "incomplete");
        }
        let data = [chunk(json!({}), Some("error")), "[DONE]".to_owned()];
        assert_eq!(fold(&decode_all(&data)).status, ResponseStatus::Failed);
    }

    #[test]
    fn one_terminal_event_and_nothing_after_done() {
        let data = [
            chunk(json!({"content": "a"}), Some("stop")),
            "[DONE]".to_owned(),
            chunk(json!({"content": "late"}), None),
            "[DONE]".to_owned(),
        ];
        let events = decode_all(&data);
        assert_eq!(finished(&events).len(), 1);
        assert_eq!(fold(&events).text().as_deref(), Some("a"));
    }

    #[test]
    fn a_chunk_that_is_not_json_is_an_event_error() {
        let mut decoder = ChatDecoder::new();
        let error = decoder.decode("{\"id\": ", &mut Vec::new()).unwrap_err();
        assert_eq!(error.code(), "EVENT_MALFORMED");
        assert!(
            matches!(&error, ProviderError::Event { event_type, .. } if event_type == "chat.completion.chunk")
        );
    }

    // ---- Request bodies. ----

    fn body(request: &ModelRequest<'_>, extra: Map<String, Value>) -> Value {
        let bytes = request_body(request, &ChatBodyOptions { extra }).unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    fn weather_tool() -> ToolSpec {
        ToolSpec {
            name: "get_weather".to_owned(),
            description: "Current weather for a city".to_owned(),
            parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
        }
    }

    fn reasoning_with_details(details: Value) -> Item {
        let mut extra = Map::new();
        extra.insert("reasoning_details".to_owned(), details);
        Item::Reasoning(ReasoningItem {
            id: Some("rs_1".to_owned()),
            summary: Vec::new(),
            content: Some(vec![
                json!({"type": "reasoning_text", "text": "Two cities."}),
            ]),
            encrypted_content: None,
            extra,
        })
    }

    #[test]
    fn request_body_translates_a_tool_conversation() {
        let details = json!([{
            "type": "reasoning.text", "text": "Two cities.", "signature": "c2ln",
            "format": "anthropic-claude-v1", "index": 0
        }]);
        let input = [
            Item::user_text("Weather in Paris and Rome?"),
            reasoning_with_details(details.clone()),
            Item::assistant_text("Checking both."),
            Item::function_call("call_1", "get_weather", "{\"city\":\"Paris\"}"),
            Item::function_call("call_2", "get_weather", "{\"city\":\"Rome\"}"),
            Item::function_call_output("call_1", "18°C"),
            Item::function_call_output("call_2", "21°C"),
            Item::Other(json!({"type": "web_search_call", "id": "ws_1", "status": "completed"})),
            Item::user_text("Answer as JSON."),
        ];
        let tools = [weather_tool()];
        let mut params = ModelParams::default();
        params.temperature = Some(0.2);
        params.top_p = Some(0.9);
        params.max_output_tokens = Some(256);
        params.stop = vec!["END".to_owned()];
        let output = OutputFormat {
            name: "output".to_owned(),
            schema: json!({"type": "object", "properties": {"paris": {"type": "string"}}}),
        };
        let request = ModelRequest::new("anthropic/claude-haiku-4.5", &input, &params)
            .with_instructions(Some("Be brief."))
            .with_tools(&tools)
            .with_output(Some(&output));
        assert_eq!(
            body(&request, Map::new()),
            json!({
                "model": "anthropic/claude-haiku-4.5",
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "Weather in Paris and Rome?"},
                    {
                        "role": "assistant",
                        "content": "Checking both.",
                        "tool_calls": [
                            {"id": "call_1", "type": "function",
                             "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
                            {"id": "call_2", "type": "function",
                             "function": {"name": "get_weather", "arguments": "{\"city\":\"Rome\"}"}}
                        ],
                        "reasoning_details": details
                    },
                    {"role": "tool", "content": "18°C", "tool_call_id": "call_1"},
                    {"role": "tool", "content": "21°C", "tool_call_id": "call_2"},
                    {"role": "user", "content": "Answer as JSON."}
                ],
                "tools": [{"type": "function", "function": {
                    "name": "get_weather",
                    "description": "Current weather for a city",
                    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}
                }}],
                "stream": true,
                "stream_options": {"include_usage": true},
                "temperature": 0.2,
                "top_p": 0.9,
                "max_tokens": 256,
                "stop": ["END"],
                "response_format": {"type": "json_schema", "json_schema": {
                    "name": "output",
                    "schema": {"type": "object", "properties": {"paris": {"type": "string"}}},
                    "strict": false
                }}
            })
        );
    }

    #[test]
    fn request_body_sends_images_as_parts_and_calls_without_text_as_null_content() {
        let mut image = Map::new();
        image.insert("image_url".to_owned(), json!("https://example.com/cat.png"));
        image.insert("detail".to_owned(), json!("low"));
        let input = [
            Item::message(
                Role::User,
                vec![
                    ContentPart::InputText {
                        text: "What is this?".to_owned(),
                    },
                    ContentPart::InputImage(image),
                ],
            ),
            Item::developer_text("Use the tool."),
            Item::function_call("call_1", "describe", ""),
            Item::FunctionCallOutput(noetic_core::item::FunctionCallOutputItem {
                id: None,
                call_id: "call_1".to_owned(),
                output: json!([
                    {"type": "input_text", "text": "A cat"},
                    {"type": "input_text", "text": " on a mat."}
                ]),
                extra: Map::new(),
            }),
        ];
        let params = ModelParams::default();
        let request = ModelRequest::new("gpt-4o", &input, &params);
        let mut extra = Map::new();
        extra.insert("max_tokens".to_owned(), json!(64));
        extra.insert("provider".to_owned(), json!({"order": ["openai"]}));
        assert_eq!(
            body(&request, extra),
            json!({
                "model": "gpt-4o",
                "messages": [
                    {"role": "user", "content": [
                        {"type": "text", "text": "What is this?"},
                        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png", "detail": "low"}}
                    ]},
                    {"role": "developer", "content": "Use the tool."},
                    {"role": "assistant", "content": null, "tool_calls": [
                        {"id": "call_1", "type": "function", "function": {"name": "describe", "arguments": "{}"}}
                    ]},
                    {"role": "tool", "content": "A cat on a mat.", "tool_call_id": "call_1"}
                ],
                "stream": true,
                "stream_options": {"include_usage": true},
                "max_tokens": 64,
                "provider": {"order": ["openai"]}
            })
        );
    }

    #[test]
    fn extra_fields_replace_ours_without_duplicate_keys() {
        let params = ModelParams::default();
        let request = ModelRequest::new("m", &[], &params);
        let mut extra = Map::new();
        extra.insert("stream_options".to_owned(), json!({"include_usage": false}));
        let bytes = request_body(&request, &ChatBodyOptions { extra }).unwrap();
        let text = String::from_utf8(bytes).unwrap();
        assert_eq!(text.matches("stream_options").count(), 1);
        assert!(text.contains("\"stream_options\":{\"include_usage\":false}"));
    }

    #[test]
    fn an_image_by_file_id_has_no_chat_form() {
        let mut image = Map::new();
        image.insert("file_id".to_owned(), json!("file-1"));
        let input = [Item::message(
            Role::User,
            vec![ContentPart::InputImage(image)],
        )];
        let params = ModelParams::default();
        let request = ModelRequest::new("m", &input, &params);
        let error = request_body(&request, &ChatBodyOptions::default()).unwrap_err();
        assert_eq!(error.code(), "PROVIDER_CONFIG_INVALID");
    }

    #[test]
    fn decoded_openrouter_reasoning_replays_with_its_signature() {
        let (_, response) =
            replay("openrouter-chat.reasoning-details-then-tool-call.claude-haiku-4.5.sse");
        let mut input = vec![Item::user_text("Weather in Berlin? Use reasoning_weather.")];
        input.extend(response.items.iter().cloned());
        input.push(Item::function_call_output(
            "toolu_bdrk_01L9pX1Wp4FAEq9TT2Z6UAe7",
            "{\"temp_c\": 21}",
        ));
        let params = ModelParams::default();
        let request = ModelRequest::new("anthropic/claude-haiku-4.5", &input, &params);
        let body = body(&request, Map::new());
        let messages = body["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 3);
        let assistant = &messages[1];
        assert_eq!(assistant["role"], "assistant");
        assert_eq!(assistant["content"], Value::Null);
        assert_eq!(
            assistant["tool_calls"],
            json!([{"id": "toolu_bdrk_01L9pX1Wp4FAEq9TT2Z6UAe7", "type": "function",
                    "function": {"name": "reasoning_weather", "arguments": "{\"city\": \"Berlin\"}"}}])
        );
        assert_eq!(
            assistant["reasoning_details"],
            reasoning(&response.items[0]).extra["reasoning_details"]
        );
        assert!(assistant["reasoning_details"][0]["signature"].is_string());
        assert_eq!(
            messages[2],
            json!({"role": "tool", "tool_call_id": "toolu_bdrk_01L9pX1Wp4FAEq9TT2Z6UAe7", "content": "{\"temp_c\": 21}"})
        );
    }
}
