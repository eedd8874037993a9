//! One AI SDK response: a thread's bus events, from a subscription made before anything was asked
//! of the harness, narrowed to one turn and written as the UI message stream (`data: <chunk>` lines,
//! `data: [DONE]` last).
//!
//! The response follows its turn: the one that takes a given message (or that it steers into), or
//! the turn running now. It starts with `start` (the turn's id as the message id) and ends with the
//! turn (`finish`, after `abort` or `error` when it did not complete), when the turn waits for an
//! approval the client has been shown (`finish` with `tool-calls`: the turn stays parked, the
//! client's answer comes as another POST), when the server stops, or when the turn is found over
//! (the status says so and no event is left to read). A continuation after approvals replays the turn
//! silently up to the last request the client was shown, so it sends only what is new to it.
//! Dropping the response (a client gone) drops the subscription and nothing else: turns never
//! depend on a connection.

use std::collections::{HashSet, VecDeque};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, header};
use axum::response::Response;
use futures_util::stream::BoxStream;
use futures_util::{FutureExt, StreamExt, stream};
use noetic_core::{FrameworkEvent, Scope, SequencedEvent, SessionStatus, StreamEvent};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::chunks::{Translator, data_part};
use crate::state::AppState;

/// How long a response may be silent before a comment line keeps proxies from closing it.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// Which turn a response follows.
pub(crate) enum Target {
    /// The turn that takes this message (or that the message steered into).
    Message(String),
    /// The turn running when the subscription was made (its replay's first turn).
    Current,
}

/// What a response follows and what its client already has.
pub(crate) struct Plan {
    /// The turn.
    pub(crate) target: Target,
    /// The `start` chunk's message id instead of the turn's id (a continuation keeps the client's).
    pub(crate) message_id: Option<String>,
    /// The approval requests the client has been shown.
    pub(crate) shown: HashSet<String>,
    /// For a continuation: the approvals this request decided. The chunks wait until the replay has
    /// passed every request in `shown`, or until one of these decisions is announced.
    pub(crate) decided: Option<HashSet<String>>,
}

/// Holds a continuation's chunks back until the replay reaches what is new to the client.
struct Gate {
    /// Requests the client was shown that the replay has not passed yet.
    unseen: HashSet<String>,
    /// The decisions of this request: their announcements are new.
    decided: HashSet<String>,
}

/// How a response ends.
enum End {
    /// The turn completed.
    Completed,
    /// The turn was aborted (cancelled), with the reason.
    Cancelled(String),
    /// The turn failed, with the error's message.
    Failed(String),
    /// The turn waits for approvals the client has been shown.
    Parked,
    /// The server is stopping.
    Shutdown,
    /// No turn to follow (none ran, or the message's turn is over).
    NoTurn,
    /// The turn ended out of sight (its end fell off what the bus keeps).
    Unknown,
}

struct Driver {
    state: Arc<AppState>,
    scope: Scope,
    name: String,
    events: BoxStream<'static, SequencedEvent>,
    shutdown: CancellationToken,
    target: Target,
    message_id: Option<String>,
    /// The turn followed, once found.
    turn: Option<String>,
    /// The last turn seen starting (a steered message joins it).
    last_turn: Option<String>,
    started: bool,
    gate: Option<Gate>,
    shown: HashSet<String>,
    translator: Translator,
    out: VecDeque<String>,
    done: bool,
}

/// The response: the UI message stream's headers and the driver's frames as its body.
pub(crate) fn response(
    state: &Arc<AppState>,
    thread_id: &str,
    events: BoxStream<'static, SequencedEvent>,
    plan: Plan,
) -> Response {
    let gate = plan.decided.map(|decided| Gate {
        unseen: plan.shown.clone(),
        decided,
    });
    let driver = Driver {
        state: state.clone(),
        scope: Scope::thread(thread_id.to_owned()),
        name: state.harness.name().to_owned(),
        events,
        shutdown: state.shutdown.clone(),
        target: plan.target,
        message_id: plan.message_id,
        turn: None,
        last_turn: None,
        started: false,
        gate,
        shown: plan.shown,
        translator: Translator::new(),
        out: VecDeque::new(),
        done: false,
    };
    let frames = stream::unfold(driver, |mut driver| async move {
        let frame = driver.next_frame().await?;
        Some((Ok::<_, Infallible>(frame), driver))
    });
    let mut response = Response::new(Body::from_stream(frames));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(
        "x-vercel-ai-ui-message-stream",
        HeaderValue::from_static("v1"),
    );
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

/// The turn a status names, if one runs.
fn running_turn(status: &SessionStatus) -> Option<&str> {
    match status {
        SessionStatus::Running { turn_id, .. }
        | SessionStatus::Draining { turn_id, .. }
        | SessionStatus::Aborting { turn_id }
        | SessionStatus::AwaitingApproval { turn_id, .. } => Some(turn_id),
        _ => None,
    }
}

impl Driver {
    /// The next frame to send; `None` once `[DONE]` was.
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
                    if !calls.is_empty()
                        && calls
                            .iter()
                            .all(|call| self.shown.contains(&call.approval_id)) =>
                {
                    Some(End::Parked)
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
            StreamEvent::Framework(FrameworkEvent::TurnStarted { turn_id, .. })
                if *turn_id != turn =>
            {
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
                    self.end(End::Failed(reason.clone()));
                }
            }
            _ => self.translate(event),
        }
    }

    /// Before the turn is found: whether `event` shows it.
    fn find_turn(&mut self, event: &StreamEvent) {
        match (&self.target, event) {
            (
                _,
                StreamEvent::Framework(FrameworkEvent::TurnStarted {
                    turn_id,
                    message_ids,
                }),
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

    /// Follows the turn running now (the last seen starting, else the status's), from `event` on.
    fn join_running(&mut self, event: &StreamEvent) {
        let status = self.state.harness.status(self.scope.clone());
        let turn = self
            .last_turn
            .clone()
            .or_else(|| running_turn(&status).map(str::to_owned));
        if let Some(turn) = turn {
            self.follow(turn);
            self.translate(event);
        }
    }

    fn follow(&mut self, turn: String) {
        let message_id = self.message_id.clone().unwrap_or_else(|| turn.clone());
        self.turn = Some(turn);
        self.translator = Translator::new();
        self.start(message_id);
    }

    fn start(&mut self, message_id: String) {
        if !std::mem::replace(&mut self.started, true) {
            self.push(json!({"type": "start", "messageId": message_id}));
        }
    }

    fn translate(&mut self, event: &StreamEvent) {
        let mut chunks = Vec::new();
        self.translator.event(event, &self.name, &mut chunks);
        let Some(gate) = &mut self.gate else {
            for chunk in chunks {
                self.push(chunk);
            }
            return;
        };
        match event {
            // A decision of this request: new to the client, and so is everything after it.
            StreamEvent::Framework(FrameworkEvent::ApprovalDecided { approval_id, .. })
                if gate.decided.contains(approval_id) =>
            {
                self.open_gate();
                chunks.into_iter().for_each(|chunk| self.push(chunk));
            }
            _ => {
                let passed = match event {
                    StreamEvent::Framework(FrameworkEvent::ApprovalRequested {
                        approval_id,
                        ..
                    }) => gate.unseen.remove(approval_id) && gate.unseen.is_empty(),
                    _ => false,
                };
                // Held back, but for requests the client has not been shown (asked in the same
                // round as one it has: their calls' parts are there).
                for chunk in chunks {
                    let request = chunk["type"] == "tool-approval-request";
                    let id = chunk["approvalId"].as_str().unwrap_or("");
                    if request && !self.shown.contains(id) {
                        self.push(chunk);
                    }
                }
                if passed {
                    self.open_gate();
                }
            }
        }
    }

    /// From now on every chunk goes out; the client closed its parts and step when its last
    /// response ended, so the replayed ones are dropped.
    fn open_gate(&mut self) {
        self.gate = None;
        let mut closed = Vec::new();
        self.translator.close_parts(&mut closed);
        self.translator.finish_step(&mut closed);
    }

    fn push(&mut self, chunk: Value) {
        if chunk["type"] == "tool-approval-request"
            && let Some(id) = chunk["approvalId"].as_str()
        {
            self.shown.insert(id.to_owned());
        }
        self.out.push_back(format!("data: {chunk}\n\n"));
    }

    fn end(&mut self, end: End) {
        if self.done {
            return;
        }
        if !self.started {
            self.started = true;
            let mut start = json!({"type": "start"});
            if let Some(id) = &self.message_id {
                start["messageId"] = json!(id);
            }
            self.push(start);
        }
        if self.gate.is_none() {
            let mut chunks = Vec::new();
            self.translator.close_parts(&mut chunks);
            self.translator.finish_step(&mut chunks);
            chunks.into_iter().for_each(|chunk| self.push(chunk));
        }
        let finish = |reason: Option<&str>| match reason {
            Some(reason) => json!({"type": "finish", "finishReason": reason}),
            None => json!({"type": "finish"}),
        };
        match end {
            End::Completed => self.push(finish(Some("stop"))),
            End::Cancelled(reason) => {
                self.push(json!({"type": "abort", "reason": reason}));
                self.push(finish(Some("other")));
            }
            End::Failed(reason) => {
                self.push(json!({"type": "error", "errorText": reason}));
                self.push(finish(Some("error")));
            }
            End::Parked => self.push(finish(Some("tool-calls"))),
            End::Shutdown => {
                self.push(data_part("server_shutdown", json!({})));
                self.push(finish(Some("other")));
            }
            End::NoTurn => self.push(finish(None)),
            End::Unknown => self.push(finish(Some("other"))),
        }
        self.out.push_back("data: [DONE]\n\n".to_owned());
        self.done = true;
    }
}
