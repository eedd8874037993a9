//! `tool_choice` on every wire: each choice in the wire's own spelling, and none sent without tools.

use futures_util::StreamExt;
use noetic_core::ModelProvider;
use noetic_core::item::Item;
use noetic_core::model::{ModelParams, ModelRequest, ToolChoice, ToolSpec};
use noetic_providers::{Anthropic, ChatCompletions, OpenResponses, RetryConfig};
use noetic_test_support::{MockReply, MockServer, anthropic_fixtures_dir};
use serde_json::{Value, json};

/// The `tool_choice` each request of `provider` carried, one request per choice (and one with tools
/// but no choice, and one with a choice but no tools).
async fn sent(
    provider: &impl ModelProvider,
    server: &MockServer,
    reply: fn() -> MockReply,
) -> Vec<Value> {
    let tools = [ToolSpec {
        name: "lookup".to_owned(),
        description: "Looks up".to_owned(),
        parameters: json!({"type": "object"}),
    }];
    let input = [Item::user_text("hi")];
    let choices = [
        Some(ToolChoice::Auto),
        Some(ToolChoice::None),
        Some(ToolChoice::Required),
        Some(ToolChoice::Tool("lookup".to_owned())),
        None,
    ];
    for choice in &choices {
        let mut params = ModelParams::default();
        params.tool_choice = choice.clone();
        server.push(reply());
        let request = ModelRequest::new("m", &input, &params).with_tools(&tools);
        let mut events = provider.stream(&request).await.unwrap().events;
        while let Some(event) = events.next().await {
            event.unwrap();
        }
    }
    let mut params = ModelParams::default();
    params.tool_choice = Some(ToolChoice::Required);
    server.push(reply());
    let request = ModelRequest::new("m", &input, &params);
    let mut events = provider.stream(&request).await.unwrap().events;
    while let Some(event) = events.next().await {
        event.unwrap();
    }
    server
        .requests()
        .into_iter()
        .map(|request| {
            request
                .body
                .get("tool_choice")
                .cloned()
                .unwrap_or(Value::Null)
        })
        .collect()
}

#[tokio::test]
async fn every_wire_spells_each_tool_choice_its_own_way() {
    let server = MockServer::start().await;
    let responses = OpenResponses::builder(server.base_url())
        .retry(RetryConfig::none())
        .build()
        .unwrap();
    assert_eq!(
        sent(&responses, &server, || MockReply::answer("ok")).await,
        [
            json!("auto"),
            json!("none"),
            json!("required"),
            json!({"type": "function", "name": "lookup"}),
            Value::Null,
            Value::Null,
        ]
    );

    let server = MockServer::start().await;
    let chat = ChatCompletions::builder(server.base_url())
        .retry(RetryConfig::none())
        .build()
        .unwrap();
    assert_eq!(
        sent(&chat, &server, || {
            MockReply::fixture("openrouter-chat.text-usage-cost.claude-haiku-4.5.sse")
        })
        .await,
        [
            json!("auto"),
            json!("none"),
            json!("required"),
            json!({"type": "function", "function": {"name": "lookup"}}),
            Value::Null,
            Value::Null,
        ]
    );

    let server = MockServer::start().await;
    let anthropic = Anthropic::builder("key")
        .base_url(server.base_url())
        .retry(RetryConfig::none())
        .build()
        .unwrap();
    assert_eq!(
        sent(&anthropic, &server, || {
            MockReply::fixture_file(
                &anthropic_fixtures_dir().join("anthropic.text.claude-haiku-4.5.sse"),
            )
        })
        .await,
        [
            json!({"type": "auto"}),
            json!({"type": "none"}),
            json!({"type": "any"}),
            json!({"type": "tool", "name": "lookup"}),
            Value::Null,
            Value::Null,
        ]
    );
}
