//! Two processes on one file: a child process takes a lease and exits; the parent sees it held until
//! it expires, then takes it over at the next epoch and the child's epoch is fenced.
//!
//! `harness = false`: this binary is both the test (no env var) and the child (with `NOETIC_SQLITE_CHILD`
//! naming the database file), re-executing itself.

#![allow(clippy::unwrap_used)] // a test binary without the test harness: a failure is a panic

use std::process::Command;

use noetic_core::adapter::durable::{Commit, DurableStore, Fence, LeaseRequest};
use noetic_storage_sqlite::SqliteStorage;

const CHILD: &str = "NOETIC_SQLITE_CHILD";
const TTL: u64 = 30_000;
const T0: u64 = 1_700_000_000_000;
const NAME: &str = "a_lease_taken_by_another_process_is_held_until_it_expires";

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    match std::env::var_os(CHILD) {
        Some(path) => runtime.block_on(child(path.into())),
        None => {
            // Behave like the libtest harness for the two things tools ask of it: `--list`, and a
            // name filter (`cargo test -- <filter>` reaches every test binary).
            let args: Vec<String> = std::env::args().skip(1).collect();
            if args.iter().any(|arg| arg == "--list") {
                println!("{NAME}: test");
                return;
            }
            let mut filters = args.iter().filter(|arg| !arg.starts_with('-'));
            if let Some(filter) = filters.next()
                && !NAME.contains(filter.as_str())
            {
                println!("test result: ok. 0 passed; 1 filtered out");
                return;
            }
            runtime.block_on(a_lease_taken_by_another_process_is_held_until_it_expires());
            println!("test {NAME} ... ok");
        }
    }
}

/// The child: takes the lease, writes under its fence, prints the epoch and exits.
async fn child(path: std::path::PathBuf) {
    let store = SqliteStorage::open(&path).await.unwrap();
    let lease = store
        .acquire_lease(LeaseRequest::new("thread/t", "child", TTL, T0))
        .await
        .unwrap();
    store
        .commit(Commit::new().fenced(Some(lease.fence())).append(
            "thread/t/items",
            0,
            vec![b"from the child".to_vec()],
        ))
        .await
        .unwrap();
    println!("epoch {}", lease.epoch);
}

async fn a_lease_taken_by_another_process_is_held_until_it_expires() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    // The parent has the file open (and migrated) before the child starts.
    let store = SqliteStorage::open(&path).await.unwrap();

    let output = Command::new(std::env::current_exe().unwrap())
        .env(CHILD, &path)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "child failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&output.stdout).trim(), "epoch 1");

    // Live until T0 + TTL: the parent is refused, naming the child and the expiry.
    for now in [T0, T0 + TTL - 1] {
        let error = store
            .acquire_lease(LeaseRequest::new("thread/t", "parent", TTL, now))
            .await
            .unwrap_err();
        assert_eq!(error.code(), "LEASE_HELD", "at {now}: {error}");
        assert!(
            error.to_string().contains("`child`")
                && error.to_string().contains(&(T0 + TTL).to_string()),
            "{error}"
        );
    }
    assert_eq!(store.next_seq("thread/t/items").await.unwrap(), 1);

    // Expired: taken over at epoch 2; the dead child's epoch no longer writes.
    let lease = store
        .acquire_lease(LeaseRequest::new("thread/t", "parent", TTL, T0 + TTL))
        .await
        .unwrap();
    assert_eq!((lease.holder.as_str(), lease.epoch), ("parent", 2));
    let lost = store
        .commit(
            Commit::new()
                .fenced(Some(Fence::new("thread/t", 1)))
                .append("thread/t/items", 1, vec![b"stale".to_vec()]),
        )
        .await
        .unwrap_err();
    assert_eq!(lost.code(), "LEASE_LOST");
    store
        .commit(Commit::new().fenced(Some(lease.fence())).append(
            "thread/t/items",
            1,
            vec![b"from the parent".to_vec()],
        ))
        .await
        .unwrap();
    let items = store.read_log("thread/t/items", 0).await.unwrap();
    assert_eq!(items.len(), 2);
    assert_eq!(items[0].value, b"from the child");
}
