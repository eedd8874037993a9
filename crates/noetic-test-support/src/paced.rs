//! A model whose streams the test drives event by event.

use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use noetic_core::model::{ModelRequest, ModelStream};
use noetic_core::{Error, ModelProvider, ResponseEvent, Result};
use tokio::sync::mpsc;

use crate::scripted::RecordedRequest;

/// One request received by a [`PacedModel`]: what was asked, and the sending end of its stream.
#[derive(Debug)]
pub struct PacedCall {
    /// The request.
    pub request: RecordedRequest,
    events: mpsc::UnboundedSender<Result<ResponseEvent>>,
}

impl PacedCall {
    /// Sends one event (ignored if the client already dropped the stream, e.g. after a steer cut it).
    pub fn send(&self, event: ResponseEvent) {
        let _ = self.events.send(Ok(event));
    }

    /// Sends every event, in order.
    pub fn send_all(&self, events: impl IntoIterator<Item = ResponseEvent>) {
        for event in events {
            self.send(event);
        }
    }

    /// Fails the stream with `error`.
    pub fn fail(&self, error: Error) {
        let _ = self.events.send(Err(error));
    }

    /// Whether the client has dropped the stream (cancelled the request).
    pub fn is_dropped(&self) -> bool {
        self.events.is_closed()
    }

    /// Resolves when the client drops the stream.
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn dropped(&self) {
        self.events.closed().await;
    }
}

/// A provider whose every request becomes a [`PacedCall`] that the test receives with
/// [`PacedModel::next_call`] and answers event by event, so a test decides exactly when each event is
/// emitted. Dropping a `PacedCall` ends its stream. Clones share the same calls.
#[derive(Clone)]
pub struct PacedModel {
    calls: mpsc::UnboundedSender<PacedCall>,
    receiver: Arc<tokio::sync::Mutex<mpsc::UnboundedReceiver<PacedCall>>>,
    count: Arc<Mutex<usize>>,
}

impl std::fmt::Debug for PacedModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PacedModel").finish_non_exhaustive()
    }
}

impl Default for PacedModel {
    fn default() -> Self {
        Self::new()
    }
}

impl PacedModel {
    /// A model with no calls yet.
    pub fn new() -> Self {
        let (calls, receiver) = mpsc::unbounded_channel();
        PacedModel {
            calls,
            receiver: Arc::new(tokio::sync::Mutex::new(receiver)),
            count: Arc::default(),
        }
    }

    /// The next request, as soon as the harness sends it.
    ///
    /// # Panics
    /// If the model was dropped (cannot happen while `self` lives).
    pub async fn next_call(&self) -> PacedCall {
        self.receiver
            .lock()
            .await
            .recv()
            .await
            .expect("the model holds a sender")
    }

    /// How many requests were received so far.
    pub fn call_count(&self) -> usize {
        *self
            .count
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl ModelProvider for PacedModel {
    fn stream<'a>(&'a self, request: &'a ModelRequest<'a>) -> BoxFuture<'a, Result<ModelStream>> {
        let recorded = RecordedRequest::from_request(request);
        let (sender, receiver) = mpsc::unbounded_channel();
        *self
            .count
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) += 1;
        let _ = self.calls.send(PacedCall {
            request: recorded,
            events: sender,
        });
        Box::pin(async move {
            let events = futures_util::stream::unfold(receiver, |mut receiver| async move {
                receiver.recv().await.map(|event| (event, receiver))
            })
            .boxed();
            Ok(ModelStream {
                generation_id: None,
                events,
            })
        })
    }
}
