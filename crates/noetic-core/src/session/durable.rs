//! Durable sessions: a thread's accepted messages, history and unfinished turn in a
//! [`DurableStore`], so a harness started on the same storage carries on where a crashed one stopped.
//!
//! Per thread `T`:
//!
//! | name | kind | what |
//! |---|---|---|
//! | `thread/T/messages` | log | every accepted message (any delivery mode), appended before `execute` returns |
//! | `thread/T/h/G/items` | log | the history, generation `G` (a new generation when a turn rewrote it) |
//! | `thread/T/record` | record | [`ThreadRecord`]: which messages are settled or queued, the turn in flight, spend |
//! | `thread/T` | lease | one writer per thread, fenced by its epoch |
//! | `thread/T/engine-events` | record | only for an engine's turns (`engine_record.rs`): the steps whose events were written |
//!
//! A turn is a durable execution whose context starts with the thread's history (its header's
//! `base` names the history log), so its checkpoints write only the turn's own items. When the turn
//! ends, its items are appended to the history log, the record settles its messages and the
//! execution's records are cleared — in one commit.
//!
//! Recovery reads the record and the messages from the oldest one not settled: the turn in flight is
//! resumed from its execution's checkpoint (its batch, plus every steer sent after it started that
//! its checkpoint does not list as taken); the other unsettled messages are queued in order.

use std::collections::HashSet;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::DeliveryMode;
use super::runner::Message;
use crate::adapter::durable::{Commit, DurableStore, Lease, LeaseRequest, LogEntry, SeqConflict};
use crate::checkpoint::{Base, Durability, now_ms, parse, read_items, renew_if_due, to_bytes};
use crate::item::Item;
use crate::usage::Spend;
use crate::{Error, Result};

/// The schema version of thread records and message rows.
pub(super) const THREAD_SCHEMA_VERSION: u32 = 1;

pub(super) fn record_key(thread_id: &str) -> String {
    format!("thread/{thread_id}/record")
}

pub(super) fn messages_log(thread_id: &str) -> String {
    format!("thread/{thread_id}/messages")
}

pub(super) fn history_log(thread_id: &str, generation: u64) -> String {
    format!("thread/{thread_id}/h/{generation}/items")
}

fn history_prefix(thread_id: &str, generation: u64) -> String {
    format!("thread/{thread_id}/h/{generation}/")
}

fn lease_name(thread_id: &str) -> String {
    format!("thread/{thread_id}")
}

/// What names a thread in a checkpoint error (its records live under this prefix).
pub(super) fn subject(thread_id: &str) -> String {
    format!("thread/{thread_id}")
}

/// A thread's record (`thread/T/record`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ThreadRecord {
    pub(super) schema_version: u32,
    pub(super) thread_id: String,
    pub(super) history_generation: u64,
    pub(super) history_count: u64,
    /// Every message below this sequence number is settled, except those in `queued` and in
    /// `turn.messages`.
    pub(super) settled_through: u64,
    /// Messages still waiting for a turn, in queue order.
    #[serde(default)]
    pub(super) queued: Vec<u64>,
    /// The turn in flight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) turn: Option<TurnRecord>,
    /// Every turn's spend so far.
    #[serde(default)]
    pub(super) spend: Spend,
    /// The last completed turn's output and spend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) last: Option<LastRecord>,
}

impl ThreadRecord {
    /// The record of a thread nothing was recorded of yet.
    pub(super) fn new(thread_id: &str) -> Self {
        ThreadRecord {
            schema_version: THREAD_SCHEMA_VERSION,
            thread_id: thread_id.to_owned(),
            history_generation: 0,
            history_count: 0,
            settled_through: 0,
            queued: Vec::new(),
            turn: None,
            spend: Spend::default(),
            last: None,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct TurnRecord {
    turn_id: String,
    execution_id: String,
    /// The turn's batch: the messages it started with.
    messages: Vec<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct LastRecord {
    pub(crate) output: Value,
    pub(crate) spend: Spend,
    /// The turn failed (its output is null then).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) failed: Option<FailedTurn>,
}

/// A failed turn's error as stored: its stable code and its message.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct FailedTurn {
    code: String,
    message: String,
}

impl FailedTurn {
    pub(super) fn new(code: String, message: String) -> Self {
        FailedTurn { code, message }
    }

    pub(crate) fn of(error: &Error) -> Self {
        FailedTurn {
            code: error.code().to_owned(),
            message: error.to_string(),
        }
    }

    /// The error read back: its code is the stored one (`code()` gives it), its text the stored
    /// message.
    pub(crate) fn into_error(self) -> Error {
        Error::Adapter {
            code: crate::error::static_code(&self.code),
            source: self.message.into(),
        }
    }
}

/// One accepted message (`thread/T/messages`).
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct MessageRow {
    pub(super) schema_version: u32,
    pub(super) id: String,
    pub(super) mode: DeliveryMode,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) resource_id: Option<String>,
    pub(super) items: Vec<Item>,
}

/// A thread's durable side: the store, and the writer that serializes every write to the thread.
pub(crate) struct ThreadJournal {
    durability: Durability,
    thread_id: String,
    writer: tokio::sync::Mutex<ThreadWriter>,
}

/// What the thread's writes track. Held across each write, so accepts, turn starts and turn ends
/// reach the store in the order they happen in memory.
pub(crate) struct ThreadWriter {
    next_seq: u64,
    /// Whether the record is in the store (a new thread's first accept writes it).
    stored: bool,
    record: ThreadRecord,
    lease: Lease,
    /// A turn's end could not be recorded: the store still has that turn in flight, so the thread
    /// must not be let go as if it had no work (its host keeps the mark for another to resume it).
    pub(crate) end_unrecorded: bool,
}

/// A thread as read back.
pub(crate) struct LoadedThread {
    pub(crate) journal: ThreadJournal,
    pub(crate) history: Vec<Item>,
    pub(crate) queue: Vec<Message>,
    pub(crate) resume: Option<ResumeTurn>,
    pub(crate) spend: Spend,
    pub(crate) last: Option<LastRecord>,
    /// With an event log: where its writer starts.
    pub(crate) events: Option<EventsStart>,
}

/// Where a driving host's event log writer starts.
pub(crate) struct EventsStart {
    pub(crate) store: Arc<dyn DurableStore>,
    /// The log's next sequence number.
    pub(crate) next: u64,
    /// The thread's lease, which every append is fenced by.
    pub(crate) fence: crate::adapter::durable::Fence,
    pub(crate) options: super::EventLogOptions,
}

/// The turn a crash interrupted.
pub(crate) struct ResumeTurn {
    pub(crate) turn_id: String,
    pub(crate) execution_id: String,
    /// Its batch.
    pub(crate) messages: Vec<Message>,
    /// Steers sent after it started (some may have been taken already: the checkpoint says).
    pub(crate) steers: Vec<Message>,
}

/// What ends a turn in the store.
pub(crate) struct TurnEnd {
    pub(crate) execution_id: String,
    /// Whether `entries` are the whole history (a new generation) rather than the turn's new items.
    pub(crate) replace: bool,
    /// The history items to write, serialized.
    pub(crate) entries: Result<Vec<Vec<u8>>>,
    /// The history's length after the turn.
    pub(crate) history_count: u64,
    /// The queue after it, by sequence number.
    pub(crate) queued: Vec<u64>,
    /// The thread's whole spend.
    pub(crate) spend: Spend,
    pub(crate) last: Option<LastRecord>,
}

impl ThreadJournal {
    /// Takes the thread's lease and reads it back.
    ///
    /// # Errors
    /// [`Error::LeaseHeld`] while another runtime holds the thread; [`Error::CheckpointCorrupt`]
    /// (naming `thread/T` and the row) or [`Error::CheckpointSchemaMismatch`] for a bad row; storage
    /// errors.
    pub(crate) async fn load(durability: &Durability, thread_id: &str) -> Result<LoadedThread> {
        let store = &durability.store;
        let lease = store
            .acquire_lease(LeaseRequest::new(
                &lease_name(thread_id),
                &durability.holder,
                durability.lease_ttl.as_millis() as u64,
                now_ms(),
            ))
            .await?;
        let read = Self::read(durability, thread_id, lease.clone()).await;
        if read.is_err()
            && let Err(error) = store.release_lease(&lease).await
        {
            tracing::warn!(thread_id, %error, "could not release the thread lease");
        }
        read
    }

    /// Reads the thread back for a host that claimed it ([`DurableStore::claim_runnable`] gave it
    /// `lease`); releases the lease when it cannot be read.
    ///
    /// # Errors
    /// As [`ThreadJournal::load`], without `LEASE_HELD`.
    pub(crate) async fn load_claimed(
        durability: &Durability,
        thread_id: &str,
        lease: Lease,
    ) -> Result<LoadedThread> {
        let read = Self::read(durability, thread_id, lease.clone()).await;
        if read.is_err()
            && let Err(error) = durability.store.release_lease(&lease).await
        {
            tracing::warn!(thread_id, %error, "could not release the thread lease");
        }
        read
    }

    /// Reads the thread back, holding `lease`.
    async fn read(durability: &Durability, thread_id: &str, lease: Lease) -> Result<LoadedThread> {
        let store = &durability.store;
        let subject = subject(thread_id);
        let key = record_key(thread_id);
        let stored_record = store.record(&key).await?;
        let stored = stored_record.is_some();
        let record: ThreadRecord = match stored_record {
            Some(bytes) => parse(&subject, &key, &bytes)?,
            None => ThreadRecord::new(thread_id),
        };

        let log = history_log(thread_id, record.history_generation);
        let mut history = Vec::with_capacity(record.history_count as usize);
        read_items(
            &**store,
            &subject,
            &log,
            Some(record.history_count),
            &mut history,
        )
        .await?;
        if history.len() as u64 != record.history_count {
            return Err(corrupt(
                &subject,
                log,
                format!(
                    "{} items in the history log, {} in the record",
                    history.len(),
                    record.history_count
                ),
            ));
        }

        let log = messages_log(thread_id);
        let batch: &[u64] = record.turn.as_ref().map_or(&[], |turn| &turn.messages);
        let from = record
            .queued
            .iter()
            .chain(batch)
            .copied()
            .fold(record.settled_through, u64::min);
        // The head is read before the entries: a host sharing the thread may append meanwhile, and
        // what it appends after the head was read is then among the entries (or left for a refresh),
        // never counted as seen without being read.
        let mut next_seq = store.next_seq(&log).await?;
        let mut unsettled = Vec::new();
        for entry in store.read_log(&log, from).await? {
            next_seq = next_seq.max(entry.seq + 1);
            unsettled.push(message_of(&subject, &log, entry)?);
        }

        let seq_of = |message: &Message| message.seq.unwrap_or(u64::MAX);
        let pick = |seqs: &[u64], unsettled: &[Message]| -> Vec<Message> {
            seqs.iter()
                .filter_map(|seq| unsettled.iter().find(|message| seq_of(message) == *seq))
                .cloned()
                .collect()
        };
        let mut queue = pick(&record.queued, &unsettled);
        let claimed: HashSet<u64> = record.queued.iter().chain(batch).copied().collect();
        let fresh = unsettled.iter().filter(|message| {
            seq_of(message) >= record.settled_through && !claimed.contains(&seq_of(message))
        });
        let resume = match &record.turn {
            Some(turn) => {
                let mut steers = Vec::new();
                for message in fresh {
                    if matches!(
                        message.mode,
                        DeliveryMode::BetweenRounds | DeliveryMode::NextItem
                    ) {
                        steers.push(message.clone());
                    } else {
                        queue.push(message.clone());
                    }
                }
                Some(ResumeTurn {
                    turn_id: turn.turn_id.clone(),
                    execution_id: turn.execution_id.clone(),
                    messages: pick(&turn.messages, &unsettled),
                    steers,
                })
            }
            None => {
                queue.extend(fresh.cloned());
                None
            }
        };
        let events = match durability.event_log {
            Some(options) => Some(EventsStart {
                store: store.clone(),
                next: store
                    .next_seq(&super::event_log::events_log(thread_id))
                    .await?,
                fence: lease.fence(),
                options,
            }),
            None => None,
        };
        Ok(LoadedThread {
            events,
            history,
            queue,
            resume,
            spend: record.spend,
            last: record.last.clone(),
            journal: ThreadJournal {
                durability: durability.clone(),
                thread_id: thread_id.to_owned(),
                writer: tokio::sync::Mutex::new(ThreadWriter {
                    next_seq,
                    stored,
                    record,
                    lease,
                    end_unrecorded: false,
                }),
            },
        })
    }

    /// The writer, held across one write (or an accept and its enqueue).
    pub(crate) async fn writer(&self) -> tokio::sync::MutexGuard<'_, ThreadWriter> {
        self.writer.lock().await
    }

    /// The writer when no write holds it.
    pub(crate) fn try_writer(&self) -> Option<tokio::sync::MutexGuard<'_, ThreadWriter>> {
        self.writer.try_lock().ok()
    }

    /// Where a turn's context starts: the thread's current history log.
    pub(crate) fn base(&self, writer: &ThreadWriter) -> Base {
        Base {
            log: history_log(&self.thread_id, writer.record.history_generation),
            count: writer.record.history_count,
        }
    }

    async fn commit(&self, writer: &mut ThreadWriter, commit: Commit) -> Result<()> {
        self.renew(writer).await?;
        self.durability
            .store
            .commit(commit.fenced(Some(writer.lease.fence())))
            .await
    }

    /// Renews the thread's lease when half of it has passed.
    ///
    /// # Errors
    /// [`Error::LeaseLost`] when another runtime took the thread; storage errors.
    pub(crate) async fn renew(&self, writer: &mut ThreadWriter) -> Result<()> {
        if let Some(renewed) = renew_if_due(&self.durability, &writer.lease).await? {
            writer.lease = renewed;
        }
        Ok(())
    }

    /// Records an accepted message; returns its sequence number.
    pub(crate) async fn accept(&self, writer: &mut ThreadWriter, message: &Message) -> Result<u64> {
        let row = MessageRow {
            schema_version: THREAD_SCHEMA_VERSION,
            id: message.id.clone(),
            mode: message.mode,
            resource_id: message.resource_id.clone(),
            items: message.items.clone(),
        };
        let seq = writer.next_seq;
        let mut commit =
            Commit::new().append(messages_log(&self.thread_id), seq, vec![to_bytes(&row)?]);
        if !writer.stored {
            // So `recover` finds the thread even when it crashed before its first turn started.
            commit = commit.put(record_key(&self.thread_id), to_bytes(&writer.record)?);
        }
        self.commit(writer, commit).await?;
        writer.next_seq += 1;
        writer.stored = true;
        Ok(seq)
    }

    /// Records that turn `turn_id` (execution `execution_id`) started with the messages `batch`;
    /// `queued` is what still waits.
    pub(crate) async fn begin_turn(
        &self,
        writer: &mut ThreadWriter,
        turn_id: &str,
        execution_id: &str,
        batch: Vec<u64>,
        queued: Vec<u64>,
    ) -> Result<()> {
        let mut record = writer.record.clone();
        record.turn = Some(TurnRecord {
            turn_id: turn_id.to_owned(),
            execution_id: execution_id.to_owned(),
            messages: batch,
        });
        record.settled_through = writer.next_seq;
        record.queued = queued;
        let commit = Commit::new().put(record_key(&self.thread_id), to_bytes(&record)?);
        self.commit(writer, commit).await?;
        writer.record = record;
        writer.stored = true;
        Ok(())
    }

    /// Records a turn's end in one commit: its items appended to the history (or a new history
    /// generation when the turn rewrote what was there), its messages settled, the queue, the spend,
    /// and the turn's execution cleared.
    pub(crate) async fn end_turn(&self, writer: &mut ThreadWriter, end: TurnEnd) -> Result<()> {
        let mut record = writer.record.clone();
        let entries = match end.entries {
            Ok(entries) => entries,
            Err(error) => {
                writer.end_unrecorded = true;
                return Err(error);
            }
        };
        let mut commit = Commit::new();
        let first_seq = if end.replace {
            commit =
                commit.clear_prefix(history_prefix(&self.thread_id, record.history_generation));
            record.history_generation += 1;
            0
        } else {
            record.history_count
        };
        commit = commit.append(
            history_log(&self.thread_id, record.history_generation),
            first_seq,
            entries,
        );
        record.history_count = end.history_count;
        record.turn = None;
        record.settled_through = writer.next_seq;
        record.queued = end.queued;
        record.spend = end.spend;
        if end.last.is_some() {
            record.last = end.last;
        }
        commit = commit
            .put(record_key(&self.thread_id), to_bytes(&record)?)
            .clear_prefix(crate::checkpoint::record::prefix(&end.execution_id))
            // The turn's execution id is never used again: its lease row goes too.
            .drop_lease(crate::checkpoint::record::lease_name(&end.execution_id));
        let recorded = self.commit(writer, commit).await;
        // Another host that took the thread over owns its end; any other failure leaves the turn in
        // flight in the store.
        writer.end_unrecorded = recorded
            .as_ref()
            .is_err_and(|error| !matches!(error, Error::LeaseLost { .. }));
        recorded?;
        writer.record = record;
        writer.stored = true;
        Ok(())
    }

    /// Reads the messages other hosts accepted since this one last looked (shared threads); the
    /// caller queues them.
    ///
    /// # Errors
    /// [`Error::CheckpointCorrupt`] naming a row that does not parse; storage errors.
    pub(crate) async fn refresh(&self, writer: &mut ThreadWriter) -> Result<Vec<Message>> {
        let log = messages_log(&self.thread_id);
        let subject = subject(&self.thread_id);
        let mut fresh = Vec::new();
        for entry in self
            .durability
            .store
            .read_log(&log, writer.next_seq)
            .await?
        {
            writer.next_seq = writer.next_seq.max(entry.seq + 1);
            fresh.push(message_of(&subject, &log, entry)?);
        }
        Ok(fresh)
    }

    /// Lets the thread go when it has no work left (shared threads): clears its runnable mark, then
    /// looks for messages accepted meanwhile. Returns them (and marks the thread again) when there
    /// are some: the caller keeps the thread and queues them. Otherwise the caller releases it.
    ///
    /// A message accepted before the mark is cleared is found by the look that follows; one accepted
    /// after marks the thread again, so a host claims it once this one releases it.
    ///
    /// # Errors
    /// [`Error::LeaseLost`] when another host took the thread; storage errors.
    pub(crate) async fn let_go(&self, writer: &mut ThreadWriter) -> Result<Vec<Message>> {
        let lease = lease_name(&self.thread_id);
        self.commit(writer, Commit::new().clear_runnable(lease.clone()))
            .await?;
        let fresh = self.refresh(writer).await?;
        if !fresh.is_empty() {
            self.commit(writer, Commit::new().mark_runnable(lease))
                .await?;
        }
        Ok(fresh)
    }

    /// Releases the thread's lease (when its session is evicted).
    pub(crate) async fn release(&self, writer: &ThreadWriter) {
        if let Err(error) = self.durability.store.release_lease(&writer.lease).await {
            tracing::warn!(thread_id = %self.thread_id, %error, "could not release the thread lease");
        }
    }
}

/// Records `message` on a thread shared with other hosts, without holding the thread: appended to
/// its message log at the log's next sequence number (again at the new one when another host
/// appended first) and the thread marked runnable, in one commit. Returns its sequence number.
///
/// # Errors
/// Storage errors. Nothing is recorded then.
pub(crate) async fn accept_shared(
    durability: &Durability,
    thread_id: &str,
    message: &Message,
) -> Result<u64> {
    let row = to_bytes(&MessageRow {
        schema_version: THREAD_SCHEMA_VERSION,
        id: message.id.clone(),
        mode: message.mode,
        resource_id: message.resource_id.clone(),
        items: message.items.clone(),
    })?;
    let log = messages_log(thread_id);
    let store = &durability.store;
    let mut seq = store.next_seq(&log).await?;
    loop {
        let commit = Commit::new()
            .append(log.clone(), seq, vec![row.clone()])
            .mark_runnable(lease_name(thread_id));
        match store.commit(commit).await {
            Ok(()) => return Ok(seq),
            // Another host appended first: every retry follows someone's success.
            Err(error) => match SeqConflict::of(&error, &log) {
                Some(conflict) => seq = conflict.next,
                None => return Err(error),
            },
        }
    }
}

/// A thread as its store holds it, read without taking it: what any host sharing the thread space can
/// see of a thread another host runs ([`crate::AgentHarness::stored_thread`]).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct StoredThread {
    /// The thread.
    pub thread_id: String,
    /// Its history as the last settled turn left it (a turn in flight adds to it when it ends).
    pub history: Vec<Item>,
    /// How many messages were ever accepted on it.
    pub accepted: u64,
    /// How many accepted messages no turn has settled yet: queued, in the turn in flight, or not yet
    /// seen by the host running the thread.
    pub pending: u64,
    /// The id of the turn in flight, if one is.
    pub turn_in_flight: Option<String>,
    /// Every turn's spend so far.
    pub spend: Spend,
    /// The last settled turn's output (`None` before the first, or when it failed).
    pub last_output: Option<Value>,
    /// The last settled turn's error code and message, when it failed.
    pub last_error: Option<(String, String)>,
}

/// Reads `thread_id` without taking it; `None` for a thread nothing was recorded of.
pub(crate) async fn read_stored(
    durability: &Durability,
    thread_id: &str,
) -> Result<Option<StoredThread>> {
    let store = &durability.store;
    let subject = subject(thread_id);
    let key = record_key(thread_id);
    let accepted = store.next_seq(&messages_log(thread_id)).await?;
    let Some(bytes) = store.record(&key).await? else {
        return Ok((accepted > 0).then(|| StoredThread {
            thread_id: thread_id.to_owned(),
            history: Vec::new(),
            accepted,
            pending: accepted,
            turn_in_flight: None,
            spend: Spend::default(),
            last_output: None,
            last_error: None,
        }));
    };
    let record: ThreadRecord = parse(&subject, &key, &bytes)?;
    let mut history = Vec::with_capacity(record.history_count as usize);
    let log = history_log(thread_id, record.history_generation);
    read_items(
        &**store,
        &subject,
        &log,
        Some(record.history_count),
        &mut history,
    )
    .await?;
    let batch = record.turn.as_ref().map_or(0, |turn| turn.messages.len());
    let (last_output, last_error) = match record.last {
        Some(LastRecord {
            failed: Some(failed),
            ..
        }) => (None, Some((failed.code, failed.message))),
        Some(last) => (Some(last.output), None),
        None => (None, None),
    };
    Ok(Some(StoredThread {
        thread_id: thread_id.to_owned(),
        history,
        accepted,
        pending: accepted.saturating_sub(record.settled_through)
            + (record.queued.len() + batch) as u64,
        turn_in_flight: record.turn.map(|turn| turn.turn_id),
        spend: record.spend,
        last_output,
        last_error,
    }))
}

/// One entry of a thread's message log, as a queued message.
fn message_of(subject: &str, log: &str, entry: LogEntry) -> Result<Message> {
    let key = format!("{log}#{}", entry.seq);
    let row: MessageRow = parse(subject, &key, &entry.value)?;
    Ok(Message {
        id: row.id,
        items: row.items,
        mode: row.mode,
        resource_id: row.resource_id,
        seq: Some(entry.seq),
    })
}

/// Thread `thread_id`'s last turn as the store has it once the thread has no work left (no turn in
/// flight, nothing pending): `Ok(None)` while it has, or before its first turn ended.
///
/// # Errors
/// [`Error::NotFound`] for a thread nothing was recorded of; bad rows; storage errors.
pub(crate) async fn settled_last(
    durability: &Durability,
    thread_id: &str,
) -> Result<Option<LastRecord>> {
    let store = &durability.store;
    let accepted = store.next_seq(&messages_log(thread_id)).await?;
    let key = record_key(thread_id);
    let Some(bytes) = store.record(&key).await? else {
        if accepted == 0 {
            return Err(Error::NotFound {
                kind: "thread",
                id: thread_id.to_owned(),
                hint: "no message was accepted on it",
            });
        }
        return Ok(None);
    };
    let record: ThreadRecord = parse(&subject(thread_id), &key, &bytes)?;
    let settled =
        record.turn.is_none() && record.queued.is_empty() && accepted <= record.settled_through;
    Ok(record.last.filter(|_| settled))
}

/// The ids of every thread with a record in the store, and whether each has work left (a turn in
/// flight, queued messages, or messages accepted after the last settlement).
pub(crate) async fn threads_with_work(durability: &Durability) -> Result<Vec<String>> {
    let store = &durability.store;
    let mut threads = Vec::new();
    for (key, bytes) in store.records("thread/").await? {
        let Some(thread_id) = key
            .strip_prefix("thread/")
            .and_then(|rest| rest.strip_suffix("/record"))
        else {
            continue;
        };
        let record: ThreadRecord = match parse(&subject(thread_id), &key, &bytes) {
            Ok(record) => record,
            Err(error) => {
                tracing::warn!(thread_id, %error, "unreadable thread record");
                continue;
            }
        };
        let accepted = store.next_seq(&messages_log(thread_id)).await?;
        if record.turn.is_some() || !record.queued.is_empty() || accepted > record.settled_through {
            threads.push(thread_id.to_owned());
        }
    }
    Ok(threads)
}

fn corrupt(subject: &str, key: String, problem: impl std::fmt::Display) -> Error {
    Error::CheckpointCorrupt {
        execution_id: subject.to_owned(),
        key,
        problem: problem.to_string(),
    }
}
