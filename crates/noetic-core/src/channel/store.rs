//! The channels of one root execution and their external lifecycle.
//!
//! A root context owns a [`RootChannels`]: a count of the `run()` calls in progress on it and, created on
//! first use, the [`ChannelStore`] its whole tree shares. The store is open while runs are in progress (and
//! before the first one); when the outermost run ends it closes, which ends external streams and makes
//! external sends fail with `CHANNEL_CLOSED`; the next run reopens it. Internal operations (steps' `send`
//! and `recv`) are not affected by the lifecycle.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use tokio_util::sync::CancellationToken;

use super::ChannelMode;
use super::state::{ChannelState, lock};
use crate::{Error, Result};

/// The channel state a root context carries (children use their root's).
#[derive(Default)]
pub(crate) struct RootChannels {
    /// Guards the run count and the store's creation together, so a store created while no run is in
    /// progress after one has ended starts closed, and a close never misses a store being created.
    runs: Mutex<Runs>,
    /// Created on first use, so a root that never touches a channel allocates nothing for them.
    store: OnceLock<Arc<ChannelStore>>,
}

#[derive(Default)]
struct Runs {
    /// `run()` calls in progress on this root (nested calls included).
    depth: usize,
    /// Whether an outermost run has ended (so a store created now starts closed).
    ended: bool,
}

/// Every channel of one root execution, keyed by name.
pub(crate) struct ChannelStore {
    channels: Mutex<HashMap<Arc<str>, Arc<ChannelState>>>,
    lifecycle: Mutex<Lifecycle>,
}

struct Lifecycle {
    closed: bool,
    /// Cancelled when the store closes; replaced by a fresh token when it reopens. A stream keeps the
    /// token of the open period it was created in, so it ends even if a later run reopens the store.
    closing: CancellationToken,
}

impl RootChannels {
    /// The store, created on first use.
    pub(crate) fn store(&self) -> &Arc<ChannelStore> {
        if let Some(store) = self.store.get() {
            return store;
        }
        let runs = lock(&self.runs);
        self.store
            .get_or_init(|| Arc::new(ChannelStore::new(runs.depth == 0 && runs.ended)))
    }

    fn enter(&self) {
        let mut runs = lock(&self.runs);
        if runs.depth == 0
            && let Some(store) = self.store.get()
        {
            store.reopen();
        }
        runs.depth += 1;
    }

    fn exit(&self) {
        let mut runs = lock(&self.runs);
        runs.depth = runs.depth.saturating_sub(1);
        if runs.depth == 0 {
            runs.ended = true;
            if let Some(store) = self.store.get() {
                store.close();
            }
        }
    }
}

impl ChannelStore {
    fn new(closed: bool) -> Self {
        let closing = CancellationToken::new();
        if closed {
            closing.cancel();
        }
        ChannelStore {
            channels: Mutex::new(HashMap::new()),
            lifecycle: Mutex::new(Lifecycle { closed, closing }),
        }
    }

    /// The channel called `name`, created on first use with `mode`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the name was first declared with another mode or capacity.
    pub(crate) fn channel(&self, name: &Arc<str>, mode: ChannelMode) -> Result<Arc<ChannelState>> {
        let mut channels = lock(&self.channels);
        let state = channels
            .entry(name.clone())
            .or_insert_with(|| Arc::new(ChannelState::new(name.clone(), mode)));
        if state.mode != mode {
            return Err(Error::InvalidArgument {
                argument: "channel",
                message: format!(
                    "channel `{name}` is declared as {} here but as {} elsewhere in this execution",
                    mode, state.mode
                ),
            });
        }
        Ok(state.clone())
    }

    /// Whether the root execution has ended (and not been re-run since).
    pub(crate) fn is_closed(&self) -> bool {
        lock(&self.lifecycle).closed
    }

    /// The token cancelled when the current open period ends (already cancelled while closed).
    pub(crate) fn closing(&self) -> CancellationToken {
        lock(&self.lifecycle).closing.clone()
    }

    fn close(&self) {
        let mut lifecycle = lock(&self.lifecycle);
        lifecycle.closed = true;
        lifecycle.closing.cancel();
    }

    fn reopen(&self) {
        let mut lifecycle = lock(&self.lifecycle);
        if lifecycle.closed {
            lifecycle.closed = false;
            lifecycle.closing = CancellationToken::new();
        }
    }
}

/// Counts one `run()` on a root context while alive: the outermost run's guard closes the root's
/// external channels when dropped, however the run ends (output, error, or the future being dropped).
/// On a child context it does nothing: only the root's own runs bound the execution.
pub(crate) struct RunGuard<'a> {
    root: Option<&'a RootChannels>,
}

impl<'a> RunGuard<'a> {
    /// Enters a run: `root` is the channels of the context the run is on when it is a root, `None` on a
    /// child.
    pub(crate) fn enter(root: Option<&'a RootChannels>) -> Self {
        if let Some(root) = root {
            root.enter();
        }
        RunGuard { root }
    }
}

impl Drop for RunGuard<'_> {
    fn drop(&mut self) {
        if let Some(root) = self.root {
            root.exit();
        }
    }
}
