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
//!
//! With a durable store, a durable turn's request is also a row `approval/<thread>/<id>` (written
//! before it is announced, removed once the call has its output): a harness restarted on the store
//! lists it, and a decision taken there (before the resumed turn asks again) is written into the row,
//! where the resumed turn's ask finds and takes it.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::oneshot;

use crate::adapter::{Commit, DurableStore};
use crate::{Error, Result};

/// The version of an approval row.
const ROW_VERSION: u32 = 1;

/// A call waiting for a person's decision: exactly what will run if approved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
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

/// A durable request: `approval/<thread>/<id>`.
#[derive(Serialize, Deserialize)]
struct Row {
    v: u32,
    request: ApprovalRequest,
    /// Taken by a harness that had no waiter for it (restarted): the resumed turn takes it.
    decision: Option<ApprovalDecision>,
}

fn row_key(thread: &str, approval_id: &str) -> String {
    format!("approval/{thread}/{approval_id}")
}

/// The runtime's pending approvals.
#[derive(Default)]
pub(crate) struct Approvals {
    state: Mutex<State>,
    /// Where durable turns' requests are kept.
    store: Option<Arc<dyn DurableStore>>,
}

impl Approvals {
    /// The hub of a runtime, keeping durable requests in `store`.
    pub(crate) fn new(store: Option<Arc<dyn DurableStore>>) -> Self {
        Approvals {
            state: Mutex::default(),
            store,
        }
    }

    async fn read_row(&self, store: &Arc<dyn DurableStore>, key: &str) -> Result<Option<Row>> {
        let Some(bytes) = store.record(key).await? else {
            return Ok(None);
        };
        let row: Row =
            serde_json::from_slice(&bytes).map_err(|error| corrupt(key, &error.to_string()))?;
        if row.v != ROW_VERSION {
            return Err(corrupt(key, &format!("unknown row version {}", row.v)));
        }
        Ok(Some(row))
    }

    async fn write_row(&self, row: &Row) -> Result<()> {
        let Some(store) = &self.store else {
            return Ok(());
        };
        let key = row_key(&row.request.thread_id, &row.request.approval_id);
        let bytes = serde_json::to_vec(row).map_err(|error| corrupt(&key, &error.to_string()))?;
        store.commit(Commit::new().put(key, bytes)).await
    }

    /// Takes the decisions other hosts stored in the rows of the requests waiting here on `thread`
    /// (a thread shared by hosts: the decision was made on another one). Returns how many.
    ///
    /// # Errors
    /// The store's errors; `CHECKPOINT_CORRUPT` naming a row that does not read back.
    pub(crate) async fn take_stored_decisions(&self, thread: &str) -> Result<usize> {
        let Some(store) = &self.store else {
            return Ok(0);
        };
        let mut taken = 0;
        for request in self.pending(thread) {
            let key = row_key(thread, &request.approval_id);
            if let Some(Row {
                decision: Some(decision),
                ..
            }) = self.read_row(store, &key).await?
                && self
                    .decide(thread, &request.approval_id, decision, false)
                    .is_ok()
            {
                taken += 1;
            }
        }
        Ok(taken)
    }

    /// A durable request's row is gone once its call has an output.
    pub(crate) async fn forget(&self, thread: &str, approval_id: &str) -> Result<()> {
        match &self.store {
            Some(store) => {
                store
                    .commit(Commit::new().delete(row_key(thread, approval_id)))
                    .await
            }
            None => Ok(()),
        }
    }

    /// Asks for `request` as [`Approvals::ask`] does; for a durable turn (`durable`) the request is
    /// kept as a row first, and a decision already in its row (taken by a restarted harness) answers
    /// at once.
    ///
    /// # Errors
    /// The store's errors; `CHECKPOINT_CORRUPT` naming the row when it does not read back.
    pub(crate) async fn ask_durably(
        self: &Arc<Self>,
        request: ApprovalRequest,
        durable: bool,
    ) -> Result<Waiting> {
        let Some(store) = self.store.as_ref().filter(|_| durable) else {
            return Ok(self.ask(request));
        };
        let key = row_key(&request.thread_id, &request.approval_id);
        if let Some(Row {
            decision: Some(decision),
            ..
        }) = self.read_row(store, &key).await?
        {
            let (decide, answer) = oneshot::channel();
            let _ = decide.send(decision);
            return Ok(Waiting {
                approvals: self.clone(),
                ticket: u64::MAX,
                decision: answer,
            });
        }
        self.write_row(&Row {
            v: ROW_VERSION,
            request: request.clone(),
            decision: None,
        })
        .await?;
        Ok(self.ask(request))
    }
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

    /// Takes the decision as [`Approvals::decide`] does; without a waiter here, a durable request's
    /// row (a restarted harness) takes it instead, and `Ok((request, true))` says its turn must be
    /// resumed to use it.
    ///
    /// # Errors
    /// As [`Approvals::decide`]; the store's errors.
    pub(crate) async fn decide_durably(
        &self,
        thread: &str,
        approval_id: &str,
        decision: ApprovalDecision,
        always: bool,
    ) -> Result<(ApprovalRequest, bool)> {
        match self.decide(thread, approval_id, decision.clone(), always) {
            Err(Error::ApprovalNotFound { .. }) if self.store.is_some() => {}
            decided => return decided.map(|request| (request, false)),
        }
        let not_found = || Error::ApprovalNotFound {
            approval_id: approval_id.to_owned(),
            thread_id: thread.to_owned(),
        };
        let Some(store) = &self.store else {
            return Err(not_found());
        };
        let key = row_key(thread, approval_id);
        match self.read_row(store, &key).await? {
            Some(mut row) if row.decision.is_none() => {
                if always && decision == ApprovalDecision::Approved {
                    self.lock()
                        .always
                        .insert((thread.to_owned(), row.request.tool.clone()));
                }
                row.decision = Some(decision);
                self.write_row(&row).await?;
                Ok((row.request, true))
            }
            _ => Err(not_found()),
        }
    }

    /// The requests waiting on `thread`: those asked here, then the durable rows no waiter here
    /// holds (a restarted harness), undecided, in key order.
    ///
    /// # Errors
    /// The store's errors; `CHECKPOINT_CORRUPT` naming a row that does not read back.
    pub(crate) async fn pending_durably(&self, thread: &str) -> Result<Vec<ApprovalRequest>> {
        let mut pending = self.pending(thread);
        let Some(store) = &self.store else {
            return Ok(pending);
        };
        let prefix = format!("approval/{thread}/");
        for (key, bytes) in store.records(&prefix).await? {
            let row: Row = serde_json::from_slice(&bytes)
                .map_err(|error| corrupt(&key, &error.to_string()))?;
            if row.decision.is_none()
                && !pending
                    .iter()
                    .any(|known| known.approval_id == row.request.approval_id)
            {
                pending.push(row.request);
            }
        }
        Ok(pending)
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

fn corrupt(key: &str, problem: &str) -> Error {
    Error::CheckpointCorrupt {
        execution_id: key
            .rsplit('/')
            .next()
            .and_then(|id| id.split(':').next())
            .unwrap_or_default()
            .to_owned(),
        key: key.to_owned(),
        problem: problem.to_owned(),
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
