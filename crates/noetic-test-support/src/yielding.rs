//! [`YieldingModel`]: a model that answers at once but yields before every stream event, so a test's
//! operations land between the events (property tests of interleavings).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use noetic_core::model::{ModelRequest, ModelStream};
use noetic_core::{ModelProvider, Result};

use crate::ScriptedResponse;

type Answer = dyn Fn(&ModelRequest<'_>, usize) -> ScriptedResponse + Send + Sync;

/// Answers each request with `answer(request, n)`, `n` numbering the requests from 0, and yields to
/// the runtime before each event of the answer. Clones share the numbering.
#[derive(Clone)]
pub struct YieldingModel {
    calls: Arc<AtomicUsize>,
    answer: Arc<Answer>,
}

impl std::fmt::Debug for YieldingModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("YieldingModel")
            .field("calls", &self.calls.load(Ordering::SeqCst))
            .finish_non_exhaustive()
    }
}

impl YieldingModel {
    /// A model answering with `answer`.
    pub fn new(
        answer: impl Fn(&ModelRequest<'_>, usize) -> ScriptedResponse + Send + Sync + 'static,
    ) -> Self {
        Self::numbered(Arc::default(), answer)
    }

    /// The same, numbering requests with `calls` (shared by models that must not reuse a number:
    /// one per harness across restarts, say).
    pub fn numbered(
        calls: Arc<AtomicUsize>,
        answer: impl Fn(&ModelRequest<'_>, usize) -> ScriptedResponse + Send + Sync + 'static,
    ) -> Self {
        YieldingModel {
            calls,
            answer: Arc::new(answer),
        }
    }
}

impl ModelProvider for YieldingModel {
    fn stream<'a>(&'a self, request: &'a ModelRequest<'a>) -> BoxFuture<'a, Result<ModelStream>> {
        let call = self.calls.fetch_add(1, Ordering::SeqCst);
        let events = (self.answer)(request, call).into_events();
        Box::pin(async move {
            let events = futures_util::stream::iter(events)
                .then(|event| async move {
                    tokio::task::yield_now().await;
                    Ok(event)
                })
                .boxed();
            Ok(ModelStream {
                generation_id: None,
                events,
            })
        })
    }
}
