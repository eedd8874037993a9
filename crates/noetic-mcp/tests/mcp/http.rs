//! Over streamable HTTP: the test server on loopback, requiring a bearer token.

use noetic_mcp::McpServer;
use noetic_test_support::mcp::{McpTestServer, request_id};
use noetic_test_support::{MockReply, MockServer};
use serde_json::json;

use crate::{a_model_call_reaches_the_next_request, abort_mid_call, agent, harness, outputs, run};

const TOKEN: &str = "mcp-bearer-3f9a";

async fn connect(mcp: &McpTestServer) -> McpServer {
    McpServer::http("calc", mcp.url())
        .bearer(TOKEN)
        .connect()
        .await
        .expect("connects with the token")
}

#[tokio::test]
async fn tools_are_listed_and_a_model_s_call_reaches_the_next_request() {
    let mcp = McpTestServer::start_http(Some(TOKEN)).await;
    let server = connect(&mcp).await;
    assert_eq!(server.tool_names().len(), 9);
    assert_eq!(server.pid(), None);
    a_model_call_reaches_the_next_request(&server).await;
    server.shutdown().await;
}

#[tokio::test]
async fn a_wrong_token_is_an_init_error_that_names_the_server_and_not_the_token() {
    let mcp = McpTestServer::start_http(Some(TOKEN)).await;
    let error = McpServer::http("calc", mcp.url())
        .bearer("wrong-token-77")
        .connect()
        .await
        .unwrap_err();
    assert_eq!(error.code(), "MCP_INIT_FAILED");
    let message = error.to_string();
    assert!(message.contains("`calc`"), "{message}");
    assert!(!message.contains("wrong-token-77"), "{message}");
    let builder = format!("{:?}", McpServer::http("calc", mcp.url()).bearer(TOKEN));
    assert!(!builder.contains(TOKEN), "{builder}");
}

#[tokio::test]
async fn an_expired_session_is_initialised_again_and_the_call_goes_through() {
    let mcp = McpTestServer::start_http(Some(TOKEN)).await;
    let server = connect(&mcp).await;
    mcp.expire_sessions().await;
    let sum = server
        .call_tool("add", json!({"a": 1, "b": 2}))
        .await
        .unwrap();
    assert_eq!(sum, json!({"sum": 3.0}));
    server.shutdown().await;
}

#[tokio::test]
async fn a_stopped_server_is_the_call_s_error_output_and_the_run_goes_on() {
    let mcp = McpTestServer::start_http(Some(TOKEN)).await;
    let server = connect(&mcp).await;
    mcp.stop();
    drop(mcp);
    let provider = MockServer::start().await;
    provider.push(MockReply::function_call(
        "c1",
        "calc__add",
        &json!({"a": 1, "b": 2}),
    ));
    provider.push(MockReply::answer("It is down."));
    let harness = harness(&provider, &server);

    assert_eq!(run(&harness, &agent(&server)).await.unwrap(), "It is down.");
    let outputs = outputs(&provider.requests()[1]);
    assert_eq!(outputs.len(), 1);
    assert!(outputs[0].starts_with("Error: MCP"), "{}", outputs[0]);
    server.shutdown().await;
}

#[tokio::test]
async fn cancelling_a_run_mid_call_sends_the_server_a_cancel_notification() {
    let mcp = McpTestServer::start_http(Some(TOKEN)).await;
    let server = connect(&mcp).await;
    let provider = MockServer::start().await;
    provider.push(MockReply::function_call(
        "c1",
        "calc__slow",
        &json!({"ms": 60_000}),
    ));
    let harness = harness(&provider, &server);
    abort_mid_call(&harness, &agent(&server), async {
        mcp.wait_for_event(|event| event.starts_with("call slow"))
            .await;
    })
    .await;
    mcp.wait_for_event(|event| event.starts_with("notification cancelled"))
        .await;
    mcp.wait_for_event(|event| event.starts_with("cancelled slow"))
        .await;
    server.shutdown().await;
}

#[tokio::test]
async fn a_timed_out_call_cancels_its_request_saying_so() {
    let mcp = McpTestServer::start_http(Some(TOKEN)).await;
    let server = McpServer::http("calc", mcp.url())
        .bearer(TOKEN)
        .call_timeout(std::time::Duration::from_millis(200))
        .connect()
        .await
        .expect("connects with the token");

    let error = server
        .call_tool("slow", json!({"ms": 60_000}))
        .await
        .unwrap_err();

    assert!(
        error.message().contains("timed out after 200 ms"),
        "{}",
        error.message()
    );
    let call = mcp
        .wait_for_event(|event| event.starts_with("call slow"))
        .await;
    let id = request_id(&call).expect("the call's request id").to_owned();
    let cancelled = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        mcp.wait_for_event(|event| {
            event.starts_with("notification cancelled") && request_id(event) == Some(id.as_str())
        }),
    )
    .await
    .expect("the server gets the cancel of the timed-out call");
    assert!(
        cancelled.ends_with(": timed out after 200 ms"),
        "{cancelled}"
    );
    server.shutdown().await;
}
