//! What the durable client writes and reads per turn: a [`DurableStore`] (and [`StorageAdapter`]) that
//! counts every call it forwards to the store (SQLite or PostgreSQL), by kind of record or log, so the bench prints the
//! store traffic next to the CPU it costs.
//!
//! The kind of a key is its shape with the ids taken out (`exec/<id>/checkpoint` → `exec/*/checkpoint`):
//! a segment is an id when it holds a digit or is longer than 20 characters. With
//! `NOETIC_BENCH_STORE_TRACE=1` every call is also written to stderr, one line each.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::BoxFuture;
use noetic_core::adapter::durable::{Commit, DurableStore, Lease, LeaseRequest, LogEntry, Records};
use noetic_core::{Result, StorageAdapter, StorageOp};

/// Traces every call to stderr when set to `1`.
const TRACE_VAR: &str = "NOETIC_BENCH_STORE_TRACE";

/// Calls and bytes of one kind.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Tally {
    pub(crate) calls: u64,
    pub(crate) rows: u64,
    pub(crate) bytes: u64,
}

/// The tallies of a [`Census`], by `operation kind`.
pub(crate) type Tallies = Arc<Mutex<BTreeMap<String, Tally>>>;

/// A store that counts what passes through it.
pub(crate) struct Census<S> {
    inner: S,
    trace: bool,
    tallies: Tallies,
}

impl<S> Census<S> {
    pub(crate) fn new(inner: S) -> Self {
        Census {
            inner,
            trace: std::env::var(TRACE_VAR).as_deref() == Ok("1"),
            tallies: Tallies::default(),
        }
    }

    /// The tallies, shared: they go on growing.
    pub(crate) fn tallies(&self) -> Tallies {
        Arc::clone(&self.tallies)
    }

    fn count(&self, operation: &str, key: &str, rows: u64, bytes: usize) {
        if self.trace {
            eprintln!("store {operation} {key} rows={rows} bytes={bytes}");
        }
        let name = format!("{operation} {}", kind(key));
        let mut tallies = self.tallies.lock().expect("census lock");
        let tally = tallies.entry(name).or_default();
        tally.calls += 1;
        tally.rows += rows;
        tally.bytes += bytes as u64;
    }
}

/// `key` with its id segments replaced by `*`.
fn kind(key: &str) -> String {
    key.split('/')
        .map(|segment| {
            if segment.len() > 20 || segment.bytes().any(|byte| byte.is_ascii_digit()) {
                "*"
            } else {
                segment
            }
        })
        .collect::<Vec<_>>()
        .join("/")
}

impl<S: DurableStore> DurableStore for Census<S> {
    fn commit(&self, commit: Commit) -> BoxFuture<'_, Result<()>> {
        self.count("commit", commit.subject(), 0, 0);
        for (key, value) in &commit.puts {
            self.count("put", key, 1, key.len() + value.len());
        }
        for key in &commit.deletes {
            self.count("delete", key, 1, key.len());
        }
        for append in &commit.appends {
            let bytes: usize = append.entries.iter().map(Vec::len).sum();
            self.count("append", &append.log, append.entries.len() as u64, bytes);
        }
        for (log, _) in &commit.trims {
            self.count("trim", log, 0, 0);
        }
        for prefix in &commit.clear_prefixes {
            self.count("clear", prefix, 0, 0);
        }
        for name in &commit.mark_runnable {
            self.count("mark_runnable", name, 1, 0);
        }
        for name in &commit.clear_runnable {
            self.count("clear_runnable", name, 1, 0);
        }
        for name in &commit.drop_leases {
            self.count("drop_lease", name, 1, 0);
        }
        self.inner.commit(commit)
    }

    fn record<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>>> {
        self.count("read record", key, 0, 0);
        self.inner.record(key)
    }

    fn records<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Records>> {
        self.count("read records", prefix, 0, 0);
        self.inner.records(prefix)
    }

    fn read_log<'a>(&'a self, log: &'a str, from_seq: u64) -> BoxFuture<'a, Result<Vec<LogEntry>>> {
        self.count("read log", log, 0, 0);
        self.inner.read_log(log, from_seq)
    }

    fn next_seq<'a>(&'a self, log: &'a str) -> BoxFuture<'a, Result<u64>> {
        self.count("read next_seq", log, 0, 0);
        self.inner.next_seq(log)
    }

    fn acquire_lease<'a>(&'a self, request: LeaseRequest<'a>) -> BoxFuture<'a, Result<Lease>> {
        self.count("acquire_lease", request.name, 1, 0);
        self.inner.acquire_lease(request)
    }

    fn release_lease<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<()>> {
        self.count("release_lease", &lease.name, 1, 0);
        self.inner.release_lease(lease)
    }

    fn lease<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<Lease>>> {
        self.count("read lease", name, 0, 0);
        self.inner.lease(name)
    }

    fn runnable<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Vec<String>>> {
        self.count("read runnable", prefix, 0, 0);
        self.inner.runnable(prefix)
    }

    fn claim_runnable<'a>(
        &'a self,
        request: LeaseRequest<'a>,
    ) -> BoxFuture<'a, Result<Option<Lease>>> {
        self.count("claim_runnable", request.name, 0, 0);
        self.inner.claim_runnable(request)
    }

    fn wait_runnable(&self, timeout: Duration) -> BoxFuture<'_, Result<Vec<String>>> {
        self.inner.wait_runnable(timeout)
    }
}

impl<S: StorageAdapter> StorageAdapter for Census<S> {
    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>>> {
        self.count("kv get", key, 0, 0);
        self.inner.get(key)
    }

    fn set<'a>(&'a self, key: &'a str, value: Vec<u8>) -> BoxFuture<'a, Result<()>> {
        self.count("kv set", key, 1, key.len() + value.len());
        self.inner.set(key, value)
    }

    fn delete<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<()>> {
        self.count("kv delete", key, 1, key.len());
        self.inner.delete(key)
    }

    fn list<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Vec<String>>> {
        self.count("kv list", prefix, 0, 0);
        self.inner.list(prefix)
    }

    fn get_many<'a>(&'a self, keys: &'a [String]) -> BoxFuture<'a, Result<Vec<Option<Vec<u8>>>>> {
        self.count("kv get_many", keys.first().map_or("", String::as_str), 0, 0);
        self.inner.get_many(keys)
    }

    fn batch(&self, ops: Vec<StorageOp>) -> BoxFuture<'_, Result<()>> {
        self.count(
            "kv batch",
            ops.first().map_or("", StorageOp::key),
            ops.len() as u64,
            0,
        );
        self.inner.batch(ops)
    }
}
