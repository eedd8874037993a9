//! The conformance suites on a real file and on an in-memory database.

use noetic_storage_sqlite::SqliteStorage;
use noetic_test_support::{durable_conformance, storage_conformance};

use crate::support::temp_db;

/// The durable-store suite, one test per section, each on a fresh file; every handle a section opens
/// is the file opened again, as a restarted process would.
mod file {
    use noetic_storage_sqlite::SqliteStorage;
    use noetic_test_support::conformance::StoreOpener;

    noetic_test_support::durable_store_conformance!({
        let db = crate::support::temp_db();
        let path = db.path.clone();
        let opener = StoreOpener::new(move || {
            let path = path.clone();
            async move {
                SqliteStorage::open(&path)
                    .await
                    .unwrap_or_else(|error| panic!("opening {}: {error}", path.display()))
            }
        });
        (opener, db)
    });
}

#[tokio::test]
async fn a_sqlite_file_passes_the_storage_conformance_suite() {
    let db = temp_db();
    let store = SqliteStorage::open(&db.path).await.unwrap();
    storage_conformance(&store).await;
    assert!(db.path.is_file(), "open created the file");
}

#[tokio::test]
async fn an_in_memory_sqlite_database_passes_the_storage_suite_and_the_store_sections() {
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
