//! Extra body fields (`.body_field(..)`): merged into the request body, and when one repeats a field
//! the provider sends itself, the extra one replaces it: the key appears once on the wire.

use noetic_core::ModelProvider;
use noetic_core::item::Item;
use noetic_core::model::{ModelParams, ModelRequest};
use noetic_providers::{ChatCompletions, OpenAI, RetryConfig};
use noetic_test_support::{MockReply, MockServer, RecordedHttpRequest};
use serde_json::{Value, json};

/// Sends one request with sampling parameters set, so the body has typed fields to collide with.
async fn send(provider: &impl ModelProvider) {
    let mut params = ModelParams::default();
    params.temperature = Some(0.9);
    params.max_output_tokens = Some(100);
    let input = [Item::user_text("hello")];
    let request = ModelRequest::new("typed/model", &input, &params);
    let mut stream = provider.stream(&request).await.unwrap().events;
    while let Some(event) = futures_util::StreamExt::next(&mut stream).await {
        event.unwrap();
    }
}

/// How often `"key":` appears in the raw body (at any depth: the keys tested appear at the top only).
fn occurrences(request: &RecordedHttpRequest, key: &str) -> usize {
    let text = std::str::from_utf8(&request.raw_body).unwrap();
    text.matches(&format!("\"{key}\":")).count()
}

#[tokio::test]
async fn a_body_field_that_repeats_a_typed_field_replaces_it_without_a_duplicate_key() {
    let server = MockServer::start().await;
    server.push(MockReply::fixture("openai-responses.text.gpt-4o-mini.sse"));
    // The OpenAI preset sets `store` and `include` itself; the extras replace them and two more.
    let provider = OpenAI::builder("sk-test")
        .base_url(server.base_url())
        .body_field("store", json!(true))
        .body_field("include", json!([]))
        .body_field("temperature", json!(0.1))
        .body_field("model", json!("extra/model"))
        .body_field("reasoning", json!({"effort": "low"}))
        .retry(RetryConfig::none())
        .build()
        .unwrap();
    send(&provider).await;
    let request = &server.requests()[0];
    for key in [
        "store",
        "include",
        "temperature",
        "model",
        "reasoning",
        "stream",
    ] {
        assert_eq!(
            occurrences(request, key),
            1,
            "`{key}` once in {:?}",
            request.raw_body
        );
    }
    let body = &request.body;
    assert_eq!(body["store"], json!(true));
    assert_eq!(body["include"], json!([]));
    assert_eq!(body["temperature"], json!(0.1));
    assert_eq!(body["model"], json!("extra/model"));
    assert_eq!(body["reasoning"], json!({"effort": "low"}));
    assert_eq!(
        body["max_output_tokens"],
        json!(100),
        "typed fields not repeated stay"
    );
    assert_eq!(body["input"][0]["role"], json!("user"));
}

#[tokio::test]
async fn a_chat_body_field_that_repeats_a_typed_field_replaces_it_without_a_duplicate_key() {
    let server = MockServer::start().await;
    server.push(MockReply::fixture(
        "openrouter-chat.text-usage-cost.claude-haiku-4.5.sse",
    ));
    let provider = ChatCompletions::builder(server.base_url())
        .body_field("temperature", json!(0.1))
        .body_field("max_tokens", Value::Null)
        .retry(RetryConfig::none())
        .build()
        .unwrap();
    send(&provider).await;
    let request = &server.requests()[0];
    for key in ["temperature", "max_tokens", "model", "stream"] {
        assert_eq!(
            occurrences(request, key),
            1,
            "`{key}` once in {:?}",
            request.raw_body
        );
    }
    assert_eq!(request.body["temperature"], json!(0.1));
    assert_eq!(request.body["max_tokens"], Value::Null);
}
