//! Custom headers: any valid name in any case, from `&'static str` or runtime `String`s, sent on every
//! request; an invalid name or value is a `PROVIDER_CONFIG_INVALID` from `build()` naming the header.

use noetic_providers::{ChatCompletions, OpenResponses, OpenRouter, ProviderError, RetryConfig};
use noetic_test_support::{MockReply, MockServer};

use super::events;

const TEXT: &str = "openai-responses.text.gpt-4o-mini.sse";
const CHAT: &str = "openrouter-chat.text-usage-cost.claude-haiku-4.5.sse";

#[tokio::test]
async fn a_header_name_with_capitals_is_accepted_and_sent() {
    let server = MockServer::start().await;
    server.push(MockReply::fixture(TEXT));
    // OpenRouter's own documentation spells the attribution headers this way.
    let provider = OpenRouter::builder("sk-or-test")
        .base_url(server.base_url())
        .header("HTTP-Referer", "https://x.example")
        .header("X-Title", "noetic tests")
        .retry(RetryConfig::none())
        .build()
        .unwrap();
    events(&provider).await.unwrap();
    let request = &server.requests()[0];
    assert_eq!(request.header("http-referer"), Some("https://x.example"));
    assert_eq!(request.header("x-title"), Some("noetic tests"));
}

#[tokio::test]
async fn a_chat_header_name_with_capitals_is_accepted_and_sent() {
    let server = MockServer::start().await;
    server.push(MockReply::fixture(CHAT));
    let provider = ChatCompletions::builder(server.base_url())
        .header("HTTP-Referer", "https://x.example")
        .retry(RetryConfig::none())
        .build()
        .unwrap();
    events(&provider).await.unwrap();
    assert_eq!(
        server.requests()[0].header("http-referer"),
        Some("https://x.example")
    );
}

#[tokio::test]
async fn header_names_from_runtime_config_are_accepted_and_sent() {
    // Names and values read at run time (a config file, the environment) are `String`s.
    let config: Vec<(String, String)> = vec![
        ("X-Custom-Tag".to_owned(), "from-config".to_owned()),
        ("x-other".to_owned(), "second".to_owned()),
    ];
    let server = MockServer::start().await;
    server.push(MockReply::fixture(TEXT));
    server.push(MockReply::fixture(CHAT));
    let mut responses = OpenResponses::builder(server.base_url()).retry(RetryConfig::none());
    let mut chat = ChatCompletions::builder(server.base_url()).retry(RetryConfig::none());
    for (name, value) in &config {
        responses = responses.header(name.clone(), value.clone());
        chat = chat.header(name.as_str(), value.as_str());
    }
    events(&responses.build().unwrap()).await.unwrap();
    events(&chat.build().unwrap()).await.unwrap();
    for request in server.requests() {
        assert_eq!(request.header("x-custom-tag"), Some("from-config"));
        assert_eq!(request.header("x-other"), Some("second"));
    }
}

fn assert_names_header(error: &ProviderError, header: &str) {
    assert_eq!(error.code(), "PROVIDER_CONFIG_INVALID", "{error}");
    assert!(
        error.to_string().contains(&format!("`{header}`")),
        "the error names the header: {error}"
    );
}

#[test]
fn an_invalid_header_name_is_a_config_error_naming_it() {
    for name in ["bad header", "x:colon", "x-ünïcode", "(parens)"] {
        let error = OpenResponses::builder("http://127.0.0.1:9/v1")
            .header(name, "v")
            .build()
            .unwrap_err();
        assert_names_header(&error, name);
        let error = ChatCompletions::builder("http://127.0.0.1:9/v1")
            .header(name, "v")
            .build()
            .unwrap_err();
        assert_names_header(&error, name);
    }
    let error = OpenResponses::builder("http://127.0.0.1:9/v1")
        .header("", "v")
        .build()
        .unwrap_err();
    assert_eq!(error.code(), "PROVIDER_CONFIG_INVALID");
    assert!(error.to_string().contains("empty"), "{error}");
}

#[test]
fn an_invalid_header_value_is_a_config_error_naming_the_header_not_the_value() {
    let value = "sk-secret-value\nInjected: yes";
    let error = OpenRouter::builder("sk-or-test")
        .header("X-Api-Key", value)
        .build()
        .unwrap_err();
    assert_names_header(&error, "X-Api-Key");
    let error = ChatCompletions::builder("http://127.0.0.1:9/v1")
        .header("x-api-key", value)
        .build()
        .unwrap_err();
    assert_names_header(&error, "x-api-key");
    assert!(!format!("{error} {error:?}").contains("sk-secret-value"));
}
