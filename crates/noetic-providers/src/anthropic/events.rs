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
    /// Read into an enum, not a string: `Option<Cow<str>>` is always an owned copy (serde borrows
    /// only a bare `Cow`), one allocation per delta.
    #[serde(rename = "type", default)]
    pub(super) kind: Option<DeltaKind>,
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

/// The delta types we read; any other is skipped (and counted).
#[derive(Deserialize, Clone, Copy, PartialEq, Eq, Debug)]
#[serde(rename_all = "snake_case")]
pub(super) enum DeltaKind {
    TextDelta,
    CitationsDelta,
    ThinkingDelta,
    SignatureDelta,
    InputJsonDelta,
    #[serde(other)]
    Other,
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

/// The common event, read without the general parser: a `content_block_delta` whose delta holds one
/// string field, exactly as the API writes it (`{"type":"content_block_delta","index":N,"delta":
/// {"type":"…","<field>":"…"}}`, whitespace padding before the closing braces). Most of a stream is
/// these, and a struct parse of each is most of the decoder's time. Anything else — another key
/// order, another field, a string that does not end where the delta does — returns `None` and goes
/// through [`Event`], so the result never differs from the full parse (tested against it).
pub(super) fn quick_delta(data: &str) -> Option<(u32, DeltaKind, Cow<'_, str>)> {
    let rest = data.strip_prefix(r#"{"type":"content_block_delta","index":"#)?;
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    let index: u32 = rest[..digits].parse().ok()?;
    let rest = rest[digits..].strip_prefix(r#","delta":{"type":""#)?;
    let (kind, rest) = rest.split_once('"')?;
    let (kind, field) = match kind {
        "text_delta" => (DeltaKind::TextDelta, "text"),
        "thinking_delta" => (DeltaKind::ThinkingDelta, "thinking"),
        "input_json_delta" => (DeltaKind::InputJsonDelta, "partial_json"),
        "signature_delta" => (DeltaKind::SignatureDelta, "signature"),
        _ => return None,
    };
    let rest = rest.strip_prefix(",\"")?.strip_prefix(field)?;
    let rest = rest.strip_prefix("\":\"")?;
    // The string ends at the delta's last `"`: what follows must be `}` and `}` with only
    // whitespace around them.
    let tail = rest
        .trim_end()
        .strip_suffix('}')?
        .trim_end()
        .strip_suffix('}')?;
    let body = tail.strip_suffix('"')?;
    if !body.contains(['"', '\\']) {
        return (!body.bytes().any(|byte| byte < 0x20)).then_some((
            index,
            kind,
            Cow::Borrowed(body),
        ));
    }
    // Escapes: the JSON string parser decodes it, and refuses a body with an unescaped quote (which
    // would mean more fields after the string).
    let quoted = &rest[..body.len() + 1];
    let mut text = String::with_capacity(body.len() + 2);
    text.push('"');
    text.push_str(quoted);
    let text: String = serde_json::from_str(&text).ok()?;
    Some((index, kind, Cow::Owned(text)))
}
