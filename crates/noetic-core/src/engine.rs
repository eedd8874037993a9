//! The seam to a durable-execution engine that journals a turn's steps (`noetic-restate`).
//!
//! A context given a [`StepJournal`] ([`crate::ContextOptions::step_journal`]) runs each of its
//! tree's paid or effectful steps through it: every model round of a `call_model` step (named
//! `round:{step_id}:{n}`) and every tool call (`tool:{call_id}`). The journal either runs the step
//! and records its result before handing it back, or, when the engine replays an invocation after a
//! crash, hands back the recorded result without running the step: a replayed round is not paid
//! again and a replayed tool call does not run again. So the engine, not noetic's checkpoints and
//! ledger, decides what runs again: at most the step in flight at a crash.
//!
//! Replay runs the tree again from the top, so the code between journaled steps must take the same
//! path every time: it does, given the same input and the same recorded results (noetic keeps its
//! random ids out of the journaled values' paths). A journal checks each name against the one
//! recorded at that place and fails on a mismatch (`ENGINE_JOURNAL`, or the engine's own error).
//!
//! A journal that [`decides_approvals`](StepJournal::decides_approvals) also keeps the waits of gated
//! tool calls: each waits for [`StepJournal::decision`] (so a thread waiting for a person may hold no
//! process, and a replay gets the decision from the record) instead of the harness's in-process
//! approvals, which then neither list nor decide those calls.
//!
//! Steers reach a journaled turn through [`StepJournal::steers`], asked before each model request
//! of a `call_model` step but its first (`steers:{step_id}:{n}`): the engine takes them from where
//! it queues them and records what it took, so a replay applies the same steers at the same place.
//!
//! An engine's turns keep the thread's record in a [`crate::adapter::durable::DurableStore`] with a
//! `session::ThreadRecorder`: history, last turn and event log in the format of durable sessions, each
//! write idempotent, so a harness on the same store reads the thread and streams its events.
//!
//! Inside core a journal is one of the two implementations of the round loop's durability seam
//! (`step/call_model/durable.rs`); the other is noetic's checkpoints and ledger. The loop asks the
//! same questions of either: run this round, run this call, record it, take the steers, wait for
//! these decisions.
//!
//! What changes under a journal: a round is never cut mid-stream by a steer (a steer waits for the
//! next steer point between rounds, as a recorded round must be whole); a replayed round emits no
//! deltas (its `model_call_started` / `model_call_completed` still come). Without a journal, no
//! result is serialized.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::steer::Steer;
use crate::{ApprovalDecision, ApprovalRequest, Error, Result};

/// Runs a turn's steps durably (see the module docs). Implemented by an engine adapter; noetic calls
/// it, in the tree's order, from the task that runs the tree.
pub trait StepJournal: Send + Sync + 'static {
    /// Runs `step` at most once across replays: its recorded result when the journal has one at this
    /// place (then `step` is dropped unpolled), else `step`'s own result, recorded before it is
    /// returned. `name` labels the step; a replay that reaches a different name at a recorded place
    /// is non-determinism.
    ///
    /// A step's error is returned as it is and, by the journal's choice, recorded or not (a round
    /// the provider refused may be retried by the engine).
    ///
    /// # Cancel safety
    /// Dropping the future drops `step` (a round's stream, a running tool) as a cancel does without
    /// a journal; nothing is recorded for it.
    fn step<'a>(
        &'a self,
        name: String,
        step: BoxFuture<'a, Result<Value>>,
    ) -> BoxFuture<'a, Result<Value>>;

    /// Whether gated tool calls wait for their decisions through [`StepJournal::decision`] (the
    /// engine keeps the wait) rather than in the harness's in-process approvals. Default: no.
    fn decides_approvals(&self) -> bool {
        false
    }

    /// Waits, durably, for the decision on `request`: recorded once made, so a replay gets it at
    /// once. Called (when [`StepJournal::decides_approvals`]) after the call's `approval_requested`
    /// event, in the round's order of gated calls. The request's `approval_id` is
    /// `{root id}:{call_id}`: stable across replays when the root's id is
    /// ([`crate::ContextOptions::id`]).
    ///
    /// # Errors
    /// The engine's; by default `ENGINE_JOURNAL` (this journal does not decide approvals).
    ///
    /// # Cancel safety
    /// Dropping the future stops waiting (the turn was cancelled); a later decision is the engine's
    /// to drop.
    fn decision<'a>(
        &'a self,
        request: &'a ApprovalRequest,
    ) -> BoxFuture<'a, Result<ApprovalDecision>> {
        Box::pin(async move {
            Err(Error::EngineJournal {
                step: format!("approval:{}", request.approval_id),
                message: "this journal does not wait for approvals".to_owned(),
            })
        })
    }

    /// Takes the steers waiting for the turn at the steer point `name` (`steers:{step_id}:{n}`,
    /// before a request of a `call_model` step after its first): each applied there, in order, as
    /// a `between-rounds` steer is. Recorded like a step: a replay gets the same steers back.
    /// Default: none (this journal has no inbox).
    ///
    /// # Errors
    /// The engine's.
    ///
    /// # Cancel safety
    /// Dropping the future leaves steers not yet taken where they wait.
    fn steers(&self, name: String) -> BoxFuture<'_, Result<Vec<Steer>>> {
        let _ = name;
        Box::pin(async { Ok(Vec::new()) })
    }
}

/// Runs `step` through `journal` as `name`, its result kept as JSON.
pub(crate) async fn journaled<'a, T, F>(
    journal: &'a Arc<dyn StepJournal>,
    name: String,
    step: F,
) -> Result<T>
where
    T: Serialize + DeserializeOwned,
    F: Future<Output = Result<T>> + Send + 'a,
{
    let step_name = name.clone();
    let value = journal
        .step(
            name.clone(),
            Box::pin(async move {
                let result = step.await?;
                serde_json::to_value(&result).map_err(|source| Error::EngineJournal {
                    step: step_name,
                    message: format!("the step's result does not serialize: {source}"),
                })
            }),
        )
        .await?;
    serde_json::from_value(value).map_err(|source| Error::EngineJournal {
        step: name,
        message: format!("a recorded result does not read back: {source}"),
    })
}
