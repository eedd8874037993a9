//! Commits per second of a typical checkpoint commit on a SQLite file, and file growth per commit.
//!
//! ```text
//! cargo bench -p noetic-storage-sqlite --bench commit     # or: cargo xtask bench
//! ```
//!
//! A checkpoint commit here is what a model round writes: three ~500-byte items appended to the
//! execution's log and one 200-byte record (its state) replaced, fenced by the execution's lease. It is
//! measured with the log already 10 and 1,000 entries long: the cost should not grow with history
//! (issue 11 targets ≥ 2,000 checkpointed steps/s). Growth is the main file's size after a WAL
//! checkpoint, divided by the commits made.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark: failures are bugs to see at once

use std::path::Path;
use std::time::Instant;

use noetic_core::adapter::durable::{Commit, DurableStore, Fence, LeaseRequest};
use noetic_storage_sqlite::SqliteStorage;
use sqlx::ConnectOptions;
use sqlx::sqlite::SqliteConnectOptions;

const COMMITS: u64 = 2_000;
const LOG: &str = "execution/bench/items";

fn item(seq: u64) -> Vec<u8> {
    let mut bytes = format!("{{\"seq\":{seq},\"text\":\"").into_bytes();
    bytes.resize(498, b'x');
    bytes.extend_from_slice(b"\"}");
    bytes
}

fn checkpoint(fence: &Fence, next: u64) -> Commit {
    Commit::new()
        .fenced(Some(fence.clone()))
        .append(LOG, next, (next..next + 3).map(item).collect())
        .put("execution/bench/state", vec![b's'; 200])
}

/// The main file's size once the WAL is checkpointed into it.
async fn settled_size(path: &Path) -> u64 {
    let mut conn = SqliteConnectOptions::new()
        .filename(path)
        .connect()
        .await
        .unwrap();
    sqlx::raw_sql("PRAGMA wal_checkpoint(TRUNCATE)")
        .execute(&mut conn)
        .await
        .unwrap();
    drop(conn);
    std::fs::metadata(path).unwrap().len()
}

async fn run(history: u64) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bench.db");
    let store = SqliteStorage::open(&path).await.unwrap();
    let lease = store
        .acquire_lease(LeaseRequest::new("execution/bench", "bench", 3_600_000, 1))
        .await
        .unwrap();
    let fence = lease.fence();
    let mut next = 0;
    while next < history {
        let count = (history - next).min(100);
        store
            .commit(Commit::new().append(LOG, next, (next..next + count).map(item).collect()))
            .await
            .unwrap();
        next += count;
    }
    let before = settled_size(&path).await;
    let started = Instant::now();
    for _ in 0..COMMITS {
        store.commit(checkpoint(&fence, next)).await.unwrap();
        next += 3;
    }
    let elapsed = started.elapsed();
    let after = settled_size(&path).await;
    println!(
        "log length {history:>5} → {:>6}: {:>8.0} commits/s, {:>7.1} µs/commit, {:>6.0} bytes/commit of file growth",
        next,
        COMMITS as f64 / elapsed.as_secs_f64(),
        elapsed.as_secs_f64() * 1e6 / COMMITS as f64,
        (after - before) as f64 / COMMITS as f64,
    );
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    println!(
        "SQLite checkpoint commit (3 × 500-byte appends + a 200-byte put, fenced), WAL, synchronous=NORMAL, {COMMITS} commits each:"
    );
    for history in [10, 1_000] {
        runtime.block_on(run(history));
    }
}
