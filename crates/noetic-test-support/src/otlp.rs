//! [`OtlpReceiver`]: an OTLP trace receiver on loopback, over HTTP (`POST /v1/traces`) and gRPC
//! (the `TraceService/Export` method, HTTP/2 without TLS), decoding the protobuf export requests
//! (with `opentelemetry-proto`) as a collector would.
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
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
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

    /// The resource attribute `key`, when present.
    pub fn resource_attr(&self, key: &str) -> Option<&str> {
        self.resource
            .iter()
            .find(|(name, _)| name == key)
            .map(|(_, value)| value.as_str())
    }
}

/// The path of the OTLP gRPC trace export method.
const GRPC_EXPORT: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

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
    /// The protocol of every decoded export request, in arrival order.
    protocols: Vec<OtlpProtocol>,
    /// The headers of every export request, `name: value`.
    headers: Vec<String>,
    /// Requests that did not decode.
    rejected: usize,
}

struct Shared {
    received: Mutex<Received>,
}

/// An OTLP receiver: `POST /v1/traces` with a protobuf `ExportTraceServiceRequest`, and the same
/// request as the gRPC method `TraceService/Export` on the same port. Point an exporter at
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
            .route("/v1/traces", post(export))
            .route(GRPC_EXPORT, post(export_grpc))
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

    /// The headers of every export request so far, as `name: value` lines.
    pub fn headers(&self) -> Vec<String> {
        self.received().headers.clone()
    }

    /// The protocol of every export request that decoded, in arrival order.
    pub fn protocols(&self) -> Vec<OtlpProtocol> {
        self.received().protocols.clone()
    }

    /// How many requests did not decode as an `ExportTraceServiceRequest`.
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

async fn export(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    match record(&shared, &headers, &body, OtlpProtocol::HttpProtobuf) {
        Ok(()) => StatusCode::OK,
        Err(()) => StatusCode::BAD_REQUEST,
    }
}

/// The unary gRPC call: one length-prefixed message in, one out, the status in the trailers.
async fn export_grpc(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
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
        Some(message) => record(&shared, &headers, &message, OtlpProtocol::Grpc),
        None => {
            reject(&shared, &headers);
            Err(())
        }
    };
    let (reply, status) = match decoded {
        Ok(()) => {
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

/// Decodes one export request and keeps its spans; `Err` (counted as rejected) when it does not
/// decode.
fn record(
    shared: &Shared,
    headers: &HeaderMap,
    body: &[u8],
    protocol: OtlpProtocol,
) -> Result<(), ()> {
    let decoded = ExportTraceServiceRequest::decode(body);
    let mut received = shared
        .received
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    keep_headers(&mut received, headers);
    let Ok(request) = decoded else {
        received.rejected += 1;
        return Err(());
    };
    received.protocols.push(protocol);
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
    Ok(())
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
