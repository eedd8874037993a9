//! The provider conformance kit: what every [`ModelProvider`] over HTTP owes the harness, written once
//! and run by every wire (OpenResponses, Chat Completions, Anthropic, and a provider crate of your
//! own) against its own mock wire.
//!
//! A provider's test crate describes itself in a [`ProviderKit`] — how to build the provider for a
//! base URL, and one complete reply of its wire with the text and usage it must decode to — and binds
//! itself to the contract with one macro call, [`provider_conformance!`](crate::provider_conformance),
//! which writes one `#[tokio::test]` per section, so a failure names the section:
//!
//! ```text
//! mod conformance {
//!     use noetic_test_support::provider_kit::ProviderKit;
//!
//!     fn kit() -> ProviderKit<MyProvider> {
//!         ProviderKit {
//!             make: |base_url, api_key, retries| MyProvider::new(base_url, api_key, retries),
//!             text_reply: || MockReply::sse(MY_RECORDED_STREAM),
//!             text: "Hello!",
//!             input_tokens: Some(12),
//!             output_tokens: Some(3),
//!             cached_tokens: None,
//!             terminal_marker_optional: false,
//!         }
//!     }
//!
//!     noetic_test_support::provider_conformance!(kit());
//! }
//! ```
//!
//! The test crate needs `tokio` with the `macros`, `rt` and `test-util` features (the retry section
//! runs on paused time).
//!
//! | Section | What it holds the provider to |
//! |---|---|
//! | [`decodes_at_every_chunk_size`] | the reply decodes to its text and usage whole and one byte at a time; a count the wire did not report stays absent, never 0 |
//! | [`stall`] | a stream that stops sending trips the harness's idle watchdog (`MODEL_STREAM_STALLED`) |
//! | [`dropped`] | a connection dropped mid-stream fails the round with `PROVIDER_ERROR`, never a silent success |
//! | [`no_terminal_event`] | a stream that ends without its terminal event is an error (or, for a wire whose terminal marker is optional, still whole) |
//! | [`malformed`] | an event whose data is not JSON is `EVENT_MALFORMED`, naming the data |
//! | [`retry_after`] | a 429 is retried once after its `retry-after` (when retries are on), then answered |
//! | [`unauthorized`] | a 401 is `PROVIDER_ERROR` with status 401 at once, and the key never shows in the error |
//! | [`cancel`] | aborting the context mid-stream ends the run at once (`CANCELLED`), and the cut call stays pending for reconciling |
//!
//! Faults are made by the mock server ([`MockReply`]'s fault setters) on the kit's reply, split at SSE
//! event boundaries, so they apply to any SSE wire.

use std::time::Duration;

use noetic_core::{AgentHarness, ContextOptions, ModelProvider, call_model};

use crate::{MockReply, MockServer};

/// What the kit needs of a provider.
pub struct ProviderKit<P> {
    /// The provider aimed at `base_url` (the mock server's, ending in `/v1`) with `api_key`; with
    /// `retries` false it sends each request once.
    pub make: fn(base_url: &str, api_key: &str, retries: bool) -> P,
    /// A complete reply of the wire, answering with [`ProviderKit::text`].
    pub text_reply: fn() -> MockReply,
    /// The text the reply decodes to.
    pub text: &'static str,
    /// The reply's input tokens as the harness counts them (`None`: it reports no usage).
    pub input_tokens: Option<u64>,
    /// Its output tokens.
    pub output_tokens: Option<u64>,
    /// Its cached input tokens: `None` when the wire did not report them (absent is not 0).
    pub cached_tokens: Option<u64>,
    /// Whether the wire counts a stream that ends after its finish reason but without its terminal
    /// marker as whole (Chat Completions, whose servers may omit `[DONE]`): the
    /// [`no_terminal_event`] section then expects the answer instead of an error.
    pub terminal_marker_optional: bool,
}

/// The key the kit's providers are made with, which must never show.
const KEY: &str = "sk-kit-never-shown-4b1d";

fn harness<P: ModelProvider>(
    kit: &ProviderKit<P>,
    server: &MockServer,
    idle: Duration,
) -> AgentHarness {
    AgentHarness::builder("kit")
        .provider("kit", (kit.make)(&server.base_url(), KEY, false))
        .idle_timeout(idle)
        .build()
        .expect("a harness with the kit's provider")
}

async fn run_step(harness: &AgentHarness) -> noetic_core::Result<String> {
    let ctx = harness.create_context(ContextOptions::new());
    harness
        .run(
            &call_model("ask").model("kit-model").build(),
            "hello".to_owned(),
            &ctx,
        )
        .await
}

/// The reply decodes to its text and usage, whole and one byte at a time.
pub async fn decodes_at_every_chunk_size<P: ModelProvider>(kit: &ProviderKit<P>) {
    let server = MockServer::start().await;
    let harness = harness(kit, &server, Duration::from_secs(60));
    for chunk in [0, 1] {
        server.push((kit.text_reply)().chunk_size(chunk));
        let ctx = harness.create_context(ContextOptions::new());
        let text = harness
            .run(
                &call_model("ask").model("kit-model").build(),
                "hello".to_owned(),
                &ctx,
            )
            .await
            .unwrap_or_else(|error| panic!("chunk size {chunk}: {error}"));
        assert_eq!(text, kit.text, "chunk size {chunk}: the text");
        let usage = ctx.tokens();
        if let Some(input) = kit.input_tokens {
            assert_eq!(
                usage.input_tokens, input,
                "chunk size {chunk}: input tokens"
            );
        }
        if let Some(output) = kit.output_tokens {
            assert_eq!(
                usage.output_tokens, output,
                "chunk size {chunk}: output tokens"
            );
        }
        assert_eq!(
            usage.cached_tokens, kit.cached_tokens,
            "chunk size {chunk}: cached tokens (absent is not 0)"
        );
    }
}

/// Runs one step against the kit's reply with `fault` applied, the idle watchdog at `idle`.
async fn faulted<P: ModelProvider>(
    kit: &ProviderKit<P>,
    fault: impl FnOnce(MockReply) -> MockReply,
    idle: Duration,
) -> noetic_core::Result<String> {
    let server = MockServer::start().await;
    server.push(fault((kit.text_reply)()));
    run_step(&harness(kit, &server, idle)).await
}

/// A stream that stops sending trips the idle watchdog.
pub async fn stall<P: ModelProvider>(kit: &ProviderKit<P>) {
    // Real time: the watchdog's timeout is the assertion here, not a wait for work.
    let outcome = faulted(
        kit,
        |reply| reply.stall_after_events(2),
        Duration::from_millis(300),
    );
    let error = outcome.await.expect_err("a stalled stream fails");
    assert_eq!(error.code(), "MODEL_STREAM_STALLED", "{error}");
}

/// A connection dropped mid-stream fails the round.
pub async fn dropped<P: ModelProvider>(kit: &ProviderKit<P>) {
    let outcome = faulted(
        kit,
        |reply| reply.drop_after_events(2),
        Duration::from_secs(60),
    );
    let error = outcome.await.expect_err("a dropped stream fails");
    assert_eq!(error.code(), "PROVIDER_ERROR", "{error}");
}

/// A stream without its terminal event is an error.
pub async fn no_terminal_event<P: ModelProvider>(kit: &ProviderKit<P>) {
    let outcome = faulted(
        kit,
        MockReply::without_terminal_event,
        Duration::from_secs(60),
    )
    .await;
    if kit.terminal_marker_optional {
        assert_eq!(outcome.expect("whole without its marker"), kit.text);
        return;
    }
    let error = outcome.expect_err("a stream without its terminal event fails");
    assert_eq!(error.code(), "PROVIDER_ERROR", "{error}");
}

/// An event whose data is not JSON is `EVENT_MALFORMED`, naming the data.
pub async fn malformed<P: ModelProvider>(kit: &ProviderKit<P>) {
    let outcome = faulted(
        kit,
        |reply| reply.malformed_line_after_events(1),
        Duration::from_secs(60),
    );
    let error = outcome.await.expect_err("malformed data fails");
    assert_eq!(error.code(), "EVENT_MALFORMED", "{error}");
    assert!(error.to_string().contains("{not json"), "{error}");
}

/// A 429 is retried after its `retry-after`, then answered. Runs on paused time.
pub async fn retry_after<P: ModelProvider>(kit: &ProviderKit<P>) {
    let server = MockServer::start().await;
    server.push(
        MockReply::json(429, serde_json::json!({"error": {"message": "slow down"}}))
            .header("retry-after", "7"),
    );
    server.push((kit.text_reply)());
    let harness = AgentHarness::builder("kit")
        .provider("kit", (kit.make)(&server.base_url(), KEY, true))
        .build()
        .expect("harness");
    let started = tokio::time::Instant::now();
    let text = run_step(&harness).await.expect("answered after the retry");
    assert_eq!(text, kit.text);
    assert!(
        started.elapsed() >= Duration::from_secs(7),
        "{:?}",
        started.elapsed()
    );
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(server.request_count(), 2);
}

/// A 401 is a provider error at once, and the key never shows.
pub async fn unauthorized<P: ModelProvider>(kit: &ProviderKit<P>) {
    let server = MockServer::start().await;
    server.set_fallback(MockReply::json(
        401,
        serde_json::json!({"error": {"message": format!("invalid key {KEY}")}}),
    ));
    let harness = AgentHarness::builder("kit")
        .provider("kit", (kit.make)(&server.base_url(), KEY, true))
        .build()
        .expect("harness");
    let error = run_step(&harness).await.expect_err("a 401 fails");
    assert_eq!(error.code(), "PROVIDER_ERROR", "{error}");
    assert!(error.to_string().contains("401"), "{error}");
    assert!(
        !format!("{error} {error:?}").contains(KEY),
        "the key shows: {error:?}"
    );
    assert_eq!(server.request_count(), 1, "a 401 is not retried");
}

/// Aborting the context mid-stream ends the run at once; the cut call stays pending.
pub async fn cancel<P: ModelProvider>(kit: &ProviderKit<P>) {
    let server = MockServer::start().await;
    server.push((kit.text_reply)().stall_after_events(2));
    let harness = harness(kit, &server, Duration::from_secs(120));
    let ctx = harness.create_context(ContextOptions::new());
    let run = tokio::spawn({
        let (harness, ctx) = (harness.clone(), ctx.clone());
        async move {
            harness
                .run(
                    &call_model("ask").model("kit-model").build(),
                    "hello".to_owned(),
                    &ctx,
                )
                .await
        }
    });
    server.wait_for_requests(1).await;
    ctx.abort(Some("kit stop".to_owned()));
    // Bounded: the stalled stream would otherwise hang for the 120 s idle timeout.
    let result = tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .expect("the abort is prompt")
        .expect("the run does not panic");
    let error = result.expect_err("an aborted run fails");
    assert_eq!(error.code(), "CANCELLED", "{error}");
    let pending = harness.pending_spend().await.expect("pending spend");
    assert_eq!(pending.len(), 1, "the cut call stays pending: {pending:?}");
}

/// Writes one `#[tokio::test]` per section of the [provider kit](crate::provider_kit), each given
/// the kit the expression makes.
#[macro_export]
macro_rules! provider_conformance {
    ($kit:expr) => {
        #[tokio::test]
        async fn kit_the_reply_decodes_to_its_text_and_usage_at_every_chunk_size() {
            $crate::provider_kit::decodes_at_every_chunk_size(&$kit).await;
        }

        #[tokio::test]
        async fn kit_a_stalled_stream_trips_the_idle_watchdog() {
            $crate::provider_kit::stall(&$kit).await;
        }

        #[tokio::test]
        async fn kit_a_dropped_connection_fails_the_round() {
            $crate::provider_kit::dropped(&$kit).await;
        }

        #[tokio::test]
        async fn kit_a_stream_without_its_terminal_event_is_an_error() {
            $crate::provider_kit::no_terminal_event(&$kit).await;
        }

        #[tokio::test]
        async fn kit_a_malformed_event_is_event_malformed() {
            $crate::provider_kit::malformed(&$kit).await;
        }

        #[tokio::test(start_paused = true)]
        async fn kit_a_429_is_retried_after_its_retry_after() {
            $crate::provider_kit::retry_after(&$kit).await;
        }

        #[tokio::test]
        async fn kit_a_401_fails_at_once_without_showing_the_key() {
            $crate::provider_kit::unauthorized(&$kit).await;
        }

        #[tokio::test]
        async fn kit_an_abort_mid_stream_ends_the_run_and_leaves_the_call_pending() {
            $crate::provider_kit::cancel(&$kit).await;
        }
    };
}
