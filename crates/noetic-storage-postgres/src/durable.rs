//! [`DurableStore`] over tables `records`, `logs`, `log_heads` and `leases`.
//!
//! Every write is one transaction (READ COMMITTED) that locks the rows it decides on before reading
//! them: a fence's lease row `FOR SHARE` (an `acquire_lease` of that name waits for the commit, and
//! the commit for a grant in progress), each appended log's head row `FOR UPDATE` (created first if
//! missing, so two first appends to a log also meet on one row), a lease row `FOR UPDATE` for a grant
//! or a release. The decision therefore holds against every other connection to the database. Each
//! part of a commit is one statement however many rows it writes (arrays bound as parameters and
//! `UNNEST`ed), so a checkpoint costs the same few round trips at any size.

use std::time::Duration;

use futures_util::future::BoxFuture;
use noetic_core::adapter::durable::{
    Commit, DurableStore, Lease, LeaseRequest, LogAppend, LogEntry, Records, decide_lease,
    seq_conflict,
};
use noetic_core::{Error, Result};
use sqlx::postgres::PgRow;
use sqlx::{PgConnection, Row};

use crate::error::{corrupt, map};
use crate::{LeaseClock, PostgresStorage, PrefixSql, to_i64};

/// The database's clock in milliseconds since the Unix epoch. `clock_timestamp()`, not `now()`: the
/// time when the row is read, not when the transaction began.
macro_rules! db_now {
    () => {
        "(extract(epoch from clock_timestamp()) * 1000)::bigint"
    };
}

/// A lease row locked `FOR UPDATE` (to grant or release it), with the database's clock read once the
/// lock is held: the outer projection runs after the inner query has locked the row.
const LEASE_LOCK: &str = concat!(
    "SELECT l.holder, l.epoch, l.expires_at_ms, ",
    db_now!(),
    " AS db_now FROM (SELECT holder, epoch, expires_at_ms FROM leases WHERE name = $1 FOR UPDATE) AS l"
);
/// A fence's lease row locked `FOR SHARE` (commits under one lease do not block each other; a grant
/// of the lease waits for them and they for it), with the database's clock read once it is held.
const LEASE_SHARE: &str = concat!(
    "SELECT l.epoch, l.expires_at_ms, ",
    db_now!(),
    " AS db_now FROM (SELECT epoch, expires_at_ms FROM leases WHERE name = $1 FOR SHARE) AS l"
);
/// A first grant's row: inserted as a placeholder (epoch 0, already expired) so the grant has a row
/// to lock; returns the database's clock, and no row when another transaction inserted it first.
const LEASE_PLACEHOLDER: &str = concat!(
    "INSERT INTO leases (name, holder, epoch, expires_at_ms) VALUES ($1, '', 0, 0) \
     ON CONFLICT (name) DO NOTHING RETURNING ",
    db_now!()
);
const LEASE_WRITE: &str =
    "UPDATE leases SET holder = $2, epoch = $3, expires_at_ms = $4 WHERE name = $1";
const LEASE_GET: &str = "SELECT holder, epoch, expires_at_ms FROM leases WHERE name = $1";

const HEAD_GET: &str = "SELECT next_seq FROM log_heads WHERE log = $1";
/// The heads of the logs a commit appends to, locked in name order (`$1` is sorted), so two commits
/// appending to the same logs never deadlock.
const HEADS_LOCK: &str =
    "SELECT log, next_seq FROM log_heads WHERE log = ANY($1) ORDER BY log FOR UPDATE";
/// Heads for logs that have none yet (at 0), so the next [`HEADS_LOCK`] finds a row to lock; waits
/// for (and then leaves alone) a head another transaction is inserting.
const HEADS_CREATE: &str = "INSERT INTO log_heads (log, next_seq) SELECT log, 0 FROM UNNEST($1::text[]) AS h(log) \
     ON CONFLICT (log) DO NOTHING";
/// Every entry of a commit and the new heads, in one statement.
const APPEND: &str = "WITH entries AS (\
         INSERT INTO logs (log, seq, value) SELECT * FROM UNNEST($1::text[], $2::bigint[], $3::bytea[])\
     ) \
     UPDATE log_heads SET next_seq = h.next_seq FROM UNNEST($4::text[], $5::bigint[]) AS h(log, next_seq) \
     WHERE log_heads.log = h.log";

/// Clearing a prefix: its records, log entries and log heads, in one statement.
const CLEAR: PrefixSql = PrefixSql {
    bounded: "WITH r AS (DELETE FROM records WHERE key >= $1 AND key < $2), \
              l AS (DELETE FROM logs WHERE log >= $1 AND log < $2) \
              DELETE FROM log_heads WHERE log >= $1 AND log < $2",
    open: "WITH r AS (DELETE FROM records WHERE key >= $1), \
           l AS (DELETE FROM logs WHERE log >= $1) \
           DELETE FROM log_heads WHERE log >= $1",
};
const TRIM: &str = "DELETE FROM logs USING UNNEST($1::text[], $2::bigint[]) AS t(log, below) \
     WHERE logs.log = t.log AND logs.seq < t.below";
const DELETE_RECORDS: &str = "DELETE FROM records WHERE key = ANY($1)";
const PUT_RECORDS: &str = "INSERT INTO records (key, value) SELECT * FROM UNNEST($1::text[], $2::bytea[]) \
     ON CONFLICT (key) DO UPDATE SET value = excluded.value";
const DROP_LEASES: &str = "DELETE FROM leases WHERE name = ANY($1)";

const RECORD: &str = "SELECT value FROM records WHERE key = $1";
const RECORDS: PrefixSql = PrefixSql {
    bounded: "SELECT key, value FROM records WHERE key >= $1 AND key < $2 ORDER BY key",
    open: "SELECT key, value FROM records WHERE key >= $1 ORDER BY key",
};
const READ_LOG: &str = "SELECT seq, value FROM logs WHERE log = $1 AND seq >= $2 ORDER BY seq";
/// A whole log: also the rows a corrupt (negative) sequence number would hide from [`READ_LOG`].
const READ_LOG_ALL: &str = "SELECT seq, value FROM logs WHERE log = $1 ORDER BY seq";

/// A stored non-negative `bigint` column of a row of `name`, as `u64`.
fn unsigned(operation: &'static str, name: &str, row: &PgRow, column: &str) -> Result<u64> {
    let value: i64 = row
        .try_get(column)
        .map_err(|error| corrupt(operation, name, error))?;
    u64::try_from(value).map_err(|_| corrupt(operation, name, format!("negative {column} {value}")))
}

/// The database's clock as read by a statement (never negative).
fn db_now(operation: &'static str, name: &str, row: &PgRow) -> Result<u64> {
    let now: i64 = row
        .try_get("db_now")
        .map_err(|error| corrupt(operation, name, error))?;
    Ok(u64::try_from(now).unwrap_or(0))
}

/// Decodes a lease row of `name`.
fn lease_row(operation: &'static str, name: &str, row: &PgRow) -> Result<Lease> {
    let holder: String = row
        .try_get("holder")
        .map_err(|error| corrupt(operation, name, error))?;
    let epoch = unsigned(operation, name, row, "epoch")?;
    let expires_at_ms = unsigned(operation, name, row, "expires_at_ms")?;
    Ok(Lease::new(name, holder, epoch, expires_at_ms))
}

/// The lease of `name` locked for a grant or a release, and the database's clock: `None` for the
/// lease when there is no row, or only the placeholder this transaction inserted.
pub(crate) async fn lock_lease(
    conn: &mut PgConnection,
    operation: &'static str,
    name: &str,
) -> Result<(Option<Lease>, u64)> {
    // A row deleted or inserted by a concurrent transaction between our statements sends us round
    // once more; two rounds settle it unless the lease is dropped and re-created continuously.
    for _ in 0..4 {
        let row = sqlx::query(LEASE_LOCK)
            .bind(name)
            .fetch_optional(&mut *conn)
            .await
            .map_err(|error| map(operation, name, error))?;
        if let Some(row) = row {
            return Ok((
                Some(lease_row(operation, name, &row)?),
                db_now(operation, name, &row)?,
            ));
        }
        let inserted = sqlx::query(LEASE_PLACEHOLDER)
            .bind(name)
            .fetch_optional(&mut *conn)
            .await
            .map_err(|error| map(operation, name, error))?;
        if let Some(row) = inserted {
            let now: i64 = row
                .try_get(0)
                .map_err(|error| corrupt(operation, name, error))?;
            return Ok((None, u64::try_from(now).unwrap_or(0)));
        }
    }
    Err(Error::StorageBusy {
        operation,
        key: name.to_owned(),
        source: "the lease row kept changing under the grant".into(),
    })
}

pub(crate) async fn write_lease(
    conn: &mut PgConnection,
    operation: &'static str,
    lease: &Lease,
) -> Result<()> {
    sqlx::query(LEASE_WRITE)
        .bind(lease.name.as_str())
        .bind(lease.holder.as_str())
        .bind(to_i64(operation, &lease.name, lease.epoch)?)
        .bind(to_i64(operation, &lease.name, lease.expires_at_ms)?)
        .execute(conn)
        .await
        .map_err(|error| map(operation, &lease.name, error))?;
    Ok(())
}

/// `at` on the database's clock (read as `db_now`) as a time on the caller's clock (`now_ms`): the
/// caller's now plus the time left.
pub(crate) fn to_caller(at: u64, db_now: u64, now_ms: u64) -> u64 {
    now_ms.saturating_add(at.saturating_sub(db_now))
}

/// Applies `commit` inside the open transaction `conn`.
async fn apply(conn: &mut PgConnection, commit: Commit, clock: LeaseClock) -> Result<()> {
    if let Some(fence) = &commit.fence {
        let row = sqlx::query(LEASE_SHARE)
            .bind(fence.lease.as_str())
            .fetch_optional(&mut *conn)
            .await
            .map_err(|error| map("commit", &fence.lease, error))?;
        let held = match row {
            None => false,
            Some(row) => {
                let epoch = unsigned("commit", &fence.lease, &row, "epoch")?;
                let live = match clock {
                    LeaseClock::Caller => true,
                    _ => {
                        unsigned("commit", &fence.lease, &row, "expires_at_ms")?
                            > db_now("commit", &fence.lease, &row)?
                    }
                };
                epoch == fence.epoch && live
            }
        };
        if !held {
            return Err(Error::LeaseLost {
                lease: fence.lease.clone(),
                epoch: fence.epoch,
            });
        }
    }
    for prefix in &commit.clear_prefixes {
        CLEAR
            .query(prefix)
            .execute(&mut *conn)
            .await
            .map_err(|error| map("clear_prefix", prefix, error))?;
    }
    if let Some((first, _)) = commit.trims.first() {
        let mut logs = Vec::with_capacity(commit.trims.len());
        let mut below = Vec::with_capacity(commit.trims.len());
        for (log, seq) in &commit.trims {
            logs.push(log.as_str());
            below.push(to_i64("trim", log, *seq)?);
        }
        sqlx::query(TRIM)
            .bind(logs)
            .bind(below)
            .execute(&mut *conn)
            .await
            .map_err(|error| map("trim", first, error))?;
    }
    if let Some(first) = commit.deletes.first() {
        sqlx::query(DELETE_RECORDS)
            .bind(&commit.deletes)
            .execute(&mut *conn)
            .await
            .map_err(|error| map("delete", first, error))?;
    }
    if !commit.puts.is_empty() {
        let (keys, values) = last_put_per_key(commit.puts);
        sqlx::query(PUT_RECORDS)
            .bind(&keys)
            .bind(values)
            .execute(&mut *conn)
            .await
            .map_err(|error| map("put", &keys[0], error))?;
    }
    if !commit.appends.is_empty() {
        append(conn, commit.appends).await?;
    }
    if let Some(first) = commit.drop_leases.first() {
        sqlx::query(DROP_LEASES)
            .bind(&commit.drop_leases)
            .execute(&mut *conn)
            .await
            .map_err(|error| map("drop_lease", first, error))?;
    }
    crate::runnable::apply(conn, &commit.clear_runnable, &commit.mark_runnable).await?;
    crate::runnable::announce(conn, &commit.announce).await
}

/// The puts as `(keys, values)` columns in key order (so two commits putting the same records lock
/// them in the same order), a key put twice keeping its last value (one upsert cannot write a row
/// twice).
fn last_put_per_key(mut puts: Vec<(String, Vec<u8>)>) -> (Vec<String>, Vec<Vec<u8>>) {
    // Stable: the puts of one key stay in commit order.
    puts.sort_by(|(a, _), (b, _)| a.cmp(b));
    let mut keys: Vec<String> = Vec::with_capacity(puts.len());
    let mut values: Vec<Vec<u8>> = Vec::with_capacity(puts.len());
    for (key, value) in puts {
        if let (Some(last), Some(slot)) = (keys.last(), values.last_mut())
            && *last == key
        {
            *slot = value;
            continue;
        }
        keys.push(key);
        values.push(value);
    }
    (keys, values)
}

/// Appends every log's entries at its exact next sequence number, or fails the commit.
async fn append(conn: &mut PgConnection, appends: Vec<LogAppend>) -> Result<()> {
    let heads = {
        let mut names: Vec<&str> = appends.iter().map(|append| append.log.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        let mut heads = lock_heads(conn, &names).await?;
        if heads.len() < names.len() {
            let missing: Vec<&str> = names
                .iter()
                .copied()
                .filter(|name| !heads.iter().any(|(log, _)| log == name))
                .collect();
            sqlx::query(HEADS_CREATE)
                .bind(&missing)
                .execute(&mut *conn)
                .await
                .map_err(|error| map("append", missing[0], error))?;
            heads = lock_heads(conn, &names).await?;
            if let Some(name) = names
                .iter()
                .find(|name| !heads.iter().any(|(log, _)| log == *name))
            {
                return Err(Error::StorageBusy {
                    operation: "append",
                    key: (*name).to_owned(),
                    source: "the log's head was removed while the commit was appending".into(),
                });
            }
        }
        heads
    };
    // `heads` is sorted by log: each append finds its head by binary search. The entries are moved
    // into the bound array, not copied.
    let total: usize = appends.iter().map(|append| append.entries.len()).sum();
    let mut logs: Vec<&str> = Vec::with_capacity(total);
    let mut seqs: Vec<i64> = Vec::with_capacity(total);
    let mut values: Vec<Vec<u8>> = Vec::with_capacity(total);
    let mut next: Vec<u64> = heads.iter().map(|(_, next)| *next).collect();
    for append in appends {
        let at = heads
            .binary_search_by(|(name, _)| name.as_str().cmp(append.log.as_str()))
            .map_err(|_| corrupt("append", &append.log, "its head was not locked"))?;
        if append.first_seq != next[at] {
            return Err(seq_conflict(&append.log, append.first_seq, next[at]));
        }
        let log = heads[at].0.as_str();
        for entry in append.entries {
            logs.push(log);
            seqs.push(to_i64("append", log, next[at])?);
            values.push(entry);
            next[at] += 1;
        }
    }
    let mut head_next = Vec::with_capacity(next.len());
    for ((log, _), next) in heads.iter().zip(&next) {
        head_next.push(to_i64("append", log, *next)?);
    }
    let head_logs: Vec<&str> = heads.iter().map(|(log, _)| log.as_str()).collect();
    sqlx::query(APPEND)
        .bind(logs)
        .bind(seqs)
        .bind(values)
        .bind(&head_logs)
        .bind(head_next)
        .execute(&mut *conn)
        .await
        .map_err(|error| map("append", head_logs[0], error))?;
    Ok(())
}

/// The heads of `names` (sorted), locked in that order.
async fn lock_heads(conn: &mut PgConnection, names: &[&str]) -> Result<Vec<(String, u64)>> {
    let rows = sqlx::query(HEADS_LOCK)
        .bind(names)
        .fetch_all(&mut *conn)
        .await
        .map_err(|error| map("append", names[0], error))?;
    rows.iter()
        .map(|row| {
            let log: String = row
                .try_get("log")
                .map_err(|error| corrupt("append", names[0], error))?;
            let next = unsigned("append", &log, row, "next_seq")?;
            Ok((log, next))
        })
        .collect()
}

impl DurableStore for PostgresStorage {
    fn commit(&self, commit: Commit) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            if commit.is_empty() && commit.fence.is_none() {
                return Ok(());
            }
            let subject = commit.subject().to_owned();
            let mut tx = self
                .pool()
                .begin()
                .await
                .map_err(|error| map("commit", &subject, error))?;
            // On error `tx` is dropped unfinished, which rolls every part back.
            apply(&mut tx, commit, self.lease_clock()).await?;
            tx.commit()
                .await
                .map_err(|error| map("commit", &subject, error))
        })
    }

    fn record<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>>> {
        Box::pin(async move {
            let row = sqlx::query(RECORD)
                .bind(key)
                .fetch_optional(self.pool())
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
                .fetch_all(self.pool())
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
            let query = if from_seq == 0 {
                sqlx::query(READ_LOG_ALL).bind(log)
            } else {
                sqlx::query(READ_LOG)
                    .bind(log)
                    .bind(i64::try_from(from_seq).unwrap_or(i64::MAX))
            };
            let rows = query
                .fetch_all(self.pool())
                .await
                .map_err(|error| map("read_log", log, error))?;
            let mut entries = Vec::with_capacity(rows.len());
            for row in rows {
                let seq = unsigned("read_log", log, &row, "seq")?;
                let value: Vec<u8> = row
                    .try_get("value")
                    .map_err(|error| corrupt("read_log", log, error))?;
                entries.push(LogEntry::new(seq, value));
            }
            Ok(entries)
        })
    }

    fn next_seq<'a>(&'a self, log: &'a str) -> BoxFuture<'a, Result<u64>> {
        Box::pin(async move {
            let row = sqlx::query(HEAD_GET)
                .bind(log)
                .fetch_optional(self.pool())
                .await
                .map_err(|error| map("next_seq", log, error))?;
            match row {
                None => Ok(0),
                Some(row) => unsigned("next_seq", log, &row, "next_seq"),
            }
        })
    }

    fn acquire_lease<'a>(&'a self, request: LeaseRequest<'a>) -> BoxFuture<'a, Result<Lease>> {
        Box::pin(async move {
            let name = request.name;
            let mut tx = self
                .pool()
                .begin()
                .await
                .map_err(|error| map("acquire_lease", name, error))?;
            let (current, db_now) = lock_lease(&mut tx, "acquire_lease", name).await?;
            let database = self.lease_clock() != LeaseClock::Caller;
            let decided = if database {
                // The same request (a renewal keeps its epoch), decided at the database's now.
                decide_lease(current.as_ref(), &request.at(db_now))
            } else {
                decide_lease(current.as_ref(), &request)
            };
            let lease = match decided {
                Ok(lease) => lease,
                Err(Error::LeaseHeld {
                    lease,
                    holder,
                    expires_at_ms,
                }) if database => {
                    return Err(Error::LeaseHeld {
                        lease,
                        holder,
                        expires_at_ms: to_caller(expires_at_ms, db_now, request.now_ms),
                    });
                }
                Err(error) => return Err(error),
            };
            if current.as_ref() != Some(&lease) {
                write_lease(&mut tx, "acquire_lease", &lease).await?;
            }
            tx.commit()
                .await
                .map_err(|error| map("acquire_lease", name, error))?;
            if database {
                let expires_at_ms = to_caller(lease.expires_at_ms, db_now, request.now_ms);
                return Ok(Lease::new(
                    lease.name,
                    lease.holder,
                    lease.epoch,
                    expires_at_ms,
                ));
            }
            Ok(lease)
        })
    }

    fn release_lease<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let name = lease.name.as_str();
            let mut tx = self
                .pool()
                .begin()
                .await
                .map_err(|error| map("release_lease", name, error))?;
            let (current, _) = lock_lease(&mut tx, "release_lease", name).await?;
            let Some(mut current) = current else {
                // Nothing to release (a placeholder this transaction made goes with its rollback).
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
        Box::pin(crate::runnable::list(self, prefix))
    }

    fn claim_runnable<'a>(
        &'a self,
        request: LeaseRequest<'a>,
    ) -> BoxFuture<'a, Result<Option<Lease>>> {
        Box::pin(crate::runnable::claim(self, request))
    }

    fn wait_runnable(&self, timeout: Duration) -> BoxFuture<'_, Result<Vec<String>>> {
        let wait = self.wake().wait(timeout);
        Box::pin(async move { Ok(wait.await) })
    }

    fn wait_announced<'a>(
        &'a self,
        name: &'a str,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<bool>> {
        let wait = self.wake().wait_announced(name, timeout);
        Box::pin(async move { Ok(wait.await) })
    }

    fn lease<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<Lease>>> {
        Box::pin(async move {
            let row = sqlx::query(LEASE_GET)
                .bind(name)
                .fetch_optional(self.pool())
                .await
                .map_err(|error| map("lease", name, error))?;
            row.map(|row| lease_row("lease", name, &row)).transpose()
        })
    }
}
