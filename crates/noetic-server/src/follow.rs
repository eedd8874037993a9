//! What the protocol adapters share: one HTTP response that follows one turn of a thread, from a
//! bus subscription made before anything was asked of the harness, written in a wire format of the
//! adapter's (a [`Wire`]: the AI SDK UI message stream, AG-UI events).
//!
//! The response follows its turn: the one that takes a given message (or that the message steers
//! into), or the turn running now. It ends with the turn, when the turn waits for approvals the
//! wire says end it (the turn stays parked; the answer comes as another request), when the server
//! stops, or when the turn is found over (the status says so and no event is left to read).
//! Dropping the response (a client gone) drops the subscription and nothing else: turns never
//! depend on a connection.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, header};
use axum::response::Response;
use futures_util::stream::BoxStream;
use futures_util::{FutureExt, StreamExt, stream};
use noetic_core::{
    ApprovalRequest, FrameworkEvent, Replay, Scope, SequencedEvent, SessionStatus, StreamEvent,
};
use tokio_util::sync::CancellationToken;

use crate::state::AppState;

/// How long a response may be silent before a comment line keeps proxies from closing it.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// An output item of the model call in progress, by its output index, as a wire's translator
/// tracks it.
pub(crate) enum Open {
    /// A message: one text part (or message), opened at its first text.
    Text { id: String, started: bool },
    /// A reasoning item: one reasoning part (or span), opened at its first text.
    Reasoning { id: String, started: bool },
    /// A function call, announced once its call id is known.
    Call { call_id: String, name: String },
    /// Anything else (hosted tools, vendor items): nothing on the wire.
    Other,
}

/// Which turn a response follows.
pub(crate) enum Target {
    /// The turn that takes this message (or that the message steered into).
    Message(String),
    /// The turn running when the subscription was made (its replay's first turn).
    Current,
}

/// How a response ends.
pub(crate) enum End {
    /// The turn completed.
    Completed,
    /// The turn was aborted (cancelled), with the reason.
    Cancelled(String),
    /// The turn failed, with the error's message and stable code.
    Failed {
        /// The error's message.
        reason: String,
        /// The error's code (`STEP_FAILED`, …).
        code: String,
    },
    /// The turn waits for these approvals, and the wire ends the response there.
    Parked(Vec<ApprovalRequest>),
    /// The server is stopping.
    Shutdown,
    /// No turn to follow (none ran, or the message's turn is over).
    NoTurn,
    /// The turn ended out of sight (its end fell off what the bus keeps).
    Unknown,
}

/// A thread's bus events from a subscription, with the turn running just after it was made (a
/// message that steers that turn joins it; any later turn's start is among the events).
pub(crate) struct Subscription {
    events: BoxStream<'static, SequencedEvent>,
    running: Option<String>,
}

/// Subscribes to `thread_id`'s events from `replay` on. Make it before asking anything of the
/// harness, so what that starts cannot go unseen.
pub(crate) fn subscribe(state: &AppState, thread_id: &str, replay: Replay) -> Subscription {
    let scope = Scope::thread(thread_id.to_owned());
    let events = state.harness.sequenced_events(scope.clone(), replay);
    let running = running_turn(&state.harness.status(scope)).map(str::to_owned);
    Subscription { events, running }
}

/// A wire format: the frames (whole SSE events, `data: …\n\n`) a followed turn is written as.
pub(crate) trait Wire: Send + 'static {
    /// The response follows `turn` from now on: the wire's opening, and a fresh translation.
    fn follow(&mut self, turn: &str, out: &mut VecDeque<String>);
    /// One event of the followed turn (its start and end excepted).
    fn event(&mut self, event: &StreamEvent, out: &mut VecDeque<String>);
    /// Whether the followed turn, waiting for `calls`, ends the response.
    fn parks(&self, calls: &[ApprovalRequest]) -> bool;
    /// The response's last frames (an opening first when nothing was followed).
    fn end(&mut self, end: End, out: &mut VecDeque<String>);
}

struct Driver<W> {
    state: Arc<AppState>,
    scope: Scope,
    events: BoxStream<'static, SequencedEvent>,
    shutdown: CancellationToken,
    target: Target,
    /// The turn followed, once found.
    turn: Option<String>,
    /// The turn running when the subscription was made, then the last seen starting (a steered
    /// message joins it).
    last_turn: Option<String>,
    wire: W,
    out: VecDeque<String>,
    done: bool,
}

/// A `text/event-stream` response (no caching, no proxy buffering) whose body is `wire`'s frames of
/// the turn `target` names, read from `subscription`.
pub(crate) fn response<W: Wire>(
    state: &Arc<AppState>,
    thread_id: &str,
    subscription: Subscription,
    target: Target,
    wire: W,
) -> Response {
    let driver = Driver {
        state: state.clone(),
        scope: Scope::thread(thread_id.to_owned()),
        events: subscription.events,
        shutdown: state.shutdown.clone(),
        target,
        turn: None,
        last_turn: subscription.running,
        wire,
        out: VecDeque::new(),
        done: false,
    };
    let frames = stream::unfold(driver, |mut driver| async move {
        let frame = driver.next_frame().await?;
        Some((Ok::<_, Infallible>(frame), driver))
    });
    event_stream(Body::from_stream(frames))
}

/// A `text/event-stream` response with `body`.
pub(crate) fn event_stream(body: Body) -> Response {
    let mut response = Response::new(body);
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

/// A framework event's `data`, as the native stream shows it.
pub(crate) fn event_data(event: &FrameworkEvent, harness: &str) -> serde_json::Value {
    let mut json = StreamEvent::Framework(event.clone()).to_json(harness);
    json.get_mut("data")
        .map(serde_json::Value::take)
        .unwrap_or(serde_json::Value::Null)
}

/// The turn a status names, if one runs.
pub(crate) fn running_turn(status: &SessionStatus) -> Option<&str> {
    match status {
        SessionStatus::Running { turn_id, .. }
        | SessionStatus::Draining { turn_id, .. }
        | SessionStatus::Aborting { turn_id }
        | SessionStatus::AwaitingApproval { turn_id, .. } => Some(turn_id),
        _ => None,
    }
}

impl<W: Wire> Driver<W> {
    /// The next frame to send; `None` once the wire's end was.
    async fn next_frame(&mut self) -> Option<String> {
        loop {
            if let Some(frame) = self.out.pop_front() {
                return Some(frame);
            }
            if self.done {
                return None;
            }
            if self.shutdown.is_cancelled() {
                self.end(End::Shutdown);
                continue;
            }
            if let Some(Some(event)) = self.events.next().now_or_never() {
                self.handle(&event.event);
                continue;
            }
            // Nothing to read. The status is read before looking again: when nothing is ready
            // then, every event published before the status was read is in hand (a turn's start
            // and end are published with the status change), so the status can be trusted.
            let status = self.state.harness.status(self.scope.clone());
            if let Some(Some(event)) = self.events.next().now_or_never() {
                self.handle(&event.event);
                continue;
            }
            if self.settle(&status) {
                continue;
            }
            tokio::select! {
                biased;
                () = self.shutdown.cancelled() => self.end(End::Shutdown),
                event = self.events.next() => match event {
                    Some(event) => self.handle(&event.event),
                    None => self.end(End::Unknown),
                },
                () = tokio::time::sleep(KEEP_ALIVE) => self.out.push_back(": keep-alive\n\n".to_owned()),
            }
        }
    }

    /// With nothing to read: ends the response when the status shows there is nothing to wait for.
    fn settle(&mut self, status: &SessionStatus) -> bool {
        let end = match &self.turn {
            None => matches!(status, SessionStatus::Idle).then_some(End::NoTurn),
            Some(turn) if running_turn(status) != Some(turn.as_str()) => Some(End::Unknown),
            Some(_) => match status {
                SessionStatus::AwaitingApproval { calls, .. }
                    if !calls.is_empty() && self.wire.parks(calls) =>
                {
                    Some(End::Parked(calls.clone()))
                }
                _ => None,
            },
        };
        match end {
            Some(end) => {
                self.end(end);
                true
            }
            None => false,
        }
    }

    fn handle(&mut self, event: &StreamEvent) {
        let Some(turn) = self.turn.clone() else {
            self.find_turn(event);
            return;
        };
        match event {
            StreamEvent::Framework(
                FrameworkEvent::TurnStarted { turn_id, .. }
                | FrameworkEvent::RoundRestarted { turn_id, .. },
            ) if *turn_id != turn => {
                self.end(End::Unknown);
            }
            StreamEvent::Framework(FrameworkEvent::TurnCompleted { turn_id, .. })
                if *turn_id == turn =>
            {
                self.end(End::Completed);
            }
            StreamEvent::Framework(FrameworkEvent::TurnAborted {
                turn_id,
                reason,
                error_kind,
            }) if *turn_id == turn => {
                if *error_kind == "CANCELLED" {
                    self.end(End::Cancelled(reason.clone()));
                } else {
                    self.end(End::Failed {
                        reason: reason.clone(),
                        code: (*error_kind).to_owned(),
                    });
                }
            }
            _ => self.wire.event(event, &mut self.out),
        }
    }

    /// Before the turn is found: whether `event` shows it.
    fn find_turn(&mut self, event: &StreamEvent) {
        match (&self.target, event) {
            (
                _,
                StreamEvent::Framework(
                    FrameworkEvent::TurnStarted {
                        turn_id,
                        message_ids,
                    }
                    | FrameworkEvent::RoundRestarted {
                        turn_id,
                        message_ids,
                    },
                ),
            ) => {
                self.last_turn = Some(turn_id.clone());
                let ours = match &self.target {
                    Target::Current => true,
                    Target::Message(id) => message_ids.contains(id),
                };
                if ours {
                    self.follow(turn_id.clone());
                }
            }
            (
                Target::Message(id),
                StreamEvent::Framework(FrameworkEvent::SteerApplied { message_ids, .. }),
            ) if message_ids.contains(id) => self.join_running(event),
            // The replay's start fell off what the bus keeps: the running turn is the one.
            (Target::Current, StreamEvent::Lagged { .. }) => self.join_running(event),
            _ => {}
        }
    }

    /// Follows the turn running now (the last known running, else the status's), from `event` on.
    fn join_running(&mut self, event: &StreamEvent) {
        let status = self.state.harness.status(self.scope.clone());
        let turn = self
            .last_turn
            .clone()
            .or_else(|| running_turn(&status).map(str::to_owned));
        if let Some(turn) = turn {
            self.follow(turn);
            self.wire.event(event, &mut self.out);
        }
    }

    fn follow(&mut self, turn: String) {
        self.wire.follow(&turn, &mut self.out);
        self.turn = Some(turn);
    }

    fn end(&mut self, end: End) {
        if !std::mem::replace(&mut self.done, true) {
            self.wire.end(end, &mut self.out);
        }
    }
}
