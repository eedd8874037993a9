//! Races between two `PostgresStorage` values (two pools, as two hosts would have) on one database:
//! appends at one sequence number, first grants of one lease, a fenced writer against a takeover, and a
//! clear of a runnable mark against a commit marking it again.

#![allow(clippy::unwrap_used)] // a test: a failure is a panic

use std::sync::Arc;

use noetic_core::adapter::durable::{Commit, DurableStore, LeaseRequest};
use noetic_storage_postgres::{LeaseClock, PostgresStorage};
use noetic_test_support::test_database_or_skip;
use tokio::sync::{Barrier, mpsc};

use crate::support::store;

const WRITERS: usize = 8;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writers_racing_to_append_at_one_sequence_number_apply_exactly_one_each_time() {
    let db = test_database_or_skip!();
    let hosts = [
        store(&db, LeaseClock::Database).await,
        store(&db, LeaseClock::Database).await,
    ];
    let rounds = 15u64;
    for seq in 0..rounds {
        // Every writer commits at `seq` at once, half of them through each pool; even rounds
        // append to two logs at once, in opposite orders, as well.
        let barrier = Arc::new(Barrier::new(WRITERS));
        let tasks: Vec<_> = (0..WRITERS)
            .map(|writer| {
                let (host, barrier) = (hosts[writer % 2].clone(), barrier.clone());
                tokio::spawn(async move {
                    let value = format!("w{writer}").into_bytes();
                    let mut commit = Commit::new().append("log/a", seq, vec![value.clone()]);
                    if seq % 2 == 0 {
                        commit = if writer % 2 == 0 {
                            Commit::new()
                                .append("log/b", seq / 2, vec![value.clone()])
                                .append("log/a", seq, vec![value])
                        } else {
                            commit.append("log/b", seq / 2, vec![value])
                        };
                    }
                    barrier.wait().await;
                    host.commit(commit).await
                })
            })
            .collect();
        let mut wins = 0;
        for task in tasks {
            match task.await.unwrap() {
                Ok(()) => wins += 1,
                Err(error) => {
                    assert_eq!(error.code(), "STORAGE_ERROR", "{error}");
                    let text = error.to_string();
                    assert!(
                        text.contains("next sequence is") && text.contains("log/"),
                        "the sequence conflict, naming the log: {text}"
                    );
                }
            }
        }
        assert_eq!(wins, 1, "round {seq}: exactly one writer appends");
    }
    let entries = hosts[1].read_log("log/a", 0).await.unwrap();
    let seqs: Vec<u64> = entries.iter().map(|entry| entry.seq).collect();
    assert_eq!(
        seqs,
        (0..rounds).collect::<Vec<_>>(),
        "no gap, no duplicate"
    );
    assert_eq!(hosts[0].next_seq("log/a").await.unwrap(), rounds);
    assert_eq!(
        hosts[0].next_seq("log/b").await.unwrap(),
        rounds.div_ceil(2)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hosts_racing_for_a_fresh_lease_get_exactly_one_grant() {
    let db = test_database_or_skip!();
    let hosts = [
        store(&db, LeaseClock::Database).await,
        store(&db, LeaseClock::Database).await,
    ];
    for round in 0..15 {
        let name = format!("thread/{round}");
        let barrier = Arc::new(Barrier::new(WRITERS));
        let tasks: Vec<_> = (0..WRITERS)
            .map(|holder| {
                let (host, barrier, name) =
                    (hosts[holder % 2].clone(), barrier.clone(), name.clone());
                tokio::spawn(async move {
                    let holder = format!("host-{holder}");
                    barrier.wait().await;
                    host.acquire_lease(LeaseRequest::new(&name, &holder, 60_000, 0))
                        .await
                })
            })
            .collect();
        let mut granted = Vec::new();
        let mut refused = Vec::new();
        for task in tasks {
            match task.await.unwrap() {
                Ok(lease) => granted.push(lease),
                Err(error) => refused.push(error),
            }
        }
        assert_eq!(granted.len(), 1, "{name}: one grant, got {granted:?}");
        let winner = &granted[0];
        assert_eq!(winner.epoch, 1);
        for error in refused {
            assert_eq!(error.code(), "LEASE_HELD", "{error}");
            assert!(
                error.to_string().contains(&format!("`{}`", winner.holder)),
                "names the winner: {error}"
            );
        }
        assert_eq!(
            hosts[0].lease(&name).await.unwrap().unwrap().holder,
            winner.holder
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fenced_writer_racing_a_takeover_never_applies_after_it() {
    let db = test_database_or_skip!();
    // The caller's clock, so the takeover is possible at once (the lease is expired by the clock the
    // taker passes) while the old holder keeps writing.
    let old: PostgresStorage = store(&db, LeaseClock::Caller).await;
    let new: PostgresStorage = store(&db, LeaseClock::Caller).await;
    let t0 = 1_000_000;
    for round in 0..8 {
        let name = format!("execution/{round}");
        let log = format!("{name}/items");
        let lease = old
            .acquire_lease(LeaseRequest::new(&name, "old", 1_000, t0))
            .await
            .unwrap();
        let (progress_tx, mut progress) = mpsc::unbounded_channel();
        let writer = tokio::spawn({
            let (old, log) = (old.clone(), log.clone());
            async move {
                let mut next = 0;
                loop {
                    let commit = Commit::new().fenced(Some(lease.fence())).append(
                        &log,
                        next,
                        vec![format!("old {next}").into_bytes()],
                    );
                    match old.commit(commit).await {
                        Ok(()) => {
                            next += 1;
                            let _ = progress_tx.send(next);
                        }
                        Err(error) => return (next, error),
                    }
                }
            }
        });
        // Let the old holder write a few entries, then take over while it writes.
        while progress.recv().await.unwrap() < 3 {}
        let taken = new
            .acquire_lease(LeaseRequest::new(&name, "new", 1_000, t0 + 5_000))
            .await
            .unwrap();
        assert_eq!(taken.epoch, 2);
        let at_takeover = new.next_seq(&log).await.unwrap();
        let (written, error) = writer.await.unwrap();
        assert_eq!(error.code(), "LEASE_LOST", "{error}");
        assert_eq!(
            written, at_takeover,
            "{name}: every write the old holder made was in before the takeover"
        );
        assert_eq!(new.next_seq(&log).await.unwrap(), at_takeover);
        new.commit(Commit::new().fenced(Some(taken.fence())).append(
            &log,
            at_takeover,
            vec![b"new".to_vec()],
        ))
        .await
        .unwrap();
    }
}

/// Polls `pg_locks` on `db` until `count` lock requests of `locktype` wait, or `done` says to stop
/// looking (bounded: panics after 10 s).
async fn until_waiting(
    store: &PostgresStorage,
    locktype: &str,
    count: i64,
    done: impl Fn() -> bool,
) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let waiting: i64 =
            sqlx::query_scalar("SELECT count(*) FROM pg_locks WHERE NOT granted AND locktype = $1")
                .bind(locktype)
                .fetch_one(store.pool())
                .await
                .unwrap();
        if waiting >= count || done() {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no {locktype} lock wait appeared within 10 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

/// The shared-thread let-go (clear the mark, then read the log) racing a host that accepts a message
/// (append and mark in one commit) while the mark is still set: the mark the acceptor writes must not
/// be a no-op the clear can delete under it. Whatever the order, once the clear has returned, either
/// the read after it sees the message or the mark is still set; else the message waits with no host
/// told to run it (the fleet test's lost wake-up). The acceptor's commit is held, between its mark
/// and its end, by a test trigger waiting on an advisory lock the test holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_clear_racing_a_mark_of_the_same_name_never_loses_the_mark_and_the_message() {
    let db = test_database_or_skip!();
    let acceptor = store(&db, LeaseClock::Database).await;
    let worker = store(&db, LeaseClock::Database).await;
    let holder = store(&db, LeaseClock::Database).await;
    crate::support::exec(
        &holder,
        "CREATE FUNCTION hold_marks() RETURNS trigger LANGUAGE plpgsql AS \
         $$ BEGIN PERFORM pg_advisory_xact_lock(4242); RETURN NULL; END $$; \
         CREATE TRIGGER hold_marks AFTER INSERT ON runnable \
         FOR EACH STATEMENT EXECUTE FUNCTION hold_marks();",
    )
    .await;
    // The thread is marked (its earlier message), and held by the worker.
    let mut gate = holder.pool().acquire().await.unwrap();
    sqlx::query("SELECT pg_advisory_lock(4242)")
        .execute(&mut *gate)
        .await
        .unwrap();
    let first = tokio::spawn({
        let acceptor = acceptor.clone();
        async move {
            acceptor
                .commit(
                    Commit::new()
                        .append("msgs/T", 0, vec![b"m0".to_vec()])
                        .mark_runnable("T"),
                )
                .await
        }
    });
    until_waiting(&holder, "advisory", 1, || false).await;
    sqlx::query("SELECT pg_advisory_unlock(4242)")
        .execute(&mut *gate)
        .await
        .unwrap();
    first.await.unwrap().unwrap();
    assert_eq!(worker.read_log("msgs/T", 0).await.unwrap().len(), 1);

    // A second message is accepted while the mark is set; its commit stops after its mark.
    sqlx::query("SELECT pg_advisory_lock(4242)")
        .execute(&mut *gate)
        .await
        .unwrap();
    let second = tokio::spawn({
        let acceptor = acceptor.clone();
        async move {
            acceptor
                .commit(
                    Commit::new()
                        .append("msgs/T", 1, vec![b"m1".to_vec()])
                        .mark_runnable("T"),
                )
                .await
        }
    });
    until_waiting(&holder, "advisory", 1, || false).await;
    // The worker lets the thread go: clears the mark, then reads what came since.
    let let_go = tokio::spawn({
        let worker = worker.clone();
        async move {
            worker
                .commit(Commit::new().clear_runnable("T"))
                .await
                .unwrap();
            worker.read_log("msgs/T", 1).await.unwrap()
        }
    });
    // Either the clear finishes (it did not wait for the acceptor) or it waits on the acceptor's
    // row lock; then the acceptor may end.
    until_waiting(&holder, "transactionid", 1, || let_go.is_finished()).await;
    sqlx::query("SELECT pg_advisory_unlock(4242)")
        .execute(&mut *gate)
        .await
        .unwrap();
    second.await.unwrap().unwrap();
    let seen = let_go.await.unwrap();
    let marked = worker.runnable("").await.unwrap();
    assert!(
        seen.len() == 1 || marked == ["T"],
        "message m1 was accepted, but the worker's look after its clear saw {} entries and the marks \
         are {marked:?}: no host would run it",
        seen.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_announced_by_one_host_wakes_the_waiters_for_it_on_another() {
    let db = test_database_or_skip!();
    let writer = store(&db, LeaseClock::Database).await;
    let waiter = store(&db, LeaseClock::Database).await;
    let name = "thread/t/events";
    let announce = |seq: u64| {
        Commit::new()
            .append(name, seq, vec![b"event".to_vec()])
            .announce(name)
    };
    // The waiter's LISTEN connection starts with its first wait: until it listens, announcements
    // go unheard (a waiter then polls), so the first ones may be missed.
    let mut seq = 0;
    let mut heard = false;
    for _ in 0..50 {
        let wait = waiter.wait_announced(name, std::time::Duration::from_millis(200));
        writer.commit(announce(seq)).await.unwrap();
        seq += 1;
        if wait.await.unwrap() {
            heard = true;
            break;
        }
    }
    assert!(heard, "no announcement heard in 50 tries");
    // Registered when called: an announcement made before the wait is awaited still wakes it.
    let wait = waiter.wait_announced(name, std::time::Duration::from_secs(30));
    let started = std::time::Instant::now();
    writer.commit(announce(seq)).await.unwrap();
    assert!(wait.await.unwrap());
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    // Another name does not wake it: the wait ends at its timeout.
    let other = waiter.wait_announced("thread/u/events", std::time::Duration::from_millis(300));
    writer.commit(announce(seq + 1)).await.unwrap();
    assert!(!other.await.unwrap());
}
