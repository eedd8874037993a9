//! Secrets never reach `Debug` output or errors: API keys, custom headers that carry keys, keys in the
//! base URL's userinfo, and keys a server echoes back in an error body, an error event or bad data.

use noetic_core::ResponseEvent;
use noetic_providers::{ChatCompletions, OpenResponses, RetryConfig};
use noetic_test_support::{MockReply, MockServer};
use serde_json::json;

use super::events;

const KEY: &str = "sk-live-0123456789abcdef";

/// Header names that carry credentials in real APIs (any case).
const KEY_HEADERS: &[&str] = &[
    "x-api-key",
    "X-Api-Key",
    "api-key",
    "Authorization",
    "proxy-authorization",
    "x-auth-token",
    "Cookie",
    "x-goog-api-key",
];

fn assert_hidden(text: &str) {
    assert!(!text.contains(KEY), "the key leaked: {text}");
}

fn with_userinfo(base_url: &str, userinfo: &str) -> String {
    base_url.replacen("://", &format!("://{userinfo}@"), 1)
}

#[test]
fn custom_key_headers_never_show_in_debug() {
    for name in KEY_HEADERS.iter().copied().chain(["x-plain-header"]) {
        let builder = OpenResponses::builder("http://127.0.0.1:9/v1").header(name, KEY);
        assert_hidden(&format!("{builder:?}"));
        assert_hidden(&format!("{:?}", builder.build().unwrap()));
        let builder = ChatCompletions::builder("http://127.0.0.1:9/v1").header(name, KEY);
        assert_hidden(&format!("{builder:?}"));
        assert_hidden(&format!("{:?}", builder.build().unwrap()));
    }
}

#[test]
fn a_key_in_the_base_url_never_shows_in_debug() {
    for userinfo in [format!("user:{KEY}"), KEY.to_owned()] {
        let base = with_userinfo("https://api.example.com/v1", &userinfo);
        let builder = OpenResponses::builder(base.as_str());
        assert_hidden(&format!("{builder:?}"));
        let provider = builder.build().unwrap();
        assert_hidden(&format!("{provider:?}"));
        let builder = ChatCompletions::builder(base.as_str());
        assert_hidden(&format!("{builder:?}"));
        assert_hidden(&format!("{:?}", builder.build().unwrap()));
    }
}

#[tokio::test]
async fn a_key_in_the_base_url_is_sent_as_basic_auth_not_in_the_url() {
    let server = MockServer::start().await;
    server.push(MockReply::fixture("openai-responses.text.gpt-4o-mini.sse"));
    let provider =
        OpenResponses::builder(with_userinfo(&server.base_url(), &format!("user:{KEY}")))
            .retry(RetryConfig::none())
            .build()
            .unwrap();
    events(&provider).await.unwrap();
    let request = &server.requests()[0];
    assert_eq!(request.path, "/v1/responses");
    assert_eq!(
        request.header("authorization"),
        Some(format!("Basic {}", base64(&format!("user:{KEY}"))).as_str())
    );
}

#[tokio::test]
async fn an_api_key_wins_over_userinfo_in_the_base_url() {
    let server = MockServer::start().await;
    server.push(MockReply::fixture("openai-responses.text.gpt-4o-mini.sse"));
    let provider = OpenResponses::builder(with_userinfo(&server.base_url(), "user:pass"))
        .api_key(KEY)
        .retry(RetryConfig::none())
        .build()
        .unwrap();
    events(&provider).await.unwrap();
    let expected = format!("Bearer {KEY}");
    assert_eq!(
        server.requests()[0].header("authorization"),
        Some(expected.as_str())
    );
}

#[tokio::test]
async fn a_refused_connection_to_a_url_with_a_key_does_not_show_it() {
    // Port 9 (discard) on loopback: nothing listens there in the test environment.
    let base = with_userinfo("http://127.0.0.1:9/v1", &format!("user:{KEY}"));
    let provider = OpenResponses::builder(base)
        .retry(RetryConfig::none())
        .build()
        .unwrap();
    let error = events(&provider).await.unwrap_err();
    assert_eq!(error.code(), "PROVIDER_ERROR");
    assert_hidden(&format!("{error} {error:?}"));
    let mut source = std::error::Error::source(&error);
    while let Some(cause) = source {
        assert_hidden(&format!("{cause} {cause:?}"));
        source = cause.source();
    }
}

fn echoing_401() -> MockReply {
    MockReply::json(
        401,
        json!({"error": {"message": format!("Incorrect API key provided: {KEY}. Find your key at …"), "type": "invalid_request_error"}}),
    )
}

fn echoing_400_text() -> MockReply {
    MockReply::sse(format!(
        "bad request: header x-api-key={KEY} is not allowed here"
    ))
    .status(400)
    .header("content-type", "text/plain")
}

#[tokio::test]
async fn an_error_body_echoing_the_key_is_redacted() {
    let server = MockServer::start().await;
    server.push(echoing_401());
    server.push(echoing_401());
    let responses = OpenResponses::builder(server.base_url())
        .api_key(KEY)
        .retry(RetryConfig::none())
        .build()
        .unwrap();
    let chat = ChatCompletions::builder(server.base_url())
        .api_key(KEY)
        .retry(RetryConfig::none())
        .build()
        .unwrap();
    for error in [
        events(&responses).await.unwrap_err(),
        events(&chat).await.unwrap_err(),
    ] {
        assert_eq!(error.code(), "PROVIDER_ERROR");
        assert!(
            error.to_string().contains("Incorrect API key provided"),
            "the provider's message stays: {error}"
        );
        assert_hidden(&format!("{error} {error:?}"));
    }
}

#[tokio::test]
async fn a_plain_error_body_echoing_a_custom_key_header_is_redacted() {
    let server = MockServer::start().await;
    server.push(echoing_400_text());
    server.push(echoing_400_text());
    let responses = OpenResponses::builder(server.base_url())
        .header("X-Api-Key", KEY)
        .retry(RetryConfig::none())
        .build()
        .unwrap();
    let chat = ChatCompletions::builder(server.base_url())
        .header("x-api-key", KEY)
        .retry(RetryConfig::none())
        .build()
        .unwrap();
    for error in [
        events(&responses).await.unwrap_err(),
        events(&chat).await.unwrap_err(),
    ] {
        assert!(
            matches!(
                &error,
                noetic_core::Error::Provider {
                    status: Some(400),
                    ..
                }
            ),
            "{error:?}"
        );
        assert!(error.to_string().contains("is not allowed here"), "{error}");
        assert_hidden(&format!("{error} {error:?}"));
    }
    // The header itself was sent as configured.
    assert_eq!(server.requests()[0].header("x-api-key"), Some(KEY));
}

#[tokio::test]
async fn a_long_error_body_cut_short_leaves_no_start_of_the_key() {
    // A plain body is shown cut to its first 500 characters: here the cut falls inside the key.
    let body = format!("{}{KEY} is not valid", "x".repeat(490));
    let server = MockServer::start().await;
    for _ in 0..2 {
        server.push(
            MockReply::sse(body.clone())
                .status(401)
                .header("content-type", "text/plain"),
        );
    }
    let responses = OpenResponses::builder(server.base_url())
        .api_key(KEY)
        .retry(RetryConfig::none())
        .build()
        .unwrap();
    let chat = ChatCompletions::builder(server.base_url())
        .api_key(KEY)
        .retry(RetryConfig::none())
        .build()
        .unwrap();
    for error in [
        events(&responses).await.unwrap_err(),
        events(&chat).await.unwrap_err(),
    ] {
        assert_eq!(error.code(), "PROVIDER_ERROR");
        let shown = format!("{error} {error:?}");
        assert!(
            shown.contains("xxxxxxxx"),
            "the body's start stays: {error}"
        );
        assert!(
            !shown.contains(&KEY[..6]),
            "the start of the key leaked: {shown}"
        );
    }
}

#[tokio::test]
async fn an_error_event_echoing_the_key_is_redacted() {
    let server = MockServer::start().await;
    server.push(MockReply::sse_events([
        json!({"type": "response.created", "response": {"id": "resp_1", "model": "m"}}),
        json!({"type": "error", "error": {"code": "invalid_api_key", "message": format!("key {KEY} was revoked")}}),
        json!({"type": "response.failed", "response": {"id": "resp_1", "status": "failed", "output": [], "error": {"code": "invalid_api_key", "message": format!("key {KEY} was revoked")}}}),
    ]));
    server.push(MockReply::sse_events([
        json!({"id": "gen-1", "model": "m", "choices": [{"index": 0, "delta": {"content": "hi"}}]}),
        json!({"id": "gen-1", "choices": [{"index": 0, "delta": {}, "finish_reason": "error"}], "error": {"code": 401, "message": format!("key {KEY} was revoked")}}),
    ]));
    let responses = OpenResponses::builder(server.base_url())
        .api_key(KEY)
        .retry(RetryConfig::none())
        .build()
        .unwrap();
    let chat = ChatCompletions::builder(server.base_url())
        .api_key(KEY)
        .retry(RetryConfig::none())
        .build()
        .unwrap();
    for events in [
        events(&responses).await.unwrap(),
        events(&chat).await.unwrap(),
    ] {
        let messages: Vec<String> = events
            .iter()
            .filter_map(|event| match event {
                ResponseEvent::Error { message, .. } => Some(message.clone()),
                ResponseEvent::Finished(snapshot) => snapshot.error.clone(),
                _ => None,
            })
            .collect();
        assert_eq!(messages.len(), 2, "{events:?}");
        for message in &messages {
            assert!(message.contains("was revoked"), "{message}");
        }
        assert_hidden(&format!("{events:?}"));
    }
}

#[tokio::test]
async fn malformed_data_echoing_the_key_is_redacted_from_the_snippet() {
    let server = MockServer::start().await;
    server.push(MockReply::sse(format!("data: {{not json {KEY}\n\n")));
    server.push(MockReply::sse(format!("data: {{not json {KEY}\n\n")));
    let responses = OpenResponses::builder(server.base_url())
        .api_key(KEY)
        .retry(RetryConfig::none())
        .build()
        .unwrap();
    let chat = ChatCompletions::builder(server.base_url())
        .api_key(KEY)
        .retry(RetryConfig::none())
        .build()
        .unwrap();
    for error in [
        events(&responses).await.unwrap_err(),
        events(&chat).await.unwrap_err(),
    ] {
        assert_eq!(error.code(), "EVENT_MALFORMED");
        assert!(error.to_string().contains("{not json"), "{error}");
        assert_hidden(&format!("{error} {error:?}"));
    }
}

/// Standard base64 with padding, for the expected `Basic` credentials.
fn base64(text: &str) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let bytes = text.as_bytes();
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[test]
fn the_test_base64_matches_the_rfc_vectors() {
    assert_eq!(base64("f"), "Zg==");
    assert_eq!(base64("fo"), "Zm8=");
    assert_eq!(base64("foo"), "Zm9v");
    assert_eq!(base64("foobar"), "Zm9vYmFy");
}
