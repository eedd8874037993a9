//! Durable records, append-only logs and fenced leases: the [`DurableStore`] trait and [`KvDurableStore`],
//! its implementation over any [`StorageAdapter`].
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
//!   holder. A [`Commit`] carrying a [`Fence`] applies only while that lease still has that epoch.
//!
//! Every write is one atomic [`Commit`]. A store backed by a database (`noetic-storage-sqlite`) keeps
//! each kind in its own table; [`KvDurableStore`] lays them out as keys of a [`StorageAdapter`] and is
//! what a harness uses when it is given only a key-value adapter.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};

use super::storage::{StorageAdapter, StorageOp};
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
/// `drop_leases`.
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

    /// Whether the commit writes nothing.
    pub fn is_empty(&self) -> bool {
        self.clear_prefixes.is_empty()
            && self.trims.is_empty()
            && self.deletes.is_empty()
            && self.puts.is_empty()
            && self.appends.is_empty()
    }
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
}

impl<'a> LeaseRequest<'a> {
    /// A request by `holder` for `name`, lasting `ttl_ms` from `now_ms`.
    pub fn new(name: &'a str, holder: &'a str, ttl_ms: u64, now_ms: u64) -> Self {
        LeaseRequest {
            name,
            holder,
            ttl_ms,
            now_ms,
        }
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
/// - no lease, or an expired one: granted; the epoch grows by one (1 for a first grant);
/// - a live lease of the same holder: renewed at the same epoch;
/// - a live lease of another holder: [`Error::LeaseHeld`].
///
/// # Errors
/// [`Error::LeaseHeld`] as above.
pub fn decide_lease(current: Option<&Lease>, request: &LeaseRequest<'_>) -> Result<Lease> {
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
        }
    )*};
}

forward_durable!(Arc, Box);

const RECORD: &str = "durable/r/";
const LOG: &str = "durable/l/";
const NEXT: &str = "durable/n/";
const LEASE: &str = "durable/lease/";

/// A [`DurableStore`] laid out as keys of a [`StorageAdapter`]:
/// `durable/r/{key}` for records, `durable/l/{log}/{seq:020}` and `durable/n/{log}` for logs,
/// `durable/lease/{name}` for leases.
///
/// Commits and lease decisions are serialized by a mutex in this value, so fencing holds between the
/// users of one `KvDurableStore` (one process). It is also a [`StorageAdapter`] (forwarding to the adapter
/// underneath, whose `durable/` keys it owns), so one value can serve as a runtime's
/// [`durable`](crate::RuntimeBuilder::durable) store. Two processes sharing one key-value backend need a
/// store that decides inside the backend's own transaction, such as `noetic-storage-sqlite`'s.
pub struct KvDurableStore {
    storage: Arc<dyn StorageAdapter>,
    write: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for KvDurableStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KvDurableStore").finish_non_exhaustive()
    }
}

impl KvDurableStore {
    /// A durable store over `storage`.
    pub fn new(storage: Arc<dyn StorageAdapter>) -> Self {
        KvDurableStore {
            storage,
            write: tokio::sync::Mutex::new(()),
        }
    }

    /// A durable store over a fresh [`InMemoryStorage`](super::InMemoryStorage): durable for the life of
    /// the process, which is what tests of checkpoint and restore within one process want.
    pub fn in_memory() -> Self {
        Self::new(Arc::new(super::InMemoryStorage::new()))
    }

    /// The key-value adapter underneath.
    pub fn storage(&self) -> &Arc<dyn StorageAdapter> {
        &self.storage
    }

    fn entry_key(log: &str, seq: u64) -> String {
        format!("{LOG}{log}/{seq:020}")
    }

    async fn stored_next(&self, log: &str) -> Result<u64> {
        let key = format!("{NEXT}{log}");
        match self.storage.get(&key).await? {
            None => Ok(0),
            Some(bytes) => std::str::from_utf8(&bytes)
                .ok()
                .and_then(|text| text.parse().ok())
                .ok_or_else(|| corrupt("next_seq", key, "not a decimal sequence number")),
        }
    }

    async fn stored_lease(&self, name: &str) -> Result<Option<Lease>> {
        let key = format!("{LEASE}{name}");
        match self.storage.get(&key).await? {
            None => Ok(None),
            Some(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|error| corrupt("lease", key, error)),
        }
    }

    async fn apply(&self, commit: Commit) -> Result<()> {
        if let Some(fence) = &commit.fence {
            let live = self.stored_lease(&fence.lease).await?;
            if live.as_ref().map(|lease| lease.epoch) != Some(fence.epoch) {
                return Err(Error::LeaseLost {
                    lease: fence.lease.clone(),
                    epoch: fence.epoch,
                });
            }
        }
        let mut ops = Vec::new();
        for prefix in &commit.clear_prefixes {
            for space in [RECORD, LOG, NEXT] {
                for key in self.storage.list(&format!("{space}{prefix}")).await? {
                    ops.push(StorageOp::delete(key));
                }
            }
        }
        for (log, below) in &commit.trims {
            let prefix = format!("{LOG}{log}/");
            for key in self.storage.list(&prefix).await? {
                let seq = key[prefix.len()..].parse::<u64>().unwrap_or(u64::MAX);
                if seq < *below {
                    ops.push(StorageOp::delete(key));
                }
            }
        }
        for key in &commit.deletes {
            ops.push(StorageOp::delete(format!("{RECORD}{key}")));
        }
        for (key, value) in commit.puts {
            ops.push(StorageOp::set(format!("{RECORD}{key}"), value));
        }
        for append in commit.appends {
            let cleared = commit
                .clear_prefixes
                .iter()
                .any(|prefix| append.log.starts_with(prefix.as_str()));
            let next = if cleared {
                0
            } else {
                self.stored_next(&append.log).await?
            };
            if append.first_seq != next {
                return Err(seq_conflict(&append.log, append.first_seq, next));
            }
            let count = append.entries.len() as u64;
            for (offset, entry) in append.entries.into_iter().enumerate() {
                ops.push(StorageOp::set(
                    Self::entry_key(&append.log, next + offset as u64),
                    entry,
                ));
            }
            ops.push(StorageOp::set(
                format!("{NEXT}{}", append.log),
                (next + count).to_string().into_bytes(),
            ));
        }
        for name in &commit.drop_leases {
            ops.push(StorageOp::delete(format!("{LEASE}{name}")));
        }
        self.storage.batch(ops).await
    }
}

/// The error for an append whose `first_seq` is not the log's next sequence number.
pub fn seq_conflict(log: &str, first_seq: u64, next: u64) -> Error {
    Error::Storage {
        operation: "append",
        key: log.to_owned(),
        source: format!("append at sequence {first_seq} but the log's next sequence is {next}")
            .into(),
    }
}

fn corrupt(operation: &'static str, key: String, problem: impl std::fmt::Display) -> Error {
    Error::Storage {
        operation,
        key,
        source: format!("corrupt value: {problem}").into(),
    }
}

impl DurableStore for KvDurableStore {
    fn commit(&self, commit: Commit) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            if commit.is_empty() && commit.fence.is_none() {
                return Ok(());
            }
            let _write = self.write.lock().await;
            self.apply(commit).await
        })
    }

    fn record<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>>> {
        Box::pin(async move { self.storage.get(&format!("{RECORD}{key}")).await })
    }

    fn records<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Records>> {
        Box::pin(async move {
            let keys = self.storage.list(&format!("{RECORD}{prefix}")).await?;
            let values = self.storage.get_many(&keys).await?;
            Ok(keys
                .into_iter()
                .zip(values)
                .filter_map(|(key, value)| Some((key[RECORD.len()..].to_owned(), value?)))
                .collect())
        })
    }

    fn read_log<'a>(&'a self, log: &'a str, from_seq: u64) -> BoxFuture<'a, Result<Vec<LogEntry>>> {
        Box::pin(async move {
            let prefix = format!("{LOG}{log}/");
            let keys: Vec<String> = self
                .storage
                .list(&prefix)
                .await?
                .into_iter()
                .filter(|key| {
                    key[prefix.len()..]
                        .parse::<u64>()
                        .is_ok_and(|seq| seq >= from_seq)
                })
                .collect();
            let values = self.storage.get_many(&keys).await?;
            Ok(keys
                .iter()
                .zip(values)
                .filter_map(|(key, value)| {
                    Some(LogEntry {
                        seq: key[prefix.len()..].parse().ok()?,
                        value: value?,
                    })
                })
                .collect())
        })
    }

    fn next_seq<'a>(&'a self, log: &'a str) -> BoxFuture<'a, Result<u64>> {
        Box::pin(self.stored_next(log))
    }

    fn acquire_lease<'a>(&'a self, request: LeaseRequest<'a>) -> BoxFuture<'a, Result<Lease>> {
        Box::pin(async move {
            let _write = self.write.lock().await;
            let current = self.stored_lease(request.name).await?;
            let lease = decide_lease(current.as_ref(), &request)?;
            let bytes = serde_json::to_vec(&lease).map_err(|error| Error::Storage {
                operation: "acquire_lease",
                key: request.name.to_owned(),
                source: Box::new(error),
            })?;
            self.storage
                .set(&format!("{LEASE}{}", request.name), bytes)
                .await?;
            Ok(lease)
        })
    }

    fn release_lease<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let _write = self.write.lock().await;
            let current = self.stored_lease(&lease.name).await?;
            let Some(mut current) = current else {
                return Ok(());
            };
            if current.epoch == lease.epoch && current.holder == lease.holder {
                // Expire it rather than delete it, so the next grant's epoch is still higher than
                // every epoch a fenced writer may hold.
                current.expires_at_ms = 0;
                let bytes = serde_json::to_vec(&current).map_err(|error| Error::Storage {
                    operation: "release_lease",
                    key: lease.name.clone(),
                    source: Box::new(error),
                })?;
                self.storage
                    .set(&format!("{LEASE}{}", lease.name), bytes)
                    .await?;
            }
            Ok(())
        })
    }

    fn lease<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<Lease>>> {
        Box::pin(self.stored_lease(name))
    }
}

impl StorageAdapter for KvDurableStore {
    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>>> {
        self.storage.get(key)
    }

    fn set<'a>(&'a self, key: &'a str, value: Vec<u8>) -> BoxFuture<'a, Result<()>> {
        self.storage.set(key, value)
    }

    fn delete<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<()>> {
        self.storage.delete(key)
    }

    fn list<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Vec<String>>> {
        self.storage.list(prefix)
    }

    fn get_many<'a>(&'a self, keys: &'a [String]) -> BoxFuture<'a, Result<Vec<Option<Vec<u8>>>>> {
        self.storage.get_many(keys)
    }

    fn batch(&self, ops: Vec<StorageOp>) -> BoxFuture<'_, Result<()>> {
        self.storage.batch(ops)
    }
}
