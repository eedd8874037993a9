//! # noetic-otel
//!
//! OpenTelemetry export of the spans `noetic-core` emits through `tracing` (named after the GenAI
//! semantic conventions: see `noetic_core::telemetry`). Core has no OpenTelemetry dependency; this
//! crate bridges its `tracing` spans with `tracing-opentelemetry` and exports them over OTLP/HTTP
//! (protobuf) with the SDK's batch processor, on its own thread, through reqwest 0.13 (the
//! workspace's one HTTP stack). With the `grpc` feature it also exports over OTLP/gRPC (tonic, on the
//! same hyper); the gRPC connection lives on a small runtime of this crate's own (one worker thread,
//! started with the first gRPC exporter), so export works from any thread and outlives the caller's
//! runtime — a program can shut its own runtime down and still flush.
//!
//! Configuration comes from the standard environment variables:
//!
//! - `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (the full URL, `…/v1/traces`) or
//!   `OTEL_EXPORTER_OTLP_ENDPOINT` (the base; `/v1/traces` is appended); default
//!   `http://localhost:4318` (for gRPC: the collector's address, default `http://localhost:4317`);
//! - `OTEL_EXPORTER_OTLP_PROTOCOL` (or `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`): `http/protobuf` (the
//!   default) or, with the `grpc` feature, `grpc`; anything else (`http/json`, or `grpc` in a build
//!   without the feature) is refused with [`OtelError::UnsupportedProtocol`];
//! - `OTEL_EXPORTER_OTLP_HEADERS` / `OTEL_EXPORTER_OTLP_TRACES_HEADERS` (`key=value,…`: an
//!   `authorization` header, say; never logged);
//! - `OTEL_EXPORTER_OTLP_TIMEOUT` (ms, default 10000);
//! - `OTEL_SERVICE_NAME` (default `noetic`) and `OTEL_RESOURCE_ATTRIBUTES`.
//!
//! ```no_run
//! # fn main() -> Result<(), noetic_otel::OtelError> {
//! // Installs the global subscriber; spans are flushed when the guard drops.
//! let _otel = noetic_otel::init()?;
//! # Ok(()) }
//! ```

use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};

/// The OTLP exporter type ([`exporter_from_env`], [`exporter_to`]).
pub use opentelemetry_otlp::SpanExporter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;

/// The `service.name` when neither `OTEL_SERVICE_NAME` nor `OTEL_RESOURCE_ATTRIBUTES` names one.
pub const DEFAULT_SERVICE_NAME: &str = "noetic";
/// How long [`OtelGuard::shutdown`] (and its drop) waits for the last spans to be exported.
pub const DEFAULT_FLUSH_TIMEOUT: Duration = Duration::from_secs(3);
/// The instrumentation scope of noetic's spans.
const SCOPE: &str = "noetic";
/// The protocols this build exports, for [`OtelError::UnsupportedProtocol`]'s message.
#[cfg(feature = "grpc")]
const SUPPORTED: &str = "`http/protobuf` and `grpc`";
#[cfg(not(feature = "grpc"))]
const SUPPORTED: &str = "`http/protobuf` (`grpc` needs noetic-otel's `grpc` feature)";

/// Why export could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OtelError {
    /// `OTEL_EXPORTER_OTLP_PROTOCOL` names a protocol this build does not speak
    /// (`OTEL_PROTOCOL_UNSUPPORTED`).
    #[error("OTEL_EXPORTER_OTLP_PROTOCOL=`{0}` is not supported: this build exports {SUPPORTED}")]
    UnsupportedProtocol(String),
    /// The exporter could not be built (`OTEL_EXPORTER_FAILED`).
    #[error("the OTLP exporter could not be built: {0}")]
    Exporter(String),
    /// A global `tracing` subscriber is already installed (`OTEL_SUBSCRIBER_SET`): compose
    /// [`layer`] into it instead.
    #[error("a global tracing subscriber is already set; add noetic_otel::layer() to it instead")]
    SubscriberSet,
    /// The last spans could not be flushed (`OTEL_FLUSH_FAILED`): the collector is unreachable or
    /// too slow.
    #[error("flushing spans failed: {0}")]
    Flush(String),
}

impl OtelError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            OtelError::UnsupportedProtocol(_) => "OTEL_PROTOCOL_UNSUPPORTED",
            OtelError::Exporter(_) => "OTEL_EXPORTER_FAILED",
            OtelError::SubscriberSet => "OTEL_SUBSCRIBER_SET",
            OtelError::Flush(_) => "OTEL_FLUSH_FAILED",
        }
    }
}

/// Whether the environment asks for export: `OTEL_EXPORTER_OTLP_ENDPOINT` or
/// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set (and not empty). A program that exports only when
/// asked (the `noetic` CLI) checks this before [`init`].
pub fn configured() -> bool {
    [
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    ]
    .iter()
    .any(|name| std::env::var_os(name).is_some_and(|value| !value.is_empty()))
}

/// Keeps the exporter alive; dropping it (or [`OtelGuard::shutdown`]) exports what is left, waiting
/// at most [`DEFAULT_FLUSH_TIMEOUT`].
#[must_use = "dropping the guard shuts the exporter down"]
pub struct OtelGuard {
    provider: Option<SdkTracerProvider>,
    timeout: Duration,
}

impl std::fmt::Debug for OtelGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OtelGuard")
            .field("active", &self.provider.is_some())
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl OtelGuard {
    fn new(provider: SdkTracerProvider) -> Self {
        OtelGuard {
            provider: Some(provider),
            timeout: DEFAULT_FLUSH_TIMEOUT,
        }
    }

    /// Waits at most `timeout` for the last spans at shutdown (default [`DEFAULT_FLUSH_TIMEOUT`]).
    pub fn flush_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Exports the spans ended so far, now.
    ///
    /// # Errors
    /// [`OtelError::Flush`] when the exporter failed.
    pub fn flush(&self) -> Result<(), OtelError> {
        match &self.provider {
            Some(provider) => provider
                .force_flush()
                .map_err(|error| OtelError::Flush(error.to_string())),
            None => Ok(()),
        }
    }

    /// Exports what is left and stops the exporter, waiting at most the flush timeout.
    ///
    /// # Errors
    /// [`OtelError::Flush`] when the last spans could not be exported in time.
    pub fn shutdown(mut self) -> Result<(), OtelError> {
        self.shutdown_now()
    }

    fn shutdown_now(&mut self) -> Result<(), OtelError> {
        match self.provider.take() {
            Some(provider) => provider
                .shutdown_with_timeout(self.timeout)
                .map_err(|error| OtelError::Flush(error.to_string())),
            None => Ok(()),
        }
    }
}

impl Drop for OtelGuard {
    fn drop(&mut self) {
        let _ = self.shutdown_now();
    }
}

/// The resource of the exported spans: the SDK's own attributes, `OTEL_RESOURCE_ATTRIBUTES`,
/// `OTEL_SERVICE_NAME`, and `service.name = noetic` when neither names a service.
pub fn resource() -> Resource {
    let named = std::env::var_os("OTEL_SERVICE_NAME").is_some_and(|name| !name.is_empty())
        || std::env::var("OTEL_RESOURCE_ATTRIBUTES").is_ok_and(|attributes| {
            attributes
                .split(',')
                .any(|pair| pair.trim_start().starts_with("service.name="))
        });
    let builder = Resource::builder();
    if named {
        builder.build()
    } else {
        builder.with_service_name(DEFAULT_SERVICE_NAME).build()
    }
}

/// The OTLP exporter the environment describes: OTLP/HTTP, or OTLP/gRPC when
/// `OTEL_EXPORTER_OTLP_PROTOCOL=grpc` (with the `grpc` feature).
///
/// # Errors
/// [`OtelError::UnsupportedProtocol`] for a protocol this build does not export;
/// [`OtelError::Exporter`] when it cannot be built.
pub fn exporter_from_env() -> Result<SpanExporter, OtelError> {
    let protocol = std::env::var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        .or_else(|_| std::env::var("OTEL_EXPORTER_OTLP_PROTOCOL"))
        .unwrap_or_default();
    // Endpoint, headers and timeout are read from the environment by the builders.
    match protocol.trim() {
        "" | "http/protobuf" => http_exporter(None),
        #[cfg(feature = "grpc")]
        "grpc" => grpc::exporter(None),
        other => Err(OtelError::UnsupportedProtocol(other.to_owned())),
    }
}

/// The OTLP/gRPC exporter noetic-otel builds, sending to `endpoint` (the collector's address,
/// `http://host:4317`) whatever the environment says; headers (as gRPC metadata) and timeout still
/// come from it.
///
/// # Errors
/// [`OtelError::Exporter`] when it cannot be built (a malformed endpoint, `https` without TLS).
#[cfg(feature = "grpc")]
pub fn grpc_exporter_to(endpoint: &str) -> Result<SpanExporter, OtelError> {
    grpc::exporter(Some(endpoint))
}

#[cfg(feature = "grpc")]
mod grpc {
    use std::sync::OnceLock;

    use opentelemetry_otlp::WithExportConfig;

    use crate::{OtelError, SpanExporter};

    /// The runtime every gRPC exporter's channel lives on: tonic spawns the connection's worker task
    /// onto the runtime current when the channel is built. The SDK's batch processor exports from its
    /// own thread (no runtime there), and a program's own runtime may be gone by the time it flushes
    /// at exit, so the channel gets a runtime of its own, made once and kept for the process.
    fn runtime() -> Result<&'static tokio::runtime::Runtime, OtelError> {
        static RUNTIME: OnceLock<Result<tokio::runtime::Runtime, String>> = OnceLock::new();
        RUNTIME
            .get_or_init(|| {
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .thread_name("noetic-otel-grpc")
                    .enable_all()
                    .build()
                    .map_err(|error| format!("no runtime for the gRPC exporter: {error}"))
            })
            .as_ref()
            .map_err(|error| OtelError::Exporter(error.clone()))
    }

    pub(crate) fn exporter(endpoint: Option<&str>) -> Result<SpanExporter, OtelError> {
        let _entered = runtime()?.enter();
        let builder = opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_protocol(opentelemetry_otlp::Protocol::Grpc);
        let builder = match endpoint {
            Some(endpoint) => builder.with_endpoint(endpoint),
            None => builder,
        };
        builder
            .build()
            .map_err(|error| OtelError::Exporter(error.to_string()))
    }
}

/// The OTLP/HTTP (protobuf) exporter noetic-otel builds, posting to `traces_url` (the full
/// `…/v1/traces` URL) whatever the environment says; headers and timeout still come from it.
///
/// # Errors
/// [`OtelError::Exporter`] when it cannot be built.
pub fn exporter_to(traces_url: &str) -> Result<SpanExporter, OtelError> {
    http_exporter(Some(traces_url))
}

/// The OTLP/HTTP protobuf exporter, posting to `traces_url` or where the environment says.
fn http_exporter(traces_url: Option<&str>) -> Result<SpanExporter, OtelError> {
    let builder = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary);
    let builder = match traces_url {
        Some(url) => builder.with_endpoint(url),
        None => builder,
    };
    builder
        .build()
        .map_err(|error| OtelError::Exporter(error.to_string()))
}

/// A `tracing` layer exporting to `exporter` in batches (on the SDK's own thread), with
/// [`resource`]; compose it into your own subscriber.
pub fn layer_with_exporter<S>(
    exporter: impl opentelemetry_sdk::trace::SpanExporter + 'static,
) -> (
    tracing_opentelemetry::OpenTelemetryLayer<S, SdkTracer>,
    OtelGuard,
)
where
    S: tracing::Subscriber + for<'span> LookupSpan<'span>,
{
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource())
        .build();
    let tracer = provider.tracer(SCOPE);
    (
        tracing_opentelemetry::layer().with_tracer(tracer),
        OtelGuard::new(provider),
    )
}

/// A `tracing` layer exporting to the OTLP endpoint the environment names; compose it into your
/// own subscriber.
///
/// # Errors
/// As [`exporter_from_env`].
pub fn layer<S>() -> Result<
    (
        tracing_opentelemetry::OpenTelemetryLayer<S, SdkTracer>,
        OtelGuard,
    ),
    OtelError,
>
where
    S: tracing::Subscriber + for<'span> LookupSpan<'span>,
{
    Ok(layer_with_exporter(exporter_from_env()?))
}

/// Installs a global `tracing` subscriber whose only layer exports every span to the OTLP endpoint
/// the environment names.
///
/// # Errors
/// As [`exporter_from_env`]; [`OtelError::SubscriberSet`] when a global subscriber exists.
pub fn init() -> Result<OtelGuard, OtelError> {
    let (layer, guard) = layer()?;
    let subscriber = tracing_subscriber::registry().with(layer);
    tracing::subscriber::set_global_default(subscriber).map_err(|_| OtelError::SubscriberSet)?;
    Ok(guard)
}
