//! Where the turns of the served threads run: in the served harness (the default), or on a
//! durable-execution engine the harness does not drive ([`TurnEngine`], e.g. Restate through
//! `noetic-restate`). With an engine, the server sends messages, steers, aborts and decisions to
//! it, and reads everything else — history, the last turn, the event streams — from the harness,
//! which must then share the engine's store (`shared_threads` on the store the engine records
//! threads in): it follows each thread's event log as it does a thread another host drives.

use futures_util::future::BoxFuture;
use noetic_core::{ApprovalDecision, ApprovalRequest, ExecuteOptions, Input, Result};

/// What an engine says a thread is doing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EngineStatus {
    /// The running turn's id.
    pub running: Option<String>,
    /// The running turn's calls waiting for a person's decision.
    pub pending_approvals: Vec<ApprovalRequest>,
}

/// Runs the served threads' turns instead of the harness (see the module docs). The server calls
/// it from its request handlers; every method answers promptly (a turn runs on the engine's own
/// time).
pub trait TurnEngine: Send + Sync + 'static {
    /// Sends a message (`options.thread_id`, `options.message_id` as the idempotency key,
    /// `options.delivery_mode` for a steer) and returns once the engine holds it.
    ///
    /// # Errors
    /// The engine's (`INVALID_ARGUMENT` for an input it cannot take).
    fn execute(&self, input: Input, options: ExecuteOptions) -> BoxFuture<'_, Result<()>>;

    /// Aborts `thread_id`'s running turn (nothing when none runs).
    ///
    /// # Errors
    /// The engine's.
    fn abort<'a>(&'a self, thread_id: &'a str) -> BoxFuture<'a, Result<()>>;

    /// What `thread_id` is doing.
    ///
    /// # Errors
    /// The engine's.
    fn status<'a>(&'a self, thread_id: &'a str) -> BoxFuture<'a, Result<EngineStatus>>;

    /// Decides the call `approval_id` of `thread_id`'s running turn.
    ///
    /// # Errors
    /// The engine's.
    fn decide<'a>(
        &'a self,
        thread_id: &'a str,
        approval_id: &'a str,
        decision: ApprovalDecision,
    ) -> BoxFuture<'a, Result<()>>;
}
