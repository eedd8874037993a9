//! Provider configuration through the public builders: custom headers (any valid name, checked at
//! `build()`), and secrets (keys in headers, in the base URL, echoed back by a server) that never reach
//! `Debug` output or errors.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

mod body;
mod headers;
mod marks;
mod secrets;
mod tool_choice;

use futures_util::StreamExt;
use noetic_core::item::Item;
use noetic_core::model::{ModelParams, ModelRequest};
use noetic_core::{ModelProvider, ResponseEvent};

/// Sends one request and collects the raw events (or the first error).
async fn events(provider: &impl ModelProvider) -> Result<Vec<ResponseEvent>, noetic_core::Error> {
    let params = ModelParams::default();
    let input = [Item::user_text("hello")];
    let request = ModelRequest::new("test-model", &input, &params);
    let stream = provider.stream(&request).await?;
    let mut events = Vec::new();
    let mut stream = stream.events;
    while let Some(event) = stream.next().await {
        events.push(event?);
    }
    Ok(events)
}
