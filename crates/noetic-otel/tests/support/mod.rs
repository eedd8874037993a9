//! What the span tests share: running work under a subscriber that exports to the SDK's in-memory
//! exporter (and logs through a `fmt` layer), and finding spans and attributes.

// Each test binary uses a part of these.
#![allow(dead_code)]

use std::sync::Arc;

use opentelemetry_sdk::trace::{InMemorySpanExporter, SpanData};
use tracing_subscriber::layer::SubscriberExt;

/// Spans exported while `run` runs, with this thread's default subscriber exporting them.
pub(crate) async fn export<F: std::future::Future<Output = ()>>(run: F) -> Vec<SpanData> {
    export_and_log(run).await.0
}

/// A `fmt` writer into a shared buffer: the `tracing` log output of a run.
#[derive(Clone, Default)]
pub(crate) struct LogBuffer(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for LogBuffer {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log").extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// [`export`], plus everything a `fmt` layer at TRACE level (span events included) logged.
pub(crate) async fn export_and_log<F: std::future::Future<Output = ()>>(
    run: F,
) -> (Vec<SpanData>, String) {
    let exporter = InMemorySpanExporter::default();
    let (layer, guard) = noetic_otel::layer_with_exporter(exporter.clone());
    let log = LogBuffer::default();
    let writer = log.clone();
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_span_events(tracing_subscriber::fmt::format::FmtSpan::FULL);
    let subscriber = tracing_subscriber::registry().with(layer).with(fmt);
    {
        let _default = tracing::subscriber::set_default(subscriber);
        run.await;
    }
    guard.flush().expect("flush");
    let text = String::from_utf8_lossy(&log.0.lock().expect("log")).into_owned();
    (exporter.get_finished_spans().expect("spans"), text)
}

pub(crate) fn attr(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.as_str().into_owned())
}

pub(crate) fn named<'a>(spans: &'a [SpanData], name: &str) -> Vec<&'a SpanData> {
    spans.iter().filter(|span| span.name == name).collect()
}

pub(crate) fn one<'a>(spans: &'a [SpanData], name: &str) -> &'a SpanData {
    let found = named(spans, name);
    assert_eq!(found.len(), 1, "{name} in {:?}", names(spans));
    found[0]
}

pub(crate) fn names(spans: &[SpanData]) -> Vec<String> {
    spans.iter().map(|span| span.name.to_string()).collect()
}
