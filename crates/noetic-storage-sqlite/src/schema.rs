//! The embedded migrations and the check of a file's schema version.
//!
//! `sqlx::migrate!` needs sqlx's `macros` feature, which this crate leaves off; the migrations are
//! embedded with `include_str!` and run by sqlx's `Migrator` all the same (table `_sqlx_migrations`).

use std::borrow::Cow;

use noetic_core::Result;
use sqlx::SqliteConnection;
use sqlx::migrate::{MigrateError, Migration, MigrationType, Migrator};

use crate::error::{self, SchemaUnknown};

/// The migrations this version knows, in order.
fn migrations() -> Vec<Migration> {
    vec![
        Migration::new(
            1,
            Cow::Borrowed("tables"),
            MigrationType::Simple,
            sqlx::SqlSafeStr::into_sql_str(include_str!("../migrations/0001_tables.sql")),
            false,
        ),
        Migration::new(
            2,
            Cow::Borrowed("runnable"),
            MigrationType::Simple,
            sqlx::SqlSafeStr::into_sql_str(include_str!("../migrations/0002_runnable.sql")),
            false,
        ),
        Migration::new(
            3,
            Cow::Borrowed("rowid values"),
            MigrationType::Simple,
            sqlx::SqlSafeStr::into_sql_str(include_str!("../migrations/0003_rowid_values.sql")),
            false,
        ),
    ]
}

/// Runs the pending migrations on `writer`.
pub(crate) async fn migrate(writer: &mut SqliteConnection, location: &str) -> Result<()> {
    let migrator = Migrator::with_migrations(migrations());
    let mut outcome = migrator.run_direct(None, &mut *writer, false).await;
    if let Err(MigrateError::Execute(_) | MigrateError::ExecuteMigration(..)) = &outcome {
        // Another process may have migrated the file between our look and our write: look again.
        outcome = migrator.run_direct(None, &mut *writer, false).await;
    }
    outcome.map_err(|failure| match failure {
        MigrateError::VersionMissing(version) | MigrateError::VersionNotPresent(version) => {
            unknown(
                location,
                version,
                "does not know: it was written by a newer version",
            )
        }
        MigrateError::VersionMismatch(version) => unknown(
            location,
            version,
            "knows with different contents: the file's schema was altered",
        ),
        MigrateError::Dirty(version) => unknown(
            location,
            version,
            "found only partly applied: the file's schema was altered",
        ),
        MigrateError::Execute(source) | MigrateError::ExecuteMigration(source, _) => {
            error::map("migrate", location, source)
        }
        other => noetic_core::Error::Storage {
            operation: "migrate",
            key: location.to_owned(),
            source: Box::new(other),
        },
    })
}

/// Checks, without writing, that every migration applied to the file is one this version knows.
pub(crate) async fn check(conn: &mut SqliteConnection, location: &str) -> Result<()> {
    let applied: Vec<(i64,)> =
        sqlx::query_as("SELECT version FROM _sqlx_migrations WHERE success ORDER BY version")
            .fetch_all(conn)
            .await
            .map_err(|source| error::map("open", location, source))?;
    let known = migrations();
    for (version,) in applied {
        if !known.iter().any(|migration| migration.version == version) {
            return Err(unknown(
                location,
                version,
                "does not know: it was written by a newer version",
            ));
        }
    }
    Ok(())
}

fn unknown(location: &str, version: i64, problem: &'static str) -> noetic_core::Error {
    SchemaUnknown {
        path: location.to_owned(),
        version,
        problem,
    }
    .into_error()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // a test: a failure is a panic

    use noetic_core::StorageAdapter;
    use noetic_core::adapter::durable::DurableStore;
    use sqlx::ConnectOptions;
    use sqlx::sqlite::SqliteConnectOptions;

    use super::*;
    use crate::SqliteStorage;

    /// A file written at schema version 2 (values in `WITHOUT ROWID` tables) opens with its data
    /// intact, in rowid tables.
    #[tokio::test]
    async fn a_version_2_file_is_migrated_with_its_data() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v2.db");
        let mut conn = SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(true)
            .connect()
            .await
            .unwrap();
        let v2 = Migrator::with_migrations(migrations().into_iter().take(2).collect());
        v2.run_direct(None, &mut conn, false).await.unwrap();
        let big = "x".repeat(3000);
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "INSERT INTO kv VALUES ('k', x'01'); \
             INSERT INTO records VALUES ('r', CAST('{big}' AS BLOB)); \
             INSERT INTO logs VALUES ('l', 0, x'02'), ('l', 1, CAST('{big}' AS BLOB)); \
             INSERT INTO log_heads VALUES ('l', 2);"
        )))
        .execute(&mut conn)
        .await
        .unwrap();
        drop(conn);

        let store = SqliteStorage::open(&path).await.unwrap();
        assert_eq!(store.get("k").await.unwrap(), Some(vec![1]));
        assert_eq!(
            store.record("r").await.unwrap(),
            Some(big.clone().into_bytes())
        );
        let log = store.read_log("l", 0).await.unwrap();
        assert_eq!(log.len(), 2);
        assert_eq!(log[1].value, big.into_bytes());
        assert_eq!(store.next_seq("l").await.unwrap(), 2);
        let mut writer = store.writer("test", "schema").await.unwrap();
        let without_rowid: Vec<(String,)> = sqlx::query_as(
            "SELECT name FROM sqlite_schema WHERE type = 'table' AND sql LIKE '%WITHOUT ROWID%' \
             ORDER BY name",
        )
        .fetch_all(writer.conn().await)
        .await
        .unwrap();
        let names: Vec<&str> = without_rowid.iter().map(|(name,)| name.as_str()).collect();
        assert_eq!(names, ["leases", "log_heads", "runnable"]);
    }
}
