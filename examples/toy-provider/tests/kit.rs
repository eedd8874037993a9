//! The toy provider held to the provider conformance kit, as any provider crate's tests would be.

#![allow(clippy::expect_used)]

use noetic_test_support::MockReply;
use noetic_test_support::provider_kit::ProviderKit;
use noetic_toy_provider::ToyProvider;
use serde_json::json;

fn kit() -> ProviderKit<ToyProvider> {
    ProviderKit {
        make: |base_url, api_key, retries| {
            ToyProvider::new(base_url, api_key).retries(if retries { 2 } else { 0 })
        },
        text_reply: || {
            MockReply::sse_events([
                json!({"type": "text", "text": "Hello"}),
                json!({"type": "text", "text": ", world"}),
                json!({"type": "done", "input_tokens": 7, "output_tokens": 3}),
            ])
            .terminal_event_type("done")
        },
        text: "Hello, world",
        input_tokens: Some(7),
        output_tokens: Some(3),
        // The toy wire reports no cached count: absent, not 0.
        cached_tokens: None,
        terminal_marker_optional: false,
    }
}

noetic_test_support::provider_conformance!(kit());
