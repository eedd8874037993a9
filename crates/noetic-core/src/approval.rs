//! Tool approval (human in the loop): the calls waiting for a person's decision, per runtime.
//!
//! A leaf: the vocabulary ([`ApprovalRequest`], [`ApprovalDecision`]) and the hub ([`Approvals`]) that
//! a round's gated calls wait on and [`crate::AgentHarness::approve`] / `reject` decide. A call asks
//! for approval when its tool says so ([`crate::Tool::needs_approval`]); the round's other calls run
//! at once, the gated ones wait, and every call gets an output (a rejection's reason is its output).
//!
//! An approval's id is the call's idempotency key (`{execution id}:{call id}`): the same call asks
//! under the same id wherever it asks again. A decision is taken once: deciding removes the request
//! under the hub's lock, so a second decision on the same id (or one for a request that is not
//! waiting) is `APPROVAL_NOT_FOUND`.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use serde::Serialize;
use serde_json::Value;
use tokio::sync::oneshot;

use crate::{Error, Result};

/// A call waiting for a person's decision: exactly what will run if approved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ApprovalRequest {
    /// The approval's id (the call's idempotency key): what `approve` and `reject` take.
    pub approval_id: String,
    /// The thread of the turn that made the call (`__default__` for a context without one).
    pub thread_id: String,
    /// The call's id, as the model gave it.
    pub call_id: String,
    /// The tool's name.
    pub tool: String,
    /// The arguments the tool will get, exactly.
    pub arguments: Value,
}

/// What a person decided.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ApprovalDecision {
    /// Run the call.
    Approved,
    /// Do not run it; the reason is the call's output, which the model reads.
    Rejected {
        /// Why.
        reason: String,
    },
}

struct Pending {
    request: ApprovalRequest,
    /// Which wait this is (an id can be asked again: a resumed turn).
    ticket: u64,
    decide: oneshot::Sender<ApprovalDecision>,
}

#[derive(Default)]
struct State {
    /// In the order they were asked for.
    pending: Vec<Pending>,
    /// `(thread, tool)` pairs approved for good ("always approve this tool for this thread").
    always: HashSet<(String, String)>,
    next_ticket: u64,
}

/// The runtime's pending approvals.
#[derive(Default)]
pub(crate) struct Approvals {
    state: Mutex<State>,
}

impl Approvals {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        crate::sync::lock(&self.state)
    }

    /// Whether `tool` was approved for good on `thread`.
    pub(crate) fn always_approved(&self, thread: &str, tool: &str) -> bool {
        self.lock()
            .always
            .contains(&(thread.to_owned(), tool.to_owned()))
    }

    /// Records `request` as waiting; the returned [`Waiting`] resolves with the decision, and
    /// withdraws the request when dropped undecided (the run was cancelled).
    pub(crate) fn ask(self: &Arc<Self>, request: ApprovalRequest) -> Waiting {
        let (decide, decision) = oneshot::channel();
        let approval_id = request.approval_id.clone();
        let mut state = self.lock();
        // Asked again under the same id (a resumed turn): the new waiter replaces the old one.
        state
            .pending
            .retain(|pending| pending.request.approval_id != approval_id);
        let ticket = state.next_ticket;
        state.next_ticket += 1;
        state.pending.push(Pending {
            request,
            ticket,
            decide,
        });
        Waiting {
            approvals: self.clone(),
            ticket,
            decision,
        }
    }

    /// Takes the decision on `approval_id` of `thread`: the request leaves the hub, and its call runs
    /// (or gets the rejection) as soon as its round reaches it. With `always`, an approval also
    /// approves every later call of the same tool on the thread.
    ///
    /// # Errors
    /// [`Error::ApprovalNotFound`] when no request of that id waits on that thread (unknown, already
    /// decided, or withdrawn because its run ended).
    pub(crate) fn decide(
        &self,
        thread: &str,
        approval_id: &str,
        decision: ApprovalDecision,
        always: bool,
    ) -> Result<ApprovalRequest> {
        let mut state = self.lock();
        let index = state
            .pending
            .iter()
            .position(|pending| {
                pending.request.approval_id == approval_id && pending.request.thread_id == thread
            })
            .ok_or_else(|| Error::ApprovalNotFound {
                approval_id: approval_id.to_owned(),
                thread_id: thread.to_owned(),
            })?;
        let pending = state.pending.remove(index);
        if always && decision == ApprovalDecision::Approved {
            state
                .always
                .insert((thread.to_owned(), pending.request.tool.clone()));
        }
        // The waiter may be gone between our lock and its drop: then the call is not run, which is
        // what its cancelled run needs.
        let _ = pending.decide.send(decision);
        Ok(pending.request)
    }

    /// The requests waiting on `thread`, in the order they were asked for.
    pub(crate) fn pending(&self, thread: &str) -> Vec<ApprovalRequest> {
        self.lock()
            .pending
            .iter()
            .filter(|pending| pending.request.thread_id == thread)
            .map(|pending| pending.request.clone())
            .collect()
    }

    fn withdraw(&self, ticket: u64) {
        self.lock()
            .pending
            .retain(|pending| pending.ticket != ticket);
    }
}

/// A gated call's wait for its decision.
pub(crate) struct Waiting {
    approvals: Arc<Approvals>,
    ticket: u64,
    decision: oneshot::Receiver<ApprovalDecision>,
}

impl Waiting {
    /// The decision, once taken. `None` if the hub dropped the request without one (not expected:
    /// only a newer ask for the same id replaces it).
    pub(crate) async fn decision(&mut self) -> Option<ApprovalDecision> {
        (&mut self.decision).await.ok()
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        // Undecided (the run was cancelled): the request no longer waits. (Decided, it is gone
        // already; the ticket matches nothing then.)
        self.approvals.withdraw(self.ticket);
    }
}
