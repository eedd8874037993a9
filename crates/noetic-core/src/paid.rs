//! Paid-call records: every model round gets one before its request is sent (its `dispatch_id`),
//! gains the provider's generation id when the response headers arrive, and is dropped once the
//! round is priced (its response is in, with the usage the provider reported) or the provider refused
//! it before any response. A record whose round ended otherwise — cut off by a cancel, a steer or a
//! broken stream — stays *pending*: the provider may have billed it, and only its billing can say
//! what it cost. [`AgentHarness::pending_spend`](crate::AgentHarness::pending_spend) lists those, and
//! [`AgentHarness::settle_spend`](crate::AgentHarness::settle_spend) marks one reconciled.
//!
//! These records live in memory, one set per runtime. (Persisting them with durable storage, so a
//! crash mid-stream leaves its record pending for the next process, is issue 12's remaining part.)
//!
//! The lock of the set is also what makes a drain airtight: a round registers under it only when no
//! drain covers its context, and a drain starts under it, so every round is either in the drain's
//! snapshot of calls in flight or held before it is sent.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::drain::PaidCall;
use crate::sync::lock;

/// The paid-call records of one runtime.
#[derive(Default)]
pub(crate) struct PaidCalls {
    records: Mutex<HashMap<String, Record>>,
    /// The next record's dispatch order.
    next: AtomicU64,
}

struct Record {
    /// Dispatch order.
    seq: u64,
    call: PaidCall,
    /// The ids of the contexts from the root down to the one the call runs in.
    path: Vec<String>,
    /// Whether its round is still running.
    in_flight: bool,
}

impl PaidCalls {
    /// Records `call` as dispatched under `dispatch_id`, unless `held()` (checked under the lock)
    /// says a drain covers it; returns whether it was recorded.
    pub(crate) fn dispatch(
        &self,
        dispatch_id: &str,
        call: PaidCall,
        path: Vec<String>,
        held: impl FnOnce() -> bool,
    ) -> bool {
        let mut records = lock(&self.records);
        if held() {
            return false;
        }
        records.insert(
            dispatch_id.to_owned(),
            Record {
                seq: self.next.fetch_add(1, Ordering::Relaxed),
                call,
                path,
                in_flight: true,
            },
        );
        true
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

    /// Notes the provider's generation id of a call (the first one known wins).
    pub(crate) fn set_generation(&self, dispatch_id: &str, generation_id: &str) {
        if let Some(record) = lock(&self.records).get_mut(dispatch_id)
            && record.call.generation_id.is_none()
        {
            record.call.generation_id = Some(generation_id.to_owned());
        }
    }

    /// The call as recorded now.
    pub(crate) fn get(&self, dispatch_id: &str) -> Option<PaidCall> {
        lock(&self.records)
            .get(dispatch_id)
            .map(|record| record.call.clone())
    }

    /// Ends a call that needs no reconciling (priced, or refused before any response): its record
    /// goes. Returns it.
    pub(crate) fn close(&self, dispatch_id: &str) -> Option<PaidCall> {
        lock(&self.records)
            .remove(dispatch_id)
            .map(|record| record.call)
    }

    /// Ends a call whose round was cut before it was priced: its record stays, pending. Returns it.
    pub(crate) fn cut(&self, dispatch_id: &str) -> Option<PaidCall> {
        let mut records = lock(&self.records);
        let record = records.get_mut(dispatch_id)?;
        record.in_flight = false;
        Some(record.call.clone())
    }

    /// The records of calls that ended unpriced, oldest dispatch first.
    pub(crate) fn pending(&self) -> Vec<PaidCall> {
        let records = lock(&self.records);
        let mut pending: Vec<&Record> = records
            .values()
            .filter(|record| !record.in_flight)
            .collect();
        pending.sort_by_key(|record| record.seq);
        pending
            .into_iter()
            .map(|record| record.call.clone())
            .collect()
    }

    /// Marks a pending record reconciled (it goes) and returns it with `cost`; `None` when no pending
    /// record has that id.
    pub(crate) fn settle(&self, dispatch_id: &str, cost: Option<f64>) -> Option<PaidCall> {
        let mut records = lock(&self.records);
        if !records.get(dispatch_id)?.in_flight {
            let mut call = records.remove(dispatch_id)?.call;
            call.cost = cost;
            return Some(call);
        }
        None
    }
}
