//! The store sections of the durable-store conformance suite ([`crate::conformance`]): records,
//! logs, commits, leases and runnable marks, on fake timestamps.

use noetic_core::Error;
use noetic_core::adapter::durable::{Commit, DurableStore, Fence, LeaseRequest, LogEntry};

fn entries(values: &[&str]) -> Vec<Vec<u8>> {
    values
        .iter()
        .map(|value| value.as_bytes().to_vec())
        .collect()
}

fn read(entries: &[LogEntry]) -> Vec<(u64, String)> {
    entries
        .iter()
        .map(|entry| {
            (
                entry.seq,
                String::from_utf8_lossy(&entry.value).into_owned(),
            )
        })
        .collect()
}

/// Asserts every store section of the [`DurableStore`] contract ([`crate::conformance`]) on `store`,
/// one after another: [`prefix_reads`], [`logs`], [`commits`], [`leases`] and [`runnable`]. `store`
/// must start empty. For a store that cannot be opened twice, and for wrappers; a backend binds
/// itself to the whole suite, harness sections included, with
/// [`durable_store_conformance!`](crate::durable_store_conformance).
///
/// # Panics
/// When the store breaks the contract or fails.
///
/// # Cancel safety
/// Not meant to be cancelled: a dropped run leaves test data behind.
pub async fn durable_conformance(store: &dyn DurableStore) {
    prefix_reads(store).await;
    logs(store).await;
    commits(store).await;
    leases(store).await;
    runnable(store).await;
}

/// Records: put, replace, delete (a missing one too), and `records(prefix)` listing exactly the
/// prefix's rows in bytewise key order, with `%` and `_` literal, non-ASCII keys, and prefixes with no
/// upper bound (empty, or all `char::MAX`). `store` must start empty.
///
/// # Panics
/// When the store breaks the contract or fails.
///
/// # Cancel safety
/// Not meant to be cancelled: a dropped run leaves test data behind.
pub async fn prefix_reads(store: &dyn DurableStore) {
    unbounded_prefixes(store).await;
    records(store).await;
}

/// Prefixes with no upper bound (empty, or all `char::MAX`) list and clear exactly their rows.
#[allow(clippy::unwrap_used)]
async fn unbounded_prefixes(store: &dyn DurableStore) {
    let top = "\u{10FFFF}";
    store
        .commit(
            Commit::new()
                .put("a/r", "a")
                .put(format!("{top}/r"), "t")
                .append(format!("{top}/log"), 0, entries(&["e"])),
        )
        .await
        .unwrap();
    let keys = |records: Vec<(String, Vec<u8>)>| -> Vec<String> {
        records.into_iter().map(|(key, _)| key).collect()
    };
    assert_eq!(
        keys(store.records("").await.unwrap()),
        vec!["a/r".to_owned(), format!("{top}/r")]
    );
    assert_eq!(
        keys(store.records(top).await.unwrap()),
        vec![format!("{top}/r")]
    );
    store.commit(Commit::new().clear_prefix(top)).await.unwrap();
    assert_eq!(
        keys(store.records("").await.unwrap()),
        vec!["a/r".to_owned()]
    );
    assert_eq!(store.next_seq(&format!("{top}/log")).await.unwrap(), 0);
    store.commit(Commit::new().clear_prefix("")).await.unwrap();
    assert!(store.records("").await.unwrap().is_empty());
}

#[allow(clippy::unwrap_used)]
async fn records(store: &dyn DurableStore) {
    assert_eq!(store.record("r/a").await.unwrap(), None);
    store.commit(Commit::new().put("r/a", "one")).await.unwrap();
    assert_eq!(store.record("r/a").await.unwrap(), Some(b"one".to_vec()));
    store.commit(Commit::new().put("r/a", "two")).await.unwrap();
    assert_eq!(store.record("r/a").await.unwrap(), Some(b"two".to_vec()));
    store.commit(Commit::new().delete("r/a")).await.unwrap();
    assert_eq!(store.record("r/a").await.unwrap(), None);
    store
        .commit(Commit::new().delete("r/never-set"))
        .await
        .expect("deleting a missing record is not an error");

    let mut commit = Commit::new();
    for key in [
        "r/list/b",
        "r/list/a",
        "r/list/c/d",
        "r/lisz",
        "r/lis",
        "r/pct/a%b",
        "r/pct/axb",
        "r/pct/a%",
        "r/us/a_b",
        "r/us/axb",
        "r/é/1",
    ] {
        commit = commit.put(key, key);
    }
    store.commit(commit).await.unwrap();
    let keys = |records: Vec<(String, Vec<u8>)>| -> Vec<String> {
        records
            .into_iter()
            .map(|(key, value)| {
                assert_eq!(value, key.as_bytes(), "a record reads back its own value");
                key
            })
            .collect()
    };
    assert_eq!(
        keys(store.records("r/list/").await.unwrap()),
        vec!["r/list/a", "r/list/b", "r/list/c/d"]
    );
    assert_eq!(
        keys(store.records("r/lis").await.unwrap()),
        vec!["r/lis", "r/list/a", "r/list/b", "r/list/c/d", "r/lisz"]
    );
    assert_eq!(
        keys(store.records("r/pct/a%").await.unwrap()),
        vec!["r/pct/a%", "r/pct/a%b"],
        "`%` in a prefix is literal"
    );
    assert_eq!(
        keys(store.records("r/us/a_").await.unwrap()),
        vec!["r/us/a_b"],
        "`_` in a prefix is literal"
    );
    assert_eq!(keys(store.records("r/é").await.unwrap()), vec!["r/é/1"]);
    assert!(store.records("r/nothing/").await.unwrap().is_empty());
}

/// Logs: appends from 0, the exact-sequence conflict (neither a replay nor a gap) naming the log,
/// reading from any sequence number, logs whose names are prefixes of each other kept apart, trims
/// keeping the next sequence number, and clearing a prefix (literal `%` and `_`) resetting a log to 0.
/// `store` must start empty.
///
/// # Panics
/// When the store breaks the contract or fails.
///
/// # Cancel safety
/// Not meant to be cancelled: a dropped run leaves test data behind.
#[allow(clippy::unwrap_used)] // a test helper: a failure is a panic with the store's error
pub async fn logs(store: &dyn DurableStore) {
    assert_eq!(store.next_seq("l/a").await.unwrap(), 0);
    assert!(store.read_log("l/a", 0).await.unwrap().is_empty());
    store
        .commit(Commit::new().append("l/a", 0, entries(&["a0", "a1"])))
        .await
        .unwrap();
    store
        .commit(Commit::new().append("l/a", 2, entries(&["a2"])))
        .await
        .unwrap();
    assert_eq!(store.next_seq("l/a").await.unwrap(), 3);
    assert_eq!(
        read(&store.read_log("l/a", 0).await.unwrap()),
        vec![(0, "a0".into()), (1, "a1".into()), (2, "a2".into())]
    );
    assert_eq!(
        read(&store.read_log("l/a", 1).await.unwrap()),
        vec![(1, "a1".into()), (2, "a2".into())]
    );
    assert!(store.read_log("l/a", 3).await.unwrap().is_empty());

    // An append must start exactly at the next sequence number: neither a replay nor a gap.
    for first_seq in [2, 4, 0] {
        let error = store
            .commit(Commit::new().append("l/a", first_seq, entries(&["dup"])))
            .await
            .unwrap_err();
        assert_eq!(error.code(), "STORAGE_ERROR", "append at {first_seq}");
        assert!(
            error.to_string().contains("l/a"),
            "the conflict names the log: {error}"
        );
    }
    assert_eq!(store.next_seq("l/a").await.unwrap(), 3);
    assert_eq!(store.read_log("l/a", 0).await.unwrap().len(), 3);

    // Logs are separate: one log's name being a prefix of another's does not mix them.
    store
        .commit(Commit::new().append("l/ab", 0, entries(&["b0"])))
        .await
        .unwrap();
    assert_eq!(
        read(&store.read_log("l/ab", 0).await.unwrap()),
        vec![(0, "b0".into())]
    );
    assert_eq!(store.read_log("l/a", 0).await.unwrap().len(), 3);

    // A trim removes old entries and keeps the next sequence number.
    store.commit(Commit::new().trim("l/a", 2)).await.unwrap();
    assert_eq!(
        read(&store.read_log("l/a", 0).await.unwrap()),
        vec![(2, "a2".into())]
    );
    assert_eq!(store.next_seq("l/a").await.unwrap(), 3);
    store
        .commit(Commit::new().append("l/a", 3, entries(&["a3"])))
        .await
        .unwrap();

    // Clearing a prefix removes its records and logs; a cleared log starts again at 0.
    store
        .commit(
            Commit::new()
                .put("x/1/head", "h")
                .put("x/10/head", "other")
                .append("x/1/items", 0, entries(&["i0", "i1"])),
        )
        .await
        .unwrap();
    store
        .commit(Commit::new().clear_prefix("x/1/"))
        .await
        .unwrap();
    assert_eq!(store.record("x/1/head").await.unwrap(), None);
    assert_eq!(
        store.record("x/10/head").await.unwrap(),
        Some(b"other".to_vec()),
        "a prefix is not a substring match"
    );
    assert!(store.read_log("x/1/items", 0).await.unwrap().is_empty());
    assert_eq!(store.next_seq("x/1/items").await.unwrap(), 0);
    store
        .commit(Commit::new().append("x/1/items", 0, entries(&["again"])))
        .await
        .unwrap();
    assert_eq!(
        read(&store.read_log("x/1/items", 0).await.unwrap()),
        vec![(0, "again".into())]
    );

    // `%` and `_` in a cleared prefix are literal.
    store
        .commit(
            Commit::new()
                .put("p/a%/r", "1")
                .put("p/ab/r", "2")
                .put("p/a_/r", "3")
                .append("p/a%/log", 0, entries(&["e"]))
                .append("p/ax/log", 0, entries(&["e"])),
        )
        .await
        .unwrap();
    store
        .commit(Commit::new().clear_prefix("p/a%").clear_prefix("p/a_"))
        .await
        .unwrap();
    assert_eq!(store.record("p/a%/r").await.unwrap(), None);
    assert_eq!(store.record("p/a_/r").await.unwrap(), None);
    assert_eq!(store.record("p/ab/r").await.unwrap(), Some(b"2".to_vec()));
    assert_eq!(store.next_seq("p/a%/log").await.unwrap(), 0);
    assert_eq!(store.next_seq("p/ax/log").await.unwrap(), 1);
}

/// Commits: all or nothing — a commit whose append conflicts applies none of its puts, deletes,
/// clears, trims or appends; within one commit a key written twice keeps its last write, and appends
/// to several logs all apply; an empty commit is fine. (Two appends to one log in one commit are left
/// open: PostgreSQL applies both, `KvDurableStore` refuses the second.) `store` must start empty.
///
/// # Panics
/// When the store breaks the contract or fails.
///
/// # Cancel safety
/// Not meant to be cancelled: a dropped run leaves test data behind.
#[allow(clippy::unwrap_used)] // a test helper: a failure is a panic with the store's error
pub async fn commits(store: &dyn DurableStore) {
    store
        .commit(Commit::new())
        .await
        .expect("an empty commit is fine");
    store
        .commit(
            Commit::new()
                .put("c/b", "first")
                .put("c/a", "a")
                .put("c/b", "last")
                .append("c/log", 0, entries(&["0", "1"]))
                .append("c/other", 0, entries(&["2"])),
        )
        .await
        .unwrap();
    assert_eq!(
        store.record("c/b").await.unwrap(),
        Some(b"last".to_vec()),
        "a key written twice in one commit keeps its last write"
    );
    assert_eq!(store.record("c/a").await.unwrap(), Some(b"a".to_vec()));
    assert_eq!(
        read(&store.read_log("c/log", 0).await.unwrap()),
        vec![(0, "0".into()), (1, "1".into())]
    );
    assert_eq!(
        read(&store.read_log("c/other", 0).await.unwrap()),
        vec![(0, "2".into())]
    );

    store
        .commit(Commit::new().append("t/b", 0, entries(&["b0"])))
        .await
        .unwrap();
    // The second append conflicts: the first append, the put and the delete must not apply either.
    store
        .commit(Commit::new().put("t/kept", "old"))
        .await
        .unwrap();
    let error = store
        .commit(
            Commit::new()
                .put("t/new", "n")
                .put("t/kept", "new")
                .delete("t/kept-too")
                .append("t/a", 0, entries(&["a0"]))
                .append("t/b", 0, entries(&["b0 again"])),
        )
        .await
        .unwrap_err();
    assert_eq!(error.code(), "STORAGE_ERROR");
    assert!(error.to_string().contains("t/b"), "names the log: {error}");
    assert_eq!(store.record("t/new").await.unwrap(), None);
    assert_eq!(store.record("t/kept").await.unwrap(), Some(b"old".to_vec()));
    assert_eq!(store.next_seq("t/a").await.unwrap(), 0);
    assert!(store.read_log("t/a", 0).await.unwrap().is_empty());
    assert_eq!(store.next_seq("t/b").await.unwrap(), 1);

    // A failed commit that clears and trims leaves both undone too.
    store
        .commit(
            Commit::new()
                .put("t/c/r", "r")
                .append("t/c/log", 0, entries(&["0", "1"])),
        )
        .await
        .unwrap();
    store
        .commit(Commit::new().clear_prefix("t/c/").trim("t/b", 1).append(
            "t/b",
            0,
            entries(&["conflict"]),
        ))
        .await
        .unwrap_err();
    assert_eq!(store.record("t/c/r").await.unwrap(), Some(b"r".to_vec()));
    assert_eq!(store.next_seq("t/c/log").await.unwrap(), 2);
    assert_eq!(store.read_log("t/b", 0).await.unwrap().len(), 1);
}

/// Leases, on the caller's clock (fake timestamps): the first grant at epoch 1, renewal by the holder
/// at the same epoch, `LEASE_HELD` naming the holder and expiry while it is live, takeover at the next
/// epoch once it has expired, `LEASE_LOST` for a fenced commit of the stale holder (which applies
/// nothing) or of a lease never granted, release (a no-op for a holder that lost it), re-acquire after
/// release one epoch up, a lease dropped in a commit fencing its holder out, and
/// [`LeaseRequest::renewal`] refused once the lease was dropped or taken over. `store` must start
/// empty.
///
/// # Panics
/// When the store breaks the contract or fails.
///
/// # Cancel safety
/// Not meant to be cancelled: a dropped run leaves test data behind.
#[allow(clippy::unwrap_used)] // a test helper: a failure is a panic with the store's error
pub async fn leases(store: &dyn DurableStore) {
    let (ttl, t0) = (1_000, 1_000_000);
    assert_eq!(store.lease("lease/a").await.unwrap(), None);
    let first = store
        .acquire_lease(LeaseRequest::new("lease/a", "one", ttl, t0))
        .await
        .unwrap();
    assert_eq!(
        (
            first.name.as_str(),
            first.holder.as_str(),
            first.epoch,
            first.expires_at_ms
        ),
        ("lease/a", "one", 1, t0 + ttl)
    );
    assert_eq!(store.lease("lease/a").await.unwrap(), Some(first.clone()));

    // The same holder renews at the same epoch, further out.
    let renewed = store
        .acquire_lease(LeaseRequest::new("lease/a", "one", ttl, t0 + 500))
        .await
        .unwrap();
    assert_eq!((renewed.epoch, renewed.expires_at_ms), (1, t0 + 500 + ttl));

    // Another holder while it is live: LEASE_HELD naming the holder and the expiry.
    let held = store
        .acquire_lease(LeaseRequest::new("lease/a", "two", ttl, t0 + 1_499))
        .await
        .unwrap_err();
    assert_eq!(held.code(), "LEASE_HELD");
    match &held {
        Error::LeaseHeld {
            lease,
            holder,
            expires_at_ms,
        } => assert_eq!(
            (lease.as_str(), holder.as_str(), *expires_at_ms),
            ("lease/a", "one", t0 + 1_500)
        ),
        other => panic!("expected LeaseHeld, got {other:?}"),
    }
    assert!(held.to_string().contains("one"), "{held}");

    // A fenced commit at the live epoch applies.
    store
        .commit(
            Commit::new()
                .fenced(Some(renewed.fence()))
                .put("lease/data", "by one"),
        )
        .await
        .unwrap();

    // After expiry another holder takes it at the next epoch.
    let taken = store
        .acquire_lease(LeaseRequest::new("lease/a", "two", ttl, t0 + 1_500))
        .await
        .unwrap();
    assert_eq!((taken.holder.as_str(), taken.epoch), ("two", 2));

    // The old holder's fenced commit fails with LEASE_LOST and applies nothing.
    let lost = store
        .commit(
            Commit::new()
                .fenced(Some(renewed.fence()))
                .put("lease/data", "late write")
                .append("lease/log", 0, entries(&["late"])),
        )
        .await
        .unwrap_err();
    assert_eq!(lost.code(), "LEASE_LOST");
    assert!(matches!(&lost, Error::LeaseLost { lease, epoch: 1 } if lease == "lease/a"));
    assert_eq!(
        store.record("lease/data").await.unwrap(),
        Some(b"by one".to_vec())
    );
    assert_eq!(store.next_seq("lease/log").await.unwrap(), 0);

    // A fence on a lease that was never granted fails too.
    let never = store
        .commit(
            Commit::new()
                .fenced(Some(Fence::new("lease/none", 1)))
                .put("lease/x", "x"),
        )
        .await
        .unwrap_err();
    assert_eq!(never.code(), "LEASE_LOST");
    assert_eq!(store.record("lease/x").await.unwrap(), None);

    // Releasing by a holder that no longer holds it does nothing.
    store.release_lease(&renewed).await.unwrap();
    assert_eq!(store.lease("lease/a").await.unwrap(), Some(taken.clone()));

    // Release, then re-acquire: a higher epoch, even for the same holder and before the old expiry.
    store.release_lease(&taken).await.unwrap();
    let released = store.lease("lease/a").await.unwrap().unwrap();
    assert_eq!(released.epoch, 2, "a released lease keeps its epoch");
    assert!(
        released.expires_at_ms <= t0 + 1_500,
        "a released lease is expired"
    );
    let again = store
        .acquire_lease(LeaseRequest::new("lease/a", "two", ttl, t0 + 1_600))
        .await
        .unwrap();
    assert_eq!(again.epoch, 3);
    let stale = store
        .commit(
            Commit::new()
                .fenced(Some(taken.fence()))
                .put("lease/data", "stale"),
        )
        .await
        .unwrap_err();
    assert_eq!(stale.code(), "LEASE_LOST");

    // Leases are independent by name.
    let other = store
        .acquire_lease(LeaseRequest::new("lease/b", "two", ttl, t0))
        .await
        .unwrap();
    assert_eq!(other.epoch, 1);

    // A commit may drop a lease outright, fenced by it, with its other parts; dropping a missing
    // lease is no error, and a holder of the dropped lease is fenced out.
    store
        .commit(
            Commit::new()
                .fenced(Some(other.fence()))
                .put("lease/b-done", "done")
                .drop_lease("lease/b")
                .drop_lease("lease/never"),
        )
        .await
        .unwrap();
    assert_eq!(store.lease("lease/b").await.unwrap(), None);
    assert_eq!(
        store.record("lease/b-done").await.unwrap(),
        Some(b"done".to_vec())
    );
    let fenced_out = store
        .commit(
            Commit::new()
                .fenced(Some(other.fence()))
                .put("lease/b-late", "x"),
        )
        .await
        .unwrap_err();
    assert_eq!(fenced_out.code(), "LEASE_LOST");
    store.release_lease(&other).await.unwrap();
    assert_eq!(
        store.lease("lease/b").await.unwrap(),
        None,
        "releasing a dropped lease does not bring it back"
    );

    // A renewal succeeds only while the lease is still the renewer's at the epoch it holds: not
    // once it was dropped (a fresh grant would restart at epoch 1 and let a lapsed holder write),
    // not after a takeover; after a lapse nobody used, it is granted again one epoch up.
    for (stale, now) in [(&other, t0 + 100), (&renewed, t0 + 1_700)] {
        let lost = store
            .acquire_lease(LeaseRequest::renewal(stale, ttl, now))
            .await
            .unwrap_err();
        assert_eq!(lost.code(), "LEASE_LOST", "{lost}");
    }
    assert_eq!(store.lease("lease/b").await.unwrap(), None, "no grant");
    let c = store
        .acquire_lease(LeaseRequest::new("lease/c", "one", ttl, t0))
        .await
        .unwrap();
    let kept = store
        .acquire_lease(LeaseRequest::renewal(&c, ttl, t0 + 10))
        .await
        .unwrap();
    assert_eq!((kept.epoch, kept.expires_at_ms), (1, t0 + 10 + ttl));
    let lapsed = store
        .acquire_lease(LeaseRequest::renewal(&kept, ttl, t0 + 10 + ttl + 1))
        .await
        .unwrap();
    assert_eq!((lapsed.holder.as_str(), lapsed.epoch), ("one", 2));
}

/// Runnable marks and claims: marks listed oldest first (marking again keeps the place, a cleared
/// mark set again goes last), by prefix, atomic with a failed commit; `claim_runnable` takes the
/// oldest mark whose lease is free, skipping every live one (the claimer's own too), leaves the mark,
/// takes an expired one over at the next epoch; a stale holder's fenced clear is `LEASE_LOST`; the
/// wake-up returns within its timeout. `store` must start empty.
///
/// # Panics
/// When the store breaks the contract or fails.
///
/// # Cancel safety
/// Not meant to be cancelled: a dropped run leaves test data behind.
#[allow(clippy::unwrap_used)] // a test helper: a failure is a panic with the store's error
pub async fn runnable(store: &dyn DurableStore) {
    let (ttl, t0) = (1_000, 5_000_000);
    assert!(store.runnable("run/").await.unwrap().is_empty());
    store
        .commit(
            Commit::new()
                .mark_runnable("run/b")
                .mark_runnable("run/a")
                .mark_runnable("run/c"),
        )
        .await
        .unwrap();
    store
        .commit(
            Commit::new()
                .mark_runnable("run/b")
                .mark_runnable("other/x"),
        )
        .await
        .unwrap();
    assert_eq!(
        store.runnable("run/").await.unwrap(),
        vec!["run/b", "run/a", "run/c"],
        "oldest mark first; marking again keeps the place"
    );
    assert_eq!(store.runnable("run/a").await.unwrap(), vec!["run/a"]);
    assert_eq!(store.runnable("").await.unwrap().len(), 4);
    store
        .commit(
            Commit::new()
                .clear_runnable("run/b")
                .clear_runnable("run/never"),
        )
        .await
        .unwrap();
    store
        .commit(Commit::new().mark_runnable("run/b"))
        .await
        .unwrap();
    assert_eq!(
        store.runnable("run/").await.unwrap(),
        vec!["run/a", "run/c", "run/b"],
        "a cleared mark set again goes last"
    );

    // A commit that fails applies none of its marks.
    store
        .commit(
            Commit::new()
                .fenced(Some(Fence::new("run/no-lease", 1)))
                .mark_runnable("run/z")
                .clear_runnable("run/a"),
        )
        .await
        .unwrap_err();
    assert_eq!(
        store.runnable("run/").await.unwrap(),
        vec!["run/a", "run/c", "run/b"]
    );

    // Claims take the oldest name whose lease is free and skip every live one, the claimer's own too.
    let claim = |holder: &'static str, now: u64| {
        store.claim_runnable(LeaseRequest::new("run/", holder, ttl, now))
    };
    let a = claim("one", t0).await.unwrap().unwrap();
    assert_eq!(
        (a.name.as_str(), a.holder.as_str(), a.epoch),
        ("run/a", "one", 1)
    );
    assert_eq!(store.lease("run/a").await.unwrap(), Some(a.clone()));
    let c = claim("two", t0).await.unwrap().unwrap();
    assert_eq!((c.name.as_str(), c.holder.as_str()), ("run/c", "two"));
    let b = claim("one", t0 + 1).await.unwrap().unwrap();
    assert_eq!(b.name, "run/b");
    assert_eq!(claim("three", t0 + 2).await.unwrap(), None);
    assert_eq!(
        store.runnable("run/").await.unwrap(),
        vec!["run/a", "run/c", "run/b"],
        "a claim leaves the mark"
    );

    // The holder clears its mark (fenced): the name is no longer claimable, even when its lease lapses.
    store
        .commit(
            Commit::new()
                .fenced(Some(c.fence()))
                .clear_runnable("run/c"),
        )
        .await
        .unwrap();
    // After `a` and `b` expire, another holder takes the oldest at the next epoch.
    let taken = claim("three", t0 + ttl + 10).await.unwrap().unwrap();
    assert_eq!(
        (taken.name.as_str(), taken.holder.as_str(), taken.epoch),
        ("run/a", "three", 2)
    );
    let next = claim("three", t0 + ttl + 10).await.unwrap().unwrap();
    assert_eq!(next.name, "run/b");
    assert_eq!(claim("four", t0 + ttl + 10).await.unwrap(), None);
    let stale = store
        .commit(
            Commit::new()
                .fenced(Some(a.fence()))
                .clear_runnable("run/a"),
        )
        .await
        .unwrap_err();
    assert_eq!(stale.code(), "LEASE_LOST");
    assert_eq!(
        store.runnable("run/").await.unwrap(),
        vec!["run/a", "run/b"]
    );

    // The wake-up returns within its timeout.
    store
        .wait_runnable(std::time::Duration::from_millis(1))
        .await
        .unwrap();
    store
        .commit(
            Commit::new()
                .clear_runnable("run/a")
                .clear_runnable("run/b")
                .clear_runnable("other/x"),
        )
        .await
        .unwrap();
    assert!(store.runnable("").await.unwrap().is_empty());
}
