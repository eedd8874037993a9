//! Both conformance suites (on the caller's clock: they use fake timestamps), and migrating once when
//! many hosts connect to a fresh database at once.

#![allow(clippy::unwrap_used)] // a test: a failure is a panic

use noetic_core::StorageAdapter;
use noetic_storage_postgres::{LeaseClock, PostgresStorage};
use noetic_test_support::{durable_conformance, storage_conformance, test_database_or_skip};

use crate::support::store;

#[tokio::test]
async fn a_postgres_database_passes_both_conformance_suites_on_the_callers_clock() {
    let db = test_database_or_skip!();
    let store = store(&db, LeaseClock::Caller).await;
    storage_conformance(&store).await;
    durable_conformance(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_hosts_connecting_to_a_fresh_database_at_once_migrate_it_once() {
    let db = test_database_or_skip!();
    let connects: Vec<_> = (0..8)
        .map(|_| {
            let url = db.url().to_owned();
            tokio::spawn(async move { PostgresStorage::connect(&url).await })
        })
        .collect();
    let mut stores = Vec::new();
    for connect in connects {
        stores.push(connect.await.unwrap().expect("every host connects"));
    }
    let applied: Vec<(i64, bool)> =
        sqlx::query_as("SELECT version, success FROM _sqlx_migrations ORDER BY version")
            .fetch_all(stores[0].pool())
            .await
            .unwrap();
    assert_eq!(
        applied,
        [(1, true), (2, true)],
        "each migration applied once"
    );
    stores[3].set("k", b"v".to_vec()).await.unwrap();
    assert_eq!(stores[5].get("k").await.unwrap(), Some(b"v".to_vec()));
    // Clones share the pool; connecting again finds nothing to do.
    let again = PostgresStorage::connect(db.url()).await.unwrap();
    assert_eq!(again.clone().get("k").await.unwrap(), Some(b"v".to_vec()));
}

#[tokio::test]
async fn a_key_written_twice_in_one_commit_or_batch_keeps_its_last_write() {
    use noetic_core::adapter::StorageOp;
    use noetic_core::adapter::durable::{Commit, DurableStore};

    let db = test_database_or_skip!();
    let store = store(&db, LeaseClock::Database).await;
    store
        .commit(
            Commit::new()
                .put("r/b", "first")
                .put("r/a", "a")
                .put("r/b", "last")
                .append("log", 0, vec![b"0".to_vec()])
                .append("log", 1, vec![b"1".to_vec(), b"2".to_vec()]),
        )
        .await
        .unwrap();
    assert_eq!(store.record("r/b").await.unwrap(), Some(b"last".to_vec()));
    assert_eq!(store.record("r/a").await.unwrap(), Some(b"a".to_vec()));
    assert_eq!(
        store.next_seq("log").await.unwrap(),
        3,
        "two appends to one log"
    );

    store
        .batch(vec![
            StorageOp::set("k", b"1".to_vec()),
            StorageOp::delete("k"),
            StorageOp::delete("j"),
            StorageOp::set("j", b"2".to_vec()),
            StorageOp::set("j", b"3".to_vec()),
        ])
        .await
        .unwrap();
    assert_eq!(store.get("k").await.unwrap(), None);
    assert_eq!(store.get("j").await.unwrap(), Some(b"3".to_vec()));
    assert_eq!(
        store
            .get_many(&["j".to_owned(), "k".to_owned(), "j".to_owned()])
            .await
            .unwrap(),
        [Some(b"3".to_vec()), None, Some(b"3".to_vec())],
        "a key asked twice gets its value twice"
    );
}
