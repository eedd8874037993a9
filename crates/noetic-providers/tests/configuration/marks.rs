//! Marks of ours that only some wires carry: a failed tool call's output is `is_error` on the Anthropic
//! wire and unmarked on the OpenResponses wire (which has no such field), and so is a message's cache
//! breakpoint.

use noetic_core::{
    AgentHarness, ContextOptions, ModelProvider, Tool, ToolContext, ToolError, call_model,
};
use noetic_providers::{Anthropic, OpenResponses, RetryConfig};
use noetic_test_support::{MockReply, MockServer, anthropic_fixtures_dir};
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Deserialize, schemars::JsonSchema)]
struct Args {
    #[allow(dead_code)]
    location: String,
}

/// Runs a step whose `weather` tool fails; returns the second request's body.
async fn second_request(provider: impl ModelProvider, server: &MockServer) -> Value {
    let weather = Tool::new(
        "weather",
        "The weather",
        |_args: Args, _ctx: ToolContext| async move {
            Err::<String, _>(ToolError::new("the weather service is down"))
        },
    );
    let harness = AgentHarness::builder("errors")
        .provider("wire", provider)
        .build()
        .unwrap();
    let ctx = harness.create_context(ContextOptions::new());
    harness
        .run(
            &call_model("ask").model("m").tool(weather).build(),
            "What's the weather in Florence,Italy?".to_owned(),
            &ctx,
        )
        .await
        .unwrap();
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    requests[1].body.clone()
}

#[tokio::test]
async fn a_failed_calls_result_is_marked_is_error_on_the_anthropic_wire() {
    let server = MockServer::start().await;
    for file in [
        "anthropic.text-then-tool.claude-sonnet-4.turn1.sse",
        "anthropic.text-after-tool-result.claude-sonnet-4.turn2.sse",
    ] {
        server.push(MockReply::fixture_file(
            &anthropic_fixtures_dir().join(file),
        ));
    }
    let provider = Anthropic::builder("key")
        .base_url(server.base_url())
        .retry(RetryConfig::none())
        .build()
        .unwrap();
    let body = second_request(provider, &server).await;
    let result = body["messages"].as_array().unwrap().last().unwrap()["content"][0].clone();
    assert_eq!(result["type"], "tool_result");
    assert_eq!(result["is_error"], true, "{result}");
    assert!(
        result["content"]
            .to_string()
            .contains("the weather service is down"),
        "{result}"
    );
}

#[tokio::test]
async fn a_failed_calls_output_carries_no_is_error_on_the_openresponses_wire() {
    let server = MockServer::start().await;
    server.push(MockReply::function_call(
        "call_1",
        "weather",
        &json!({"location": "Florence"}),
    ));
    server.push(MockReply::answer("sorry"));
    let provider = OpenResponses::builder(server.base_url())
        .retry(RetryConfig::none())
        .build()
        .unwrap();
    let body = second_request(provider, &server).await;
    let output = body["input"]
        .as_array()
        .unwrap()
        .iter()
        .find(|item| item["type"] == "function_call_output")
        .cloned()
        .expect("the failed call's output");
    assert!(output.get("is_error").is_none(), "{output}");
    assert!(
        output["output"]
            .as_str()
            .unwrap()
            .contains("the weather service is down"),
        "{output}"
    );
}

#[tokio::test]
async fn a_cache_breakpoint_mark_is_left_out_on_the_openresponses_wire() {
    use noetic_core::item::Item;
    use noetic_core::model::{ModelParams, ModelRequest};

    let server = MockServer::start().await;
    server.push(MockReply::answer("ok"));
    let provider = OpenResponses::builder(server.base_url())
        .retry(RetryConfig::none())
        .build()
        .unwrap();
    let params = ModelParams::default();
    let input = [Item::user_text("a long document").with_cache_breakpoint()];
    let stream = provider
        .stream(&ModelRequest::new("m", &input, &params))
        .await
        .unwrap();
    drop(stream);
    let body = &server.requests()[0].body;
    assert!(body["input"][0].get("cache_breakpoint").is_none(), "{body}");
    assert_eq!(body["input"][0]["role"], "user");
}
