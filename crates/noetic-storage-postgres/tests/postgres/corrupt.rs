//! Rows written by hand out of range or with the wrong type, and a database from a newer schema.

#![allow(clippy::unwrap_used)] // a test: a failure is a panic

use noetic_core::StorageAdapter;
use noetic_core::adapter::durable::{Commit, DurableStore, Fence, LeaseRequest};
use noetic_storage_postgres::{LeaseClock, PostgresStorage};
use noetic_test_support::test_database_or_skip;

use crate::support::{exec, store};

#[tokio::test]
async fn out_of_range_rows_are_storage_errors_naming_the_row_and_other_rows_still_read() {
    let db = test_database_or_skip!();
    let store = store(&db, LeaseClock::Database).await;
    store
        .acquire_lease(LeaseRequest::new("thread/good", "a", 60_000, 1))
        .await
        .unwrap();
    store
        .commit(
            Commit::new()
                .put("rec/good", "g")
                .append("log/good", 0, vec![b"e".to_vec()]),
        )
        .await
        .unwrap();
    exec(
        &store,
        "INSERT INTO leases (name, holder, epoch, expires_at_ms) VALUES \
             ('thread/bad', 'a', -1, 0), ('thread/late', 'a', 1, -5); \
         INSERT INTO logs (log, seq, value) VALUES ('log/bad', -5, '\\x00'); \
         INSERT INTO log_heads (log, next_seq) VALUES ('log/badhead', -3);",
    )
    .await;

    for (error, name, problem) in [
        (
            store.lease("thread/bad").await.unwrap_err(),
            "thread/bad",
            "negative epoch -1",
        ),
        (
            store.lease("thread/late").await.unwrap_err(),
            "thread/late",
            "negative expires_at_ms -5",
        ),
        (
            store
                .acquire_lease(LeaseRequest::new("thread/bad", "b", 1_000, 2))
                .await
                .unwrap_err(),
            "thread/bad",
            "negative epoch",
        ),
        (
            store
                .commit(
                    Commit::new()
                        .fenced(Some(Fence::new("thread/bad", 1)))
                        .put("x", "y"),
                )
                .await
                .unwrap_err(),
            "thread/bad",
            "negative epoch",
        ),
        (
            store.read_log("log/bad", 0).await.unwrap_err(),
            "log/bad",
            "negative seq -5",
        ),
        (
            store.next_seq("log/badhead").await.unwrap_err(),
            "log/badhead",
            "negative next_seq -3",
        ),
        (
            store
                .commit(Commit::new().put("rec/new", "n").append(
                    "log/badhead",
                    0,
                    vec![b"x".to_vec()],
                ))
                .await
                .unwrap_err(),
            "log/badhead",
            "negative next_seq",
        ),
    ] {
        assert_eq!(error.code(), "STORAGE_ERROR", "{error}");
        let text = format!("{error} ({:?})", std::error::Error::source(&error));
        assert!(
            text.contains(name) && text.contains(problem) && text.contains("corrupt row"),
            "names the row `{name}` and `{problem}`: {text}"
        );
    }
    assert_eq!(store.record("x").await.unwrap(), None, "nothing applied");
    assert_eq!(
        store.record("rec/new").await.unwrap(),
        None,
        "nothing applied"
    );

    assert_eq!(store.record("rec/good").await.unwrap(), Some(b"g".to_vec()));
    assert_eq!(store.read_log("log/good", 0).await.unwrap().len(), 1);
    assert_eq!(store.lease("thread/good").await.unwrap().unwrap().epoch, 1);
}

#[tokio::test]
async fn a_column_of_the_wrong_type_is_a_storage_error_naming_the_key() {
    let db = test_database_or_skip!();
    let store = store(&db, LeaseClock::Database).await;
    store.set("layer/k", b"v".to_vec()).await.unwrap();
    store.commit(Commit::new().put("rec/k", "r")).await.unwrap();
    exec(
        &store,
        "ALTER TABLE kv ALTER COLUMN value TYPE text USING encode(value, 'escape'); \
         ALTER TABLE records ALTER COLUMN value TYPE text USING encode(value, 'escape');",
    )
    .await;
    let get = store.get("layer/k").await.unwrap_err();
    assert_eq!(get.code(), "STORAGE_ERROR");
    assert!(get.to_string().contains("`layer/k`"), "{get}");
    let many = store
        .get_many(&["layer/k".to_owned(), "missing".to_owned()])
        .await
        .unwrap_err();
    assert!(many.to_string().contains("`layer/k`"), "{many}");
    let record = store.record("rec/k").await.unwrap_err();
    assert!(record.to_string().contains("`rec/k`"), "{record}");
    let records = store.records("rec/").await.unwrap_err();
    assert!(records.to_string().contains("rec/k"), "{records}");
}

#[tokio::test]
async fn a_database_with_an_unknown_migration_is_refused_with_postgres_schema_unknown() {
    let db = test_database_or_skip!();
    let store = store(&db, LeaseClock::Database).await;
    store.set("k", b"v".to_vec()).await.unwrap();
    exec(
        &store,
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (20990101, 'from the future', TRUE, '\\x00', 0)",
    )
    .await;

    let error = PostgresStorage::connect(db.url()).await.unwrap_err();
    assert_eq!(error.code(), "POSTGRES_SCHEMA_UNKNOWN", "{error}");
    let text = format!(
        "{error} {}",
        std::error::Error::source(&error)
            .map(ToString::to_string)
            .unwrap_or_default()
    );
    assert!(
        text.contains("20990101") && text.contains(db.name()),
        "names the database and the migration: {text}"
    );

    // The data is untouched: with the unknown migration gone the database connects as before.
    exec(
        &store,
        "DELETE FROM _sqlx_migrations WHERE version = 20990101",
    )
    .await;
    let again = PostgresStorage::connect(db.url()).await.unwrap();
    assert_eq!(again.get("k").await.unwrap(), Some(b"v".to_vec()));
}
