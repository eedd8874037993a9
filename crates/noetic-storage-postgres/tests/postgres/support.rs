//! Helpers: a store on a test database, raw SQL through its pool, the database's clock.

#![allow(clippy::unwrap_used)] // test helpers: a failure is a panic

use std::time::{Duration, Instant};

use noetic_storage_postgres::{LeaseClock, PostgresOptions, PostgresStorage};
use noetic_test_support::postgres::TestDatabase;
use sqlx::AssertSqlSafe;

/// A store on `db` deciding leases on `clock`.
pub(crate) async fn store(db: &TestDatabase, clock: LeaseClock) -> PostgresStorage {
    store_at(db.url(), clock).await
}

/// A store (a pool of its own) on the database at `url`, deciding leases on `clock`.
pub(crate) async fn store_at(url: &str, clock: LeaseClock) -> PostgresStorage {
    PostgresStorage::connect_with(url, PostgresOptions::default().lease_clock(clock))
        .await
        .unwrap()
}

/// Runs `sql` (one or more statements) on `store`'s database, as a hand edit would.
pub(crate) async fn exec(store: &PostgresStorage, sql: impl Into<String>) {
    sqlx::raw_sql(AssertSqlSafe(sql.into()))
        .execute(store.pool())
        .await
        .unwrap();
}

/// The database's clock, in milliseconds since the Unix epoch.
pub(crate) async fn db_now(store: &PostgresStorage) -> u64 {
    let now: i64 =
        sqlx::query_scalar("SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint")
            .fetch_one(store.pool())
            .await
            .unwrap();
    u64::try_from(now).unwrap()
}

/// Polls the database's clock until it is past `at` (bounded: panics after 10 s).
pub(crate) async fn until_db_clock_passes(store: &PostgresStorage, at: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while db_now(store).await <= at {
        assert!(
            Instant::now() < deadline,
            "the database clock never passed {at}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
