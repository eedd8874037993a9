//! External handles: how host code outside the step tree sends into a root execution's channels and
//! reads them as streams.

use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};

use futures_util::stream::{self, Stream};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::state::{ChannelState, OnMismatch, Taken, Tap};
use super::store::ChannelStore;
use super::{ChannelMode, decode, encode};
use crate::{Error, Result};

/// Host code's handle on one channel of a root execution; see [`Context::channel_handle`].
///
/// Sends never wait, and a full queue drops its oldest value to make room. The handle is open while the
/// root's outermost `run()` is in progress (and before the first); once it ends, [`send`](Self::send)
/// fails with `CHANNEL_CLOSED` and streams end, until a later `run()` on the same root reopens it.
///
/// [`Context::channel_handle`]: crate::Context::channel_handle
#[must_use = "a channel handle does nothing unless used"]
pub struct ChannelHandle<T> {
    store: Arc<ChannelStore>,
    state: Arc<ChannelState>,
    _type: PhantomData<fn(T) -> T>,
}

impl<T> Clone for ChannelHandle<T> {
    fn clone(&self) -> Self {
        ChannelHandle {
            store: self.store.clone(),
            state: self.state.clone(),
            _type: PhantomData,
        }
    }
}

impl<T> std::fmt::Debug for ChannelHandle<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChannelHandle")
            .field("channel", &self.state.name)
            .field("mode", &self.state.mode)
            .field("closed", &self.is_closed())
            .finish()
    }
}

impl<T> ChannelHandle<T> {
    pub(crate) fn new(store: Arc<ChannelStore>, state: Arc<ChannelState>) -> Self {
        ChannelHandle {
            store,
            state,
            _type: PhantomData,
        }
    }

    /// The channel's name.
    pub fn name(&self) -> &str {
        &self.state.name
    }

    /// The channel's mode.
    pub fn mode(&self) -> ChannelMode {
        self.state.mode
    }

    /// Whether the root execution has ended (and not been re-run since).
    pub fn is_closed(&self) -> bool {
        self.store.is_closed()
    }

    /// Sends a value, synchronously: value overwrites, topic reaches the receivers waiting now (and
    /// open streams), queue hands it to the oldest waiting receiver or buffers it; when the queue is
    /// full, the oldest buffered value is dropped (with a `tracing` warning) to make room.
    ///
    /// # Errors
    /// [`Error::ChannelClosed`] once the root execution has ended; [`Error::InvalidArgument`] when the
    /// value does not serialize to JSON.
    pub fn send(&self, value: T) -> Result<()>
    where
        T: Serialize,
    {
        if self.store.is_closed() {
            return Err(Error::ChannelClosed {
                channel: self.state.name.to_string(),
            });
        }
        self.state.push_external(encode(&self.state.name, value)?);
        Ok(())
    }

    /// The channel's values as a stream, which ends when the root execution's outermost `run()` ends
    /// (at once if it already has). A queue stream competes with the execution's receivers for values
    /// and, at the end, drains what is still buffered; a topic stream gets every value published after
    /// this call, keeping up to 1000 for a slow reader (the oldest are dropped); a value stream yields
    /// the current value, then the latest one after each change (intermediate writes are skipped).
    /// Values that do not deserialize into `T` are skipped with a warning.
    ///
    /// # Cancel safety
    /// Dropping a stream (or a pending `next()` on it) loses no queue value: one handed to it while it
    /// waited goes back to the head of the queue.
    pub fn stream(&self) -> ChannelStream<T>
    where
        T: DeserializeOwned + Send + 'static,
    {
        let closing = self.store.closing();
        let inner: Pin<Box<dyn Stream<Item = T> + Send>> = match self.state.mode {
            ChannelMode::Queue { .. } => Box::pin(queue_stream(
                self.store.clone(),
                self.state.clone(),
                closing,
            )),
            ChannelMode::Topic => Box::pin(topic_stream(self.state.clone(), closing)),
            ChannelMode::Value => Box::pin(value_stream(self.state.clone(), closing)),
        };
        ChannelStream {
            name: self.state.name.clone(),
            inner,
        }
    }
}

/// A stream of a channel's values for host code; see [`ChannelHandle::stream`].
#[must_use = "streams do nothing unless polled"]
pub struct ChannelStream<T> {
    name: Arc<str>,
    inner: Pin<Box<dyn Stream<Item = T> + Send>>,
}

impl<T> Stream for ChannelStream<T> {
    type Item = T;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Option<T>> {
        self.inner.as_mut().poll_next(cx)
    }
}

impl<T> std::fmt::Debug for ChannelStream<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChannelStream")
            .field("channel", &self.name)
            .finish_non_exhaustive()
    }
}

fn decode_or_skip<T: DeserializeOwned>(state: &ChannelState, value: &Value) -> Option<T> {
    match decode(&state.name, value) {
        Ok(value) => Some(value),
        Err(error) => {
            tracing::warn!(channel = %state.name, %error, "channel stream skipped a value");
            None
        }
    }
}

fn queue_stream<T: DeserializeOwned + Send + 'static>(
    store: Arc<ChannelStore>,
    state: Arc<ChannelState>,
    closing: CancellationToken,
) -> impl Stream<Item = T> + Send {
    stream::unfold((), move |()| {
        let (store, state, closing) = (store.clone(), state.clone(), closing.clone());
        async move {
            let decode = |value: &Value| decode::<T>(&state.name, value);
            loop {
                if closing.is_cancelled() {
                    // The run ended: drain what is still buffered, unless a new run has already
                    // reopened the store (its values belong to that run's streams).
                    if !store.is_closed() {
                        return None;
                    }
                    return match state.try_take(decode, OnMismatch::Discard) {
                        Some(Ok(value)) => Some((value, ())),
                        _ => None,
                    };
                }
                let pending = match state.take_or_wait(decode, OnMismatch::Discard) {
                    Ok(Taken::Ready(value)) => return Some((value, ())),
                    Ok(Taken::Waiting(pending)) => pending,
                    // Values that do not decode are discarded above, so this does not happen.
                    Err(_) => return None,
                };
                if let Ok(value) = pending.wait_or(closing.cancelled()).await
                    && let Some(value) = decode_or_skip(&state, &value)
                {
                    return Some((value, ()));
                }
            }
        }
    })
}

fn topic_stream<T: DeserializeOwned + Send + 'static>(
    state: Arc<ChannelState>,
    closing: CancellationToken,
) -> impl Stream<Item = T> + Send {
    // Subscribe now, not at the first poll: values published between `stream()` and polling count.
    let tap: Arc<Tap> = state.tap();
    stream::unfold((), move |()| {
        let (state, closing, tap) = (state.clone(), closing.clone(), tap.clone());
        async move {
            loop {
                if let Some(value) = tap.pop() {
                    match decode_or_skip(&state, &value) {
                        Some(value) => return Some((value, ())),
                        None => continue,
                    }
                }
                if closing.is_cancelled() {
                    return None;
                }
                tokio::select! {
                    () = tap.pushed() => {}
                    () = closing.cancelled() => {}
                }
            }
        }
    })
}

fn value_stream<T: DeserializeOwned + Send + 'static>(
    state: Arc<ChannelState>,
    closing: CancellationToken,
) -> impl Stream<Item = T> + Send {
    stream::unfold(0u64, move |mut seen| {
        let (state, closing) = (state.clone(), closing.clone());
        async move {
            loop {
                let pending = match state.value_since(seen) {
                    Ok((value, version)) => {
                        seen = version;
                        match decode_or_skip(&state, &value) {
                            Some(value) => return Some((value, seen)),
                            None => continue,
                        }
                    }
                    Err(pending) => pending,
                };
                if closing.is_cancelled() {
                    return None;
                }
                // The value handed over is not used: the loop re-reads the latest one (conflation).
                let _ = pending.wait_or(closing.cancelled()).await;
            }
        }
    })
}
