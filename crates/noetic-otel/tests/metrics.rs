//! noetic's metrics as a collector receives them: session turns on the Responses wire (a recorded
//! stream reporting cached tokens, a tool call waiting for approval, a round cut by an abort, a
//! steer joining a running turn) exported over OTLP/HTTP, decoded from the real
//! `ExportMetricsServiceRequest`s.

use std::time::Duration;

use futures_util::StreamExt;
use std::sync::Arc;

use noetic_core::{
    AbortOptions, AgentHarness, CallModelDefaults, DeliveryMode, ExecuteOptions, FrameworkEvent,
    Scope, StreamEvent, Tool, ToolContext, ToolError, call_model,
};
use noetic_providers::{OpenResponses, RetryConfig};
use noetic_test_support::{
    AttributeValue, HistogramPoint, MetricData, MockReply, MockServer, NumberPoint, OtlpProtocol,
    OtlpReceiver, ReceivedMetric,
};
use serde_json::{Value, json};
use tracing_subscriber::layer::SubscriberExt;

/// How long any one wait for the harness may take.
const WAIT: Duration = Duration::from_secs(10);

/// A receiver and a mock provider server on a runtime of their own, so the test's thread can
/// block on the exporters' flush.
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

fn string(value: &str) -> AttributeValue {
    AttributeValue::String(value.to_owned())
}

/// The session events until one that `wanted` picks (bounded by [`WAIT`], naming `what`).
async fn until<T>(
    events: &mut (impl futures_util::Stream<Item = std::sync::Arc<StreamEvent>> + Unpin),
    what: &str,
    mut wanted: impl FnMut(&StreamEvent) -> Option<T>,
) -> T {
    tokio::time::timeout(WAIT, async {
        while let Some(event) = events.next().await {
            if let Some(found) = wanted(&event) {
                return found;
            }
        }
        panic!("the session's events ended before {what}")
    })
    .await
    .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

fn turn_ended(event: &StreamEvent) -> Option<()> {
    matches!(
        event,
        StreamEvent::Framework(
            FrameworkEvent::TurnCompleted { .. } | FrameworkEvent::TurnAborted { .. }
        )
    )
    .then_some(())
}

/// Runs `turns` on a current-thread runtime under a subscriber exporting spans and metrics to
/// `receiver`, then shuts both exporters down.
fn exporting<F: std::future::Future<Output = ()>>(receiver: &OtlpReceiver, turns: F) {
    let endpoint = receiver.endpoint();
    let spans = noetic_otel::exporter_to(&format!("{endpoint}/v1/traces")).expect("span exporter");
    let metrics =
        noetic_otel::metric_exporter_to(&format!("{endpoint}/v1/metrics")).expect("exporter");
    let (span_layer, span_guard) = noetic_otel::layer_with_exporter(spans);
    let (metrics_layer, metrics_guard) = noetic_otel::metrics_layer_with_exporter(metrics);
    let guard = span_guard.join(metrics_guard);
    let subscriber = tracing_subscriber::registry()
        .with(span_layer)
        .with(metrics_layer);
    tracing::subscriber::with_default(subscriber, || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
            .block_on(turns);
    });
    guard.shutdown().expect("spans and metrics exported");
}

/// Runs the three turns, exporting to `servers.receiver`.
fn run_three_turns(servers: &Servers) {
    let provider_server = &servers.provider;
    provider_server.push(MockReply::fixture(
        "openai-responses.web-search-cached-tokens.gpt-5.sse",
    ));
    provider_server.push(MockReply::function_call(
        "call_1",
        "echo",
        &json!({"text": "hi"}),
    ));
    provider_server.push(MockReply::answer("echoed"));
    // Streams its first events, then nothing: the round is in flight when the abort comes.
    provider_server.push(MockReply::answer("a long story").stall_after_events(2));
    let provider = OpenResponses::builder(provider_server.base_url())
        .api_key("sk-metered")
        .retry(RetryConfig::none())
        .build()
        .expect("provider");

    exporting(&servers.receiver, async {
        let echo = Tool::new(
            "echo",
            "Echoes",
            |args: Value, _ctx: ToolContext| async move { Ok::<_, ToolError>(args) },
        )
        .needs_approval(true);
        let harness = AgentHarness::builder("metered")
            .provider("wire", provider)
            .call_model_defaults(CallModelDefaults::default().provider("wire"))
            .agent_graph(call_model("ask").model("gpt-x").tool(echo).build())
            .build()
            .expect("harness");
        let mut events = harness.events(Scope::default());

        harness
            .execute("What is the weather?", ExecuteOptions::default())
            .await
            .expect("queued");
        until(&mut events, "the first turn's end", turn_ended).await;

        harness
            .execute("Echo hi", ExecuteOptions::default())
            .await
            .expect("queued");
        let approval = until(&mut events, "the approval request", |event| match event {
            StreamEvent::Framework(FrameworkEvent::ApprovalRequested { approval_id, .. }) => {
                Some(approval_id.clone())
            }
            _ => None,
        })
        .await;
        harness
            .approve("__default__", &approval)
            .await
            .expect("approved");
        until(&mut events, "the second turn's end", turn_ended).await;

        harness
            .execute("Tell me a story", ExecuteOptions::default())
            .await
            .expect("queued");
        until(&mut events, "the story's first stream event", |event| {
            matches!(event, StreamEvent::Sdk(_)).then_some(())
        })
        .await;
        harness.abort(AbortOptions::default()).await;
        until(&mut events, "the aborted turn's end", turn_ended).await;
    });
}

fn metric(receiver: &OtlpReceiver, name: &str) -> ReceivedMetric {
    let metric = receiver.metric(name).unwrap_or_else(|| {
        panic!(
            "{name} in {:?}",
            receiver
                .metrics()
                .iter()
                .map(|metric| &metric.name)
                .collect::<Vec<_>>()
        )
    });
    assert_eq!(metric.scope, "noetic", "{name}");
    assert_eq!(
        metric
            .resource
            .iter()
            .find(|(key, _)| key == "service.name")
            .map(|(_, value)| value.as_str()),
        Some("noetic"),
        "{name}"
    );
    metric
}

fn histogram(metric: &ReceivedMetric) -> &[HistogramPoint] {
    match &metric.data {
        MetricData::Histogram(points) => points,
        other => panic!("{} is a histogram: {other:?}", metric.name),
    }
}

fn counter(metric: &ReceivedMetric) -> &[NumberPoint] {
    match &metric.data {
        MetricData::Sum {
            monotonic: true,
            points,
        } => points,
        other => panic!("{} is a counter: {other:?}", metric.name),
    }
}

/// The counter's int value where its attribute `key` is `value`.
fn count_where(metric: &ReceivedMetric, key: &str, value: &str) -> Option<AttributeValue> {
    counter(metric)
        .iter()
        .find(|point| point.attr(key) == Some(&string(value)))
        .map(|point| point.value.clone())
}

#[test]
fn token_usage_durations_and_counters_reach_an_otlp_receiver_as_the_mock_reported() {
    let servers = Servers::start();
    run_three_turns(&servers);
    let receiver = &servers.receiver;
    assert_eq!(receiver.rejected(), 0);
    let protocols = receiver.metric_protocols();
    assert!(!protocols.is_empty(), "a metrics export arrived");
    assert!(
        protocols
            .iter()
            .all(|protocol| *protocol == OtlpProtocol::HttpProtobuf)
    );

    // Token usage: one input and one output point per round that reported usage, with the
    // conventions' attributes; the values the mock's streams reported (cached 9463/582, then the
    // tool call 10/3 and the answer 10/5; the cut round reported none).
    let usage = metric(receiver, "gen_ai.client.token.usage");
    assert_eq!(usage.unit, "{token}");
    let points = histogram(&usage);
    let of = |token_type: &str, response_model: &str| {
        points
            .iter()
            .find(|point| {
                point.attr("gen_ai.token.type") == Some(&string(token_type))
                    && point.attr("gen_ai.response.model") == Some(&string(response_model))
            })
            .unwrap_or_else(|| panic!("{token_type} tokens of {response_model} in {points:?}"))
    };
    let input = of("input", "gpt-5-2025-08-07");
    assert_eq!(
        (input.count, input.sum, input.min, input.max),
        (1, Some(9463.0), Some(9463.0), Some(9463.0))
    );
    let output = of("output", "gpt-5-2025-08-07");
    assert_eq!((output.count, output.sum), (1, Some(582.0)));
    assert_eq!(input.bounds.first(), Some(&1.0));
    assert_eq!(input.bounds.last(), Some(&67_108_864.0));
    for point in points {
        assert_eq!(point.attr("gen_ai.operation.name"), Some(&string("chat")));
        assert_eq!(point.attr("gen_ai.provider.name"), Some(&string("wire")));
        assert_eq!(point.attr("gen_ai.request.model"), Some(&string("gpt-x")));
    }
    let total = |token_type: &str| -> f64 {
        points
            .iter()
            .filter(|point| point.attr("gen_ai.token.type") == Some(&string(token_type)))
            .filter_map(|point| point.sum)
            .sum()
    };
    assert_eq!(total("input"), 9463.0 + 10.0 + 10.0);
    assert_eq!(total("output"), 582.0 + 3.0 + 5.0);

    // Cached input: an int counter (a part of the input above).
    let cached = metric(
        receiver,
        "gen_ai.client.inference.usage.cache_read.input_tokens",
    );
    assert_eq!(cached.unit, "{token}");
    assert_eq!(
        counter(&cached)
            .iter()
            .map(|point| point.value.clone())
            .collect::<Vec<_>>(),
        [AttributeValue::Int(8320)]
    );

    // Durations: every round, the cut one with its error type.
    let duration = metric(receiver, "gen_ai.client.operation.duration");
    assert_eq!(duration.unit, "s");
    let points = histogram(&duration);
    let rounds: u64 = points.iter().map(|point| point.count).sum();
    assert_eq!(rounds, 4, "{points:?}");
    let cut = points
        .iter()
        .find(|point| point.attr("error.type").is_some())
        .unwrap_or_else(|| panic!("a failed round in {points:?}"));
    assert_eq!(cut.attr("error.type"), Some(&string("CANCELLED")));
    assert_eq!(cut.count, 1);
    assert!(cut.sum.is_some_and(|seconds| seconds > 0.0));
    assert_eq!(cut.bounds.first(), Some(&0.01));

    // noetic's counters, as ints.
    let started = metric(receiver, "noetic.turns.started");
    assert_eq!(started.unit, "{turn}");
    assert_eq!(
        count_where(&started, "gen_ai.agent.name", "metered"),
        Some(AttributeValue::Int(3))
    );
    let ended = metric(receiver, "noetic.turns.ended");
    assert_eq!(
        count_where(&ended, "noetic.turn.outcome", "completed"),
        Some(AttributeValue::Int(2))
    );
    let cancelled = counter(&ended)
        .iter()
        .find(|point| point.attr("noetic.turn.outcome") == Some(&string("cancelled")))
        .unwrap_or_else(|| panic!("a cancelled turn in {ended:?}"));
    assert_eq!(cancelled.value, AttributeValue::Int(1));
    assert_eq!(cancelled.attr("error.type"), Some(&string("CANCELLED")));
    let approvals = metric(receiver, "noetic.approvals.requested");
    assert_eq!(
        count_where(&approvals, "gen_ai.tool.name", "echo"),
        Some(AttributeValue::Int(1))
    );
    let pending = metric(receiver, "noetic.paid_calls.left_pending");
    assert_eq!(
        count_where(&pending, "gen_ai.request.model", "gpt-x"),
        Some(AttributeValue::Int(1))
    );

    // The spans went to the same receiver: a metric next to its span.
    let spans = receiver.spans();
    assert_eq!(
        spans
            .iter()
            .filter(|span| span.name == "chat gpt-x")
            .count(),
        4
    );
}

#[test]
fn a_steer_joining_a_running_turn_is_counted_where_it_was_applied() {
    let servers = Servers::start();
    servers
        .provider
        .push(MockReply::function_call("call_1", "wait", &json!({})));
    servers.provider.push(MockReply::answer("done"));
    let provider = OpenResponses::builder(servers.provider.base_url())
        .api_key("sk-metered")
        .retry(RetryConfig::none())
        .build()
        .expect("provider");
    // The tool holds the turn between its two rounds until the steer is queued.
    let queued = Arc::new(tokio::sync::Notify::new());
    let release = queued.clone();
    let wait = Tool::new("wait", "Waits", move |_args: Value, _ctx: ToolContext| {
        let release = release.clone();
        async move {
            release.notified().await;
            Ok::<_, ToolError>(json!("waited"))
        }
    });
    exporting(&servers.receiver, async {
        let harness = AgentHarness::builder("steered")
            .provider("wire", provider)
            .call_model_defaults(CallModelDefaults::default().provider("wire"))
            .agent_graph(call_model("ask").model("gpt-x").tool(wait).build())
            .build()
            .expect("harness");
        let mut events = harness.events(Scope::default());
        harness
            .execute("Wait, then answer", ExecuteOptions::default())
            .await
            .expect("queued");
        until(&mut events, "the tool call", |event| {
            matches!(
                event,
                StreamEvent::Framework(FrameworkEvent::ToolCallStarted { .. })
            )
            .then_some(())
        })
        .await;
        harness
            .execute(
                "Answer in French",
                ExecuteOptions::new().delivery_mode(DeliveryMode::BetweenRounds),
            )
            .await
            .expect("queued");
        queued.notify_one();
        let point = until(
            &mut events,
            "the steer's application",
            |event| match event {
                StreamEvent::Framework(FrameworkEvent::SteerApplied { point, .. }) => Some(*point),
                _ => None,
            },
        )
        .await;
        assert_eq!(point, noetic_core::SteerPoint::BeforeRound);
        until(&mut events, "the turn's end", turn_ended).await;
    });
    let steers = metric(&servers.receiver, "noetic.steers.applied");
    assert_eq!(steers.unit, "{message}");
    let points = counter(&steers);
    assert_eq!(points.len(), 1, "{points:?}");
    assert_eq!(points[0].value, AttributeValue::Int(1));
    assert_eq!(
        points[0].attr("noetic.steer.point"),
        Some(&string("before_round"))
    );
    assert_eq!(
        points[0].attr("gen_ai.agent.name"),
        Some(&string("steered"))
    );
}

#[test]
fn a_drain_stopped_by_a_second_abort_is_counted_by_its_reason() {
    let servers = Servers::start();
    // Streams its first events, then nothing: the round is in flight while the turn drains.
    servers
        .provider
        .push(MockReply::answer("a long story").stall_after_events(2));
    let provider = OpenResponses::builder(servers.provider.base_url())
        .api_key("sk-metered")
        .retry(RetryConfig::none())
        .build()
        .expect("provider");
    exporting(&servers.receiver, async {
        let harness = AgentHarness::builder("drained")
            .provider("wire", provider)
            .call_model_defaults(CallModelDefaults::default().provider("wire"))
            .agent_graph(call_model("ask").model("gpt-x").build())
            .build()
            .expect("harness");
        let mut events = harness.events(Scope::default());
        harness
            .execute("Tell me a story", ExecuteOptions::default())
            .await
            .expect("queued");
        until(&mut events, "the round's first text", |event| {
            matches!(event, StreamEvent::Sdk(_)).then_some(())
        })
        .await;
        let first = harness.abort(AbortOptions::new().drain(Duration::from_secs(600)));
        let second = async {
            until(&mut events, "the drain's start", |event| {
                matches!(
                    event,
                    StreamEvent::Framework(FrameworkEvent::DrainStarted { .. })
                )
                .then_some(())
            })
            .await;
            harness.abort(AbortOptions::new()).await
        };
        let (first, second) = tokio::time::timeout(WAIT, async { tokio::join!(first, second) })
            .await
            .expect("both stops resolve");
        assert_eq!(first, second, "one report");
    });
    let drains = metric(&servers.receiver, "noetic.drains");
    let points = counter(&drains);
    assert_eq!(points.len(), 1, "{points:?}");
    assert_eq!(points[0].value, AttributeValue::Int(1));
    assert_eq!(
        points[0].attr("noetic.drain.reason"),
        Some(&string("stopped"))
    );
    assert_eq!(
        points[0].attr("gen_ai.agent.name"),
        Some(&string("drained"))
    );
}
