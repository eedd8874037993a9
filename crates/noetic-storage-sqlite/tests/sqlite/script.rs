//! A commit runs as one SQL script with its keys and values written in as literals: whatever bytes
//! they hold (quotes, semicolons, comment markers, NUL, every byte value, the empty string) come back
//! as written, and a commit made of many parts applies all of them or none.

#![allow(clippy::unwrap_used)] // a test: a failure is a panic

use noetic_core::adapter::durable::{Commit, DurableStore, LeaseRequest};
use noetic_storage_sqlite::SqliteStorage;

use crate::support::temp_db;

/// Keys and log names a script must not mistake for SQL.
const AWKWARD: [&str; 6] = [
    "it's",
    "a'); DROP TABLE records; --",
    "x' || 'y",
    "nul\0inside",
    "ünïcødé/ключ/🔑",
    "",
];

#[tokio::test]
async fn keys_logs_and_values_holding_any_bytes_round_trip_through_a_commit() {
    let db = temp_db();
    let store = SqliteStorage::open(&db.path).await.unwrap();
    let every_byte: Vec<u8> = (0..=255).collect();
    let mut commit = Commit::new();
    for (index, key) in AWKWARD.iter().enumerate() {
        let mut value = every_byte.clone();
        value.push(u8::try_from(index).unwrap());
        commit = commit.put(format!("rec/{key}"), value.clone()).append(
            format!("log/{key}"),
            0,
            vec![value, Vec::new(), b"'".to_vec()],
        );
    }
    store.commit(commit).await.unwrap();
    for (index, key) in AWKWARD.iter().enumerate() {
        let mut value = every_byte.clone();
        value.push(u8::try_from(index).unwrap());
        assert_eq!(
            store.record(&format!("rec/{key}")).await.unwrap(),
            Some(value.clone()),
            "{key:?}"
        );
        let log = store.read_log(&format!("log/{key}"), 0).await.unwrap();
        let values: Vec<&[u8]> = log.iter().map(|entry| entry.value.as_slice()).collect();
        assert_eq!(values, [value.as_slice(), b"", b"'"], "{key:?}");
        assert_eq!(store.next_seq(&format!("log/{key}")).await.unwrap(), 3);
    }
    let keys: Vec<String> = store
        .records("rec/")
        .await
        .unwrap()
        .into_iter()
        .map(|(key, _)| key)
        .collect();
    assert_eq!(keys.len(), AWKWARD.len(), "{keys:?}");

    // Deleting, clearing and marking by awkward names reach exactly those rows.
    store
        .commit(
            Commit::new()
                .delete(format!("rec/{}", AWKWARD[1]))
                .clear_prefix(format!("log/{}", AWKWARD[3]))
                .mark_runnable(AWKWARD[2]),
        )
        .await
        .unwrap();
    assert_eq!(
        store.record(&format!("rec/{}", AWKWARD[1])).await.unwrap(),
        None
    );
    assert!(
        store
            .record(&format!("rec/{}", AWKWARD[0]))
            .await
            .unwrap()
            .is_some()
    );
    assert!(
        store
            .read_log(&format!("log/{}", AWKWARD[3]), 0)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store
            .next_seq(&format!("log/{}", AWKWARD[3]))
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        store
            .read_log(&format!("log/{}", AWKWARD[4]), 0)
            .await
            .unwrap()
            .len(),
        3
    );
    assert_eq!(store.runnable("").await.unwrap(), [AWKWARD[2]]);
}

#[tokio::test]
async fn a_commit_of_many_parts_failing_at_its_last_append_applies_none_of_them() {
    let db = temp_db();
    let store = SqliteStorage::open(&db.path).await.unwrap();
    store
        .commit(Commit::new().append("log/b", 0, vec![b"b0".to_vec()]))
        .await
        .unwrap();
    let error = store
        .commit(
            Commit::new()
                .put("rec/1", "one")
                .put("rec/2", "two")
                .delete("rec/none")
                .append("log/a", 0, vec![b"a0".to_vec(), b"a1".to_vec()])
                // Taken: log/b's next sequence is 1.
                .append("log/b", 0, vec![b"again".to_vec()])
                .mark_runnable("run/x"),
        )
        .await
        .unwrap_err();
    let text = error.to_string();
    assert!(
        text.contains("log/b") && text.contains("next sequence is 1"),
        "the conflict names the log and its next sequence: {text}"
    );
    assert_eq!(store.record("rec/1").await.unwrap(), None);
    assert!(store.read_log("log/a", 0).await.unwrap().is_empty());
    assert_eq!(store.next_seq("log/a").await.unwrap(), 0);
    assert_eq!(store.read_log("log/b", 0).await.unwrap().len(), 1);
    assert!(store.runnable("").await.unwrap().is_empty());
}

/// A commit or lease grant dropped after its script was handed to the connection (polled once, then
/// dropped) leaves no transaction open behind it: the next write and reads work, and the dropped
/// commit applied entirely or not at all. On a file and in memory (where reads share the writer
/// connection).
#[tokio::test]
async fn a_commit_dropped_mid_script_leaves_the_store_working_and_applied_all_or_nothing() {
    let db = temp_db();
    for store in [
        SqliteStorage::open(&db.path).await.unwrap(),
        SqliteStorage::in_memory().await.unwrap(),
    ] {
        for round in 0..20u64 {
            let dropped = Commit::new()
                .put(format!("rec/dropped/{round}"), "d")
                .append(
                    format!("log/dropped/{round}"),
                    0,
                    vec![b"a".to_vec(), b"b".to_vec()],
                );
            // Polled once (the script is sent), then dropped; so is a lease grant, which leaves its
            // transaction open between its read and its write.
            let _ = tokio::time::timeout(std::time::Duration::ZERO, store.commit(dropped)).await;
            let name = format!("lease/{round}");
            let _ = tokio::time::timeout(
                std::time::Duration::ZERO,
                store.acquire_lease(LeaseRequest::new(&name, "a", 1_000, 1)),
            )
            .await;
            store
                .commit(Commit::new().put(format!("rec/after/{round}"), "x"))
                .await
                .unwrap();
            assert_eq!(
                store.record(&format!("rec/after/{round}")).await.unwrap(),
                Some(b"x".to_vec())
            );
            let record = store.record(&format!("rec/dropped/{round}")).await.unwrap();
            let log = store
                .read_log(&format!("log/dropped/{round}"), 0)
                .await
                .unwrap();
            let head = store
                .next_seq(&format!("log/dropped/{round}"))
                .await
                .unwrap();
            assert!(
                (record.is_some() && log.len() == 2 && head == 2)
                    || (record.is_none() && log.is_empty() && head == 0),
                "round {round}: the dropped commit applied in part: {record:?}, {} entries, head {head}",
                log.len()
            );
            // The grant applied or not; either way the lease can be taken now.
            let lease = store
                .acquire_lease(LeaseRequest::new(&name, "a", 1_000, 2))
                .await
                .unwrap();
            assert_eq!(lease.holder, "a");
        }
    }
}

/// What a commit checks is the state its earlier parts leave: an append into a prefix the same commit
/// clears starts at 0, and a second append to one log follows the first.
#[tokio::test]
async fn checks_read_the_state_the_commits_earlier_parts_leave() {
    let db = temp_db();
    let store = SqliteStorage::open(&db.path).await.unwrap();
    store
        .commit(Commit::new().append("run/1/log", 0, vec![b"old".to_vec(); 3]))
        .await
        .unwrap();
    store
        .commit(
            Commit::new()
                .clear_prefix("run/1/")
                .append("run/1/log", 0, vec![b"new".to_vec()]),
        )
        .await
        .unwrap();
    let values: Vec<Vec<u8>> = store
        .read_log("run/1/log", 0)
        .await
        .unwrap()
        .into_iter()
        .map(|entry| entry.value)
        .collect();
    assert_eq!(values, [b"new".to_vec()]);

    store
        .commit(Commit::new().append("two", 0, vec![b"a".to_vec()]).append(
            "two",
            1,
            vec![b"b".to_vec(), b"c".to_vec()],
        ))
        .await
        .unwrap();
    assert_eq!(store.next_seq("two").await.unwrap(), 3);
    let error = store
        .commit(Commit::new().append("two", 3, vec![b"d".to_vec()]).append(
            "two",
            3,
            vec![b"again".to_vec()],
        ))
        .await
        .unwrap_err();
    assert!(error.to_string().contains("next sequence is 4"), "{error}");
    assert_eq!(store.next_seq("two").await.unwrap(), 3, "nothing applied");
}
