//! Errors: an unreachable server or a bad URL, never showing the password; a read-only database; a
//! lock held past `lock_timeout` and an exhausted pool as `STORAGE_BUSY`.

#![allow(clippy::unwrap_used)] // a test: a failure is a panic

use std::time::Duration;

use noetic_core::StorageAdapter;
use noetic_core::adapter::durable::{Commit, DurableStore, LeaseRequest};
use noetic_storage_postgres::{LeaseClock, PostgresOptions, PostgresStorage};
use noetic_test_support::test_database_or_skip;

use crate::support::{exec, store};

const PASSWORD: &str = "hunter2-do-not-show";

/// `url` with [`PASSWORD`] as its password (`None` when it has one already).
fn with_password(url: &str) -> Option<String> {
    let authority = url.find("://")? + 3;
    let at = authority + url[authority..].find('@')?;
    let userinfo = &url[authority..at];
    if userinfo.contains(':') {
        return None;
    }
    Some(format!("{}:{PASSWORD}{}", &url[..at], &url[at..]))
}

fn assert_hidden(text: &str) {
    assert!(!text.contains(PASSWORD), "shows the password: {text}");
    assert!(
        !text.contains("hunter2"),
        "shows part of the password: {text}"
    );
}

#[tokio::test]
async fn an_unreachable_server_is_a_clear_error_that_does_not_show_the_password() {
    // No test database needed: nothing listens on port 1.
    let url = format!("postgres://noetic:{PASSWORD}@127.0.0.1:1/app?password={PASSWORD}");
    let error = PostgresStorage::connect_with(
        &url,
        PostgresOptions::default().acquire_timeout(Duration::from_secs(5)),
    )
    .await
    .unwrap_err();
    assert_eq!(error.code(), "STORAGE_ERROR", "{error}");
    let text = error.to_string();
    assert!(
        text.contains("connect") && text.contains("127.0.0.1:1") && text.contains("noetic:***@"),
        "names the operation and the server: {text}"
    );
    assert_hidden(&text);
    assert_hidden(&format!("{error:?}"));

    let bad = format!("postgres://noetic:{PASSWORD}@127.0.0.1:notaport/app");
    let error = PostgresStorage::connect(&bad).await.unwrap_err();
    assert_eq!(error.code(), "STORAGE_ERROR", "{error}");
    assert_hidden(&error.to_string());
    assert_hidden(&format!("{error:?}"));
}

#[tokio::test]
async fn the_location_and_debug_of_a_store_hide_the_password() {
    let db = test_database_or_skip!();
    let Some(url) = with_password(db.url()) else {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: the_location_and_debug_of_a_store_hide_the_password: the test server's URL carries a password already"
        );
        return;
    };
    // The test server trusts loopback logins, so any password is accepted.
    let store = PostgresStorage::connect(&url).await.unwrap();
    assert!(store.location().contains(":***@"), "{}", store.location());
    assert!(
        store.location().ends_with(db.name()),
        "{}",
        store.location()
    );
    assert_hidden(store.location());
    let debug = format!("{store:?}");
    assert!(debug.contains(":***@"), "{debug}");
    assert_hidden(&debug);
    store.set("k", b"v".to_vec()).await.unwrap();
    // An error names the key, not the URL.
    exec(&store, "DROP TABLE kv").await;
    let error = store.get("k").await.unwrap_err();
    assert_hidden(&format!("{error} {error:?}"));
}

#[tokio::test]
async fn a_read_only_database_reads_and_refuses_every_write_with_storage_read_only() {
    let db = test_database_or_skip!();
    let writer = store(&db, LeaseClock::Database).await;
    writer.set("k", b"v".to_vec()).await.unwrap();
    writer.commit(Commit::new().put("r", "1")).await.unwrap();
    exec(
        &writer,
        format!(
            "ALTER DATABASE \"{}\" SET default_transaction_read_only = on",
            db.name()
        ),
    )
    .await;

    // A new store (its connections read-only, like a hot standby's) checks the schema without writing.
    let reader = store(&db, LeaseClock::Database).await;
    assert_eq!(reader.get("k").await.unwrap(), Some(b"v".to_vec()));
    assert_eq!(reader.record("r").await.unwrap(), Some(b"1".to_vec()));
    let set = reader.set("k2", b"x".to_vec()).await.unwrap_err();
    assert_eq!(set.code(), "STORAGE_READ_ONLY", "{set}");
    assert!(set.to_string().contains("`k2`"), "names the key: {set}");
    let commit = reader
        .commit(Commit::new().put("r2", "x"))
        .await
        .unwrap_err();
    assert_eq!(commit.code(), "STORAGE_READ_ONLY", "{commit}");
    assert!(
        commit.to_string().contains("r2"),
        "names the record: {commit}"
    );
    let lease = reader
        .acquire_lease(LeaseRequest::new("thread/t", "a", 1_000, 1))
        .await
        .unwrap_err();
    assert_eq!(lease.code(), "STORAGE_READ_ONLY", "{lease}");
    assert!(
        lease.to_string().contains("thread/t"),
        "names the lease: {lease}"
    );
}

#[tokio::test]
async fn a_lock_held_past_lock_timeout_and_an_exhausted_pool_are_storage_busy() {
    let db = test_database_or_skip!();
    let setup = store(&db, LeaseClock::Database).await;
    exec(
        &setup,
        format!(
            "ALTER DATABASE \"{}\" SET lock_timeout = '200ms'",
            db.name()
        ),
    )
    .await;
    let store = PostgresStorage::connect_with(
        db.url(),
        PostgresOptions::default()
            .max_connections(1)
            .acquire_timeout(Duration::from_millis(300)),
    )
    .await
    .unwrap();
    let lease = store
        .acquire_lease(LeaseRequest::new("thread/t", "a", 60_000, 1))
        .await
        .unwrap();
    store
        .commit(Commit::new().append("log", 0, vec![b"e".to_vec()]))
        .await
        .unwrap();

    // Another session holds the lease row and the log's head.
    let mut other = setup.pool().begin().await.unwrap();
    sqlx::raw_sql(
        "SELECT * FROM leases FOR UPDATE; SELECT * FROM log_heads FOR UPDATE; \
         LOCK TABLE kv IN EXCLUSIVE MODE",
    )
    .execute(&mut *other)
    .await
    .unwrap();
    let fenced = store
        .commit(Commit::new().fenced(Some(lease.fence())).put("r", "1"))
        .await
        .unwrap_err();
    assert_eq!(fenced.code(), "STORAGE_BUSY", "{fenced}");
    assert!(fenced.to_string().contains("thread/t"), "{fenced}");
    let append = store
        .commit(Commit::new().append("log", 1, vec![b"f".to_vec()]))
        .await
        .unwrap_err();
    assert_eq!(append.code(), "STORAGE_BUSY", "{append}");
    assert!(append.to_string().contains("`log`"), "{append}");
    let acquire = store
        .acquire_lease(LeaseRequest::new("thread/t", "a", 60_000, 2))
        .await
        .unwrap_err();
    assert_eq!(acquire.code(), "STORAGE_BUSY", "{acquire}");
    let set = store.set("k", b"v".to_vec()).await.unwrap_err();
    assert_eq!(set.code(), "STORAGE_BUSY", "{set}");
    other.rollback().await.unwrap();

    assert_eq!(
        store.record("r").await.unwrap(),
        None,
        "nothing was written"
    );
    assert_eq!(store.next_seq("log").await.unwrap(), 1);

    // The pool's one connection taken: the next operation waits `acquire_timeout`, then is busy.
    let held = store.pool().acquire().await.unwrap();
    let waited = store.get("k").await.unwrap_err();
    assert_eq!(waited.code(), "STORAGE_BUSY", "{waited}");
    assert!(waited.to_string().contains("`k`"), "{waited}");
    drop(held);
    store
        .commit(
            Commit::new()
                .fenced(Some(lease.fence()))
                .put("r", "1")
                .append("log", 1, vec![b"f".to_vec()]),
        )
        .await
        .expect("writes work again once the locks are gone");
    assert_eq!(store.record("r").await.unwrap(), Some(b"1".to_vec()));
}
