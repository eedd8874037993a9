//! Host access to the channels of a context's execution.

use super::AgentHarness;
use crate::Result;
use crate::channel::{Channel, ChannelHandle};
use crate::context::Context;

impl AgentHarness {
    /// A handle on `channel` of `ctx`'s root execution, for host code; the same as
    /// [`Context::channel_handle`].
    ///
    /// # Errors
    /// [`crate::Error::InvalidArgument`] when the name is declared with another mode in this execution.
    pub fn channel_handle<T>(
        &self,
        ctx: &Context,
        channel: &Channel<T>,
    ) -> Result<ChannelHandle<T>> {
        ctx.channel_handle(channel)
    }
}
