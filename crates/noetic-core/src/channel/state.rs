//! One channel's buffered values and waiters, and the rules of the three modes.
//!
//! Every operation takes the channel's `std::sync::Mutex` for a few pointer moves and never awaits
//! under it. Waiting is done on per-waiter `oneshot` channels that are registered *under the same lock*
//! as the check that found nothing to take, so no wake-up can be lost between the check and the wait.
//! That lock is also what decides races: a waiter that gives up (timeout, cancellation, drop) takes the
//! lock and either removes its own entry (nothing was handed to it) or finds it gone (a value was handed
//! over, and is already in its `oneshot`).

use std::collections::VecDeque;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use serde_json::Value;
use tokio::sync::{Notify, oneshot};

use super::ChannelMode;
use crate::Result;

/// How many values a topic stream keeps for a slow reader before dropping the oldest.
pub(crate) const TAP_CAPACITY: usize = 1000;

pub(crate) use crate::sync::lock;

/// One channel of a root execution.
pub(crate) struct ChannelState {
    pub(crate) name: Arc<str>,
    pub(crate) mode: ChannelMode,
    data: Mutex<Data>,
    /// Ids of waiters and parked senders, so a waiter can find its own entry again.
    next_id: AtomicU64,
}

enum Data {
    Value(ValueData),
    Queue(QueueData),
    Topic(TopicData),
}

struct ValueData {
    current: Option<Value>,
    /// Bumped on every write, so a stream can tell a new value from the one it already yielded.
    version: u64,
    waiters: Vec<Waiter>,
}

/// Invariants: `receivers` is non-empty only while nothing can be taken (`buffer` and `senders` are
/// empty); `senders` is non-empty only while `buffer` holds at least `capacity` values.
struct QueueData {
    buffer: VecDeque<Value>,
    capacity: usize,
    receivers: VecDeque<Waiter>,
    senders: VecDeque<ParkedSend>,
}

struct TopicData {
    receivers: Vec<Waiter>,
    /// External streams; `Weak` so a dropped stream unsubscribes itself.
    taps: Vec<Weak<Tap>>,
}

struct Waiter {
    id: u64,
    tx: oneshot::Sender<Value>,
}

struct ParkedSend {
    id: u64,
    value: Value,
    wake: oneshot::Sender<()>,
}

/// The private buffer of one external topic stream.
pub(crate) struct Tap {
    values: Mutex<VecDeque<Value>>,
    notify: Notify,
}

/// What taking a value found.
pub(crate) enum Taken<T> {
    /// A value (decoded).
    Ready(T),
    /// Nothing yet; the waiter is registered.
    Waiting(PendingRecv),
}

/// What an internal send did.
pub(crate) enum Offered {
    /// Delivered, buffered, or (topic) dropped for want of receivers.
    Done,
    /// The queue is full: the value waits in the parked sender.
    Parked(PendingSend),
}

/// Whether a value that does not decode stays where it is (a `recv` reports the error and leaves the
/// value for a receiver of the right type) or is dropped (a stream skips it).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnMismatch {
    Keep,
    Discard,
}

impl ChannelState {
    pub(crate) fn new(name: Arc<str>, mode: ChannelMode) -> Self {
        let data = match mode {
            ChannelMode::Value => Data::Value(ValueData {
                current: None,
                version: 0,
                waiters: Vec::new(),
            }),
            ChannelMode::Queue { capacity } => Data::Queue(QueueData {
                buffer: VecDeque::new(),
                capacity,
                receivers: VecDeque::new(),
                senders: VecDeque::new(),
            }),
            ChannelMode::Topic => Data::Topic(TopicData {
                receivers: Vec::new(),
                taps: Vec::new(),
            }),
        };
        ChannelState {
            name,
            mode,
            data: Mutex::new(data),
            next_id: AtomicU64::new(0),
        }
    }

    fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// An internal send: value overwrites and wakes every waiter; topic reaches the current waiters
    /// and streams (else the value is dropped); queue hands to the oldest waiter, else buffers, else
    /// parks the sender behind any already parked.
    pub(crate) fn offer(self: &Arc<Self>, value: Value) -> Offered {
        let mut data = lock(&self.data);
        match &mut *data {
            Data::Value(slot) => slot.write(value),
            Data::Topic(topic) => topic.publish(value),
            Data::Queue(queue) => {
                let Some(value) = queue.hand_off(value) else {
                    return Offered::Done;
                };
                if queue.senders.is_empty() && queue.buffer.len() < queue.capacity {
                    queue.buffer.push_back(value);
                    return Offered::Done;
                }
                let id = self.next_id();
                let (wake, woken) = oneshot::channel();
                queue.senders.push_back(ParkedSend { id, value, wake });
                return Offered::Parked(PendingSend {
                    state: self.clone(),
                    id,
                    woken,
                    done: false,
                });
            }
        }
        Offered::Done
    }

    /// An external send: like [`offer`](Self::offer), but never parks. A full queue drops its oldest
    /// value (with a warning) to make room.
    pub(crate) fn push_external(&self, value: Value) {
        let mut data = lock(&self.data);
        match &mut *data {
            Data::Value(slot) => slot.write(value),
            Data::Topic(topic) => topic.publish(value),
            Data::Queue(queue) => {
                let Some(value) = queue.hand_off(value) else {
                    return;
                };
                if queue.buffer.len() >= queue.capacity {
                    queue.buffer.pop_front();
                    tracing::warn!(
                        channel = %self.name,
                        capacity = queue.capacity,
                        "channel queue full: an external send dropped the oldest value"
                    );
                }
                queue.buffer.push_back(value);
            }
        }
    }

    /// Takes a value without waiting: queue dequeues its head (promoting the oldest parked sender),
    /// value returns the current one without consuming it, topic never has one.
    pub(crate) fn try_take<T>(
        &self,
        decode: impl Fn(&Value) -> Result<T>,
        on_mismatch: OnMismatch,
    ) -> Option<Result<T>> {
        let mut data = lock(&self.data);
        take_locked(&mut data, &decode, on_mismatch)
    }

    /// Takes a value, or registers a waiter under the same lock.
    pub(crate) fn take_or_wait<T>(
        self: &Arc<Self>,
        decode: impl Fn(&Value) -> Result<T>,
        on_mismatch: OnMismatch,
    ) -> Result<Taken<T>> {
        let mut data = lock(&self.data);
        if let Some(taken) = take_locked(&mut data, &decode, on_mismatch) {
            return taken.map(Taken::Ready);
        }
        Ok(Taken::Waiting(self.register(&mut data)))
    }

    /// For a value-mode stream: the current value if its version differs from `seen`, else a waiter
    /// woken by the next write.
    pub(crate) fn value_since(self: &Arc<Self>, seen: u64) -> Result<(Value, u64), PendingRecv> {
        let mut data = lock(&self.data);
        if let Data::Value(slot) = &*data
            && slot.version != seen
            && let Some(current) = &slot.current
        {
            return Ok((current.clone(), slot.version));
        }
        Err(self.register(&mut data))
    }

    /// Subscribes an external topic stream; values published from now on reach its buffer.
    pub(crate) fn tap(&self) -> Arc<Tap> {
        let tap = Arc::new(Tap {
            values: Mutex::new(VecDeque::new()),
            notify: Notify::new(),
        });
        if let Data::Topic(topic) = &mut *lock(&self.data) {
            topic.taps.push(Arc::downgrade(&tap));
        }
        tap
    }

    fn register(self: &Arc<Self>, data: &mut Data) -> PendingRecv {
        let id = self.next_id();
        let (tx, rx) = oneshot::channel();
        let waiter = Waiter { id, tx };
        match data {
            Data::Value(slot) => slot.waiters.push(waiter),
            Data::Queue(queue) => queue.receivers.push_back(waiter),
            Data::Topic(topic) => topic.receivers.push(waiter),
        }
        PendingRecv {
            state: self.clone(),
            id,
            rx,
            done: false,
        }
    }

    /// Removes a waiter's entry; `false` when it is gone because a value was handed to it.
    fn remove_receiver(data: &mut Data, id: u64) -> bool {
        fn remove(waiters: &mut Vec<Waiter>, id: u64) -> bool {
            let before = waiters.len();
            waiters.retain(|waiter| waiter.id != id);
            waiters.len() != before
        }
        match data {
            Data::Value(slot) => remove(&mut slot.waiters, id),
            Data::Topic(topic) => remove(&mut topic.receivers, id),
            Data::Queue(queue) => match queue.receivers.iter().position(|w| w.id == id) {
                Some(index) => queue.receivers.remove(index).is_some(),
                None => false,
            },
        }
    }

    /// Puts a queue value that was handed to a receiver who gave up back at the head (it was the
    /// oldest), so nothing is lost or reordered. Value and topic values are not consumed by a
    /// receiver, so there is nothing to put back.
    fn return_to_head(data: &mut Data, value: Value) {
        if let Data::Queue(queue) = data
            && let Some(value) = queue.hand_off(value)
        {
            // May briefly exceed `capacity` by one: senders that filled the freed slot keep their
            // places, and the queue drains back under capacity before anyone parked is promoted.
            queue.buffer.push_front(value);
        }
    }

    /// Gives a queue value handed to a receiver back to the head (the receiver could not use it).
    pub(crate) fn give_back(&self, value: Value) {
        Self::return_to_head(&mut lock(&self.data), value);
    }

    /// Removes a parked sender (its value is discarded); `false` when it was already promoted.
    fn remove_sender(&self, id: u64) -> bool {
        if let Data::Queue(queue) = &mut *lock(&self.data)
            && let Some(index) = queue.senders.iter().position(|parked| parked.id == id)
        {
            queue.senders.remove(index);
            return true;
        }
        false
    }
}

fn take_locked<T>(
    data: &mut Data,
    decode: &impl Fn(&Value) -> Result<T>,
    on_mismatch: OnMismatch,
) -> Option<Result<T>> {
    match data {
        Data::Value(slot) => slot.current.as_ref().map(decode),
        Data::Topic(_) => None,
        Data::Queue(queue) => loop {
            let decoded = decode(queue.peek()?);
            if decoded.is_ok() || on_mismatch == OnMismatch::Discard {
                queue.pop();
            }
            match decoded {
                Err(_) if on_mismatch == OnMismatch::Discard => continue,
                decoded => return Some(decoded),
            }
        },
    }
}

impl ValueData {
    fn write(&mut self, value: Value) {
        for waiter in self.waiters.drain(..) {
            let _ = waiter.tx.send(value.clone());
        }
        self.current = Some(value);
        self.version = self.version.wrapping_add(1);
    }
}

impl TopicData {
    fn publish(&mut self, value: Value) {
        for waiter in self.receivers.drain(..) {
            let _ = waiter.tx.send(value.clone());
        }
        self.taps.retain(|tap| match tap.upgrade() {
            Some(tap) => {
                tap.push(value.clone());
                true
            }
            None => false,
        });
    }
}

impl QueueData {
    /// Hands `value` to the oldest waiting receiver; gives it back when there is none.
    fn hand_off(&mut self, mut value: Value) -> Option<Value> {
        while let Some(waiter) = self.receivers.pop_front() {
            match waiter.tx.send(value) {
                Ok(()) => return None,
                // Only a receiver that is being dropped can have closed its end; try the next.
                Err(back) => value = back,
            }
        }
        Some(value)
    }

    fn peek(&self) -> Option<&Value> {
        self.buffer
            .front()
            .or_else(|| self.senders.front().map(|parked| &parked.value))
    }

    /// Dequeues the head, then promotes parked senders into the freed slots, oldest first.
    fn pop(&mut self) -> Option<Value> {
        let value = match self.buffer.pop_front() {
            Some(value) => Some(value),
            None => self.senders.pop_front().map(|parked| {
                let _ = parked.wake.send(());
                parked.value
            }),
        };
        while self.buffer.len() < self.capacity {
            let Some(parked) = self.senders.pop_front() else {
                break;
            };
            self.buffer.push_back(parked.value);
            let _ = parked.wake.send(());
        }
        value
    }
}

impl Tap {
    fn push(&self, value: Value) {
        {
            let mut values = lock(&self.values);
            if values.len() >= TAP_CAPACITY {
                values.pop_front();
            }
            values.push_back(value);
        }
        // `notify_one` stores a permit when the stream is not waiting yet, so no wake-up is lost.
        self.notify.notify_one();
    }

    pub(crate) fn pop(&self) -> Option<Value> {
        lock(&self.values).pop_front()
    }

    /// Resolves after the next push (or at once if one happened since the last wait).
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub(crate) async fn pushed(&self) {
        self.notify.notified().await;
    }
}

/// A receiver registered with a channel. Dropping it before it completes withdraws the waiter and, if a
/// queue value had already been handed to it, puts that value back at the head of the queue.
pub(crate) struct PendingRecv {
    state: Arc<ChannelState>,
    id: u64,
    rx: oneshot::Receiver<Value>,
    done: bool,
}

impl PendingRecv {
    /// Waits for a value until `stop` resolves. A value handed over before the stop is observed wins:
    /// the lock, not the clock, decides.
    ///
    /// # Cancel safety
    /// Cancel safe (see the type's docs).
    pub(crate) async fn wait_or<E>(mut self, stop: impl Future<Output = E>) -> Result<Value, E> {
        tokio::pin!(stop);
        let stopped = tokio::select! {
            biased;
            delivered = &mut self.rx => match delivered {
                Ok(value) => {
                    self.done = true;
                    return Ok(value);
                }
                // Senders are only dropped after sending; should one ever vanish, wait for the stop.
                Err(_) => (&mut stop).await,
            },
            stopped = &mut stop => stopped,
        };
        match self.withdraw() {
            Some(value) => Ok(value),
            None => Err(stopped),
        }
    }

    /// Removes the waiter; returns the value handed to it meanwhile, if any.
    fn withdraw(&mut self) -> Option<Value> {
        self.done = true;
        let mut data = lock(&self.state.data);
        if ChannelState::remove_receiver(&mut data, self.id) {
            return None;
        }
        self.rx.try_recv().ok()
    }
}

impl Drop for PendingRecv {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        self.done = true;
        let mut data = lock(&self.state.data);
        if !ChannelState::remove_receiver(&mut data, self.id)
            && let Ok(value) = self.rx.try_recv()
        {
            ChannelState::return_to_head(&mut data, value);
        }
    }
}

/// A send parked on a full queue. Dropping it before it completes withdraws the send and discards its
/// value, unless a freed slot had already taken it.
pub(crate) struct PendingSend {
    state: Arc<ChannelState>,
    id: u64,
    woken: oneshot::Receiver<()>,
    done: bool,
}

impl PendingSend {
    /// Waits until a slot takes the value, or until `stop` resolves; on a stop the value is discarded,
    /// unless a slot took it first (then the send succeeded).
    ///
    /// # Cancel safety
    /// Not cancel safe: dropping the future discards the value unless it was already enqueued.
    pub(crate) async fn wait_or<E>(mut self, stop: impl Future<Output = E>) -> Result<(), E> {
        let stopped = tokio::select! {
            biased;
            // The wake sender is only ever consumed by a promotion, which sends first.
            _ = &mut self.woken => {
                self.done = true;
                return Ok(());
            }
            stopped = stop => stopped,
        };
        self.done = true;
        if self.state.remove_sender(self.id) {
            Err(stopped)
        } else {
            Ok(())
        }
    }
}

impl Drop for PendingSend {
    fn drop(&mut self) {
        if !self.done {
            self.state.remove_sender(self.id);
        }
    }
}
