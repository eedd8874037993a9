//! The `postgres` module (feature `postgres`): every call gets a fresh, empty database of its own on
//! one server per test process, or skips loudly without PostgreSQL.

#![allow(clippy::unwrap_used)] // a test: a failure is a panic

use noetic_test_support::postgres::{pg_binaries, test_database};
use noetic_test_support::test_database_or_skip;
use sqlx::{Connection, PgConnection};

#[tokio::test]
async fn each_test_database_is_fresh_empty_and_on_the_same_server() {
    let first = test_database_or_skip!();
    let second = test_database().await.unwrap();
    assert_ne!(first.name(), second.name());
    assert!(first.url().ends_with(first.name()), "{}", first.url());
    let server = |url: &str| url.rsplit_once('/').unwrap().0.to_owned();
    assert_eq!(server(first.url()), server(second.url()), "one server");

    let mut one = PgConnection::connect(first.url()).await.unwrap();
    let mut two = PgConnection::connect(second.url()).await.unwrap();
    sqlx::raw_sql("CREATE TABLE t (x int); INSERT INTO t VALUES (1)")
        .execute(&mut one)
        .await
        .unwrap();
    let tables: i64 =
        sqlx::query_scalar("SELECT count(*) FROM pg_tables WHERE schemaname = 'public'")
            .fetch_one(&mut two)
            .await
            .unwrap();
    assert_eq!(tables, 0, "the second database is empty");
    let name: String = sqlx::query_scalar("SELECT current_database()")
        .fetch_one(&mut two)
        .await
        .unwrap();
    assert_eq!(name, second.name());
}

#[test]
fn the_binaries_found_hold_initdb_and_postgres() {
    match pg_binaries() {
        Some(dir) => {
            assert!(
                dir.join("initdb").is_file() && dir.join("postgres").is_file(),
                "{dir:?}"
            );
        }
        None => eprintln!("SKIPPED: no PostgreSQL binaries on this machine"),
    }
}

/// Whether the server lists a database named `name`, asked through `conn`.
async fn listed(conn: &mut PgConnection, name: &str) -> bool {
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_database WHERE datname = $1")
        .bind(name)
        .fetch_one(conn)
        .await
        .unwrap();
    count == 1
}

#[tokio::test]
async fn a_test_database_is_dropped_with_its_guard_ending_connections_left_open() {
    let db = test_database_or_skip!();
    let witness = test_database().await.unwrap();
    let mut check = PgConnection::connect(witness.url()).await.unwrap();
    let name = db.name().to_owned();
    // A connection still open on it, as a pool a test forgot would be.
    let mut left_open = PgConnection::connect(db.url()).await.unwrap();
    assert!(listed(&mut check, &name).await);

    drop(db);
    assert!(
        !listed(&mut check, &name).await,
        "{name} is gone from pg_database"
    );
    assert!(
        sqlx::query("SELECT 1")
            .execute(&mut left_open)
            .await
            .is_err(),
        "the connection left open was ended"
    );
}

#[tokio::test]
async fn a_test_database_is_dropped_when_its_test_panics() {
    let db = test_database_or_skip!();
    let witness = test_database().await.unwrap();
    let mut check = PgConnection::connect(witness.url()).await.unwrap();
    let name = db.name().to_owned();
    let failed = tokio::spawn(async move {
        let _db = db;
        panic!("the test failed");
    })
    .await
    .unwrap_err();
    assert!(failed.is_panic());
    assert!(
        !listed(&mut check, &name).await,
        "{name} is gone from pg_database"
    );
}
