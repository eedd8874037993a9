//! Checkpoints and the step ledger of durable executions.
//!
//! A root context made on a durable runtime ([`crate::RuntimeBuilder::durable`]) carries a
//! `Journal`: it records the execution as it runs — the header when the run starts, then at every
//! completed step, every completed model round (before its tool calls run) and every tool output, the
//! items appended since the last checkpoint, the new ledger rows and one small state record, in one
//! fenced [`Commit`] — and, on a restored context, answers the interpreter's "was this step already
//! done?" from the ledger. Without a durable store no journal exists and every hook is one `Option`
//! check.
//!
//! This module knows nothing of [`crate::Context`]: the context hands it what to record (`context/durable.rs`),
//! so the checkpoint code sits below the kernel, not in it.

mod ledger;
pub(crate) mod record;
mod restore;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde_json::Value;

use crate::adapter::durable::{Commit, DurableStore, Lease, LeaseRequest};
use crate::item::Item;
use crate::step_kind::StepKind;
use crate::sync::lock;
use crate::usage::Spend;
use crate::{Error, Result};

pub use ledger::{DEFAULT_MAX_ENTRIES, DEFAULT_MAX_ENTRY_BYTES, LedgerRetention};
pub use record::{ErrorRecord, ExecutionRecord, ExecutionStatus, SCHEMA_VERSION};
pub(crate) use restore::{Restored, list_executions, load, parse, read_execution, read_items};

use ledger::Ledger;
pub(crate) use record::Base;
use record::{Cursor, Header, StateRecord};

/// The default time an execution's lease lasts unless renewed.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(30);

/// Milliseconds since the Unix epoch, by the system clock: the one clock leases are judged by.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64)
}

/// How a runtime records durable executions.
#[derive(Clone)]
pub(crate) struct Durability {
    pub(crate) store: Arc<dyn DurableStore>,
    /// Who this runtime is, as a lease holder: distinct per runtime instance.
    pub(crate) holder: String,
    pub(crate) lease_ttl: Duration,
    pub(crate) retention: LedgerRetention,
    /// Whether (and how) threads keep a durable event log.
    pub(crate) event_log: Option<crate::event::EventLogOptions>,
    /// Rows a checkpoint commit deletes along with what it records (the rows of paid calls priced
    /// since the last one).
    pub(crate) deferred_deletes: Arc<DeferredDeletes>,
}

/// Rows whose delete waits for the next checkpoint commit of an execution's run, so it lands with
/// what that commit records, each under the id its owner knows it by (a paid call's dispatch id).
/// The owner defers and asks; the execution's journal takes its own rows into its commit and, once
/// the commit holds, drops them. Other executions' rows never ride along.
#[derive(Debug, Default)]
pub(crate) struct DeferredDeletes {
    inner: Mutex<Deferred>,
}

#[derive(Debug, Default)]
struct Deferred {
    /// `(id, row key)` by execution id.
    by_execution: HashMap<String, Vec<(String, String)>>,
    /// Every deferred id.
    ids: HashSet<String>,
}

impl DeferredDeletes {
    /// Defers the delete of the row `key`, known as `id`, to `execution_id`'s next checkpoint.
    pub(crate) fn defer(&self, execution_id: &str, id: String, key: String) {
        let mut inner = lock(&self.inner);
        inner.ids.insert(id.clone());
        inner
            .by_execution
            .entry(execution_id.to_owned())
            .or_default()
            .push((id, key));
    }

    /// Whether the row known as `id` waits for its delete.
    pub(crate) fn contains(&self, id: &str) -> bool {
        lock(&self.inner).ids.contains(id)
    }

    /// `execution_id`'s deferred deletes now: `(id, row key)`.
    fn of(&self, execution_id: &str) -> Vec<(String, String)> {
        lock(&self.inner)
            .by_execution
            .get(execution_id)
            .cloned()
            .unwrap_or_default()
    }

    /// Notes the rows of `ids` deleted (a commit of `execution_id` holding their deletes applied).
    fn applied(&self, execution_id: &str, ids: &[String]) {
        if ids.is_empty() {
            return;
        }
        let mut inner = lock(&self.inner);
        if let Some(rows) = inner.by_execution.get_mut(execution_id) {
            rows.retain(|(id, _)| !ids.contains(id));
            if rows.is_empty() {
                inner.by_execution.remove(execution_id);
            }
        }
        for id in ids {
            inner.ids.remove(id);
        }
    }
}

/// What a checkpoint records of a context: implemented by [`crate::Context`], so this module needs
/// nothing of it.
pub(crate) trait CheckpointSource: Send + Sync {
    /// The items from `persisted` on, the state, spend and step count, read at one moment.
    fn snapshot(&self, persisted: usize) -> Snapshot;
}

/// What the context hands the journal at a checkpoint.
pub(crate) struct Snapshot {
    /// The items appended since the last checkpoint.
    pub(crate) new_items: Vec<Item>,
    /// The context's item count after them.
    pub(crate) item_count: usize,
    pub(crate) state: Value,
    pub(crate) spend: Spend,
    pub(crate) step_count: u64,
    /// The message ids of the session steers taken so far (applied or dropped).
    pub(crate) steers_taken: Vec<String>,
}

/// The journal of one durable root context.
pub(crate) struct Journal {
    durability: Durability,
    execution_id: String,
    /// Serializes checkpoints (each awaits its commit), and holds what they track.
    writer: tokio::sync::Mutex<Writer>,
    /// The interpreter's frames: one per running step of this context, each counting its children by id.
    frames: Mutex<Vec<Frame>>,
    ledger: Mutex<Ledger>,
    cursors: Mutex<BTreeMap<String, Cursor>>,
    /// `ContextOptions::metadata`, written with the header.
    metadata: Value,
    thread_id: Option<String>,
    resource_id: Option<String>,
    /// Nested runs on the context: only the outermost begins and finishes the execution.
    runs: Mutex<u32>,
    /// Stops the lease heartbeat of the current run.
    heartbeat: Mutex<Option<tokio_util::sync::CancellationToken>>,
    /// Where the context's first items are recorded, written with a new header.
    base: Option<Base>,
}

struct Writer {
    /// Items of the context already recorded (in its base or its log).
    items_persisted: usize,
    /// How many of the context's first items are its base's, not in its own log.
    base: usize,
    ledger_next_seq: u64,
    lease: Option<Lease>,
    header: Option<Header>,
}

struct Frame {
    path: String,
    counts: BTreeMap<String, u32>,
}

impl Journal {
    /// The journal of a new execution.
    pub(crate) fn new(
        durability: Durability,
        execution_id: String,
        metadata: Value,
        thread_id: Option<String>,
        resource_id: Option<String>,
        base: Option<Base>,
    ) -> Self {
        let retention = durability.retention;
        let base_count = base.as_ref().map_or(0, |base| base.count as usize);
        Journal {
            durability,
            execution_id,
            writer: tokio::sync::Mutex::new(Writer {
                items_persisted: base_count,
                base: base_count,
                ledger_next_seq: 0,
                lease: None,
                header: None,
            }),
            base,
            frames: Mutex::new(vec![Frame::root()]),
            ledger: Mutex::new(Ledger::new(retention)),
            cursors: Mutex::new(BTreeMap::new()),
            metadata,
            thread_id,
            resource_id,
            runs: Mutex::new(0),
            heartbeat: Mutex::new(None),
        }
    }

    /// The journal of a restored execution: it continues where `restored` stopped.
    pub(crate) fn restored(durability: Durability, restored: &mut Restored) -> Self {
        let retention = durability.retention;
        Journal {
            execution_id: restored.header.execution_id.clone(),
            metadata: restored.header.metadata.clone(),
            thread_id: restored.header.thread_id.clone(),
            resource_id: restored.header.resource_id.clone(),
            durability,
            base: restored.header.base.clone(),
            writer: tokio::sync::Mutex::new(Writer {
                items_persisted: restored.items.len(),
                base: restored
                    .header
                    .base
                    .as_ref()
                    .map_or(0, |base| base.count as usize),
                ledger_next_seq: restored.ledger_next_seq,
                lease: None,
                header: Some(restored.header.clone()),
            }),
            frames: Mutex::new(vec![Frame::root()]),
            ledger: Mutex::new(Ledger::loaded(
                retention,
                std::mem::take(&mut restored.ledger),
            )),
            cursors: Mutex::new(std::mem::take(&mut restored.state.cursors)),
            runs: Mutex::new(0),
            heartbeat: Mutex::new(None),
        }
    }

    /// Starts a run on the context: the outermost run takes the execution's lease and writes the header
    /// (status `running`, the input) before anything else happens. Returns whether this is the outermost.
    ///
    /// # Errors
    /// [`Error::LeaseHeld`] when another runtime's lease on the execution is live; storage errors.
    pub(crate) async fn begin(
        self: &Arc<Self>,
        input: &Value,
        source: &dyn CheckpointSource,
    ) -> Result<bool> {
        {
            let mut runs = lock(&self.runs);
            *runs += 1;
            if *runs > 1 {
                return Ok(false);
            }
        }
        let result = self.begin_outermost(input, source).await;
        match result {
            Ok(()) => {
                self.start_heartbeat();
                Ok(true)
            }
            Err(error) => {
                *lock(&self.runs) -= 1;
                Err(error)
            }
        }
    }

    /// Renews the lease in the background while the run lives, so a long model round or tool call does
    /// not let it expire. A renewal that finds the lease taken stops: the next checkpoint then fails
    /// with `LEASE_LOST` (the store fences it).
    fn start_heartbeat(self: &Arc<Self>) {
        let stop = tokio_util::sync::CancellationToken::new();
        if let Some(previous) = lock(&self.heartbeat).replace(stop.clone()) {
            previous.cancel();
        }
        let period = (self.durability.lease_ttl / 4).max(Duration::from_millis(10));
        let journal = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(period) => {}
                }
                let Some(journal) = journal.upgrade() else {
                    return;
                };
                let mut writer = journal.writer.lock().await;
                if writer.lease.is_none() || stop.is_cancelled() {
                    return;
                }
                if let Err(error) = journal.renew_if_due(&mut writer).await {
                    tracing::warn!(execution_id = %journal.execution_id, %error, "execution lease not renewed");
                    return;
                }
            }
        });
    }

    fn stop_heartbeat(&self) {
        if let Some(stop) = lock(&self.heartbeat).take() {
            stop.cancel();
        }
    }

    async fn begin_outermost(&self, input: &Value, source: &dyn CheckpointSource) -> Result<()> {
        let mut writer = self.writer.lock().await;
        let now = now_ms();
        let lease = self
            .durability
            .store
            .acquire_lease(LeaseRequest::new(
                &record::lease_name(&self.execution_id),
                &self.durability.holder,
                self.durability.lease_ttl.as_millis() as u64,
                now,
            ))
            .await?;
        writer.lease = Some(lease);
        let header = match writer.header.take() {
            Some(mut header) => {
                header.status = ExecutionStatus::Running;
                header.updated_ms = now;
                header
            }
            None => Header {
                schema_version: SCHEMA_VERSION,
                execution_id: self.execution_id.clone(),
                thread_id: self.thread_id.clone(),
                resource_id: self.resource_id.clone(),
                status: ExecutionStatus::Running,
                input: input.clone(),
                output: None,
                error: None,
                metadata: self.metadata.clone(),
                base: self.base.clone(),
                created_ms: now,
                updated_ms: now,
            },
        };
        let commit = Commit::new().put(record::header_key(&self.execution_id), to_bytes(&header)?);
        writer.header = Some(header);
        self.commit(&mut writer, commit, source).await
    }

    /// Ends the outermost run: a last checkpoint, and the header's status, output or error.
    pub(crate) async fn finish(
        &self,
        result: &Result<Value>,
        source: &dyn CheckpointSource,
    ) -> Result<()> {
        let nested = {
            let mut runs = lock(&self.runs);
            *runs = runs.saturating_sub(1);
            *runs > 0
        };
        if nested {
            return self.checkpoint(source).await;
        }
        self.stop_heartbeat();
        let mut writer = self.writer.lock().await;
        let Some(mut header) = writer.header.take() else {
            return Ok(());
        };
        header.updated_ms = now_ms();
        match result {
            Ok(output) => {
                header.status = ExecutionStatus::Completed;
                header.output = Some(output.clone());
                header.error = None;
            }
            Err(error) => {
                header.status = ExecutionStatus::Failed;
                header.error = Some(ErrorRecord {
                    code: error.code().to_owned(),
                    message: error.to_string(),
                });
            }
        }
        let commit = Commit::new().put(record::header_key(&self.execution_id), to_bytes(&header)?);
        writer.header = Some(header);
        self.commit(&mut writer, commit, source).await
    }

    /// Records what changed since the last checkpoint.
    ///
    /// # Errors
    /// [`Error::LeaseLost`] when another runtime took the execution over; storage errors.
    pub(crate) async fn checkpoint(&self, source: &dyn CheckpointSource) -> Result<()> {
        let mut writer = self.writer.lock().await;
        if writer.lease.is_none() {
            // No run has begun on this journal: nothing is recorded outside a run.
            return Ok(());
        }
        self.commit(&mut writer, Commit::new(), source).await
    }

    async fn commit(
        &self,
        writer: &mut Writer,
        mut commit: Commit,
        source: &dyn CheckpointSource,
    ) -> Result<()> {
        self.renew_if_due(writer).await?;
        let persisted = writer.items_persisted;
        let Snapshot {
            new_items,
            item_count,
            state,
            spend,
            step_count,
            steers_taken,
        } = source.snapshot(persisted);
        let entries = new_items.iter().map(to_bytes).collect::<Result<Vec<_>>>()?;
        commit = commit.append(
            record::items_log(&self.execution_id),
            (persisted - writer.base) as u64,
            entries,
        );
        let (rows, trim_below) = lock(&self.ledger).take_pending(writer.ledger_next_seq);
        let row_count = rows.len() as u64;
        let rows = rows.iter().map(to_bytes).collect::<Result<Vec<_>>>()?;
        commit = commit.append(
            record::ledger_log(&self.execution_id),
            writer.ledger_next_seq,
            rows,
        );
        if let Some(below) = trim_below {
            commit = commit.trim(record::ledger_log(&self.execution_id), below);
        }
        let state = StateRecord {
            schema_version: SCHEMA_VERSION,
            item_count: item_count as u64,
            state,
            spend,
            step_count,
            cursors: lock(&self.cursors).clone(),
            steers_taken,
        };
        commit = commit
            .put(record::state_key(&self.execution_id), to_bytes(&state)?)
            .fenced(writer.lease.as_ref().map(Lease::fence));
        let deferred = self.durability.deferred_deletes.of(&self.execution_id);
        let mut deleted = Vec::with_capacity(deferred.len());
        for (id, row) in deferred {
            commit = commit.delete(row);
            deleted.push(id);
        }
        self.durability.store.commit(commit).await?;
        self.durability
            .deferred_deletes
            .applied(&self.execution_id, &deleted);
        writer.items_persisted = item_count;
        writer.ledger_next_seq += row_count;
        Ok(())
    }

    /// The execution this journal records.
    pub(crate) fn execution_id(&self) -> &str {
        &self.execution_id
    }

    /// Whether a run is in progress on this journal (its checkpoints are being committed).
    pub(crate) fn in_run(&self) -> bool {
        *lock(&self.runs) > 0
    }

    async fn renew_if_due(&self, writer: &mut Writer) -> Result<()> {
        if let Some(lease) = &writer.lease
            && let Some(renewed) = renew_if_due(&self.durability, lease).await?
        {
            writer.lease = Some(renewed);
        }
        Ok(())
    }

    /// Releases the execution's lease (when the context closes).
    pub(crate) async fn release(&self) {
        self.stop_heartbeat();
        let mut writer = self.writer.lock().await;
        if let Some(lease) = writer.lease.take()
            && let Err(error) = self.durability.store.release_lease(&lease).await
        {
            tracing::warn!(execution_id = %self.execution_id, %error, "could not release the execution lease");
        }
    }

    /// Enters a step: its ledger path, and its recorded output when the ledger has one for this path
    /// with the same id and kind (then the step is not entered: no [`Journal::exit`] follows).
    pub(crate) fn enter(&self, step_id: &str, kind: StepKind) -> Entered {
        let mut frames = lock(&self.frames);
        let parent = frames.last_mut().map_or(String::new(), |frame| {
            let n = frame.counts.entry(step_id.to_owned()).or_insert(0);
            let path = format!("{}/{step_id}#{n}", frame.path);
            *n += 1;
            path
        });
        let path = parent;
        if let Some(output) = lock(&self.ledger).replay(&path, step_id, kind) {
            return Entered::Replayed { path, output };
        }
        frames.push(Frame {
            path: path.clone(),
            counts: BTreeMap::new(),
        });
        Entered::Run { path }
    }

    /// Leaves the step entered last; on success its output joins the ledger (recorded at the next
    /// checkpoint, which the interpreter makes right away).
    pub(crate) fn exit(&self, path: &str, step_id: &str, kind: StepKind, output: Option<&Value>) {
        {
            let mut frames = lock(&self.frames);
            if frames.last().is_some_and(|frame| frame.path == path) {
                frames.pop();
            }
        }
        if let Some(output) = output {
            // A failed step keeps its cursor: resuming continues its rounds rather than restarting it.
            lock(&self.cursors).remove(path);
            lock(&self.ledger).record(path, step_id, kind, output);
        }
    }

    /// The ledger path of the innermost running step.
    pub(crate) fn current_path(&self) -> String {
        lock(&self.frames)
            .last()
            .map(|frame| frame.path.clone())
            .unwrap_or_default()
    }

    /// The recorded cursor of the `call_model` at `path`, if it was open at the last checkpoint.
    pub(crate) fn cursor(&self, path: &str) -> Option<Cursor> {
        lock(&self.cursors).get(path).cloned()
    }

    /// Sets the cursor of the `call_model` at `path` (recorded at the next checkpoint).
    pub(crate) fn set_cursor(&self, path: &str, cursor: Cursor) {
        lock(&self.cursors).insert(path.to_owned(), cursor);
    }
}

/// What [`Journal::enter`] decided.
pub(crate) enum Entered {
    /// Run the step; exit with this path.
    Run { path: String },
    /// The step completed before (its output is recorded): return it.
    Replayed { path: String, output: Value },
}

impl Frame {
    fn root() -> Self {
        Frame {
            path: String::new(),
            counts: BTreeMap::new(),
        }
    }
}

pub(crate) fn to_bytes(value: &impl Serialize) -> Result<Vec<u8>> {
    serde_json::to_vec(value).map_err(|error| Error::Storage {
        operation: "checkpoint",
        key: "(serialize)".to_owned(),
        source: Box::new(error),
    })
}

/// Renews `lease` once half its TTL has passed: the renewed lease, or `None` when not due yet.
///
/// # Errors
/// [`Error::LeaseLost`] when someone else holds or has held it since; storage errors.
pub(crate) async fn renew_if_due(durability: &Durability, lease: &Lease) -> Result<Option<Lease>> {
    let ttl = durability.lease_ttl.as_millis() as u64;
    let now = now_ms();
    if lease.expires_at_ms.saturating_sub(now) > ttl / 2 {
        return Ok(None);
    }
    let renewed = durability
        .store
        .acquire_lease(LeaseRequest::renewal(lease, ttl, now))
        .await;
    renewal_outcome(lease, renewed).map(Some)
}

/// What a renewal of `held` that returned `renewed` means for its holder: the lease to keep, or
/// `LEASE_LOST` when someone else holds or has held it since.
fn renewal_outcome(held: &Lease, renewed: Result<Lease>) -> Result<Lease> {
    match renewed {
        // Renewed; or re-taken after it expired with nobody else taking it meanwhile (any other
        // holder would have raised the epoch once more).
        Ok(renewed) if renewed.epoch == held.epoch || renewed.epoch == held.epoch + 1 => {
            Ok(renewed)
        }
        // Taken over (held by another, or taken and released since): we are fenced.
        Ok(_) | Err(Error::LeaseHeld { .. }) => Err(Error::LeaseLost {
            lease: held.name.clone(),
            epoch: held.epoch,
        }),
        Err(error) => Err(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(epoch: u64) -> Lease {
        Lease {
            name: "execution/e".to_owned(),
            holder: "a".to_owned(),
            epoch,
            expires_at_ms: 10,
        }
    }

    #[test]
    fn a_renewal_keeps_the_lease_at_its_epoch_or_one_above_after_a_lapse() {
        assert_eq!(renewal_outcome(&lease(3), Ok(lease(3))).unwrap().epoch, 3);
        assert_eq!(renewal_outcome(&lease(3), Ok(lease(4))).unwrap().epoch, 4);
    }

    #[test]
    fn a_renewal_that_finds_another_holder_since_is_lease_lost() {
        let lost = renewal_outcome(&lease(3), Ok(lease(5))).unwrap_err();
        assert_eq!(lost.code(), "LEASE_LOST");
        let held = Error::LeaseHeld {
            lease: "execution/e".to_owned(),
            holder: "b".to_owned(),
            expires_at_ms: 20,
        };
        let lost = renewal_outcome(&lease(3), Err(held)).unwrap_err();
        assert!(
            matches!(lost, Error::LeaseLost { epoch: 3, .. }),
            "{lost:?}"
        );
        let busy = renewal_outcome(
            &lease(3),
            Err(Error::StorageBusy {
                operation: "acquire_lease",
                key: "execution/e".to_owned(),
                source: "locked".into(),
            }),
        );
        assert_eq!(busy.unwrap_err().code(), "STORAGE_BUSY");
    }
}
