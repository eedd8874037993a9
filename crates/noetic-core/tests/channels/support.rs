//! Shared helpers for the channel tests.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use noetic_core::{AgentHarness, Context, ContextOptions};

/// The error type of bodies that cannot fail.
pub(crate) type Never = std::convert::Infallible;

/// A harness without providers.
pub(crate) fn harness() -> AgentHarness {
    AgentHarness::builder("channels")
        .build()
        .expect("harness builds")
}

/// A fresh root context.
pub(crate) fn root(harness: &AgentHarness) -> Context {
    harness.create_context(ContextOptions::new())
}

/// A child context of `parent`.
pub(crate) fn child(parent: &Context) -> Context {
    parent
        .runtime()
        .create_context(ContextOptions::new().parent(parent))
}

/// Polls `future` exactly once: a channel operation registers its waiter (or parks) on its first poll,
/// so after a `Pending` here the operation is known to be waiting, with no sleeping.
pub(crate) async fn poll_once<F: Future + Unpin>(future: &mut F) -> Poll<F::Output> {
    std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut *future).poll(cx))).await
}

/// Asserts that `future` is still waiting.
pub(crate) async fn assert_pending<F: Future + Unpin>(future: &mut F, what: &str) {
    assert!(
        poll_once(future).await.is_pending(),
        "{what} should still be waiting"
    );
}

/// Polls `future` once and returns its output, failing if it is still waiting.
pub(crate) async fn ready<F: Future + Unpin>(future: &mut F, what: &str) -> F::Output {
    match poll_once(future).await {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("{what} should have completed"),
    }
}
