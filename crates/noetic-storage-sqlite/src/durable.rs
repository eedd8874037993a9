//! [`DurableStore`] over tables `records`, `logs`, `log_heads` and `leases`.
//!
//! Every write is one `BEGIN IMMEDIATE` transaction on the writer connection: it takes SQLite's write
//! lock before reading what it decides on (the fence's epoch, a log's next sequence number, the current
//! lease), so the decision holds against every other connection to the file, in any process.

use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use noetic_core::adapter::durable::{
    Commit, DurableStore, Fence, Lease, LeaseRequest, LogAppend, LogEntry, Records, decide_lease,
    seq_conflict,
};
use noetic_core::{Error, Result};
use sqlx::sqlite::SqliteRow;
use sqlx::{Connection, Row, SqliteConnection};

use crate::error::{corrupt, map};
use crate::{PrefixSql, SqliteStorage, to_i64};

const LEASE_GET: &str = "SELECT holder, epoch, expires_at_ms FROM leases WHERE name = ?1";
const HEAD_GET: &str = "SELECT next_seq FROM log_heads WHERE log = ?1";

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

const RECORDS: PrefixSql = PrefixSql {
    bounded: "SELECT key, value FROM records WHERE key >= ?1 AND key < ?2 ORDER BY key",
    open: "SELECT key, value FROM records WHERE key >= ?1 ORDER BY key",
};

const RUNNABLE: PrefixSql = PrefixSql {
    bounded: "SELECT name FROM runnable WHERE name >= ?1 AND name < ?2 ORDER BY place",
    open: "SELECT name FROM runnable WHERE name >= ?1 ORDER BY place",
};

/// One commit as one SQL script, run inside the commit's transaction in one call to the connection's
/// worker thread (a statement per call cost a thread hand-off each: a checkpoint took seven).
///
/// Values are written into the script only as hex blob literals (`X'…'`, a text as
/// `CAST(X'…' AS TEXT)`) and integers the script itself computed, never as quoted text, so no byte of
/// a key or value can end a literal. The decisions a commit rests on (the fence's epoch, each
/// append's expected next sequence number) are `SELECT`s in the script, at the point where the
/// statement-per-call version read them; their rows come back tagged (`0` the fence, `i + 1` the
/// `i`-th append) and are checked before the transaction commits.
struct Script {
    sql: String,
}

impl Script {
    fn statement(&mut self, parts: &[&str]) {
        for part in parts {
            self.sql.push_str(part);
        }
        self.sql.push_str(";\n");
    }
}

/// `bytes` as an SQL blob literal.
fn blob(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2 + 3);
    out.push_str("X'");
    for byte in bytes {
        out.push(char::from(DIGITS[usize::from(byte >> 4)]));
        out.push(char::from(DIGITS[usize::from(byte & 0x0f)]));
    }
    out.push('\'');
    out
}

/// `text` as an SQL text value (a cast blob literal).
fn text(text: &str) -> String {
    format!("CAST({} AS TEXT)", blob(text.as_bytes()))
}

/// `texts` as an SQL list `(a, b, …)`.
fn texts<'t>(texts: impl IntoIterator<Item = &'t String>) -> String {
    let list: Vec<String> = texts.into_iter().map(|name| text(name)).collect();
    format!("({})", list.join(", "))
}

/// How a script checks what a commit rests on.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Checks {
    /// Each check a `SELECT` of a tagged row, for the caller to decide on (see [`apply`]).
    Rows,
    /// Each check an insert into the guard view [`GUARD`], which aborts the script when it fails
    /// (see [`commit_in_one_call`]).
    Guards,
}

/// The writer connection's guard: a temporary view whose `INSTEAD OF INSERT` trigger aborts the
/// statement with [`GUARD_FAILED`] unless the row's `ok` is 1, and stores nothing.
const GUARD: &str = "CREATE TEMP VIEW IF NOT EXISTS noetic_guard AS SELECT 1 AS ok; \
     CREATE TEMP TRIGGER IF NOT EXISTS noetic_guard_check INSTEAD OF INSERT ON noetic_guard \
     BEGIN SELECT RAISE(ABORT, 'noetic: a commit check failed') WHERE NEW.ok IS NOT 1; END;";

/// The message of a failed guard.
const GUARD_FAILED: &str = "noetic: a commit check failed";

/// Creates [`GUARD`] on the writer connection (temporary objects are the connection's own).
pub(crate) async fn create_guard(conn: &mut SqliteConnection, location: &str) -> Result<()> {
    sqlx::raw_sql(GUARD)
        .execute(conn)
        .await
        .map_err(|error| map("open", location, error))?;
    Ok(())
}

/// The script of `commit` (see [`Script`]), checking as `checks` says.
///
/// With guards, a commit whose appends name distinct logs checks everything (its fence, every
/// append's next sequence number) in ONE guard, then inserts every entry in one statement and moves
/// every head in one more: each statement is a message back from the connection's worker thread.
/// The guard comes after the clears, deletes and puts, as each check did in the statement-per-call
/// version: what it reads is the state those leave.
fn script(commit: &Commit, checks: Checks) -> Result<String> {
    let mut script = Script { sql: String::new() };
    let fence_epoch = |fence: &Fence| {
        format!(
            "(SELECT epoch FROM leases WHERE name = {})",
            text(&fence.lease)
        )
    };
    let fence_guard = |fence: &Fence| -> Result<String> {
        let expected = to_i64("commit", &fence.lease, fence.epoch)?;
        Ok(format!("{} IS {expected}", fence_epoch(fence)))
    };
    let head = |log: &str| {
        format!(
            "COALESCE((SELECT next_seq FROM log_heads WHERE log = {}), 0)",
            text(log)
        )
    };
    let head_guard = |append: &LogAppend| -> Result<String> {
        let expected = to_i64("append", &append.log, append.first_seq)?;
        Ok(format!("{} = {expected}", head(&append.log)))
    };
    let guard = |script: &mut Script, conditions: &[String]| {
        if !conditions.is_empty() {
            script.statement(&[
                "INSERT INTO noetic_guard (ok) VALUES ((",
                &conditions.join(") AND ("),
                "))",
            ]);
        }
    };
    if checks == Checks::Rows
        && let Some(fence) = &commit.fence
    {
        script.statement(&["SELECT 0, ", &fence_epoch(fence)]);
    }
    for prefix in &commit.clear_prefixes {
        let range = |column: &str| match noetic_core::adapter::durable::prefix_upper(prefix) {
            Some(upper) => format!(
                "{column} >= {} AND {column} < {}",
                text(prefix),
                text(&upper)
            ),
            None => format!("{column} >= {}", text(prefix)),
        };
        script.statement(&["DELETE FROM records WHERE ", &range("key")]);
        script.statement(&["DELETE FROM logs WHERE ", &range("log")]);
        script.statement(&["DELETE FROM log_heads WHERE ", &range("log")]);
    }
    for (log, below) in &commit.trims {
        let below = to_i64("trim", log, *below)?.to_string();
        script.statement(&[
            "DELETE FROM logs WHERE log = ",
            &text(log),
            " AND seq < ",
            &below,
        ]);
    }
    if !commit.deletes.is_empty() {
        script.statement(&["DELETE FROM records WHERE key IN ", &texts(&commit.deletes)]);
    }
    if !commit.puts.is_empty() {
        let rows: Vec<String> = commit
            .puts
            .iter()
            .map(|(key, value)| format!("({}, {})", text(key), blob(value)))
            .collect();
        // Rows of one key apply in order: the last one stays, as with one statement each.
        script.statement(&[
            "INSERT INTO records (key, value) VALUES ",
            &rows.join(", "),
            " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        ]);
    }
    let distinct = commit
        .appends
        .iter()
        .enumerate()
        .all(|(index, append)| commit.appends[..index].iter().all(|a| a.log != append.log));
    if checks == Checks::Guards && distinct {
        let mut conditions = Vec::with_capacity(commit.appends.len() + 1);
        if let Some(fence) = &commit.fence {
            conditions.push(fence_guard(fence)?);
        }
        let mut entries = Vec::new();
        let mut heads = Vec::with_capacity(commit.appends.len());
        for append in &commit.appends {
            conditions.push(head_guard(append)?);
            entries.extend(entry_rows(append)?);
            heads.push(format!("({}, {})", text(&append.log), next_of(append)?));
        }
        guard(&mut script, &conditions);
        insert_entries(&mut script, &entries);
        upsert_heads(&mut script, &heads);
    } else {
        if checks == Checks::Guards
            && let Some(fence) = &commit.fence
        {
            guard(&mut script, &[fence_guard(fence)?]);
        }
        for (index, append) in commit.appends.iter().enumerate() {
            match checks {
                Checks::Rows => {
                    script.statement(&[&format!("SELECT {}, ", index + 1), &head(&append.log)]);
                }
                Checks::Guards => guard(&mut script, &[head_guard(append)?]),
            }
            insert_entries(&mut script, &entry_rows(append)?);
            let next = format!("({}, {})", text(&append.log), next_of(append)?);
            upsert_heads(&mut script, &[next]);
        }
    }
    if !commit.drop_leases.is_empty() {
        script.statement(&[
            "DELETE FROM leases WHERE name IN ",
            &texts(&commit.drop_leases),
        ]);
    }
    if !commit.clear_runnable.is_empty() {
        script.statement(&[
            "DELETE FROM runnable WHERE name IN ",
            &texts(&commit.clear_runnable),
        ]);
    }
    for name in &commit.mark_runnable {
        // A name already marked keeps its place.
        script.statement(&[
            "INSERT INTO runnable (name, place) VALUES (",
            &text(name),
            ", (SELECT COALESCE(MAX(place), 0) + 1 FROM runnable)) ON CONFLICT (name) DO NOTHING",
        ]);
    }
    Ok(script.sql)
}

/// The `(log, seq, value)` rows of `append`'s entries.
fn entry_rows(append: &LogAppend) -> Result<Vec<String>> {
    let log = text(&append.log);
    let mut rows = Vec::with_capacity(append.entries.len());
    for (offset, entry) in append.entries.iter().enumerate() {
        let seq = append.first_seq.saturating_add(offset as u64);
        let seq = to_i64("append", &append.log, seq)?;
        rows.push(format!("({log}, {seq}, {})", blob(entry)));
    }
    Ok(rows)
}

/// The next sequence number of `append`'s log once it applied.
fn next_of(append: &LogAppend) -> Result<i64> {
    let next = append.first_seq.saturating_add(append.entries.len() as u64);
    to_i64("append", &append.log, next)
}

fn insert_entries(script: &mut Script, rows: &[String]) {
    if !rows.is_empty() {
        script.statement(&[
            "INSERT INTO logs (log, seq, value) VALUES ",
            &rows.join(", "),
        ]);
    }
}

fn upsert_heads(script: &mut Script, heads: &[String]) {
    if !heads.is_empty() {
        script.statement(&[
            "INSERT INTO log_heads (log, next_seq) VALUES ",
            &heads.join(", "),
            " ON CONFLICT (log) DO UPDATE SET next_seq = excluded.next_seq",
        ]);
    }
}

/// Applies `commit` inside the open transaction `conn`: its script, then the checks of what the
/// script read (a failed check is the commit's error even when a later statement failed as well,
/// as an append at a taken sequence number does).
async fn apply(conn: &mut SqliteConnection, commit: &Commit) -> Result<()> {
    let sql = script(commit, Checks::Rows)?;
    let subject = commit.subject();
    let mut rows = sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).fetch(&mut *conn);
    let mut read: Vec<(i64, Option<i64>)> = Vec::new();
    let mut failure = None;
    while let Some(row) = rows.next().await {
        match row {
            Ok(row) => {
                let tag: i64 = row
                    .try_get(0)
                    .map_err(|error| corrupt("commit", subject, error))?;
                // A value that does not decode is a corrupt row of what it was read from.
                let value: Option<i64> = row.try_get(1).map_err(|error| {
                    let log = usize::try_from(tag - 1)
                        .ok()
                        .and_then(|index| commit.appends.get(index));
                    match (log, &commit.fence) {
                        (Some(append), _) => corrupt("append", &append.log, error),
                        (None, Some(fence)) => corrupt("commit", &fence.lease, error),
                        (None, None) => corrupt("commit", subject, error),
                    }
                })?;
                read.push((tag, value));
            }
            Err(error) => {
                failure = Some(error);
                break;
            }
        }
    }
    drop(rows);
    for (tag, value) in read {
        if tag == 0 {
            let Some(fence) = &commit.fence else { continue };
            if value.and_then(|epoch| u64::try_from(epoch).ok()) != Some(fence.epoch) {
                return Err(Error::LeaseLost {
                    lease: fence.lease.clone(),
                    epoch: fence.epoch,
                });
            }
        } else {
            let Some(append) = usize::try_from(tag - 1)
                .ok()
                .and_then(|index| commit.appends.get(index))
            else {
                continue;
            };
            let log = append.log.as_str();
            let next = value.unwrap_or(0);
            let next = u64::try_from(next)
                .map_err(|_| corrupt("append", log, format!("negative next_seq {next}")))?;
            if append.first_seq != next {
                return Err(seq_conflict(log, append.first_seq, next));
            }
        }
    }
    match failure {
        Some(error) => Err(map("commit", subject, error)),
        None => Ok(()),
    }
}

/// What [`commit_in_one_call`] came to.
enum OneCall {
    /// The commit applied.
    Applied,
    /// A check failed: nothing applied; [`apply`] tells which and why (or applies the commit, when
    /// what it rests on changed back meanwhile).
    CheckFailed,
}

/// Runs `commit` as one script that opens its transaction, checks with guards, writes and commits:
/// one call to the connection's worker thread for the whole commit (see [`crate::Writer::run_script`]).
async fn commit_in_one_call(writer: &mut crate::Writer, commit: &Commit) -> Result<OneCall> {
    let mut sql = String::from("BEGIN IMMEDIATE;\n");
    sql.push_str(&script(commit, Checks::Guards)?);
    sql.push_str("COMMIT;");
    match writer.run_script(sql).await {
        Ok(()) => Ok(OneCall::Applied),
        Err(sqlx::Error::Database(database)) if database.message().contains(GUARD_FAILED) => {
            Ok(OneCall::CheckFailed)
        }
        Err(error) => Err(map("commit", commit.subject(), error)),
    }
}

impl DurableStore for SqliteStorage {
    fn commit(&self, commit: Commit) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            if commit.is_empty() && commit.fence.is_none() {
                return Ok(());
            }
            let subject = commit.subject().to_owned();
            let mut writer = self.writer("commit", &subject).await?;
            if let OneCall::Applied = commit_in_one_call(&mut writer, &commit).await? {
                return Ok(());
            }
            // A check failed: again, statement by statement, to name what failed (the precise
            // error), in a transaction of its own.
            let mut tx = writer
                .conn()
                .await
                .begin_with("BEGIN IMMEDIATE")
                .await
                .map_err(|error| map("commit", &subject, error))?;
            // On error `tx` is dropped unfinished, which rolls every part back.
            apply(&mut tx, &commit).await?;
            tx.commit()
                .await
                .map_err(|error| map("commit", &subject, error))
        })
    }

    fn record<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>>> {
        Box::pin(async move {
            let mut reader = self.reader("record", key).await?;
            let row = sqlx::query("SELECT value FROM records WHERE key = ?1")
                .bind(key)
                .fetch_optional(reader.conn().await)
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
            let mut reader = self.reader("records", prefix).await?;
            let rows = RECORDS
                .query(prefix)
                .fetch_all(reader.conn().await)
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
            let mut reader = self.reader("read_log", log).await?;
            let rows = sqlx::query(
                "SELECT seq, value FROM logs WHERE log = ?1 AND seq >= ?2 ORDER BY seq",
            )
            .bind(log)
            .bind(from)
            .fetch_all(reader.conn().await)
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
            let mut reader = self.reader("next_seq", log).await?;
            stored_next(reader.conn().await, "next_seq", log).await
        })
    }

    fn acquire_lease<'a>(&'a self, request: LeaseRequest<'a>) -> BoxFuture<'a, Result<Lease>> {
        Box::pin(async move {
            let name = request.name;
            let bad = |error| map("acquire_lease", name, error);
            // Two calls: open the transaction and read the lease; then write and commit.
            let mut writer = self.writer("acquire_lease", name).await?;
            let rows = writer
                .open_script(format!(
                    "BEGIN IMMEDIATE;\nSELECT holder, epoch, expires_at_ms FROM leases WHERE name = {}",
                    text(name)
                ))
                .await
                .map_err(bad)?;
            // What to write to end it; on any error the transaction is rolled back at once (it
            // holds the file's write lock).
            let decided = rows
                .first()
                .map(|row| lease_row(name, row))
                .transpose()
                .and_then(|current| {
                    let lease = decide_lease(current.as_ref(), &request)?;
                    let mut end = String::new();
                    if current.as_ref() != Some(&lease) {
                        end = format!(
                            "INSERT INTO leases (name, holder, epoch, expires_at_ms) \
                             VALUES ({}, {}, {}, {}) ON CONFLICT (name) DO UPDATE SET \
                             holder = excluded.holder, epoch = excluded.epoch, \
                             expires_at_ms = excluded.expires_at_ms;\n",
                            text(name),
                            text(&lease.holder),
                            to_i64("acquire_lease", name, lease.epoch)?,
                            to_i64("acquire_lease", name, lease.expires_at_ms)?,
                        );
                    }
                    end.push_str("COMMIT;");
                    Ok((lease, end))
                });
            let (lease, end) = match decided {
                Ok(decided) => decided,
                Err(error) => {
                    writer
                        .end_script("ROLLBACK".to_owned())
                        .await
                        .map_err(bad)?;
                    return Err(error);
                }
            };
            writer.end_script(end).await.map_err(bad)?;
            Ok(lease)
        })
    }

    fn release_lease<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let name = lease.name.as_str();
            let epoch = to_i64("release_lease", name, lease.epoch)?;
            // Expired rather than deleted, so the next grant's epoch is still higher than every
            // epoch a fenced writer may hold; only by its holder at its epoch (else nothing).
            let sql = format!(
                "BEGIN IMMEDIATE;\nUPDATE leases SET expires_at_ms = 0 WHERE name = {} AND \
                 epoch = {epoch} AND holder = {};\nCOMMIT;",
                text(name),
                text(&lease.holder),
            );
            let mut writer = self.writer("release_lease", name).await?;
            writer
                .run_script(sql)
                .await
                .map_err(|error| map("release_lease", name, error))
        })
    }

    fn runnable<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Vec<String>>> {
        Box::pin(async move {
            let mut reader = self.reader("runnable", prefix).await?;
            let rows = RUNNABLE
                .query(prefix)
                .fetch_all(reader.conn().await)
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
            let mut reader = self.reader("lease", name).await?;
            stored_lease(reader.conn().await, "lease", name).await
        })
    }
}
