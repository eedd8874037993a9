//! The events of an Anthropic Messages stream: the fields we read, borrowed from each event's JSON.
//! Every event's `type` equals its SSE event name, so the data alone says what it is.

use std::borrow::Cow;

use noetic_core::TokenUsage;
use serde::Deserialize;
use serde_json::{Map, Value};

/// One event's data. The fields are the union of what the event types carry; each is read only for
/// the types that have it.
#[derive(Deserialize)]
pub(super) struct Event<'a> {
    #[serde(rename = "type", borrow)]
    pub(super) kind: Cow<'a, str>,
    /// `content_block_*`: the block's position in the message.
    #[serde(default)]
    pub(super) index: Option<u32>,
    /// `content_block_delta` (a text, JSON, thinking, signature or citation delta) and
    /// `message_delta` (the stop reason).
    #[serde(default, borrow)]
    pub(super) delta: Option<Delta<'a>>,
    /// `content_block_start`: the block in its initial form.
    // The fields of rare events are boxed: the struct of every delta stays small to build and move.
    #[serde(default)]
    pub(super) content_block: Option<Box<Map<String, Value>>>,
    /// `message_start`: the message with its id, model and first usage.
    #[serde(default)]
    pub(super) message: Option<Box<StartMessage>>,
    /// `message_delta`: the usage so far (cumulative).
    #[serde(default)]
    pub(super) usage: Option<Box<WireUsage>>,
    /// `error`.
    #[serde(default)]
    pub(super) error: Option<Box<WireError>>,
}

#[derive(Deserialize)]
pub(super) struct Delta<'a> {
    #[serde(rename = "type", default, borrow)]
    pub(super) kind: Option<Cow<'a, str>>,
    /// The delta's piece, whatever its type names it: `text` (`text_delta`), `thinking`
    /// (`thinking_delta`), `partial_json` (`input_json_delta`) or `signature` (`signature_delta`). A
    /// delta carries one, so one field holds it and the struct every delta builds stays small.
    #[serde(
        default,
        borrow,
        alias = "thinking",
        alias = "partial_json",
        alias = "signature"
    )]
    pub(super) text: Option<Cow<'a, str>>,
    #[serde(default)]
    pub(super) citation: Option<Box<Value>>,
    #[serde(default, borrow)]
    pub(super) stop_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
pub(super) struct StartMessage {
    #[serde(default)]
    pub(super) id: Option<String>,
    #[serde(default)]
    pub(super) model: Option<String>,
    #[serde(default)]
    pub(super) usage: Option<WireUsage>,
}

/// Usage as either event carries it. A field the wire leaves out is unknown, not zero.
#[derive(Deserialize, Default, Clone, Debug, PartialEq, Eq)]
pub(super) struct WireUsage {
    #[serde(default)]
    pub(super) input_tokens: Option<u64>,
    #[serde(default)]
    pub(super) output_tokens: Option<u64>,
    #[serde(default)]
    pub(super) cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    pub(super) cache_read_input_tokens: Option<u64>,
    /// The passes of a response the server ran several of (compaction, fallback): the top-level
    /// fields then describe the last pass only, and the whole is their sum.
    #[serde(default)]
    pub(super) iterations: Option<Vec<WireUsage>>,
}

impl WireUsage {
    /// `message_delta` usage is cumulative: each field it carries replaces the one so far; never a
    /// sum.
    pub(super) fn overwrite_with(&mut self, later: WireUsage) {
        let WireUsage {
            input_tokens,
            output_tokens,
            cache_creation_input_tokens,
            cache_read_input_tokens,
            iterations,
        } = later;
        self.iterations = iterations.or(self.iterations.take());
        self.input_tokens = input_tokens.or(self.input_tokens);
        self.output_tokens = output_tokens.or(self.output_tokens);
        self.cache_creation_input_tokens =
            cache_creation_input_tokens.or(self.cache_creation_input_tokens);
        self.cache_read_input_tokens = cache_read_input_tokens.or(self.cache_read_input_tokens);
    }

    /// The harness's usage: input is the whole prompt (uncached + written to the cache + read from
    /// it), as the other wires report it; cached is what the cache served.
    pub(super) fn to_usage(&self) -> TokenUsage {
        if let Some(passes) = self
            .iterations
            .as_deref()
            .filter(|passes| !passes.is_empty())
        {
            let sum = |field: fn(&WireUsage) -> Option<u64>| {
                passes
                    .iter()
                    .map(field)
                    .fold(None, |total: Option<u64>, count| match count {
                        Some(count) => Some(total.unwrap_or(0) + count),
                        None => total,
                    })
            };
            let uncached = sum(|pass| pass.input_tokens).unwrap_or(0);
            let written = sum(|pass| pass.cache_creation_input_tokens);
            let read = sum(|pass| pass.cache_read_input_tokens);
            return TokenUsage {
                input_tokens: uncached + written.unwrap_or(0) + read.unwrap_or(0),
                output_tokens: sum(|pass| pass.output_tokens).unwrap_or(0),
                cached_tokens: read,
                cache_write_tokens: written,
                reasoning_tokens: None,
            };
        }
        let input = self.input_tokens.unwrap_or(0)
            + self.cache_creation_input_tokens.unwrap_or(0)
            + self.cache_read_input_tokens.unwrap_or(0);
        TokenUsage {
            input_tokens: input,
            output_tokens: self.output_tokens.unwrap_or(0),
            cached_tokens: self.cache_read_input_tokens,
            cache_write_tokens: self.cache_creation_input_tokens,
            reasoning_tokens: None,
        }
    }
}

#[derive(Deserialize)]
pub(super) struct WireError {
    #[serde(rename = "type", default)]
    pub(super) kind: Option<String>,
    #[serde(default)]
    pub(super) message: Option<String>,
}
