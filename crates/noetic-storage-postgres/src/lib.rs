//! PostgreSQL storage for noetic: one database holds the key-value state and the durable records,
//! append-only logs and fenced leases of every harness connected to it, on any number of hosts.
//!
//! [`PostgresStorage`] implements both of noetic-core's storage traits,
//! [`StorageAdapter`](noetic_core::adapter::StorageAdapter) (layer state, in table `kv`) and
//! [`DurableStore`](noetic_core::adapter::durable::DurableStore) (checkpoints, ledgers, leases, in tables
//! `records`, `logs`, `log_heads` and `leases`), so one value makes a harness durable:
//!
//! ```no_run
//! # async fn demo() -> noetic_core::Result<()> {
//! use noetic_core::AgentHarness;
//! use noetic_storage_postgres::PostgresStorage;
//!
//! let store = PostgresStorage::connect("postgres://noetic:secret@db.internal:5432/noetic?sslmode=require").await?;
//! println!("storage: {}", store.location()); // postgres://noetic:***@db.internal:5432/noetic?sslmode=require
//! let harness = AgentHarness::builder("assistant").durable(store).build()?;
//! # drop(harness);
//! # Ok(())
//! # }
//! ```
//!
//! Connecting runs the embedded migrations (under a PostgreSQL advisory lock, so many hosts may
//! connect at once) and keeps a pool of connections ([`PostgresOptions::max_connections`]). Every write
//! is one transaction that locks the rows it decides on before reading them — the lease row for a
//! fence (`FOR SHARE`) or a grant (`FOR UPDATE`), each appended log's head row (`FOR UPDATE`) — so an
//! append's exact sequence number, a commit's fence and a lease grant hold between every connection to
//! the database, in any process on any host.
//!
//! Lease times follow [`LeaseClock`]: by default the database's clock decides whether a lease is live
//! (hosts' clocks may drift), and a fenced commit is refused once its lease has expired on that clock.
//!
//! TLS is rustls with the aws-lc-rs provider, chosen by the URL's `sslmode` as libpq reads it:
//! `disable`, `prefer` (the default: TLS when offered), `require` (TLS, certificate not verified),
//! `verify-ca`, `verify-full` (chain and host name verified against the Mozilla roots plus
//! `sslrootcert`). The password is never shown: [`PostgresStorage::location`], `Debug` and every
//! error carry the URL with it replaced by `***`.
//!
//! Errors are `noetic_core::Error`s naming the operation and the key, log or lease: `STORAGE_BUSY`
//! when a lock wait, a serialization failure, a deadlock, a statement timeout or the pool's
//! [`PostgresOptions::acquire_timeout`] stopped the work, `STORAGE_READ_ONLY` when the database
//! refuses writes, `STORAGE_ERROR` otherwise (including a corrupt row), and this crate's
//! `POSTGRES_SCHEMA_UNKNOWN` (see [`error`]) for a database migrated by a newer version.

mod durable;
pub mod error;
mod kv;
pub mod runnable;
mod schema;

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use noetic_core::{Error, Result};
use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};

/// Whose clock decides when a lease expires. Every host on one database must use the same one: the
/// stored expiries are on that clock.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LeaseClock {
    /// The database's clock (`clock_timestamp()`, read inside the deciding transaction), so hosts
    /// whose clocks drift still agree. `LeaseRequest::now_ms` is not used to decide; the stored
    /// `expires_at_ms` is on the database's clock. The [`Lease`](noetic_core::adapter::durable::Lease)
    /// returned by `acquire_lease` (and the expiry in `LEASE_HELD`) is translated into the caller's
    /// clock — `now_ms` plus the time left on the database's clock — so a caller renewing before its
    /// lease's `expires_at_ms` by its own clock renews in time. `lease(name)`, which has no caller
    /// clock, returns the stored database-clock value.
    ///
    /// A fenced commit also fails with `LEASE_LOST` once its lease has expired on the database's
    /// clock, even before another holder takes it: a writer that paused past its TTL never writes.
    #[default]
    Database,
    /// The caller's clock (`LeaseRequest::now_ms`), exactly as `noetic-storage-sqlite` and the
    /// in-memory store decide; a fence checks only the lease's epoch. For tests with fake clocks
    /// (the conformance suites), or hosts whose clocks are known to agree.
    Caller,
}

/// How [`PostgresStorage::connect_with`] connects.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PostgresOptions {
    /// The most connections the pool opens (default 10). Every operation holds one for its duration.
    pub max_connections: u32,
    /// How long an operation waits for a free connection, and [`PostgresStorage::connect`] for the
    /// server, before failing (default 30 s): `STORAGE_BUSY` for an operation.
    pub acquire_timeout: Duration,
    /// Whose clock decides lease expiry (default [`LeaseClock::Database`]).
    pub lease_clock: LeaseClock,
    /// How long the server lets a transaction of ours sit idle before it ends the session
    /// (`idle_in_transaction_session_timeout`, default 5 s). Our transactions send their statements
    /// back to back, so only a host that froze mid-transaction (SIGSTOP, a VM paused, a GC pause)
    /// reaches it: its transaction is rolled back and its locks released, so another host can take
    /// its threads over once their leases expire instead of waiting on its row locks for ever.
    pub idle_in_transaction_timeout: Duration,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        PostgresOptions {
            max_connections: 10,
            acquire_timeout: Duration::from_secs(30),
            lease_clock: LeaseClock::Database,
            idle_in_transaction_timeout: Duration::from_secs(5),
        }
    }
}

impl PostgresOptions {
    /// Sets [`PostgresOptions::max_connections`] (at least 1).
    pub fn max_connections(mut self, max: u32) -> Self {
        self.max_connections = max.max(1);
        self
    }

    /// Sets [`PostgresOptions::acquire_timeout`].
    pub fn acquire_timeout(mut self, timeout: Duration) -> Self {
        self.acquire_timeout = timeout;
        self
    }

    /// Sets [`PostgresOptions::idle_in_transaction_timeout`] (at least 1 ms).
    pub fn idle_in_transaction_timeout(mut self, timeout: Duration) -> Self {
        self.idle_in_transaction_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// Sets [`PostgresOptions::lease_clock`].
    pub fn lease_clock(mut self, clock: LeaseClock) -> Self {
        self.lease_clock = clock;
        self
    }
}

/// A PostgreSQL database: a [`StorageAdapter`](noetic_core::adapter::StorageAdapter) and a
/// [`DurableStore`](noetic_core::adapter::durable::DurableStore). Cloning is cheap and shares the
/// connection pool.
#[derive(Clone)]
pub struct PostgresStorage {
    inner: Arc<Inner>,
}

struct Inner {
    pool: PgPool,
    /// The URL with its password redacted, for errors.
    location: String,
    clock: LeaseClock,
    /// The `LISTEN` task's wake-ups, started by the first `wait_runnable`.
    wake: std::sync::OnceLock<runnable::Wake>,
}

impl std::fmt::Debug for PostgresStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStorage")
            .field("location", &self.inner.location)
            .field("lease_clock", &self.inner.clock)
            .finish_non_exhaustive()
    }
}

/// A pooled connection idle longer than this is pinged before it is handed out (one round trip), so
/// a connection the server or the network dropped is replaced rather than failing an operation.
/// Busier connections are used as they are, without a ping per operation.
const PING_AFTER_IDLE: Duration = Duration::from_secs(30);

impl PostgresStorage {
    /// Connects to the database at `url` with default [`PostgresOptions`] and runs the pending
    /// migrations.
    ///
    /// `url` is a libpq-style URL, `postgres://user:password@host:port/database?sslmode=require`;
    /// what it leaves out comes from the `PG*` environment variables and `~/.pgpass` as with libpq.
    ///
    /// A database that refuses writes (a hot standby, `default_transaction_read_only`) is not
    /// migrated: its schema is checked, and the store reads while every write fails with
    /// `STORAGE_READ_ONLY`.
    ///
    /// # Errors
    /// `STORAGE_ERROR` when the URL does not parse or the server cannot be reached or refuses the
    /// login (the error names the URL with its password redacted), `POSTGRES_SCHEMA_UNKNOWN` when the
    /// database was migrated by a newer version, `STORAGE_READ_ONLY` when it needs a migration but
    /// refuses writes.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped connect closes its connection (a migration in progress is rolled back
    /// and its lock released).
    pub async fn connect(url: &str) -> Result<Self> {
        Self::connect_with(url, PostgresOptions::default()).await
    }

    /// Connects to the database at `url` with `options` and runs the pending migrations.
    ///
    /// # Errors
    /// As [`PostgresStorage::connect`]; reaching the server is bounded by
    /// [`PostgresOptions::acquire_timeout`].
    ///
    /// # Cancel safety
    /// As [`PostgresStorage::connect`].
    pub async fn connect_with(url: &str, options: PostgresOptions) -> Result<Self> {
        let location = redact(url);
        let secrets = secrets(url);
        let connect = PgConnectOptions::from_str(url)
            .map_err(|error| error::map_connect("connect", &location, &secrets, error))?
            .options([(
                "idle_in_transaction_session_timeout",
                format!("{}ms", options.idle_in_transaction_timeout.as_millis()),
            )]);
        // One connection of our own to migrate: it holds the migrator's advisory lock, and closing
        // it releases the lock whatever happened.
        let mut conn = match tokio::time::timeout(
            options.acquire_timeout,
            PgConnection::connect_with(&connect),
        )
        .await
        {
            Ok(Ok(conn)) => conn,
            Ok(Err(error)) => {
                return Err(error::map_connect("connect", &location, &secrets, error));
            }
            Err(_) => {
                return Err(Error::Storage {
                    operation: "connect",
                    key: location,
                    source: format!(
                        "no connection within {:?} (the acquire timeout)",
                        options.acquire_timeout
                    )
                    .into(),
                });
            }
        };
        let migrated = migrate_or_check(&mut conn, &location).await;
        let _ = conn.close().await;
        migrated?;
        let pool = pool_options(&options).connect_lazy_with(connect);
        Ok(PostgresStorage {
            inner: Arc::new(Inner {
                pool,
                location,
                clock: options.lease_clock,
                wake: std::sync::OnceLock::new(),
            }),
        })
    }

    /// Uses `pool` (made by the caller, with its own connect options) and runs the pending migrations
    /// on one of its connections.
    ///
    /// # Errors
    /// As [`PostgresStorage::connect`].
    ///
    /// # Cancel safety
    /// As [`PostgresStorage::connect`].
    pub async fn from_pool(pool: PgPool, lease_clock: LeaseClock) -> Result<Self> {
        let location = {
            let options = pool.connect_options();
            format!(
                "postgres://{}@{}:{}/{}",
                options.get_username(),
                options.get_host(),
                options.get_port(),
                options.get_database().unwrap_or_default()
            )
        };
        let mut conn = pool
            .acquire()
            .await
            .map_err(|error| error::map("connect", &location, error))?;
        let migrated = migrate_or_check(&mut conn, &location).await;
        if migrated.is_err() {
            // It may still hold the migrator's advisory lock: do not return it to the pool.
            let _ = conn.close().await;
        }
        migrated?;
        Ok(PostgresStorage {
            inner: Arc::new(Inner {
                pool,
                location,
                clock: lease_clock,
                wake: std::sync::OnceLock::new(),
            }),
        })
    }

    /// The database's URL with its password replaced by `***`
    /// (`postgres://user:***@host:5432/database`).
    pub fn location(&self) -> &str {
        &self.inner.location
    }

    /// Whose clock decides lease expiry.
    pub fn lease_clock(&self) -> LeaseClock {
        self.inner.clock
    }

    /// The connection pool, for queries of your own (on your own tables in the same database, say).
    pub fn pool(&self) -> &PgPool {
        &self.inner.pool
    }

    /// The wake-ups of `wait_runnable` (the listening task starts on first use).
    pub(crate) fn wake(&self) -> &runnable::Wake {
        self.inner.wake.get_or_init(|| runnable::Wake::start(self))
    }
}

/// Runs the pending migrations; on a database that refuses writes (a hot standby,
/// `default_transaction_read_only`), checks instead that its schema is this version's, so reads work.
async fn migrate_or_check(conn: &mut PgConnection, location: &str) -> Result<()> {
    match schema::migrate(conn, location).await {
        Err(read_only @ Error::StorageReadOnly { .. }) => {
            if schema::check(conn, location).await? {
                Ok(())
            } else {
                Err(read_only)
            }
        }
        outcome => outcome,
    }
}

fn pool_options(options: &PostgresOptions) -> PgPoolOptions {
    PgPoolOptions::new()
        .max_connections(options.max_connections.max(1))
        .min_connections(0)
        .acquire_timeout(options.acquire_timeout)
        // Not a ping before every operation (a round trip each): only after a long idle.
        .test_before_acquire(false)
        .before_acquire(|conn, meta| {
            Box::pin(async move {
                if meta.idle_for >= PING_AFTER_IDLE {
                    conn.ping().await?;
                }
                Ok(true)
            })
        })
}

/// `url` with the password replaced by `***`: the userinfo's (`user:***@`) and a `password`
/// query parameter's. Anything not shaped like a URL is kept only up to its first `?`.
pub(crate) fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|at| at + 3) else {
        return url.split('?').next().unwrap_or_default().to_owned();
    };
    let authority_end = url[scheme_end..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |at| scheme_end + at);
    let authority = &url[scheme_end..authority_end];
    let mut out = String::with_capacity(url.len());
    out.push_str(&url[..scheme_end]);
    match authority.rfind('@') {
        Some(at) => {
            let userinfo = &authority[..at];
            match userinfo.find(':') {
                Some(colon) => {
                    out.push_str(&userinfo[..colon]);
                    out.push_str(":***");
                }
                None => out.push_str(userinfo),
            }
            out.push_str(&authority[at..]);
        }
        None => out.push_str(authority),
    }
    let rest = &url[authority_end..];
    match rest.split_once('?') {
        None => out.push_str(rest),
        Some((path, query)) => {
            out.push_str(path);
            out.push('?');
            for (index, pair) in query.split('&').enumerate() {
                if index > 0 {
                    out.push('&');
                }
                match pair.split_once('=') {
                    Some((key, _)) if key.eq_ignore_ascii_case("password") => {
                        out.push_str(key);
                        out.push_str("=***");
                    }
                    _ => out.push_str(pair),
                }
            }
        }
    }
    out
}

/// The password(s) `url` carries, as written and percent-decoded, to scrub from error texts.
fn secrets(url: &str) -> Vec<String> {
    let mut found = Vec::new();
    let Some(scheme_end) = url.find("://").map(|at| at + 3) else {
        return found;
    };
    let authority_end = url[scheme_end..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |at| scheme_end + at);
    let authority = &url[scheme_end..authority_end];
    if let Some((userinfo, _)) = authority.rsplit_once('@')
        && let Some((_, password)) = userinfo.split_once(':')
    {
        found.push(password.to_owned());
    }
    if let Some((_, query)) = url[authority_end..].split_once('?') {
        for pair in query.split('&') {
            if let Some((key, value)) = pair.split_once('=')
                && key.eq_ignore_ascii_case("password")
            {
                found.push(value.to_owned());
            }
        }
    }
    let decoded: Vec<String> = found.iter().map(|secret| percent_decode(secret)).collect();
    found.extend(decoded);
    found.retain(|secret| !secret.is_empty());
    found.sort();
    found.dedup();
    found
}

/// `%XX` escapes decoded (invalid ones kept as written); the result is lossy UTF-8.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[at] == b'%'
            && at + 2 < bytes.len()
            && let (Some(high), Some(low)) = (hex(bytes[at + 1]), hex(bytes[at + 2]))
        {
            out.push((high * 16 + low) as u8);
            at += 3;
        } else {
            out.push(bytes[at]);
            at += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A statement over the rows whose `column` starts with a prefix, in two forms: `bounded` takes the
/// prefix as `$1` and its `prefix_upper` as `$2` (`column >= $1 AND column < $2`), `open` only `$1`
/// (`column >= $1`, for a prefix with no upper bound). Two plain range forms rather than one
/// `($2 IS NULL OR column < $2)`, so the planner always sees an index range.
pub(crate) struct PrefixSql {
    pub(crate) bounded: &'static str,
    pub(crate) open: &'static str,
}

impl PrefixSql {
    /// The statement for `prefix`, its bounds bound.
    pub(crate) fn query<'q>(
        &self,
        prefix: &'q str,
    ) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
        match noetic_core::adapter::durable::prefix_upper(prefix) {
            Some(upper) => sqlx::query(self.bounded).bind(prefix).bind(upper),
            None => sqlx::query(self.open).bind(prefix),
        }
    }
}

/// `value` as PostgreSQL's `bigint`.
pub(crate) fn to_i64(operation: &'static str, key: &str, value: u64) -> Result<i64> {
    i64::try_from(value).map_err(|_| error::out_of_range(operation, key, value))
}

#[cfg(test)]
mod tests {
    use super::{redact, secrets};

    #[test]
    fn a_url_is_shown_with_its_password_redacted() {
        assert_eq!(
            redact("postgres://noetic:s3cr%40t@db:5432/app?sslmode=require"),
            "postgres://noetic:***@db:5432/app?sslmode=require"
        );
        assert_eq!(
            redact("postgresql://u@db/app?password=hunter2&sslmode=disable"),
            "postgresql://u@db/app?password=***&sslmode=disable"
        );
        assert_eq!(redact("postgres://db"), "postgres://db");
        assert_eq!(
            redact("postgres://u:p@w@db/app"),
            "postgres://u:***@db/app",
            "the last `@` ends the userinfo"
        );
        assert_eq!(redact("not a url?password=x"), "not a url");
    }

    #[test]
    fn the_secrets_of_a_url_are_its_passwords_as_written_and_decoded() {
        assert_eq!(
            secrets("postgres://noetic:s3cr%40t@db/app?password=two"),
            ["s3cr%40t", "s3cr@t", "two"]
        );
        assert!(secrets("postgres://noetic@db/app").is_empty());
    }
}
