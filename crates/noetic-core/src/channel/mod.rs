//! Typed channels between the steps of one execution, and between it and host code.
//!
//! A [`Channel<T>`] is a declaration: a name, a [`ChannelMode`] and a value type. The channel itself
//! lives in the *root execution*: a root context and every context beneath it (spawned children,
//! parallel paths, child contexts made with [`ContextOptions::parent`](crate::ContextOptions::parent))
//! share one set of channels, keyed by name, for as long as the root context lives. Two roots never
//! share a channel.
//!
//! | mode | `send` | `recv` | `try_recv` |
//! |---|---|---|---|
//! | [`value`](Channel::value) | overwrites (last write wins), wakes every waiter | the current value, without consuming it; waits only while none was ever written | the current value or `None` |
//! | [`queue`](Channel::queue) | hands to the oldest waiting receiver, else buffers; a full queue parks the sender (FIFO) | dequeues the head, promoting the oldest parked sender; else waits (FIFO) | dequeues or `None` |
//! | [`topic`](Channel::topic) | reaches the receivers waiting *now* (and open streams); else the value is dropped | waits for the next send | always `None` |
//!
//! Operations go through the context: [`Context::send`], [`Context::send_timeout`], [`Context::recv`],
//! [`Context::try_recv`]. A waiting `recv` or parked `send` fails with `CHANNEL_TIMEOUT` when its
//! timeout expires (a timed-out send's value is discarded, never enqueued), and with `CANCELLED` as soon
//! as its context or an ancestor is aborted. Host code uses a [`ChannelHandle`] (from
//! [`Context::channel_handle`]): synchronous sends that never park, a [`ChannelStream`], and a lifecycle
//! bound to the root's outermost `run()` (see [`ChannelHandle`]).
//!
//! Values travel as `serde_json::Value` inside the store, like values crossing a step boundary: a
//! channel declared by a JSON workflow and one declared with a Rust type interoperate, and the contents
//! stay serializable for checkpoints. The price is one serialization per send and one deserialization per
//! receive, small next to the model calls that channels coordinate. A value that does not deserialize
//! into the receiver's `T` fails that `recv` with `INVALID_ARGUMENT` and stays in a queue or value
//! channel for a receiver that can read it.
//!
//! ```
//! use noetic_core::channel::Channel;
//! use noetic_core::{AgentHarness, Context, ContextOptions, run_code};
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let jobs = Channel::<u32>::queue("jobs", 8);
//! let harness = AgentHarness::builder("workers").build()?;
//! let ctx = harness.create_context(ContextOptions::default());
//!
//! // Host code feeds the execution before (or while) it runs.
//! let handle = ctx.channel_handle(&jobs)?;
//! handle.send(1)?;
//! handle.send(2)?;
//!
//! let sum = run_code("sum", move |(): (), ctx: Context| {
//!     let jobs = jobs.clone();
//!     async move {
//!         let first = ctx.recv(&jobs, None).await?;
//!         let second = ctx.recv(&jobs, None).await?;
//!         Ok::<_, noetic_core::Error>(first + second)
//!     }
//! })
//! .build();
//! assert_eq!(harness.run(&sum, (), &ctx).await?, 3);
//! // The execution has ended: the handle is closed until the next run() on `ctx`.
//! assert!(handle.is_closed());
//! # Ok::<(), noetic_core::Error>(())
//! # }).unwrap();
//! ```
//!
//! [`Context::send`]: crate::Context::send
//! [`Context::send_timeout`]: crate::Context::send_timeout
//! [`Context::recv`]: crate::Context::recv
//! [`Context::try_recv`]: crate::Context::try_recv
//! [`Context::channel_handle`]: crate::Context::channel_handle

mod handle;
mod state;
mod store;

pub use handle::{ChannelHandle, ChannelStream};

pub(crate) use store::{RootChannels, RunGuard};

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;

use crate::{Error, Result};
use state::{ChannelState, Offered, OnMismatch, Taken};
use tokio_util::sync::CancellationToken;

/// The capacity of [`Channel::queue_default`] queues.
pub const DEFAULT_QUEUE_CAPACITY: usize = 1000;

/// How long [`crate::Context::send`] waits on a full queue before failing with `CHANNEL_TIMEOUT`.
pub const DEFAULT_SEND_TIMEOUT: Duration = Duration::from_secs(30);

/// The wait a topic `recv` gets when asked for a zero timeout: waiting forever for a value that only
/// senders acting *after* the wait began can provide is almost always a bug, so it is capped (with a
/// warning) instead.
pub const TOPIC_ZERO_TIMEOUT_CAP: Duration = Duration::from_secs(300);

/// How a channel delivers values; see the [module docs](self).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ChannelMode {
    /// Last write wins; receives do not consume.
    Value,
    /// FIFO with a capacity; a full queue parks its senders.
    Queue {
        /// How many values the queue buffers (at least 1).
        capacity: usize,
    },
    /// Fan-out to the receivers waiting at the time of the send.
    Topic,
}

impl std::fmt::Display for ChannelMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ChannelMode::Value => f.write_str("value"),
            ChannelMode::Queue { capacity } => write!(f, "queue({capacity})"),
            ChannelMode::Topic => f.write_str("topic"),
        }
    }
}

/// A typed channel declaration: name, mode and value type. Cheap to clone.
///
/// Declaring a channel creates nothing; the first operation on a root execution creates it there. Every
/// declaration of a name used in one execution must agree on the mode (and capacity): a mismatch fails
/// the operation with `INVALID_ARGUMENT`.
pub struct Channel<T> {
    name: Arc<str>,
    mode: ChannelMode,
    _type: PhantomData<fn(T) -> T>,
}

impl<T> Clone for Channel<T> {
    fn clone(&self) -> Self {
        Channel {
            name: self.name.clone(),
            mode: self.mode,
            _type: PhantomData,
        }
    }
}

impl<T> std::fmt::Debug for Channel<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Channel")
            .field("name", &self.name)
            .field("mode", &self.mode)
            .finish()
    }
}

impl<T> Channel<T> {
    /// A `value` channel: last write wins, receives do not consume.
    pub fn value(name: impl Into<Arc<str>>) -> Self {
        Self::with_mode(name, ChannelMode::Value)
    }

    /// A `queue` channel buffering up to `capacity` values (a capacity of 0 is taken as 1).
    pub fn queue(name: impl Into<Arc<str>>, capacity: usize) -> Self {
        Self::with_mode(
            name,
            ChannelMode::Queue {
                capacity: capacity.max(1),
            },
        )
    }

    /// A `queue` channel of [`DEFAULT_QUEUE_CAPACITY`].
    pub fn queue_default(name: impl Into<Arc<str>>) -> Self {
        Self::queue(name, DEFAULT_QUEUE_CAPACITY)
    }

    /// A `topic` channel: each send reaches the receivers waiting at that moment.
    pub fn topic(name: impl Into<Arc<str>>) -> Self {
        Self::with_mode(name, ChannelMode::Topic)
    }

    fn with_mode(name: impl Into<Arc<str>>, mode: ChannelMode) -> Self {
        Channel {
            name: name.into(),
            mode,
            _type: PhantomData,
        }
    }

    /// The channel's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The channel's mode.
    pub fn mode(&self) -> ChannelMode {
        self.mode
    }
}

/// What stops a waiting channel operation: a cancellation token, and the abort reason to report
/// when it is cancelled. A context is one (`context/channels.rs`); the channel code names no context.
pub(crate) trait Cancellation: Sync {
    /// The token whose cancellation stops the wait.
    fn token(&self) -> &CancellationToken;
    /// The reason reported in `CANCELLED`.
    fn reason(&self) -> Option<String>;
}

/// What channel operations need: the root execution's channels and what cancels a wait. Built by
/// `Context`'s channel methods.
pub(crate) struct Endpoint<'a> {
    pub(crate) channels: &'a RootChannels,
    pub(crate) cancel: &'a dyn Cancellation,
}

impl Endpoint<'_> {
    /// Sends `value` on `channel`, waiting up to [`DEFAULT_SEND_TIMEOUT`] while a queue is full.
    ///
    /// Value and topic sends, and queue sends with room, complete at once.
    ///
    /// # Errors
    /// See [`send_timeout`](Self::send_timeout).
    ///
    /// # Cancel safety
    /// Not cancel safe while parked on a full queue: dropping the future discards the value, unless a
    /// freed slot had already taken it.
    pub(crate) async fn send<T: Serialize>(&self, channel: &Channel<T>, value: T) -> Result<()> {
        self.send_timeout(channel, value, Some(DEFAULT_SEND_TIMEOUT))
            .await
    }

    /// Sends `value` on `channel`; on a full queue, parks behind earlier parked senders until a
    /// `recv`/`try_recv` frees a slot. `timeout`: `None` or zero waits as long as it takes.
    ///
    /// # Errors
    /// [`Error::ChannelTimeout`] when the timeout expires while parked (the value is discarded);
    /// [`Error::Cancelled`] as soon as this context or an ancestor is aborted while parked (likewise);
    /// [`Error::InvalidArgument`] when `value` does not serialize, or the name is declared with another
    /// mode in this execution.
    ///
    /// # Cancel safety
    /// Not cancel safe while parked on a full queue: dropping the future discards the value, unless a
    /// freed slot had already taken it.
    pub(crate) async fn send_timeout<T: Serialize>(
        &self,
        channel: &Channel<T>,
        value: T,
        timeout: Option<Duration>,
    ) -> Result<()> {
        let value = encode(&channel.name, value)?;
        let state = self.channel_state(channel)?;
        match state.offer(value) {
            Offered::Done => Ok(()),
            Offered::Parked(pending) => {
                let timeout = timeout.filter(|timeout| !timeout.is_zero());
                pending.wait_or(self.stop(&channel.name, timeout)).await
            }
        }
    }

    /// Receives a value from `channel`: the current value (`value`), the head of the queue (`queue`),
    /// or the next value sent (`topic`), waiting up to `timeout` for one.
    ///
    /// `timeout: None` waits as long as it takes. A zero timeout also waits as long as it takes on
    /// `value` and `queue` channels; on a `topic` it is capped at [`TOPIC_ZERO_TIMEOUT_CAP`] with a
    /// warning (a zero-timeout topic receive is almost certainly a mistake, and it could not succeed
    /// at once anyway).
    ///
    /// # Errors
    /// [`Error::ChannelTimeout`] when the timeout expires; [`Error::Cancelled`] as soon as this context
    /// or an ancestor is aborted while waiting; [`Error::InvalidArgument`] when the value does not
    /// deserialize into `T` (it stays in the channel) or the name is declared with another mode.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future loses no value (a queue value handed to it while it waited goes
    /// back to the head of the queue).
    pub(crate) async fn recv<T: DeserializeOwned>(
        &self,
        channel: &Channel<T>,
        timeout: Option<Duration>,
    ) -> Result<T> {
        let state = self.channel_state(channel)?;
        let pending = match state.take_or_wait(|v| decode(&channel.name, v), OnMismatch::Keep)? {
            Taken::Ready(value) => return Ok(value),
            Taken::Waiting(pending) => pending,
        };
        let timeout = match timeout {
            Some(zero) if zero.is_zero() => match channel.mode {
                ChannelMode::Topic => {
                    tracing::warn!(
                        channel = %channel.name,
                        cap = ?TOPIC_ZERO_TIMEOUT_CAP,
                        "zero timeout on a topic recv; waiting up to the cap instead"
                    );
                    Some(TOPIC_ZERO_TIMEOUT_CAP)
                }
                _ => None,
            },
            other => other,
        };
        let value = pending.wait_or(self.stop(&channel.name, timeout)).await?;
        decode(&channel.name, &value).inspect_err(|_| state.give_back(value))
    }

    /// Takes a value without waiting: a queue's head, a value channel's current value (not consumed),
    /// never a topic's.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the value does not deserialize into `T` (it stays in the
    /// channel) or the name is declared with another mode in this execution.
    pub(crate) fn try_recv<T: DeserializeOwned>(&self, channel: &Channel<T>) -> Result<Option<T>> {
        let state = self.channel_state(channel)?;
        state
            .try_take(|v| decode(&channel.name, v), OnMismatch::Keep)
            .transpose()
    }

    /// A handle on `channel` of this context's root execution, for host code.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the name is declared with another mode in this execution.
    pub(crate) fn channel_handle<T>(&self, channel: &Channel<T>) -> Result<ChannelHandle<T>> {
        let store = self.channels.store();
        let state = store.channel(&channel.name, channel.mode)?;
        Ok(ChannelHandle::new(store.clone(), state))
    }

    fn channel_state<T>(&self, channel: &Channel<T>) -> Result<Arc<ChannelState>> {
        self.channels.store().channel(&channel.name, channel.mode)
    }

    /// Resolves with `CANCELLED` when this context is aborted, or `CHANNEL_TIMEOUT` when `timeout`
    /// expires; cancellation wins a tie.
    async fn stop(&self, channel: &str, timeout: Option<Duration>) -> Error {
        let expired = async {
            match timeout {
                Some(timeout) => tokio::time::sleep(timeout).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            biased;
            () = self.cancel.token().cancelled() => Error::cancelled(self.cancel.reason()),
            () = expired => Error::ChannelTimeout {
                channel: channel.to_owned(),
                timeout: timeout.unwrap_or(Duration::MAX),
            },
        }
    }
}

fn encode<T: Serialize>(channel: &str, value: T) -> Result<Value> {
    serde_json::to_value(value).map_err(|source| Error::InvalidArgument {
        argument: "value",
        message: format!("channel `{channel}`: {source}"),
    })
}

fn decode<T: DeserializeOwned>(channel: &str, value: &Value) -> Result<T> {
    T::deserialize(value).map_err(|source| Error::InvalidArgument {
        argument: "value",
        message: format!("channel `{channel}`: {source}"),
    })
}
