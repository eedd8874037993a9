//! The CLI exports its spans and metrics over OTLP/HTTP when `OTEL_EXPORTER_OTLP_ENDPOINT` is set:
//! the test receiver (a real HTTP server decoding the protobuf) has every span and the metrics
//! before the process exits — after a success, a failure and a SIGTERM — and no secret is in any of
//! them.

use std::process::Stdio;
use std::time::Duration;

use noetic_test_support::{
    AttributeValue, MetricData, MockReply, MockServer, OtlpReceiver, ReceivedMetric, ReceivedSpan,
};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};

use crate::{
    CHILD_TIMEOUT, MODEL, TempDir, args, call_reply, finished, mock_options, noetic, text_reply,
};

const KEY: &str = "sk-or-otel-e2e-5b3f9d1c7a";

fn flow() -> serde_json::Value {
    json!({"version": 1, "root": {"kind": "callModel", "id": "assistant", "instructions": "Help.",
        "tools": [{"type": "echo"}]}})
}

/// `noetic ARGS` exporting to `receiver`, with a distinctive API key in its environment (sent to the
/// mock provider as `--api-key-env`).
fn exporting(receiver: &OtlpReceiver, arguments: Vec<String>) -> tokio::process::Command {
    let mut command = noetic(arguments);
    command
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint())
        .env("NOETIC_TEST_KEY", KEY)
        .env_remove("OTEL_SERVICE_NAME")
        .env_remove("OTEL_RESOURCE_ATTRIBUTES")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
        .env_remove("OTEL_METRICS_EXPORTER");
    command
}

fn metric(receiver: &OtlpReceiver, name: &str) -> ReceivedMetric {
    receiver.metric(name).unwrap_or_else(|| {
        panic!(
            "{name} in {:?}",
            receiver
                .metrics()
                .iter()
                .map(|metric| &metric.name)
                .collect::<Vec<_>>()
        )
    })
}

/// A counter's points: its attribute `key`'s value and its count.
fn counts(metric: &ReceivedMetric, key: &str) -> Vec<(Option<AttributeValue>, AttributeValue)> {
    match &metric.data {
        MetricData::Sum {
            monotonic: true,
            points,
        } => points
            .iter()
            .map(|point| (point.attr(key).cloned(), point.value.clone()))
            .collect(),
        other => panic!("{} is a counter: {other:?}", metric.name),
    }
}

fn string(value: &str) -> Option<AttributeValue> {
    Some(AttributeValue::String(value.to_owned()))
}

fn named<'a>(spans: &'a [ReceivedSpan], name: &str) -> Vec<&'a ReceivedSpan> {
    spans.iter().filter(|span| span.name == name).collect()
}

/// Nothing of `KEY` in any name, attribute, event, status or resource, nor in the export requests'
/// headers.
fn assert_no_secret(receiver: &OtlpReceiver) {
    for span in receiver.spans() {
        let everything = format!("{span:?}");
        assert!(!everything.contains(KEY), "{everything}");
        assert!(!everything.contains("sk-or-otel"), "{everything}");
    }
    for header in receiver.headers() {
        assert!(!header.contains(KEY), "{header}");
    }
    assert_eq!(receiver.rejected(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_successful_run_exports_every_span_with_service_name_before_it_exits() {
    let receiver = OtlpReceiver::start().await;
    let server = MockServer::start().await;
    server.push(call_reply("echo", &json!({"text": "ping"})));
    server.push(text_reply("pong"));
    let dir = TempDir::new();
    let flow = dir.write("flow.json", &flow());
    let child = exporting(
        &receiver,
        args(
            &["run", &flow, "Say ping", "--api-key-env", "NOETIC_TEST_KEY"],
            &mock_options(&server),
        ),
    )
    .stdin(Stdio::null())
    .spawn()
    .unwrap();
    let finished = finished(child).await;
    finished.assert_code(0);
    assert_eq!(finished.stdout, "pong\n");
    // Exported before the process exited: nothing is waited for here.
    let spans = receiver.spans();
    let agent = named(&spans, "invoke_agent noetic");
    assert_eq!(
        agent.len(),
        1,
        "{:?}",
        spans.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    assert_eq!(agent[0].attr("gen_ai.conversation.id"), Some("__default__"));
    assert!(agent[0].attr("noetic.turn.id").is_some());
    let rounds = named(&spans, &format!("chat {MODEL}"));
    assert_eq!(rounds.len(), 2);
    for round in &rounds {
        assert_eq!(round.attr("gen_ai.provider.name"), Some("responses"));
        assert_eq!(round.status_code, 0);
    }
    // The mock's replies: the tool call billed 10 input tokens, the answer 12.
    let mut inputs: Vec<&str> = rounds
        .iter()
        .filter_map(|round| round.attr("gen_ai.usage.input_tokens"))
        .collect();
    inputs.sort_unstable();
    assert_eq!(inputs, ["10", "12"]);
    for round in &rounds {
        assert!(
            matches!(
                round.value("gen_ai.usage.input_tokens"),
                Some(AttributeValue::Int(_))
            ),
            "{round:?}"
        );
    }
    // The metrics went along: the same usage, summed by token type, and the turn.
    let usage = metric(&receiver, "gen_ai.client.token.usage");
    let MetricData::Histogram(points) = &usage.data else {
        panic!("a histogram: {usage:?}");
    };
    let total = |token_type: &str| -> f64 {
        points
            .iter()
            .filter(|point| point.attr("gen_ai.token.type") == string(token_type).as_ref())
            .filter_map(|point| point.sum)
            .sum()
    };
    assert_eq!((total("input"), total("output")), (22.0, 8.0), "{points:?}");
    assert!(
        receiver
            .metric("gen_ai.client.operation.duration")
            .is_some()
    );
    assert_eq!(
        counts(
            &metric(&receiver, "noetic.turns.ended"),
            "noetic.turn.outcome"
        ),
        [(string("completed"), AttributeValue::Int(1))]
    );
    assert_eq!(named(&spans, "execute_tool echo").len(), 1);
    assert_eq!(named(&spans, "step assistant").len(), 1);
    for span in &spans {
        assert_eq!(
            span.resource_attr("service.name"),
            Some("noetic"),
            "{}",
            span.name
        );
        assert_eq!(span.trace_id, agent[0].trace_id, "one trace: {}", span.name);
    }
    assert_no_secret(&receiver);
}

#[tokio::test(flavor = "multi_thread")]
async fn otlp_endpoint_exports_spans_and_metrics_with_no_otel_environment() {
    let receiver = OtlpReceiver::start().await;
    let server = MockServer::start().await;
    server.push(text_reply("pong"));
    let dir = TempDir::new();
    let flow = dir.write("flow.json", &flow());
    let mut command = noetic(args(
        &[
            "run",
            &flow,
            "Say ping",
            "--otlp-endpoint",
            &receiver.endpoint(),
        ],
        &mock_options(&server),
    ));
    for name in [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        "OTEL_METRICS_EXPORTER",
        "OTEL_SERVICE_NAME",
        "OTEL_RESOURCE_ATTRIBUTES",
    ] {
        command.env_remove(name);
    }
    let finished = finished(command.stdin(Stdio::null()).spawn().unwrap()).await;
    finished.assert_code(0);
    assert_eq!(finished.stdout, "pong\n");
    let spans = receiver.spans();
    assert_eq!(
        named(&spans, &format!("chat {MODEL}")).len(),
        1,
        "{spans:?}"
    );
    let usage = metric(&receiver, "gen_ai.client.token.usage");
    let MetricData::Histogram(points) = &usage.data else {
        panic!("a histogram: {usage:?}");
    };
    let input: Vec<Option<f64>> = points
        .iter()
        .filter(|point| point.attr("gen_ai.token.type") == string("input").as_ref())
        .map(|point| point.sum)
        .collect();
    assert_eq!(input, [Some(12.0)]);
    assert_eq!(receiver.rejected(), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_run_exports_its_error_spans_before_it_exits_1() {
    let receiver = OtlpReceiver::start().await;
    let server = MockServer::start().await;
    server.push(MockReply::json(
        401,
        json!({"error": {"message": format!("Incorrect API key provided: {KEY}"), "type": "auth"}}),
    ));
    let dir = TempDir::new();
    let flow = dir.write("flow.json", &flow());
    let child = exporting(
        &receiver,
        args(
            &["run", &flow, "hi", "--api-key-env", "NOETIC_TEST_KEY"],
            &mock_options(&server),
        ),
    )
    .env("OTEL_SERVICE_NAME", "noetic-e2e")
    .stdin(Stdio::null())
    .spawn()
    .unwrap();
    let finished = finished(child).await;
    finished.assert_code(1);
    let spans = receiver.spans();
    let round = named(&spans, &format!("chat {MODEL}"));
    assert_eq!(round.len(), 1, "{spans:?}");
    assert_eq!(round[0].status_code, 2, "status error");
    assert_eq!(round[0].attr("error.type"), Some("PROVIDER_ERROR"));
    let agent = named(&spans, "invoke_agent noetic");
    assert_eq!(agent.len(), 1);
    assert_eq!(agent[0].status_code, 2);
    assert_eq!(agent[0].resource_attr("service.name"), Some("noetic-e2e"));
    assert_no_secret(&receiver);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_stopped_by_sigterm_exports_the_cut_round_as_cancelled_and_exits_143() {
    let receiver = OtlpReceiver::start().await;
    let server = MockServer::start().await;
    // The stream stalls for good after its first events: the round is in flight when SIGTERM comes.
    let text: String = (0..40).map(|n| format!("word{n} ")).collect();
    server.push(
        text_reply(&text)
            .chunk_size(48)
            .delay_between_chunks(Duration::from_millis(200)),
    );
    let dir = TempDir::new();
    let flow = dir.write("flow.json", &flow());
    let mut command = exporting(
        &receiver,
        args(
            &["run", &flow, "Tell me a story", "--events", "jsonl"],
            &mock_options(&server),
        ),
    );
    command.stdin(Stdio::null());
    let mut child = command.spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    tokio::time::timeout(CHILD_TIMEOUT, async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if line.contains("response.output_text.delta") {
                return;
            }
        }
        panic!("stdout ended before the round streamed");
    })
    .await
    .expect("the round streams");
    let pid = child.id().unwrap().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .await
        .unwrap();
    let status = tokio::time::timeout(CHILD_TIMEOUT, child.wait())
        .await
        .expect("exits in time")
        .unwrap();
    assert_eq!(status.code(), Some(143), "{stderr}");
    let spans = receiver.spans();
    let round = named(&spans, &format!("chat {MODEL}"));
    assert_eq!(round.len(), 1, "{spans:?}");
    assert_eq!(round[0].status_code, 2);
    assert_eq!(round[0].attr("error.type"), Some("CANCELLED"));
    assert_eq!(named(&spans, "invoke_agent noetic").len(), 1);
    // The metrics were flushed on the way out too: the cut turn, and its round left unpriced.
    assert_eq!(
        counts(
            &metric(&receiver, "noetic.turns.ended"),
            "noetic.turn.outcome"
        ),
        [(string("cancelled"), AttributeValue::Int(1))]
    );
    assert_eq!(
        counts(
            &metric(&receiver, "noetic.paid_calls.left_pending"),
            "gen_ai.request.model"
        ),
        [(string(MODEL), AttributeValue::Int(1))]
    );
    assert_no_secret(&receiver);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unresponsive_collector_delays_the_exit_by_a_bounded_flush_only() {
    // Accepts connections (the backlog does) and never answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", silent.local_addr().unwrap());
    let server = MockServer::start().await;
    server.push(text_reply("done"));
    let dir = TempDir::new();
    let flow = dir.write("flow.json", &flow());
    let started = std::time::Instant::now();
    let child = noetic(args(&["run", &flow, "hi"], &mock_options(&server)))
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    let finished = finished(child).await;
    finished.assert_code(0);
    assert_eq!(finished.stdout, "done\n");
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(9),
        "the flush is bounded (3 s), not the exporter's 10 s timeout: {took:?}"
    );
    drop(silent);
}
