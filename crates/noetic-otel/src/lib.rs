//! # noetic-otel
//!
//! OpenTelemetry export of the spans `noetic-core` emits through `tracing` (named after the GenAI
//! semantic conventions: see `noetic_core::telemetry`), and of the metrics read from them. Core has
//! no OpenTelemetry dependency; this crate bridges its `tracing` spans with `tracing-opentelemetry`
//! and exports them over OTLP/HTTP (protobuf) with the SDK's batch processor, on its own thread,
//! through reqwest 0.13 (the workspace's one HTTP stack). Its [`MetricsLayer`] turns core's
//! measurements (spans closing, counter events) into OpenTelemetry instruments, exported next to
//! the spans by the SDK's periodic reader (its own thread too): `gen_ai.client.token.usage`,
//! `gen_ai.client.operation.duration`, and noetic's counters (see [`metrics`]). With the `grpc` feature it also exports over OTLP/gRPC (tonic, on the
//! same hyper); the gRPC connection lives on a small runtime of this crate's own (one worker thread,
//! started with the first gRPC exporter), so export works from any thread and outlives the caller's
//! runtime — a program can shut its own runtime down and still flush.
//!
//! Configuration comes from the standard environment variables:
//!
//! - `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (the full URL, `…/v1/traces`),
//!   `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT` (`…/v1/metrics`) or `OTEL_EXPORTER_OTLP_ENDPOINT` (the
//!   base; `/v1/traces` and `/v1/metrics` are appended); default `http://localhost:4318` (for gRPC:
//!   the collector's address, default `http://localhost:4317`);
//! - `OTEL_EXPORTER_OTLP_PROTOCOL` (or `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL` /
//!   `OTEL_EXPORTER_OTLP_METRICS_PROTOCOL`): `http/protobuf` (the default) or, with the `grpc`
//!   feature, `grpc`; anything else (`http/json`, or `grpc` in a build without the feature) is
//!   refused with [`OtelError::UnsupportedProtocol`];
//! - `OTEL_EXPORTER_OTLP_HEADERS` / `OTEL_EXPORTER_OTLP_TRACES_HEADERS` /
//!   `OTEL_EXPORTER_OTLP_METRICS_HEADERS` (`key=value,…`: an `authorization` header, say; never
//!   logged);
//! - `OTEL_EXPORTER_OTLP_TIMEOUT` (ms, default 10000);
//! - `OTEL_METRICS_EXPORTER`: `otlp` (the default) or `none` (spans only, for a backend that takes
//!   no metrics, such as Jaeger); anything else is refused with [`OtelError::UnsupportedExporter`];
//!   `OTEL_METRIC_EXPORT_INTERVAL` (ms, default 60000) between metric exports;
//! - `OTEL_SERVICE_NAME` (default `noetic`) and `OTEL_RESOURCE_ATTRIBUTES`.
//!
//! ```no_run
//! # fn main() -> Result<(), noetic_otel::OtelError> {
//! // Installs the global subscriber; spans and metrics are flushed when the guard drops.
//! let _otel = noetic_otel::init()?;
//! # Ok(()) }
//! ```

pub mod metrics;

use std::time::{Duration, Instant};

use opentelemetry::metrics::MeterProvider as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;

pub use metrics::MetricsLayer;
/// The OTLP metric exporter type ([`metric_exporter_from_env`], [`metric_exporter_to`]).
pub use opentelemetry_otlp::MetricExporter;
/// The OTLP span exporter type ([`exporter_from_env`], [`exporter_to`]).
pub use opentelemetry_otlp::SpanExporter;

/// The `service.name` when neither `OTEL_SERVICE_NAME` nor `OTEL_RESOURCE_ATTRIBUTES` names one.
pub const DEFAULT_SERVICE_NAME: &str = "noetic";
/// How long [`OtelGuard::shutdown`] (and its drop) waits for the last spans and metrics to be
/// exported.
pub const DEFAULT_FLUSH_TIMEOUT: Duration = Duration::from_secs(3);
/// The instrumentation scope of noetic's spans and metrics.
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
    /// `OTEL_METRICS_EXPORTER` names an exporter other than `otlp` or `none`
    /// (`OTEL_EXPORTER_UNSUPPORTED`).
    #[error("OTEL_METRICS_EXPORTER=`{0}` is not supported: `otlp` (the default) or `none`")]
    UnsupportedExporter(String),
    /// The exporter could not be built (`OTEL_EXPORTER_FAILED`).
    #[error("the OTLP exporter could not be built: {0}")]
    Exporter(String),
    /// A global `tracing` subscriber is already installed (`OTEL_SUBSCRIBER_SET`): compose
    /// [`layer`] into it instead.
    #[error("a global tracing subscriber is already set; add noetic_otel::layer() to it instead")]
    SubscriberSet,
    /// The last spans or metrics could not be flushed (`OTEL_FLUSH_FAILED`): the collector is
    /// unreachable or too slow (or, for metrics, takes none: set `OTEL_METRICS_EXPORTER=none`).
    #[error("flushing {0}")]
    Flush(String),
}

impl OtelError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            OtelError::UnsupportedProtocol(_) => "OTEL_PROTOCOL_UNSUPPORTED",
            OtelError::UnsupportedExporter(_) => "OTEL_EXPORTER_UNSUPPORTED",
            OtelError::Exporter(_) => "OTEL_EXPORTER_FAILED",
            OtelError::SubscriberSet => "OTEL_SUBSCRIBER_SET",
            OtelError::Flush(_) => "OTEL_FLUSH_FAILED",
        }
    }
}

/// Whether the environment asks for export: `OTEL_EXPORTER_OTLP_ENDPOINT`,
/// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT` is set (and not
/// empty). A program that exports only when asked (the `noetic` CLI) checks this before [`init`].
pub fn configured() -> bool {
    [
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    ]
    .iter()
    .any(|name| std::env::var_os(name).is_some_and(|value| !value.is_empty()))
}

/// Keeps the exporters alive; dropping it (or [`OtelGuard::shutdown`]) exports what is left, waiting
/// at most [`DEFAULT_FLUSH_TIMEOUT`].
#[must_use = "dropping the guard shuts the exporter down"]
pub struct OtelGuard {
    tracer: Option<SdkTracerProvider>,
    meter: Option<SdkMeterProvider>,
    timeout: Duration,
}

impl std::fmt::Debug for OtelGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OtelGuard")
            .field("active", &(self.tracer.is_some() || self.meter.is_some()))
            .field("spans", &self.tracer.is_some())
            .field("metrics", &self.meter.is_some())
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl OtelGuard {
    fn new(tracer: Option<SdkTracerProvider>, meter: Option<SdkMeterProvider>) -> Self {
        OtelGuard {
            tracer,
            meter,
            timeout: DEFAULT_FLUSH_TIMEOUT,
        }
    }

    /// One guard for both: `self`'s exporters and `other`'s (the longer flush timeout).
    pub fn join(mut self, mut other: OtelGuard) -> OtelGuard {
        OtelGuard {
            tracer: self.tracer.take().or_else(|| other.tracer.take()),
            meter: self.meter.take().or_else(|| other.meter.take()),
            timeout: self.timeout.max(other.timeout),
        }
    }

    /// Waits at most `timeout` for the last spans and metrics at shutdown (default
    /// [`DEFAULT_FLUSH_TIMEOUT`]).
    pub fn flush_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Exports the spans ended and the metrics recorded so far, now.
    ///
    /// # Errors
    /// [`OtelError::Flush`] when an exporter failed.
    pub fn flush(&self) -> Result<(), OtelError> {
        let spans = match &self.tracer {
            Some(tracer) => tracer
                .force_flush()
                .map_err(|error| OtelError::Flush(format!("spans failed: {error}"))),
            None => Ok(()),
        };
        let metrics = match &self.meter {
            Some(meter) => meter
                .force_flush()
                .map_err(|error| OtelError::Flush(format!("metrics failed: {error}"))),
            None => Ok(()),
        };
        spans.and(metrics)
    }

    /// Exports what is left and stops the exporters, waiting at most the flush timeout.
    ///
    /// # Errors
    /// [`OtelError::Flush`] when the last spans or metrics could not be exported in time.
    pub fn shutdown(mut self) -> Result<(), OtelError> {
        self.shutdown_now()
    }

    fn shutdown_now(&mut self) -> Result<(), OtelError> {
        let deadline = Instant::now() + self.timeout;
        // The meter provider's shutdown takes no timeout (the SDK waits up to 5 s for its reader):
        // it runs on a thread of its own while the spans are flushed here, and is waited for until
        // the deadline only. Past it the thread is left to end by itself.
        let metrics = self.meter.take().map(|meter| {
            let (sender, receiver) = std::sync::mpsc::channel();
            let spawned = std::thread::Builder::new()
                .name("noetic-otel-flush".to_owned())
                .spawn(move || {
                    let _ = sender.send(meter.shutdown());
                });
            spawned.map(|_| receiver)
        });
        let spans = match self.tracer.take() {
            Some(tracer) => tracer
                .shutdown_with_timeout(self.timeout)
                .map_err(|error| OtelError::Flush(format!("spans failed: {error}"))),
            None => Ok(()),
        };
        let metrics = match metrics {
            None => Ok(()),
            Some(Err(error)) => Err(OtelError::Flush(format!(
                "metrics failed: no thread to flush on: {error}"
            ))),
            Some(Ok(receiver)) => {
                match receiver.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                    Ok(result) => {
                        result.map_err(|error| OtelError::Flush(format!("metrics failed: {error}")))
                    }
                    Err(_) => Err(OtelError::Flush(format!(
                        "metrics failed: not exported within {:?}",
                        self.timeout
                    ))),
                }
            }
        };
        spans.and(metrics)
    }
}

impl Drop for OtelGuard {
    fn drop(&mut self) {
        let _ = self.shutdown_now();
    }
}

/// The resource of the exported spans and metrics: the SDK's own attributes, `OTEL_RESOURCE_ATTRIBUTES`,
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
    span_exporter(None)
}

/// The span exporter of the environment's protocol, sending to `base` (a collector's base URL)
/// when given, else where the environment says.
fn span_exporter(base: Option<&str>) -> Result<SpanExporter, OtelError> {
    let protocol = std::env::var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        .or_else(|_| std::env::var("OTEL_EXPORTER_OTLP_PROTOCOL"))
        .unwrap_or_default();
    // Endpoint, headers and timeout are read from the environment by the builders.
    match protocol.trim() {
        "" | "http/protobuf" => {
            http_exporter(base.map(|base| signal_url(base, "traces")).as_deref())
        }
        #[cfg(feature = "grpc")]
        "grpc" => grpc::exporter(base),
        other => Err(OtelError::UnsupportedProtocol(other.to_owned())),
    }
}

/// The OTLP/HTTP URL of `signal` (`traces`, `metrics`) at the collector's base URL.
fn signal_url(base: &str, signal: &str) -> String {
    format!("{}/v1/{signal}", base.trim_end_matches('/'))
}

/// The OTLP metric exporter the environment describes, as [`exporter_from_env`] (with the
/// `…_METRICS_…` variables in place of the `…_TRACES_…` ones).
///
/// # Errors
/// As [`exporter_from_env`].
pub fn metric_exporter_from_env() -> Result<MetricExporter, OtelError> {
    metric_exporter(None)
}

/// The metric exporter of the environment's protocol, sending to `base` when given.
fn metric_exporter(base: Option<&str>) -> Result<MetricExporter, OtelError> {
    let protocol = std::env::var("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL")
        .or_else(|_| std::env::var("OTEL_EXPORTER_OTLP_PROTOCOL"))
        .unwrap_or_default();
    match protocol.trim() {
        "" | "http/protobuf" => {
            http_metric_exporter(base.map(|base| signal_url(base, "metrics")).as_deref())
        }
        #[cfg(feature = "grpc")]
        "grpc" => grpc::metric_exporter(base),
        other => Err(OtelError::UnsupportedProtocol(other.to_owned())),
    }
}

/// Whether the environment wants metrics: `OTEL_METRICS_EXPORTER` is unset, `otlp` or `none`.
///
/// # Errors
/// [`OtelError::UnsupportedExporter`] for another value.
fn metrics_wanted() -> Result<bool, OtelError> {
    let exporter = std::env::var("OTEL_METRICS_EXPORTER").unwrap_or_default();
    match exporter.trim() {
        "" | "otlp" => Ok(true),
        "none" => Ok(false),
        other => Err(OtelError::UnsupportedExporter(other.to_owned())),
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

/// The OTLP/gRPC metric exporter noetic-otel builds, sending to `endpoint` (the collector's
/// address) whatever the environment says; headers and timeout still come from it.
///
/// # Errors
/// [`OtelError::Exporter`] when it cannot be built.
#[cfg(feature = "grpc")]
pub fn grpc_metric_exporter_to(endpoint: &str) -> Result<MetricExporter, OtelError> {
    grpc::metric_exporter(Some(endpoint))
}

#[cfg(feature = "grpc")]
mod grpc {
    use std::sync::OnceLock;

    use opentelemetry_otlp::WithExportConfig;

    use crate::{MetricExporter, OtelError, SpanExporter};

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

    pub(crate) fn metric_exporter(endpoint: Option<&str>) -> Result<MetricExporter, OtelError> {
        let _entered = runtime()?.enter();
        let builder = opentelemetry_otlp::MetricExporter::builder()
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

/// The OTLP/HTTP (protobuf) metric exporter noetic-otel builds, posting to `metrics_url` (the full
/// `…/v1/metrics` URL) whatever the environment says; headers and timeout still come from it.
///
/// # Errors
/// [`OtelError::Exporter`] when it cannot be built.
pub fn metric_exporter_to(metrics_url: &str) -> Result<MetricExporter, OtelError> {
    http_metric_exporter(Some(metrics_url))
}

/// The OTLP/HTTP protobuf metric exporter, posting to `metrics_url` or where the environment says.
fn http_metric_exporter(metrics_url: Option<&str>) -> Result<MetricExporter, OtelError> {
    let builder = opentelemetry_otlp::MetricExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary);
    let builder = match metrics_url {
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
        OtelGuard::new(Some(provider), None),
    )
}

/// A [`MetricsLayer`] whose measurements `exporter` exports periodically (every
/// `OTEL_METRIC_EXPORT_INTERVAL` ms, default 60000, and at flush and shutdown; on the SDK's own
/// thread), with [`resource`]; compose it into your own subscriber next to the span layer.
pub fn metrics_layer_with_exporter(
    exporter: impl opentelemetry_sdk::metrics::exporter::PushMetricExporter,
) -> (MetricsLayer, OtelGuard) {
    let provider = SdkMeterProvider::builder()
        .with_periodic_exporter(exporter)
        .with_resource(resource())
        .build();
    let layer = MetricsLayer::new(provider.meter(SCOPE));
    (layer, OtelGuard::new(None, Some(provider)))
}

/// A [`MetricsLayer`] exporting to the OTLP endpoint the environment names.
///
/// # Errors
/// As [`metric_exporter_from_env`].
pub fn metrics_layer() -> Result<(MetricsLayer, OtelGuard), OtelError> {
    Ok(metrics_layer_with_exporter(metric_exporter_from_env()?))
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

/// Installs a global `tracing` subscriber exporting every span, and the metrics (unless
/// `OTEL_METRICS_EXPORTER=none`), to the OTLP endpoint the environment names.
///
/// # Errors
/// As [`exporter_from_env`] and [`metric_exporter_from_env`];
/// [`OtelError::UnsupportedExporter`] for an `OTEL_METRICS_EXPORTER` other than `otlp` or `none`;
/// [`OtelError::SubscriberSet`] when a global subscriber exists.
pub fn init() -> Result<OtelGuard, OtelError> {
    install(None)
}

/// As [`init`], exporting to the collector at `endpoint` (its base URL, as
/// `OTEL_EXPORTER_OTLP_ENDPOINT` would give it: `/v1/traces` and `/v1/metrics` are appended over
/// HTTP; over gRPC it is the collector's address) whatever endpoints the environment names;
/// protocol, headers and timeout still come from the environment.
///
/// # Errors
/// As [`init`].
pub fn init_with_endpoint(endpoint: &str) -> Result<OtelGuard, OtelError> {
    install(Some(endpoint))
}

fn install(endpoint: Option<&str>) -> Result<OtelGuard, OtelError> {
    let metrics = if metrics_wanted()? {
        Some(metrics_layer_with_exporter(metric_exporter(endpoint)?))
    } else {
        None
    };
    let (layer, guard) = layer_with_exporter(span_exporter(endpoint)?);
    let (metrics, guard) = match metrics {
        Some((metrics, metrics_guard)) => (Some(metrics), guard.join(metrics_guard)),
        None => (None, guard),
    };
    let subscriber = tracing_subscriber::registry().with(layer).with(metrics);
    tracing::subscriber::set_global_default(subscriber).map_err(|_| OtelError::SubscriberSet)?;
    Ok(guard)
}
