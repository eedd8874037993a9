//! The provider conformance kit on the OpenResponses wire.

use noetic_providers::{OpenResponses, RetryConfig};
use noetic_test_support::MockReply;
use noetic_test_support::provider_kit::ProviderKit;

fn kit() -> ProviderKit<OpenResponses> {
    ProviderKit {
        make: |base_url, api_key, retries| {
            OpenResponses::builder(base_url)
                .api_key(api_key)
                .retry(if retries {
                    RetryConfig::default()
                } else {
                    RetryConfig::none()
                })
                .build()
                .expect("provider")
        },
        text_reply: || MockReply::fixture("openai-responses.text.gpt-4o-mini.sse"),
        text: "Hello! How can I assist you today?",
        input_tokens: Some(11),
        output_tokens: Some(10),
        cached_tokens: Some(0),
        terminal_marker_optional: false,
    }
}

noetic_test_support::provider_conformance!(kit());
