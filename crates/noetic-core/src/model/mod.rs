//! The model-provider seam: requests, streamed OpenResponses events, and their accumulation.
//!
//! A [`ModelProvider`] turns one [`ModelRequest`] (a *round*) into a stream of [`ResponseEvent`]s in the
//! OpenResponses format, whatever the wire underneath (OpenResponses, Chat Completions, a scripted test
//! model). The [`ResponseAccumulator`] folds those events into the round's final items, status and usage,
//! the same way for every provider.

mod accumulator;
mod event;
mod request;

pub use accumulator::{MAX_OUTPUT_INDEX, ModelResponse, ResponseAccumulator};
pub use event::{ReasoningKind, ResponseEvent, ResponseSnapshot, ResponseStatus};
pub use request::{ModelParams, ModelRequest, OutputFormat, PromptCache, ToolChoice, ToolSpec};

use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;

use crate::Result;

/// A provider of streamed model responses.
///
/// Implementations live in adapter crates (`noetic-providers`) and in `noetic-test-support` (the scripted
/// model). The trait is object-safe: the harness keeps providers as `Arc<dyn ModelProvider>`.
pub trait ModelProvider: Send + Sync + 'static {
    /// Sends one round's request and returns its event stream.
    ///
    /// The returned future resolves once the response has started (HTTP headers arrived), so
    /// [`ModelStream::generation_id`] is known before any event. Errors before that point (HTTP status,
    /// connection) are returned here; errors after it come through the stream.
    ///
    /// # Cancel safety
    /// Dropping the future or the stream cancels the request (for HTTP providers: closes the connection).
    /// Nothing is retried after a drop.
    fn stream<'a>(&'a self, request: &'a ModelRequest<'a>) -> BoxFuture<'a, Result<ModelStream>>;
}

/// A started model response.
#[must_use = "a model stream does nothing unless polled"]
pub struct ModelStream {
    /// The provider's generation or response id, when known from the response headers.
    pub generation_id: Option<String>,
    /// The events, ending with a terminal [`ResponseEvent::Finished`] (or an error).
    pub events: BoxStream<'static, Result<ResponseEvent>>,
}

impl std::fmt::Debug for ModelStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelStream")
            .field("generation_id", &self.generation_id)
            .finish_non_exhaustive()
    }
}

impl<T: ModelProvider + ?Sized> ModelProvider for std::sync::Arc<T> {
    fn stream<'a>(&'a self, request: &'a ModelRequest<'a>) -> BoxFuture<'a, Result<ModelStream>> {
        (**self).stream(request)
    }
}

impl<T: ModelProvider + ?Sized> ModelProvider for Box<T> {
    fn stream<'a>(&'a self, request: &'a ModelRequest<'a>) -> BoxFuture<'a, Result<ModelStream>> {
        (**self).stream(request)
    }
}
