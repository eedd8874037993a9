//! Paid-call records: every model round gets one before its request is sent (its `dispatch_id`),
//! gains the provider's generation id when the response headers arrive, and is dropped once the
//! round is priced (its response is in, with the usage the provider reported) or the provider refused
//! it before any response. A record whose round ended otherwise — cut off by a cancel, a steer or a
//! broken stream, or by a crash — stays *pending*: the provider may have billed it, and only its
//! billing can say what it cost. [`AgentHarness::pending_spend`](crate::AgentHarness::pending_spend)
//! lists those, and [`AgentHarness::settle_spend`](crate::AgentHarness::settle_spend) marks one
//! reconciled.
//!
//! In memory the set tells rounds in flight from pending ones. With durable storage each record is
//! also a row `paid/<dispatch_id>`, written before the request is sent and deleted once the round is
//! priced or refused (inside a durable run, by the checkpoint commit that records the round:
//! [`PaidCalls::close_deferred`]): a row that exists is unpriced, so a process killed mid-stream
//! leaves exactly the rows of its rounds in flight, and the next process lists them as pending.
//!
//! The lock of the set is also what makes a drain airtight: a round registers under it only when no
//! drain covers its context, and a drain starts under it, so every round is either in the drain's
//! snapshot of calls in flight or held before it is sent.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use crate::Result;
use crate::adapter::durable::{Commit, DurableStore};
use crate::checkpoint::{DeferredDeletes, SCHEMA_VERSION, now_ms, parse, to_bytes};
use crate::drain::PaidCall;
use crate::sync::lock;

/// Where paid-call rows live in durable storage.
const PREFIX: &str = "paid/";

/// What `parse` names as the execution of a bad row (a paid record belongs to no one execution
/// until it is read).
const SUBJECT: &str = "(paid calls)";

/// The paid-call records of one runtime.
pub(crate) struct PaidCalls {
    records: Mutex<HashMap<String, Record>>,
    /// Calls priced or refused whose rows are deleted by the next checkpoint commit of their
    /// execution ([`PaidCalls::close_deferred`]), rather than by a commit of their own; not pending
    /// meanwhile. Shared with the runtime's checkpoint journals, whose commits carry the deletes.
    deferred: Arc<DeferredDeletes>,
    /// The next record's dispatch order.
    next: AtomicU64,
    /// The durable store, when the runtime has one.
    store: Option<Arc<dyn DurableStore>>,
}

struct Record {
    /// Dispatch order.
    seq: u64,
    dispatched_at_ms: u64,
    call: PaidCall,
    /// The ids of the contexts from the root down to the one the call runs in.
    path: Vec<String>,
    /// Whether its round is still running.
    in_flight: bool,
}

/// A paid-call row.
#[derive(Deserialize)]
struct StoredCall {
    dispatched_at_ms: u64,
    call: PaidCall,
}

/// A paid-call row as written (`StoredCall` with its schema version), borrowing the call.
#[derive(Serialize)]
struct Row<'a> {
    schema_version: u32,
    dispatched_at_ms: u64,
    call: &'a PaidCall,
}

/// The bytes of `call`'s row.
fn row_bytes(dispatched_at_ms: u64, call: &PaidCall) -> Result<Vec<u8>> {
    to_bytes(&Row {
        schema_version: SCHEMA_VERSION,
        dispatched_at_ms,
        call,
    })
}

fn key(dispatch_id: &str) -> String {
    format!("{PREFIX}{dispatch_id}")
}

impl PaidCalls {
    /// Paid-call records kept in `store`, if any; `deferred` holds the deletes
    /// [`PaidCalls::close_deferred`] leaves to the checkpoint commits.
    pub(crate) fn new(
        store: Option<Arc<dyn DurableStore>>,
        deferred: Arc<DeferredDeletes>,
    ) -> Self {
        PaidCalls {
            records: Mutex::new(HashMap::new()),
            deferred,
            next: AtomicU64::new(0),
            store,
        }
    }

    /// Records `call` as dispatched under `dispatch_id`, unless `held()` (checked under the lock)
    /// says a drain covers it; returns whether it was recorded. With durable storage the row is
    /// written before this returns `Ok(true)`.
    ///
    /// # Errors
    /// The store's, for the row (the call is then not recorded).
    pub(crate) async fn dispatch(
        &self,
        dispatch_id: &str,
        call: PaidCall,
        path: Vec<String>,
        held: impl FnOnce() -> bool,
    ) -> Result<bool> {
        let dispatched_at_ms = now_ms();
        let row = match &self.store {
            Some(_) => Some(row_bytes(dispatched_at_ms, &call)?),
            None => None,
        };
        {
            let mut records = lock(&self.records);
            if held() {
                return Ok(false);
            }
            records.insert(
                dispatch_id.to_owned(),
                Record {
                    seq: self.next.fetch_add(1, Ordering::Relaxed),
                    dispatched_at_ms,
                    call,
                    path,
                    in_flight: true,
                },
            );
        }
        if let (Some(store), Some(row)) = (&self.store, row)
            && let Err(error) = store.commit(Commit::new().put(key(dispatch_id), row)).await
        {
            lock(&self.records).remove(dispatch_id);
            return Err(error);
        }
        Ok(true)
    }

    /// Under the lock: the calls in flight whose context path `covers`, handed to `install` (which
    /// starts the drain and says whether it did). Returns them when it did.
    pub(crate) fn start_drain(
        &self,
        covers: impl Fn(&[String]) -> bool,
        install: impl FnOnce(&[PaidCall]) -> bool,
    ) -> Option<Vec<PaidCall>> {
        let records = lock(&self.records);
        let calls: Vec<PaidCall> = records
            .values()
            .filter(|record| record.in_flight && covers(&record.path))
            .map(|record| record.call.clone())
            .collect();
        install(&calls).then_some(calls)
    }

    /// Notes the provider's generation id of a call (the first one known wins), in its row too.
    ///
    /// # Errors
    /// The store's.
    pub(crate) async fn set_generation(
        &self,
        dispatch_id: &str,
        generation_id: &str,
    ) -> Result<()> {
        let row = {
            let mut records = lock(&self.records);
            let Some(record) = records.get_mut(dispatch_id) else {
                return Ok(());
            };
            if record.call.generation_id.is_some() {
                return Ok(());
            }
            record.call.generation_id = Some(generation_id.to_owned());
            match &self.store {
                Some(_) => row_bytes(record.dispatched_at_ms, &record.call)?,
                None => return Ok(()),
            }
        };
        match &self.store {
            Some(store) => store.commit(Commit::new().put(key(dispatch_id), row)).await,
            None => Ok(()),
        }
    }

    /// The call as recorded now.
    pub(crate) fn get(&self, dispatch_id: &str) -> Option<PaidCall> {
        lock(&self.records)
            .get(dispatch_id)
            .map(|record| record.call.clone())
    }

    /// Ends a call that needs no reconciling (priced, or refused before any response): its record
    /// and its row go. Returns it.
    ///
    /// # Errors
    /// The store's, deleting the row (which then stays, pending).
    pub(crate) async fn close(&self, dispatch_id: &str) -> Result<Option<PaidCall>> {
        let call = lock(&self.records)
            .remove(dispatch_id)
            .map(|record| record.call);
        if let Some(store) = &self.store {
            store.commit(Commit::new().delete(key(dispatch_id))).await?;
        }
        Ok(call)
    }

    /// As [`PaidCalls::close`], but the row is deleted by the next checkpoint commit of the call's
    /// execution, `execution_id` (which records the round's result, so the two land together),
    /// instead of a commit of its own: one write less per model round. Until then the call is not
    /// pending. Only for a call made inside a durable run, whose checkpoints follow.
    pub(crate) fn close_deferred(&self, dispatch_id: &str, execution_id: &str) -> Option<PaidCall> {
        let call = lock(&self.records)
            .remove(dispatch_id)
            .map(|record| record.call);
        if self.store.is_some() {
            self.deferred
                .defer(execution_id, dispatch_id.to_owned(), key(dispatch_id));
        }
        call
    }

    /// Ends a call whose round was cut before it was priced: its record stays, pending (its row is
    /// there already). Returns it.
    pub(crate) fn cut(&self, dispatch_id: &str) -> Option<PaidCall> {
        let call = {
            let mut records = lock(&self.records);
            let record = records.get_mut(dispatch_id)?;
            record.in_flight = false;
            record.call.clone()
        };
        // Counted once the lock is released: a subscriber's work never runs under it.
        crate::telemetry::paid_call_left_pending(&call);
        Some(call)
    }

    /// The calls that ended unpriced, oldest dispatch first: in memory, or every row of the store
    /// but this runtime's rounds still in flight.
    ///
    /// # Errors
    /// The store's; [`crate::Error::CheckpointCorrupt`] or [`crate::Error::CheckpointSchemaMismatch`] naming a bad
    /// row.
    pub(crate) async fn pending(&self) -> Result<Vec<PaidCall>> {
        let Some(store) = &self.store else {
            let records = lock(&self.records);
            let mut pending: Vec<&Record> = records
                .values()
                .filter(|record| !record.in_flight)
                .collect();
            pending.sort_by_key(|record| record.seq);
            return Ok(pending
                .into_iter()
                .map(|record| record.call.clone())
                .collect());
        };
        let rows = store.records(PREFIX).await?;
        let mut pending = Vec::with_capacity(rows.len());
        for (row_key, bytes) in rows {
            let stored: StoredCall = parse(SUBJECT, &row_key, &bytes)?;
            pending.push(stored);
        }
        {
            let records = lock(&self.records);
            pending.retain(|stored| {
                let dispatch_id = stored.call.dispatch_id.as_deref().unwrap_or_default();
                !self.deferred.contains(dispatch_id)
                    && !records
                        .get(dispatch_id)
                        .is_some_and(|record| record.in_flight)
            });
        }
        pending.sort_by(|a, b| {
            (a.dispatched_at_ms, &a.call.dispatch_id)
                .cmp(&(b.dispatched_at_ms, &b.call.dispatch_id))
        });
        Ok(pending.into_iter().map(|stored| stored.call).collect())
    }

    /// Marks a pending call reconciled (its record and row go) and returns it with `cost`; `None`
    /// when no pending call has that id.
    ///
    /// # Errors
    /// The store's; a bad row as for [`PaidCalls::pending`].
    pub(crate) async fn settle(
        &self,
        dispatch_id: &str,
        cost: Option<f64>,
    ) -> Result<Option<PaidCall>> {
        if self.deferred.contains(dispatch_id) {
            // Priced: its row only waits for its delete.
            return Ok(None);
        }
        let in_memory = {
            let mut records = lock(&self.records);
            match records.get(dispatch_id) {
                Some(record) if record.in_flight => return Ok(None),
                Some(_) => records.remove(dispatch_id).map(|record| record.call),
                None => None,
            }
        };
        let call = match &self.store {
            Some(store) => {
                let row_key = key(dispatch_id);
                let Some(bytes) = store.record(&row_key).await? else {
                    return Ok(in_memory.map(|call| PaidCall { cost, ..call }));
                };
                let stored: StoredCall = parse(SUBJECT, &row_key, &bytes)?;
                store.commit(Commit::new().delete(row_key)).await?;
                Some(stored.call)
            }
            None => in_memory,
        };
        Ok(call.map(|call| PaidCall { cost, ..call }))
    }
}

impl Default for PaidCalls {
    fn default() -> Self {
        PaidCalls::new(None, Arc::default())
    }
}
