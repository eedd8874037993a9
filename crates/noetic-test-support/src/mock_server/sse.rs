//! The SSE byte work of the mock server: splitting a recorded body into events, finding the terminal
//! event, inserting extra events, and framing `data:` lines.

use bytes::{Bytes, BytesMut};
use serde_json::Value;

/// The types of the events that end a stream: a Responses one, or an Anthropic Messages one.
const TERMINAL_EVENT_TYPES: [&str; 4] = [
    "response.completed",
    "response.incomplete",
    "response.failed",
    "message_stop",
];

/// The events of an SSE body and what follows the last one.
pub(super) struct SplitBody {
    /// Each event with the comment and blank lines before it, up to and including its blank line.
    pub(super) events: Vec<Bytes>,
    /// What follows the last event (comments, an unterminated block without data).
    pub(super) tail: Bytes,
}

pub(super) fn push_data_event(body: &mut BytesMut, data: &[u8]) {
    body.extend_from_slice(b"data: ");
    body.extend_from_slice(data);
    body.extend_from_slice(b"\n\n");
}

/// Splits an SSE body after each blank line that ends a block with a `data` line. Lines end in LF, CRLF
/// or CR, as in the SSE grammar.
pub(super) fn split_events(body: &Bytes) -> SplitBody {
    let mut events = Vec::new();
    let mut event_start = 0;
    let mut block_has_data = false;
    let mut position = 0;
    while position < body.len() {
        let (line_end, next_line) = line_bounds(body, position);
        let line = &body[position..line_end];
        if line.is_empty() {
            if block_has_data {
                events.push(body.slice(event_start..next_line));
                event_start = next_line;
                block_has_data = false;
            }
        } else if is_data_line(line) {
            block_has_data = true;
        }
        position = next_line;
    }
    let rest = body.slice(event_start..);
    if block_has_data {
        // An unterminated last event still counts as one.
        events.push(rest);
        SplitBody {
            events,
            tail: Bytes::new(),
        }
    } else {
        SplitBody { events, tail: rest }
    }
}

/// The end of the line starting at `start` (terminator excluded) and the start of the next one.
fn line_bounds(body: &[u8], start: usize) -> (usize, usize) {
    match body[start..]
        .iter()
        .position(|byte| *byte == b'\n' || *byte == b'\r')
    {
        None => (body.len(), body.len()),
        Some(offset) => {
            let end = start + offset;
            let crlf = body[end] == b'\r' && body.get(end + 1) == Some(&b'\n');
            (end, end + if crlf { 2 } else { 1 })
        }
    }
}

fn is_data_line(line: &[u8]) -> bool {
    line == b"data" || line.starts_with(b"data:")
}

/// The data of one event: its `data` lines' values joined with `\n`.
pub(super) fn event_data(event: &[u8]) -> String {
    let mut data = Vec::new();
    let mut position = 0;
    while position < event.len() {
        let (line_end, next_line) = line_bounds(event, position);
        let line = &event[position..line_end];
        if is_data_line(line) {
            let value = line.get(5..).unwrap_or_default();
            let value = value.strip_prefix(b" ").unwrap_or(value);
            if !data.is_empty() {
                data.push(b'\n');
            }
            data.extend_from_slice(value);
        }
        position = next_line;
    }
    String::from_utf8_lossy(&data).into_owned()
}

pub(super) fn is_terminal(event: &[u8]) -> bool {
    let data = event_data(event);
    // Skip the JSON parse for the (many) events that cannot be terminal.
    if !TERMINAL_EVENT_TYPES.iter().any(|kind| data.contains(kind)) {
        return false;
    }
    serde_json::from_str::<Value>(&data).is_ok_and(|value| {
        value
            .get("type")
            .and_then(Value::as_str)
            .is_some_and(|kind| TERMINAL_EVENT_TYPES.contains(&kind))
    })
}

/// `events` with each `(n, event)` inserted after the first `n` original events (at the end if `n` is
/// past it), in the order given.
pub(super) fn insert_events(events: Vec<Bytes>, insertions: &[(usize, Bytes)]) -> Vec<Bytes> {
    let count = events.len();
    let mut result = Vec::with_capacity(count + insertions.len());
    let insert_at = |index: usize, result: &mut Vec<Bytes>| {
        for (n, event) in insertions {
            if (*n).min(count) == index {
                result.push(event.clone());
            }
        }
    };
    for (index, event) in events.into_iter().enumerate() {
        insert_at(index, &mut result);
        result.push(event);
    }
    insert_at(count, &mut result);
    result
}
