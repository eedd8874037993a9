//! The native event stream: a thread's bus events as Server-Sent Events, `id:` the bus sequence
//! number, `data:` the event's JSON (`{"seq", "source", "type", "data"}`, as
//! `StreamEvent::to_json`), no `event:` line (an `EventSource`'s `onmessage` gets every event).
//! Resumable after any id; a comment every 15 s keeps proxies from closing it; it ends with a final
//! `{"type": "server_shutdown"}` (no id) when the server stops, and never ends a turn.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::http::HeaderValue;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::{StreamExt, stream};
use noetic_core::{Replay, Scope, SequencedEvent};
use serde_json::json;

use crate::state::AppState;

/// How long an `EventSource` waits before it reconnects.
const RETRY: Duration = Duration::from_millis(1000);
/// The keep-alive comment's period.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// One bus event as an SSE event.
pub(crate) fn sse_event(harness_name: &str, event: &SequencedEvent) -> Event {
    let mut body = event.event.to_json(harness_name);
    body["seq"] = json!(event.seq);
    Event::default()
        .id(event.seq.to_string())
        .data(body.to_string())
}

/// An SSE response with the headers every stream of ours carries.
pub(crate) fn sse_response<S>(events: S) -> Response
where
    S: futures_util::Stream<Item = Result<Event, Infallible>> + Send + 'static,
{
    let mut response = Sse::new(events)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response();
    response
        .headers_mut()
        .insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

/// The thread's events from `replay` on, until the server stops.
pub(crate) fn native_stream(state: &Arc<AppState>, thread_id: &str, replay: Replay) -> Response {
    let name = state.harness.name().to_owned();
    let bus = state
        .harness
        .sequenced_events(Scope::thread(thread_id.to_owned()), replay);
    let shutdown = state.shutdown.clone();
    let retry = stream::once(async { Ok(Event::default().retry(RETRY)) });
    let live = bus
        .map(move |event| Ok(sse_event(&name, &event)))
        .take_until(shutdown.cancelled_owned());
    let last = stream::once(async {
        Ok(Event::default().data(json!({"type": "server_shutdown"}).to_string()))
    });
    sse_response(retry.chain(live).chain(last))
}
