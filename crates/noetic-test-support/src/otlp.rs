//! [`OtlpReceiver`]: an OTLP/HTTP trace receiver on loopback, decoding the protobuf export requests
//! (with `opentelemetry-proto`) as a collector would.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
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

#[derive(Default)]
struct Received {
    spans: Vec<ReceivedSpan>,
    /// The headers of every export request, `name: value`.
    headers: Vec<String>,
    /// Requests that did not decode.
    rejected: usize,
}

struct Shared {
    received: Mutex<Received>,
}

/// An OTLP/HTTP receiver: `POST /v1/traces` with a protobuf `ExportTraceServiceRequest`. Point an
/// exporter at [`OtlpReceiver::endpoint`] (as `OTEL_EXPORTER_OTLP_ENDPOINT`).
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
    let decoded = ExportTraceServiceRequest::decode(body);
    let mut received = shared
        .received
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for (name, value) in &headers {
        received.headers.push(format!(
            "{name}: {}",
            String::from_utf8_lossy(value.as_bytes())
        ));
    }
    let Ok(request) = decoded else {
        received.rejected += 1;
        return StatusCode::BAD_REQUEST;
    };
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
    StatusCode::OK
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
