//! Rows written by hand with the wrong type, and a file from a newer schema.

use noetic_core::StorageAdapter;
use noetic_core::adapter::durable::{Commit, DurableStore, LeaseRequest};
use noetic_storage_sqlite::{SqliteOptions, SqliteStorage};

use crate::support::{exec, raw, temp_db};

#[tokio::test]
async fn a_lease_row_with_text_in_an_integer_column_is_a_storage_error_naming_the_lease() {
    let db = temp_db();
    let store = SqliteStorage::open(&db.path).await.unwrap();
    for name in ["thread/bad", "thread/good"] {
        store
            .acquire_lease(LeaseRequest::new(name, "a", 1_000, 1))
            .await
            .unwrap();
    }
    let mut conn = raw(&db.path).await;
    exec(
        &mut conn,
        "UPDATE leases SET epoch = 'one' WHERE name = 'thread/bad'",
    )
    .await;

    for error in [
        store.lease("thread/bad").await.unwrap_err(),
        store
            .acquire_lease(LeaseRequest::new("thread/bad", "a", 1_000, 2))
            .await
            .unwrap_err(),
        store
            .commit(
                Commit::new()
                    .fenced(Some(noetic_core::adapter::durable::Fence::new(
                        "thread/bad",
                        1,
                    )))
                    .put("x", "y"),
            )
            .await
            .unwrap_err(),
    ] {
        assert_eq!(error.code(), "STORAGE_ERROR", "{error}");
        assert!(
            error.to_string().contains("thread/bad"),
            "names the lease: {error}"
        );
    }
    assert_eq!(store.record("x").await.unwrap(), None);
    assert_eq!(store.lease("thread/good").await.unwrap().unwrap().epoch, 1);
}

#[tokio::test]
async fn a_value_of_the_wrong_type_is_a_storage_error_naming_the_key_and_other_keys_still_read() {
    let db = temp_db();
    let store = SqliteStorage::open(&db.path).await.unwrap();
    store.set("good", b"v".to_vec()).await.unwrap();
    store
        .commit(
            Commit::new()
                .put("rec/good", "g")
                .append("log/good", 0, vec![b"e".to_vec()]),
        )
        .await
        .unwrap();
    let mut conn = raw(&db.path).await;
    exec(
        &mut conn,
        "INSERT INTO kv (key, value) VALUES ('bad', 42); \
         INSERT INTO records (key, value) VALUES ('rec/bad', 4.5); \
         INSERT INTO log_heads (log, next_seq) VALUES ('log/bad', 'three'); \
         INSERT INTO logs (log, seq, value) VALUES ('log/bad', 0, 7);",
    )
    .await;

    let kv = store.get("bad").await.unwrap_err();
    assert_eq!(kv.code(), "STORAGE_ERROR");
    assert!(kv.to_string().contains("`bad`"), "{kv}");
    let many = store
        .get_many(&["good".to_owned(), "bad".to_owned()])
        .await
        .unwrap_err();
    assert!(many.to_string().contains("`bad`"), "{many}");
    let record = store.record("rec/bad").await.unwrap_err();
    assert!(record.to_string().contains("rec/bad"), "{record}");
    let records = store.records("rec/").await.unwrap_err();
    assert!(records.to_string().contains("rec/bad"), "{records}");
    let head = store.next_seq("log/bad").await.unwrap_err();
    assert!(head.to_string().contains("log/bad"), "{head}");
    let append = store
        .commit(
            Commit::new()
                .put("rec/new", "n")
                .append("log/bad", 1, vec![b"x".to_vec()]),
        )
        .await
        .unwrap_err();
    assert!(append.to_string().contains("log/bad"), "{append}");
    assert_eq!(
        store.record("rec/new").await.unwrap(),
        None,
        "nothing of that commit applied"
    );
    let entries = store.read_log("log/bad", 0).await.unwrap_err();
    assert!(entries.to_string().contains("log/bad"), "{entries}");

    assert_eq!(store.get("good").await.unwrap(), Some(b"v".to_vec()));
    assert_eq!(store.record("rec/good").await.unwrap(), Some(b"g".to_vec()));
    assert_eq!(store.read_log("log/good", 0).await.unwrap().len(), 1);
    assert_eq!(store.list("").await.unwrap(), vec!["bad", "good"]);
}

#[tokio::test]
async fn a_file_with_an_unknown_migration_is_refused_with_sqlite_schema_unknown() {
    let db = temp_db();
    let store = SqliteStorage::open(&db.path).await.unwrap();
    store.set("k", b"v".to_vec()).await.unwrap();
    drop(store);
    let mut conn = raw(&db.path).await;
    exec(
        &mut conn,
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (20990101, 'from the future', TRUE, x'00', 0)",
    )
    .await;

    for error in [
        SqliteStorage::open(&db.path).await.unwrap_err(),
        SqliteStorage::open_with(&db.path, SqliteOptions::default().read_only(true))
            .await
            .unwrap_err(),
    ] {
        assert_eq!(error.code(), "SQLITE_SCHEMA_UNKNOWN", "{error}");
        let text = error.to_string();
        let source = std::error::Error::source(&error)
            .map(ToString::to_string)
            .unwrap_or_default();
        assert!(
            format!("{text} {source}").contains("20990101")
                && format!("{text} {source}").contains("noetic.db"),
            "names the file and the migration: {text} / {source}"
        );
    }
    // The data is untouched: with the unknown migration gone the file opens as before.
    exec(
        &mut conn,
        "DELETE FROM _sqlx_migrations WHERE version = 20990101",
    )
    .await;
    let store = SqliteStorage::open(&db.path).await.unwrap();
    assert_eq!(store.get("k").await.unwrap(), Some(b"v".to_vec()));
}
