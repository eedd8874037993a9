//! SQLite storage for noetic: one file holds a harness's key-value state and its durable records,
//! append-only logs and fenced leases.
//!
//! [`SqliteStorage`] implements both of noetic-core's storage traits,
//! [`StorageAdapter`](noetic_core::adapter::StorageAdapter) (layer state, in table `kv`) and
//! [`DurableStore`](noetic_core::adapter::durable::DurableStore) (checkpoints, ledgers, leases, in tables
//! `records`, `logs`, `log_heads` and `leases`), so one value makes a harness durable:
//!
//! ```no_run
//! # async fn demo() -> noetic_core::Result<()> {
//! use noetic_core::AgentHarness;
//! use noetic_storage_sqlite::SqliteStorage;
//!
//! let harness = AgentHarness::builder("assistant")
//!     .durable(SqliteStorage::open("noetic.db").await?)
//!     .build()?;
//! # drop(harness);
//! # Ok(())
//! # }
//! ```
//!
//! The file is opened in WAL mode with `synchronous=NORMAL` and foreign keys on; its tables are created
//! by embedded migrations on open. Writes go through ONE writer connection, each as one
//! `BEGIN IMMEDIATE` transaction; reads use a few held reader connections, which WAL lets run
//! beside the writer. Every decision that must hold between writers (an append's exact sequence number,
//! a commit's lease fence, granting a lease) is made inside the writing transaction, so it holds across
//! processes sharing the file as well as between two `SqliteStorage` values in one process.
//!
//! Errors are `noetic_core::Error`s naming the operation and the key, log or lease: `STORAGE_BUSY`
//! when the file stays locked past [`SqliteOptions::busy_timeout`], `STORAGE_READ_ONLY` when it cannot
//! be written, `STORAGE_ERROR` otherwise (including a corrupt row), and this crate's
//! `SQLITE_SCHEMA_UNKNOWN` (see [`error`]) for a file migrated by a newer version.

mod durable;
pub mod error;
mod kv;
mod schema;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use noetic_core::{Error, Result};
use sqlx::ConnectOptions;
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqliteSynchronous};

/// How [`SqliteStorage::open_with`] opens a file.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SqliteOptions {
    /// How long a statement waits for another connection's lock before failing with `STORAGE_BUSY`.
    pub busy_timeout: Duration,
    /// Opens the file read-only (`SQLITE_OPEN_READONLY`): reads work, every write fails with
    /// `STORAGE_READ_ONLY`, and no migration runs (the file's schema is still checked).
    pub read_only: bool,
    /// The number of reader connections (at least 1).
    pub readers: u32,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            busy_timeout: Duration::from_secs(5),
            read_only: false,
            readers: 4,
        }
    }
}

impl SqliteOptions {
    /// Sets [`SqliteOptions::busy_timeout`].
    pub fn busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = timeout;
        self
    }

    /// Sets [`SqliteOptions::read_only`].
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// Sets [`SqliteOptions::readers`].
    pub fn readers(mut self, readers: u32) -> Self {
        self.readers = readers.max(1);
        self
    }
}

/// A SQLite database: a [`StorageAdapter`](noetic_core::adapter::StorageAdapter) and a
/// [`DurableStore`](noetic_core::adapter::durable::DurableStore). Cloning is cheap and shares the
/// connections.
#[derive(Clone)]
pub struct SqliteStorage {
    inner: Arc<Inner>,
}

struct Inner {
    /// The one connection that writes, held (not pooled: a pool's release pings the connection and
    /// spawns a task, a thread hand-off each, on every write).
    writer: tokio::sync::Mutex<Writer>,
    /// Connections that only read, held like the writer (the first free one serves a read); none for
    /// an in-memory database, whose reads take the writer.
    readers: Vec<tokio::sync::Mutex<SqliteConnection>>,
    /// The reader a read waits for when none is free (round robin).
    next_reader: AtomicU64,
    /// The file (or in-memory name), for errors.
    location: String,
}

/// How long a write waits for the writer connection (other writes of this store ahead of it)
/// before failing with `STORAGE_BUSY`: as long as a pool of one connection waited.
const WRITER_WAIT: Duration = Duration::from_secs(60);

/// The writer connection, and whether a one-call commit script may have left its transaction open.
pub(crate) struct Writer {
    conn: SqliteConnection,
    /// Set while a script that opens and commits its own transaction runs; still set when its future
    /// was dropped before it ended, so the next user rolls that transaction back first.
    script_open: bool,
}

impl Writer {
    /// The connection, any transaction a dropped script left open rolled back first.
    pub(crate) async fn conn(&mut self) -> &mut SqliteConnection {
        if self.script_open {
            // "no transaction is active" when the script had ended after all: nothing to undo.
            let _ = sqlx::raw_sql("ROLLBACK").execute(&mut self.conn).await;
            self.script_open = false;
        }
        &mut self.conn
    }

    /// Runs `sql`, a script that opens its own transaction and commits it as its last statement, in
    /// one call to the connection's worker thread. When a statement fails, the transaction is rolled
    /// back before this returns the error; when this future is dropped first, by the next user of
    /// the writer (see [`Writer::conn`]).
    pub(crate) async fn run_script(&mut self, sql: String) -> std::result::Result<(), sqlx::Error> {
        self.conn().await;
        self.script_open = true;
        self.end_script(sql).await
    }

    /// Runs `sql`, a script that opens a transaction and reads, and returns its rows with the
    /// transaction still open: the caller ends it with [`Writer::end_script`] (its writes and
    /// `COMMIT`, or `ROLLBACK`). On an error the transaction is rolled back first.
    pub(crate) async fn open_script(
        &mut self,
        sql: String,
    ) -> std::result::Result<Vec<sqlx::sqlite::SqliteRow>, sqlx::Error> {
        self.conn().await;
        self.script_open = true;
        let rows = sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
            .fetch_all(&mut self.conn)
            .await;
        if rows.is_err() {
            // When the script failed at its BEGIN, "no transaction is active": nothing to undo.
            let _ = sqlx::raw_sql("ROLLBACK").execute(&mut self.conn).await;
            self.script_open = false;
        }
        rows
    }

    /// Runs `sql`, the end of a transaction [`Writer::open_script`] left open (or a whole script, from
    /// [`Writer::run_script`]), rolling it back when a statement fails.
    pub(crate) async fn end_script(&mut self, sql: String) -> std::result::Result<(), sqlx::Error> {
        let outcome = sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
            .execute(&mut self.conn)
            .await;
        if outcome.is_err() {
            // When the script failed at its BEGIN, "no transaction is active": nothing to undo.
            let _ = sqlx::raw_sql("ROLLBACK").execute(&mut self.conn).await;
        }
        self.script_open = false;
        outcome.map(|_| ())
    }
}

/// A connection to read with: one of the readers, or the writer of an in-memory database.
pub(crate) enum Reader<'a> {
    Held(tokio::sync::MutexGuard<'a, SqliteConnection>),
    Writer(tokio::sync::MutexGuard<'a, Writer>),
}

impl Reader<'_> {
    pub(crate) async fn conn(&mut self) -> &mut SqliteConnection {
        match self {
            Reader::Held(conn) => conn,
            Reader::Writer(writer) => writer.conn().await,
        }
    }
}

impl std::fmt::Debug for SqliteStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStorage")
            .field("location", &self.inner.location)
            .finish_non_exhaustive()
    }
}

static MEMORY_SEQ: AtomicU64 = AtomicU64::new(0);

impl SqliteStorage {
    /// Opens (creating it if missing) the database file at `path` with default [`SqliteOptions`].
    ///
    /// # Errors
    /// `STORAGE_READ_ONLY` when the file or its directory cannot be written, `SQLITE_SCHEMA_UNKNOWN`
    /// when the file was migrated by a newer version, `STORAGE_ERROR` otherwise.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped open closes its connections (a migration in progress is rolled back).
    pub async fn open(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_with(path, SqliteOptions::default()).await
    }

    /// Opens the database file at `path` with `options` (creating it unless read-only).
    ///
    /// # Errors
    /// As [`SqliteStorage::open`]; a read-only open of a missing file is `STORAGE_ERROR`.
    ///
    /// # Cancel safety
    /// As [`SqliteStorage::open`].
    pub async fn open_with(path: impl AsRef<Path>, options: SqliteOptions) -> Result<Self> {
        let path = path.as_ref();
        let location = path.display().to_string();
        if let Some(parent) = path
            .parent()
            .filter(|parent| !parent.as_os_str().is_empty())
            && !parent.is_dir()
        {
            return Err(Error::Storage {
                operation: "open",
                key: location,
                source: "the directory does not exist".into(),
            });
        }
        if options.read_only && !path.is_file() {
            return Err(Error::Storage {
                operation: "open",
                key: location,
                source: "no such database file (a read-only open does not create one)".into(),
            });
        }
        let mut connect = SqliteConnectOptions::new()
            .filename(path)
            .busy_timeout(options.busy_timeout)
            .foreign_keys(true)
            .synchronous(SqliteSynchronous::Normal)
            .read_only(options.read_only)
            .create_if_missing(!options.read_only);
        if !options.read_only {
            connect = connect.journal_mode(SqliteJournalMode::Wal);
        }
        let mut writer = connect
            .connect()
            .await
            .map_err(|error| error::map("open", &location, error))?;
        if options.read_only {
            schema::check(&mut writer, &location).await?;
        } else {
            schema::migrate(&mut writer, &location).await?;
            durable::create_guard(&mut writer, &location).await?;
        }
        let mut readers = Vec::new();
        for _ in 0..options.readers.max(1) {
            let reader = connect
                .connect()
                .await
                .map_err(|error| error::map("open", &location, error))?;
            readers.push(reader);
        }
        Ok(SqliteStorage::new(writer, readers, location))
    }

    /// A private in-memory database, gone when the last clone is dropped. One connection serves
    /// reads and writes, so its behaviour matches a file's (the same tables, transactions and errors).
    ///
    /// # Errors
    /// `STORAGE_ERROR` when SQLite cannot create it.
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn in_memory() -> Result<Self> {
        let name = format!(
            "file:noetic-memory-{}-{}",
            std::process::id(),
            MEMORY_SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let location = name.clone();
        let connect = SqliteConnectOptions::new()
            .filename(name)
            .in_memory(true)
            .shared_cache(true)
            .foreign_keys(true);
        // The database lives as long as a connection to it: the store keeps its one connection.
        let mut writer = connect
            .connect()
            .await
            .map_err(|error| error::map("open", &location, error))?;
        schema::migrate(&mut writer, &location).await?;
        durable::create_guard(&mut writer, &location).await?;
        Ok(SqliteStorage::new(writer, Vec::new(), location))
    }

    /// The file this database is stored in (or its in-memory name).
    pub fn location(&self) -> &str {
        &self.inner.location
    }

    fn new(writer: SqliteConnection, readers: Vec<SqliteConnection>, location: String) -> Self {
        SqliteStorage {
            inner: Arc::new(Inner {
                writer: tokio::sync::Mutex::new(Writer {
                    conn: writer,
                    script_open: false,
                }),
                readers: readers.into_iter().map(tokio::sync::Mutex::new).collect(),
                next_reader: AtomicU64::new(0),
                location,
            }),
        }
    }

    /// The writer connection, waiting at most [`WRITER_WAIT`] for the writes ahead.
    ///
    /// # Errors
    /// `STORAGE_BUSY` naming `operation` and `key` when the wait runs out.
    pub(crate) async fn writer(
        &self,
        operation: &'static str,
        key: &str,
    ) -> Result<tokio::sync::MutexGuard<'_, Writer>> {
        tokio::time::timeout(WRITER_WAIT, self.inner.writer.lock())
            .await
            .map_err(|_| error::map(operation, key, sqlx::Error::PoolTimedOut))
    }

    /// A connection to read with: the first free reader, else the next one in turn once it frees
    /// up (at most [`WRITER_WAIT`]).
    ///
    /// # Errors
    /// `STORAGE_BUSY` when the wait runs out.
    pub(crate) async fn reader(&self, operation: &'static str, key: &str) -> Result<Reader<'_>> {
        let readers = &self.inner.readers;
        if readers.is_empty() {
            return self.writer(operation, key).await.map(Reader::Writer);
        }
        if let Some(free) = readers.iter().find_map(|reader| reader.try_lock().ok()) {
            return Ok(Reader::Held(free));
        }
        let turn = self.inner.next_reader.fetch_add(1, Ordering::Relaxed);
        let reader = &readers[(turn % readers.len() as u64) as usize];
        tokio::time::timeout(WRITER_WAIT, reader.lock())
            .await
            .map(Reader::Held)
            .map_err(|_| error::map(operation, key, sqlx::Error::PoolTimedOut))
    }
}

/// A statement over the rows whose `column` starts with a prefix, in two forms: `bounded` takes the
/// prefix as `?1` and its `prefix_upper` as `?2` (`column >= ?1 AND column < ?2`), `open` only `?1`
/// (`column >= ?1`, for a prefix with no upper bound). Two forms rather than one
/// `(?2 IS NULL OR column < ?2)`: SQLite's planner cannot use an `OR` as the range's upper end, so
/// that form scanned from the prefix to the end of the table, making every prefix read or clear
/// linear in the rows after it (issue 11's 100,000-thread bench found it).
pub(crate) struct PrefixSql {
    pub(crate) bounded: &'static str,
    pub(crate) open: &'static str,
}

impl PrefixSql {
    /// The statement for `prefix`, its bounds bound.
    pub(crate) fn query<'q>(
        &self,
        prefix: &'q str,
    ) -> sqlx::query::Query<'q, sqlx::Sqlite, sqlx::sqlite::SqliteArguments> {
        match noetic_core::adapter::durable::prefix_upper(prefix) {
            Some(upper) => sqlx::query(self.bounded).bind(prefix).bind(upper),
            None => sqlx::query(self.open).bind(prefix),
        }
    }
}

/// `value` as SQLite's signed 64-bit integer.
pub(crate) fn to_i64(operation: &'static str, key: &str, value: u64) -> Result<i64> {
    i64::try_from(value).map_err(|_| error::out_of_range(operation, key, value))
}
