//! The conformance suites on PostgreSQL (on the caller's clock: the store sections use fake
//! timestamps), and migrating once when many hosts connect to a fresh database at once.

#![allow(clippy::unwrap_used)] // a test: a failure is a panic

use noetic_core::StorageAdapter;
use noetic_storage_postgres::{LeaseClock, PostgresStorage};
use noetic_test_support::{storage_conformance, test_database_or_skip};

use crate::support::store;

/// The durable-store suite, one test per section, each on a fresh database; every handle a section
/// opens is a pool of its own, as another host's would be.
mod durable {
    use noetic_storage_postgres::LeaseClock;
    use noetic_test_support::conformance::StoreOpener;
    use noetic_test_support::test_database_or_skip;

    use crate::support::store_at;

    noetic_test_support::durable_store_conformance!({
        let db = test_database_or_skip!();
        let url = db.url().to_owned();
        let opener = StoreOpener::new(move || {
            let url = url.clone();
            async move { store_at(&url, LeaseClock::Caller).await }
        });
        (opener, db)
    });
}

#[tokio::test]
async fn a_postgres_database_passes_the_storage_conformance_suite() {
    let db = test_database_or_skip!();
    let store = store(&db, LeaseClock::Caller).await;
    storage_conformance(&store).await;
}

#[tokio::test]
async fn a_postgres_database_passes_the_store_sections_one_after_another_on_one_store() {
    let db = test_database_or_skip!();
    let store = store(&db, LeaseClock::Caller).await;
    noetic_test_support::durable_conformance(&store).await;
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
