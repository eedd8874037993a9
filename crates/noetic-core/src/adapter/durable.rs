//! Durable records, append-only logs and fenced leases: the [`DurableStore`] trait and [`KvDurableStore`],
//! its implementation over any [`StorageAdapter`](super::storage::StorageAdapter).
//!
//! Checkpoints, the step ledger, durable sessions and leases are written through this one trait. It has
//! three kinds of data, each addressed by a `/`-separated name:
//!
//! - **records**: small values set and replaced whole (an execution's header, its latest state);
//! - **logs**: append-only sequences of entries numbered from 0 (an execution's item log, its step
//!   ledger, a thread's queued messages). An append names the sequence number its first entry gets, which
//!   must be the log's next one, so a write is never silently duplicated and history is never rewritten:
//!   the bytes a checkpoint writes do not grow with the history behind it;
//! - **leases**: one holder at a time per name, with a fencing `epoch` that grows on every change of
//!   holder. A [`Commit`] carrying a [`Fence`] applies only while that lease still has that epoch;
//! - **runnable marks**: lease names with work waiting (a thread with accepted messages no turn has
//!   settled). Any writer sets one ([`Commit::mark_runnable`]); a host looking for work claims the oldest
//!   marked name whose lease is free ([`DurableStore::claim_runnable`]), and the lease's holder clears
//!   the mark once the work is done ([`Commit::clear_runnable`]). Marks are the work queue of hosts that
//!   share one store; [`DurableStore::wait_runnable`] only wakes them early.
//!
//! Every write is one atomic [`Commit`]. A store backed by a database (`noetic-storage-sqlite`) keeps
//! each kind in its own table; [`KvDurableStore`] lays them out as keys of a [`StorageAdapter`](super::storage::StorageAdapter) and is
//! what a harness uses when it is given only a key-value adapter.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};

pub use super::kv_durable::KvDurableStore;
use crate::{Error, Result};

/// Entries appended to one log by a [`Commit`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LogAppend {
    /// The log's name.
    pub log: String,
    /// The sequence number of the first entry; must equal the log's next sequence number.
    pub first_seq: u64,
    /// The entries, in order.
    pub entries: Vec<Vec<u8>>,
}

impl LogAppend {
    /// Appends `entries` to `log` starting at `first_seq`.
    pub fn new(log: impl Into<String>, first_seq: u64, entries: Vec<Vec<u8>>) -> Self {
        LogAppend {
            log: log.into(),
            first_seq,
            entries,
        }
    }
}

/// The lease a [`Commit`] is conditional on: it applies only while `lease` is held at `epoch`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Fence {
    /// The lease's name.
    pub lease: String,
    /// The epoch the writer holds.
    pub epoch: u64,
}

impl Fence {
    /// A fence on `lease` at `epoch`.
    pub fn new(lease: impl Into<String>, epoch: u64) -> Self {
        Fence {
            lease: lease.into(),
            epoch,
        }
    }
}

/// One atomic write: either every part is visible afterwards or, on error, none is.
///
/// Parts apply in field order: `clear_prefixes`, `trims`, `deletes`, `puts`, `appends`,
/// `drop_leases`, `clear_runnable`, `mark_runnable`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Commit {
    /// When set, the commit fails with [`Error::LeaseLost`] unless the lease is held at that epoch.
    pub fence: Option<Fence>,
    /// Records and logs whose names start with one of these prefixes are removed entirely (a log
    /// removed this way starts again at sequence 0).
    pub clear_prefixes: Vec<String>,
    /// `(log, below)`: entries of `log` with a sequence number below `below` are removed. The log's next
    /// sequence number does not change.
    pub trims: Vec<(String, u64)>,
    /// Records removed (a missing record is not an error).
    pub deletes: Vec<String>,
    /// Records set, replacing any previous value.
    pub puts: Vec<(String, Vec<u8>)>,
    /// Log entries appended.
    pub appends: Vec<LogAppend>,
    /// Leases removed outright (a missing lease is not an error): only for names never used again —
    /// a finished session turn's execution lease, say — since a lease acquired after it starts at
    /// epoch 1 again.
    pub drop_leases: Vec<String>,
    /// Runnable marks removed (a missing mark is not an error).
    pub clear_runnable: Vec<String>,
    /// Runnable marks set; a name already marked keeps its place in the claim order.
    pub mark_runnable: Vec<String>,
    /// Names announced to [`DurableStore::wait_announced`] waiters once the commit is applied
    /// (a log that grew, say): a wake-up only, writing nothing. A store that cannot tell other
    /// processes ignores them (its waiters poll).
    pub announce: Vec<String>,
}

impl Commit {
    /// An empty commit.
    pub fn new() -> Self {
        Commit::default()
    }

    /// Makes the commit conditional on `fence`.
    pub fn fenced(mut self, fence: Option<Fence>) -> Self {
        self.fence = fence;
        self
    }

    /// Sets record `key` to `value`.
    pub fn put(mut self, key: impl Into<String>, value: impl Into<Vec<u8>>) -> Self {
        self.puts.push((key.into(), value.into()));
        self
    }

    /// Removes record `key`.
    pub fn delete(mut self, key: impl Into<String>) -> Self {
        self.deletes.push(key.into());
        self
    }

    /// Appends `entries` to `log` from `first_seq`.
    pub fn append(mut self, log: impl Into<String>, first_seq: u64, entries: Vec<Vec<u8>>) -> Self {
        if !entries.is_empty() {
            self.appends.push(LogAppend::new(log, first_seq, entries));
        }
        self
    }

    /// Removes the entries of `log` below sequence number `below`.
    pub fn trim(mut self, log: impl Into<String>, below: u64) -> Self {
        self.trims.push((log.into(), below));
        self
    }

    /// Removes every record and log whose name starts with `prefix`.
    pub fn clear_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.clear_prefixes.push(prefix.into());
        self
    }

    /// Removes the lease `name` (see [`Commit::drop_leases`]).
    pub fn drop_lease(mut self, name: impl Into<String>) -> Self {
        self.drop_leases.push(name.into());
        self
    }

    /// Marks lease name `name` runnable (see [`DurableStore::claim_runnable`]).
    pub fn mark_runnable(mut self, name: impl Into<String>) -> Self {
        self.mark_runnable.push(name.into());
        self
    }

    /// Announces `name` to [`DurableStore::wait_announced`] waiters once the commit is applied.
    pub fn announce(mut self, name: impl Into<String>) -> Self {
        self.announce.push(name.into());
        self
    }

    /// Removes the runnable mark of `name`.
    pub fn clear_runnable(mut self, name: impl Into<String>) -> Self {
        self.clear_runnable.push(name.into());
        self
    }

    /// The name a store's error about the commit as a whole mentions: its fence's lease, else the
    /// first record, log, lease or mark it writes.
    pub fn subject(&self) -> &str {
        self.fence
            .as_ref()
            .map(|fence| fence.lease.as_str())
            .or_else(|| self.puts.first().map(|(key, _)| key.as_str()))
            .or_else(|| self.appends.first().map(|append| append.log.as_str()))
            .or_else(|| self.deletes.first().map(String::as_str))
            .or_else(|| self.clear_prefixes.first().map(String::as_str))
            .or_else(|| self.trims.first().map(|(log, _)| log.as_str()))
            .or_else(|| self.drop_leases.first().map(String::as_str))
            .or_else(|| self.mark_runnable.first().map(String::as_str))
            .or_else(|| self.clear_runnable.first().map(String::as_str))
            .unwrap_or_default()
    }

    /// Whether the commit writes nothing.
    pub fn is_empty(&self) -> bool {
        self.clear_prefixes.is_empty()
            && self.trims.is_empty()
            && self.deletes.is_empty()
            && self.puts.is_empty()
            && self.appends.is_empty()
            && self.drop_leases.is_empty()
            && self.clear_runnable.is_empty()
            && self.mark_runnable.is_empty()
    }
}

/// The smallest string greater than every string starting with `prefix`, `None` when there is none
/// (`prefix` is empty or all `char::MAX`). UTF-8 orders bytewise as code points do, so for a store
/// comparing keys bytewise (SQLite's BINARY, PostgreSQL's "C" collation) `key >= prefix AND key <
/// upper` is exactly "starts with `prefix`", with no `LIKE` wildcards.
pub fn prefix_upper(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        let next = (last as u32 + 1..=char::MAX as u32).find_map(char::from_u32);
        if let Some(next) = next {
            chars.push(next);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

/// Records read back by [`DurableStore::records`]: `(key, value)` pairs sorted by key.
pub type Records = Vec<(String, Vec<u8>)>;

/// One entry read back from a log.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LogEntry {
    /// Its sequence number.
    pub seq: u64,
    /// Its bytes.
    pub value: Vec<u8>,
}

impl LogEntry {
    /// Entry `seq` holding `value` (for stores outside this crate, which read entries back).
    pub fn new(seq: u64, value: Vec<u8>) -> Self {
        LogEntry { seq, value }
    }
}

/// A request to take (or renew) a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseRequest<'a> {
    /// The lease's name (`thread/{id}`, `execution/{id}`).
    pub name: &'a str,
    /// Who asks: stable for one harness instance, distinct between instances.
    pub holder: &'a str,
    /// How long the lease lasts from `now_ms` unless renewed.
    pub ttl_ms: u64,
    /// The caller's clock, in milliseconds since the Unix epoch.
    pub now_ms: u64,
    /// For a renewal, the epoch the caller holds: the request then fails with
    /// [`Error::LeaseLost`] unless the stored lease is still the caller's at that epoch (see
    /// [`decide_lease`]).
    pub renews: Option<u64>,
}

impl<'a> LeaseRequest<'a> {
    /// A request by `holder` for `name`, lasting `ttl_ms` from `now_ms`.
    pub fn new(name: &'a str, holder: &'a str, ttl_ms: u64, now_ms: u64) -> Self {
        LeaseRequest {
            name,
            holder,
            ttl_ms,
            now_ms,
            renews: None,
        }
    }

    /// A renewal of `lease` by its holder, lasting `ttl_ms` from `now_ms`.
    pub fn renewal(lease: &'a Lease, ttl_ms: u64, now_ms: u64) -> Self {
        LeaseRequest {
            renews: Some(lease.epoch),
            ..LeaseRequest::new(&lease.name, &lease.holder, ttl_ms, now_ms)
        }
    }

    /// The same request for `name` (a store claiming one of several names).
    pub fn named(self, name: &'a str) -> Self {
        LeaseRequest { name, ..self }
    }

    /// The same request decided at `now_ms` (a store deciding on its own clock).
    pub fn at(self, now_ms: u64) -> Self {
        LeaseRequest { now_ms, ..self }
    }
}

/// A lease as granted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Lease {
    /// The lease's name.
    pub name: String,
    /// Its holder.
    pub holder: String,
    /// Its fencing epoch: 1 for the first grant, one more on every change of holder.
    pub epoch: u64,
    /// When it expires unless renewed, in milliseconds since the Unix epoch.
    pub expires_at_ms: u64,
}

impl Lease {
    /// Lease `name` held by `holder` at `epoch` until `expires_at_ms` (for stores outside this crate,
    /// which read leases back; grants are decided by [`decide_lease`]).
    pub fn new(
        name: impl Into<String>,
        holder: impl Into<String>,
        epoch: u64,
        expires_at_ms: u64,
    ) -> Self {
        Lease {
            name: name.into(),
            holder: holder.into(),
            epoch,
            expires_at_ms,
        }
    }

    /// The fence for commits made under this lease.
    pub fn fence(&self) -> Fence {
        Fence::new(self.name.clone(), self.epoch)
    }
}

/// Decides a lease request against the current lease (shared by every implementation).
///
/// - a renewal ([`LeaseRequest::renewal`]) of a lease that is gone (dropped: its work finished) or
///   is no longer the caller's at the epoch it holds: [`Error::LeaseLost`] — so a holder that lapsed
///   (a paused process) never gets a lease back under an epoch someone else has since used;
/// - no lease, or an expired one: granted; the epoch grows by one (1 for a first grant);
/// - a live lease of the same holder: renewed at the same epoch;
/// - a live lease of another holder: [`Error::LeaseHeld`].
///
/// # Errors
/// [`Error::LeaseLost`] and [`Error::LeaseHeld`] as above.
pub fn decide_lease(current: Option<&Lease>, request: &LeaseRequest<'_>) -> Result<Lease> {
    if let Some(held) = request.renews
        && !current.is_some_and(|lease| lease.epoch == held && lease.holder == request.holder)
    {
        return Err(Error::LeaseLost {
            lease: request.name.to_owned(),
            epoch: held,
        });
    }
    let expires_at_ms = request.now_ms.saturating_add(request.ttl_ms);
    let epoch = match current {
        None => 1,
        Some(lease) if lease.holder == request.holder && lease.expires_at_ms > request.now_ms => {
            lease.epoch
        }
        Some(lease) if lease.expires_at_ms > request.now_ms => {
            return Err(Error::LeaseHeld {
                lease: lease.name.clone(),
                holder: lease.holder.clone(),
                expires_at_ms: lease.expires_at_ms,
            });
        }
        Some(lease) => lease.epoch + 1,
    };
    Ok(Lease {
        name: request.name.to_owned(),
        holder: request.holder.to_owned(),
        epoch,
        expires_at_ms,
    })
}

/// Durable records, logs and leases. Object safe: the runtime holds one as an `Arc<dyn DurableStore>`.
///
/// Implementations report failures as [`Error::Storage`] (or [`Error::StorageBusy`] /
/// [`Error::StorageReadOnly`]) naming the operation and the record, log or lease involved.
///
/// # Cancel safety
/// Reads are cancel safe. Dropping a commit's future leaves the store either unchanged or with the whole
/// commit applied.
pub trait DurableStore: Send + Sync + 'static {
    /// Applies `commit` atomically.
    ///
    /// # Errors
    /// [`Error::LeaseLost`] when the commit's fence no longer holds; [`Error::Storage`] when an append's
    /// `first_seq` is not its log's next sequence number (naming the log) or the store fails. Nothing is
    /// applied on error.
    fn commit(&self, commit: Commit) -> BoxFuture<'_, Result<()>>;

    /// The value of record `key`, `None` when missing.
    ///
    /// # Errors
    /// [`Error::Storage`] when the store fails.
    fn record<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>>>;

    /// Every record whose key starts with `prefix`, sorted by key.
    ///
    /// # Errors
    /// [`Error::Storage`] when the store fails.
    fn records<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Records>>;

    /// The entries of `log` with sequence numbers ≥ `from_seq`, in order (empty for an unknown log).
    ///
    /// # Errors
    /// [`Error::Storage`] when the store fails.
    fn read_log<'a>(&'a self, log: &'a str, from_seq: u64) -> BoxFuture<'a, Result<Vec<LogEntry>>>;

    /// The sequence number the next entry of `log` gets (0 for an unknown log).
    ///
    /// # Errors
    /// [`Error::Storage`] when the store fails.
    fn next_seq<'a>(&'a self, log: &'a str) -> BoxFuture<'a, Result<u64>>;

    /// Takes or renews a lease, decided by [`decide_lease`] atomically against the stored lease.
    ///
    /// # Errors
    /// [`Error::LeaseHeld`] when another holder's lease is live; [`Error::Storage`] when the store fails.
    fn acquire_lease<'a>(&'a self, request: LeaseRequest<'a>) -> BoxFuture<'a, Result<Lease>>;

    /// Releases `lease` if it is still held at its epoch (otherwise does nothing): the lease is kept,
    /// expired, so the next grant's epoch is still one more.
    ///
    /// # Errors
    /// [`Error::Storage`] when the store fails.
    fn release_lease<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<()>>;

    /// The stored lease of `name`, live or expired.
    ///
    /// # Errors
    /// [`Error::Storage`] when the store fails.
    fn lease<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<Lease>>>;

    /// The names marked runnable that start with `prefix`, oldest mark first.
    ///
    /// # Errors
    /// [`Error::Storage`] when the store fails.
    fn runnable<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Vec<String>>>;

    /// Claims work: takes, for `request.holder`, the lease of the oldest name marked runnable that
    /// starts with `request.name` (a prefix here) and whose lease is free or expired — never one
    /// held live, by anyone (its holder is doing the work). `None` when there is no such name. The
    /// mark stays: its holder clears it when the work is done.
    ///
    /// The provided implementation tries [`DurableStore::runnable`]'s names in order with
    /// [`DurableStore::acquire_lease`]; a database store does it in one statement (PostgreSQL's
    /// `FOR UPDATE SKIP LOCKED`), so hosts claiming at once never contend for one row.
    ///
    /// # Errors
    /// [`Error::Storage`] when the store fails.
    fn claim_runnable<'a>(
        &'a self,
        request: LeaseRequest<'a>,
    ) -> BoxFuture<'a, Result<Option<Lease>>> {
        Box::pin(async move {
            for name in self.runnable(request.name).await? {
                if self
                    .lease(&name)
                    .await?
                    .is_some_and(|lease| lease.expires_at_ms > request.now_ms)
                {
                    continue;
                }
                let claim = request.named(&name);
                match self.acquire_lease(claim).await {
                    Ok(lease) => return Ok(Some(lease)),
                    // Taken meanwhile by another claimer.
                    Err(Error::LeaseHeld { .. }) => continue,
                    Err(error) => return Err(error),
                }
            }
            Ok(None)
        })
    }

    /// Waits until a name may have been marked runnable, at most `timeout`: the names marked since
    /// the last call when the store can tell (PostgreSQL's `LISTEN`), otherwise an empty list, which
    /// means "look". Only a wake-up: a mark set while nobody waited is still found by
    /// [`DurableStore::claim_runnable`]. The provided implementation sleeps `timeout`.
    ///
    /// # Errors
    /// [`Error::Storage`] when the store fails.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped wait loses no mark (marks are rows; only the wake-up is skipped).
    fn wait_runnable(&self, timeout: Duration) -> BoxFuture<'_, Result<Vec<String>>> {
        Box::pin(async move {
            tokio::time::sleep(timeout).await;
            Ok(Vec::new())
        })
    }

    /// Waits until a commit announces `name` ([`Commit::announce`]), at most `timeout`: `true`
    /// when one did (on any host, when the store can tell: PostgreSQL's `NOTIFY`), `false` at the
    /// timeout. Only a wake-up: the waiter looks at the data itself. The waiter is registered when
    /// this is called, not when the future is first polled, so an announcement made between the
    /// call and a look at the data still wakes it. The provided implementation sleeps `timeout`.
    ///
    /// # Errors
    /// [`Error::Storage`] when the store fails.
    ///
    /// # Cancel safety
    /// Cancel safe: it only waits.
    fn wait_announced<'a>(
        &'a self,
        name: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<bool>> {
        let _ = name;
        Box::pin(async move {
            tokio::time::sleep(timeout).await;
            Ok(false)
        })
    }
}

macro_rules! forward_durable {
    ($($wrapper:ident),*) => {$(
        impl<T: DurableStore + ?Sized> DurableStore for $wrapper<T> {
            fn commit(&self, commit: Commit) -> BoxFuture<'_, Result<()>> {
                (**self).commit(commit)
            }

            fn record<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>>> {
                (**self).record(key)
            }

            fn records<'a>(
                &'a self,
                prefix: &'a str,
            ) -> BoxFuture<'a, Result<Records>> {
                (**self).records(prefix)
            }

            fn read_log<'a>(
                &'a self,
                log: &'a str,
                from_seq: u64,
            ) -> BoxFuture<'a, Result<Vec<LogEntry>>> {
                (**self).read_log(log, from_seq)
            }

            fn next_seq<'a>(&'a self, log: &'a str) -> BoxFuture<'a, Result<u64>> {
                (**self).next_seq(log)
            }

            fn acquire_lease<'a>(
                &'a self,
                request: LeaseRequest<'a>,
            ) -> BoxFuture<'a, Result<Lease>> {
                (**self).acquire_lease(request)
            }

            fn release_lease<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<()>> {
                (**self).release_lease(lease)
            }

            fn lease<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<Lease>>> {
                (**self).lease(name)
            }

            fn runnable<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Vec<String>>> {
                (**self).runnable(prefix)
            }

            fn claim_runnable<'a>(
                &'a self,
                request: LeaseRequest<'a>,
            ) -> BoxFuture<'a, Result<Option<Lease>>> {
                (**self).claim_runnable(request)
            }

            fn wait_runnable(&self, timeout: Duration) -> BoxFuture<'_, Result<Vec<String>>> {
                (**self).wait_runnable(timeout)
            }

            fn wait_announced<'a>(
                &'a self,
                name: &'a str,
                timeout: Duration,
            ) -> BoxFuture<'a, Result<bool>> {
                (**self).wait_announced(name, timeout)
            }
        }
    )*};
}

forward_durable!(Arc, Box);

/// The error for an append whose `first_seq` is not the log's next sequence number: an
/// [`Error::Storage`] (`STORAGE_ERROR`) of operation `append` naming the log, whose source is a
/// [`SeqConflict`] (so a writer racing others on one log can tell it apart and retry).
pub fn seq_conflict(log: &str, first_seq: u64, next: u64) -> Error {
    Error::Storage {
        operation: "append",
        key: log.to_owned(),
        source: Box::new(SeqConflict { first_seq, next }),
    }
}

/// The source of [`seq_conflict`]'s error: an append named a sequence number other than its log's
/// next one (another writer appended first).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("append at sequence {first_seq} but the log's next sequence is {next}")]
#[non_exhaustive]
pub struct SeqConflict {
    /// The sequence number the append named.
    pub first_seq: u64,
    /// The log's next sequence number.
    pub next: u64,
}

impl SeqConflict {
    /// The conflict `error` reports, when it is [`seq_conflict`]'s error for `log`.
    pub fn of<'e>(error: &'e Error, log: &str) -> Option<&'e SeqConflict> {
        match error {
            Error::Storage {
                operation: "append",
                key,
                source,
            } if key == log => source.downcast_ref(),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::prefix_upper;

    #[test]
    fn the_upper_bound_of_a_prefix_is_its_last_char_plus_one() {
        assert_eq!(prefix_upper("a/b").as_deref(), Some("a/c"));
        assert_eq!(prefix_upper("").as_deref(), None);
        assert_eq!(prefix_upper("a\u{10FFFF}").as_deref(), Some("b"));
        assert_eq!(prefix_upper("\u{D7FF}").as_deref(), Some("\u{E000}"));
        assert_eq!(prefix_upper("%").as_deref(), Some("&"));
    }
}
