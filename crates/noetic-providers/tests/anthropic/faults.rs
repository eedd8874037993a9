//! Faults on the Anthropic wire beyond the provider conformance kit (`kit.rs`: stall, drop, malformed
//! data, 429, 401, abort): the cut call pending under its message id, a missing `message_stop` named,
//! oversize events, 529 overloaded retried, a missing key.

use std::time::Duration;

use noetic_core::{AgentHarness, ContextOptions, Error, call_model};
use noetic_providers::{Anthropic, RetryConfig};
use noetic_test_support::{MockReply, MockServer, anthropic_fixtures_dir};
use serde_json::json;

use super::{ask, provider};

fn text() -> MockReply {
    MockReply::fixture_file(&anthropic_fixtures_dir().join("anthropic.text.claude-haiku-4.5.sse"))
}

fn retrying(server: &MockServer) -> Anthropic {
    Anthropic::builder("key")
        .base_url(server.base_url())
        .retry(RetryConfig::default())
        .build()
        .unwrap()
}

async fn run_step(server: &MockServer, idle: Duration) -> Result<String, Error> {
    let harness = AgentHarness::builder("faults")
        .provider("anthropic", provider(server))
        .idle_timeout(idle)
        .build()
        .unwrap();
    let ctx = harness.create_context(ContextOptions::new());
    harness
        .run(
            &call_model("llm").model("claude-test").build(),
            "hi".to_owned(),
            &ctx,
        )
        .await
}

#[tokio::test]
async fn a_dropped_connection_fails_the_round_and_leaves_the_call_pending_under_its_message_id() {
    let server = MockServer::start().await;
    server.push(text().drop_after_events(3));
    let harness = AgentHarness::builder("faults")
        .provider("anthropic", provider(&server))
        .build()
        .unwrap();
    let ctx = harness.create_context(ContextOptions::new());
    let error = harness
        .run(
            &call_model("llm").model("claude-test").build(),
            "hi".to_owned(),
            &ctx,
        )
        .await
        .unwrap_err();
    assert_eq!(error.code(), "PROVIDER_ERROR", "{error}");
    // Cut after `message_start`: the provider may bill it, and its message id names it.
    let pending = harness.pending_spend().await.unwrap();
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(
        pending[0].generation_id.as_deref(),
        Some("msg_011CeCGmCzjcUtmtEmMdEiM2")
    );
    assert!(pending[0].dispatch_id.is_some());
}

#[tokio::test]
async fn a_stream_without_message_stop_is_an_error_not_a_silent_success() {
    let server = MockServer::start().await;
    server.push(text().without_terminal_event());
    let error = run_step(&server, Duration::from_secs(60))
        .await
        .unwrap_err();
    assert_eq!(error.code(), "PROVIDER_ERROR");
    assert!(
        error.to_string().contains("without a terminal event"),
        "{error}"
    );
}

#[tokio::test]
async fn an_oversized_event_is_refused_with_the_limit_named() {
    let server = MockServer::start().await;
    server.push(text().oversized_event_after_events(2, 4096));
    let provider = Anthropic::builder("key")
        .base_url(server.base_url())
        .max_event_bytes(1024)
        .retry(RetryConfig::none())
        .build()
        .unwrap();
    let error = ask(&provider).await.unwrap_err();
    assert_eq!(error.code(), "SSE_MALFORMED");
    assert!(error.to_string().contains("1024-byte limit"), "{error}");
}

#[tokio::test(start_paused = true)]
async fn a_529_overloaded_is_retried_with_backoff() {
    let server = MockServer::start().await;
    server.push(MockReply::json(
        529,
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
    ));
    server.push(text());
    let response = ask(&retrying(&server)).await.unwrap();
    assert_eq!(server.request_count(), 2);
    assert!(response.text().is_some());
}

#[tokio::test]
async fn a_missing_key_names_its_variable() {
    let error = match std::env::var(Anthropic::API_KEY_VAR) {
        Ok(_) => {
            // A developer's real key: unsetting it would race the other tests of this process.
            eprintln!("SKIPPED: ANTHROPIC_API_KEY is set, so a missing key cannot be checked");
            return;
        }
        Err(_) => Anthropic::from_env().unwrap_err(),
    };
    assert_eq!(error.code(), "MISSING_API_KEY");
    assert!(error.to_string().contains("ANTHROPIC_API_KEY"));
}
