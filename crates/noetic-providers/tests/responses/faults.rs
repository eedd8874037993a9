//! Faults through the real client and the mock server: stalls, drops, retries, bad data, refusals.

use std::time::Duration;

use noetic_core::{AgentHarness, ContextOptions, Error, FrameworkEvent, call_model};
use noetic_providers::{OpenResponses, RetryConfig};
use noetic_test_support::{EventLog, MockReply, MockServer};

use super::{events, provider};

const TEXT: &str = "openai-responses.text.gpt-4o-mini.sse";

async fn run_step(server: &MockServer, idle: Duration) -> (Result<String, Error>, EventLog) {
    let harness = AgentHarness::builder("faults")
        .provider("mock", provider(server))
        .idle_timeout(idle)
        .build()
        .unwrap();
    let log = EventLog::new();
    let ctx = harness.create_context(ContextOptions::new().event_sink(log.sink()));
    let result = harness
        .run(&call_model("llm").model("m").build(), "hi".to_owned(), &ctx)
        .await;
    (result, log)
}

#[tokio::test]
async fn a_stalled_stream_trips_the_idle_watchdog() {
    let server = MockServer::start().await;
    server.push(MockReply::fixture(TEXT).stall_after_events(3));
    // Real time: the watchdog's timeout is the assertion here, not a wait for work.
    let (result, log) = run_step(&server, Duration::from_millis(300)).await;
    let error = result.unwrap_err();
    assert_eq!(error.code(), "MODEL_STREAM_STALLED");
    assert_eq!(error.to_string(), "model stream idle timeout after 300ms");
    assert!(log.framework().contains(&FrameworkEvent::ModelCallStalled {
        round: 0,
        idle_timeout_ms: 300
    }));
    assert_eq!(
        log.sdk_types().len(),
        3,
        "the events before the stall came through"
    );
}

#[tokio::test]
async fn a_connection_dropped_mid_stream_fails_the_round_and_names_it() {
    let server = MockServer::start().await;
    server.push(MockReply::fixture(TEXT).drop_after_events(4));
    let (result, _log) = run_step(&server, Duration::from_secs(60)).await;
    let error = result.unwrap_err();
    assert_eq!(error.code(), "PROVIDER_ERROR");
    match &error {
        Error::Provider {
            round,
            status,
            message,
            ..
        } => {
            assert_eq!(*round, Some(0), "{error}");
            assert_eq!(*status, None);
            assert!(
                message.contains("mid-response") || message.contains("terminal event"),
                "{message}"
            );
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_429_is_retried_once_after_its_retry_after_delay() {
    let server = MockServer::start().await;
    server.push(
        MockReply::json(429, serde_json::json!({"error": {"message": "slow down"}}))
            .header("retry-after", "7"),
    );
    server.push(MockReply::fixture(TEXT));
    let provider = OpenResponses::builder(server.base_url())
        .retry(RetryConfig::default())
        .build()
        .unwrap();
    let started = tokio::time::Instant::now();
    let events = events(&provider).await.unwrap();
    assert!(
        started.elapsed() >= Duration::from_secs(7),
        "waited {:?}",
        started.elapsed()
    );
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "only the Retry-After delay: {:?}",
        started.elapsed()
    );
    assert_eq!(server.request_count(), 2);
    assert!(matches!(
        events.last(),
        Some(noetic_core::ResponseEvent::Finished(_))
    ));
}

#[tokio::test(start_paused = true)]
async fn three_500s_are_a_provider_error_after_the_bounded_retries() {
    let server = MockServer::start().await;
    server.set_fallback(MockReply::json(
        500,
        serde_json::json!({"error": {"message": "upstream exploded"}}),
    ));
    let provider = OpenResponses::builder(server.base_url())
        .name("flaky")
        .retry(RetryConfig::default())
        .build()
        .unwrap();
    let error = events(&provider).await.unwrap_err();
    assert_eq!(server.request_count(), 3, "one attempt and two retries");
    assert_eq!(error.code(), "PROVIDER_ERROR");
    assert!(
        matches!(&error, Error::Provider { status: Some(500), message, .. } if message == "upstream exploded"),
        "{error:?}"
    );
}

#[tokio::test]
async fn a_401_fails_at_once_with_the_providers_message() {
    let server = MockServer::start().await;
    server.set_fallback(MockReply::json(401, serde_json::json!({"error": {"message": "Invalid API key provided", "type": "invalid_request_error"}})));
    let provider = OpenResponses::builder(server.base_url())
        .api_key("sk-live-very-secret")
        .retry(RetryConfig::default())
        .build()
        .unwrap();
    let error = events(&provider).await.unwrap_err();
    assert_eq!(
        server.request_count(),
        1,
        "4xx other than 429 is not retried"
    );
    assert!(
        matches!(&error, Error::Provider { status: Some(401), message, .. } if message == "invalid_request_error: Invalid API key provided"),
        "{error:?}"
    );
    assert!(!format!("{error} {error:?}").contains("sk-live-very-secret"));
}

#[tokio::test]
async fn a_malformed_line_is_a_clear_error_naming_the_data() {
    let server = MockServer::start().await;
    server.push(MockReply::fixture(TEXT).malformed_line_after_events(2));
    let error = events(&provider(&server)).await.unwrap_err();
    assert_eq!(error.code(), "EVENT_MALFORMED");
    assert!(error.to_string().contains("{not json"), "{error}");
}

#[tokio::test]
async fn a_missing_terminal_event_is_an_error_not_a_silent_success() {
    let server = MockServer::start().await;
    server.push(MockReply::fixture(TEXT).without_terminal_event());
    let (result, _log) = run_step(&server, Duration::from_secs(60)).await;
    let error = result.unwrap_err();
    assert_eq!(error.code(), "PROVIDER_ERROR");
    assert!(
        error.to_string().contains("without a terminal event"),
        "{error}"
    );
}

#[tokio::test]
async fn an_oversized_event_is_refused_with_the_limit_named() {
    let server = MockServer::start().await;
    server.push(MockReply::fixture(TEXT).oversized_event_after_events(2, 4096));
    let provider = OpenResponses::builder(server.base_url())
        .max_event_bytes(1024)
        .retry(RetryConfig::none())
        .build()
        .unwrap();
    let error = events(&provider).await.unwrap_err();
    assert_eq!(error.code(), "SSE_MALFORMED");
    assert!(error.to_string().contains("1024-byte limit"), "{error}");
}

#[tokio::test]
async fn an_event_larger_than_a_mebibyte_is_fine_under_the_default_limit() {
    let server = MockServer::start().await;
    let big = "x".repeat(3 * 1024 * 1024);
    server.push(MockReply::sse_events([
        serde_json::json!({"type": "response.output_item.added", "output_index": 0, "item": {"type": "message", "role": "assistant", "content": []}}),
        serde_json::json!({"type": "response.output_text.delta", "output_index": 0, "content_index": 0, "delta": big}),
        serde_json::json!({"type": "response.completed", "response": {"status": "completed", "output": []}}),
    ]).chunk_size(64 * 1024));
    let events = events(&provider(&server)).await.unwrap();
    let delta = events.iter().find_map(|event| match event {
        noetic_core::ResponseEvent::OutputTextDelta { delta, .. } => Some(delta.len()),
        _ => None,
    });
    assert_eq!(delta, Some(3 * 1024 * 1024));
}

#[tokio::test]
async fn the_api_key_never_shows_in_debug_output() {
    let provider = OpenResponses::builder("http://127.0.0.1:9/v1")
        .api_key("sk-live-very-secret")
        .build()
        .unwrap();
    let debug = format!("{provider:?}");
    assert!(!debug.contains("sk-live-very-secret"), "{debug}");
    let openrouter = noetic_providers::OpenRouter::builder("sk-or-very-secret")
        .build()
        .unwrap();
    assert!(!format!("{openrouter:?}").contains("sk-or-very-secret"));
    let builder = noetic_providers::OpenRouter::builder("sk-or-very-secret");
    assert!(!format!("{builder:?}").contains("sk-or-very-secret"));
}

#[tokio::test]
async fn a_refused_connection_is_a_provider_error_without_the_key() {
    // Port 9 (discard) on loopback: nothing listens there in the test environment.
    let provider = OpenResponses::builder("http://127.0.0.1:9/v1")
        .api_key("sk-live-very-secret")
        .retry(RetryConfig::none())
        .build()
        .unwrap();
    let error = events(&provider).await.unwrap_err();
    assert_eq!(error.code(), "PROVIDER_ERROR");
    assert!(!format!("{error} {error:?}").contains("sk-live-very-secret"));
    // The transport error underneath is kept as the source, without the request's URL.
    let source = std::error::Error::source(&error).expect("the transport error is the source");
    let transport = source
        .downcast_ref::<reqwest::Error>()
        .expect("a reqwest error");
    assert!(transport.is_connect(), "{transport:?}");
    assert!(transport.url().is_none(), "{transport:?}");
}

#[test]
fn a_missing_key_names_the_env_var() {
    // Read through a variable name that is never set, so the test does not depend on the machine.
    let error = noetic_providers::ProviderError::MissingApiKey {
        env_var: "OPENROUTER_API_KEY",
    };
    assert_eq!(error.code(), "MISSING_API_KEY");
    assert!(error.to_string().contains("OPENROUTER_API_KEY"));
}

#[tokio::test]
async fn aborting_the_context_drops_the_request_at_once() {
    let server = MockServer::start().await;
    server.push(MockReply::fixture(TEXT).stall_after_events(2));
    let harness = AgentHarness::builder("abort")
        .provider("mock", provider(&server))
        .build()
        .unwrap();
    let ctx = harness.create_context(ContextOptions::new());
    let run = tokio::spawn({
        let ctx = ctx.clone();
        async move {
            harness
                .run(&call_model("llm").model("m").build(), "hi".to_owned(), &ctx)
                .await
        }
    });
    server.wait_for_requests(1).await;
    ctx.abort(Some("user stop".to_owned()));
    // Bounded: the stalled stream would otherwise hang for the 120 s idle timeout.
    let result = tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .expect("abort is prompt")
        .unwrap();
    assert_eq!(result.unwrap_err().to_string(), "cancelled: user stop");
}

#[tokio::test]
async fn a_stream_that_breaks_mid_response_names_the_round_in_its_message() {
    let server = MockServer::start().await;
    server.push(MockReply::fixture(TEXT).drop_after_events(4));
    let params = noetic_core::model::ModelParams::default();
    let input = [noetic_core::item::Item::user_text("hello")];
    let mut request = noetic_core::model::ModelRequest::new("m", &input, &params);
    request.round = 2;
    let error = super::collect(&provider(&server), &request)
        .await
        .unwrap_err();
    assert_eq!(error.code(), "PROVIDER_ERROR");
    assert!(
        matches!(
            &error,
            Error::Provider {
                round: Some(2),
                status: None,
                ..
            }
        ),
        "{error:?}"
    );
    let display = error.to_string();
    assert!(display.contains("round 2"), "{display}");
    assert!(display.contains("mid-response"), "{display}");
}
