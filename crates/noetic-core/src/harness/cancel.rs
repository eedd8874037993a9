//! Stopping a context, gracefully or at once, and the paid calls left to reconcile.

use std::time::Duration;

use super::AgentHarness;
use crate::Result;
use crate::context::{Context, WeakContext};
use crate::drain::{CancelOptions, DrainReport, PaidCall};
use crate::session::SessionStatus;

impl AgentHarness {
    /// Cancels `ctx` and everything beneath it: aborts it (blocked work fails `CANCELLED`, provider
    /// streams are cut) and closes its layers, children first.
    ///
    /// With [`CancelOptions::drain`], a graceful stop first: nothing new starts beneath `ctx` (steps,
    /// model rounds and tool calls wait), the model rounds already in flight get up to the window to
    /// finish and be charged, then the cancel proceeds and rounds still running are cut off (their
    /// paid-call records stay pending, see [`AgentHarness::pending_spend`]). Resolves with the
    /// drain's report, `None` without a drain. A second cancel during a drain (with or without
    /// `drain`) stops it at once and resolves with the same report. Events `drain_started` and
    /// `drain_finished` go to the context's sink.
    ///
    /// # Cancel safety
    /// Cancel safe. The abort is requested before the first await point; a drain runs on a task of
    /// its own: dropped during one, the drain still ends (settled, at its deadline, or stopped by a
    /// second cancel, which resolves with its report) and the context is still aborted then. Only
    /// the layer teardown is skipped: close the context yourself ([`AgentHarness::close_context`]).
    pub async fn cancel(&self, ctx: &Context, options: CancelOptions) -> Option<DrainReport> {
        let report = match options.drain {
            Some(window) => Some(ctx.drain(window, options.reason.clone()).await),
            // A plain cancel during a drain stops the drain and shares its report.
            None if ctx.is_draining() => {
                Some(ctx.drain(Duration::ZERO, options.reason.clone()).await)
            }
            None => None,
        };
        ctx.abort(options.reason);
        ctx.close().await;
        report
    }

    /// What the execution (root context) `execution_id` made by this harness is doing:
    /// [`SessionStatus::Running`] while a `run()` is on it, [`SessionStatus::Draining`] with the
    /// deadline while a cancel drains it, [`SessionStatus::Aborting`] from the cancel until the run
    /// returns, [`SessionStatus::Idle`] otherwise (also for an unknown or dropped context). The
    /// status's `turn_id` is the execution id.
    pub fn execution_status(&self, execution_id: &str) -> SessionStatus {
        let ctx = crate::sync::lock(&self.inner.executions)
            .get(execution_id)
            .and_then(WeakContext::upgrade);
        let Some(ctx) = ctx.filter(Context::is_running) else {
            return SessionStatus::Idle;
        };
        let turn_id = execution_id.to_owned();
        if let Some(deadline) = ctx.drain_deadline() {
            SessionStatus::Draining { turn_id, deadline }
        } else if ctx.aborted() {
            SessionStatus::Aborting { turn_id }
        } else {
            SessionStatus::Running {
                turn_id,
                started_at: std::time::SystemTime::now() - ctx.elapsed(),
            }
        }
    }

    /// The paid calls whose rounds ended before they were priced — cut off by a cancel or a steer, or
    /// broken mid-stream — oldest first: the provider may have billed them, and only its billing says
    /// what they cost. Match them by `generation_id` against the provider's records, then
    /// [`AgentHarness::settle_spend`].
    ///
    /// With durable storage these are the store's records: a process killed mid-stream leaves its
    /// rounds in flight there, and the next harness on the same storage lists them.
    ///
    /// # Errors
    /// The store's; `CHECKPOINT_CORRUPT` or `CHECKPOINT_SCHEMA_MISMATCH` naming a bad `paid/…` row.
    pub async fn pending_spend(&self) -> Result<Vec<PaidCall>> {
        self.inner.runtime.paid_calls().pending().await
    }

    /// Marks the pending paid call `dispatch_id` reconciled at `cost`, returning it (with that cost);
    /// `None` when no pending call has that id (or its round is still running).
    ///
    /// # Errors
    /// As for [`AgentHarness::pending_spend`].
    pub async fn settle_spend(
        &self,
        dispatch_id: &str,
        cost: Option<f64>,
    ) -> Result<Option<PaidCall>> {
        self.inner
            .runtime
            .paid_calls()
            .settle(dispatch_id, cost)
            .await
    }
}
