//! `Context`'s channel operations: each builds the channel [`Endpoint`] of this context (its root's
//! channels, its cancellation and abort reason) and runs the operation there (see [`crate::channel`]).

use std::time::Duration;

use serde::{Serialize, de::DeserializeOwned};

use super::Context;
use crate::Result;
use tokio_util::sync::CancellationToken;

use crate::channel::{Cancellation, Channel, ChannelHandle, Endpoint};

impl Context {
    /// Sends `value` on `channel`, waiting up to [`DEFAULT_SEND_TIMEOUT`](crate::channel::DEFAULT_SEND_TIMEOUT) while a queue is full.
    ///
    /// Value and topic sends, and queue sends with room, complete at once.
    ///
    /// # Errors
    /// See [`send_timeout`](Context::send_timeout).
    ///
    /// # Cancel safety
    /// Not cancel safe while parked on a full queue: dropping the future discards the value, unless a
    /// freed slot had already taken it.
    pub async fn send<T: Serialize>(&self, channel: &Channel<T>, value: T) -> Result<()> {
        self.channels().send(channel, value).await
    }

    /// Sends `value` on `channel`; on a full queue, parks behind earlier parked senders until a
    /// `recv`/`try_recv` frees a slot. `timeout`: `None` or zero waits as long as it takes.
    ///
    /// # Errors
    /// [`Error::ChannelTimeout`](crate::Error::ChannelTimeout) when the timeout expires while parked (the value is discarded);
    /// [`Error::Cancelled`](crate::Error::Cancelled) as soon as this context or an ancestor is aborted while parked (likewise);
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) when `value` does not serialize, or the name is declared with another
    /// mode in this execution.
    ///
    /// # Cancel safety
    /// Not cancel safe while parked on a full queue: dropping the future discards the value, unless a
    /// freed slot had already taken it.
    pub async fn send_timeout<T: Serialize>(
        &self,
        channel: &Channel<T>,
        value: T,
        timeout: Option<Duration>,
    ) -> Result<()> {
        self.channels().send_timeout(channel, value, timeout).await
    }

    /// Receives a value from `channel`: the current value (`value`), the head of the queue (`queue`),
    /// or the next value sent (`topic`), waiting up to `timeout` for one.
    ///
    /// `timeout: None` waits as long as it takes. A zero timeout also waits as long as it takes on
    /// `value` and `queue` channels; on a `topic` it is capped at [`TOPIC_ZERO_TIMEOUT_CAP`](crate::channel::TOPIC_ZERO_TIMEOUT_CAP) with a
    /// warning (a zero-timeout topic receive is almost certainly a mistake, and it could not succeed
    /// at once anyway).
    ///
    /// # Errors
    /// [`Error::ChannelTimeout`](crate::Error::ChannelTimeout) when the timeout expires; [`Error::Cancelled`](crate::Error::Cancelled) as soon as this context
    /// or an ancestor is aborted while waiting; [`Error::InvalidArgument`](crate::Error::InvalidArgument) when the value does not
    /// deserialize into `T` (it stays in the channel) or the name is declared with another mode.
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future loses no value (a queue value handed to it while it waited goes
    /// back to the head of the queue).
    pub async fn recv<T: DeserializeOwned>(
        &self,
        channel: &Channel<T>,
        timeout: Option<Duration>,
    ) -> Result<T> {
        self.channels().recv(channel, timeout).await
    }

    /// Takes a value without waiting: a queue's head, a value channel's current value (not consumed),
    /// never a topic's.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) when the value does not deserialize into `T` (it stays in the
    /// channel) or the name is declared with another mode in this execution.
    pub fn try_recv<T: DeserializeOwned>(&self, channel: &Channel<T>) -> Result<Option<T>> {
        self.channels().try_recv(channel)
    }

    /// A handle on `channel` of this context's root execution, for host code.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) when the name is declared with another mode in this execution.
    pub fn channel_handle<T>(&self, channel: &Channel<T>) -> Result<ChannelHandle<T>> {
        self.channels().channel_handle(channel)
    }

    /// The channel endpoint of this context: its root's channels, stopped by its cancellation.
    fn channels(&self) -> Endpoint<'_> {
        Endpoint {
            channels: self.root_channels(),
            cancel: self,
        }
    }
}

impl Cancellation for Context {
    fn token(&self) -> &CancellationToken {
        self.cancellation_token()
    }

    fn reason(&self) -> Option<String> {
        self.abort_reason()
    }
}
