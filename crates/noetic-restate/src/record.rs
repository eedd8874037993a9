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
use noetic_core::{EventSink, FrameworkEvent, Item, StreamEvent};
use restate_sdk::prelude::*;

/// The state key of the thread's history (without a store).
const HISTORY: &str = "history";

/// The events of the running attempt not yet written, and a wake-up for the live writer when one
/// comes.
#[derive(Clone, Default)]
pub(crate) struct EventBuffer(Arc<(Mutex<Vec<StreamEvent>>, tokio::sync::Notify)>);

impl EventBuffer {
    fn events(&self) -> std::sync::MutexGuard<'_, Vec<StreamEvent>> {
        self.0
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn take(&self) -> Vec<StreamEvent> {
        std::mem::take(&mut *self.events())
    }

    /// Puts `batch` (taken, not written) back before the events that came since.
    fn put_back(&self, mut batch: Vec<StreamEvent>) {
        let mut events = self.events();
        batch.append(&mut events);
        *events = batch;
    }

    /// Waits for an event emitted after the last wait.
    async fn emitted(&self) {
        self.0.1.notified().await;
    }
}

impl EventSink for EventBuffer {
    fn emit(&self, event: StreamEvent) {
        self.events().push(event);
        // Stored if no one waits: the next wait returns at once.
        self.0.1.notify_one();
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

/// Writes a turn's events to the thread's event log.
///
/// A step this attempt runs (not a replay) has its events written as they come, in parts at most
/// every [`LIVE_EVERY`] and the last when it ends, before its result is journaled
/// ([`EventWriter::live`]): followers see a round's text as it streams, and a step journaled has
/// all its events in the log. A later attempt that runs the step again (the earlier one ended
/// before journaling it) writes `round_restarted` before its own first write of it.
///
/// The rest is written once a step is journaled, before the turn goes on: the events gathered
/// since the last write (the turn's start, an approval's request, a replay's). A replayed step
/// whose parts are in the log writes nothing more (its events are there, once).
///
/// Each write is named by its place among the turn's writes as well as by its step (`{n}:{step}`):
/// the writes come in the same order on every attempt, and a graph that runs a step twice names
/// its rounds twice.
#[derive(Clone)]
pub(crate) struct EventWriter {
    pub(crate) recorder: ThreadRecorder,
    pub(crate) thread_id: String,
    pub(crate) turn_id: String,
    /// The messages the turn answers (named by `round_restarted`).
    pub(crate) message_ids: Vec<String>,
    pub(crate) buffer: EventBuffer,
    /// How many writes the turn asked for so far (clones share it).
    pub(crate) writes: Arc<AtomicUsize>,
    /// This attempt's id, unique among the turn's attempts (its live parts are named by it).
    pub(crate) attempt: String,
}

/// How often at most a running step's events are written as they come.
pub(crate) const LIVE_EVERY: std::time::Duration = std::time::Duration::from_millis(50);

impl EventWriter {
    /// A writer for turn `turn_id` of thread `thread_id`, answering `message_ids`.
    pub(crate) fn new(
        recorder: ThreadRecorder,
        thread_id: &str,
        turn_id: &str,
        message_ids: Vec<String>,
    ) -> Self {
        static ATTEMPTS: AtomicUsize = AtomicUsize::new(0);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        EventWriter {
            recorder,
            thread_id: thread_id.to_owned(),
            turn_id: turn_id.to_owned(),
            message_ids,
            buffer: EventBuffer::default(),
            writes: Arc::default(),
            attempt: format!(
                "{now:x}.{}.{}",
                std::process::id(),
                ATTEMPTS.fetch_add(1, Ordering::Relaxed)
            ),
        }
    }

    /// Writes the events gathered since the last write, after the journaled step `step`; `ran`
    /// when this attempt ran the step (rather than replayed it), so its own write follows its
    /// parts (and an earlier attempt's, after `round_restarted`).
    pub(crate) async fn write(&self, step: &str, ran: bool) -> noetic_core::Result<()> {
        let place = self.writes.fetch_add(1, Ordering::SeqCst);
        let name = format!("{place}:{step}");
        let batch = self.buffer.take();
        if ran {
            self.recorder
                .append_part(
                    &self.thread_id,
                    &self.turn_id,
                    &name,
                    &self.attempt,
                    None,
                    &batch,
                    self.restarted(),
                )
                .await
        } else {
            self.recorder
                .append_events(&self.thread_id, &self.turn_id, &name, &batch)
                .await
        }
    }

    fn restarted(&self) -> StreamEvent {
        StreamEvent::Framework(FrameworkEvent::RoundRestarted {
            turn_id: self.turn_id.clone(),
            message_ids: self.message_ids.clone(),
        })
    }

    /// Runs the step `step` (run by this attempt), writing what it emits in parts as it comes, the
    /// last when it ends (before its result is journaled). A part that cannot be written goes back
    /// to the buffer: the step's own write after its journaling takes it (and ends the attempt if
    /// it fails too).
    pub(crate) async fn live<T>(&self, step: &str, run: impl Future<Output = T>) -> T {
        // The place the step's own write will take: its parts are named after it.
        let name = format!("{}:{step}", self.writes.load(Ordering::SeqCst));
        tokio::pin!(run);
        let mut part = 0;
        loop {
            let mut done = tokio::select! {
                biased;
                done = &mut run => Some(done),
                () = self.buffer.emitted() => None,
            };
            if done.is_none() {
                // Let a burst gather: one write per `LIVE_EVERY` at most.
                let gather = tokio::time::sleep(LIVE_EVERY);
                tokio::pin!(gather);
                done = tokio::select! {
                    biased;
                    done = &mut run => Some(done),
                    () = &mut gather => None,
                };
            }
            // The step's end: what is left is its last part, written before its result is
            // journaled, so a step journaled has all its events in the log.
            let batch = self.buffer.take();
            if batch.is_empty() {
                match done {
                    Some(done) => return done,
                    None => continue,
                }
            }
            let written = self
                .recorder
                .append_part(
                    &self.thread_id,
                    &self.turn_id,
                    &name,
                    &self.attempt,
                    Some(part),
                    &batch,
                    self.restarted(),
                )
                .await;
            match written {
                Ok(()) => part += 1,
                Err(error) => {
                    tracing::warn!(
                        target: "noetic::restate",
                        code = error.code(),
                        "a running step's events could not be written yet: {error}"
                    );
                    self.buffer.put_back(batch);
                }
            }
            if let Some(done) = done {
                return done;
            }
        }
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
            Some(events) => events.write(step, false).await.map_err(retryable),
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
