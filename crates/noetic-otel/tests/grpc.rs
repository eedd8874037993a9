//! OTLP over gRPC (the `grpc` feature): spans (and metrics) reach a receiver speaking the gRPC
//! `TraceService/Export` (and `MetricsService/Export`) method over HTTP/2, from a tonic exporter
//! built here directly and from one the `OTEL_*` environment configures (in a child process, so the
//! test sets no variable in its own process).
//!
//! Run with `cargo test -p noetic-otel --features grpc --test grpc` (CI does).
#![cfg(feature = "grpc")]

use std::process::Command;

use noetic_core::{AgentHarness, ContextOptions, call_model};
use noetic_test_support::{
    AttributeValue, MetricData, OtlpProtocol, OtlpReceiver, ReceivedSpan, ScriptedModel,
    ScriptedResponse,
};
use tracing_subscriber::layer::SubscriberExt;

/// Set in the child's environment so the test run there knows it is the child.
const CHILD_MARK: &str = "NOETIC_OTEL_GRPC_CHILD";
const HEADER_SECRET: &str = "Bearer grpc-collector-token-9c1e";

/// A receiver on a runtime of its own, so the test's thread can block on the exporter's flush.
fn receiver() -> (tokio::runtime::Runtime, OtlpReceiver) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let receiver = runtime.block_on(OtlpReceiver::start());
    (runtime, receiver)
}

fn one<'a>(spans: &'a [ReceivedSpan], name: &str) -> &'a ReceivedSpan {
    let found: Vec<_> = spans.iter().filter(|span| span.name == name).collect();
    assert_eq!(
        found.len(),
        1,
        "{name} in {:?}",
        spans.iter().map(|span| &span.name).collect::<Vec<_>>()
    );
    found[0]
}

#[test]
fn a_run_s_spans_reach_a_grpc_receiver_after_the_caller_s_runtime_is_gone() {
    let (_server, receiver) = receiver();
    let exporter = noetic_otel::grpc_exporter_to(&receiver.endpoint()).expect("exporter");
    let (layer, guard) = noetic_otel::layer_with_exporter(exporter);
    let subscriber = tracing_subscriber::registry().with(layer);

    tracing::subscriber::with_default(subscriber, || {
        // The caller's runtime runs the turn and is dropped before the flush: the gRPC channel
        // lives on noetic-otel's own runtime, not on this one.
        let caller = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        caller.block_on(async {
            let agent = call_model("assistant").model("gpt-test").build();
            let harness = AgentHarness::builder("grpc-bot")
                .provider(
                    "scripted",
                    ScriptedModel::with_responses([ScriptedResponse::text("Hi there.")]),
                )
                .build()
                .expect("harness");
            let ctx = harness.create_context(ContextOptions::new());
            let answer = harness
                .run(&agent, "Hello".to_owned(), &ctx)
                .await
                .expect("runs");
            assert_eq!(answer, "Hi there.");
        });
        drop(caller);
    });
    guard
        .shutdown()
        .expect("every span exported before shutdown returns");

    let spans = receiver.spans();
    let root = one(&spans, "invoke_agent grpc-bot");
    let step = one(&spans, "step assistant");
    let round = one(&spans, "chat gpt-test");
    assert_eq!(step.parent_span_id, root.span_id);
    assert_eq!(round.parent_span_id, step.span_id);
    assert_eq!(round.trace_id, root.trace_id);
    assert_eq!(round.attr("gen_ai.operation.name"), Some("chat"));
    assert_eq!(root.resource_attr("service.name"), Some("noetic"));
    let protocols = receiver.protocols();
    assert!(!protocols.is_empty());
    assert!(
        protocols
            .iter()
            .all(|protocol| *protocol == OtlpProtocol::Grpc),
        "{protocols:?}"
    );
    assert!(
        receiver
            .headers()
            .iter()
            .any(|header| header == "content-type: application/grpc"),
        "{:?}",
        receiver.headers()
    );
    assert_eq!(receiver.rejected(), 0);
}

/// The name of the test below: it runs itself again as a child process with the `OTEL_*`
/// variables set (this process sets none of its own).
const ENV_TEST: &str =
    "otel_exporter_otlp_protocol_grpc_exports_with_the_environment_s_endpoint_headers_and_service";

#[test]
fn otel_exporter_otlp_protocol_grpc_exports_with_the_environment_s_endpoint_headers_and_service() {
    if std::env::var_os(CHILD_MARK).is_some() {
        export_what_the_environment_configures();
        return;
    }
    let (_server, receiver) = receiver();
    let child = Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", ENV_TEST, "--test-threads=1"])
        .env(CHILD_MARK, "1")
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint())
        .env(
            "OTEL_EXPORTER_OTLP_HEADERS",
            format!("authorization={HEADER_SECRET}"),
        )
        .env("OTEL_SERVICE_NAME", "grpc-child")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        .env_remove("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL")
        .env_remove("OTEL_METRICS_EXPORTER")
        .env_remove("OTEL_RESOURCE_ATTRIBUTES")
        .output()
        .expect("child runs");
    assert!(
        child.status.success(),
        "child: {}\n{}\n{}",
        child.status,
        String::from_utf8_lossy(&child.stdout),
        String::from_utf8_lossy(&child.stderr)
    );

    let spans = receiver.spans();
    let work = one(&spans, "child work");
    let inner = one(&spans, "child inner");
    assert_eq!(inner.parent_span_id, work.span_id);
    assert_eq!(work.resource_attr("service.name"), Some("grpc-child"));
    assert_eq!(receiver.protocols(), vec![OtlpProtocol::Grpc]);
    // The metrics went the same way: the child's counter event, counted once.
    assert_eq!(receiver.metric_protocols(), vec![OtlpProtocol::Grpc]);
    let counted = receiver
        .metric("noetic.child.events")
        .expect("the child's counter");
    assert!(
        matches!(
            &counted.data,
            MetricData::Sum { points, .. }
                if points.iter().map(|point| &point.value).eq([&AttributeValue::Int(1)])
        ),
        "{counted:?}"
    );
    // The headers travel as gRPC metadata: the collector gets them, nothing else does.
    assert!(
        receiver
            .headers()
            .contains(&format!("authorization: {HEADER_SECRET}")),
        "{:?}",
        receiver.headers()
    );
    for span in &spans {
        assert!(!format!("{span:?}").contains("grpc-collector-token"));
    }
}

/// The child side of the test above: `init()` from the environment, two spans and a counter
/// event, the guard's drop flushes them.
fn export_what_the_environment_configures() {
    let guard = noetic_otel::init().expect("grpc export from the environment");
    {
        let _work = tracing::info_span!("child work").entered();
        let _inner = tracing::info_span!("child inner").entered();
        tracing::info!(
            target: noetic_core::telemetry::METRICS_TARGET,
            metric = "noetic.child.events",
            "counted"
        );
    }
    drop(guard);
}
