//! A thread's record in a [`DurableStore`] written by turns an engine runs (`noetic-restate`), in
//! the format of durable sessions (`durable.rs`), so the store stays what is read outside a turn:
//! a harness on the same store reads the thread's history and last turn
//! ([`crate::AgentHarness::stored_thread`], `thread_history` with `shared_threads`) and relays its
//! event log to subscribers (`event_log.rs`), as for a thread another host drives.
//!
//! Every write follows the engine's journaled step whose result it records, and each is
//! idempotent, since an engine replays a turn after a crash: a turn's end is recorded once (the
//! thread's record lists the last turns recorded), and the events flushed after a step are written
//! once per turn and step (the record `thread/T/engine-events` names the steps of the turn being
//! written). No lease, runnable mark or claim: the engine runs one turn at a time per thread.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::durable::{
    FailedTurn, LastRecord, MessageRow, THREAD_SCHEMA_VERSION, ThreadRecord, history_log,
    messages_log, record_key, subject,
};
use super::event_log::{encode, events_log};
use crate::adapter::durable::{Commit, DurableStore};
use crate::checkpoint::{parse, read_items, to_bytes};
use crate::event::{EventLogOptions, StreamEvent};
use crate::item::Item;
use crate::usage::Spend;
use crate::{DeliveryMode, Result};

/// How many of the last recorded turns a thread's record lists, so a replayed record is a no-op.
const RECORDED_TURNS: usize = 16;

/// A turn's end as an engine records it.
#[derive(Debug, Clone)]
pub struct EngineTurn {
    /// The turn's id (stable across the engine's replays: Restate's invocation id).
    pub turn_id: String,
    /// The messages the turn answered (coalesced, in order).
    pub messages: Vec<EngineMessage>,
    /// The items the turn added to the history, the messages' own first.
    pub items: Vec<Item>,
    /// Its output, or its error's code and message.
    pub outcome: std::result::Result<Value, (String, String)>,
    /// What it spent.
    pub spend: Spend,
}

/// A message an engine's turn answered.
#[derive(Debug, Clone)]
pub struct EngineMessage {
    /// Its id (the `execute` idempotency key).
    pub id: String,
    /// Its items, as sent.
    pub items: Vec<Item>,
}

/// Writes and reads threads whose turns an engine runs (see the module docs).
#[derive(Clone)]
pub struct ThreadRecorder {
    store: Arc<dyn DurableStore>,
    events: EventLogOptions,
}

impl std::fmt::Debug for ThreadRecorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadRecorder").finish_non_exhaustive()
    }
}

/// Which steps of the turn being written have had their events written.
#[derive(Debug, Default, Serialize, Deserialize)]
struct EventMarks {
    turn_id: String,
    steps: Vec<String>,
}

fn marks_key(thread_id: &str) -> String {
    format!("thread/{thread_id}/engine-events")
}

/// How a write starts, given the writes done before it.
enum Lead {
    /// It is not written.
    Skip,
    /// Its events as they are.
    Plain,
    /// This event, then its events.
    After(StreamEvent),
}

/// The engine's side of a thread record: the last turns recorded, beside the session fields.
#[derive(Debug, Default, Serialize, Deserialize)]
struct EngineFields {
    #[serde(default)]
    engine_turns: Vec<String>,
}

impl ThreadRecorder {
    /// A recorder on `store`, keeping event logs as `EventLogOptions::default()` says.
    pub fn new(store: Arc<dyn DurableStore>) -> Self {
        ThreadRecorder {
            store,
            events: EventLogOptions::default(),
        }
    }

    /// How many events a thread's log keeps (as the harness's `event_log` option).
    #[must_use]
    pub fn event_log(mut self, options: EventLogOptions) -> Self {
        self.events = options;
        self
    }

    /// How many items the thread's history has (0 for a new thread). Its first `n` items never
    /// change once recorded: an engine journals this count at a turn's start and reads that many
    /// ([`ThreadRecorder::history`]), so a replay sees the history the turn first saw.
    ///
    /// # Errors
    /// [`crate::Error::CheckpointCorrupt`] naming a record that does not parse; storage errors.
    pub async fn history_count(&self, thread_id: &str) -> Result<u64> {
        Ok(self
            .read_record(thread_id)
            .await?
            .map_or(0, |(record, _)| record.history_count))
    }

    /// The thread's first `count` history items (all of them when `count` is `None`), as its
    /// recorded turns left them.
    ///
    /// # Errors
    /// [`crate::Error::CheckpointCorrupt`] naming a row that does not parse; storage errors.
    pub async fn history(&self, thread_id: &str, count: Option<u64>) -> Result<Vec<Item>> {
        let Some((record, _)) = self.read_record(thread_id).await? else {
            return Ok(Vec::new());
        };
        let count = count.map_or(record.history_count, |count| {
            count.min(record.history_count)
        });
        let mut history = Vec::with_capacity(count as usize);
        read_items(
            &*self.store,
            &subject(thread_id),
            &history_log(thread_id, record.history_generation),
            Some(count),
            &mut history,
        )
        .await?;
        Ok(history)
    }

    /// Appends `events` of turn `turn_id` to the thread's event log, written after its step
    /// `step`: once per turn and step (a replay's write of the same step is a no-op, as it is
    /// when parts of the step were written while it ran, [`ThreadRecorder::append_part`]; no
    /// events, no write). Followers are woken where the store can tell.
    ///
    /// # Errors
    /// Storage errors (nothing is written then).
    pub async fn append_events(
        &self,
        thread_id: &str,
        turn_id: &str,
        step: &str,
        events: &[StreamEvent],
    ) -> Result<()> {
        // The attempt that ran the step wrote all of its events in parts as it ran: a replay's
        // events of it (its lifecycle again) are not written a second time.
        let parts = format!("{step}~");
        self.append(thread_id, turn_id, step.to_owned(), events, |written| {
            if written.iter().any(|name| name.starts_with(&parts)) {
                Lead::Skip
            } else {
                Lead::Plain
            }
        })
        .await
    }

    /// Appends events of step `step` written by the turn's attempt `attempt` (any id unique to
    /// the attempt) that runs the step: part `Some(n)` while it runs, so followers see a round's
    /// text as it streams rather than when it is journaled, or `None`, the step's own write once
    /// journaled (the events after its last part, named `step` as [`ThreadRecorder::append_events`]
    /// names it, so a replay's write is a no-op after it). Each once per turn, step, attempt and
    /// part. When this is the attempt's first write of the step and another attempt wrote parts of
    /// it before (it ran the step and ended before the step was journaled), `restarted` comes
    /// first, so followers drop the earlier attempt's partial output.
    ///
    /// # Errors
    /// Storage errors (nothing is written then).
    #[allow(clippy::too_many_arguments)]
    pub async fn append_part(
        &self,
        thread_id: &str,
        turn_id: &str,
        step: &str,
        attempt: &str,
        part: Option<usize>,
        events: &[StreamEvent],
        restarted: StreamEvent,
    ) -> Result<()> {
        let name = match part {
            Some(part) => format!("{step}~{attempt}~{part}"),
            None => step.to_owned(),
        };
        let parts = format!("{step}~");
        let ours = format!("{step}~{attempt}~");
        self.append(thread_id, turn_id, name, events, |written| {
            let first = !written.iter().any(|name| name.starts_with(&ours));
            let earlier = written
                .iter()
                .any(|name| name.starts_with(&parts) && !name.starts_with(&ours));
            if first && earlier {
                Lead::After(restarted)
            } else {
                Lead::Plain
            }
        })
        .await
    }

    /// Appends `events` as the write `name` of turn `turn_id` unless it was written, led as `lead`
    /// says from the names written so far.
    async fn append(
        &self,
        thread_id: &str,
        turn_id: &str,
        name: String,
        events: &[StreamEvent],
        lead: impl FnOnce(&[String]) -> Lead,
    ) -> Result<()> {
        // Nothing to write (a replay of the step has nothing more: it emits what its first run
        // did, less a round's deltas).
        if events.is_empty() {
            return Ok(());
        }
        let key = marks_key(thread_id);
        let mut marks: EventMarks = match self.store.record(&key).await? {
            Some(bytes) => parse(&subject(thread_id), &key, &bytes)?,
            None => EventMarks::default(),
        };
        if marks.turn_id != turn_id {
            marks = EventMarks {
                turn_id: turn_id.to_owned(),
                steps: Vec::new(),
            };
        }
        if marks.steps.contains(&name) {
            return Ok(());
        }
        let mut entries: Vec<Vec<u8>> = Vec::with_capacity(events.len() + 1);
        match lead(&marks.steps) {
            Lead::Skip => return Ok(()),
            Lead::Plain => {}
            Lead::After(event) => entries.push(encode(&event)),
        }
        entries.extend(events.iter().map(encode));
        marks.steps.push(name);
        let log = events_log(thread_id);
        let first = self.store.next_seq(&log).await?;
        let end = first + entries.len() as u64;
        let mut commit = Commit::new()
            .put(key, to_bytes(&marks)?)
            .append(log.clone(), first, entries)
            .announce(log.clone());
        if end > self.events.retain {
            commit = commit.trim(log, end - self.events.retain);
        }
        self.store.commit(commit).await
    }

    /// Records turn `turn.turn_id`'s end in one commit: its messages accepted and settled, its
    /// items appended to the history, its output (or error) as the thread's last, its spend added.
    /// A turn already recorded is not recorded again.
    ///
    /// # Errors
    /// [`crate::Error::CheckpointCorrupt`] naming a row that does not parse; storage errors
    /// (nothing is written then).
    pub async fn record_turn(&self, thread_id: &str, turn: &EngineTurn) -> Result<()> {
        let (mut record, mut engine) = match self.read_record(thread_id).await? {
            Some(read) => read,
            None => (ThreadRecord::new(thread_id), EngineFields::default()),
        };
        if engine.engine_turns.contains(&turn.turn_id) {
            return Ok(());
        }
        let messages = messages_log(thread_id);
        let message_seq = self.store.next_seq(&messages).await?;
        let rows = turn
            .messages
            .iter()
            .map(|message| {
                to_bytes(&MessageRow {
                    schema_version: THREAD_SCHEMA_VERSION,
                    id: message.id.clone(),
                    mode: DeliveryMode::NextTurn,
                    resource_id: None,
                    items: message.items.clone(),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let entries = turn
            .items
            .iter()
            .map(to_bytes)
            .collect::<Result<Vec<_>>>()?;
        let first_item = record.history_count;
        record.history_count += entries.len() as u64;
        record.settled_through = message_seq + rows.len() as u64;
        record.spend += turn.spend;
        record.last = Some(match &turn.outcome {
            Ok(output) => LastRecord {
                output: output.clone(),
                spend: turn.spend,
                failed: None,
            },
            Err((code, message)) => LastRecord {
                output: Value::Null,
                spend: turn.spend,
                failed: Some(FailedTurn::new(code.clone(), message.clone())),
            },
        });
        engine.engine_turns.push(turn.turn_id.clone());
        let excess = engine.engine_turns.len().saturating_sub(RECORDED_TURNS);
        engine.engine_turns.drain(..excess);
        let commit = Commit::new()
            .append(messages, message_seq, rows)
            .append(
                history_log(thread_id, record.history_generation),
                first_item,
                entries,
            )
            .put(record_key(thread_id), record_bytes(&record, &engine)?);
        self.store.commit(commit).await
    }

    async fn read_record(&self, thread_id: &str) -> Result<Option<(ThreadRecord, EngineFields)>> {
        let key = record_key(thread_id);
        let Some(bytes) = self.store.record(&key).await? else {
            return Ok(None);
        };
        let subject = subject(thread_id);
        let record: ThreadRecord = parse(&subject, &key, &bytes)?;
        let engine: EngineFields = parse(&subject, &key, &bytes)?;
        Ok(Some((record, engine)))
    }
}

/// The record with the engine's fields beside the session's (which a session reading it ignores).
fn record_bytes(record: &ThreadRecord, engine: &EngineFields) -> Result<Vec<u8>> {
    let mut value = serde_json::to_value(record).unwrap_or(Value::Null);
    if let (Value::Object(fields), Ok(Value::Object(extra))) =
        (&mut value, serde_json::to_value(engine))
    {
        fields.extend(extra);
    }
    to_bytes(&value)
}
