//! The OpenResponses provider against the mock provider server: every recorded Responses stream
//! replayed at several chunk sizes through the real client, with expectations written from the captures.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

mod faults;
mod kit;
mod replay;
mod requests;

use futures_util::StreamExt;
use noetic_core::item::Item;
use noetic_core::model::{ModelParams, ModelRequest, ModelResponse, ResponseAccumulator};
use noetic_core::{ModelProvider, ResponseEvent};
use noetic_providers::{OpenResponses, RetryConfig};
use noetic_test_support::MockServer;

/// A provider pointed at the mock server, without retries unless a test asks for them.
fn provider(server: &MockServer) -> OpenResponses {
    OpenResponses::builder(server.base_url())
        .name("mock")
        .retry(RetryConfig::none())
        .build()
        .unwrap()
}

/// Sends one request and collects the raw events (or the first error).
async fn events(provider: &impl ModelProvider) -> Result<Vec<ResponseEvent>, noetic_core::Error> {
    let params = ModelParams::default();
    let input = [Item::user_text("hello")];
    collect(provider, &ModelRequest::new("test-model", &input, &params)).await
}

/// Sends `request` and collects the raw events (or the first error).
async fn collect(
    provider: &impl ModelProvider,
    request: &ModelRequest<'_>,
) -> Result<Vec<ResponseEvent>, noetic_core::Error> {
    let stream = provider.stream(request).await?;
    let mut events = Vec::new();
    let mut stream = stream.events;
    while let Some(event) = stream.next().await {
        events.push(event?);
    }
    Ok(events)
}

/// Folds events into responses, starting a new one after each terminal event (one recording holds
/// several responses back to back).
fn responses(events: &[ResponseEvent]) -> Vec<ModelResponse> {
    let mut out = Vec::new();
    let mut accumulator = ResponseAccumulator::new();
    let mut open = false;
    for event in events {
        accumulator.push(event);
        open = true;
        if matches!(event, ResponseEvent::Finished(_)) {
            out.push(std::mem::take(&mut accumulator).finish("mock", 0).unwrap());
            open = false;
        }
    }
    if open {
        out.push(accumulator.finish("mock", 0).unwrap());
    }
    out
}
