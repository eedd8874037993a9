//! A round with one call needing approval and one that does not, through the real providers: after
//! the approval, the next request answers both calls in each wire format (Chat Completions: a `tool`
//! message per `tool_call_id` after the assistant's `tool_calls`; Responses: a `function_call_output`
//! per `call_id`; Anthropic: a `tool_result` per `tool_use` id, all in the next user message),
//! although the ungated call's output was recorded first.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

use std::collections::BTreeSet;

use futures_util::StreamExt;
use noetic_core::{
    AgentHarness, ExecuteOptions, FrameworkEvent, ModelProvider, Scope, StreamEvent, Tool,
    ToolContext, ToolError, call_model,
};
use noetic_providers::{Anthropic, ChatCompletions, OpenResponses, RetryConfig};
use noetic_test_support::{MockReply, MockServer, anthropic_fixtures_dir};
use serde_json::{Value, json};

fn tool(name: &'static str) -> Tool {
    Tool::dynamic(
        name,
        "A tool",
        json!({"type": "object"}),
        move |_args: Value, _ctx: ToolContext| async move {
            Ok::<_, ToolError>(json!(format!("{name} result")))
        },
    )
    .unwrap()
}

/// Runs one turn on `provider` whose first round calls `gated` (needing approval) and `free`;
/// approves the gated call once asked; returns the body of the second request.
async fn second_request(
    server: &MockServer,
    provider: impl ModelProvider,
    gated: &'static str,
    free: &'static str,
) -> Value {
    let harness = AgentHarness::builder("wire")
        .provider("mock", provider)
        .agent_graph(
            call_model("llm")
                .model("gpt-4o")
                .tool(tool(gated).needs_approval(true))
                .tool(tool(free)),
        )
        .build()
        .unwrap();
    let mut events = harness.events(Scope::default());
    harness.execute("Go", ExecuteOptions::new()).await.unwrap();
    let approval_id = loop {
        let event = events.next().await.unwrap();
        if let StreamEvent::Framework(FrameworkEvent::ApprovalRequested {
            approval_id, tool, ..
        }) = &*event
        {
            assert_eq!(tool, gated);
            break approval_id.clone();
        }
    };
    harness.approve("__default__", &approval_id).await.unwrap();
    harness.agent_response(Scope::default()).await.unwrap();
    server.requests()[1].body.clone()
}

#[tokio::test]
async fn chat_completions_gets_a_tool_message_for_every_call_after_an_approval() {
    let server = MockServer::start().await;
    // Two parallel calls: get_weather and get_product_name.
    server.push(MockReply::fixture(
        "openai-chat.parallel-tool-calls.gpt-4o.sse",
    ));
    server.push(MockReply::fixture(
        "openrouter-chat.text-usage-cost.claude-haiku-4.5.sse",
    ));
    let provider = ChatCompletions::builder(server.base_url())
        .api_key("sk-test")
        .retry(RetryConfig::none())
        .build()
        .unwrap();
    let body = second_request(&server, provider, "get_weather", "get_product_name").await;

    let messages = body["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages
        .iter()
        .map(|message| message["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool", "tool"]);
    let called: BTreeSet<&str> = messages[1]["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|call| call["id"].as_str().unwrap())
        .collect();
    let answered: BTreeSet<&str> = messages[2..]
        .iter()
        .map(|message| message["tool_call_id"].as_str().unwrap())
        .collect();
    assert_eq!(called.len(), 2);
    assert_eq!(called, answered, "every call has its tool message");
}

/// A Responses stream calling `first` and `second` in one response.
fn two_calls(first: &str, second: &str) -> MockReply {
    let item = |id: &str, name: &str| {
        json!({"id": format!("fc_{id}"), "type": "function_call", "status": "completed",
            "call_id": id, "name": name, "arguments": "{}"})
    };
    let (a, b) = (item("call_a", first), item("call_b", second));
    MockReply::sse_events([
        json!({"type": "response.created", "response": {"id": "resp_1", "status": "in_progress", "output": []}}),
        json!({"type": "response.output_item.added", "output_index": 0, "item": a}),
        json!({"type": "response.output_item.done", "output_index": 0, "item": a}),
        json!({"type": "response.output_item.added", "output_index": 1, "item": b}),
        json!({"type": "response.output_item.done", "output_index": 1, "item": b}),
        json!({"type": "response.completed", "response": {"id": "resp_1", "status": "completed",
            "output": [a, b], "usage": {"input_tokens": 10, "output_tokens": 3, "total_tokens": 13}}}),
    ])
}

#[tokio::test]
async fn responses_gets_a_function_call_output_for_every_call_after_an_approval() {
    let server = MockServer::start().await;
    server.push(two_calls("send_email", "lookup"));
    server.push(MockReply::answer("Done."));
    let provider = OpenResponses::builder(server.base_url())
        .retry(RetryConfig::none())
        .build()
        .unwrap();
    let body = second_request(&server, provider, "send_email", "lookup").await;

    let input = body["input"].as_array().unwrap();
    let calls: BTreeSet<&str> = input
        .iter()
        .filter(|item| item["type"] == "function_call")
        .map(|item| item["call_id"].as_str().unwrap())
        .collect();
    let outputs: Vec<&str> = input
        .iter()
        .filter(|item| item["type"] == "function_call_output")
        .map(|item| item["call_id"].as_str().unwrap())
        .collect();
    assert_eq!(calls, BTreeSet::from(["call_a", "call_b"]));
    assert_eq!(outputs.len(), 2);
    assert_eq!(outputs.iter().copied().collect::<BTreeSet<_>>(), calls);
    // Every output comes after the calls it answers.
    let last_call = input
        .iter()
        .rposition(|item| item["type"] == "function_call")
        .unwrap();
    let first_output = input
        .iter()
        .position(|item| item["type"] == "function_call_output")
        .unwrap();
    assert!(last_call < first_output);
}

#[tokio::test]
async fn anthropic_gets_a_tool_result_for_every_tool_use_after_an_approval() {
    let server = MockServer::start().await;
    // Two parallel tool_use blocks: get_weather and get_time.
    for file in [
        "anthropic.parallel-tool-use.claude-3.5-sonnet.sse",
        "anthropic.text.claude-haiku-4.5.sse",
    ] {
        server.push(MockReply::fixture_file(
            &anthropic_fixtures_dir().join(file),
        ));
    }
    let provider = Anthropic::builder("sk-ant-test")
        .base_url(server.base_url())
        .retry(RetryConfig::none())
        .build()
        .unwrap();
    let body = second_request(&server, provider, "get_weather", "get_time").await;

    let messages = body["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages
        .iter()
        .map(|message| message["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "user"]);
    let used: BTreeSet<&str> = messages[1]["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|block| block["type"] == "tool_use")
        .map(|block| block["id"].as_str().unwrap())
        .collect();
    let results = messages[2]["content"].as_array().unwrap();
    assert!(
        results.iter().all(|block| block["type"] == "tool_result"),
        "only tool results in the answering message: {results:?}"
    );
    let answered: BTreeSet<&str> = results
        .iter()
        .map(|block| block["tool_use_id"].as_str().unwrap())
        .collect();
    assert_eq!(used.len(), 2);
    assert_eq!(used, answered, "every tool_use has its tool_result");
}
