//! A session's event bus: a bounded ring with replay, per-subscriber cursors and explicit lag.
//!
//! Publishing never waits: it appends to the ring (dropping the oldest event when full) and wakes the
//! subscribers. Each subscriber reads from its own cursor, so a slow one never holds up the turn or the
//! others; when the ring has moved past its cursor it receives one `Lagged { skipped }` event and resumes
//! at the oldest retained event. A new subscriber starts at the oldest retained event: a subscriber
//! made before the first turn sees everything, a late one a bounded replay of the recent past.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use futures_util::Stream;
use tokio::sync::Notify;

use crate::event::{EventSink, StreamEvent};

/// How many events a session keeps for replay and for slow subscribers.
pub const DEFAULT_EVENT_CAPACITY: usize = 4096;

pub(crate) struct EventBus {
    ring: Mutex<Ring>,
    notify: Notify,
}

struct Ring {
    events: VecDeque<Arc<StreamEvent>>,
    /// The sequence number of `events[0]`.
    first_seq: u64,
    capacity: usize,
}

impl EventBus {
    pub(crate) fn new(capacity: usize) -> Self {
        EventBus {
            ring: Mutex::new(Ring {
                events: VecDeque::new(),
                first_seq: 0,
                capacity: capacity.max(1),
            }),
            notify: Notify::new(),
        }
    }

    fn ring(&self) -> MutexGuard<'_, Ring> {
        self.ring
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn publish(&self, event: StreamEvent) {
        {
            let mut ring = self.ring();
            if ring.events.len() == ring.capacity {
                ring.events.pop_front();
                ring.first_seq += 1;
            }
            ring.events.push_back(Arc::new(event));
        }
        self.notify.notify_waiters();
    }

    /// A subscription starting at the oldest retained event.
    pub(crate) fn subscribe(self: &Arc<Self>) -> Subscription {
        let cursor = self.ring().first_seq;
        Subscription {
            bus: self.clone(),
            cursor,
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
    cursor: u64,
}

enum Read {
    Event(Arc<StreamEvent>),
    Lagged(u64),
    Empty,
}

impl Subscription {
    fn try_read(&mut self) -> Read {
        let ring = self.bus.ring();
        if self.cursor < ring.first_seq {
            let skipped = ring.first_seq - self.cursor;
            self.cursor = ring.first_seq;
            return Read::Lagged(skipped);
        }
        let index = (self.cursor - ring.first_seq) as usize;
        match ring.events.get(index) {
            Some(event) => {
                self.cursor += 1;
                Read::Event(event.clone())
            }
            None => Read::Empty,
        }
    }

    /// The next event (or a lag notice).
    ///
    /// # Cancel safety
    /// Cancel safe: the cursor only moves when an event is returned.
    pub(crate) async fn next(&mut self) -> Arc<StreamEvent> {
        loop {
            // Register for a wake-up before looking, so a publish between the look and the wait is seen.
            let bus = self.bus.clone();
            let notified = bus.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            match self.try_read() {
                Read::Event(event) => return event,
                Read::Lagged(skipped) => return Arc::new(StreamEvent::Lagged { skipped }),
                Read::Empty => notified.await,
            }
        }
    }

    /// The subscription as an endless stream.
    pub(crate) fn into_stream(self) -> impl Stream<Item = Arc<StreamEvent>> + Send + 'static {
        futures_util::stream::unfold(self, |mut subscription| async move {
            let event = subscription.next().await;
            Some((event, subscription))
        })
    }
}
