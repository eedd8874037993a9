//! The Chat Completions provider against the mock provider server: every recorded chat stream replayed
//! at several chunk sizes through the real client, translated into OpenResponses items.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

mod kit;

use futures_util::StreamExt;
use noetic_core::item::Item;
use noetic_core::model::{
    ModelParams, ModelRequest, ModelResponse, ResponseAccumulator, ResponseStatus,
};
use noetic_core::{
    AgentHarness, ContextOptions, ModelProvider, Tool, ToolContext, ToolError, call_model,
};
use noetic_providers::{ChatCompletions, RetryConfig};
use noetic_test_support::{MockReply, MockServer};

fn provider(server: &MockServer) -> ChatCompletions {
    ChatCompletions::builder(server.base_url())
        .api_key("sk-chat-secret")
        .retry(RetryConfig::none())
        .build()
        .unwrap()
}

async fn response(provider: &ChatCompletions) -> ModelResponse {
    let params = ModelParams::default();
    let input = [Item::user_text("hello")];
    let request = ModelRequest::new("m", &input, &params);
    let stream = provider.stream(&request).await.unwrap();
    let mut accumulator = ResponseAccumulator::new();
    let mut events = stream.events;
    while let Some(event) = events.next().await {
        accumulator.push(&event.unwrap());
    }
    accumulator.finish("chat", 0).unwrap()
}

struct Expect {
    file: &'static str,
    status: ResponseStatus,
    item_types: &'static [&'static str],
    text: Option<&'static str>,
    text_chars: Option<usize>,
    calls: &'static [(&'static str, &'static str, &'static str)],
    usage: (u64, u64, Option<u64>, Option<u64>),
    cost: Option<f64>,
    error: Option<&'static str>,
}

const EXPECTATIONS: &[Expect] = &[
    Expect {
        file: "openai-chat.parallel-tool-calls.gpt-4o.sse",
        status: ResponseStatus::Completed,
        item_types: &["function_call", "function_call"],
        text: None,
        text_chars: None,
        calls: &[
            (
                "get_weather",
                "call_NS4iQj14cDFwc0BnrKqDHavt",
                r#"{"city":"Mexico City"}"#,
            ),
            ("get_product_name", "call_SkGkkGDvHQEEk0CGbnAh2AQw", "{}"),
        ],
        usage: (417, 44, Some(0), Some(0)),
        cost: None,
        error: None,
    },
    Expect {
        file: "openrouter-chat.text-usage-cost.claude-haiku-4.5.sse",
        status: ResponseStatus::Completed,
        item_types: &["message"],
        text: Some("1\n2\n3"),
        text_chars: None,
        calls: &[],
        usage: (15, 9, Some(0), Some(0)),
        cost: Some(0.00006),
        error: None,
    },
    Expect {
        file: "openrouter-chat.reasoning-details-then-tool-call.claude-haiku-4.5.sse",
        status: ResponseStatus::Completed,
        item_types: &["reasoning", "function_call"],
        text: None,
        text_chars: None,
        calls: &[(
            "reasoning_weather",
            "toolu_bdrk_01L9pX1Wp4FAEq9TT2Z6UAe7",
            r#"{"city":"Berlin"}"#,
        )],
        usage: (626, 106, Some(0), Some(54)),
        cost: Some(0.001156),
        error: None,
    },
    Expect {
        file: "openrouter-chat.mid-stream-error.minimax-m2.sse",
        status: ResponseStatus::Failed,
        item_types: &["reasoning"],
        text: None,
        text_chars: None,
        calls: &[],
        usage: (43, 10, Some(0), Some(11)),
        cost: Some(0.0),
        error: Some("Token limit reached"),
    },
    Expect {
        file: "openrouter-chat.cached-tokens-cost.grok-4.sse",
        status: ResponseStatus::Completed,
        item_types: &["reasoning", "message"],
        text: None,
        text_chars: Some(284),
        calls: &[],
        usage: (687, 187, Some(679), Some(118)),
        cost: Some(0.00333825),
        error: None,
    },
];

#[tokio::test]
async fn every_chat_fixture_translates_at_every_chunk_size() {
    let server = MockServer::start().await;
    let provider = provider(&server);
    let on_disk = std::fs::read_dir(noetic_test_support::fixtures_dir())
        .unwrap()
        .filter(|entry| {
            entry
                .as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .contains("-chat.")
        })
        .count();
    assert_eq!(
        on_disk,
        EXPECTATIONS.len(),
        "every chat capture has expectations"
    );
    for expect in EXPECTATIONS {
        for chunk in [1, 7, 0] {
            server.push(MockReply::fixture(expect.file).chunk_size(chunk));
            let response = response(&provider).await;
            let label = format!("{} at chunk size {chunk}", expect.file);
            assert_eq!(response.status, expect.status, "{label}");
            let types: Vec<&str> = response.items.iter().map(Item::item_type).collect();
            assert_eq!(types, expect.item_types, "{label}");
            if let Some(text) = expect.text {
                assert_eq!(response.text().as_deref(), Some(text), "{label}");
            }
            if let Some(chars) = expect.text_chars {
                assert_eq!(
                    response.text().unwrap_or_default().chars().count(),
                    chars,
                    "{label}"
                );
            }
            let calls: Vec<(&str, &str, serde_json::Value)> = response
                .function_calls()
                .map(|call| {
                    (
                        call.name.as_str(),
                        call.call_id.as_str(),
                        serde_json::from_str(&call.arguments).unwrap(),
                    )
                })
                .collect();
            let expected: Vec<(&str, &str, serde_json::Value)> = expect
                .calls
                .iter()
                .map(|(name, id, args)| (*name, *id, serde_json::from_str(args).unwrap()))
                .collect();
            assert_eq!(calls, expected, "{label}");
            let usage = response.usage.map(|u| {
                (
                    u.input_tokens,
                    u.output_tokens,
                    u.cached_tokens,
                    u.reasoning_tokens,
                )
            });
            assert_eq!(usage, Some(expect.usage), "{label}");
            assert_eq!(response.cost, expect.cost, "{label}");
            if let Some(needle) = expect.error {
                assert!(
                    response
                        .error
                        .as_deref()
                        .unwrap_or_default()
                        .contains(needle),
                    "{label}: {:?}",
                    response.error
                );
            }
        }
    }
    let sent = server.requests();
    assert_eq!(sent[0].path, "/v1/chat/completions");
    assert_eq!(
        sent[0].header("authorization"),
        Some("Bearer sk-chat-secret")
    );
    assert_eq!(sent[0].body["stream"], true);
    assert_eq!(sent[0].body["stream_options"]["include_usage"], true);
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct City {
    city: String,
}

#[tokio::test]
async fn a_chat_tool_loop_sends_calls_and_outputs_back_as_chat_messages() {
    let server = MockServer::start().await;
    server.push(MockReply::fixture(
        "openrouter-chat.reasoning-details-then-tool-call.claude-haiku-4.5.sse",
    ));
    server.push(MockReply::fixture(
        "openrouter-chat.text-usage-cost.claude-haiku-4.5.sse",
    ));
    let weather = Tool::new(
        "reasoning_weather",
        "Weather for a city",
        |args: City, _ctx: ToolContext| async move {
            Ok::<_, ToolError>(format!("Sunny in {}", args.city))
        },
    );
    let harness = AgentHarness::builder("chat")
        .provider("chat", provider(&server))
        .build()
        .unwrap();
    let ctx = harness.create_context(ContextOptions::new());
    let answer = harness
        .run(
            &call_model("llm")
                .model("anthropic/claude-haiku-4.5")
                .tool(weather)
                .build(),
            "Weather in Berlin?".to_owned(),
            &ctx,
        )
        .await
        .unwrap();
    assert_eq!(answer, "1\n2\n3");
    let second = &server.requests()[1].body;
    let messages = second["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool"]);
    assert_eq!(
        messages[1]["tool_calls"][0]["id"],
        "toolu_bdrk_01L9pX1Wp4FAEq9TT2Z6UAe7"
    );
    assert_eq!(
        messages[1]["tool_calls"][0]["function"]["name"],
        "reasoning_weather"
    );
    assert!(
        messages[1]["reasoning_details"].is_array(),
        "Anthropic reasoning is replayed with its signature"
    );
    assert_eq!(
        messages[2]["tool_call_id"],
        "toolu_bdrk_01L9pX1Wp4FAEq9TT2Z6UAe7"
    );
    assert_eq!(messages[2]["content"], "Sunny in Berlin");
    assert_eq!(second["tools"][0]["function"]["name"], "reasoning_weather");
}

#[tokio::test]
async fn a_chat_stream_that_breaks_mid_response_names_the_round_in_its_message() {
    let server = MockServer::start().await;
    server.push(
        MockReply::fixture("openrouter-chat.text-usage-cost.claude-haiku-4.5.sse")
            .drop_after_events(2),
    );
    let params = ModelParams::default();
    let input = [Item::user_text("hello")];
    let mut request = ModelRequest::new("m", &input, &params);
    request.round = 3;
    let stream = provider(&server).stream(&request).await.unwrap();
    let mut events = stream.events;
    let mut error = None;
    while let Some(event) = events.next().await {
        if let Err(failure) = event {
            error = Some(failure);
            break;
        }
    }
    let error = error.expect("the broken stream is an error, not a quiet end");
    assert_eq!(error.code(), "PROVIDER_ERROR");
    assert!(
        matches!(
            &error,
            noetic_core::Error::Provider {
                round: Some(3),
                status: None,
                ..
            }
        ),
        "{error:?}"
    );
    let display = error.to_string();
    assert!(display.contains("round 3"), "{display}");
    assert!(display.contains("mid-response"), "{display}");
}
