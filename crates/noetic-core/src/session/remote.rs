//! What one host asks of the host running a shared thread's turn: to take a decision on an approval
//! it waits for, or to abort the turn. The ask is written to the store with the thread marked
//! runnable (a wake-up: PostgreSQL's `NOTIFY`), and the driving host takes it at its next look
//! ([`apply`], from [`super::fleet`]'s refresh: on the wake-up, or every poll interval).
//!
//! - A decision is the approval's own row (`approval/{thread}/{id}`, written by
//!   [`crate::AgentHarness::approve`] on any host); the driving host hands it to the waiting call.
//! - An abort is one request record (`thread/{id}/abort`); the driving host removes it, aborts its
//!   turn (draining first when asked) and writes the outcome under the request's id, which the asking
//!   host waits for, bounded.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::fleet::THREAD_LEASES;
use super::runner::Session;
use crate::adapter::durable::Commit;
use crate::checkpoint::Durability;
use crate::drain::DrainReport;
use crate::runtime::Runtime;
use crate::{Error, Result};

fn abort_key(thread_id: &str) -> String {
    format!("thread/{thread_id}/abort")
}

fn report_key(thread_id: &str, request: &str) -> String {
    format!("thread/{thread_id}/abort-report/{request}")
}

/// How often an asking host looks for the outcome of its abort.
const REPORT_POLL: Duration = Duration::from_millis(50);

#[derive(Serialize, Deserialize)]
struct AbortRequest {
    id: String,
    reason: Option<String>,
    drain_ms: Option<u64>,
}

#[derive(Serialize, Deserialize)]
struct AbortOutcome {
    /// Whether a turn was running to abort.
    aborted: bool,
    report: Option<DrainReport>,
}

/// Wakes the host driving `thread_id` (marks it runnable: a mark on a thread a host holds only
/// wakes it; on one nobody holds, a serving host claims it).
pub(crate) async fn wake(durability: &Durability, thread_id: &str) -> Result<()> {
    durability
        .store
        .commit(Commit::new().mark_runnable(format!("{THREAD_LEASES}{thread_id}")))
        .await
}

/// Asks the host running `thread_id`'s turn to abort it (draining for `drain` first), and waits
/// for its outcome: at most the drain plus twice the lease TTL plus a second (a host that died
/// meanwhile answers nothing; its turn resumes elsewhere). `Ok(None)` when no turn was running or
/// no answer came (the request is then withdrawn).
///
/// # Errors
/// The store's errors.
pub(crate) async fn request_abort(
    durability: &Durability,
    thread_id: &str,
    reason: Option<String>,
    drain: Option<Duration>,
) -> Result<Option<DrainReport>> {
    let id = crate::id::new_id();
    let request = AbortRequest {
        id: id.clone(),
        reason,
        drain_ms: drain.map(|drain| drain.as_millis() as u64),
    };
    let bytes = serde_json::to_vec(&request).map_err(|error| Error::InvalidArgument {
        argument: "abort",
        message: error.to_string(),
    })?;
    let store = &durability.store;
    store
        .commit(
            Commit::new()
                .put(abort_key(thread_id), bytes)
                .mark_runnable(format!("{THREAD_LEASES}{thread_id}")),
        )
        .await?;
    let bound = drain.unwrap_or_default() + durability.lease_ttl * 2 + Duration::from_secs(1);
    let key = report_key(thread_id, &id);
    let deadline = tokio::time::Instant::now() + bound;
    while tokio::time::Instant::now() < deadline {
        if let Some(bytes) = store.record(&key).await? {
            store.commit(Commit::new().delete(key.clone())).await?;
            let outcome: AbortOutcome =
                serde_json::from_slice(&bytes).map_err(|error| Error::CheckpointCorrupt {
                    execution_id: format!("thread/{thread_id}"),
                    key: key.clone(),
                    problem: error.to_string(),
                })?;
            return Ok(outcome.report.filter(|_| outcome.aborted));
        }
        tokio::time::sleep(REPORT_POLL).await;
    }
    // Nobody took it: withdrawn, so it cannot abort a later turn.
    if let Some(bytes) = store.record(&abort_key(thread_id)).await?
        && serde_json::from_slice::<AbortRequest>(&bytes).is_ok_and(|stored| stored.id == id)
    {
        store
            .commit(Commit::new().delete(abort_key(thread_id)))
            .await?;
    }
    Ok(None)
}

/// On the host driving `session`'s thread: takes the decisions and the abort other hosts asked for.
pub(crate) async fn apply(runtime: &Arc<Runtime>, durability: &Durability, session: &Arc<Session>) {
    let thread_id = session.thread_id.clone();
    match runtime.approvals().take_stored_decisions(&thread_id).await {
        Ok(0) => {}
        Ok(taken) => tracing::info!(%thread_id, taken, "decisions taken from other hosts"),
        Err(error) => tracing::warn!(%thread_id, %error, "could not read stored decisions"),
    }
    let store = durability.store.clone();
    let key = abort_key(&thread_id);
    let request = match store.record(&key).await {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return,
        Err(error) => {
            tracing::warn!(%thread_id, %error, "could not read abort requests");
            return;
        }
    };
    if let Err(error) = store.commit(Commit::new().delete(key)).await {
        tracing::warn!(%thread_id, %error, "could not take an abort request");
        return;
    }
    let Ok(request) = serde_json::from_slice::<AbortRequest>(&request) else {
        tracing::warn!(%thread_id, "an abort request does not read back; dropped");
        return;
    };
    tracing::info!(%thread_id, "abort asked by another host");
    let session = session.clone();
    // The drain may take a while: the driver goes on meanwhile (the turn's end is its business).
    tokio::spawn(async move {
        let aborted = session.is_running();
        let report = session
            .abort(request.reason, request.drain_ms.map(Duration::from_millis))
            .await;
        let outcome = AbortOutcome { aborted, report };
        let key = report_key(&session.thread_id, &request.id);
        match serde_json::to_vec(&outcome) {
            Ok(bytes) => {
                if let Err(error) = store.commit(Commit::new().put(key, bytes)).await {
                    tracing::warn!(thread_id = %session.thread_id, %error, "abort outcome not written");
                }
            }
            Err(error) => tracing::warn!(%error, "abort outcome not encoded"),
        }
    });
}
