//! The approval surface of [`AgentHarness`]: the calls waiting for a person, and the decisions.

use super::AgentHarness;
use crate::approval::{ApprovalDecision, ApprovalRequest};
use crate::session::Scope;
use crate::{Error, Result};

impl AgentHarness {
    /// The tool calls of the thread waiting for a person's decision, in the order they were asked
    /// for (also announced as `approval_requested` events). On a durable harness this includes the
    /// requests of a turn a crash cut (kept in the store), before the thread is read back.
    ///
    /// # Errors
    /// The durable store's errors; `CHECKPOINT_CORRUPT` naming a request row that does not read back.
    pub async fn pending_approvals(&self, scope: Scope) -> Result<Vec<ApprovalRequest>> {
        self.runtime()
            .approvals()
            .pending_durably(scope.thread_id())
            .await
    }

    /// Approves the waiting call `approval_id` of `thread_id`: it runs with exactly the arguments
    /// its request showed, once its round reaches it. Single-use. On a durable harness restarted
    /// after a crash, the decision is kept with the request and the thread is read back, so its turn
    /// resumes and runs the call (if another holder's lease is still live, the turn resumes when
    /// the thread is next read back: `load_thread`, `recover`, a message). On a harness with
    /// [`shared_threads`](crate::AgentHarnessBuilder::shared_threads), a call waiting on another
    /// host is decided through its row too, and that host is woken to take the decision.
    ///
    /// # Errors
    /// [`Error::ApprovalNotFound`] when no call waits under that id on that thread (unknown,
    /// already decided, or its run ended); the durable store's errors.
    pub async fn approve(&self, thread_id: &str, approval_id: &str) -> Result<ApprovalRequest> {
        self.decide(thread_id, approval_id, ApprovalDecision::Approved, false)
            .await
    }

    /// Approves the waiting call, and every later call of the same tool on this thread without
    /// asking ("always approve this tool for this thread", for as long as this harness lives).
    ///
    /// # Errors
    /// As [`AgentHarness::approve`].
    pub async fn approve_always(
        &self,
        thread_id: &str,
        approval_id: &str,
    ) -> Result<ApprovalRequest> {
        self.decide(thread_id, approval_id, ApprovalDecision::Approved, true)
            .await
    }

    /// Rejects the waiting call: it does not run, and its output (which the model reads) is
    /// `Tool call rejected: <reason>`. Single-use; durable as [`AgentHarness::approve`].
    ///
    /// # Errors
    /// As [`AgentHarness::approve`].
    pub async fn reject(
        &self,
        thread_id: &str,
        approval_id: &str,
        reason: impl Into<String>,
    ) -> Result<ApprovalRequest> {
        let decision = ApprovalDecision::Rejected {
            reason: reason.into(),
        };
        self.decide(thread_id, approval_id, decision, false).await
    }

    async fn decide(
        &self,
        thread_id: &str,
        approval_id: &str,
        decision: ApprovalDecision,
        always: bool,
    ) -> Result<ApprovalRequest> {
        let (request, resume) = self
            .runtime()
            .approvals()
            .decide_durably(thread_id, approval_id, decision, always)
            .await?;
        if resume && self.inner.shared_threads {
            // The host running the turn takes it from the store at its next look: wake it.
            if let Some(durability) = self.runtime().durability() {
                crate::session::wake(durability, thread_id).await?;
            }
        } else if resume {
            // The decision waits in the store for the resumed turn to ask again.
            match self.load_thread(thread_id).await {
                Ok(()) | Err(Error::LeaseHeld { .. }) => {}
                Err(error) => return Err(error),
            }
        }
        Ok(request)
    }
}
