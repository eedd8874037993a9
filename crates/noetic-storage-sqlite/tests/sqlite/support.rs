//! Helpers: a temp dir with a database path, and a raw sqlx connection to the same file.

#![allow(clippy::unwrap_used)] // test helpers: a failure is a panic

use std::path::{Path, PathBuf};

use sqlx::ConnectOptions;
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection};

/// A temp dir holding `noetic.db` (not yet created).
pub(crate) struct TempDb {
    _dir: tempfile::TempDir,
    pub(crate) path: PathBuf,
}

pub(crate) fn temp_db() -> TempDb {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("noetic.db");
    TempDb { _dir: dir, path }
}

/// A plain connection to the file, as another program (or a hand edit) would open it.
pub(crate) async fn raw(path: &Path) -> SqliteConnection {
    SqliteConnectOptions::new()
        .filename(path)
        .connect()
        .await
        .unwrap()
}

/// Runs `sql` on `conn`.
pub(crate) async fn exec(conn: &mut SqliteConnection, sql: &'static str) {
    sqlx::raw_sql(sql).execute(conn).await.unwrap();
}
