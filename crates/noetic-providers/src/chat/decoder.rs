//! [`ChatDecoder`]: the state machine that turns the chunks of one streamed Chat Completions response
//! into the OpenResponses events a Responses server would have sent.

use std::borrow::Cow;

use noetic_core::item::{FunctionCallItem, Item, MessageItem, ReasoningItem, Role};
use noetic_core::model::{ReasoningKind, ResponseSnapshot, ResponseStatus};
use noetic_core::{ResponseEvent, TokenUsage};
use serde_json::{Map, Value};

use super::chunk::{Chunk, Delta, ToolCallDelta};
use super::items::{
    Open, OpenCall, OpenMessage, OpenReasoning, details_text, find_call, merge_detail,
};
use crate::decode::{WireDecoder, code_text};
use crate::error::ProviderError;

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
                cache_breakpoint: false,
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
        std::mem::take(&mut self.open).close(incomplete, out);
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
