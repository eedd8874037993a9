//! A database file across opens and between stores: reopening, two stores on one file, read-only and
//! locked files.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use noetic_core::StorageAdapter;
use noetic_core::adapter::durable::{Commit, DurableStore, LeaseRequest};
use noetic_storage_sqlite::{SqliteOptions, SqliteStorage};

use crate::support::{exec, raw, temp_db};

#[tokio::test]
async fn data_survives_reopening_the_file() {
    let db = temp_db();
    let store = SqliteStorage::open(&db.path).await.unwrap();
    store.set("layer/k", b"v".to_vec()).await.unwrap();
    let lease = store
        .acquire_lease(LeaseRequest::new("thread/t", "host-a", 1_000, 5_000))
        .await
        .unwrap();
    store
        .commit(
            Commit::new()
                .fenced(Some(lease.fence()))
                .put("exec/1/head", "h")
                .append("exec/1/items", 0, vec![b"i0".to_vec(), b"i1".to_vec()]),
        )
        .await
        .unwrap();
    drop(store);

    let store = SqliteStorage::open(&db.path).await.unwrap();
    assert_eq!(store.get("layer/k").await.unwrap(), Some(b"v".to_vec()));
    assert_eq!(
        store.record("exec/1/head").await.unwrap(),
        Some(b"h".to_vec())
    );
    assert_eq!(store.next_seq("exec/1/items").await.unwrap(), 2);
    assert_eq!(
        store.read_log("exec/1/items", 1).await.unwrap()[0].value,
        b"i1"
    );
    assert_eq!(store.lease("thread/t").await.unwrap(), Some(lease.clone()));
    store
        .commit(Commit::new().fenced(Some(lease.fence())).append(
            "exec/1/items",
            2,
            vec![b"i2".to_vec()],
        ))
        .await
        .expect("the reopened file keeps the lease's epoch and the log's next sequence");
}

#[tokio::test]
async fn a_lease_taken_through_one_store_is_held_for_another_store_on_the_same_file() {
    let db = temp_db();
    let a = SqliteStorage::open(&db.path).await.unwrap();
    let b = SqliteStorage::open(&db.path).await.unwrap();
    let held_by_a = a
        .acquire_lease(LeaseRequest::new("thread/t", "a", 1_000, 10_000))
        .await
        .unwrap();
    let error = b
        .acquire_lease(LeaseRequest::new("thread/t", "b", 1_000, 10_999))
        .await
        .unwrap_err();
    assert_eq!(error.code(), "LEASE_HELD");
    assert!(
        error.to_string().contains("`a`") && error.to_string().contains("11000"),
        "{error}"
    );

    // After expiry `b` takes it over, and `a`'s next fenced write is refused in both stores' view.
    let held_by_b = b
        .acquire_lease(LeaseRequest::new("thread/t", "b", 1_000, 11_000))
        .await
        .unwrap();
    assert_eq!(held_by_b.epoch, held_by_a.epoch + 1);
    let lost = a
        .commit(
            Commit::new()
                .fenced(Some(held_by_a.fence()))
                .put("thread/t/msg", "late"),
        )
        .await
        .unwrap_err();
    assert_eq!(lost.code(), "LEASE_LOST");
    b.commit(
        Commit::new()
            .fenced(Some(held_by_b.fence()))
            .put("thread/t/msg", "b's"),
    )
    .await
    .unwrap();
    assert_eq!(
        a.record("thread/t/msg").await.unwrap(),
        Some(b"b's".to_vec())
    );

    // Appends from two stores interleave only at the exact next sequence number.
    a.commit(Commit::new().append("log", 0, vec![b"a".to_vec()]))
        .await
        .unwrap();
    let conflict = b
        .commit(Commit::new().append("log", 0, vec![b"b".to_vec()]))
        .await
        .unwrap_err();
    assert_eq!(conflict.code(), "STORAGE_ERROR");
    b.commit(Commit::new().append("log", 1, vec![b"b".to_vec()]))
        .await
        .unwrap();
    assert_eq!(a.next_seq("log").await.unwrap(), 2);
}

#[tokio::test]
async fn a_file_opened_read_only_reads_and_refuses_every_write_with_storage_read_only() {
    let db = temp_db();
    let store = SqliteStorage::open(&db.path).await.unwrap();
    store.set("k", b"v".to_vec()).await.unwrap();
    store.commit(Commit::new().put("r", "1")).await.unwrap();
    drop(store);

    let reader = SqliteStorage::open_with(&db.path, SqliteOptions::default().read_only(true))
        .await
        .unwrap();
    assert_eq!(reader.get("k").await.unwrap(), Some(b"v".to_vec()));
    assert_eq!(reader.record("r").await.unwrap(), Some(b"1".to_vec()));

    let set = reader.set("k2", b"x".to_vec()).await.unwrap_err();
    assert_eq!(set.code(), "STORAGE_READ_ONLY");
    assert!(set.to_string().contains("k2"), "names the key: {set}");
    let commit = reader
        .commit(Commit::new().put("r2", "x"))
        .await
        .unwrap_err();
    assert_eq!(commit.code(), "STORAGE_READ_ONLY");
    assert!(
        commit.to_string().contains("r2"),
        "names the record: {commit}"
    );
    let lease = reader
        .acquire_lease(LeaseRequest::new("thread/t", "a", 1, 1))
        .await
        .unwrap_err();
    assert_eq!(lease.code(), "STORAGE_READ_ONLY");
    assert!(
        lease.to_string().contains("thread/t"),
        "names the lease: {lease}"
    );
    assert_eq!(
        reader.get("k").await.unwrap(),
        Some(b"v".to_vec()),
        "reads still work"
    );
}

#[tokio::test]
async fn a_read_only_open_of_a_missing_file_is_an_error_naming_it() {
    let db = temp_db();
    let error = SqliteStorage::open_with(&db.path, SqliteOptions::default().read_only(true))
        .await
        .unwrap_err();
    assert_eq!(error.code(), "STORAGE_ERROR");
    assert!(error.to_string().contains("noetic.db"), "{error}");
    assert!(!db.path.exists(), "a read-only open creates nothing");
}

#[tokio::test]
async fn a_file_without_write_permission_refuses_writes_unless_the_process_may_write_anyway() {
    let db = temp_db();
    let store = SqliteStorage::open(&db.path).await.unwrap();
    store.set("k", b"v".to_vec()).await.unwrap();
    drop(store);
    std::fs::set_permissions(&db.path, std::fs::Permissions::from_mode(0o444)).unwrap();
    // Root ignores file modes: then SQLite may write, and this test checks that it still works.
    let writable = std::fs::OpenOptions::new()
        .write(true)
        .open(&db.path)
        .is_ok();

    match SqliteStorage::open(&db.path).await {
        Ok(store) => {
            assert_eq!(store.get("k").await.unwrap(), Some(b"v".to_vec()));
            let outcome = store.set("k2", b"x".to_vec()).await;
            if writable {
                outcome.unwrap();
                assert_eq!(store.get("k2").await.unwrap(), Some(b"x".to_vec()));
            } else {
                let error = outcome.unwrap_err();
                assert_eq!(error.code(), "STORAGE_READ_ONLY", "{error}");
                assert!(error.to_string().contains("k2"), "{error}");
            }
        }
        Err(error) => {
            assert!(!writable, "a writable file opens: {error}");
            assert_eq!(error.code(), "STORAGE_READ_ONLY", "{error}");
        }
    }
}

#[tokio::test]
async fn a_locked_file_gives_storage_busy_on_write_and_keeps_its_data() {
    let db = temp_db();
    let options = SqliteOptions::default().busy_timeout(Duration::from_millis(50));
    let store = SqliteStorage::open_with(&db.path, options).await.unwrap();
    store.set("k", b"v".to_vec()).await.unwrap();
    store
        .commit(
            Commit::new()
                .put("r", "1")
                .append("log", 0, vec![b"e".to_vec()]),
        )
        .await
        .unwrap();

    let mut other = raw(&db.path).await;
    exec(&mut other, "BEGIN EXCLUSIVE").await;
    exec(
        &mut other,
        "INSERT INTO kv (key, value) VALUES ('other', x'00')",
    )
    .await;

    let set = store.set("k", b"new".to_vec()).await.unwrap_err();
    assert_eq!(set.code(), "STORAGE_BUSY", "{set}");
    assert!(set.to_string().contains("`k`"), "names the key: {set}");
    let commit = store
        .commit(
            Commit::new()
                .put("r", "2")
                .append("log", 1, vec![b"f".to_vec()]),
        )
        .await
        .unwrap_err();
    assert_eq!(commit.code(), "STORAGE_BUSY", "{commit}");
    let lease = store
        .acquire_lease(LeaseRequest::new("thread/t", "a", 1, 1))
        .await
        .unwrap_err();
    assert_eq!(lease.code(), "STORAGE_BUSY", "{lease}");
    // WAL: readers are not blocked by the writer's lock.
    assert_eq!(store.get("k").await.unwrap(), Some(b"v".to_vec()));

    exec(&mut other, "ROLLBACK").await;
    assert_eq!(store.get("k").await.unwrap(), Some(b"v".to_vec()));
    assert_eq!(store.get("other").await.unwrap(), None);
    assert_eq!(store.record("r").await.unwrap(), Some(b"1".to_vec()));
    assert_eq!(store.next_seq("log").await.unwrap(), 1);
    store
        .commit(
            Commit::new()
                .put("r", "2")
                .append("log", 1, vec![b"f".to_vec()]),
        )
        .await
        .expect("writes work again once the lock is gone");
    assert_eq!(store.record("r").await.unwrap(), Some(b"2".to_vec()));
}
