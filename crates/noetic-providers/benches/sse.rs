//! SSE decoding throughput over the largest recorded stream
//! (`fixtures/openresponses/openai-responses.reasoning-summary-long.o3-mini.sse`, about 500 KB), printed
//! next to the DESIGN.md §16 target (SSE decoding ≥ 300 MB/s on one core).
//!
//! Rows:
//! - `SseDecoder` alone, fed in network-sized chunks (16 KiB, 4 KiB) and in 7-byte chunks (the worst
//!   case: nearly every line is split across chunks);
//! - `SseDecoder` plus `serde_json::from_str::<serde_json::Value>` of every event's data. The provider's
//!   own parser (`responses::wire::parse_event`) is crate-private and not reachable from a bench, so
//!   this row stands in for "decode + parse" and is labelled as such;
//! - the real provider path: `OpenResponses` streaming the same fixture from an in-process mock server
//!   over loopback HTTP (SSE + `parse_event` + reqwest/hyper). Its client runs on a current-thread
//!   runtime on this thread, the server on another thread, so this thread's CPU time is the client's;
//! - the same for `Anthropic` on a long Messages stream made of a real capture (its deltas repeated,
//!   about 500 KB), with its ratio to the OpenResponses row (target: within 20 %).
//!
//! Throughput is bytes of SSE per second of this thread's CPU time (`/proc/thread-self/schedstat`, ns;
//! wall time where that file is missing), so other load on the machine does not skew it; MB = 10^6
//! bytes. Each case runs about 1 s, split into 5 slices; the table shows the median slice and the
//! wall-clock throughput for comparison.
//!
//! Run with `cargo xtask bench` (all benches), `cargo bench -p noetic-providers --bench sse`, or
//! `cargo xtask bench -- sse` (benches whose name does not contain a filter argument skip themselves).

use std::hint::black_box;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use noetic_core::item::Item;
use noetic_core::model::{ModelParams, ModelRequest};
use noetic_core::{ModelProvider, ResponseEvent};
use noetic_providers::{Anthropic, OpenResponses, RetryConfig, SseDecoder};
use noetic_test_support::{MockReply, MockServer};

const FIXTURE: &str = "openai-responses.reasoning-summary-long.o3-mini.sse";
/// The Anthropic capture the long Anthropic stream is made of.
const ANTHROPIC_FIXTURE: &str = "anthropic.thinking-text.claude-haiku-4.5.sse";
/// How many times each of its deltas repeats (about 500 KB in all).
const ANTHROPIC_REPEAT: usize = 60;
/// Measured time per case, split into `SLICES` slices.
const CASE_TIME: Duration = Duration::from_millis(1000);
const SLICES: usize = 5;
const TARGET: &str = "≥ 300 MB/s on one core";

fn main() {
    if !selected("sse") {
        return;
    }
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/openresponses")
        .join(FIXTURE);
    let input = std::fs::read(&path)
        .unwrap_or_else(|error| panic!("cannot read {}: {error}", path.display()));
    let events = decode(&input, input.len(), |_| {});
    println!();
    println!(
        "SSE decoding: {FIXTURE} ({} bytes, {events} events); MB/s = 10^6 bytes per second of CPU",
        input.len()
    );
    println!();
    println!(
        "| case                                                        | MB/s (CPU) | MB/s (wall) | target (DESIGN.md §16) |"
    );
    println!(
        "|-------------------------------------------------------------|-----------:|------------:|------------------------|"
    );

    for chunk in [16 * 1024, 4 * 1024, 7] {
        let rate = throughput(input.len(), || {
            black_box(decode(&input, chunk, |event| {
                black_box(event);
            }));
        });
        row(
            &format!("SseDecoder, {} chunks", chunk_label(chunk)),
            &rate,
            &verdict(rate.cpu),
        );
    }

    for chunk in [16 * 1024, 4 * 1024] {
        let rate = throughput(input.len(), || {
            black_box(decode(&input, chunk, |event| {
                if event.data != "[DONE]" {
                    let value: serde_json::Value =
                        serde_json::from_str(&event.data).expect("fixture events are JSON");
                    black_box(value);
                }
            }));
        });
        row(
            &format!(
                "SseDecoder + serde_json::Value parse, {} chunks",
                chunk_label(chunk)
            ),
            &rate,
            "none (target is decoding)",
        );
    }

    // `parse_event` turns every SSE event into one framework event, except a `[DONE]` terminator.
    let mut expected = 0;
    decode(&input, input.len(), |event| {
        expected += usize::from(event.data != "[DONE]");
    });
    let responses = provider_throughput(
        &input,
        |base_url| {
            // A key, as every real provider has: both rows pay for redacting it from the events.
            OpenResponses::builder(base_url)
                .name("bench")
                .api_key("bench-key")
                .retry(RetryConfig::none())
                .build()
                .expect("provider")
        },
        Some(expected),
    );
    row(
        "OpenResponses over loopback HTTP (parse_event), 16 KiB",
        &responses,
        "none (HTTP + parse)",
    );
    let long = long_anthropic_stream();
    let anthropic = provider_throughput(
        &long,
        |base_url| {
            Anthropic::builder("bench-key")
                .base_url(base_url)
                .retry(RetryConfig::none())
                .build()
                .expect("provider")
        },
        None,
    );
    let ratio = anthropic.cpu / responses.cpu;
    // Its events are smaller (a delta each), so per event the ratio differs: both are printed.
    let long_events = decode(&long, long.len(), |_| {});
    let per_event =
        |rate: &Rate, bytes: usize, events: usize| rate.cpu * events as f64 / bytes as f64;
    let event_ratio =
        per_event(&anthropic, long.len(), long_events) / per_event(&responses, input.len(), events);
    row(
        &format!(
            "Anthropic over loopback HTTP ({} KB stream, {} B/event), 16 KiB",
            long.len() / 1000,
            long.len() / long_events.max(1)
        ),
        &anthropic,
        &format!(
            "within 20 % of OpenResponses: {ratio:.2}× per byte ({}), {event_ratio:.2}× per event",
            if ratio >= 0.8 { "met" } else { "MISSED" }
        ),
    );
    println!();
}

/// A long Anthropic stream made of a real one: the thinking and text deltas of
/// `fixtures/anthropic/anthropic.thinking-text.claude-haiku-4.5.sse` each repeated in place
/// [`ANTHROPIC_REPEAT`] times (the recordings are at most 21 KB).
fn long_anthropic_stream() -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/anthropic")
        .join(ANTHROPIC_FIXTURE);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("cannot read {}: {error}", path.display()));
    let mut out = String::with_capacity(text.len() * ANTHROPIC_REPEAT);
    for event in text.split_inclusive("\n\n") {
        let repeat = if event.contains("\"text_delta\"") || event.contains("\"thinking_delta\"") {
            ANTHROPIC_REPEAT
        } else {
            1
        };
        for _ in 0..repeat {
            out.push_str(event);
        }
    }
    out.into_bytes()
}

/// Whether this bench runs: with filter arguments (`cargo bench -- <filter>`), only if its name
/// contains one of them.
fn selected(name: &str) -> bool {
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|arg| !arg.starts_with('-'))
        .collect();
    filters.is_empty() || filters.iter().any(|filter| name.contains(filter.as_str()))
}

fn chunk_label(chunk: usize) -> String {
    if chunk >= 1024 {
        format!("{} KiB", chunk / 1024)
    } else {
        format!("{chunk} B")
    }
}

fn verdict(cpu_mb_per_s: f64) -> String {
    let met = if cpu_mb_per_s >= 300.0 {
        "met"
    } else {
        "MISSED"
    };
    format!("{TARGET}: {met}")
}

/// Feeds `input` to a fresh decoder in `chunk`-byte pieces; returns the number of events.
fn decode(
    input: &[u8],
    chunk: usize,
    mut on_event: impl FnMut(noetic_providers::SseEvent),
) -> usize {
    let mut decoder = SseDecoder::default();
    let mut events = 0;
    for piece in input.chunks(chunk) {
        decoder
            .feed(piece, &mut |event| {
                events += 1;
                on_event(event);
            })
            .expect("the fixture decodes");
    }
    assert!(
        !decoder.has_pending(),
        "the fixture ends with a whole event"
    );
    events
}

/// Median throughputs of one case, in MB/s.
struct Rate {
    cpu: f64,
    wall: f64,
}

/// This thread's CPU time, in ns precision where the kernel reports it.
fn thread_cpu() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let nanos: u64 = stat.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(nanos))
}

/// Runs `body` (which processes `bytes` bytes) repeatedly for about [`CASE_TIME`].
fn throughput(bytes: usize, mut body: impl FnMut()) -> Rate {
    // Warm up, and size the slices from one timed repetition.
    body();
    let started = Instant::now();
    body();
    let once = started.elapsed().max(Duration::from_micros(1));
    let per_slice = CASE_TIME / SLICES as u32;
    let reps = (per_slice.as_secs_f64() / once.as_secs_f64())
        .ceil()
        .max(1.0) as usize;
    let mut cpu_rates = Vec::with_capacity(SLICES);
    let mut wall_rates = Vec::with_capacity(SLICES);
    for _ in 0..SLICES {
        let cpu_start = thread_cpu();
        let wall_start = Instant::now();
        for _ in 0..reps {
            body();
        }
        let wall = wall_start.elapsed();
        let cpu = match (cpu_start, thread_cpu()) {
            (Some(start), Some(end)) => end.saturating_sub(start),
            _ => wall,
        };
        let total = (bytes * reps) as f64 / 1e6;
        cpu_rates.push(total / cpu.as_secs_f64().max(1e-9));
        wall_rates.push(total / wall.as_secs_f64().max(1e-9));
    }
    Rate {
        cpu: median(&mut cpu_rates),
        wall: median(&mut wall_rates),
    }
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn row(case: &str, rate: &Rate, target: &str) {
    println!(
        "| {case:<59} | {:>10.0} | {:>11.0} | {target} |",
        rate.cpu, rate.wall
    );
}

/// A provider path: `input` served over loopback HTTP in 16 KiB chunks, decoded by the provider
/// `make` builds for the server's base URL into events (`expected` of them, when given). The server
/// runs on its own runtime thread; the client on this one.
fn provider_throughput<P: ModelProvider>(
    input: &[u8],
    make: impl FnOnce(String) -> P,
    expected: Option<usize>,
) -> Rate {
    let server_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("server runtime");
    let server = server_runtime.block_on(MockServer::start());
    server.forget_requests();
    server.set_fallback(MockReply::sse(input.to_vec()).chunk_size(16 * 1024));
    let provider = make(server.base_url());
    let client_runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("client runtime");
    let params = ModelParams::default();
    let request_input = [Item::user_text("hello")];
    let request = ModelRequest::new("bench-model", &request_input, &params);
    let rate = throughput(input.len(), || {
        let events = client_runtime.block_on(async {
            let stream = tokio::time::timeout(Duration::from_secs(10), provider.stream(&request))
                .await
                .expect("the response starts within 10 s")
                .expect("the response starts");
            let mut events = stream.events;
            let mut count = 0;
            let mut finished = false;
            while let Some(event) = tokio::time::timeout(Duration::from_secs(10), events.next())
                .await
                .expect("each event within 10 s")
            {
                let event = event.expect("the fixture parses");
                finished |= matches!(event, ResponseEvent::Finished(_));
                black_box(event);
                count += 1;
            }
            assert!(finished, "the stream ends with a terminal event");
            count
        });
        if let Some(expected) = expected {
            assert_eq!(events, expected, "one framework event per SSE event");
        }
    });
    drop(client_runtime);
    drop(server);
    server_runtime.shutdown_timeout(Duration::from_secs(1));
    rate
}
