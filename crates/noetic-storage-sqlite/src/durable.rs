//! [`DurableStore`] over tables `records`, `logs`, `log_heads` and `leases`.
//!
//! Every write is one `BEGIN IMMEDIATE` transaction on the writer connection: it takes SQLite's write
//! lock before reading what it decides on (the fence's epoch, a log's next sequence number, the current
//! lease), so the decision holds against every other connection to the file, in any process.

use futures_util::future::BoxFuture;
use noetic_core::adapter::durable::{
    Commit, DurableStore, Lease, LeaseRequest, LogEntry, Records, decide_lease, seq_conflict,
};
use noetic_core::{Error, Result};
use sqlx::sqlite::SqliteRow;
use sqlx::{Row, SqliteConnection};

use crate::error::{corrupt, map};
use crate::{PrefixSql, SqliteStorage, to_i64};

const LEASE_GET: &str = "SELECT holder, epoch, expires_at_ms FROM leases WHERE name = ?1";
const LEASE_SET: &str = "INSERT INTO leases (name, holder, epoch, expires_at_ms) VALUES (?1, ?2, ?3, ?4) \
     ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, epoch = excluded.epoch, \
     expires_at_ms = excluded.expires_at_ms";
const HEAD_GET: &str = "SELECT next_seq FROM log_heads WHERE log = ?1";
const HEAD_SET: &str = "INSERT INTO log_heads (log, next_seq) VALUES (?1, ?2) \
     ON CONFLICT (log) DO UPDATE SET next_seq = excluded.next_seq";

/// Decodes a lease row of `name`.
fn lease_row(name: &str, row: &SqliteRow) -> Result<Lease> {
    let bad = |error: &dyn std::fmt::Display| corrupt("lease", name, error);
    let holder: String = row.try_get("holder").map_err(|e| bad(&e))?;
    let epoch: i64 = row.try_get("epoch").map_err(|e| bad(&e))?;
    let expires_at_ms: i64 = row.try_get("expires_at_ms").map_err(|e| bad(&e))?;
    let epoch = u64::try_from(epoch).map_err(|_| bad(&format!("negative epoch {epoch}")))?;
    let expires_at_ms = u64::try_from(expires_at_ms)
        .map_err(|_| bad(&format!("negative expires_at_ms {expires_at_ms}")))?;
    Ok(Lease::new(name, holder, epoch, expires_at_ms))
}

async fn stored_lease(
    conn: &mut SqliteConnection,
    operation: &'static str,
    name: &str,
) -> Result<Option<Lease>> {
    let row = sqlx::query(LEASE_GET)
        .bind(name)
        .fetch_optional(conn)
        .await
        .map_err(|error| map(operation, name, error))?;
    row.map(|row| lease_row(name, &row)).transpose()
}

async fn write_lease(
    conn: &mut SqliteConnection,
    operation: &'static str,
    lease: &Lease,
) -> Result<()> {
    sqlx::query(LEASE_SET)
        .bind(lease.name.as_str())
        .bind(lease.holder.as_str())
        .bind(to_i64(operation, &lease.name, lease.epoch)?)
        .bind(to_i64(operation, &lease.name, lease.expires_at_ms)?)
        .execute(conn)
        .await
        .map_err(|error| map(operation, &lease.name, error))?;
    Ok(())
}

async fn stored_next(
    conn: &mut SqliteConnection,
    operation: &'static str,
    log: &str,
) -> Result<u64> {
    let row = sqlx::query(HEAD_GET)
        .bind(log)
        .fetch_optional(conn)
        .await
        .map_err(|error| map(operation, log, error))?;
    let Some(row) = row else { return Ok(0) };
    let next: i64 = row
        .try_get(0)
        .map_err(|error| corrupt(operation, log, error))?;
    u64::try_from(next).map_err(|_| corrupt(operation, log, format!("negative next_seq {next}")))
}

/// Clearing a prefix: its records, log entries and log heads.
const CLEAR: [PrefixSql; 3] = [
    PrefixSql {
        bounded: "DELETE FROM records WHERE key >= ?1 AND key < ?2",
        open: "DELETE FROM records WHERE key >= ?1",
    },
    PrefixSql {
        bounded: "DELETE FROM logs WHERE log >= ?1 AND log < ?2",
        open: "DELETE FROM logs WHERE log >= ?1",
    },
    PrefixSql {
        bounded: "DELETE FROM log_heads WHERE log >= ?1 AND log < ?2",
        open: "DELETE FROM log_heads WHERE log >= ?1",
    },
];

const RECORDS: PrefixSql = PrefixSql {
    bounded: "SELECT key, value FROM records WHERE key >= ?1 AND key < ?2 ORDER BY key",
    open: "SELECT key, value FROM records WHERE key >= ?1 ORDER BY key",
};

const RUNNABLE: PrefixSql = PrefixSql {
    bounded: "SELECT name FROM runnable WHERE name >= ?1 AND name < ?2 ORDER BY place",
    open: "SELECT name FROM runnable WHERE name >= ?1 ORDER BY place",
};

/// Runs `sql` for `prefix`.
async fn delete_prefix(conn: &mut SqliteConnection, sql: &PrefixSql, prefix: &str) -> Result<()> {
    sql.query(prefix)
        .execute(conn)
        .await
        .map_err(|error| map("clear_prefix", prefix, error))?;
    Ok(())
}

/// Applies `commit` inside the open transaction `conn`.
async fn apply(conn: &mut SqliteConnection, commit: Commit) -> Result<()> {
    if let Some(fence) = &commit.fence {
        let live = stored_lease(conn, "commit", &fence.lease).await?;
        if live.as_ref().map(|lease| lease.epoch) != Some(fence.epoch) {
            return Err(Error::LeaseLost {
                lease: fence.lease.clone(),
                epoch: fence.epoch,
            });
        }
    }
    for prefix in &commit.clear_prefixes {
        for sql in &CLEAR {
            delete_prefix(conn, sql, prefix).await?;
        }
    }
    for (log, below) in &commit.trims {
        sqlx::query("DELETE FROM logs WHERE log = ?1 AND seq < ?2")
            .bind(log.as_str())
            .bind(to_i64("trim", log, *below)?)
            .execute(&mut *conn)
            .await
            .map_err(|error| map("trim", log, error))?;
    }
    for key in &commit.deletes {
        sqlx::query("DELETE FROM records WHERE key = ?1")
            .bind(key.as_str())
            .execute(&mut *conn)
            .await
            .map_err(|error| map("delete", key, error))?;
    }
    for (key, value) in commit.puts {
        sqlx::query(
            "INSERT INTO records (key, value) VALUES (?1, ?2) \
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        )
        .bind(key.as_str())
        .bind(value)
        .execute(&mut *conn)
        .await
        .map_err(|error| map("put", &key, error))?;
    }
    for append in commit.appends {
        let log = append.log.as_str();
        let next = stored_next(conn, "append", log).await?;
        if append.first_seq != next {
            return Err(seq_conflict(log, append.first_seq, next));
        }
        let mut seq = next;
        for entry in append.entries {
            sqlx::query("INSERT INTO logs (log, seq, value) VALUES (?1, ?2, ?3)")
                .bind(log)
                .bind(to_i64("append", log, seq)?)
                .bind(entry)
                .execute(&mut *conn)
                .await
                .map_err(|error| map("append", log, error))?;
            seq += 1;
        }
        sqlx::query(HEAD_SET)
            .bind(log)
            .bind(to_i64("append", log, seq)?)
            .execute(&mut *conn)
            .await
            .map_err(|error| map("append", log, error))?;
    }
    for name in &commit.drop_leases {
        sqlx::query("DELETE FROM leases WHERE name = ?1")
            .bind(name.as_str())
            .execute(&mut *conn)
            .await
            .map_err(|error| map("drop_lease", name, error))?;
    }
    for name in &commit.clear_runnable {
        sqlx::query("DELETE FROM runnable WHERE name = ?1")
            .bind(name.as_str())
            .execute(&mut *conn)
            .await
            .map_err(|error| map("clear_runnable", name, error))?;
    }
    for name in &commit.mark_runnable {
        // A name already marked keeps its place.
        sqlx::query(
            "INSERT INTO runnable (name, place) \
             VALUES (?1, (SELECT COALESCE(MAX(place), 0) + 1 FROM runnable)) \
             ON CONFLICT (name) DO NOTHING",
        )
        .bind(name.as_str())
        .execute(&mut *conn)
        .await
        .map_err(|error| map("mark_runnable", name, error))?;
    }
    Ok(())
}

impl DurableStore for SqliteStorage {
    fn commit(&self, commit: Commit) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            if commit.is_empty() && commit.fence.is_none() {
                return Ok(());
            }
            let subject = commit.subject().to_owned();
            let mut tx = self
                .writer()
                .begin_with("BEGIN IMMEDIATE")
                .await
                .map_err(|error| map("commit", &subject, error))?;
            // On error `tx` is dropped unfinished, which rolls every part back.
            apply(&mut tx, commit).await?;
            tx.commit()
                .await
                .map_err(|error| map("commit", &subject, error))
        })
    }

    fn record<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>>> {
        Box::pin(async move {
            let row = sqlx::query("SELECT value FROM records WHERE key = ?1")
                .bind(key)
                .fetch_optional(self.readers())
                .await
                .map_err(|error| map("record", key, error))?;
            row.map(|row| {
                row.try_get::<Vec<u8>, _>(0)
                    .map_err(|error| corrupt("record", key, error))
            })
            .transpose()
        })
    }

    fn records<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Records>> {
        Box::pin(async move {
            let rows = RECORDS
                .query(prefix)
                .fetch_all(self.readers())
                .await
                .map_err(|error| map("records", prefix, error))?;
            rows.iter()
                .map(|row| {
                    let key: String = row
                        .try_get(0)
                        .map_err(|error| corrupt("records", prefix, error))?;
                    let value: Vec<u8> = row
                        .try_get(1)
                        .map_err(|error| corrupt("records", &key, error))?;
                    Ok((key, value))
                })
                .collect()
        })
    }

    fn read_log<'a>(&'a self, log: &'a str, from_seq: u64) -> BoxFuture<'a, Result<Vec<LogEntry>>> {
        Box::pin(async move {
            let from = i64::try_from(from_seq).unwrap_or(i64::MAX);
            let rows = sqlx::query(
                "SELECT seq, value FROM logs WHERE log = ?1 AND seq >= ?2 ORDER BY seq",
            )
            .bind(log)
            .bind(from)
            .fetch_all(self.readers())
            .await
            .map_err(|error| map("read_log", log, error))?;
            rows.iter()
                .map(|row| {
                    let seq: i64 = row
                        .try_get(0)
                        .map_err(|error| corrupt("read_log", log, error))?;
                    let value: Vec<u8> = row
                        .try_get(1)
                        .map_err(|error| corrupt("read_log", log, error))?;
                    let seq = u64::try_from(seq)
                        .map_err(|_| corrupt("read_log", log, format!("negative seq {seq}")))?;
                    Ok(LogEntry::new(seq, value))
                })
                .collect()
        })
    }

    fn next_seq<'a>(&'a self, log: &'a str) -> BoxFuture<'a, Result<u64>> {
        Box::pin(async move {
            let mut conn = self
                .readers()
                .acquire()
                .await
                .map_err(|error| map("next_seq", log, error))?;
            stored_next(&mut conn, "next_seq", log).await
        })
    }

    fn acquire_lease<'a>(&'a self, request: LeaseRequest<'a>) -> BoxFuture<'a, Result<Lease>> {
        Box::pin(async move {
            let name = request.name;
            let mut tx = self
                .writer()
                .begin_with("BEGIN IMMEDIATE")
                .await
                .map_err(|error| map("acquire_lease", name, error))?;
            let current = stored_lease(&mut tx, "acquire_lease", name).await?;
            let lease = decide_lease(current.as_ref(), &request)?;
            if current.as_ref() != Some(&lease) {
                write_lease(&mut tx, "acquire_lease", &lease).await?;
            }
            tx.commit()
                .await
                .map_err(|error| map("acquire_lease", name, error))?;
            Ok(lease)
        })
    }

    fn release_lease<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let name = lease.name.as_str();
            let mut tx = self
                .writer()
                .begin_with("BEGIN IMMEDIATE")
                .await
                .map_err(|error| map("release_lease", name, error))?;
            let Some(mut current) = stored_lease(&mut tx, "release_lease", name).await? else {
                return Ok(());
            };
            if current.epoch == lease.epoch && current.holder == lease.holder {
                // Expired rather than deleted, so the next grant's epoch is still higher than every
                // epoch a fenced writer may hold.
                current.expires_at_ms = 0;
                write_lease(&mut tx, "release_lease", &current).await?;
            }
            tx.commit()
                .await
                .map_err(|error| map("release_lease", name, error))
        })
    }

    fn runnable<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Vec<String>>> {
        Box::pin(async move {
            let rows = RUNNABLE
                .query(prefix)
                .fetch_all(self.readers())
                .await
                .map_err(|error| map("runnable", prefix, error))?;
            rows.iter()
                .map(|row| {
                    row.try_get::<String, _>(0)
                        .map_err(|error| corrupt("runnable", prefix, error))
                })
                .collect()
        })
    }

    fn lease<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<Lease>>> {
        Box::pin(async move {
            let mut conn = self
                .readers()
                .acquire()
                .await
                .map_err(|error| map("lease", name, error))?;
            stored_lease(&mut conn, "lease", name).await
        })
    }
}
