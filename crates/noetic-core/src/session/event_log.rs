//! A thread's durable event log: every event its turns publish, written to the store at the bus's
//! own sequence numbers, so a reader on any host — or after any restart — resumes after the number
//! it last saw (an SSE `Last-Event-ID`).
//!
//! - **Writing** (the host driving the thread): the bus hands each published event to an
//!   [`EventTap`] under its lock (an `Arc` clone and a push); a writer task appends what gathered in
//!   one commit fenced by the thread's lease, so events batch by themselves while a commit is in
//!   flight, and the turn never waits for the store. The log keeps the last
//!   [`EventLogOptions::retain`] events. A host lets a thread go only after its tap is flushed.
//! - **Numbering**: a bus on a thread with a log starts at the log's next sequence number
//!   ([`super::bus::EventBus::rebase`]), so the numbers are the same on every host and every life of
//!   the thread.
//! - **Following** (a host with subscribers on a thread another host drives): a relay task reads
//!   the log after the bus's last number whenever a writer's commit announces it
//!   ([`DurableStore::wait_announced`]: PostgreSQL's `NOTIFY`), and every [`EventLogOptions::poll`]
//!   at worst, and publishes what it finds at its own numbers ([`super::bus::EventBus::relay`]).
//! - **Reading** ([`follow`]): a subscriber gets each event once it is in the log (on the driving
//!   host, after the writer's commit that holds it: a number a reader saw is never given to another
//!   event, whatever crashes); it reads the bus; where the bus no longer keeps what it
//!   wants (a `Lagged`: a reconnect with an old cursor, a slow reader) it reads the log instead, and
//!   only what the log does not hold either is a `Lagged`. When its session leaves the harness's map
//!   (a shared thread let go, say) it looks the thread up again and goes on after its last number.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::Stream;
use serde::{Deserialize, Serialize};
use tokio::sync::{Notify, watch};

use super::bus::{Replay, SequencedEvent, Subscription};
use super::runner::Session;
use super::sessions::Sessions;
use crate::adapter::durable::{Commit, DurableStore, Fence, SeqConflict};
use crate::event::{EventLogOptions, FrameworkEvent, StreamEvent};
use crate::model::ResponseEvent;
use crate::{Error, Result};

/// The name of thread `thread_id`'s event log.
pub(crate) fn events_log(thread_id: &str) -> String {
    format!("thread/{thread_id}/events")
}

/// Most events one commit appends.
const MAX_BATCH: usize = 512;
/// Most numbers a writer records as a gap (a bus that jumped ahead of the log); beyond, the numbers
/// are not the log's and nothing more is written.
const MAX_GAP: u64 = 4096;
/// How long a writer waits before retrying a failed commit, at first and at most.
const RETRY_FIRST: Duration = Duration::from_millis(50);
const RETRY_MAX: Duration = Duration::from_secs(2);
/// How long letting a thread go waits for its events to be written.
pub(crate) const FLUSH_BOUND: Duration = Duration::from_secs(5);
/// How long a reader waits for the local writer before calling what the log lacks lagged.
const WRITTEN_BOUND: Duration = Duration::from_secs(1);
/// How many empty polls a relay with no subscriber makes before it stops.
const IDLE_POLLS: u32 = 20;

/// An entry of the log, as stored.
#[derive(Serialize)]
#[serde(rename_all = "snake_case")]
enum Logged<'a> {
    Sdk(&'a ResponseEvent),
    Framework(&'a FrameworkEvent),
    /// Sequence numbers a writer could not record (its earlier commits failed for good).
    Gap,
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum Stored {
    Sdk(ResponseEvent),
    /// Read through a `Value`: its error codes are `&'static str`, which a borrowing deserializer
    /// cannot give.
    Framework(serde_json::Value),
    Gap,
}

pub(super) fn encode(event: &StreamEvent) -> Vec<u8> {
    let logged = match event {
        StreamEvent::Sdk(event) => Logged::Sdk(event),
        StreamEvent::Framework(event) => Logged::Framework(event),
        _ => Logged::Gap,
    };
    serde_json::to_vec(&logged).unwrap_or_else(|_| b"\"gap\"".to_vec())
}

/// An entry back as an event; `None` for a gap or an entry that does not decode (a reader gets a
/// `Lagged` for it).
fn decode(thread_id: &str, seq: u64, bytes: &[u8]) -> Option<StreamEvent> {
    match serde_json::from_slice::<Stored>(bytes) {
        Ok(Stored::Sdk(event)) => Some(StreamEvent::Sdk(event)),
        Ok(Stored::Framework(value)) => match FrameworkEvent::deserialize(value) {
            Ok(event) => Some(StreamEvent::Framework(event)),
            Err(error) => {
                tracing::warn!(thread_id, seq, %error, "an event log entry does not decode");
                None
            }
        },
        Ok(Stored::Gap) => None,
        Err(error) => {
            tracing::warn!(thread_id, seq, %error, "an event log entry does not decode");
            None
        }
    }
}

/// Where a driving host's bus puts its events for the writer.
pub(crate) struct EventTap {
    state: Mutex<TapState>,
    wake: Notify,
    /// Every event numbered below this is in the log (or known lost).
    written: watch::Sender<u64>,
}

struct TapState {
    pending: Vec<(u64, Arc<StreamEvent>)>,
    /// The number after the last event pushed.
    pushed: u64,
    closed: bool,
    failed: bool,
    /// Events numbered from this one on wait in `pending` (see [`EventTap::hold`]).
    held_from: Option<u64>,
}

/// Keeps the events published from its making on out of the log until it is dropped.
pub(crate) struct LogHold(Arc<EventTap>);

impl Drop for LogHold {
    fn drop(&mut self) {
        crate::sync::lock(&self.0.state).held_from = None;
        self.0.wake.notify_one();
    }
}

impl EventTap {
    /// Holds the events published from now on back from the log until the hold is dropped: a
    /// turn's end is written to the log only once the store records the turn's end, so a host that
    /// reads `turn_completed` from the log finds the turn's history in the store.
    pub(crate) fn hold(self: &Arc<Self>) -> LogHold {
        let mut state = crate::sync::lock(&self.state);
        state.held_from = Some(state.pushed);
        LogHold(self.clone())
    }

    /// Called by the bus under its lock: cheap, never waits.
    pub(crate) fn push(&self, seq: u64, event: Arc<StreamEvent>) {
        let mut state = crate::sync::lock(&self.state);
        state.pushed = seq + 1;
        if state.failed || matches!(*event, StreamEvent::Lagged { .. }) {
            return;
        }
        let first = state.pending.is_empty();
        state.pending.push((seq, event));
        drop(state);
        if first {
            self.wake.notify_one();
        }
    }

    /// No more events come: the writer ends once it has written what is pending.
    pub(crate) fn close(&self) {
        crate::sync::lock(&self.state).closed = true;
        self.wake.notify_one();
    }

    /// Waits until every event pushed so far is written (or known lost), at most `bound`. Returns
    /// whether it was.
    pub(crate) async fn flush(&self, bound: Duration) -> bool {
        let target = crate::sync::lock(&self.state).pushed;
        self.written_through(target, bound).await
    }

    /// Waits until every event numbered below `target` is written, at most `bound`.
    pub(crate) async fn written_through(&self, target: u64, bound: Duration) -> bool {
        if *self.written.borrow() >= target {
            return true;
        }
        let mut written = self.written.subscribe();
        tokio::time::timeout(bound, written.wait_for(|&next| next >= target))
            .await
            .is_ok_and(|waited| waited.is_ok())
    }

    /// Starts the writer of thread `thread_id`'s log, whose next entry is `next`, fenced by `fence`.
    pub(crate) fn start(
        store: Arc<dyn DurableStore>,
        thread_id: &str,
        next: u64,
        fence: Fence,
        options: EventLogOptions,
    ) -> Arc<EventTap> {
        let tap = Arc::new(EventTap {
            state: Mutex::new(TapState {
                pending: Vec::new(),
                pushed: next,
                closed: false,
                failed: false,
                held_from: None,
            }),
            wake: Notify::new(),
            written: watch::Sender::new(next),
        });
        let writer = Writer {
            tap: tap.clone(),
            store,
            thread_id: thread_id.to_owned(),
            log: events_log(thread_id),
            fence,
            retain: options.retain,
            next,
            trimmed_below: 0,
        };
        // Not on the harness's task tracker: it ends when its session's bus is dropped or the
        // thread is let go (the tap closed), after writing what is pending.
        tokio::spawn(writer.run());
        tap
    }
}

struct Writer {
    tap: Arc<EventTap>,
    store: Arc<dyn DurableStore>,
    thread_id: String,
    log: String,
    fence: Fence,
    retain: u64,
    /// The log's next sequence number as this writer knows it.
    next: u64,
    trimmed_below: u64,
}

impl Writer {
    async fn run(mut self) {
        loop {
            let batch = {
                let mut state = crate::sync::lock(&self.tap.state);
                let held_from = state.held_from.unwrap_or(u64::MAX);
                let free = state
                    .pending
                    .iter()
                    .take(MAX_BATCH)
                    .take_while(|(seq, _)| *seq < held_from)
                    .count();
                if state.pending.is_empty() && (state.closed || state.failed) {
                    return;
                }
                (free > 0).then(|| state.pending.drain(..free).collect::<Vec<_>>())
            };
            match batch {
                Some(batch) => {
                    if !self.write(batch).await {
                        let mut state = crate::sync::lock(&self.tap.state);
                        state.failed = true;
                        state.pending.clear();
                        let pushed = state.pushed;
                        drop(state);
                        self.tap.written.send_replace(pushed);
                        return;
                    }
                }
                None => self.tap.wake.notified().await,
            }
        }
    }

    /// Appends `batch`; `false` when the thread was lost (another host writes its log now).
    async fn write(&mut self, batch: Vec<(u64, Arc<StreamEvent>)>) -> bool {
        let Some(&(first, _)) = batch.first() else {
            return true;
        };
        let last = batch.last().map_or(first, |(seq, _)| *seq);
        // Numbers this writer never saw (a bus that jumped ahead) are recorded as gaps.
        let gap = first.saturating_sub(self.next);
        if first < self.next || gap > MAX_GAP {
            tracing::warn!(thread_id = %self.thread_id, first, next = self.next, "event numbers do not follow the log's; not written");
            return false;
        }
        let mut entries = Vec::with_capacity(batch.len() + gap as usize);
        entries.extend((0..gap).map(|_| encode(&StreamEvent::Lagged { skipped: 1 })));
        let mut expected = first;
        for (seq, event) in &batch {
            entries.extend((expected..*seq).map(|_| encode(&StreamEvent::Lagged { skipped: 1 })));
            entries.push(encode(event));
            expected = seq + 1;
        }
        let mut commit = Commit::new()
            .fenced(Some(self.fence.clone()))
            .append(self.log.clone(), self.next, entries)
            .announce(self.log.clone());
        let end = last + 1;
        if end > self.retain && end - self.retain > self.trimmed_below + self.retain / 4 {
            commit = commit.trim(self.log.clone(), end - self.retain);
        }
        let mut delay = RETRY_FIRST;
        loop {
            match self.store.commit(commit.clone()).await {
                Ok(()) => {
                    if let Some((_, below)) = commit.trims.first() {
                        self.trimmed_below = *below;
                    }
                    self.next = end;
                    self.tap.written.send_replace(end);
                    return true;
                }
                Err(error @ Error::LeaseLost { .. }) => {
                    tracing::warn!(thread_id = %self.thread_id, %error, "event log: thread lost");
                    return false;
                }
                Err(error) if SeqConflict::of(&error, &self.log).is_some() => {
                    tracing::warn!(thread_id = %self.thread_id, %error, "event log written by another host");
                    return false;
                }
                Err(error) => {
                    if crate::sync::lock(&self.tap.state).closed && delay >= RETRY_MAX {
                        tracing::error!(thread_id = %self.thread_id, %error, "event log: events not written");
                        return false;
                    }
                    tracing::warn!(thread_id = %self.thread_id, %error, "event log: retrying");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(RETRY_MAX);
                }
            }
        }
    }
}

/// What a reader of a thread with an event log needs.
#[derive(Clone)]
pub(crate) struct Follow {
    pub(crate) sessions: Arc<Sessions>,
    pub(crate) store: Arc<dyn DurableStore>,
    pub(crate) options: EventLogOptions,
    /// Whether other hosts may run the thread's turns (`shared_threads`): only then is a thread
    /// this host does not drive relayed from the log.
    pub(crate) shared: bool,
    /// The runtime, whose session keeper lets unwatched followed sessions go.
    pub(crate) runtime: Arc<crate::runtime::Runtime>,
}

struct Reader {
    follow: Follow,
    thread_id: String,
    log: String,
    /// The number of the last event handed out.
    last: Option<u64>,
    current: Option<(Arc<Session>, Subscription)>,
    /// Whether `current`'s bus is on the log's numbers and relayed when another host drives it.
    settled: bool,
    ready: VecDeque<SequencedEvent>,
}

/// Thread `thread_id`'s events from `replay` on, on a harness whose threads keep an event log:
/// what the bus no longer keeps is read from the log, and the stream outlives its session.
pub(crate) fn follow(
    follow: Follow,
    thread_id: String,
    replay: Replay,
) -> impl Stream<Item = SequencedEvent> + Send + 'static {
    // Subscribed now, not at the first poll: "from now on" means from the call. A bus not yet on
    // the log's numbers takes its waiting readers along when it is put on them.
    let session = follow.sessions.get_or_create(&thread_id);
    let subscription = session.subscribe(replay);
    let reader = Reader {
        log: events_log(&thread_id),
        follow,
        thread_id,
        last: None,
        current: Some((session, subscription)),
        settled: false,
        ready: VecDeque::new(),
    };
    futures_util::stream::unfold(reader, |mut reader| async move {
        let event = reader.next().await;
        Some((event, reader))
    })
}

impl Reader {
    async fn next(&mut self) -> SequencedEvent {
        loop {
            if let Some(event) = self.ready.pop_front() {
                self.last = Some(event.seq);
                return event;
            }
            let (session, subscription) = match self.current.take() {
                Some(current) => current,
                None => {
                    let session = self.follow.sessions.get_or_create(&self.thread_id);
                    // Its successor goes on after the last number read (all of them if none was).
                    let next = self.last.map_or(0, |last| last + 1);
                    let subscription = session.subscribe_at(next);
                    (session, subscription)
                }
            };
            if !self.settled {
                if let Err(error) = self.follow.base(&session).await {
                    tracing::warn!(thread_id = %self.thread_id, %error, "event log not read");
                    tokio::time::sleep(self.follow.options.poll).await;
                    self.current = Some((session, subscription));
                    continue;
                }
                // Until its session is retired, the relay runs for as long as it has readers.
                self.follow.relay(&session);
                self.settled = true;
            }
            let (session, subscription) = self.current.insert((session, subscription));
            match subscription.next_or_retired().await {
                None => {
                    self.current = None;
                    self.settled = false;
                }
                Some(event) => match *event.event {
                    StreamEvent::Lagged { skipped } => {
                        let session = session.clone();
                        self.fill(&session, event.seq + 1 - skipped, event.seq)
                            .await;
                    }
                    _ => {
                        // Handed out once durable: a number a reader saw is never reused for
                        // another event, whatever crashes.
                        if let Some(tap) = session.event_tap()
                            && !tap.written_through(event.seq + 1, FLUSH_BOUND).await
                        {
                            tracing::warn!(thread_id = %self.thread_id, seq = event.seq, "event handed out before it was written");
                        }
                        self.last = Some(event.seq);
                        return event;
                    }
                },
            }
        }
    }

    /// Queues the events numbered `from..=to` as the log holds them; a `Lagged` for what it lacks.
    async fn fill(&mut self, session: &Arc<Session>, from: u64, to: u64) {
        let mut entries = self.read(from, to).await;
        let complete = entries.last().is_some_and(|(seq, _)| *seq == to);
        if !complete
            && let Some(tap) = session.event_tap()
            && tap.written_through(to + 1, WRITTEN_BOUND).await
        {
            entries = self.read(from, to).await;
        }
        let mut next = from;
        for (seq, event) in entries {
            if seq > next {
                self.lagged(seq - next, seq - 1);
            }
            match event {
                Some(event) => self.ready.push_back(SequencedEvent {
                    seq,
                    event: Arc::new(event),
                }),
                None => self.lagged(1, seq),
            }
            next = seq + 1;
        }
        if next <= to {
            self.lagged(to + 1 - next, to);
        }
    }

    fn lagged(&mut self, skipped: u64, seq: u64) {
        if let Some(last) = self.ready.back_mut()
            && let StreamEvent::Lagged { skipped: before } = *last.event
        {
            last.seq = seq;
            last.event = Arc::new(StreamEvent::Lagged {
                skipped: before + skipped,
            });
            return;
        }
        self.ready.push_back(SequencedEvent {
            seq,
            event: Arc::new(StreamEvent::Lagged { skipped }),
        });
    }

    async fn read(&self, from: u64, to: u64) -> Vec<(u64, Option<StreamEvent>)> {
        match self.follow.store.read_log(&self.log, from).await {
            Ok(entries) => entries
                .into_iter()
                .take_while(|entry| entry.seq <= to)
                .map(|entry| (entry.seq, decode(&self.thread_id, entry.seq, &entry.value)))
                .collect(),
            Err(error) => {
                tracing::warn!(thread_id = %self.thread_id, %error, "event log not read");
                Vec::new()
            }
        }
    }
}

impl Follow {
    /// Puts `session`'s bus on the log's numbers when nothing did yet (a session this host does not
    /// drive: the one that drives it is based when read back).
    pub(crate) async fn base(&self, session: &Arc<Session>) -> Result<()> {
        if session.bus().is_based() {
            return Ok(());
        }
        let _loading = session.loading.lock().await;
        if session.bus().is_based() {
            return Ok(());
        }
        let next = self.store.next_seq(&events_log(&session.thread_id)).await?;
        session.bus().rebase(next);
        Ok(())
    }

    /// Starts the task relaying the log to `session`'s bus, unless it runs or this host drives the
    /// thread.
    fn relay(&self, session: &Arc<Session>) {
        if !self.shared
            || session.journal.get().is_some()
            || session
                .relaying
                .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
        {
            return;
        }
        self.sessions.start_keeper(&self.runtime);
        let relay = Relay {
            session: Arc::downgrade(session),
            store: self.store.clone(),
            log: events_log(&session.thread_id),
            thread_id: session.thread_id.clone(),
            poll: self.options.poll,
        };
        // Not on the task tracker: it ends when its session is driven here, retired, dropped, or
        // unwatched for a while.
        tokio::spawn(relay.run());
    }
}

struct Relay {
    session: std::sync::Weak<Session>,
    store: Arc<dyn DurableStore>,
    log: String,
    thread_id: String,
    poll: Duration,
}

impl Relay {
    async fn run(self) {
        let mut idle = 0;
        let mut next = 0;
        loop {
            let Some(session) = self.session.upgrade() else {
                return;
            };
            let bus = session.bus();
            if bus.is_retired() || session.journal.get().is_some() {
                session.stop_following();
                session.relaying.store(false, Ordering::Release);
                return;
            }
            if bus.subscriber_count() == 0 {
                idle += 1;
                if idle > IDLE_POLLS {
                    // Unfollowed, the status it followed would go stale.
                    session.stop_following();
                    session.relaying.store(false, Ordering::Release);
                    // A subscriber that came meanwhile found it running: run on for it.
                    if bus.subscriber_count() == 0
                        || session
                            .relaying
                            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                            .is_err()
                    {
                        return;
                    }
                }
            } else {
                idle = 0;
            }
            next = next.max(bus.next_seq());
            // Waiting for the log's next announcement from before the look, so none falls between.
            let announced = self.store.wait_announced(&self.log, self.poll);
            match self.store.read_log(&self.log, next).await {
                Ok(entries) if !entries.is_empty() => {
                    for entry in entries {
                        next = entry.seq + 1;
                        // An entry that does not decode is skipped: readers see a `Lagged` for
                        // its number and read it from the log themselves (and lag again).
                        if let Some(event) = decode(&self.thread_id, entry.seq, &entry.value) {
                            session.follow_status(&event);
                            bus.relay(entry.seq, event);
                        }
                    }
                    continue;
                }
                Ok(_) => {}
                Err(error) => {
                    tracing::warn!(thread_id = %self.thread_id, %error, "event log not read");
                }
            }
            drop(session);
            if let Err(error) = announced.await {
                tracing::warn!(thread_id = %self.thread_id, %error, "event log wake-up failed");
                tokio::time::sleep(self.poll).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::item::Item;
    use crate::model::ResponseSnapshot;

    fn round_trip(event: StreamEvent) {
        let bytes = encode(&event);
        let back = decode("t", 0, &bytes).expect("decodes");
        assert_eq!(back.to_json("h"), event.to_json("h"), "{event:?}");
    }

    #[test]
    fn every_kind_of_event_reads_back_as_written() {
        round_trip(StreamEvent::Sdk(ResponseEvent::OutputTextDelta {
            output_index: 1,
            content_index: 2,
            delta: "héllo".to_owned(),
        }));
        round_trip(StreamEvent::Sdk(ResponseEvent::Finished(Box::new(
            ResponseSnapshot {
                id: Some("resp_1".to_owned()),
                output: vec![Item::assistant_text("done")],
                cost: Some(0.25),
                ..ResponseSnapshot::default()
            },
        ))));
        round_trip(StreamEvent::Sdk(ResponseEvent::Other {
            event_type: "vendor.thing".to_owned(),
            data: serde_json::json!({"a": [1, 2]}),
        }));
        round_trip(StreamEvent::Framework(FrameworkEvent::ItemAppended {
            item: Item::user_text("hi"),
        }));
        // A code of another crate comes back as the same text.
        let aborted = StreamEvent::Framework(FrameworkEvent::TurnAborted {
            turn_id: "turn".to_owned(),
            reason: "the provider failed".to_owned(),
            error_kind: "PROVIDER_HTTP_STATUS",
        });
        round_trip(aborted);
    }

    #[test]
    fn a_gap_or_an_entry_that_does_not_decode_is_none() {
        assert!(decode("t", 0, &encode(&StreamEvent::Lagged { skipped: 3 })).is_none());
        assert!(decode("t", 0, b"{\"framework\": {\"type\": \"no_such_event\"}}").is_none());
        assert!(decode("t", 0, b"not json").is_none());
    }
}
