//! Where a thread's history and events are kept. By default the history is the object's Restate
//! state and events go only to the host's live sink. With a noetic store
//! ([`crate::RestateHost::store`]), the store is the record read outside a turn: the turn's start
//! journals the history's length and reads that many items from the store, the events of each
//! journaled step are written to the thread's event log once the step is journaled, and the turn's
//! end is recorded there after the step that journals its items — each write idempotent
//! ([`noetic_core::session::ThreadRecorder`]), so a replay's writes are no-ops.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use noetic_core::session::{EngineTurn, ThreadRecorder};
use noetic_core::{EventSink, Item, StreamEvent};
use restate_sdk::prelude::*;

/// The state key of the thread's history (without a store).
const HISTORY: &str = "history";

/// The events of the running attempt not yet written.
#[derive(Clone, Default)]
pub(crate) struct EventBuffer(Arc<Mutex<Vec<StreamEvent>>>);

impl EventBuffer {
    fn take(&self) -> Vec<StreamEvent> {
        std::mem::take(
            &mut *self
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }
}

impl EventSink for EventBuffer {
    fn emit(&self, event: StreamEvent) {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(event);
    }
}

/// Every event to each of its sinks.
pub(crate) struct Tee(pub(crate) Vec<Arc<dyn EventSink>>);

impl EventSink for Tee {
    fn emit(&self, event: StreamEvent) {
        if let Some((last, rest)) = self.0.split_last() {
            for sink in rest {
                sink.emit(event.clone());
            }
            last.emit(event);
        }
    }
}

/// Writes a turn's events to the thread's event log: those gathered since the last write, named
/// by the journaled step they follow. Called on the turn's side, once the step's result is
/// journaled and before the turn goes on, so a step's batch is what the turn emitted up to its
/// end — the same on every attempt, but for a replayed round's deltas (a replay has none: when the
/// attempt that ran the round ended before writing, its deltas are not in the log).
///
/// Each write is named by its place among the turn's writes as well as by its step (`{n}:{step}`):
/// the writes come in the same order on every attempt, and a graph that runs a step twice names
/// its rounds twice.
#[derive(Clone)]
pub(crate) struct EventWriter {
    pub(crate) recorder: ThreadRecorder,
    pub(crate) thread_id: String,
    pub(crate) turn_id: String,
    pub(crate) buffer: EventBuffer,
    /// How many writes the turn asked for so far (clones share it).
    pub(crate) writes: Arc<AtomicUsize>,
}

impl EventWriter {
    /// A writer for turn `turn_id` of thread `thread_id`.
    pub(crate) fn new(recorder: ThreadRecorder, thread_id: &str, turn_id: &str) -> Self {
        EventWriter {
            recorder,
            thread_id: thread_id.to_owned(),
            turn_id: turn_id.to_owned(),
            buffer: EventBuffer::default(),
            writes: Arc::default(),
        }
    }

    pub(crate) async fn write(&self, step: &str) -> noetic_core::Result<()> {
        let place = self.writes.fetch_add(1, Ordering::SeqCst);
        let batch = self.buffer.take();
        self.recorder
            .append_events(
                &self.thread_id,
                &self.turn_id,
                &format!("{place}:{step}"),
                &batch,
            )
            .await
    }
}

/// A thread's records for one turn.
pub(crate) struct Records<'a> {
    pub(crate) recorder: Option<&'a ThreadRecorder>,
    pub(crate) thread_id: String,
    pub(crate) turn_id: String,
    /// With a store: where the turn's events go.
    pub(crate) events: Option<EventWriter>,
}

fn retryable(error: noetic_core::Error) -> HandlerError {
    // Not terminal: Restate retries the attempt, whose writes are idempotent.
    HandlerError::from(error)
}

impl Records<'_> {
    /// The history the turn starts from.
    pub(crate) async fn history(&self, ctx: &ObjectContext<'_>) -> HandlerResult<Vec<Item>> {
        let Some(recorder) = self.recorder else {
            return Ok(ctx
                .get::<Json<Vec<Item>>>(HISTORY)
                .await?
                .map(Json::into_inner)
                .unwrap_or_default());
        };
        let thread_id = self.thread_id.clone();
        let count = ctx
            .run(|| async move { recorder.history_count(&thread_id).await.map_err(retryable) })
            .name("history")
            .await?;
        recorder
            .history(&self.thread_id, Some(count))
            .await
            .map_err(retryable)
    }

    /// Writes the events gathered since the last write, after the journaled step `step`.
    pub(crate) async fn flush(&self, step: &str) -> HandlerResult<()> {
        match &self.events {
            Some(events) => events.write(step).await.map_err(retryable),
            None => Ok(()),
        }
    }

    /// Records the turn's end: in the store, or as the object's history state. (Its last events
    /// are written after the thread's status says it ended: see the `turn` handler.)
    /// `base` gives the history the turn started from (asked for only without a store).
    pub(crate) async fn record(
        &self,
        ctx: &ObjectContext<'_>,
        base: impl FnOnce() -> Vec<Item>,
        turn: &EngineTurn,
    ) -> HandlerResult<()> {
        let Some(recorder) = self.recorder else {
            let mut history = base();
            history.extend(turn.items.iter().cloned());
            ctx.set(HISTORY, Json(history));
            return Ok(());
        };
        recorder
            .record_turn(&self.thread_id, turn)
            .await
            .map_err(retryable)
    }
}

/// The history a shared handler reads: the store's, or the object's state.
pub(crate) async fn read_history(
    recorder: Option<&ThreadRecorder>,
    ctx: &SharedObjectContext<'_>,
) -> HandlerResult<Vec<Item>> {
    match recorder {
        Some(recorder) => recorder.history(ctx.key(), None).await.map_err(retryable),
        None => Ok(ctx
            .get::<Json<Vec<Item>>>(HISTORY)
            .await?
            .map(Json::into_inner)
            .unwrap_or_default()),
    }
}
