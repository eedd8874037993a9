//! Unit tests of the Chat Completions translation: recorded and synthetic streams through
//! [`ChatDecoder`], and request bodies.

mod decoding;
mod requests;

use noetic_core::item::{ContentPart, FunctionCallItem, Item, ReasoningItem, Role};
use noetic_core::model::{
    ModelParams, ModelRequest, ModelResponse, OutputFormat, ResponseAccumulator, ResponseSnapshot,
    ResponseStatus, ToolSpec,
};
use noetic_core::{ResponseEvent, TokenUsage};
use serde_json::{Map, Value, json};

use super::decoder::ChatDecoder;
use super::request::request_body;
use crate::decode::WireDecoder;
use crate::error::ProviderError;
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

/// The OpenResponses order rules (see [`crate::grammar::grammar_violation`]).
fn check_grammar(events: &[ResponseEvent]) {
    assert_eq!(crate::grammar::grammar_violation(events), None);
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
        cache_write_tokens: None,
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
