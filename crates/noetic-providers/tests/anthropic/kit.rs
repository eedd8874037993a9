//! The provider conformance kit on the Anthropic Messages wire.

use noetic_providers::{Anthropic, RetryConfig};
use noetic_test_support::provider_kit::ProviderKit;
use noetic_test_support::{MockReply, anthropic_fixtures_dir};

fn kit() -> ProviderKit<Anthropic> {
    ProviderKit {
        make: |base_url, api_key, retries| {
            Anthropic::builder(api_key)
                .base_url(base_url)
                .retry(if retries {
                    RetryConfig::default()
                } else {
                    RetryConfig::none()
                })
                .build()
                .expect("provider")
        },
        text_reply: || {
            MockReply::fixture_file(
                &anthropic_fixtures_dir().join("anthropic.text.claude-haiku-4.5.sse"),
            )
        },
        text: "1\n2\n3",
        input_tokens: Some(15),
        output_tokens: Some(9),
        cached_tokens: Some(0),
        terminal_marker_optional: false,
    }
}

noetic_test_support::provider_conformance!(kit());
