//! A session's event bus: a ring bounded by count and by bytes, with replay, per-subscriber cursors,
//! compaction at turn end and explicit lag.
//!
//! Every published event gets a sequence number. Publishing never waits: it appends to the ring
//! (dropping the oldest events while the ring holds more than its count or byte bound) and wakes the
//! subscribers. Each subscriber reads from its own cursor (the sequence number it wants next), so a
//! slow one never holds up the turn or the others; whenever the next event it would read is further
//! on than its cursor, it receives one `Lagged { skipped }` first — never a silent gap.
//!
//! While nobody subscribes, the ring keeps only [`UNWATCHED_EVENT_BYTES`]: a replay for a future
//! subscriber needs no buffer to keep up.
//!
//! When a turn ends, the ended turns' events are compacted: their provider (`Sdk`) events are
//! dropped — the `item_appended` events and the history carry their content — and their framework
//! events are kept within [`IDLE_EVENT_BYTES`], oldest out first. Compaction only removes events every
//! live subscriber has read: one that is behind when the turn ends keeps reading everything, and the
//! compaction completes once it has caught up (or is dropped).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use futures_util::Stream;
use serde_json::Value;
use tokio::sync::Notify;

use super::event_log::EventTap;
use crate::event::{EventSink, FrameworkEvent, StreamEvent};
use crate::item::{ContentPart, Item};
use crate::model::ResponseEvent;

/// How many events a session keeps for replay and for slow subscribers.
pub const DEFAULT_EVENT_CAPACITY: usize = 4096;

/// How many bytes of events (estimated) a session keeps for replay and for slow subscribers.
pub const DEFAULT_EVENT_BYTES: usize = 256 * 1024;

/// How many bytes of events (estimated) an idle session keeps for replay once its turns have ended.
pub const IDLE_EVENT_BYTES: usize = 8 * 1024;

/// How many bytes of events (estimated) a session keeps while nobody subscribes: only a replay for a
/// future subscriber, which needs no buffer to keep up.
pub const UNWATCHED_EVENT_BYTES: usize = 8 * 1024;

/// Where a new subscription to a session's events starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Replay {
    /// With everything the session still keeps: the compacted past (framework events of ended
    /// turns, with a `Lagged` where provider events were dropped) and the running turn's events (the
    /// default of `events`).
    Retained,
    /// With the running turn's events from its start (nothing when no turn runs), then live.
    CurrentTurn,
    /// From now on: only events published after subscribing (the default of the derived streams).
    None,
    /// With the events after the one with this sequence number (an SSE client's `Last-Event-ID`):
    /// a `Lagged` first when some of them are no longer kept (the count is of sequence numbers,
    /// which have gaps where ended turns were compacted) — always when the number is from an
    /// earlier life of the thread's bus (another process, or a session evicted and read back),
    /// whose numbers are all below this one's. A number beyond the last published starts from now.
    After(u64),
}

/// An event with its sequence number on the session's bus ([`crate::AgentHarness::sequenced_events`]).
///
/// Sequence numbers increase along a thread's bus, with gaps where events were compacted, and a
/// bus's numbers start above those of any earlier bus of the thread (they start at the bus's
/// creation time in milliseconds times 1024, and above every number the process published: a bus
/// of an earlier process would have to publish more than 1024 events per millisecond of its life to
/// reach its successor's), so a cursor stays meaningful across a
/// restart. They stay below 2^53: exact as JavaScript numbers. A `Lagged` carries the number of the
/// last event it stands for, so resuming after it continues at the next kept event.
#[derive(Debug, Clone)]
pub struct SequencedEvent {
    /// The event's sequence number.
    pub seq: u64,
    /// The event.
    pub event: Arc<StreamEvent>,
}

/// The highest sequence number any bus of this process has published.
static PUBLISHED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The first sequence number of a bus created now: milliseconds since the Unix epoch times 1024,
/// and above every number this process has published (a bus made again within the millisecond).
fn first_seq() -> u64 {
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| u64::try_from(since.as_millis()).unwrap_or(0));
    (millis << 10).max(PUBLISHED.load(std::sync::atomic::Ordering::Relaxed) + 1)
}

/// The bounds of a session's ring.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Limits {
    /// Events kept at most.
    pub(crate) events: usize,
    /// Bytes kept at most while someone subscribes.
    pub(crate) bytes: usize,
    /// Bytes kept at most while nobody subscribes.
    pub(crate) unwatched_bytes: usize,
    /// Bytes of ended turns kept after compaction.
    pub(crate) idle_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            events: DEFAULT_EVENT_CAPACITY,
            bytes: DEFAULT_EVENT_BYTES,
            unwatched_bytes: UNWATCHED_EVENT_BYTES,
            idle_bytes: IDLE_EVENT_BYTES,
        }
    }
}

pub(crate) struct EventBus {
    ring: Mutex<Ring>,
    notify: Notify,
}

struct Entry {
    seq: u64,
    bytes: usize,
    event: Arc<StreamEvent>,
}

struct Ring {
    /// Retained events in sequence order; sequence numbers have gaps where events were compacted.
    entries: VecDeque<Entry>,
    /// The sequence number of the next event published.
    next_seq: u64,
    /// The estimated bytes of `entries`.
    bytes: usize,
    max_events: usize,
    max_bytes: usize,
    unwatched_bytes: usize,
    idle_bytes: usize,
    /// How many subscriptions are live.
    subscribers: usize,
    /// The sequence number of the running turn's `turn_started`.
    turn_start: Option<u64>,
    /// Events below this sequence number belong to ended turns.
    ended_below: u64,
    /// Events below this sequence number have been compacted.
    compacted_below: u64,
    /// The subscriber slot whose cursor held the last compaction back.
    blocker: Option<usize>,
    /// Each live subscriber's cursor (the sequence number it reads next); `None` for a free slot.
    cursors: Vec<Option<u64>>,
    /// Whether anything was ever published.
    published: bool,
    /// Whether its numbers are the thread's durable event log's (set by [`EventBus::rebase`]).
    based: bool,
    /// Retired: its session left the harness's map; readers look the thread up again.
    retired: bool,
    /// Where published events also go to be written to the thread's event log (the host driving a
    /// thread with an event log); `None` otherwise: one check per publish.
    tap: Option<Arc<EventTap>>,
}

impl EventBus {
    pub(crate) fn new(limits: Limits) -> Self {
        let first = first_seq();
        EventBus {
            ring: Mutex::new(Ring {
                entries: VecDeque::new(),
                next_seq: first,
                bytes: 0,
                max_events: limits.events.max(1),
                max_bytes: limits.bytes,
                unwatched_bytes: limits.unwatched_bytes,
                idle_bytes: limits.idle_bytes,
                subscribers: 0,
                turn_start: None,
                ended_below: first,
                compacted_below: first,
                blocker: None,
                cursors: Vec::new(),
                published: false,
                based: false,
                retired: false,
                tap: None,
            }),
            notify: Notify::new(),
        }
    }

    fn ring(&self) -> MutexGuard<'_, Ring> {
        crate::sync::lock(&self.ring)
    }

    pub(crate) fn publish(&self, event: StreamEvent) {
        let bytes = approx_bytes(&event);
        self.ring().push(Arc::new(event), bytes);
        self.notify.notify_waiters();
    }

    /// Publishes a turn's `turn_started`, remembering where the turn starts.
    pub(crate) fn publish_turn_start(&self, event: FrameworkEvent) {
        let bytes = approx_framework_bytes(&event);
        let event = Arc::new(StreamEvent::Framework(event));
        {
            let mut ring = self.ring();
            ring.turn_start = Some(ring.next_seq);
            ring.push(event, bytes);
        }
        self.notify.notify_waiters();
    }

    /// Publishes a turn's end event and compacts the ended turns.
    pub(crate) fn publish_turn_end(&self, event: FrameworkEvent) {
        let bytes = approx_framework_bytes(&event);
        let event = Arc::new(StreamEvent::Framework(event));
        let compacted = {
            let mut ring = self.ring();
            ring.push(event, bytes);
            ring.turn_start = None;
            ring.ended_below = ring.next_seq;
            ring.compact()
        };
        self.notify.notify_waiters();
        // What compaction removed is freed outside the lock.
        drop(compacted);
    }

    /// Publishes an event read from the thread's event log at its own sequence number (a host
    /// following a thread another host drives): one already passed is skipped; a gap (entries
    /// trimmed from the log) shows as a `Lagged` to readers. Turn boundaries are kept as the driving
    /// host's bus keeps them.
    pub(crate) fn relay(&self, seq: u64, event: StreamEvent) {
        let bytes = approx_bytes(&event);
        let boundary = match &event {
            StreamEvent::Framework(
                FrameworkEvent::TurnStarted { .. } | FrameworkEvent::RoundRestarted { .. },
            ) => Some(true),
            StreamEvent::Framework(
                FrameworkEvent::TurnCompleted { .. } | FrameworkEvent::TurnAborted { .. },
            ) => Some(false),
            _ => None,
        };
        let compacted = {
            let mut ring = self.ring();
            if seq < ring.next_seq {
                return;
            }
            ring.next_seq = seq;
            if boundary == Some(true) {
                ring.turn_start = Some(seq);
            }
            ring.push(Arc::new(event), bytes);
            if boundary == Some(false) {
                ring.turn_start = None;
                ring.ended_below = ring.next_seq;
                ring.compact()
            } else {
                Vec::new()
            }
        };
        self.notify.notify_waiters();
        drop(compacted);
    }

    /// Puts the bus on the numbers of the thread's event log, whose next entry is `next`: with
    /// nothing published yet it starts there (its readers, all waiting for its first event, with
    /// it); otherwise it jumps ahead to `next` when behind (its readers see a `Lagged` for what it
    /// did not relay) and stays put when at or past it. Returns whether it was based before.
    pub(crate) fn rebase(&self, next: u64) -> bool {
        let mut ring = self.ring();
        let was = ring.based;
        ring.based = true;
        if !ring.published {
            let old = ring.next_seq;
            ring.next_seq = next;
            ring.ended_below = next;
            ring.compacted_below = next;
            for cursor in ring.cursors.iter_mut().flatten() {
                if *cursor >= old {
                    *cursor = next;
                }
            }
        } else if ring.next_seq < next {
            ring.next_seq = next;
        }
        was
    }

    /// Whether the bus numbers its events as the thread's event log does.
    pub(crate) fn is_based(&self) -> bool {
        self.ring().based
    }

    /// The sequence number the next event gets.
    pub(crate) fn next_seq(&self) -> u64 {
        self.ring().next_seq
    }

    /// Sends every event published from now on to `tap` too (`None`: stops).
    pub(crate) fn set_tap(&self, tap: Option<Arc<EventTap>>) {
        self.ring().tap = tap;
    }

    /// Holds the events published from now on back from the thread's event log until the hold is
    /// dropped (see [`EventTap::hold`]); `None` without a log.
    pub(crate) fn hold_log(&self) -> Option<super::event_log::LogHold> {
        self.ring().tap.as_ref().map(EventTap::hold)
    }

    /// Retires the bus (its session left the harness's map): readers that have read everything get
    /// `None` from [`Subscription::next_or_retired`] and look the thread up again.
    pub(crate) fn retire(&self) {
        self.ring().retired = true;
        self.notify.notify_waiters();
    }

    /// Whether the bus was retired.
    pub(crate) fn is_retired(&self) -> bool {
        self.ring().retired
    }

    /// How many subscriptions are live.
    pub(crate) fn subscriber_count(&self) -> usize {
        crate::sync::lock(&self.ring).subscribers
    }

    pub(crate) fn subscribe(self: &Arc<Self>, replay: Replay) -> Subscription {
        self.subscribe_with(Some(replay), 0)
    }

    /// A subscription whose first event is number `next`, even when the bus has not got that far
    /// (a reader moving from a retired bus to its successor, which may still be behind it).
    pub(crate) fn subscribe_at(self: &Arc<Self>, next: u64) -> Subscription {
        self.subscribe_with(None, next)
    }

    fn subscribe_with(self: &Arc<Self>, replay: Option<Replay>, next: u64) -> Subscription {
        let mut ring = self.ring();
        let Some(replay) = replay else {
            return ring.add_subscriber(self, next);
        };
        let cursor = match replay {
            Replay::Retained => ring
                .entries
                .front()
                .map_or(ring.next_seq, |entry| entry.seq),
            Replay::CurrentTurn => ring.turn_start.unwrap_or(ring.next_seq),
            Replay::None => ring.next_seq,
            Replay::After(seq) => seq.saturating_add(1).min(ring.next_seq),
        };
        ring.add_subscriber(self, cursor)
    }
}

impl Ring {
    fn add_subscriber(&mut self, bus: &Arc<EventBus>, cursor: u64) -> Subscription {
        self.subscribers += 1;
        let slot = match self.cursors.iter().position(Option::is_none) {
            Some(slot) => {
                self.cursors[slot] = Some(cursor);
                slot
            }
            None => {
                self.cursors.push(Some(cursor));
                self.cursors.len() - 1
            }
        };
        Subscription {
            bus: bus.clone(),
            slot,
        }
    }

    /// Appends an event and drops the oldest while over a bound.
    fn push(&mut self, event: Arc<StreamEvent>, bytes: usize) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.published = true;
        if !self.based {
            PUBLISHED.fetch_max(seq, std::sync::atomic::Ordering::Relaxed);
        }
        if let Some(tap) = &self.tap {
            tap.push(seq, event.clone());
        }
        self.entries.push_back(Entry { seq, bytes, event });
        self.bytes += bytes;
        let max_bytes = if self.subscribers == 0 {
            self.unwatched_bytes
        } else {
            self.max_bytes
        };
        while self.entries.len() > self.max_events
            || (self.bytes > max_bytes && self.entries.len() > 1)
        {
            let Some(entry) = self.entries.pop_front() else {
                break;
            };
            self.bytes -= entry.bytes;
        }
    }

    /// The index of the first retained event at or after `seq`.
    fn position(&self, seq: u64) -> usize {
        let len = self.entries.len();
        let Some(back) = self.entries.back() else {
            return 0;
        };
        if seq > back.seq {
            return len;
        }
        // The running turn's events are contiguous at the back: a live reader finds its event at once.
        let from_back = (back.seq - seq) as usize;
        if from_back < len && self.entries[len - 1 - from_back].seq == seq {
            return len - 1 - from_back;
        }
        self.entries.partition_point(|entry| entry.seq < seq)
    }

    /// Compacts the ended turns' events that every live subscriber has read; returns what it removed.
    fn compact(&mut self) -> Vec<Entry> {
        if self.compacted_below >= self.ended_below {
            return Vec::new();
        }
        let (slowest, slot) = self
            .cursors
            .iter()
            .enumerate()
            .filter_map(|(slot, cursor)| cursor.map(|cursor| (cursor, Some(slot))))
            .min()
            .unwrap_or((u64::MAX, None));
        let limit = self.ended_below.min(slowest);
        self.blocker = if limit < self.ended_below { slot } else { None };
        if limit <= self.compacted_below {
            return Vec::new();
        }
        let mut removed = Vec::new();
        let mut kept = VecDeque::with_capacity(self.entries.len());
        for entry in self.entries.drain(..) {
            let compactable = entry.seq >= self.compacted_below && entry.seq < limit;
            if compactable && matches!(*entry.event, StreamEvent::Sdk(_)) {
                self.bytes -= entry.bytes;
                removed.push(entry);
            } else {
                kept.push_back(entry);
            }
        }
        self.entries = kept;
        // The ended turns' framework events stay within the idle budget, oldest out first.
        let mut ended_bytes: usize = self
            .entries
            .iter()
            .take_while(|entry| entry.seq < limit)
            .map(|entry| entry.bytes)
            .sum();
        while ended_bytes > self.idle_bytes {
            let Some(entry) = self.entries.pop_front() else {
                break;
            };
            ended_bytes -= entry.bytes;
            self.bytes -= entry.bytes;
            removed.push(entry);
        }
        self.compacted_below = limit;
        if self.entries.capacity() > 2 * self.entries.len() + 16 {
            self.entries.shrink_to_fit();
        }
        removed
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // Its writer ends once it has written what is pending.
        if let Some(tap) = self.tap.take() {
            tap.close();
        }
    }
}

impl EventSink for EventBus {
    fn emit(&self, event: StreamEvent) {
        self.publish(event);
    }
}

/// A reader of a session's events.
pub(crate) struct Subscription {
    bus: Arc<EventBus>,
    slot: usize,
}

enum Read {
    Retired,
    Event(u64, Arc<StreamEvent>),
    /// How many sequence numbers were skipped, and the last of them.
    Lagged(u64, u64),
    Empty(Vec<Entry>),
}

impl Subscription {
    fn try_read(&mut self) -> Read {
        let mut ring = self.bus.ring();
        let Some(cursor) = ring.cursors.get(self.slot).copied().flatten() else {
            return Read::Empty(Vec::new());
        };
        let index = ring.position(cursor);
        let (next_seq, event) = match ring.entries.get(index) {
            Some(entry) => (entry.seq, Some(entry.event.clone())),
            None => (ring.next_seq, None),
        };
        if next_seq > cursor {
            ring.cursors[self.slot] = Some(next_seq);
            return Read::Lagged(next_seq - cursor, next_seq - 1);
        }
        match event {
            Some(event) => {
                ring.cursors[self.slot] = Some(cursor + 1);
                Read::Event(cursor, event)
            }
            None if ring.retired => Read::Retired,
            // Caught up: if this subscriber held a compaction back, it can run now.
            None if ring.blocker == Some(self.slot) => Read::Empty(ring.compact()),
            None => Read::Empty(Vec::new()),
        }
    }

    /// The next event (or a lag notice).
    ///
    /// # Cancel safety
    /// Cancel safe: the cursor only moves when an event is returned.
    pub(crate) async fn next(&mut self) -> Arc<StreamEvent> {
        self.next_sequenced().await.event
    }

    /// The next event (or a lag notice) with its sequence number.
    ///
    /// # Cancel safety
    /// Cancel safe: the cursor only moves when an event is returned.
    pub(crate) async fn next_sequenced(&mut self) -> SequencedEvent {
        match self.next_or_retired().await {
            Some(event) => event,
            // A retired bus publishes nothing more; these readers wait as they always did.
            None => std::future::pending().await,
        }
    }

    /// The next event (or a lag notice) with its sequence number; `None` once the bus is retired
    /// and everything it published was read.
    ///
    /// # Cancel safety
    /// Cancel safe: the cursor only moves when an event is returned.
    pub(crate) async fn next_or_retired(&mut self) -> Option<SequencedEvent> {
        loop {
            // Register for a wake-up before looking, so a publish between the look and the wait is seen.
            let bus = self.bus.clone();
            let notified = bus.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            match self.try_read() {
                Read::Retired => return None,
                Read::Event(seq, event) => return Some(SequencedEvent { seq, event }),
                Read::Lagged(skipped, seq) => {
                    return Some(SequencedEvent {
                        seq,
                        event: Arc::new(StreamEvent::Lagged { skipped }),
                    });
                }
                Read::Empty(compacted) => {
                    drop(compacted);
                    notified.await;
                }
            }
        }
    }

    /// The subscription as an endless stream of events with their sequence numbers.
    pub(crate) fn into_sequenced_stream(
        self,
    ) -> impl Stream<Item = SequencedEvent> + Send + 'static {
        futures_util::stream::unfold(self, |mut subscription| async move {
            let event = subscription.next_sequenced().await;
            Some((event, subscription))
        })
    }

    /// The subscription as an endless stream.
    pub(crate) fn into_stream(self) -> impl Stream<Item = Arc<StreamEvent>> + Send + 'static {
        futures_util::stream::unfold(self, |mut subscription| async move {
            let event = subscription.next().await;
            Some((event, subscription))
        })
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let compacted = {
            let mut ring = self.bus.ring();
            if let Some(cursor) = ring.cursors.get_mut(self.slot)
                && cursor.take().is_some()
            {
                ring.subscribers -= 1;
            }
            if ring.blocker == Some(self.slot) {
                ring.compact()
            } else {
                Vec::new()
            }
        };
        drop(compacted);
    }
}

/// What a retained entry costs besides its payload: the ring slot and the event's allocation.
const ENTRY_BYTES: usize =
    std::mem::size_of::<Entry>() + std::mem::size_of::<StreamEvent>() + ARC_COUNTS;
/// The reference counts of an `Arc` allocation.
const ARC_COUNTS: usize = 2 * std::mem::size_of::<usize>();

/// An estimate of what retaining `event` costs, from the lengths of its strings: cheap (no encoding,
/// no allocation); linear in the event's size only for items and pass-through JSON.
fn approx_bytes(event: &StreamEvent) -> usize {
    match event {
        StreamEvent::Sdk(sdk) => ENTRY_BYTES + approx_sdk_bytes(sdk),
        StreamEvent::Framework(framework) => approx_framework_bytes(framework),
        _ => ENTRY_BYTES,
    }
}

fn approx_sdk_bytes(event: &ResponseEvent) -> usize {
    match event {
        ResponseEvent::OutputTextDelta { delta, .. }
        | ResponseEvent::ReasoningDelta { delta, .. }
        | ResponseEvent::FunctionCallArgumentsDelta { delta, .. } => delta.len(),
        ResponseEvent::FunctionCallArgumentsDone { arguments, .. } => arguments.len(),
        ResponseEvent::OutputItemAdded { item, .. }
        | ResponseEvent::OutputItemDone { item, .. } => item_bytes(item),
        ResponseEvent::Created {
            response_id, model, ..
        } => response_id.as_ref().map_or(0, String::len) + model.as_ref().map_or(0, String::len),
        ResponseEvent::Finished(snapshot) => {
            std::mem::size_of_val(&**snapshot)
                + snapshot.output.iter().map(item_bytes).sum::<usize>()
        }
        ResponseEvent::Error { code, message } => {
            message.len() + code.as_ref().map_or(0, String::len)
        }
        ResponseEvent::Other { event_type, data } => event_type.len() + value_bytes(data),
    }
}

fn approx_framework_bytes(event: &FrameworkEvent) -> usize {
    ENTRY_BYTES
        + match event {
            FrameworkEvent::ItemAppended { item } => item_bytes(item),
            FrameworkEvent::ToolCallCompleted {
                name,
                call_id,
                output,
                ..
            } => name.len() + call_id.len() + output.len(),
            FrameworkEvent::ToolCallStarted { name, call_id } => name.len() + call_id.len(),
            FrameworkEvent::ApprovalRequested {
                approval_id,
                call_id,
                tool,
                arguments,
            } => approval_id.len() + call_id.len() + tool.len() + value_bytes(arguments),
            FrameworkEvent::TurnStarted {
                turn_id,
                message_ids,
            }
            | FrameworkEvent::RoundRestarted {
                turn_id,
                message_ids,
            } => turn_id.len() + message_ids.iter().map(|id| id.len() + 24).sum::<usize>(),
            FrameworkEvent::TurnCompleted { turn_id, .. } => turn_id.len(),
            FrameworkEvent::TurnAborted {
                turn_id, reason, ..
            } => turn_id.len() + reason.len(),
            FrameworkEvent::StepStarted { step_id, .. }
            | FrameworkEvent::StepCompleted { step_id, .. } => step_id.len(),
            FrameworkEvent::SteerApplied { message_ids, .. } => {
                message_ids.iter().map(|id| id.len() + 24).sum()
            }
            FrameworkEvent::SteerDropped { message_id, .. } => message_id.len(),
            FrameworkEvent::ModelCallFailed { error, .. } => error.len(),
            _ => 0,
        }
}

fn item_bytes(item: &Item) -> usize {
    std::mem::size_of::<Item>()
        + match item {
            Item::Message(message) => {
                message.id.as_ref().map_or(0, String::len)
                    + message.content.iter().map(part_bytes).sum::<usize>()
                    + map_bytes(&message.extra)
            }
            Item::FunctionCall(call) => {
                call.id.as_ref().map_or(0, String::len)
                    + call.call_id.len()
                    + call.name.len()
                    + call.arguments.len()
                    + map_bytes(&call.extra)
            }
            Item::FunctionCallOutput(output) => {
                output.id.as_ref().map_or(0, String::len)
                    + output.call_id.len()
                    + value_bytes(&output.output)
                    + map_bytes(&output.extra)
            }
            Item::Reasoning(reasoning) => {
                reasoning.id.as_ref().map_or(0, String::len)
                    + reasoning.summary.iter().map(value_bytes).sum::<usize>()
                    + reasoning
                        .content
                        .as_ref()
                        .map_or(0, |parts| parts.iter().map(value_bytes).sum())
                    + reasoning.encrypted_content.as_ref().map_or(0, String::len)
                    + map_bytes(&reasoning.extra)
            }
            Item::Other(value) => value_bytes(value),
        }
}

fn part_bytes(part: &ContentPart) -> usize {
    std::mem::size_of::<ContentPart>()
        + match part {
            ContentPart::InputText { text } => text.len(),
            ContentPart::OutputText { text, extra } => text.len() + map_bytes(extra),
            ContentPart::InputImage(map) | ContentPart::InputFile(map) => map_bytes(map),
            ContentPart::Refusal { refusal } => refusal.len(),
            ContentPart::Other(value) => value_bytes(value),
        }
}

/// A map's tree node (one for up to 11 entries) and its entries' heap data.
fn map_bytes(map: &serde_json::Map<String, Value>) -> usize {
    if map.is_empty() {
        return 0;
    }
    MAP_NODE_BYTES * map.len().div_ceil(11)
        + map
            .iter()
            .map(|(key, value)| key.len() + value_bytes(value) - std::mem::size_of::<Value>())
            .sum::<usize>()
}

/// What one node of a JSON object's B-tree takes (11 keys and values and its header).
const MAP_NODE_BYTES: usize =
    11 * (std::mem::size_of::<String>() + std::mem::size_of::<Value>()) + 16;

fn value_bytes(value: &Value) -> usize {
    std::mem::size_of::<Value>()
        + match value {
            Value::String(text) => text.len(),
            Value::Array(values) => values.iter().map(value_bytes).sum(),
            Value::Object(map) => map_bytes(map),
            _ => 0,
        }
}
