//! The AI SDK UI message stream as a [`Wire`] of the shared turn follower (`follow.rs`): `data:
//! <chunk>` lines, `data: [DONE]` last.
//!
//! A response starts with `start` (the turn's id as the message id) and ends with the turn
//! (`finish`, after `abort` or `error` when it did not complete), or when the turn waits for an
//! approval the client has been shown (`finish` with `tool-calls`: the turn stays parked, the
//! client's answer comes as another POST). A continuation after approvals replays the turn silently
//! up to the last request the client was shown, so it sends only what is new to it.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

use axum::http::HeaderValue;
use axum::response::Response;
use noetic_core::{ApprovalRequest, FrameworkEvent, StreamEvent};
use serde_json::{Value, json};

use super::chunks::{Translator, data_part};
use crate::follow::{self, End, Subscription, Target, Wire};
use crate::state::AppState;

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

/// The UI message stream of one response.
struct AiSdk {
    name: String,
    /// The `start` chunk's message id, when not the turn's.
    message_id: Option<String>,
    started: bool,
    gate: Option<Gate>,
    shown: HashSet<String>,
    translator: Translator,
}

/// The response: the UI message stream's headers and the turn's chunks as its body.
pub(crate) fn response(
    state: &Arc<AppState>,
    thread_id: &str,
    subscription: Subscription,
    plan: Plan,
) -> Response {
    let gate = plan.decided.map(|decided| Gate {
        unseen: plan.shown.clone(),
        decided,
    });
    let wire = AiSdk {
        name: state.harness.name().to_owned(),
        message_id: plan.message_id,
        started: false,
        gate,
        shown: plan.shown,
        translator: Translator::new(),
    };
    let mut response = follow::response(state, thread_id, subscription, plan.target, wire);
    response.headers_mut().insert(
        "x-vercel-ai-ui-message-stream",
        HeaderValue::from_static("v1"),
    );
    response
}

impl Wire for AiSdk {
    fn follow(&mut self, turn: &str, out: &mut VecDeque<String>) {
        let message_id = self.message_id.clone().unwrap_or_else(|| turn.to_owned());
        self.translator = Translator::new();
        if !std::mem::replace(&mut self.started, true) {
            self.push(json!({"type": "start", "messageId": message_id}), out);
        }
    }

    fn event(&mut self, event: &StreamEvent, out: &mut VecDeque<String>) {
        let mut chunks = Vec::new();
        self.translator.event(event, &self.name, &mut chunks);
        let Some(gate) = &mut self.gate else {
            for chunk in chunks {
                self.push(chunk, out);
            }
            return;
        };
        match event {
            // A decision of this request: new to the client, and so is everything after it.
            StreamEvent::Framework(FrameworkEvent::ApprovalDecided { approval_id, .. })
                if gate.decided.contains(approval_id) =>
            {
                self.open_gate();
                chunks.into_iter().for_each(|chunk| self.push(chunk, out));
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
                        self.push(chunk, out);
                    }
                }
                if passed {
                    self.open_gate();
                }
            }
        }
    }

    /// Every request waiting has been shown: the client answers them in its next POST.
    fn parks(&self, calls: &[ApprovalRequest]) -> bool {
        calls
            .iter()
            .all(|call| self.shown.contains(&call.approval_id))
    }

    fn end(&mut self, end: End, out: &mut VecDeque<String>) {
        if !std::mem::replace(&mut self.started, true) {
            let mut start = json!({"type": "start"});
            if let Some(id) = &self.message_id {
                start["messageId"] = json!(id);
            }
            self.push(start, out);
        }
        if self.gate.is_none() {
            let mut chunks = Vec::new();
            self.translator.close_parts(&mut chunks);
            self.translator.finish_step(&mut chunks);
            chunks.into_iter().for_each(|chunk| self.push(chunk, out));
        }
        let finish = |reason: Option<&str>| match reason {
            Some(reason) => json!({"type": "finish", "finishReason": reason}),
            None => json!({"type": "finish"}),
        };
        match end {
            End::Completed => self.push(finish(Some("stop")), out),
            End::Cancelled(reason) => {
                self.push(json!({"type": "abort", "reason": reason}), out);
                self.push(finish(Some("other")), out);
            }
            End::Failed { reason, .. } => {
                self.push(json!({"type": "error", "errorText": reason}), out);
                self.push(finish(Some("error")), out);
            }
            End::Parked(_) => self.push(finish(Some("tool-calls")), out),
            End::Shutdown => {
                self.push(data_part("server_shutdown", json!({})), out);
                self.push(finish(Some("other")), out);
            }
            End::NoTurn => self.push(finish(None), out),
            End::Unknown => self.push(finish(Some("other")), out),
        }
        out.push_back("data: [DONE]\n\n".to_owned());
    }
}

impl AiSdk {
    /// From now on every chunk goes out; the client closed its parts and step when its last
    /// response ended, so the replayed ones are dropped.
    fn open_gate(&mut self) {
        self.gate = None;
        let mut closed = Vec::new();
        self.translator.close_parts(&mut closed);
        self.translator.finish_step(&mut closed);
    }

    fn push(&mut self, chunk: Value, out: &mut VecDeque<String>) {
        if chunk["type"] == "tool-approval-request"
            && let Some(id) = chunk["approvalId"].as_str()
        {
            self.shown.insert(id.to_owned());
        }
        out.push_back(format!("data: {chunk}\n\n"));
    }
}
