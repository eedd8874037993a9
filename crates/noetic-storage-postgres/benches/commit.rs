//! Commits per second of a typical checkpoint commit on PostgreSQL, and table growth per commit.
//!
//! ```text
//! cargo bench -p noetic-storage-postgres --bench commit     # or: cargo xtask bench
//! ```
//!
//! The same commit as `noetic-storage-sqlite`'s bench: three ~500-byte items appended to an execution's
//! log and one 200-byte record replaced, fenced by the execution's lease, measured with the log already
//! 10 and 1,000 entries long (the cost should not grow with history). The database is a fresh one on
//! the test-support server (`NOETIC_TEST_PG_URL`, or a throwaway local server with `fsync=off`, so
//! this measures round trips and statements, not disks); without PostgreSQL the bench prints a skip
//! line. Growth is the total size of the tables and their indexes, divided by the commits made.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark: failures are bugs to see at once

use std::time::Instant;

use noetic_core::adapter::durable::{Commit, DurableStore, Fence, LeaseRequest};
use noetic_storage_postgres::PostgresStorage;

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

/// The size of the store's tables with their indexes and TOAST, in bytes.
async fn tables_size(store: &PostgresStorage) -> i64 {
    sqlx::query_scalar(
        "SELECT sum(pg_total_relation_size(name::regclass))::bigint \
         FROM unnest(ARRAY['records', 'logs', 'log_heads', 'leases']) AS name",
    )
    .fetch_one(store.pool())
    .await
    .unwrap()
}

async fn run(history: u64) -> bool {
    let Some(db) = noetic_test_support::postgres::test_database().await else {
        noetic_test_support::postgres::print_skip("benches/commit.rs");
        return false;
    };
    let store = PostgresStorage::connect(db.url()).await.unwrap();
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
    let before = tables_size(&store).await;
    let started = Instant::now();
    for _ in 0..COMMITS {
        store.commit(checkpoint(&fence, next)).await.unwrap();
        next += 3;
    }
    let elapsed = started.elapsed();
    let after = tables_size(&store).await;
    println!(
        "log length {history:>5} → {:>6}: {:>8.0} commits/s, {:>7.1} µs/commit, {:>6.0} bytes/commit of table growth",
        next,
        COMMITS as f64 / elapsed.as_secs_f64(),
        elapsed.as_secs_f64() * 1e6 / COMMITS as f64,
        (after - before) as f64 / COMMITS as f64,
    );
    true
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    println!(
        "PostgreSQL checkpoint commit (3 × 500-byte appends + a 200-byte put, fenced), one connection in use, {COMMITS} commits each:"
    );
    for history in [10, 1_000] {
        if !runtime.block_on(run(history)) {
            return;
        }
    }
}
