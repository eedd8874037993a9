//! A context's side of durability: what a checkpoint records of it, explicit checkpoints, and a root
//! rebuilt from a checkpoint. The journal itself lives in [`crate::checkpoint`], which knows nothing of
//! contexts.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio_util::sync::CancellationToken;

use super::{Context, Fields};
use crate::Result;
use crate::checkpoint::{CheckpointSource, Journal, Restored, Snapshot};
use crate::event::EventSink;
use crate::layer::ContextLayer;
use crate::runtime::Runtime;
use crate::sync::lock;

/// How [`crate::AgentHarness::restore`] rebuilds a context, beyond what the checkpoint holds.
#[derive(Default, Clone)]
#[non_exhaustive]
pub struct RestoreOptions {
    /// Where the restored context's events go.
    pub event_sink: Option<Arc<dyn EventSink>>,
    /// The restored context's layers (default: the runtime's).
    pub layers: Option<Vec<Arc<dyn ContextLayer>>>,
    /// A resumed session turn's steer inbox and transcript (set by the session runner).
    pub(crate) turn: Option<(Arc<super::SteerInbox>, Arc<super::Transcript>)>,
}

impl RestoreOptions {
    /// No sink, the runtime's layers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sends the restored context's events to `sink`.
    pub fn event_sink(mut self, sink: Arc<dyn EventSink>) -> Self {
        self.event_sink = Some(sink);
        self
    }

    /// The restored context's layers.
    pub fn layers(mut self, layers: Vec<Arc<dyn ContextLayer>>) -> Self {
        self.layers = Some(layers);
        self
    }
}

impl std::fmt::Debug for RestoreOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RestoreOptions")
            .field("event_sink", &self.event_sink.is_some())
            .finish_non_exhaustive()
    }
}

impl CheckpointSource for Context {
    fn snapshot(&self, persisted: usize) -> Snapshot {
        let (new_items, item_count) = {
            let items = lock(&self.inner.items);
            (
                items
                    .get(persisted..)
                    .map(<[_]>::to_vec)
                    .unwrap_or_default(),
                items.len(),
            )
        };
        Snapshot {
            new_items,
            item_count,
            state: self.state(),
            spend: self.spend(),
            step_count: self.step_count(),
            steers_taken: self
                .inner
                .steers
                .as_ref()
                .map(|inbox| inbox.taken())
                .unwrap_or_default(),
        }
    }
}

impl Context {
    /// The journal of this context when it is a durable root.
    pub(crate) fn journal(&self) -> Option<&Arc<Journal>> {
        self.inner.journal.as_ref()
    }

    /// The engine's journal this context's steps run through (its root's), if any.
    pub(crate) fn step_journal(&self) -> Option<&Arc<dyn crate::engine::StepJournal>> {
        self.inner.step_journal.as_ref()
    }

    /// Records this context's execution now (what changed since its last checkpoint). Runs on a durable
    /// root already record at every completed step, model round and tool output; this is for a step or
    /// host that wants a checkpoint between those. A no-op without a durable store, on a child, and
    /// outside a run.
    ///
    /// # Errors
    /// [`crate::Error::LeaseLost`] when another runtime took the execution over; storage errors.
    ///
    /// # Cancel safety
    /// Dropping the future leaves the store with the whole checkpoint or none of it.
    pub async fn checkpoint(&self) -> Result<()> {
        match self.journal() {
            Some(journal) => journal.checkpoint(self).await,
            None => Ok(()),
        }
    }

    /// The key a tool call uses to make its side effect happen once: `{execution id}:{call id}`, the same
    /// when the call is run again after a crash.
    pub(crate) fn idempotency_key(&self, call_id: &str) -> String {
        format!("{}:{call_id}", self.root().id())
    }

    /// A root context continuing the execution `restored` on `runtime`.
    pub(crate) fn restored(
        runtime: Arc<Runtime>,
        mut restored: Restored,
        options: RestoreOptions,
    ) -> Context {
        let journal = runtime
            .durability()
            .map(|durability| Arc::new(Journal::restored(durability.clone(), &mut restored)));
        let Restored {
            header,
            state,
            items,
            ..
        } = restored;
        let (steers, transcript) = match options.turn {
            Some((inbox, transcript)) => {
                (Some(inbox), Some(super::TranscriptRef::Root(transcript)))
            }
            None => (None, None),
        };
        let layers: Arc<[Arc<dyn ContextLayer>]> = match options.layers {
            Some(layers) => layers.into(),
            None => runtime.layers(),
        };
        let ctx = Context::make(
            Fields {
                runtime,
                thread_id: header.thread_id,
                resource_id: header.resource_id,
                state: state.state,
                items,
                sink: options.event_sink,
                layers: Some(layers),
                steers,
                transcript,
                id: Some(header.execution_id),
                journal,
                step_journal: None,
            },
            None,
            0,
            CancellationToken::new(),
        );
        *lock(&ctx.inner.spend) = state.spend;
        ctx.inner
            .step_count
            .store(state.step_count, Ordering::Relaxed);
        ctx
    }
}
