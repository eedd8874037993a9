//! Sessions at scale: 10,000 threads at once, each running one scripted turn, and steer latency.
//!
//! ```text
//! cargo bench -p noetic-core --bench sessions     # or: cargo xtask bench
//! ```
//!
//! Reports wall time for the 10,000 turns, peak RSS, memory per live turn (all 10,000 turns parked in
//! their model call at once), memory per idle session (after the turns, each session holding its
//! two-item history), and steer latency (a `next-item` steer sent while an item streams, to
//! `steer_applied` once the item finishes), next to the DESIGN.md §16 targets. The model is in-process,
//! so what is measured is the framework.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark: failures are bugs to see at once

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use noetic_core::model::{ModelRequest, ModelStream};
use noetic_core::{
    AgentHarness, DeliveryMode, ExecuteOptions, FrameworkEvent, ModelProvider, Scope, StreamEvent,
    call_model,
};
use noetic_test_support::{PacedModel, ScriptedResponse};
use tokio::sync::{Notify, watch};

const THREADS: usize = 10_000;

/// Answers every request with a short text, but only once released: so all turns can be held live.
#[derive(Clone)]
struct GatedModel {
    release: watch::Receiver<bool>,
    waiting: Arc<AtomicUsize>,
    all_waiting: Arc<Notify>,
    expected: usize,
}

impl ModelProvider for GatedModel {
    fn stream<'a>(
        &'a self,
        _request: &'a ModelRequest<'a>,
    ) -> BoxFuture<'a, noetic_core::Result<ModelStream>> {
        let mut release = self.release.clone();
        let waiting = self.waiting.clone();
        let all_waiting = self.all_waiting.clone();
        let expected = self.expected;
        Box::pin(async move {
            if waiting.fetch_add(1, Ordering::SeqCst) + 1 == expected {
                all_waiting.notify_one();
            }
            release
                .wait_for(|released| *released)
                .await
                .expect("gate open");
            let events = ScriptedResponse::text("ok, done").into_events();
            Ok(ModelStream {
                generation_id: None,
                events: futures_util::stream::iter(events.into_iter().map(Ok)).boxed(),
            })
        })
    }
}

/// Resident set size and its peak, in bytes (Linux).
fn memory() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|line| line.starts_with(name))
            .and_then(|line| line.split_whitespace().nth(1))
            .and_then(|kib| kib.parse::<u64>().ok())
            .map_or(0, |kib| kib * 1024)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

fn kib(bytes: f64) -> String {
    format!("{:.1}", bytes / 1024.0)
}

async fn scale() {
    let (open, release) = watch::channel(false);
    let all_waiting = Arc::new(Notify::new());
    let model = GatedModel {
        release,
        waiting: Arc::default(),
        all_waiting: all_waiting.clone(),
        expected: THREADS,
    };
    let harness = AgentHarness::builder("bench")
        .provider("gated", model)
        .agent_graph(call_model("llm").model("m"))
        .build()
        .unwrap();
    let (rss_before, _) = memory();
    let started = Instant::now();
    for index in 0..THREADS {
        harness
            .execute(
                "hello",
                ExecuteOptions::default().thread_id(format!("thread-{index}")),
            )
            .await
            .unwrap();
    }
    all_waiting.notified().await;
    let (rss_live, _) = memory();
    open.send(true).unwrap();
    harness.wait_idle().await;
    let wall = started.elapsed();
    for index in (0..THREADS).step_by(997) {
        let response = harness
            .agent_response(Scope::thread(format!("thread-{index}")))
            .await
            .unwrap();
        assert_eq!(response.text, "ok, done");
    }
    let (rss_idle, peak) = memory();
    assert_eq!(harness.session_count(), THREADS);
    let per_live = (rss_live.saturating_sub(rss_before)) as f64 / THREADS as f64;
    let per_idle = (rss_idle.saturating_sub(rss_before)) as f64 / THREADS as f64;
    println!(
        "| {THREADS} threads, one turn each: wall time | {:.0} ms | {:.1} µs per turn | no error; DESIGN.md: ≥ 10,000 concurrent sessions with no error |",
        wall.as_secs_f64() * 1e3,
        wall.as_secs_f64() * 1e6 / THREADS as f64
    );
    println!(
        "| peak RSS | {:.1} MiB | | |",
        peak as f64 / 1024.0 / 1024.0
    );
    println!(
        "| memory per live turn (all {THREADS} parked in their model call) | {} KiB | | ≤ 1.3× the bare client (about 48 KiB; over HTTP see the react2 bench) beyond its history |",
        kib(per_live)
    );
    println!(
        "| memory per idle session (2-item history) | {} KiB | | ≤ 16 KiB |",
        kib(per_idle)
    );
}

async fn steer_latency() {
    let model = PacedModel::new();
    let harness = AgentHarness::builder("bench")
        .provider("paced", model.clone())
        .agent_graph(call_model("llm").model("m"))
        .build()
        .unwrap();
    let mut events = harness.events(Scope::default());
    let mut latencies = Vec::new();
    for attempt in 0..300 {
        harness
            .execute("write", ExecuteOptions::default())
            .await
            .unwrap();
        let call = model.next_call().await;
        let mut stream = ScriptedResponse::text("some text").into_events();
        let completed = stream.pop().unwrap();
        let done = stream.pop().unwrap();
        call.send_all(stream);
        let sent = Instant::now();
        harness
            .execute(
                "steer",
                ExecuteOptions::default()
                    .delivery_mode(DeliveryMode::NextItem)
                    .message_id(format!("s{attempt}")),
            )
            .await
            .unwrap();
        call.send(done); // the steer point
        loop {
            let event = events.next().await.unwrap();
            if let StreamEvent::Framework(FrameworkEvent::SteerApplied { .. }) = &*event {
                latencies.push(sent.elapsed());
                break;
            }
        }
        drop(completed);
        let second = model.next_call().await;
        second.send_all(ScriptedResponse::text("fine").into_events());
        let _ = harness.agent_response(Scope::default()).await.unwrap();
        assert!(matches!(
            harness.status(Scope::default()),
            noetic_core::SessionStatus::Idle
        ));
    }
    latencies.sort();
    let median = latencies[latencies.len() / 2];
    let p99 = latencies[latencies.len() * 99 / 100];
    println!(
        "| steer latency (send → steer_applied at the next item_done) | median {:.1} µs | p99 {:.1} µs | < 1 ms of harness time |",
        median.as_secs_f64() * 1e6,
        p99.as_secs_f64() * 1e6
    );
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    println!("| measure | value | | target (DESIGN.md §16) |");
    println!("|---|---:|---:|---|");
    runtime.block_on(scale());
    runtime
        .block_on(async { tokio::time::timeout(Duration::from_secs(120), steer_latency()).await })
        .expect("steer latency bench finished");
}
