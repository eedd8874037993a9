//! The embedded migrations.
//!
//! `sqlx::migrate!` needs sqlx's `macros` feature, which this crate leaves off; the migrations are
//! embedded with `include_str!` and run by sqlx's `Migrator` all the same (table `_sqlx_migrations`).
//! The migrator holds a PostgreSQL advisory lock (keyed by the database's name) while it looks and
//! applies, so many hosts may connect to a fresh database at once: one migrates, the others wait and
//! then find nothing to do.

use std::borrow::Cow;

use noetic_core::Result;
use sqlx::PgConnection;
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
    ]
}

/// Runs the pending migrations on `conn` (`location` is the redacted URL, for errors).
///
/// On an error the advisory lock may still be held by `conn`'s session: the caller closes `conn`.
pub(crate) async fn migrate(conn: &mut PgConnection, location: &str) -> Result<()> {
    let migrator = Migrator::with_migrations(migrations());
    // `run_direct` is what `run` calls (public, hidden from sqlx's docs): `run(&mut PgConnection)`
    // goes through `Acquire`, whose higher-ranked bound makes the calling future not `Send` for
    // every lifetime, so `connect` could not be spawned. Same steps: lock, check, apply, unlock.
    migrator
        .run_direct(None, conn, false)
        .await
        .map_err(|failure| match failure {
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
                "knows with different contents: the database's schema was altered",
            ),
            MigrateError::Dirty(version) => unknown(
                location,
                version,
                "found only partly applied: the database's schema was altered",
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

/// Checks, without writing, that every migration applied to the database is one this version knows;
/// `Ok(false)` when one this version needs has not been applied.
pub(crate) async fn check(conn: &mut PgConnection, location: &str) -> Result<bool> {
    let applied: Vec<(i64,)> =
        sqlx::query_as("SELECT version FROM _sqlx_migrations WHERE success ORDER BY version")
            .fetch_all(&mut *conn)
            .await
            .map_err(|source| error::map("connect", location, source))?;
    let known = migrations();
    for (version,) in &applied {
        if !known.iter().any(|migration| migration.version == *version) {
            return Err(unknown(
                location,
                *version,
                "does not know: it was written by a newer version",
            ));
        }
    }
    Ok(known.iter().all(|migration| {
        applied
            .iter()
            .any(|(version,)| *version == migration.version)
    }))
}

fn unknown(location: &str, version: i64, problem: &'static str) -> noetic_core::Error {
    SchemaUnknown {
        database: location.to_owned(),
        version,
        problem,
    }
    .into_error()
}
