//! [`OtlpReceiver`]: an OTLP receiver of traces and metrics on loopback, over HTTP (`POST /v1/traces`,
//! `POST /v1/metrics`) and gRPC (the `TraceService/Export` and `MetricsService/Export` methods,
//! HTTP/2 without TLS), decoding the protobuf export requests (with `opentelemetry-proto`) as a
//! collector would. Attribute values keep their OTLP type ([`AttributeValue`]).
//!
//! The gRPC side is the unary call's wire form written out by hand (a 5-byte frame header before the
//! protobuf message, `grpc-status` in the trailers), so tests need no gRPC server stack.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use http_body_util::StreamBody;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::metrics::v1::{metric, number_data_point};
use prost::Message;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// One exported span, flattened for assertions.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceivedSpan {
    /// The span's name.
    pub name: String,
    /// Its span id (hex).
    pub span_id: String,
    /// Its parent's span id (hex), empty for a root.
    pub parent_span_id: String,
    /// Its trace id (hex).
    pub trace_id: String,
    /// When it started, in nanoseconds since the Unix epoch.
    pub start_time_unix_nano: u64,
    /// Its attributes, values as strings.
    pub attributes: Vec<(String, String)>,
    /// Its attributes with their OTLP types.
    pub values: Vec<(String, AttributeValue)>,
    /// Its events: name, then attributes.
    pub events: Vec<(String, Vec<(String, String)>)>,
    /// Status code: 0 unset, 1 ok, 2 error.
    pub status_code: i32,
    /// Status message.
    pub status_message: String,
    /// The resource's attributes.
    pub resource: Vec<(String, String)>,
}

impl ReceivedSpan {
    /// The attribute `key`, when present.
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(name, _)| name == key)
            .map(|(_, value)| value.as_str())
    }

    /// The attribute `key` with its OTLP type, when present.
    pub fn value(&self, key: &str) -> Option<&AttributeValue> {
        find(&self.values, key)
    }

    /// The resource attribute `key`, when present.
    pub fn resource_attr(&self, key: &str) -> Option<&str> {
        self.resource
            .iter()
            .find(|(name, _)| name == key)
            .map(|(_, value)| value.as_str())
    }
}

/// An attribute value as it arrived: its OTLP type (`AnyValue`'s variant) and the value.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum AttributeValue {
    /// `string_value`.
    String(String),
    /// `bool_value`.
    Bool(bool),
    /// `int_value`.
    Int(i64),
    /// `double_value`.
    Double(f64),
    /// `array_value`.
    Array(Vec<AttributeValue>),
    /// Anything else (`kvlist_value`, `bytes_value`), as its debug text.
    Other(String),
}

/// One exported metric stream, flattened for assertions.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceivedMetric {
    /// The instrument's name.
    pub name: String,
    /// Its unit (`s`, `{token}`).
    pub unit: String,
    /// Its description.
    pub description: String,
    /// Its data points.
    pub data: MetricData,
    /// The instrumentation scope's name.
    pub scope: String,
    /// The resource's attributes.
    pub resource: Vec<(String, String)>,
}

/// The data of a [`ReceivedMetric`], by its OTLP kind.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum MetricData {
    /// A `Sum` (a counter when monotonic).
    Sum {
        /// Whether it only grows.
        monotonic: bool,
        /// Its points.
        points: Vec<NumberPoint>,
    },
    /// A `Gauge`.
    Gauge(Vec<NumberPoint>),
    /// An explicit-bucket `Histogram`.
    Histogram(Vec<HistogramPoint>),
    /// Another kind (exponential histogram, summary), by name.
    Other(&'static str),
}

/// A number data point (of a sum or a gauge).
#[derive(Debug, Clone, PartialEq)]
pub struct NumberPoint {
    /// Its attributes with their OTLP types.
    pub attributes: Vec<(String, AttributeValue)>,
    /// Its value: [`AttributeValue::Int`] for `as_int`, [`AttributeValue::Double`] for `as_double`.
    pub value: AttributeValue,
}

/// A histogram data point.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramPoint {
    /// Its attributes with their OTLP types.
    pub attributes: Vec<(String, AttributeValue)>,
    /// How many values were recorded.
    pub count: u64,
    /// Their sum.
    pub sum: Option<f64>,
    /// The least recorded value.
    pub min: Option<f64>,
    /// The greatest recorded value.
    pub max: Option<f64>,
    /// The buckets' upper bounds.
    pub bounds: Vec<f64>,
}

impl NumberPoint {
    /// The attribute `key`, when present.
    pub fn attr(&self, key: &str) -> Option<&AttributeValue> {
        find(&self.attributes, key)
    }
}

impl HistogramPoint {
    /// The attribute `key`, when present.
    pub fn attr(&self, key: &str) -> Option<&AttributeValue> {
        find(&self.attributes, key)
    }
}

fn find<'a>(values: &'a [(String, AttributeValue)], key: &str) -> Option<&'a AttributeValue> {
    values
        .iter()
        .find(|(name, _)| name == key)
        .map(|(_, value)| value)
}

/// The path of the OTLP gRPC trace export method.
const GRPC_EXPORT: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";
/// The path of the OTLP gRPC metrics export method.
const GRPC_METRICS_EXPORT: &str = "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export";

/// What an export request carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Signal {
    Traces,
    Metrics,
}

/// How an export request reached the receiver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtlpProtocol {
    /// `POST /v1/traces` with a protobuf body (`http/protobuf`).
    HttpProtobuf,
    /// The gRPC `TraceService/Export` method (`grpc`).
    Grpc,
}

#[derive(Default)]
struct Received {
    spans: Vec<ReceivedSpan>,
    /// Every metric stream of every metrics export, in arrival order.
    metrics: Vec<ReceivedMetric>,
    /// The protocol of every decoded trace export request, in arrival order.
    protocols: Vec<OtlpProtocol>,
    /// The protocol of every decoded metrics export request, in arrival order.
    metric_protocols: Vec<OtlpProtocol>,
    /// The headers of every export request, `name: value`.
    headers: Vec<String>,
    /// Requests that did not decode.
    rejected: usize,
}

struct Shared {
    received: Mutex<Received>,
}

/// An OTLP receiver: `POST /v1/traces` with a protobuf `ExportTraceServiceRequest` and
/// `POST /v1/metrics` with an `ExportMetricsServiceRequest`, and the same requests as the gRPC
/// methods `TraceService/Export` and `MetricsService/Export` on the same port. Point an exporter at
/// [`OtlpReceiver::endpoint`] (as `OTEL_EXPORTER_OTLP_ENDPOINT`, for either protocol).
pub struct OtlpReceiver {
    shared: Arc<Shared>,
    address: SocketAddr,
    _shutdown: watch::Sender<()>,
}

impl std::fmt::Debug for OtlpReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OtlpReceiver")
            .field("address", &self.address)
            .finish_non_exhaustive()
    }
}

impl OtlpReceiver {
    /// Starts a receiver on 127.0.0.1 (any free port).
    ///
    /// # Panics
    /// When no loopback port can be bound.
    pub async fn start() -> OtlpReceiver {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .unwrap_or_else(|error| panic!("otlp receiver: cannot bind: {error}"));
        let address = listener
            .local_addr()
            .unwrap_or_else(|error| panic!("otlp receiver: no address: {error}"));
        let shared = Arc::new(Shared {
            received: Mutex::new(Received::default()),
        });
        let router = Router::new()
            .route("/v1/traces", post(export_traces))
            .route("/v1/metrics", post(export_metrics))
            .route(GRPC_EXPORT, post(export_traces_grpc))
            .route(GRPC_METRICS_EXPORT, post(export_metrics_grpc))
            .with_state(shared.clone());
        let (shutdown, mut signal) = watch::channel(());
        let server = axum::serve(listener, router).with_graceful_shutdown(async move {
            let _ = signal.changed().await;
        });
        tokio::spawn(async move {
            let _ = server.await;
        });
        OtlpReceiver {
            shared,
            address,
            _shutdown: shutdown,
        }
    }

    /// The base endpoint (`http://127.0.0.1:PORT`), for `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.received().spans.clone()
    }

    /// Every metric stream received so far, in arrival order (a periodic reader exports each
    /// instrument again at every interval: with cumulative temporality the last one has the totals).
    pub fn metrics(&self) -> Vec<ReceivedMetric> {
        self.received().metrics.clone()
    }

    /// The last export of the metric `name`, when one arrived.
    pub fn metric(&self, name: &str) -> Option<ReceivedMetric> {
        self.received()
            .metrics
            .iter()
            .rev()
            .find(|metric| metric.name == name)
            .cloned()
    }

    /// The headers of every export request so far, as `name: value` lines.
    pub fn headers(&self) -> Vec<String> {
        self.received().headers.clone()
    }

    /// The protocol of every trace export request that decoded, in arrival order.
    pub fn protocols(&self) -> Vec<OtlpProtocol> {
        self.received().protocols.clone()
    }

    /// The protocol of every metrics export request that decoded, in arrival order.
    pub fn metric_protocols(&self) -> Vec<OtlpProtocol> {
        self.received().metric_protocols.clone()
    }

    /// How many requests did not decode (as an `ExportTraceServiceRequest` or an
    /// `ExportMetricsServiceRequest`, by path).
    pub fn rejected(&self) -> usize {
        self.received().rejected
    }

    fn received(&self) -> std::sync::MutexGuard<'_, Received> {
        self.shared
            .received
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

async fn export_traces(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    export_http(&shared, &headers, &body, Signal::Traces)
}

async fn export_metrics(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    export_http(&shared, &headers, &body, Signal::Metrics)
}

fn export_http(shared: &Shared, headers: &HeaderMap, body: &[u8], signal: Signal) -> StatusCode {
    match record(shared, headers, body, OtlpProtocol::HttpProtobuf, signal) {
        Ok(()) => StatusCode::OK,
        Err(()) => StatusCode::BAD_REQUEST,
    }
}

async fn export_traces_grpc(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    export_grpc(&shared, &headers, &body, Signal::Traces)
}

async fn export_metrics_grpc(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    export_grpc(&shared, &headers, &body, Signal::Metrics)
}

/// The unary gRPC call: one length-prefixed message in, one out, the status in the trailers.
fn export_grpc(shared: &Shared, headers: &HeaderMap, body: &Bytes, signal: Signal) -> Response {
    // An uncompressed frame: flag 0, a big-endian u32 length, the message.
    let message = match body.as_ref() {
        [0, a, b, c, d, message @ ..]
            if u32::from_be_bytes([*a, *b, *c, *d]) as usize == message.len() =>
        {
            Some(body.slice(5..))
        }
        _ => None,
    };
    let decoded = match message {
        Some(message) => record(shared, headers, &message, OtlpProtocol::Grpc, signal),
        None => {
            reject(shared, headers);
            Err(())
        }
    };
    let (reply, status) = match decoded {
        Ok(()) => {
            // Both services answer an empty message (no partial success), which encodes the same.
            let mut frame = vec![0_u8; 5];
            ExportTraceServiceResponse::default()
                .encode(&mut frame)
                .unwrap_or_else(|error| panic!("a Vec grows: {error}"));
            let length = u32::try_from(frame.len() - 5).unwrap_or(u32::MAX);
            frame[1..5].copy_from_slice(&length.to_be_bytes());
            (Some(Bytes::from(frame)), "0")
        }
        // INVALID_ARGUMENT
        Err(()) => (None, "3"),
    };
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", HeaderValue::from_static(status));
    let frames = reply
        .map(http_body::Frame::data)
        .into_iter()
        .chain([http_body::Frame::trailers(trailers)])
        .map(Ok::<_, std::convert::Infallible>);
    let body = StreamBody::new(futures_util::stream::iter(frames));
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/grpc"),
        )],
        Body::new(body),
    )
        .into_response()
}

/// Counts a request that did not decode (its headers kept).
fn reject(shared: &Shared, headers: &HeaderMap) {
    let mut received = shared
        .received
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    keep_headers(&mut received, headers);
    received.rejected += 1;
}

fn keep_headers(received: &mut Received, headers: &HeaderMap) {
    for (name, value) in headers {
        received.headers.push(format!(
            "{name}: {}",
            String::from_utf8_lossy(value.as_bytes())
        ));
    }
}

/// Decodes one export request and keeps what it carries; `Err` (counted as rejected) when it does
/// not decode.
fn record(
    shared: &Shared,
    headers: &HeaderMap,
    body: &[u8],
    protocol: OtlpProtocol,
    signal: Signal,
) -> Result<(), ()> {
    let mut received = shared
        .received
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    keep_headers(&mut received, headers);
    let decoded = match signal {
        Signal::Traces => ExportTraceServiceRequest::decode(body).map(|request| {
            received.protocols.push(protocol);
            keep_spans(&mut received, request);
        }),
        Signal::Metrics => ExportMetricsServiceRequest::decode(body).map(|request| {
            received.metric_protocols.push(protocol);
            keep_metrics(&mut received, request);
        }),
    };
    decoded.map_err(|_| received.rejected += 1)
}

fn keep_spans(received: &mut Received, request: ExportTraceServiceRequest) {
    for resource_spans in request.resource_spans {
        let resource = resource_spans
            .resource
            .map(|resource| flatten(&resource.attributes))
            .unwrap_or_default();
        for scope in resource_spans.scope_spans {
            for span in scope.spans {
                received.spans.push(ReceivedSpan {
                    name: span.name,
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    trace_id: hex(&span.trace_id),
                    start_time_unix_nano: span.start_time_unix_nano,
                    attributes: flatten(&span.attributes),
                    values: typed(&span.attributes),
                    events: span
                        .events
                        .iter()
                        .map(|event| (event.name.clone(), flatten(&event.attributes)))
                        .collect(),
                    status_code: span.status.as_ref().map_or(0, |status| status.code),
                    status_message: span.status.map(|status| status.message).unwrap_or_default(),
                    resource: resource.clone(),
                });
            }
        }
    }
}

fn keep_metrics(received: &mut Received, request: ExportMetricsServiceRequest) {
    for resource_metrics in request.resource_metrics {
        let resource = resource_metrics
            .resource
            .map(|resource| flatten(&resource.attributes))
            .unwrap_or_default();
        for scope_metrics in resource_metrics.scope_metrics {
            let scope = scope_metrics
                .scope
                .map(|scope| scope.name)
                .unwrap_or_default();
            for metric in scope_metrics.metrics {
                received.metrics.push(ReceivedMetric {
                    name: metric.name,
                    unit: metric.unit,
                    description: metric.description,
                    data: metric.data.map_or(MetricData::Other("none"), data),
                    scope: scope.clone(),
                    resource: resource.clone(),
                });
            }
        }
    }
}

fn data(data: metric::Data) -> MetricData {
    let number = |point: opentelemetry_proto::tonic::metrics::v1::NumberDataPoint| NumberPoint {
        attributes: typed(&point.attributes),
        value: match point.value {
            Some(number_data_point::Value::AsInt(value)) => AttributeValue::Int(value),
            Some(number_data_point::Value::AsDouble(value)) => AttributeValue::Double(value),
            None => AttributeValue::Other("none".to_owned()),
        },
    };
    match data {
        metric::Data::Sum(sum) => MetricData::Sum {
            monotonic: sum.is_monotonic,
            points: sum.data_points.into_iter().map(number).collect(),
        },
        metric::Data::Gauge(gauge) => {
            MetricData::Gauge(gauge.data_points.into_iter().map(number).collect())
        }
        metric::Data::Histogram(histogram) => MetricData::Histogram(
            histogram
                .data_points
                .into_iter()
                .map(|point| HistogramPoint {
                    attributes: typed(&point.attributes),
                    count: point.count,
                    sum: point.sum,
                    min: point.min,
                    max: point.max,
                    bounds: point.explicit_bounds,
                })
                .collect(),
        ),
        metric::Data::ExponentialHistogram(_) => MetricData::Other("exponential_histogram"),
        metric::Data::Summary(_) => MetricData::Other("summary"),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn flatten(attributes: &[KeyValue]) -> Vec<(String, String)> {
    attributes
        .iter()
        .map(|kv| {
            (
                kv.key.clone(),
                kv.value.as_ref().map(value).unwrap_or_default(),
            )
        })
        .collect()
}

fn typed(attributes: &[KeyValue]) -> Vec<(String, AttributeValue)> {
    attributes
        .iter()
        .map(|kv| {
            (
                kv.key.clone(),
                kv.value
                    .as_ref()
                    .map_or(AttributeValue::Other(String::new()), typed_value),
            )
        })
        .collect()
}

fn typed_value(value: &AnyValue) -> AttributeValue {
    match &value.value {
        Some(any_value::Value::StringValue(text)) => AttributeValue::String(text.clone()),
        Some(any_value::Value::BoolValue(flag)) => AttributeValue::Bool(*flag),
        Some(any_value::Value::IntValue(number)) => AttributeValue::Int(*number),
        Some(any_value::Value::DoubleValue(number)) => AttributeValue::Double(*number),
        Some(any_value::Value::ArrayValue(array)) => {
            AttributeValue::Array(array.values.iter().map(typed_value).collect())
        }
        Some(other) => AttributeValue::Other(format!("{other:?}")),
        None => AttributeValue::Other(String::new()),
    }
}

fn value(value: &AnyValue) -> String {
    match &value.value {
        Some(any_value::Value::StringValue(text)) => text.clone(),
        Some(any_value::Value::BoolValue(flag)) => flag.to_string(),
        Some(any_value::Value::IntValue(number)) => number.to_string(),
        Some(any_value::Value::DoubleValue(number)) => number.to_string(),
        Some(any_value::Value::ArrayValue(array)) => {
            let items: Vec<String> = array.values.iter().map(self::value).collect();
            items.join(",")
        }
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}
