//! [`MockReply`]: one canned response, built by its constructors and setters, and turned into a
//! [`Plan`] when queued: the body already cut into frames with its faults applied, so serving it costs
//! a few `Arc` clones; [`Plan::respond`] streams it with its pacing and ends it as planned.

use std::fmt;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::Response;
use bytes::{Bytes, BytesMut};
use futures_util::stream;
use serde_json::Value;
use tokio::sync::watch;

use super::sse::{
    SplitBody, event_data, insert_events, is_terminal, push_data_event, split_events,
};

/// How often a body about to abort yields to let hyper flush what it sent before.
const FLUSH_YIELDS_BEFORE_ABORT: usize = 8;

/// One canned HTTP response: status, headers, body, pacing and faults. Build it with a constructor
/// ([`sse`](Self::sse), [`sse_events`](Self::sse_events), [`fixture`](Self::fixture),
/// [`json`](Self::json)) and chain the `mut self` setters.
///
/// The faults split the body at SSE event boundaries (blank lines). An *event* is a block with at least
/// one `data` line; comment-only blocks (`: OPENROUTER PROCESSING`) travel with the event after them.
/// They apply in this order: [`without_terminal_event`](Self::without_terminal_event), then the
/// insertions ([`malformed_line_after_events`](Self::malformed_line_after_events), then
/// [`oversized_event_after_events`](Self::oversized_event_after_events), both counted in the original
/// events), then the cut ([`stall_after_events`](Self::stall_after_events) or
/// [`drop_after_events`](Self::drop_after_events), counted in the events as sent, inserted ones included).
#[derive(Clone)]
#[must_use]
pub struct MockReply {
    status: StatusCode,
    headers: Vec<(HeaderName, HeaderValue)>,
    body: Bytes,
    chunk_size: Option<usize>,
    frame_per_event: bool,
    delay_between_chunks: Option<Duration>,
    without_terminal_event: bool,
    /// The `type` of the terminal event of a wire the mock server does not know.
    terminal_type: Option<String>,
    malformed_after: Option<usize>,
    oversized_after: Option<(usize, usize)>,
    cut: Option<(usize, Ending)>,
}

impl MockReply {
    /// A 200 `text/event-stream` reply whose body is sent as given (already SSE-framed).
    pub fn sse(body: impl Into<Bytes>) -> Self {
        Self::new(StatusCode::OK, "text/event-stream", body.into())
    }

    /// A 200 `text/event-stream` reply framing each event as `data: <json>\n\n`, then `data: [DONE]\n\n`.
    pub fn sse_events(events: impl IntoIterator<Item = Value>) -> Self {
        let mut body = BytesMut::new();
        for event in events {
            push_data_event(&mut body, event.to_string().as_bytes());
        }
        push_data_event(&mut body, b"[DONE]");
        Self::sse(body.freeze())
    }

    /// An OpenResponses stream answering `text` in one assistant message (10 input, 5 output tokens).
    pub fn answer(text: &str) -> Self {
        let item = serde_json::json!({"id": "msg_1", "type": "message", "role": "assistant",
            "status": "completed", "content": [{"type": "output_text", "text": text, "annotations": []}]});
        Self::sse_events([
            serde_json::json!({"type": "response.created", "response": {"id": "resp_a", "status": "in_progress", "output": []}}),
            serde_json::json!({"type": "response.output_item.added", "output_index": 0, "item": {
                "id": "msg_1", "type": "message", "role": "assistant", "status": "in_progress", "content": []}}),
            serde_json::json!({"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0,
                "content_index": 0, "delta": text}),
            serde_json::json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
            serde_json::json!({"type": "response.completed", "response": {"id": "resp_a", "status": "completed",
                "output": [item], "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}}}),
        ])
    }

    /// An OpenResponses stream calling the tool `name` (its wire name) with `arguments`, as call
    /// `call_id`.
    pub fn function_call(call_id: &str, name: &str, arguments: &Value) -> Self {
        let arguments = arguments.to_string();
        let item = serde_json::json!({"id": format!("fc_{call_id}"), "type": "function_call",
            "status": "completed", "call_id": call_id, "name": name, "arguments": arguments});
        Self::sse_events([
            serde_json::json!({"type": "response.created", "response": {"id": "resp_c", "status": "in_progress", "output": []}}),
            serde_json::json!({"type": "response.output_item.added", "output_index": 0, "item": item}),
            serde_json::json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
            serde_json::json!({"type": "response.completed", "response": {"id": "resp_c", "status": "completed",
                "output": [item], "usage": {"input_tokens": 10, "output_tokens": 3, "total_tokens": 13}}}),
        ])
    }

    /// A reply from the fixture file `name` in [`crate::fixtures_dir`]: a `.sse` file is sent as is, a
    /// `.jsonl` file is re-framed line by line as `data: <line>\n\n` (no `[DONE]`, blank lines skipped),
    /// a `.json` file is sent byte for byte as `application/json` with status 200.
    ///
    /// # Panics
    ///
    /// If the file cannot be read or its extension is none of those three (a bug in the test).
    pub fn fixture(name: &str) -> Self {
        Self::fixture_file(&crate::fixtures_dir().join(name))
    }

    /// As [`MockReply::fixture`], for the file at `path` (e.g. in [`crate::anthropic_fixtures_dir`]).
    ///
    /// # Panics
    ///
    /// As [`MockReply::fixture`].
    pub fn fixture_file(path: &std::path::Path) -> Self {
        let name = path.display();
        let contents = std::fs::read(path).unwrap_or_else(|error| {
            panic!(
                "mock server: cannot read fixture {}: {error}",
                path.display()
            )
        });
        match path.extension().and_then(|extension| extension.to_str()) {
            Some("sse") => Self::sse(contents),
            Some("jsonl") => {
                let mut body = BytesMut::with_capacity(contents.len() + contents.len() / 8);
                for line in contents.split(|byte| *byte == b'\n') {
                    let line = line.strip_suffix(b"\r").unwrap_or(line);
                    if !line.is_empty() {
                        push_data_event(&mut body, line);
                    }
                }
                Self::sse(body.freeze())
            }
            Some("json") => Self::new(StatusCode::OK, "application/json", contents.into()),
            _ => panic!(
                "mock server: fixture {name} is neither .sse, .jsonl nor .json (its format is unknown)"
            ),
        }
    }

    /// A plain `application/json` reply, e.g. an error: `MockReply::json(401, json!({"error": …}))`.
    ///
    /// # Panics
    ///
    /// If `status` is not a valid HTTP status code (100–999).
    pub fn json(status: u16, body: Value) -> Self {
        Self::new(
            status_code(status),
            "application/json",
            body.to_string().into(),
        )
    }

    /// Sets the status code.
    ///
    /// # Panics
    ///
    /// If `status` is not a valid HTTP status code (100–999).
    pub fn status(mut self, status: u16) -> Self {
        self.status = status_code(status);
        self
    }

    /// Sets a response header, replacing any earlier value of the same name (including the
    /// `content-type` the constructor set), e.g. `("retry-after", "2")` or `("x-generation-id", "gen-1")`.
    ///
    /// # Panics
    ///
    /// If `name` or `value` is not a valid header name or value.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        let name = HeaderName::from_bytes(name.as_bytes())
            .unwrap_or_else(|error| panic!("mock server: bad header name {name:?}: {error}"));
        let value = HeaderValue::from_str(value)
            .unwrap_or_else(|error| panic!("mock server: bad header value {value:?}: {error}"));
        self.headers.retain(|(existing, _)| *existing != name);
        self.headers.push((name, value));
        self
    }

    /// Splits the body into chunks of `bytes` bytes, each sent as its own HTTP body frame (its own
    /// chunk of the chunked transfer encoding) and flushed on its own. `0` means the whole body at once
    /// (the default).
    pub fn chunk_size(mut self, bytes: usize) -> Self {
        self.chunk_size = (bytes > 0).then_some(bytes);
        self
    }

    /// Sends each SSE event as its own HTTP body frame, flushed on its own (with
    /// [`delay_between_chunks`](Self::delay_between_chunks): a stream paced event by event, as a model
    /// generating tokens sends it). Overrides [`chunk_size`](Self::chunk_size).
    pub fn frame_per_event(mut self) -> Self {
        self.frame_per_event = true;
        self
    }

    /// Waits `delay` between two chunks (not before the first).
    pub fn delay_between_chunks(mut self, delay: Duration) -> Self {
        self.delay_between_chunks = Some(delay);
        self
    }

    /// Sends the first `n` SSE events, then keeps the connection open without sending anything until
    /// the server is dropped. Replaces any earlier [`drop_after_events`](Self::drop_after_events).
    pub fn stall_after_events(mut self, n: usize) -> Self {
        self.cut = Some((n, Ending::Stall));
        self
    }

    /// Sends the first `n` SSE events, then aborts the connection (no terminating chunk: the client sees
    /// an error or an early end of body). Replaces any earlier
    /// [`stall_after_events`](Self::stall_after_events).
    ///
    /// The events before the cut are flushed to the socket before the abort as long as the client keeps
    /// reading (hyper discards what it still buffers when a body fails).
    pub fn drop_after_events(mut self, n: usize) -> Self {
        self.cut = Some((n, Ending::Abort));
        self
    }

    /// Removes the last `response.completed`, `response.incomplete`, `response.failed` or (Anthropic)
    /// `message_stop` event and every `data: [DONE]` event from the body.
    pub fn without_terminal_event(mut self) -> Self {
        self.without_terminal_event = true;
        self
    }

    /// Names the `type` of the terminal event of a wire of one's own, for
    /// [`without_terminal_event`](Self::without_terminal_event) (which knows the Responses and
    /// Anthropic ones).
    pub fn terminal_event_type(mut self, kind: &str) -> Self {
        self.terminal_type = Some(kind.to_owned());
        self
    }

    /// Inserts the event `data: {not json\n\n` after the first `n` events.
    pub fn malformed_line_after_events(mut self, n: usize) -> Self {
        self.malformed_after = Some(n);
        self
    }

    /// Inserts, after the first `n` events, one event whose data is a JSON string literal `"xx…x"` of
    /// `bytes` bytes in all (quotes included; at least 2).
    pub fn oversized_event_after_events(mut self, n: usize, bytes: usize) -> Self {
        self.oversized_after = Some((n, bytes));
        self
    }
}

impl fmt::Debug for MockReply {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("MockReply")
            .field("status", &self.status)
            .field("headers", &self.headers)
            .field("body_bytes", &self.body.len())
            .field("chunk_size", &self.chunk_size)
            .field("frame_per_event", &self.frame_per_event)
            .field("delay_between_chunks", &self.delay_between_chunks)
            .field("without_terminal_event", &self.without_terminal_event)
            .field("malformed_after", &self.malformed_after)
            .field("oversized_after", &self.oversized_after)
            .field("cut", &self.cut)
            .finish()
    }
}

/// How a reply's body ends after its frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    /// Ends normally.
    Finish,
    /// Sends nothing more until the server is dropped.
    Stall,
    /// Aborts the connection.
    Abort,
}

/// A reply ready to send: the body already cut into frames.
pub(super) struct Plan {
    status: StatusCode,
    headers: Vec<(HeaderName, HeaderValue)>,
    frames: Vec<Bytes>,
    ending: Ending,
    delay: Option<Duration>,
    /// Yield to the connection between frames so hyper flushes each one separately.
    yield_between_frames: bool,
    /// Send the body with the chunked transfer encoding even when it is one frame, as real SSE servers
    /// do; other bodies whole, with a `content-length`.
    chunked: bool,
}

impl MockReply {
    fn new(status: StatusCode, content_type: &'static str, body: Bytes) -> Self {
        Self {
            status,
            headers: vec![(header::CONTENT_TYPE, HeaderValue::from_static(content_type))],
            body,
            chunk_size: None,
            frame_per_event: false,
            delay_between_chunks: None,
            without_terminal_event: false,
            terminal_type: None,
            malformed_after: None,
            oversized_after: None,
            cut: None,
        }
    }

    pub(super) fn into_plan(self) -> Plan {
        let (body, ending) = self.faulted_body();
        let frames = match self.chunk_size {
            _ if body.is_empty() => Vec::new(),
            _ if self.frame_per_event => {
                let SplitBody { mut events, tail } = split_events(&body);
                if !tail.is_empty() {
                    events.push(tail);
                }
                events
            }
            Some(size) if size < body.len() => (0..body.len())
                .step_by(size)
                .map(|start| body.slice(start..(start + size).min(body.len())))
                .collect(),
            _ => vec![body],
        };
        let chunked = self.headers.iter().any(|(name, value)| {
            name == header::CONTENT_TYPE && value.as_bytes().starts_with(b"text/event-stream")
        });
        Plan {
            chunked,
            status: self.status,
            headers: self.headers,
            frames,
            ending,
            delay: self.delay_between_chunks,
            yield_between_frames: self.chunk_size.is_some() || self.frame_per_event,
        }
    }

    /// The body with the faults applied, and how it ends.
    fn faulted_body(&self) -> (Bytes, Ending) {
        let edits_events = self.without_terminal_event
            || self.malformed_after.is_some()
            || self.oversized_after.is_some();
        if !edits_events && self.cut.is_none() {
            return (self.body.clone(), Ending::Finish);
        }
        let SplitBody { mut events, tail } = split_events(&self.body);
        if self.without_terminal_event {
            events.retain(|event| event_data(event).trim() != "[DONE]");
            let terminal = |event: &Bytes| match &self.terminal_type {
                Some(kind) => serde_json::from_str::<Value>(&event_data(event))
                    .is_ok_and(|data| data.get("type").and_then(Value::as_str) == Some(kind)),
                None => is_terminal(event),
            };
            if let Some(last) = events.iter().rposition(terminal) {
                events.remove(last);
            }
        }
        let mut insertions = Vec::new();
        if let Some(n) = self.malformed_after {
            insertions.push((n, Bytes::from_static(b"data: {not json\n\n")));
        }
        if let Some((n, bytes)) = self.oversized_after {
            let mut event = BytesMut::new();
            let string = format!("\"{}\"", "x".repeat(bytes.saturating_sub(2)));
            push_data_event(&mut event, string.as_bytes());
            insertions.push((n, event.freeze()));
        }
        if !insertions.is_empty() {
            events = insert_events(events, &insertions);
        }
        let (kept, ending) = match self.cut {
            Some((n, ending)) if n < events.len() => (&events[..n], ending),
            Some((_, ending)) => (&events[..], ending),
            None => (&events[..], Ending::Finish),
        };
        let mut body = BytesMut::with_capacity(self.body.len() + 64);
        for event in kept {
            body.extend_from_slice(event);
        }
        if kept.len() == events.len() {
            body.extend_from_slice(&tail);
        }
        (body.freeze(), ending)
    }
}

impl Plan {
    pub(super) fn respond(
        self: Arc<Self>,
        shutdown: watch::Receiver<()>,
        completed: Arc<AtomicUsize>,
    ) -> Response {
        let mut response = Response::new(Body::empty());
        *response.status_mut() = self.status;
        for (name, value) in &self.headers {
            response.headers_mut().insert(name.clone(), value.clone());
        }
        *response.body_mut() = match (self.frames.as_slice(), self.ending, self.chunked) {
            ([], Ending::Finish, false) => {
                completed.fetch_add(1, Ordering::SeqCst);
                Body::empty()
            }
            ([whole], Ending::Finish, false) => {
                completed.fetch_add(1, Ordering::SeqCst);
                Body::from(whole.clone())
            }
            _ => body_stream(self, shutdown, completed),
        };
        response
    }
}

/// Streams a plan's frames with its pacing, then ends it as planned.
fn body_stream(
    plan: Arc<Plan>,
    shutdown: watch::Receiver<()>,
    completed: Arc<AtomicUsize>,
) -> Body {
    struct Cursor {
        plan: Arc<Plan>,
        next: usize,
        shutdown: watch::Receiver<()>,
        completed: Arc<AtomicUsize>,
        ended: bool,
    }
    let cursor = Cursor {
        plan,
        next: 0,
        shutdown,
        completed,
        ended: false,
    };
    Body::from_stream(stream::unfold(cursor, |mut cursor| async move {
        if cursor.ended {
            return None;
        }
        if let Some(frame) = cursor.plan.frames.get(cursor.next).cloned() {
            if cursor.next > 0 {
                if let Some(delay) = cursor.plan.delay {
                    tokio::select! {
                        () = tokio::time::sleep(delay) => {}
                        _ = cursor.shutdown.changed() => {
                            cursor.ended = true;
                            return Some((Err(shut_down()), cursor));
                        }
                    }
                } else if cursor.plan.yield_between_frames {
                    tokio::task::yield_now().await;
                }
            }
            cursor.next += 1;
            return Some((Ok(frame), cursor));
        }
        cursor.ended = true;
        match cursor.plan.ending {
            Ending::Finish => {
                cursor.completed.fetch_add(1, Ordering::SeqCst);
                None
            }
            Ending::Stall => {
                let _ = cursor.shutdown.changed().await;
                Some((Err(shut_down()), cursor))
            }
            Ending::Abort => {
                // hyper drops whatever it has buffered when the body fails, and it only flushes once the
                // body is pending: yield so the events before the cut reach the socket first. A few times,
                // in case one flush cannot write everything at once.
                for _ in 0..FLUSH_YIELDS_BEFORE_ABORT {
                    tokio::task::yield_now().await;
                }
                Some((
                    Err(io::Error::new(
                        io::ErrorKind::ConnectionAborted,
                        "mock server dropped the connection on purpose",
                    )),
                    cursor,
                ))
            }
        }
    }))
}

fn shut_down() -> io::Error {
    io::Error::other("mock server shut down")
}

fn status_code(status: u16) -> StatusCode {
    StatusCode::from_u16(status)
        .unwrap_or_else(|error| panic!("mock server: bad status code {status}: {error}"))
}
