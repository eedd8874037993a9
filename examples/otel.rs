//! Tracing export: the quick start agent on the offline demo model, its spans exported over
//! OTLP/HTTP by `noetic-otel`.
//!
//! ```text
//! cargo run -p noetic-examples --example otel     # to a receiver inside this process; prints the tree
//! OTEL_EXPORTER_OTLP_ENDPOINT=http://localhost:4318 cargo run -p noetic-examples --example otel
//! ```
//!
//! With an endpoint in the environment (Jaeger, an OpenTelemetry collector) the spans go there.
//! Without one, the example starts a small OTLP receiver on 127.0.0.1 (the test receiver of
//! `noetic-test-support`, decoding the protobuf as a collector would) and prints what it received.

use std::time::Duration;

use noetic_core::{AgentHarness, ContextOptions};
use noetic_examples::quickstart::agent;
use noetic_providers::DemoModel;
use noetic_test_support::{OtlpReceiver, ReceivedSpan};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let executor = tokio::runtime::Runtime::new()?;
    // The receiver runs on the runtime; the exporter, on the SDK's own thread, posts to it.
    let receiver = if noetic_otel::configured() {
        eprintln!("note: exporting to the collector OTEL_EXPORTER_OTLP_ENDPOINT names");
        None
    } else {
        let receiver = executor.block_on(OtlpReceiver::start());
        eprintln!(
            "note: no OTEL_EXPORTER_OTLP_ENDPOINT set; exporting to a receiver at {}",
            receiver.endpoint()
        );
        Some(receiver)
    };
    let exporter = match &receiver {
        Some(receiver) => opentelemetry_otlp_exporter(&receiver.endpoint())?,
        None => noetic_otel::exporter_from_env()?,
    };
    let (layer, otel) = noetic_otel::layer_with_exporter(exporter);
    let subscriber =
        tracing_subscriber::layer::SubscriberExt::with(tracing_subscriber::registry(), layer);
    tracing::subscriber::set_global_default(subscriber)?;

    executor.block_on(async {
        let demo = DemoModel::start().await?;
        let agent = agent("demo-model");
        let harness = AgentHarness::builder("researcher")
            .provider("demo", demo.provider()?)
            .agent_graph(agent.clone())
            .build()?;
        let ctx = harness.create_context(ContextOptions::new());
        let answer = harness
            .run(&agent, "Find recent AI news".to_owned(), &ctx)
            .await?;
        println!("answer: {answer}");
        Ok::<_, Box<dyn std::error::Error>>(())
    })?;
    // Exports what is left (bounded) before the receiver is read.
    otel.flush_timeout(Duration::from_secs(3)).shutdown()?;
    if let Some(receiver) = receiver {
        let spans = receiver.spans();
        println!("{} spans received:", spans.len());
        print_tree(&spans, "", 0);
    }
    Ok(())
}

/// The exporter of `noetic-otel`, pointed at `endpoint` (the in-process receiver).
fn opentelemetry_otlp_exporter(
    endpoint: &str,
) -> Result<noetic_otel::SpanExporter, noetic_otel::OtelError> {
    noetic_otel::exporter_to(&format!("{endpoint}/v1/traces"))
}

fn print_tree(spans: &[ReceivedSpan], parent: &str, depth: usize) {
    let mut children: Vec<&ReceivedSpan> = spans
        .iter()
        .filter(|span| span.parent_span_id == parent)
        .collect();
    children.sort_by_key(|span| span.start_time_unix_nano);
    for span in children {
        let detail: Vec<String> = [
            "gen_ai.request.model",
            "gen_ai.usage.input_tokens",
            "gen_ai.tool.name",
        ]
        .iter()
        .filter_map(|key| span.attr(key).map(|value| format!("{key}={value}")))
        .collect();
        println!("{}{} {}", "  ".repeat(depth), span.name, detail.join(" "));
        print_tree(spans, &span.span_id, depth + 1);
    }
}
