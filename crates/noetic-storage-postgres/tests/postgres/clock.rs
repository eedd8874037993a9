//! Leases on the database's clock (`LeaseClock::Database`, the default): the caller's clock does not
//! decide, expiry follows the database's clock, an expired lease fences its holder out even before
//! anyone takes it over, and returned leases are on the caller's clock.

#![allow(clippy::unwrap_used)] // a test: a failure is a panic

use noetic_core::adapter::durable::{Commit, DurableStore, LeaseRequest};
use noetic_storage_postgres::LeaseClock;
use noetic_test_support::test_database_or_skip;

use crate::support::{db_now, store, until_db_clock_passes};

const FAR_FUTURE: u64 = u64::MAX / 4;

#[tokio::test]
async fn the_callers_clock_far_in_the_past_or_future_does_not_decide_a_lease() {
    let db = test_database_or_skip!();
    let store = store(&db, LeaseClock::Database).await;
    let ttl = 60_000;

    let before = db_now(&store).await;
    let lease = store
        .acquire_lease(LeaseRequest::new("thread/t", "a", ttl, 0))
        .await
        .unwrap();
    let after = db_now(&store).await;
    assert_eq!(lease.epoch, 1);
    assert_eq!(
        lease.expires_at_ms, ttl,
        "returned on the caller's clock: its now (0) plus the TTL"
    );
    let stored = store.lease("thread/t").await.unwrap().unwrap();
    assert!(
        (before + ttl..=after + ttl).contains(&stored.expires_at_ms),
        "stored on the database's clock: {before} + {ttl} <= {} <= {after} + {ttl}",
        stored.expires_at_ms
    );

    // Another holder whose clock is far in the future still finds it live, told on its own clock.
    let held = store
        .acquire_lease(LeaseRequest::new("thread/t", "b", ttl, FAR_FUTURE))
        .await
        .unwrap_err();
    assert_eq!(held.code(), "LEASE_HELD", "{held}");
    let noetic_core::Error::LeaseHeld {
        holder,
        expires_at_ms,
        ..
    } = &held
    else {
        unreachable!()
    };
    assert_eq!(holder, "a");
    assert!(
        (FAR_FUTURE + ttl - 10_000..=FAR_FUTURE + ttl).contains(expires_at_ms),
        "the expiry on the asking holder's clock: {expires_at_ms}"
    );

    // The holder renews from a clock far in the future: the same epoch, still a TTL from now.
    let renewed = store
        .acquire_lease(LeaseRequest::new("thread/t", "a", ttl, FAR_FUTURE))
        .await
        .unwrap();
    assert_eq!(renewed.epoch, 1);
    assert_eq!(renewed.expires_at_ms, FAR_FUTURE + ttl);
    let stored = store.lease("thread/t").await.unwrap().unwrap();
    assert!(
        stored.expires_at_ms < FAR_FUTURE / 2,
        "still on the database's clock"
    );
}

#[tokio::test]
async fn a_short_lease_expires_on_the_database_clock_and_another_holder_takes_it_over() {
    let db = test_database_or_skip!();
    let store = store(&db, LeaseClock::Database).await;
    let first = store
        .acquire_lease(LeaseRequest::new("execution/e", "a", 300, 0))
        .await
        .unwrap();
    let stored = store.lease("execution/e").await.unwrap().unwrap();
    let early = store
        .acquire_lease(LeaseRequest::new("execution/e", "b", 300, FAR_FUTURE))
        .await
        .unwrap_err();
    assert_eq!(early.code(), "LEASE_HELD");

    until_db_clock_passes(&store, stored.expires_at_ms).await;
    // The caller's clock (0, long before the grant) does not keep it alive either.
    let taken = store
        .acquire_lease(LeaseRequest::new("execution/e", "b", 300, 0))
        .await
        .unwrap();
    assert_eq!((taken.holder.as_str(), taken.epoch), ("b", first.epoch + 1));
    let lost = store
        .commit(
            Commit::new()
                .fenced(Some(first.fence()))
                .put("execution/e/state", "a's"),
        )
        .await
        .unwrap_err();
    assert_eq!(lost.code(), "LEASE_LOST");
}

#[tokio::test]
async fn a_fenced_commit_under_a_lease_expired_on_the_database_clock_is_lost_and_applies_nothing() {
    let db = test_database_or_skip!();
    let store = store(&db, LeaseClock::Database).await;
    let lease = store
        .acquire_lease(LeaseRequest::new("execution/e", "a", 300, 0))
        .await
        .unwrap();
    store
        .commit(
            Commit::new()
                .fenced(Some(lease.fence()))
                .put("execution/e/state", "1")
                .append("execution/e/items", 0, vec![b"i0".to_vec()]),
        )
        .await
        .expect("a live lease writes");

    let stored = store.lease("execution/e").await.unwrap().unwrap();
    until_db_clock_passes(&store, stored.expires_at_ms).await;
    let lost = store
        .commit(
            Commit::new()
                .fenced(Some(lease.fence()))
                .put("execution/e/state", "2")
                .append("execution/e/items", 1, vec![b"i1".to_vec()]),
        )
        .await
        .unwrap_err();
    assert_eq!(lost.code(), "LEASE_LOST", "{lost}");
    assert_eq!(
        store.record("execution/e/state").await.unwrap(),
        Some(b"1".to_vec())
    );
    assert_eq!(store.next_seq("execution/e/items").await.unwrap(), 1);
    let unchanged = store.lease("execution/e").await.unwrap().unwrap();
    assert_eq!(
        (unchanged.holder.as_str(), unchanged.epoch),
        ("a", 1),
        "nobody took it over: the expiry alone fenced the write"
    );

    // On the caller's clock only the epoch fences: the same write applies.
    let caller = crate::support::store(&db, LeaseClock::Caller).await;
    caller
        .commit(
            Commit::new()
                .fenced(Some(lease.fence()))
                .put("execution/e/state", "2"),
        )
        .await
        .unwrap();

    // Taking the lease again (its own, expired) gives a new epoch, which writes.
    let again = store
        .acquire_lease(LeaseRequest::new("execution/e", "a", 60_000, 0))
        .await
        .unwrap();
    assert_eq!(again.epoch, 2);
    store
        .commit(Commit::new().fenced(Some(again.fence())).append(
            "execution/e/items",
            1,
            vec![b"i1".to_vec()],
        ))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_released_lease_is_expired_on_the_database_clock_and_fences_its_holder() {
    let db = test_database_or_skip!();
    let store = store(&db, LeaseClock::Database).await;
    let lease = store
        .acquire_lease(LeaseRequest::new("thread/t", "a", 60_000, 5))
        .await
        .unwrap();
    store.release_lease(&lease).await.unwrap();
    let lost = store
        .commit(Commit::new().fenced(Some(lease.fence())).put("k", "v"))
        .await
        .unwrap_err();
    assert_eq!(lost.code(), "LEASE_LOST");
    let next = store
        .acquire_lease(LeaseRequest::new("thread/t", "b", 60_000, 5))
        .await
        .unwrap();
    assert_eq!((next.epoch, next.expires_at_ms), (2, 60_005));
}
