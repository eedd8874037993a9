//! The seam between the byte stream and the framework's events: SSE framing is shared, the JSON
//! inside each event is decoded by a wire-specific [`WireDecoder`].

use noetic_core::ResponseEvent;
use serde_json::Value;

use crate::error::ProviderError;

/// Turns the data of each SSE event of one response into OpenResponses events: the part of a
/// [`Wire`](crate::wire::Wire) that reads its events.
///
/// One decoder serves one response (one round) and may keep state between events (the Chat
/// Completions and Anthropic translations do: they assemble items from deltas).
pub trait WireDecoder: Send + 'static {
    /// Decodes one SSE event's data (`[DONE]` included), appending the resulting events to `out`.
    ///
    /// # Errors
    /// [`ProviderError::Event`] for data that is not valid for this wire format.
    fn decode(&mut self, data: &str, out: &mut Vec<ResponseEvent>) -> Result<(), ProviderError>;

    /// The byte stream ended: append whatever closing events the wire implies (nothing when the
    /// response never finished: a missing terminal event is reported by the accumulator).
    ///
    /// # Errors
    /// As for [`WireDecoder::decode`].
    fn finish(&mut self, out: &mut Vec<ResponseEvent>) -> Result<(), ProviderError>;
}

/// An error `code` as text: both wires send strings (`"rate_limit_exceeded"`) or numbers (`429`);
/// `null` is none.
pub(crate) fn code_text(code: Value) -> Option<String> {
    match code {
        Value::Null => None,
        Value::String(text) => Some(text),
        other => Some(other.to_string()),
    }
}
