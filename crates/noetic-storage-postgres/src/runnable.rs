//! Runnable marks on table `runnable`: the work queue of hosts sharing the database.
//!
//! A commit that marks a name inserts its row (a name already marked keeps its `place`) and
//! `NOTIFY`s channel [`CHANNEL`] with the name, delivered when the commit is. A claim is one
//! transaction: the oldest marked row whose lease is free, locked `FOR UPDATE SKIP LOCKED` (hosts
//! claiming at once skip each other's rows instead of queueing on them), then the lease granted with
//! the same rule as [`DurableStore::acquire_lease`](noetic_core::DurableStore::acquire_lease).
//! `LISTEN` runs on one connection per store, in a task that forwards names to every waiter; it is
//! only a wake-up — the rows are the truth, and a notification lost while the listener reconnects
//! costs a waiter its poll interval, nothing more. The same connection listens on
//! [`ANNOUNCE_CHANNEL`] for the names commits announce (a thread's event log that grew), which wake
//! `wait_announced` waiters (the hosts relaying that log).

use std::sync::Arc;
use std::time::Duration;

use noetic_core::adapter::durable::{Lease, LeaseRequest, decide_lease};
use noetic_core::{Error, Result};
use sqlx::postgres::PgListener;
use sqlx::{PgConnection, Row};
use tokio::sync::{broadcast, watch};

use crate::durable::{lock_lease, to_caller, write_lease};
use crate::error::{corrupt, map};
use noetic_core::adapter::durable::prefix_upper;

use crate::{LeaseClock, PostgresStorage, PrefixSql};

/// The channel marks are announced on (payload: the name).
pub const CHANNEL: &str = "noetic_runnable";
/// The channel [`Commit::announce`](noetic_core::adapter::durable::Commit::announce)d names go
/// on (payload: the name).
pub const ANNOUNCE_CHANNEL: &str = "noetic_announce";

const ANNOUNCE: &str = "SELECT pg_notify($2, n) FROM UNNEST($1::text[]) AS n";

/// Announces `names` inside the commit's transaction (delivered when it commits).
pub(crate) async fn announce(conn: &mut PgConnection, names: &[String]) -> Result<()> {
    let Some(first) = names.first() else {
        return Ok(());
    };
    sqlx::query(ANNOUNCE)
        .bind(names)
        .bind(ANNOUNCE_CHANNEL)
        .execute(&mut *conn)
        .await
        .map_err(|error| map("announce", first, error))?;
    Ok(())
}

/// Marks in the commit's order (their places follow it), announcing each. A name already marked
/// keeps its place, but its row is still written (`DO UPDATE`, not `DO NOTHING`): that locks it until
/// this commit ends, so a clear of the same name in another transaction waits for this commit instead
/// of deleting the mark under it. Otherwise a host letting a thread go (clear the mark, then read the
/// messages) could miss a message committed just after its read, with the mark gone: nobody would be
/// told to run it.
const MARK: &str = "WITH m AS (INSERT INTO runnable (name) \
         SELECT n FROM UNNEST($1::text[]) WITH ORDINALITY AS u(n, i) ORDER BY i \
         ON CONFLICT (name) DO UPDATE SET name = excluded.name) \
     SELECT pg_notify($2, n) FROM UNNEST($1::text[]) AS n";
const CLEAR: &str = "DELETE FROM runnable WHERE name = ANY($1)";
const LIST: PrefixSql = PrefixSql {
    bounded: "SELECT name FROM runnable WHERE name >= $1 AND name < $2 ORDER BY place",
    open: "SELECT name FROM runnable WHERE name >= $1 ORDER BY place",
};
/// The oldest marked name under a prefix (`$1`, upper bound `$2`) whose lease is free at `$3` (the
/// caller's clock) or, when `$3` is null, at the database's clock; its mark row locked, rows other
/// claimers hold skipped.
const PICK: &str = "SELECT r.name FROM runnable r \
     WHERE r.name >= $1 AND ($2::text IS NULL OR r.name < $2) \
     AND NOT EXISTS (SELECT 1 FROM leases l WHERE l.name = r.name AND l.expires_at_ms > \
         COALESCE($3, (extract(epoch from clock_timestamp()) * 1000)::bigint)) \
     ORDER BY r.place LIMIT 1 FOR UPDATE OF r SKIP LOCKED";

/// How many names a claim tries when the leases it picks turn out live (renewed meanwhile).
const CLAIM_TRIES: usize = 8;

/// Applies a commit's runnable parts inside its transaction: clears, then marks in the commit's
/// order (a name given twice marked once), announcing each mark.
pub(crate) async fn apply(
    conn: &mut PgConnection,
    clear: &[String],
    mark: &[String],
) -> Result<()> {
    if let Some(first) = clear.first() {
        sqlx::query(CLEAR)
            .bind(clear)
            .execute(&mut *conn)
            .await
            .map_err(|error| map("clear_runnable", first, error))?;
    }
    if let Some(first) = mark.first() {
        let mut names: Vec<&str> = Vec::with_capacity(mark.len());
        for name in mark {
            if !names.contains(&name.as_str()) {
                names.push(name);
            }
        }
        sqlx::query(MARK)
            .bind(names)
            .bind(CHANNEL)
            .execute(&mut *conn)
            .await
            .map_err(|error| map("mark_runnable", first, error))?;
    }
    Ok(())
}

/// The names marked under `prefix`, oldest first.
pub(crate) async fn list(store: &PostgresStorage, prefix: &str) -> Result<Vec<String>> {
    let rows = LIST
        .query(prefix)
        .fetch_all(store.pool())
        .await
        .map_err(|error| map("runnable", prefix, error))?;
    rows.iter()
        .map(|row| {
            row.try_get::<String, _>(0)
                .map_err(|error| corrupt("runnable", prefix, error))
        })
        .collect()
}

/// Claims the oldest marked name under `request.name` whose lease is free (see the module docs).
pub(crate) async fn claim(
    store: &PostgresStorage,
    request: LeaseRequest<'_>,
) -> Result<Option<Lease>> {
    let prefix = request.name;
    let upper = prefix_upper(prefix);
    let database = store.lease_clock() != LeaseClock::Caller;
    let caller_now = if database {
        None
    } else {
        Some(crate::to_i64("claim_runnable", prefix, request.now_ms)?)
    };
    for _ in 0..CLAIM_TRIES {
        let mut tx = store
            .pool()
            .begin()
            .await
            .map_err(|error| map("claim_runnable", prefix, error))?;
        let picked: Option<String> = sqlx::query_scalar(PICK)
            .bind(prefix)
            .bind(upper.as_deref())
            .bind(caller_now)
            .fetch_optional(&mut *tx)
            .await
            .map_err(|error| map("claim_runnable", prefix, error))?;
        let Some(name) = picked else {
            return Ok(None);
        };
        let (current, db_now) = lock_lease(&mut tx, "claim_runnable", &name).await?;
        let now = if database { db_now } else { request.now_ms };
        let lease = match decide_lease(current.as_ref(), &request.named(&name).at(now)) {
            Ok(lease) => lease,
            // Renewed by its holder since the pick: the rollback unlocks the mark; the next pick
            // sees the live lease and passes it by.
            Err(Error::LeaseHeld { .. }) => continue,
            Err(error) => return Err(error),
        };
        write_lease(&mut tx, "claim_runnable", &lease).await?;
        tx.commit()
            .await
            .map_err(|error| map("claim_runnable", &name, error))?;
        if !database {
            return Ok(Some(lease));
        }
        let expires_at_ms = to_caller(lease.expires_at_ms, db_now, request.now_ms);
        return Ok(Some(Lease::new(
            lease.name,
            lease.holder,
            lease.epoch,
            expires_at_ms,
        )));
    }
    Ok(None)
}

/// The wake-up side of a store: the listening task's broadcast, started on first use; the task
/// stops when the store's last clone is dropped (with it, `_stop`).
pub(crate) struct Wake {
    names: broadcast::Sender<Arc<str>>,
    announced: broadcast::Sender<Arc<str>>,
    _stop: watch::Sender<()>,
}

impl Wake {
    /// Starts the listening task for `store`'s database.
    pub(crate) fn start(store: &PostgresStorage) -> Wake {
        let (names, _) = broadcast::channel(1024);
        let (announced, _) = broadcast::channel(1024);
        let (stop_sender, stop) = watch::channel(());
        tokio::spawn(listen(
            store.pool().clone(),
            store.location().to_owned(),
            (names.clone(), announced.clone()),
            stop,
        ));
        Wake {
            names,
            announced,
            _stop: stop_sender,
        }
    }

    /// Waits (registered now) until `name` is announced, at most `timeout`; `true` when it was.
    /// A waiter that fell behind the channel counts as woken (it looks at the data anyway).
    pub(crate) fn wait_announced(
        &self,
        name: &str,
        timeout: Duration,
    ) -> impl std::future::Future<Output = bool> + Send + 'static {
        let mut announced = self.announced.subscribe();
        let name: Arc<str> = Arc::from(name);
        async move {
            tokio::time::timeout(timeout, async {
                loop {
                    match announced.recv().await {
                        Ok(said) if said == name => return true,
                        Ok(_) => {}
                        Err(broadcast::error::RecvError::Lagged(_)) => return true,
                        Err(broadcast::error::RecvError::Closed) => {
                            std::future::pending::<()>().await;
                        }
                    }
                }
            })
            .await
            .unwrap_or(false)
        }
    }

    /// Waits at most `timeout` for marks: the names announced, or none (look anyway) after the
    /// timeout or when announcements were missed.
    pub(crate) fn wait(
        &self,
        timeout: Duration,
    ) -> impl std::future::Future<Output = Vec<String>> + Send + 'static {
        // Subscribed now, when the wait is made: a mark announced before it is awaited still wakes.
        let mut names = self.names.subscribe();
        async move {
            let mut woken = Vec::new();
            match tokio::time::timeout(timeout, names.recv()).await {
                Ok(Ok(name)) => woken.push(name.to_string()),
                // Missed some (lagged) or the task is gone: the caller looks at every mark.
                Ok(Err(_)) | Err(_) => return woken,
            }
            while let Ok(name) = names.try_recv() {
                woken.push(name.to_string());
            }
            woken
        }
    }
}

/// The listening task: one connection `LISTEN`ing on [`CHANNEL`], reconnecting after a failure
/// (a second later), forwarding every name until `stop` closes.
/// Where notifications go: runnable marks, announced names.
type Senders = (broadcast::Sender<Arc<str>>, broadcast::Sender<Arc<str>>);

async fn listen(
    pool: sqlx::PgPool,
    location: String,
    senders: Senders,
    mut stop: watch::Receiver<()>,
) {
    loop {
        let failed = tokio::select! {
            _ = stop.changed() => return,
            failed = listen_once(&pool, &senders) => failed,
        };
        tracing::warn!(
            database = %location,
            error = %map("listen", CHANNEL, failed),
            "LISTEN for runnable marks failed; polling until it reconnects"
        );
        tokio::select! {
            _ = stop.changed() => return,
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

/// Listens until the connection fails; returns the failure.
async fn listen_once(pool: &sqlx::PgPool, (names, announced): &Senders) -> sqlx::Error {
    let mut listener = match PgListener::connect_with(pool).await {
        Ok(listener) => listener,
        Err(error) => return error,
    };
    if let Err(error) = listener.listen_all([CHANNEL, ANNOUNCE_CHANNEL]).await {
        return error;
    }
    loop {
        match listener.recv().await {
            Ok(notification) => {
                let payload = Arc::from(notification.payload());
                let _ = if notification.channel() == ANNOUNCE_CHANNEL {
                    announced.send(payload)
                } else {
                    names.send(payload)
                };
            }
            Err(error) => return error,
        }
    }
}
