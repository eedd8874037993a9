//! A session turn aborted (`AgentHarness::abort`) while an MCP `tools/call` is in flight: the server
//! gets `notifications/cancelled` for that call's request id before the connection closes, even when
//! the server is shut down right after the abort returns — over stdio and streamable HTTP.

use std::time::Duration;

use noetic_core::{AbortOptions, AgentHarness, CallModelDefaults, ExecuteOptions, Scope};
use noetic_mcp::McpServer;
use noetic_providers::{OpenResponses, RetryConfig};
use noetic_test_support::mcp::{McpTestServer, assert_cancelled_before_close, read_event_log};
use noetic_test_support::{MockReply, MockServer};
use serde_json::json;

use crate::{agent, server_saw, test_server};

/// How long a test waits for the server to log something before failing.
const SERVER_SEES: Duration = Duration::from_secs(10);

/// A harness running `server`'s tools on a session, its model the mock `provider`, which calls
/// `calc__slow` for a minute.
fn session(provider: &MockServer, server: &McpServer) -> AgentHarness {
    provider.push(MockReply::function_call(
        "c1",
        "calc__slow",
        &json!({"ms": 60_000}),
    ));
    let model = OpenResponses::builder(provider.base_url())
        .api_key("sk-test")
        .retry(RetryConfig::none())
        .build()
        .expect("provider");
    AgentHarness::builder("mcp-session")
        .provider("mock", model)
        .call_model_defaults(CallModelDefaults::default().provider("mock"))
        .connection(server.clone())
        .agent_graph(agent(server))
        .build()
        .expect("harness")
}

/// Aborts the default thread's turn and checks it ended `CANCELLED`.
async fn abort_turn(harness: &AgentHarness) {
    harness
        .abort(AbortOptions::new().reason("user stopped it"))
        .await;
    let ended = tokio::time::timeout(SERVER_SEES, harness.agent_response(Scope::default()))
        .await
        .expect("the aborted turn's response");
    let error = ended.expect_err("an aborted turn fails");
    assert_eq!(error.code(), "CANCELLED", "{error:?}");
}

/// How many times each test aborts a turn, each on a fresh connection. A cancel left to race the
/// shutdown was lost about every other time; five rounds make such a race show.
const ROUNDS: usize = 5;

#[tokio::test(flavor = "multi_thread")]
async fn aborting_a_session_turn_mid_call_cancels_that_request_over_stdio_before_shutdown() {
    let dir = tempfile::tempdir().expect("a temp dir");
    for round in 0..ROUNDS {
        let log = dir.path().join(format!("events-{round}.log"));
        let server = McpServer::stdio(
            "calc",
            test_server().arg("--log").arg(log.to_string_lossy()),
        )
        .connect()
        .await
        .expect("the test server starts");
        let provider = MockServer::start().await;
        let harness = session(&provider, &server);

        harness
            .execute("Go", ExecuteOptions::new())
            .await
            .expect("accepted");
        tokio::time::timeout(SERVER_SEES, server_saw(&server, "call slow"))
            .await
            .expect("the server got the call of slow");
        abort_turn(&harness).await;
        // At once: the cancel must not depend on the connection staying up a while longer.
        server.shutdown().await;

        assert_cancelled_before_close(
            &read_event_log(&log),
            "slow",
            "notification cancelled",
            |event| event.starts_with("quit"),
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn aborting_a_session_turn_mid_call_cancels_that_request_over_http_before_shutdown() {
    for _ in 0..ROUNDS {
        let mcp = McpTestServer::start_http(None).await;
        let server = McpServer::http("calc", mcp.url())
            .connect()
            .await
            .expect("connects");
        let provider = MockServer::start().await;
        let harness = session(&provider, &server);

        harness
            .execute("Go", ExecuteOptions::new())
            .await
            .expect("accepted");
        tokio::time::timeout(
            SERVER_SEES,
            mcp.wait_for_event(|event| event.starts_with("call slow")),
        )
        .await
        .expect("the server got the call of slow");
        abort_turn(&harness).await;
        server.shutdown().await;

        assert_cancelled_before_close(
            &mcp.events(),
            "slow",
            "posted notifications/cancelled",
            |event| event == "session deleted",
        );
    }
}
