//! Durable executions on the harness: restore, resume, read and clear them.
//!
//! A harness built with [`AgentHarnessBuilder::durable`](super::AgentHarnessBuilder::durable) records
//! every root context's run as an execution (see [`crate::checkpoint`]); these methods bring one back.

use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde_json::Value;

use super::AgentHarness;
use crate::adapter::durable::{Commit, DurableStore};
use crate::checkpoint::{ExecutionRecord, ExecutionStatus, list_executions, load, read_execution};
use crate::context::{Context, RestoreOptions};
use crate::step::{Origin, Step};
use crate::{Error, Result};

impl AgentHarness {
    fn durable_store(&self) -> Result<&Arc<dyn DurableStore>> {
        self.inner
            .runtime
            .durable()
            .ok_or_else(|| Error::InvalidArgument {
                argument: "durable",
                message: "this harness has no durable store: build it with `.durable(store)`"
                    .to_owned(),
            })
    }

    /// Rebuilds the root context of execution `execution_id` from its checkpoint: its id, item log,
    /// state, spend, step count, step ledger and open `call_model` rounds. Run the same step tree on it
    /// ([`AgentHarness::resume_with`]) to continue: steps the ledger recorded return their outputs
    /// without running (`step_replayed`), a `call_model` cut mid-way continues from its last recorded
    /// round, and a tool call that was in flight runs again.
    ///
    /// # Errors
    /// [`Error::CheckpointNotFound`] for an unknown id; [`Error::CheckpointSchemaMismatch`] for a
    /// checkpoint of another schema version; [`Error::CheckpointCorrupt`] naming a row that does not
    /// parse; [`Error::InvalidArgument`] without a durable store; storage errors.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn restore(&self, execution_id: &str, options: RestoreOptions) -> Result<Context> {
        let store = self.durable_store()?;
        let restored = load(&**store, execution_id).await?;
        Ok(self.known(Context::restored(
            self.inner.runtime.clone(),
            restored,
            options,
        )))
    }

    /// Continues a restored execution by running `step` on `ctx` with the input it was started with;
    /// for an execution that already completed, returns its recorded output without running anything.
    /// `step` must be the tree the execution ran (a changed step at a path runs fresh).
    ///
    /// # Errors
    /// [`Error::LeaseHeld`] while another runtime's lease on the execution is live; the step's error;
    /// [`Error::CheckpointNotFound`] when `ctx` is not a durable execution.
    ///
    /// # Cancel safety
    /// As [`Context::run`]: what was recorded stays recorded; resume again to continue.
    pub async fn resume_with<I, O: DeserializeOwned>(
        &self,
        step: &Step<I, O>,
        ctx: &Context,
    ) -> Result<O> {
        let store = self.durable_store()?;
        let record =
            read_execution(&**store, ctx.id())
                .await?
                .ok_or_else(|| Error::CheckpointNotFound {
                    execution_id: ctx.id().to_owned(),
                })?;
        let output = match (record.status, record.output) {
            (ExecutionStatus::Completed, Some(output)) => output,
            _ => {
                step.validate()?;
                crate::exec::run(ctx, &step.node, record.input, Origin::Root).await?
            }
        };
        crate::step::decode(step.id(), "output", output)
    }

    /// Restores execution `execution_id` and resumes it with the harness's agent graph, then closes its
    /// context: [`AgentHarness::restore`] + [`AgentHarness::resume_with`].
    ///
    /// # Errors
    /// As those two; [`Error::NoStepConfigured`] without an agent graph.
    ///
    /// # Cancel safety
    /// As [`AgentHarness::resume_with`].
    pub async fn resume<O: DeserializeOwned + 'static>(&self, execution_id: &str) -> Result<O> {
        let graph = self.agent_graph::<Value, O>()?;
        let ctx = self.restore(execution_id, RestoreOptions::new()).await?;
        let result = self.resume_with(&graph, &ctx).await;
        ctx.close().await;
        result
    }

    /// The recorded header of execution `execution_id`: status, input, output or error, metadata,
    /// spend. `None` when unknown.
    ///
    /// # Errors
    /// [`Error::CheckpointSchemaMismatch`] or [`Error::CheckpointCorrupt`] for a bad header;
    /// [`Error::InvalidArgument`] without a durable store; storage errors.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn execution(&self, execution_id: &str) -> Result<Option<ExecutionRecord>> {
        read_execution(&**self.durable_store()?, execution_id).await
    }

    /// Every execution in the durable store, by id. One that does not parse is skipped (with a
    /// warning) so the others stay listed; [`AgentHarness::execution`] names its error.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] without a durable store; storage errors.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn executions(&self) -> Result<Vec<ExecutionRecord>> {
        let store = self.durable_store()?;
        let mut records = Vec::new();
        for id in list_executions(&**store).await? {
            match read_execution(&**store, &id).await {
                Ok(Some(record)) => records.push(record),
                Ok(None) => {}
                Err(error) => tracing::warn!(execution_id = %id, %error, "unreadable execution"),
            }
        }
        Ok(records)
    }

    /// Removes everything recorded of execution `execution_id` (header, state, items, ledger). A missing
    /// one is not an error.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] without a durable store; storage errors.
    ///
    /// # Cancel safety
    /// The store is left with all of it removed or none.
    pub async fn clear_checkpoint(&self, execution_id: &str) -> Result<()> {
        let store = self.durable_store()?;
        store
            .commit(Commit::new().clear_prefix(crate::checkpoint::record::prefix(execution_id)))
            .await
    }

    /// Records `ctx`'s execution now: the same as [`Context::checkpoint`].
    ///
    /// # Errors
    /// As [`Context::checkpoint`].
    ///
    /// # Cancel safety
    /// As [`Context::checkpoint`].
    pub async fn checkpoint(&self, ctx: &Context) -> Result<()> {
        ctx.checkpoint().await
    }
}
