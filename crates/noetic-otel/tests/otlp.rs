//! What reaches a real OTLP/HTTP receiver (protobuf decoded as a collector would): numeric
//! attributes with their numeric OTLP types, for a round on each wire (Responses and Chat
//! Completions) replaying a recorded stream that reports cached tokens.

use noetic_core::{AgentHarness, CallModelDefaults, ContextOptions, ModelProvider, call_model};
use noetic_providers::{Anthropic, ChatCompletions, OpenResponses, RetryConfig};
use noetic_test_support::{AttributeValue, MockReply, MockServer, OtlpReceiver, ReceivedSpan};
use tracing_subscriber::layer::SubscriberExt;

/// A receiver and a mock provider server on a runtime of their own, so the test's thread can
/// block on the exporter's flush.
struct Servers {
    receiver: OtlpReceiver,
    provider: MockServer,
    _runtime: tokio::runtime::Runtime,
}

impl Servers {
    fn start() -> Servers {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        let (receiver, provider) =
            runtime.block_on(async { (OtlpReceiver::start().await, MockServer::start().await) });
        Servers {
            receiver,
            provider,
            _runtime: runtime,
        }
    }
}

/// Runs one `call_model` round of `gpt-x` (temperature 0.5, top_p 0.9, at most 2048 output
/// tokens) on `provider` under a subscriber exporting to `receiver` over OTLP/HTTP, then shuts
/// the exporter down (every span sent) and returns the round's span.
fn export_round(receiver: &OtlpReceiver, provider: impl ModelProvider) -> ReceivedSpan {
    let exporter =
        noetic_otel::exporter_to(&format!("{}/v1/traces", receiver.endpoint())).expect("exporter");
    let (layer, guard) = noetic_otel::layer_with_exporter(exporter);
    let subscriber = tracing_subscriber::registry().with(layer);
    tracing::subscriber::with_default(subscriber, || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let harness = AgentHarness::builder("typed")
                .provider("wire", provider)
                .call_model_defaults(CallModelDefaults::default().provider("wire"))
                .build()
                .expect("harness");
            let agent = call_model("ask")
                .model("gpt-x")
                .temperature(0.5)
                .top_p(0.9)
                .max_output_tokens(2048)
                .build();
            let ctx = harness.create_context(ContextOptions::new());
            harness
                .run(&agent, "What is the weather?".to_owned(), &ctx)
                .await
                .expect("the round completes");
        });
    });
    guard.shutdown().expect("every span exported");
    assert_eq!(receiver.rejected(), 0);
    let spans = receiver.spans();
    let rounds: Vec<&ReceivedSpan> = spans
        .iter()
        .filter(|span| span.name == "chat gpt-x")
        .collect();
    assert_eq!(
        rounds.len(),
        1,
        "{:?}",
        spans.iter().map(|span| &span.name).collect::<Vec<_>>()
    );
    rounds[0].clone()
}

fn int(value: i64) -> Option<AttributeValue> {
    Some(AttributeValue::Int(value))
}

fn double(value: f64) -> Option<AttributeValue> {
    Some(AttributeValue::Double(value))
}

/// The request's numbers, as the conventions type them.
fn assert_request_numbers(round: &ReceivedSpan) {
    assert_eq!(round.value("noetic.round").cloned(), int(0));
    assert_eq!(round.value("gen_ai.request.max_tokens").cloned(), int(2048));
    assert_eq!(
        round.value("gen_ai.request.temperature").cloned(),
        double(0.5)
    );
    assert_eq!(round.value("gen_ai.request.top_p").cloned(), double(0.9));
}

#[test]
fn a_responses_round_exports_its_token_counts_as_ints() {
    let servers = Servers::start();
    servers.provider.push(MockReply::fixture(
        "openai-responses.web-search-cached-tokens.gpt-5.sse",
    ));
    let provider = OpenResponses::builder(servers.provider.base_url())
        .api_key("sk-typed")
        .retry(RetryConfig::none())
        .build()
        .expect("provider");
    let round = export_round(&servers.receiver, provider);
    // The capture's usage: 9463 input (8320 of them cached), 582 output.
    assert_eq!(round.value("gen_ai.usage.input_tokens").cloned(), int(9463));
    assert_eq!(round.value("gen_ai.usage.output_tokens").cloned(), int(582));
    assert_eq!(
        round.value("gen_ai.usage.cache_read.input_tokens").cloned(),
        int(8320)
    );
    assert_request_numbers(&round);
    assert_eq!(
        round.value("gen_ai.response.model").cloned(),
        Some(AttributeValue::String("gpt-5-2025-08-07".to_owned()))
    );
}

#[test]
fn an_anthropic_round_exports_its_cache_writes_and_reads_as_ints() {
    let servers = Servers::start();
    servers.provider.push(MockReply::fixture_file(
        &noetic_test_support::anthropic_fixtures_dir()
            .join("anthropic.cache-write.claude-3.5-sonnet.sse"),
    ));
    let provider = Anthropic::builder("sk-ant-typed")
        .base_url(servers.provider.base_url())
        .retry(RetryConfig::none())
        .build()
        .expect("provider");
    let round = export_round(&servers.receiver, provider);
    // The capture's usage: 4 uncached input tokens and 1,167 written to the cache, none read.
    assert_eq!(round.value("gen_ai.usage.input_tokens").cloned(), int(1171));
    assert_eq!(
        round
            .value("gen_ai.usage.cache_creation.input_tokens")
            .cloned(),
        int(1167)
    );
    assert_eq!(
        round.value("gen_ai.usage.cache_read.input_tokens").cloned(),
        int(0)
    );
    assert_eq!(
        round.value("gen_ai.response.model").cloned(),
        Some(AttributeValue::String(
            "claude-3-5-sonnet-20240620".to_owned()
        ))
    );
}

#[test]
fn a_chat_completions_round_exports_its_token_counts_as_ints_and_its_cost_as_a_double() {
    let servers = Servers::start();
    servers.provider.push(MockReply::fixture(
        "openrouter-chat.cached-tokens-cost.grok-4.sse",
    ));
    let provider = ChatCompletions::builder(servers.provider.base_url())
        .api_key("sk-typed")
        .retry(RetryConfig::none())
        .build()
        .expect("provider");
    let round = export_round(&servers.receiver, provider);
    // The capture's usage: 687 prompt tokens (679 of them cached), 187 completion tokens, and
    // OpenRouter's cost.
    assert_eq!(round.value("gen_ai.usage.input_tokens").cloned(), int(687));
    assert_eq!(round.value("gen_ai.usage.output_tokens").cloned(), int(187));
    assert_eq!(
        round.value("gen_ai.usage.cache_read.input_tokens").cloned(),
        int(679)
    );
    assert_eq!(round.value("noetic.cost").cloned(), double(0.00333825));
    assert_request_numbers(&round);
}
