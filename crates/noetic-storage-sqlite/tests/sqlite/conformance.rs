//! Both conformance suites on a real file and on an in-memory database.

use noetic_storage_sqlite::SqliteStorage;
use noetic_test_support::{durable_conformance, storage_conformance};

use crate::support::temp_db;

#[tokio::test]
async fn a_sqlite_file_passes_both_conformance_suites() {
    let db = temp_db();
    let store = SqliteStorage::open(&db.path).await.unwrap();
    storage_conformance(&store).await;
    durable_conformance(&store).await;
    assert!(db.path.is_file(), "open created the file");
}

#[tokio::test]
async fn an_in_memory_sqlite_database_passes_both_conformance_suites() {
    let store = SqliteStorage::in_memory().await.unwrap();
    storage_conformance(&store).await;
    durable_conformance(&store).await;
}

#[tokio::test]
async fn two_in_memory_databases_are_separate_and_clones_share_one() {
    use noetic_core::StorageAdapter;
    let first = SqliteStorage::in_memory().await.unwrap();
    let second = SqliteStorage::in_memory().await.unwrap();
    first.set("k", b"1".to_vec()).await.unwrap();
    assert_eq!(second.get("k").await.unwrap(), None);
    assert_eq!(first.clone().get("k").await.unwrap(), Some(b"1".to_vec()));
}
