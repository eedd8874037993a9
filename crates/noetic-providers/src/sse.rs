//! A server-sent-events decoder that is correct for any chunking and fast on the common case.
//!
//! It implements the parts of the SSE grammar that streaming model APIs use: `data:` lines (several in
//! one event are joined with `\n`), `event:` names, `:` comment lines (OpenRouter's keep-alives),
//! `id:`/`retry:` lines (ignored: we never reconnect a billed POST), LF, CRLF and lone-CR line endings,
//! and events of any size up to a configurable cap. A line split across chunks — even mid-way through a
//! UTF-8 character or between the CR and LF of a CRLF — decodes the same as a whole one.
//!
//! Complete lines are parsed straight from the chunk; only a chunk's unfinished last line is copied.

use crate::error::ProviderError;

/// The default cap on one event's data: generous (reasoning items with encrypted content run to
/// hundreds of KiB) but bounded, so a stream that never ends an event cannot exhaust memory.
pub const DEFAULT_MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// One decoded event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` name, when the server sent one.
    pub event: Option<String>,
    /// The data lines, joined with `\n`.
    pub data: String,
}

/// Decodes SSE from byte chunks.
#[derive(Debug)]
pub struct SseDecoder {
    /// The unfinished last line of the previous chunk.
    partial: Vec<u8>,
    /// The data of the event being built (lines joined with `\n`).
    data: Vec<u8>,
    /// Whether the event being built has a `data` field (an empty `data:` line counts).
    has_data: bool,
    /// The event's `event:` name.
    event: Option<String>,
    /// The previous chunk ended with CR: a leading LF in the next chunk belongs to it.
    after_cr: bool,
    max_event_bytes: usize,
}

impl Default for SseDecoder {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_EVENT_BYTES)
    }
}

impl SseDecoder {
    /// A decoder that rejects events (or lines) larger than `max_event_bytes`.
    pub fn new(max_event_bytes: usize) -> Self {
        SseDecoder {
            partial: Vec::new(),
            data: Vec::new(),
            has_data: false,
            event: None,
            after_cr: false,
            max_event_bytes,
        }
    }

    /// Decodes a chunk, calling `on_event` for every event it completes.
    ///
    /// # Errors
    /// [`ProviderError::Sse`] when an event exceeds the size cap or its data is not UTF-8.
    pub fn feed(
        &mut self,
        chunk: &[u8],
        on_event: &mut impl FnMut(SseEvent),
    ) -> Result<(), ProviderError> {
        let mut rest = chunk;
        // An empty chunk (a body stream may yield one) keeps a pending CR pending.
        if self.after_cr && !rest.is_empty() {
            self.after_cr = false;
            if let [b'\n', tail @ ..] = rest {
                rest = tail;
            }
        }
        while let Some(end) = memchr::memchr2(b'\n', b'\r', rest) {
            let (line, tail) = rest.split_at(end);
            // `tail` starts with the terminator; a CR may be followed by an LF that belongs to it.
            rest = match tail {
                [b'\r', b'\n', after @ ..] => after,
                [b'\r'] => {
                    self.after_cr = true;
                    &[]
                }
                [_, after @ ..] => after,
                [] => &[],
            };
            if self.partial.is_empty() {
                self.line(line, on_event)?;
            } else {
                let mut joined = std::mem::take(&mut self.partial);
                joined.extend_from_slice(line);
                self.line(&joined, on_event)?;
                joined.clear();
                self.partial = joined;
            }
        }
        if !rest.is_empty() {
            if self.partial.len() + rest.len() > self.max_event_bytes {
                return Err(self.oversized());
            }
            self.partial.extend_from_slice(rest);
        }
        Ok(())
    }

    /// Whether the decoder holds part of an event (the stream ended mid-event if so).
    pub fn has_pending(&self) -> bool {
        !self.partial.is_empty() || self.has_data
    }

    fn line(
        &mut self,
        line: &[u8],
        on_event: &mut impl FnMut(SseEvent),
    ) -> Result<(), ProviderError> {
        if line.is_empty() {
            return self.dispatch(on_event);
        }
        if line[0] == b':' {
            return Ok(()); // a comment (keep-alive)
        }
        let (field, value) = match memchr::memchr(b':', line) {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"data" => {
                if self.has_data {
                    self.data.push(b'\n');
                }
                if self.data.len() + value.len() > self.max_event_bytes {
                    return Err(self.oversized());
                }
                self.data.extend_from_slice(value);
                self.has_data = true;
            }
            b"event" => self.event = Some(String::from_utf8_lossy(value).into_owned()),
            _ => {} // id, retry and unknown fields: nothing to do for a one-shot POST stream
        }
        Ok(())
    }

    fn dispatch(&mut self, on_event: &mut impl FnMut(SseEvent)) -> Result<(), ProviderError> {
        if !self.has_data {
            self.event = None;
            return Ok(());
        }
        self.has_data = false;
        let data = std::mem::take(&mut self.data);
        let data = String::from_utf8(data).map_err(|error| ProviderError::Sse {
            message: format!(
                "event data is not valid UTF-8 at byte {}",
                error.utf8_error().valid_up_to()
            ),
        })?;
        on_event(SseEvent {
            event: self.event.take(),
            data,
        });
        Ok(())
    }

    fn oversized(&self) -> ProviderError {
        ProviderError::Sse {
            message: format!("event larger than the {}-byte limit", self.max_event_bytes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_in_chunks(input: &[u8], chunk: usize) -> Vec<SseEvent> {
        let mut decoder = SseDecoder::default();
        let mut events = Vec::new();
        for piece in input.chunks(chunk.max(1)) {
            decoder
                .feed(piece, &mut |event| events.push(event))
                .expect("decodes");
        }
        events
    }

    fn check(input: &str, expected: &[(Option<&str>, &str)]) {
        for chunk in [1, 2, 3, 7, input.len().max(1)] {
            let events = decode_in_chunks(input.as_bytes(), chunk);
            let got: Vec<(Option<&str>, &str)> = events
                .iter()
                .map(|e| (e.event.as_deref(), e.data.as_str()))
                .collect();
            assert_eq!(got, expected, "chunk size {chunk}");
        }
    }

    #[test]
    fn decodes_the_grammar_at_every_chunk_size() {
        check("data: a\n\n", &[(None, "a")]);
        check(
            "event: x\ndata: a\n\ndata: b\n\n",
            &[(Some("x"), "a"), (None, "b")],
        );
        check(": keep-alive\n\ndata: a\n\n", &[(None, "a")]);
        check("data: one\ndata: two\n\n", &[(None, "one\ntwo")]);
        check(
            "data: a\r\n\r\ndata: b\r\rdata: c\n\n",
            &[(None, "a"), (None, "b"), (None, "c")],
        );
        check("data:nospace\n\n", &[(None, "nospace")]);
        check("data\n\n", &[(None, "")]);
        check("id: 7\nretry: 10\ndata: é😀\n\n", &[(None, "é😀")]);
        check("event: lonely\n\ndata: [DONE]\n\n", &[(None, "[DONE]")]);
        check("data: unterminated", &[]);
    }

    #[test]
    fn rejects_oversized_events_and_bad_utf8() {
        let mut decoder = SseDecoder::new(8);
        let error = decoder
            .feed(b"data: 0123456789\n\n", &mut |_| {})
            .unwrap_err();
        assert!(error.to_string().contains("8-byte limit"), "{error}");
        let mut decoder = SseDecoder::new(8);
        let error = decoder.feed(b"data: 0123456789", &mut |_| {}).unwrap_err();
        assert!(error.to_string().contains("limit"), "{error}");
        let mut decoder = SseDecoder::default();
        let error = decoder.feed(b"data: \xff\n\n", &mut |_| {}).unwrap_err();
        assert!(error.to_string().contains("UTF-8"), "{error}");
    }

    #[test]
    fn events_larger_than_a_mebibyte_decode() {
        let big = "x".repeat(3 * 1024 * 1024);
        let input = format!("data: {big}\n\n");
        let events = decode_in_chunks(input.as_bytes(), 64 * 1024);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].data.len(), big.len());
    }
}
