//! The provider conformance kit on the Chat Completions wire.

use noetic_providers::{ChatCompletions, RetryConfig};
use noetic_test_support::MockReply;
use noetic_test_support::provider_kit::ProviderKit;

fn kit() -> ProviderKit<ChatCompletions> {
    ProviderKit {
        make: |base_url, api_key, retries| {
            ChatCompletions::builder(base_url)
                .api_key(api_key)
                .retry(if retries {
                    RetryConfig::default()
                } else {
                    RetryConfig::none()
                })
                .build()
                .expect("provider")
        },
        text_reply: || MockReply::fixture("openrouter-chat.text-usage-cost.claude-haiku-4.5.sse"),
        text: "1\n2\n3",
        input_tokens: Some(15),
        output_tokens: Some(9),
        cached_tokens: Some(0),
        terminal_marker_optional: true,
    }
}

noetic_test_support::provider_conformance!(kit());
