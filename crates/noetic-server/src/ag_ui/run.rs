//! One AG-UI run as a [`Wire`] of the shared turn follower (`follow.rs`): `RUN_STARTED` when the
//! turn is found, its events, and `RUN_FINISHED` (outcome `success`, `cancelled`, or `interrupt`
//! with the approvals it waits for: the turn stays parked) or `RUN_ERROR` (with the turn's error
//! code). Every open text message, reasoning span, tool call and step is closed before the end.
//!
//! A resumed run (its approvals just decided) replays the turn silently up to one of its decisions
//! (or past every interrupt the client was shown, for a retried resume), so it sends only what is
//! new to the client: the calls' results without their start, arguments and end again.

use std::collections::{HashSet, VecDeque};

use noetic_core::{ApprovalRequest, FrameworkEvent, StreamEvent};
use serde_json::json;

use super::events::{Event, Interrupt, Outcome, Translator, custom, frame};
use crate::follow::{End, Wire};

/// Holds a resumed run's events back until the replay reaches what is new to the client.
pub(crate) struct Gate {
    /// Interrupts the client was shown that the replay has not passed yet.
    pub(crate) unseen: HashSet<String>,
    /// The decisions of this run: their announcements are new.
    pub(crate) decided: HashSet<String>,
}

/// The AG-UI events of one run.
pub(crate) struct AgUi {
    pub(crate) thread_id: String,
    pub(crate) run_id: String,
    /// The harness's name (the `agent` of the events' data).
    pub(crate) name: String,
    pub(crate) started: bool,
    pub(crate) gate: Option<Gate>,
    pub(crate) translator: Translator,
}

impl AgUi {
    pub(crate) fn new(thread_id: &str, run_id: &str, name: &str, gate: Option<Gate>) -> Self {
        AgUi {
            thread_id: thread_id.to_owned(),
            run_id: run_id.to_owned(),
            name: name.to_owned(),
            started: false,
            gate,
            translator: Translator::default(),
        }
    }

    fn start(&mut self, turn: Option<&str>, out: &mut VecDeque<String>) {
        if !std::mem::replace(&mut self.started, true) {
            out.push_back(frame(&Event::RunStarted {
                thread_id: self.thread_id.clone(),
                run_id: self.run_id.clone(),
                metadata: turn.map_or_else(|| json!({}), |turn| json!({"turnId": turn})),
            }));
        }
    }

    /// From now on every event goes out; the client closed its messages, calls and step when its
    /// last run ended, so the replayed ones are closed silently.
    fn open_gate(&mut self) {
        self.gate = None;
        self.translator.close_all(&mut Vec::new());
    }
}

impl Wire for AgUi {
    fn follow(&mut self, turn: &str, out: &mut VecDeque<String>) {
        self.translator = Translator::new(turn);
        self.start(Some(turn), out);
    }

    fn event(&mut self, event: &StreamEvent, out: &mut VecDeque<String>) {
        let mut events = Vec::new();
        self.translator.event(event, &self.name, &mut events);
        if let Some(gate) = &mut self.gate {
            match event {
                // A decision of this run: new to the client, and so is everything after it.
                StreamEvent::Framework(FrameworkEvent::ApprovalDecided { approval_id, .. })
                    if gate.decided.contains(approval_id) =>
                {
                    self.open_gate();
                }
                StreamEvent::Framework(FrameworkEvent::ApprovalRequested {
                    approval_id, ..
                }) => {
                    if gate.unseen.remove(approval_id) && gate.unseen.is_empty() {
                        self.open_gate();
                    }
                    return;
                }
                _ => return,
            }
        }
        out.extend(events.iter().map(frame));
    }

    /// A turn waiting for a person ends the run with its interrupts (unless the wait is on a
    /// decision this run just made, not yet taken up).
    fn parks(&self, calls: &[ApprovalRequest]) -> bool {
        match &self.gate {
            Some(gate) => !calls
                .iter()
                .any(|call| gate.decided.contains(&call.approval_id)),
            None => true,
        }
    }

    fn end(&mut self, end: End, out: &mut VecDeque<String>) {
        self.start(None, out);
        if self.gate.is_none() {
            let mut closing = Vec::new();
            self.translator.close_all(&mut closing);
            out.extend(closing.iter().map(frame));
        }
        let finished = |outcome: Option<Outcome>| Event::RunFinished {
            thread_id: self.thread_id.clone(),
            run_id: self.run_id.clone(),
            outcome,
        };
        let last = match end {
            End::Completed | End::NoTurn => finished(Some(Outcome::Success)),
            End::Cancelled(reason) => {
                out.push_back(frame(&custom("turn_aborted", json!({"reason": reason}))));
                finished(Some(Outcome::Cancelled))
            }
            End::Parked(calls) => finished(Some(Outcome::Interrupt {
                interrupts: calls.iter().map(Interrupt::approval).collect(),
            })),
            End::Failed { reason, code } => Event::RunError {
                message: reason,
                code,
            },
            End::Shutdown => Event::RunError {
                message: "the server is stopping".to_owned(),
                code: "SERVER_SHUTTING_DOWN".to_owned(),
            },
            // The turn ended out of sight: how is not known.
            End::Unknown => finished(None),
        };
        out.push_back(frame(&last));
    }
}
