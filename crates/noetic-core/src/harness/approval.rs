//! The approval surface of [`AgentHarness`]: the calls waiting for a person, and the decisions.

use super::AgentHarness;
use crate::Result;
use crate::approval::{ApprovalDecision, ApprovalRequest};
use crate::session::Scope;

impl AgentHarness {
    /// The tool calls of the thread waiting for a person's decision, in the order they were asked
    /// for (also announced as `approval_requested` events).
    pub fn pending_approvals(&self, scope: Scope) -> Vec<ApprovalRequest> {
        self.runtime().approvals().pending(scope.thread_id())
    }

    /// Approves the waiting call `approval_id` of `thread_id`: it runs with exactly the arguments
    /// its request showed, once its round reaches it. Single-use.
    ///
    /// # Errors
    /// [`crate::Error::ApprovalNotFound`] when no call waits under that id on that thread (unknown,
    /// already decided, or its run ended).
    pub fn approve(&self, thread_id: &str, approval_id: &str) -> Result<ApprovalRequest> {
        self.runtime()
            .approvals()
            .decide(thread_id, approval_id, ApprovalDecision::Approved, false)
    }

    /// Approves the waiting call, and every later call of the same tool on this thread without
    /// asking ("always approve this tool for this thread", for as long as this harness lives).
    ///
    /// # Errors
    /// As [`AgentHarness::approve`].
    pub fn approve_always(&self, thread_id: &str, approval_id: &str) -> Result<ApprovalRequest> {
        self.runtime()
            .approvals()
            .decide(thread_id, approval_id, ApprovalDecision::Approved, true)
    }

    /// Rejects the waiting call: it does not run, and its output (which the model reads) is
    /// `Tool call rejected: <reason>`. Single-use.
    ///
    /// # Errors
    /// As [`AgentHarness::approve`].
    pub fn reject(
        &self,
        thread_id: &str,
        approval_id: &str,
        reason: impl Into<String>,
    ) -> Result<ApprovalRequest> {
        self.runtime().approvals().decide(
            thread_id,
            approval_id,
            ApprovalDecision::Rejected {
                reason: reason.into(),
            },
            false,
        )
    }
}
