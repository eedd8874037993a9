//! The Anthropic provider against the mock provider server: every recorded Messages stream replayed
//! through the real client at 1-byte and whole-body chunking and checked against the facts its
//! `MANIFEST.json` entry states; the turn-2 requests rebuilt from decoded turn-1 histories; the
//! request headers and body.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

mod faults;
mod kit;
mod replay;
mod requests;

use futures_util::StreamExt;
use noetic_core::item::Item;
use noetic_core::model::{ModelParams, ModelRequest, ModelResponse, ResponseAccumulator};
use noetic_core::{ModelProvider, ResponseEvent};
use noetic_providers::{Anthropic, RetryConfig};
use noetic_test_support::{MockServer, anthropic_fixtures_dir};
use serde_json::Value;

/// A provider pointed at the mock server, without retries.
fn provider(server: &MockServer) -> Anthropic {
    Anthropic::builder("sk-ant-test-key")
        .base_url(server.base_url())
        .retry(RetryConfig::none())
        .build()
        .unwrap()
}

/// Sends `request` and folds its events into one response.
async fn respond(
    provider: &impl ModelProvider,
    request: &ModelRequest<'_>,
) -> Result<ModelResponse, noetic_core::Error> {
    let stream = provider.stream(request).await?;
    let mut events = stream.events;
    let mut accumulator = ResponseAccumulator::new();
    while let Some(event) = events.next().await {
        let event: ResponseEvent = event?;
        accumulator.push(&event);
    }
    accumulator.finish("mock", 0)
}

/// Sends a one-message request and folds the answer.
async fn ask(provider: &impl ModelProvider) -> Result<ModelResponse, noetic_core::Error> {
    let params = ModelParams::default();
    let input = [Item::user_text("hello")];
    respond(provider, &ModelRequest::new("claude-test", &input, &params)).await
}

/// The manifest's entries.
fn manifest() -> Vec<Value> {
    let text = std::fs::read_to_string(anthropic_fixtures_dir().join("MANIFEST.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// A fixture file's JSON.
fn fixture_json(name: &str) -> Value {
    let text = std::fs::read_to_string(anthropic_fixtures_dir().join(name)).unwrap();
    serde_json::from_str(&text).unwrap()
}
