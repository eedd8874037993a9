//! noetic-mcp against a real MCP server: the `noetic-mcp-test-server` process over stdio, and the
//! same server over streamable HTTP on loopback; the model is a mock provider speaking the real
//! OpenResponses wire format.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

mod http;
mod session;
mod stdio;

use std::time::Duration;

use noetic_core::{AgentHarness, CallModelDefaults, ContextOptions, Step, call_model};
use noetic_mcp::{McpCommand, McpServer};
use noetic_providers::{OpenResponses, RetryConfig};
use noetic_test_support::mcp::mcp_test_server_path;
use noetic_test_support::{MockReply, MockServer, RecordedHttpRequest};
use serde_json::{Value, json};

/// The stdio test server's command.
pub(crate) fn test_server() -> McpCommand {
    McpCommand::new(mcp_test_server_path().to_string_lossy())
}

/// A connected stdio test server called `calc`.
pub(crate) async fn calc() -> McpServer {
    McpServer::stdio("calc", test_server())
        .connect()
        .await
        .expect("the test server starts")
}

/// A harness whose model is `provider` (the mock), with `server` registered as a connection.
pub(crate) fn harness(provider: &MockServer, server: &McpServer) -> AgentHarness {
    let provider = OpenResponses::builder(provider.base_url())
        .api_key("sk-test")
        .retry(RetryConfig::none())
        .build()
        .expect("provider");
    AgentHarness::builder("mcp-test")
        .provider("mock", provider)
        .call_model_defaults(CallModelDefaults::default().provider("mock"))
        .connection(server.clone())
        .build()
        .expect("harness")
}

/// A model call offered `server`'s tools.
pub(crate) fn agent(server: &McpServer) -> Step<String, String> {
    call_model("assistant")
        .model("gpt-test")
        .tools_from(server.clone())
        .build()
}

/// Runs `agent` once on a fresh context.
pub(crate) async fn run(
    harness: &AgentHarness,
    agent: &Step<String, String>,
) -> noetic_core::Result<String> {
    let ctx = harness.create_context(ContextOptions::new());
    harness.run(agent, "Go".to_owned(), &ctx).await
}

/// The names of the tools a request offered.
pub(crate) fn offered(request: &RecordedHttpRequest) -> Vec<String> {
    request.body["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|tool| tool["name"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// The `function_call_output` texts a request carried, in order.
pub(crate) fn outputs(request: &RecordedHttpRequest) -> Vec<String> {
    request.body["input"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter(|item| item["type"] == "function_call_output")
                .filter_map(|item| item["output"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// The offered tool named `name` of a request.
pub(crate) fn offered_tool(request: &RecordedHttpRequest, name: &str) -> Value {
    request.body["tools"]
        .as_array()
        .and_then(|tools| tools.iter().find(|tool| tool["name"] == name).cloned())
        .unwrap_or(Value::Null)
}

/// The model calls `calc__add` with `{a: 2, b: 3}`, then answers: the sum reaches the second
/// request as the call's output.
pub(crate) async fn a_model_call_reaches_the_next_request(server: &McpServer) {
    let provider = MockServer::start().await;
    provider.push(MockReply::function_call(
        "call_1",
        "calc__add",
        &json!({"a": 2, "b": 3}),
    ));
    provider.push(MockReply::answer("The sum is 5."));
    let harness = harness(&provider, server);

    let answer = run(&harness, &agent(server)).await.expect("runs");

    assert_eq!(answer, "The sum is 5.");
    let requests = provider.requests();
    assert_eq!(requests.len(), 2);
    let add = offered_tool(&requests[0], "calc__add");
    assert_eq!(add["parameters"]["properties"]["a"]["type"], "number");
    assert_eq!(add["description"], "Adds two numbers");
    assert_eq!(outputs(&requests[1]), [r#"{"sum":5.0}"#]);
}

/// Runs `agent` until `called` says the server got the call, then aborts the run, which must end
/// `CANCELLED`.
pub(crate) async fn abort_mid_call(
    harness: &AgentHarness,
    agent: &Step<String, String>,
    called: impl std::future::Future<Output = ()>,
) {
    let ctx = harness.create_context(ContextOptions::new());
    let running = harness.run(agent, "Go".to_owned(), &ctx);
    tokio::pin!(running);
    tokio::select! {
        _ = &mut running => panic!("the run ended before the call reached the server"),
        () = called => {}
    }
    ctx.abort(Some("user stopped it".to_owned()));
    assert_eq!(running.await.unwrap_err().code(), "CANCELLED");
}

/// Returns the first line of the server's event log containing `event`, once there is one (asked of
/// the server itself, over the same session).
pub(crate) async fn server_saw(server: &McpServer, event: &str) -> String {
    let seen = server
        .call_tool("wait_for", json!({ "event": event }))
        .await
        .unwrap_or_else(|error| panic!("waiting for `{event}`: {}", error.message()));
    let line = seen.as_str().unwrap_or_default().to_owned();
    assert!(line.contains(event), "{seen}");
    line
}

/// How long to wait for a process to go before failing a test.
pub(crate) const PROCESS_GONE: Duration = Duration::from_secs(10);

/// Whether process `pid` is gone (or a zombie: dead, not yet reaped).
pub(crate) fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

/// Waits (bounded) until process `pid` is gone. `/proc` has no change notification, so this polls.
pub(crate) async fn wait_gone(pid: u32) {
    let deadline = tokio::time::Instant::now() + PROCESS_GONE;
    while !gone(pid) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "process {pid} still alive"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
