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
        ..kit_of_the_reply()
    }
}

/// What both providers of the toy wire answer: the reply and what it decodes to.
fn kit_of_the_reply<P>() -> ProviderKit<P> {
    ProviderKit {
        make: |_, _, _| unreachable!("each kit sets its own `make`"),
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

/// The same wire as a `Wire` on `noetic-providers`' public plumbing, held to the same kit.
mod wire {
    use noetic_providers::wire::HttpProvider;
    use noetic_test_support::provider_kit::ProviderKit;
    use noetic_toy_provider::{ToyWire, toy_wire_provider};

    fn kit() -> ProviderKit<HttpProvider<ToyWire>> {
        ProviderKit {
            make: |base_url, api_key, retries| {
                toy_wire_provider(base_url, api_key, retries).expect("provider")
            },
            ..super::kit_of_the_reply()
        }
    }

    noetic_test_support::provider_conformance!(kit());
}
