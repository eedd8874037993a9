//! [`MetricsLayer`]: the `tracing` layer that turns what core records into OpenTelemetry
//! instruments (see `noetic_core::telemetry`).
//!
//! - A `chat` span, when it closes: `gen_ai.client.operation.duration` (its lifetime, with
//!   `error.type` when it failed), `gen_ai.client.token.usage` (once for `input`, once for
//!   `output`, when the provider reported usage) and
//!   `gen_ai.client.inference.usage.cache_read.input_tokens` (when it reported cache reads).
//! - A turn's `invoke_agent` span (one with `noetic.turn.id`): `noetic.turns.started` when it
//!   opens, `noetic.turns.ended` when it closes.
//! - An event at `noetic::metrics`: the counter its `metric` field names, by its `increment`.
//!
//! Only core's spans count (their target is `noetic_core::…`): a span of yours named `chat` does
//! not. The layer keeps a small record in the extensions of the spans it measures and nothing for
//! the others.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use noetic_core::telemetry::{METRICS_TARGET, attr, metric};
use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Histogram, Meter};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

/// `gen_ai.client.token.usage`.
pub const TOKEN_USAGE: &str = "gen_ai.client.token.usage";
/// `gen_ai.client.operation.duration`.
pub const OPERATION_DURATION: &str = "gen_ai.client.operation.duration";
/// `gen_ai.client.inference.usage.cache_read.input_tokens`: input tokens served from the
/// provider's cache, a part of `gen_ai.client.token.usage`'s `input`.
pub const CACHE_READ_INPUT_TOKENS: &str = "gen_ai.client.inference.usage.cache_read.input_tokens";
/// `gen_ai.token.type`: `input` or `output`.
pub const TOKEN_TYPE: &str = "gen_ai.token.type";

/// The conventions' bucket boundaries for `gen_ai.client.token.usage` (powers of 4).
const TOKEN_BOUNDARIES: [f64; 14] = [
    1.0,
    4.0,
    16.0,
    64.0,
    256.0,
    1024.0,
    4096.0,
    16384.0,
    65536.0,
    262_144.0,
    1_048_576.0,
    4_194_304.0,
    16_777_216.0,
    67_108_864.0,
];
/// The conventions' bucket boundaries for `gen_ai.client.operation.duration`, in seconds.
const DURATION_BOUNDARIES: [f64; 14] = [
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
];

/// noetic's counters: name, unit, description.
const COUNTERS: [(&str, &str, &str); 6] = [
    (metric::TURNS_STARTED, "{turn}", "Session turns started."),
    (
        metric::TURNS_ENDED,
        "{turn}",
        "Session turns ended, by outcome.",
    ),
    (
        metric::STEERS_APPLIED,
        "{message}",
        "Steering messages that joined a running turn.",
    ),
    (
        metric::APPROVALS_REQUESTED,
        "{call}",
        "Tool calls that waited for a person's approval.",
    ),
    (
        metric::DRAINS,
        "{drain}",
        "Graceful drains ended, by reason.",
    ),
    (
        metric::PAID_CALLS_LEFT_PENDING,
        "{call}",
        "Model calls whose round ended unpriced: their paid-call record stays pending.",
    ),
];

/// A `tracing` layer recording noetic's metrics with a [`Meter`]: compose it next to the span
/// layer (see [`crate::metrics_layer`]), or give it a meter of your own provider.
#[derive(Clone)]
pub struct MetricsLayer {
    instruments: Arc<Instruments>,
}

impl std::fmt::Debug for MetricsLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsLayer").finish_non_exhaustive()
    }
}

struct Instruments {
    token_usage: Histogram<u64>,
    duration: Histogram<f64>,
    cache_read: Counter<u64>,
    /// noetic's counters, by name ([`COUNTERS`]; one an event names that is not there is made
    /// when first counted).
    counters: Mutex<HashMap<String, Counter<u64>>>,
    meter: Meter,
}

impl MetricsLayer {
    /// A layer recording with `meter`'s instruments.
    pub fn new(meter: Meter) -> MetricsLayer {
        let token_usage = meter
            .u64_histogram(TOKEN_USAGE)
            .with_unit("{token}")
            .with_description("Number of input and output tokens used.")
            .with_boundaries(TOKEN_BOUNDARIES.to_vec())
            .build();
        let duration = meter
            .f64_histogram(OPERATION_DURATION)
            .with_unit("s")
            .with_description("GenAI operation duration.")
            .with_boundaries(DURATION_BOUNDARIES.to_vec())
            .build();
        let cache_read = meter
            .u64_counter(CACHE_READ_INPUT_TOKENS)
            .with_unit("{token}")
            .with_description("The number of input tokens served from a provider-managed cache.")
            .build();
        let counters = COUNTERS
            .iter()
            .map(|(name, unit, description)| {
                let counter = meter
                    .u64_counter(*name)
                    .with_unit(*unit)
                    .with_description(*description)
                    .build();
                ((*name).to_owned(), counter)
            })
            .collect();
        MetricsLayer {
            instruments: Arc::new(Instruments {
                token_usage,
                duration,
                cache_read,
                counters: Mutex::new(counters),
                meter,
            }),
        }
    }
}

impl Instruments {
    fn count(&self, name: &str, increment: u64, attributes: &[KeyValue]) {
        let mut counters = self
            .counters
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let counter = counters
            .entry(name.to_owned())
            .or_insert_with(|| self.meter.u64_counter(name.to_owned()).build());
        counter.add(increment, attributes);
    }

    fn round_ended(&self, round: &Fields, seconds: f64) {
        let mut attributes = vec![KeyValue::new(attr::OPERATION_NAME, "chat")];
        for (key, value) in [
            (attr::PROVIDER_NAME, &round.provider),
            (attr::REQUEST_MODEL, &round.request_model),
            (attr::RESPONSE_MODEL, &round.response_model),
        ] {
            if let Some(value) = value {
                attributes.push(KeyValue::new(key, value.clone()));
            }
        }
        if let Some(input) = round.input_tokens {
            let mut input_attributes = attributes.clone();
            input_attributes.push(KeyValue::new(TOKEN_TYPE, "input"));
            self.token_usage.record(input, &input_attributes);
        }
        if let Some(output) = round.output_tokens {
            let mut output_attributes = attributes.clone();
            output_attributes.push(KeyValue::new(TOKEN_TYPE, "output"));
            self.token_usage.record(output, &output_attributes);
        }
        if let Some(cached) = round.cached_tokens {
            self.cache_read.add(cached, &attributes);
        }
        if let Some(error) = &round.error_type {
            attributes.push(KeyValue::new(attr::ERROR_TYPE, error.clone()));
        }
        self.duration.record(seconds, &attributes);
    }

    fn turn_ended(&self, turn: &Fields) {
        let mut attributes = turn.agent_attribute();
        let outcome = match turn.error_type.as_deref() {
            None => "completed",
            Some("CANCELLED") => "cancelled",
            Some(_) => "failed",
        };
        attributes.push(KeyValue::new(metric::TURN_OUTCOME, outcome));
        if let Some(error) = &turn.error_type {
            attributes.push(KeyValue::new(attr::ERROR_TYPE, error.clone()));
        }
        self.count(metric::TURNS_ENDED, 1, &attributes);
    }
}

/// What the layer keeps in the extensions of a span it measures.
struct Measured {
    kind: Kind,
    started: Instant,
    fields: Fields,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Round,
    Turn,
}

/// The fields of a measured span that its metrics use, as recorded so far.
#[derive(Default)]
struct Fields {
    provider: Option<String>,
    request_model: Option<String>,
    response_model: Option<String>,
    agent: Option<String>,
    turn_id: bool,
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cached_tokens: Option<u64>,
    error_type: Option<String>,
}

impl Fields {
    fn agent_attribute(&self) -> Vec<KeyValue> {
        self.agent
            .iter()
            .map(|agent| KeyValue::new(attr::AGENT_NAME, agent.clone()))
            .collect()
    }

    fn count(&mut self, field: &Field, value: u64) {
        match field.name() {
            attr::INPUT_TOKENS => self.input_tokens = Some(value),
            attr::OUTPUT_TOKENS => self.output_tokens = Some(value),
            attr::CACHE_READ_INPUT_TOKENS => self.cached_tokens = Some(value),
            _ => {}
        }
    }
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        let slot = match field.name() {
            attr::PROVIDER_NAME => &mut self.provider,
            attr::REQUEST_MODEL => &mut self.request_model,
            attr::RESPONSE_MODEL => &mut self.response_model,
            attr::AGENT_NAME => &mut self.agent,
            attr::ERROR_TYPE => &mut self.error_type,
            attr::TURN_ID => {
                self.turn_id = true;
                return;
            }
            _ => return,
        };
        *slot = Some(value.to_owned());
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        if let Ok(value) = u64::try_from(value) {
            self.count(field, value);
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.count(field, value);
    }

    fn record_debug(&mut self, _field: &Field, _value: &dyn std::fmt::Debug) {}
}

/// The fields of a counter event: its counter, increment and attributes.
struct CounterEvent {
    name: Option<String>,
    increment: u64,
    attributes: Vec<KeyValue>,
}

impl Visit for CounterEvent {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            metric::NAME => self.name = Some(value.to_owned()),
            name => self
                .attributes
                .push(KeyValue::new(name.to_owned(), value.to_owned())),
        }
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        match field.name() {
            metric::INCREMENT => self.increment = u64::try_from(value).unwrap_or(0),
            name => self.attributes.push(KeyValue::new(name.to_owned(), value)),
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        match field.name() {
            metric::INCREMENT => self.increment = value,
            name => self.attributes.push(KeyValue::new(
                name.to_owned(),
                i64::try_from(value).unwrap_or(i64::MAX),
            )),
        }
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.attributes
            .push(KeyValue::new(field.name().to_owned(), value));
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.attributes
            .push(KeyValue::new(field.name().to_owned(), value));
    }

    /// The message and anything else without a plain value are not attributes.
    fn record_debug(&mut self, _field: &Field, _value: &dyn std::fmt::Debug) {}
}

/// Whether `metadata` is one of core's spans (not a user's span of the same name).
fn from_core(metadata: &tracing::Metadata<'_>) -> bool {
    metadata.target().starts_with("noetic_core")
}

impl<S> tracing_subscriber::Layer<S> for MetricsLayer
where
    S: Subscriber + for<'span> LookupSpan<'span>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let metadata = attrs.metadata();
        let kind = match metadata.name() {
            "chat" if from_core(metadata) => Kind::Round,
            "invoke_agent" if from_core(metadata) => Kind::Turn,
            _ => return,
        };
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        if kind == Kind::Turn {
            // A root run's span is not a turn.
            if !fields.turn_id {
                return;
            }
            self.instruments
                .count(metric::TURNS_STARTED, 1, &fields.agent_attribute());
        }
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(Measured {
                kind,
                started: Instant::now(),
                fields,
            });
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id)
            && let Some(measured) = span.extensions_mut().get_mut::<Measured>()
        {
            values.record(&mut measured.fields);
        }
    }

    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        if event.metadata().target() != METRICS_TARGET {
            return;
        }
        let mut counter = CounterEvent {
            name: None,
            increment: 1,
            attributes: Vec::new(),
        };
        event.record(&mut counter);
        if let Some(name) = &counter.name {
            self.instruments
                .count(name, counter.increment, &counter.attributes);
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(&id) else {
            return;
        };
        let Some(measured) = span.extensions_mut().remove::<Measured>() else {
            return;
        };
        match measured.kind {
            Kind::Round => self
                .instruments
                .round_ended(&measured.fields, measured.started.elapsed().as_secs_f64()),
            Kind::Turn => self.instruments.turn_ended(&measured.fields),
        }
    }
}
