//! [`KvDurableStore`]: the [`DurableStore`] laid out as keys of any [`StorageAdapter`].

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;

use super::durable::{
    Commit, DurableStore, Lease, LeaseRequest, LogEntry, Records, decide_lease, seq_conflict,
};
use super::storage::{StorageAdapter, StorageOp};
use crate::{Error, Result};

const RECORD: &str = "durable/r/";
const LOG: &str = "durable/l/";
const NEXT: &str = "durable/n/";
const LEASE: &str = "durable/lease/";
const RUNNABLE: &str = "durable/run/";
/// The next runnable mark's place in the claim order.
const RUNNABLE_NEXT: &str = "durable/run-next";

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
    /// Bumped after every commit that marks a name runnable (wakes [`DurableStore::wait_runnable`]).
    marked: tokio::sync::watch::Sender<u64>,
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
            marked: tokio::sync::watch::Sender::new(0),
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
        self.stored_counter(&format!("{NEXT}{log}")).await
    }

    /// A decimal counter stored at `key` (0 when missing).
    async fn stored_counter(&self, key: &str) -> Result<u64> {
        let key = key.to_owned();
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
        for name in &commit.clear_runnable {
            ops.push(StorageOp::delete(format!("{RUNNABLE}{name}")));
        }
        if !commit.mark_runnable.is_empty() {
            let mut next = self.stored_counter(RUNNABLE_NEXT).await?;
            for name in &commit.mark_runnable {
                let key = format!("{RUNNABLE}{name}");
                // A name already marked (and not cleared by this commit) keeps its place.
                if !commit.clear_runnable.contains(name) && self.storage.get(&key).await?.is_some()
                {
                    continue;
                }
                ops.push(StorageOp::set(key, next.to_string().into_bytes()));
                next += 1;
            }
            ops.push(StorageOp::set(RUNNABLE_NEXT, next.to_string().into_bytes()));
        }
        for name in &commit.drop_leases {
            ops.push(StorageOp::delete(format!("{LEASE}{name}")));
        }
        self.storage.batch(ops).await
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
            let marks = !commit.mark_runnable.is_empty();
            self.apply(commit).await?;
            if marks {
                self.marked.send_modify(|version| *version += 1);
            }
            Ok(())
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

    fn runnable<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Vec<String>>> {
        Box::pin(async move {
            let keys = self.storage.list(&format!("{RUNNABLE}{prefix}")).await?;
            let values = self.storage.get_many(&keys).await?;
            let mut marks = Vec::with_capacity(keys.len());
            for (key, value) in keys.into_iter().zip(values) {
                let Some(value) = value else { continue };
                let place = std::str::from_utf8(&value)
                    .ok()
                    .and_then(|text| text.parse::<u64>().ok())
                    .ok_or_else(|| corrupt("runnable", key.clone(), "not a decimal place"))?;
                marks.push((place, key[RUNNABLE.len()..].to_owned()));
            }
            marks.sort_unstable();
            Ok(marks.into_iter().map(|(_, name)| name).collect())
        })
    }

    fn wait_runnable(&self, timeout: Duration) -> BoxFuture<'_, Result<Vec<String>>> {
        let mut marked = self.marked.subscribe();
        Box::pin(async move {
            // Marks set by this value's commits wake at once; another process's only after `timeout`.
            let _ = tokio::time::timeout(timeout, marked.changed()).await;
            Ok(Vec::new())
        })
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
