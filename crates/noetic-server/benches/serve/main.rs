//! The native SSE stream at scale, over real loopback HTTP: one thread watched by 1,000
//! subscribers, and 1,000 threads watched by one subscriber each.
//!
//! ```text
//! cargo bench -p noetic-server --bench serve      # or: cargo xtask bench
//! NOETIC_BENCH_SUBSCRIBERS=200 NOETIC_BENCH_DELTAS=100 cargo bench -p noetic-server --bench serve
//! ```
//!
//! Each round of a scenario subscribes (`GET /v1/threads/{id}/events?replay=none`, reqwest), then
//! starts the turns (`POST …/messages`) and waits until every subscriber has read its thread's
//! `turn_completed`; the table shows the median of the rounds. The model is in-process and emits
//! its text deltas all at once (the worst burst), each stamped with the instant the harness pulled
//! it from the model stream, just before it is published on the bus: so the bench reports, besides
//! events delivered per second across all subscribers, the latency from publish to a subscriber's
//! reading of the event. In a burst that latency is mostly the time to drain the backlog, so a last
//! round emits its deltas at a model's pace (one every 20 ms) to show the fan-out's own latency.
//! Server and clients share one multi-thread tokio runtime of two workers in this process, so the
//! CPU figure is both sides'.
//!
//! Memory per subscriber is measured apart, in two processes, so the server's side is not mixed
//! with the client's (see `memory.rs`): this binary runs itself again as the server, this process
//! opens the subscriptions and leaves them idle, and each process's RSS growth divided by the
//! subscriber count is that side's memory per subscriber. For comparison it also measures what an
//! idle keep-alive HTTP/1 connection costs the server, without any event stream.
//!
//! The memory run holds three sockets per subscriber in each process at once (the idle connections,
//! the one-thread and the many-thread subscribers), the in-process run two: the bench needs an
//! open-file limit (`ulimit -n`) of about three times the subscriber count; below it says so and
//! scales the count down. `NOETIC_BENCH_SUBSCRIBERS` (default 1,000), `NOETIC_BENCH_DELTAS` (text
//! deltas per turn, default 500) and `NOETIC_BENCH_ROUNDS` (default 5) scale the run.
//!
//! Then the fleet part (`fleet.rs`, skipped with a line saying so without PostgreSQL): three hosts
//! sharing one database, one running the turns, the subscribers spread over the three; events per
//! second and the latency from publish on the running host to a read on another.
//! `NOETIC_BENCH_PART=fleet` runs only that part.
//!
//! DESIGN.md §16 sets no target for SSE: the table prints the nearest ones (memory per idle session
//! and per live turn) for comparison, not as this bench's pass marks.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark: failures are bugs to see at once

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use futures_util::future::BoxFuture;
use futures_util::{StreamExt, stream};
use noetic_core::{
    AgentHarness, ModelProvider, ModelRequest, ModelStream, ResponseEvent, call_model,
};
use noetic_server::{NoeticServer, ServeConfig};
use noetic_test_support::ScriptedResponse;
use serde_json::json;
use tokio_util::sync::CancellationToken;

mod fleet;
mod memory;

use memory::{Memory, memory, serve_for_memory_run};

/// The subscriber count (and thread count of the second scenario).
const SUBSCRIBERS_ENV: &str = "NOETIC_BENCH_SUBSCRIBERS";
/// The text deltas per turn.
const DELTAS_ENV: &str = "NOETIC_BENCH_DELTAS";
/// `fleet`: only the fleet part (three hosts on PostgreSQL).
const PART_ENV: &str = "NOETIC_BENCH_PART";
/// Set to `server` in the child process of the memory run.
const ROLE_ENV: &str = "NOETIC_SERVE_BENCH_ROLE";
const DEFAULT_SUBSCRIBERS: usize = 1_000;
const DEFAULT_DELTAS: usize = 500;
/// Requests (connects, POSTs) in flight at once.
const IN_FLIGHT: usize = 64;
/// File descriptors kept aside from the subscribers' (the runtime, the pool, the POSTs).
const SPARE_FDS: usize = 256;
/// The longest any phase may take: only a guard against hangs.
const PHASE_LIMIT: Duration = Duration::from_secs(180);
/// How long the processes are left alone before their RSS is read.
const SETTLE: Duration = Duration::from_millis(400);
/// The one thread of the first scenario.
const HOT: &str = "hot";
/// The rounds of each scenario (the median is reported).
const ROUNDS_ENV: &str = "NOETIC_BENCH_ROUNDS";
const DEFAULT_ROUNDS: usize = 5;
/// The round at a model's pace: this many deltas, one every `PACE`.
const PACED_DELTAS: usize = 50;
const PACE: Duration = Duration::from_millis(20);

/// Nanoseconds since the first call: one clock for the model's stamps and the readers.
fn clock() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    u64::try_from(START.get_or_init(Instant::now).elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// The thread of subscriber `index` in the second scenario.
fn cold(index: usize) -> String {
    format!("cold-{index}")
}

/// A usize from the environment, or `default`.
fn env_count(name: &str, default: usize) -> usize {
    match std::env::var(name) {
        Ok(value) => value
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={value} is not a count")),
        Err(_) => default,
    }
}

/// What the model answers next: how many text deltas, and the pause before each (none: all at
/// once). Shared with the bench, which sets it between phases.
#[derive(Default)]
struct Script {
    deltas: AtomicUsize,
    pace_us: AtomicU64,
}

impl Script {
    fn set(&self, deltas: usize, pace: Duration) {
        self.deltas.store(deltas, Ordering::SeqCst);
        self.pace_us.store(
            u64::try_from(pace.as_micros()).unwrap_or(u64::MAX),
            Ordering::SeqCst,
        );
    }
}

/// Answers every request with the [`Script`]'s text deltas, each stamped (nanoseconds of [`clock`])
/// when the harness pulls it from the stream.
#[derive(Clone)]
struct StampedModel {
    script: Arc<Script>,
}

/// `event` with a stamped text when it is a text delta.
fn stamped(event: ResponseEvent) -> ResponseEvent {
    match event {
        ResponseEvent::OutputTextDelta {
            output_index,
            content_index,
            ..
        } => ResponseEvent::OutputTextDelta {
            output_index,
            content_index,
            // About the size of a delta of a streamed answer.
            delta: format!("{} lorem ipsum ", clock()),
        },
        other => other,
    }
}

impl ModelProvider for StampedModel {
    fn stream<'a>(
        &'a self,
        _request: &'a ModelRequest<'a>,
    ) -> BoxFuture<'a, noetic_core::Result<ModelStream>> {
        let deltas = self.script.deltas.load(Ordering::SeqCst).max(1);
        let pace = Duration::from_micros(self.script.pace_us.load(Ordering::SeqCst));
        let script = ScriptedResponse::text_in_deltas(&"x".repeat(deltas), 1).into_events();
        Box::pin(async move {
            let events = if pace.is_zero() {
                stream::iter(script).map(|event| Ok(stamped(event))).boxed()
            } else {
                stream::iter(script)
                    .then(move |event| async move {
                        if matches!(event, ResponseEvent::OutputTextDelta { .. }) {
                            tokio::time::sleep(pace).await;
                        }
                        Ok(stamped(event))
                    })
                    .boxed()
            };
            Ok(ModelStream {
                generation_id: None,
                events,
            })
        })
    }
}

fn harness(script: Arc<Script>) -> AgentHarness {
    AgentHarness::builder("agent")
        .provider("stamped", StampedModel { script })
        .agent_graph(call_model("llm").model("m"))
        .build()
        .unwrap()
}

/// Serves `harness` on an ephemeral loopback port until `stop` is cancelled; the base URL.
async fn start(harness: AgentHarness, stop: CancellationToken) -> (NoeticServer, String) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let server = NoeticServer::new(harness, ServeConfig::new().without_page());
    let serving = server.clone();
    tokio::spawn(async move {
        let _ = serving.serve(listener, stop.cancelled_owned(), None).await;
    });
    (server, base)
}

/// CPU time of the whole process (all threads, user + system).
fn cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // After the command name (in parentheses): state is field 3, utime 14 and stime 15.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let ticks = |index: usize| fields.get(index).and_then(|v| v.parse::<u64>().ok());
    let total = ticks(11).unwrap_or(0) + ticks(12).unwrap_or(0);
    // `/proc` counts in USER_HZ, 100 per second on Linux.
    Duration::from_millis(total * 10)
}

/// The soft limit on open files, from `/proc/self/limits`.
fn open_file_limit() -> Option<usize> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits
        .lines()
        .find(|line| line.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

async fn post(client: &reqwest::Client, url: String, body: serde_json::Value) {
    let response = client.post(&url).json(&body).send().await.unwrap();
    let status = response.status();
    assert!(status.is_success(), "POST {url}: {status}");
}

/// Sends every POST, [`IN_FLIGHT`] at a time.
async fn post_all(client: &reqwest::Client, posts: Vec<(String, serde_json::Value)>) {
    stream::iter(posts)
        .map(|(url, body)| post(client, url, body))
        .buffer_unordered(IN_FLIGHT)
        .collect::<Vec<()>>()
        .await;
}

/// Opens one event stream per URL, [`IN_FLIGHT`] at a time; each answered `200` with its headers.
async fn subscribe_all(client: &reqwest::Client, urls: Vec<String>) -> Vec<reqwest::Response> {
    stream::iter(urls)
        .map(|url| async move {
            let response = client.get(&url).send().await.unwrap();
            assert_eq!(response.status(), 200, "GET {url}");
            response
        })
        .buffer_unordered(IN_FLIGHT)
        .collect()
        .await
}

fn events_url(base: &str, thread: &str) -> String {
    format!("{base}/v1/threads/{thread}/events?replay=none")
}

/// What one subscriber read of its turn.
#[derive(Default, Clone)]
struct Tally {
    /// Events with data, up to and including `turn_completed`.
    events: u64,
    /// `lagged` events among them.
    lagged: u64,
    /// Publish → read latency of each text delta, in microseconds.
    latencies_us: Vec<u32>,
    /// Whether `turn_completed` was read.
    completed: bool,
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

impl Tally {
    /// Counts one SSE line; `true` at `turn_completed`.
    fn line(&mut self, line: &[u8]) -> bool {
        let Some(data) = line.strip_prefix(b"data:") else {
            return false; // `id:`, `retry:`, a keep-alive comment, a blank line
        };
        self.events += 1;
        if let Some(at) = find(data, b"\"delta\":\"") {
            let digits = &data[at + 9..];
            let end = digits
                .iter()
                .position(|byte| !byte.is_ascii_digit())
                .unwrap_or(digits.len());
            if let Some(stamp) = std::str::from_utf8(&digits[..end])
                .ok()
                .and_then(|text| text.parse::<u64>().ok())
            {
                let micros = clock().saturating_sub(stamp) / 1_000;
                self.latencies_us
                    .push(u32::try_from(micros).unwrap_or(u32::MAX));
            }
        } else if find(data, b":turn_completed\"").is_some() {
            self.completed = true;
            return true;
        } else if find(data, b":lagged\"").is_some() {
            self.lagged += 1;
        }
        false
    }
}

/// Reads `response`'s events until `turn_completed` (or the end of the stream).
async fn read_turn(response: reqwest::Response) -> Tally {
    let mut body = response.bytes_stream();
    let mut pending: Vec<u8> = Vec::with_capacity(4096);
    let mut tally = Tally::default();
    while let Some(chunk) = body.next().await {
        pending.extend_from_slice(&chunk.expect("the event stream reads"));
        let mut start = 0;
        while let Some(end) = pending[start..].iter().position(|&byte| byte == b'\n') {
            let line = &pending[start..start + end];
            start += end + 1;
            if tally.line(line) {
                return tally;
            }
        }
        pending.drain(..start);
    }
    tally
}

/// One scenario's figures.
struct Run {
    events: u64,
    events_min: u64,
    events_max: u64,
    lagged: u64,
    wall: Duration,
    cpu: Duration,
    latency_median_us: u32,
    latency_p99_us: u32,
    latency_max_us: u32,
}

impl Run {
    fn new(tallies: Vec<Tally>, wall: Duration, cpu: Duration) -> Run {
        let incomplete = tallies.iter().filter(|tally| !tally.completed).count();
        assert_eq!(
            incomplete, 0,
            "{incomplete} subscribers saw their stream end before turn_completed"
        );
        let mut latencies: Vec<u32> = tallies
            .iter()
            .flat_map(|tally| tally.latencies_us.iter().copied())
            .collect();
        latencies.sort_unstable();
        let at = |fraction: f64| {
            let index = ((latencies.len() as f64 * fraction) as usize).min(latencies.len() - 1);
            latencies[index]
        };
        Run {
            events: tallies.iter().map(|tally| tally.events).sum(),
            events_min: tallies.iter().map(|tally| tally.events).min().unwrap_or(0),
            events_max: tallies.iter().map(|tally| tally.events).max().unwrap_or(0),
            lagged: tallies.iter().map(|tally| tally.lagged).sum(),
            wall,
            cpu,
            latency_median_us: at(0.5),
            latency_p99_us: at(0.99),
            latency_max_us: latencies.last().copied().unwrap_or(0),
        }
    }

    fn per_second(&self) -> f64 {
        self.events as f64 / self.wall.as_secs_f64()
    }

    fn cpu_per_event_us(&self) -> f64 {
        self.cpu.as_secs_f64() * 1e6 / self.events as f64
    }
}

/// Starts the readers, then the turns (`start_turns`), and waits for every `turn_completed`.
async fn measure_turns(
    responses: Vec<reqwest::Response>,
    start_turns: impl std::future::Future<Output = ()>,
) -> Run {
    let readers: Vec<_> = responses
        .into_iter()
        .map(|response| tokio::spawn(read_turn(response)))
        .collect();
    // The readers wait on their bodies before the first event is published.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let cpu_before = cpu();
    let started = Instant::now();
    start_turns.await;
    let tallies = tokio::time::timeout(PHASE_LIMIT, futures_util::future::join_all(readers))
        .await
        .expect("every subscriber read its turn_completed in time");
    let wall = started.elapsed();
    let cpu_used = cpu().saturating_sub(cpu_before);
    let tallies = tallies
        .into_iter()
        .map(|tally| tally.expect("a reader"))
        .collect();
    Run::new(tallies, wall, cpu_used)
}

/// One round of a scenario: a subscriber on each of `watched` (a thread per subscriber), then a
/// turn on each of `turns` at once; until every subscriber has read its `turn_completed`.
async fn round(client: &reqwest::Client, base: &str, watched: &[String], turns: &[String]) -> Run {
    let urls = watched
        .iter()
        .map(|thread| events_url(base, thread))
        .collect();
    let responses = subscribe_all(client, urls).await;
    let messages = turns
        .iter()
        .map(|thread| {
            (
                format!("{base}/v1/threads/{thread}/messages"),
                json!({"input": "talk"}),
            )
        })
        .collect();
    measure_turns(responses, post_all(client, messages)).await
}

/// A scenario's figures: the median round by events per second, the slowest and fastest rounds'
/// rates, and a round at a model's pace (its latency).
struct Scenario {
    median: Run,
    slowest: f64,
    fastest: f64,
    paced: Run,
}

/// `rounds` rounds of all-at-once turns of `deltas` deltas, then one of `PACED_DELTAS` deltas a
/// `PACE` apart.
async fn scenario(
    client: &reqwest::Client,
    base: &str,
    script: &Script,
    (watched, turns): (&[String], &[String]),
    rounds: usize,
    deltas: usize,
) -> Scenario {
    let mut runs = Vec::with_capacity(rounds);
    script.set(deltas, Duration::ZERO);
    for _ in 0..rounds {
        runs.push(round(client, base, watched, turns).await);
    }
    script.set(PACED_DELTAS, PACE);
    let paced = round(client, base, watched, turns).await;
    runs.sort_by(|a, b| a.per_second().total_cmp(&b.per_second()));
    let slowest = runs[0].per_second();
    let fastest = runs[runs.len() - 1].per_second();
    Scenario {
        median: runs.swap_remove(runs.len() / 2),
        slowest,
        fastest,
        paced,
    }
}

/// The in-process run: both scenarios, after a warm-up turn.
async fn throughput(subscribers: usize, deltas: usize, rounds: usize) -> (Scenario, Scenario) {
    let stop = CancellationToken::new();
    let script = Arc::new(Script::default());
    let (_server, base) = start(harness(script.clone()), stop.clone()).await;
    let client = reqwest::Client::new();
    let hot = vec![HOT.to_owned()];
    let colds: Vec<String> = (0..subscribers).map(cold).collect();
    let creates = std::iter::once("warm".to_owned())
        .chain(hot.iter().cloned())
        .chain(colds.iter().cloned())
        .map(|thread| (format!("{base}/v1/threads"), json!({"thread_id": thread})))
        .collect();
    post_all(&client, creates).await;
    script.set(deltas, Duration::ZERO);
    let warm = vec!["warm".to_owned()];
    round(&client, &base, &[warm[0].clone(), warm[0].clone()], &warm).await;
    let many_on_hot = vec![HOT.to_owned(); subscribers];
    let first = scenario(
        &client,
        &base,
        &script,
        (&many_on_hot, &hot),
        rounds,
        deltas,
    )
    .await;
    let second = scenario(&client, &base, &script, (&colds, &colds), rounds, deltas).await;
    stop.cancel();
    (first, second)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn kib(bytes: f64) -> String {
    format!("{:.1} KiB", bytes / 1024.0)
}

fn thousands(value: u64) -> String {
    let digits = value.to_string();
    let mut out = String::new();
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

fn latency(run: &Run) -> String {
    format!(
        "{:.2} / {:.2} / {:.2} ms",
        f64::from(run.latency_median_us) / 1e3,
        f64::from(run.latency_p99_us) / 1e3,
        f64::from(run.latency_max_us) / 1e3
    )
}

fn print_table(
    (subscribers, deltas, rounds): (usize, usize, usize),
    first: &Scenario,
    second: &Scenario,
    memory: &Memory,
) {
    let row = |measure: &str, one: String, many: String, target: &str| {
        println!("| {measure} | {one} | {many} | {target} |");
    };
    let both = |figure: &dyn Fn(&Scenario) -> String| (figure(first), figure(second));
    println!();
    println!(
        "| measure | 1 thread × {subscribers} subscribers | {subscribers} threads × 1 subscriber | nearest DESIGN.md §16 target |"
    );
    println!("|---|---:|---:|---|");
    let (one, many) = both(&|s| {
        let run = &s.median;
        format!(
            "{} ({}–{} each)",
            thousands(run.events),
            run.events_min,
            run.events_max
        )
    });
    row(
        &format!("events read per round (total; per subscriber), {deltas} deltas per turn"),
        one,
        many,
        "—",
    );
    let (one, many) = both(&|s| format!("{:.0} ms", s.median.wall.as_secs_f64() * 1e3));
    row(
        "wall time of the median round: first POST → last `turn_completed` read",
        one,
        many,
        "—",
    );
    let (one, many) = both(&|s| {
        format!(
            "**{}** ({}–{})",
            thousands(s.median.per_second() as u64),
            thousands(s.slowest as u64),
            thousands(s.fastest as u64)
        )
    });
    row(
        &format!(
            "events delivered per second, all subscribers: median of {rounds} rounds (slowest–fastest)"
        ),
        one,
        many,
        "— (none for SSE)",
    );
    let (one, many) = both(&|s| format!("{:.2} µs", s.median.cpu_per_event_us()));
    row(
        "CPU per event delivered (server + client: one process)",
        one,
        many,
        "—",
    );
    let (one, many) = both(&|s| latency(&s.median));
    row(
        "publish → read latency, deltas all at once: median / p99 / max (mostly the backlog)",
        one,
        many,
        "— (none for SSE)",
    );
    let (one, many) = both(&|s| latency(&s.paced));
    row(
        &format!(
            "publish → read latency at a model's pace ({PACED_DELTAS} deltas, one per {} ms): median / p99 / max",
            PACE.as_millis()
        ),
        one,
        many,
        "— (none for SSE)",
    );
    let (one, many) = both(&|s| (s.median.lagged + s.paced.lagged).to_string());
    row(
        "`lagged` events (median and paced rounds)",
        one,
        many,
        "— (0 expected: the ring holds a whole turn)",
    );
    row(
        "memory per idle subscriber, server process (RSS growth ÷ subscribers; beyond its connection's)",
        format!(
            "{} ({})",
            kib(memory.one_thread.0),
            kib(memory.one_thread.0 - memory.connection)
        ),
        format!(
            "{} ({})",
            kib(memory.many_threads.0),
            kib(memory.many_threads.0 - memory.connection)
        ),
        "nearest: ≤ 16 KiB per idle session; ≤ 1.3× the bare client's ~36-37 KiB (≈ 47-48 KiB) per live turn",
    );
    row(
        "memory per idle subscriber, client process (reqwest)",
        kib(memory.one_thread.1),
        kib(memory.many_threads.1),
        "— (the client's side)",
    );
    row(
        "for comparison: an idle keep-alive HTTP/1 connection (one request served), server process",
        kib(memory.connection),
        "(the same)".to_owned(),
        "—",
    );
    println!();
    println!(
        "DESIGN.md §16 sets no SSE target: the memory targets shown are the nearest ones (an idle \
         session, a live turn), not SSE-specific ones. The sessions themselves are created before \
         the memory is first read, so the figures are the subscriptions' (and their connections')."
    );
}

fn main() {
    if std::env::var(ROLE_ENV).as_deref() == Ok("server") {
        serve_for_memory_run();
        return;
    }
    let mut subscribers = env_count(SUBSCRIBERS_ENV, DEFAULT_SUBSCRIBERS).max(1);
    let deltas = env_count(DELTAS_ENV, DEFAULT_DELTAS).max(1);
    let rounds = env_count(ROUNDS_ENV, DEFAULT_ROUNDS).max(1);
    let needed = 3 * subscribers + SPARE_FDS;
    match open_file_limit() {
        Some(limit) if limit < needed => {
            let fitting = limit.saturating_sub(SPARE_FDS) / 3;
            println!(
                "The open-file limit (RLIMIT_NOFILE) is {limit}; {subscribers} subscribers need \
                 about {needed} (three sockets each). Run `ulimit -n {needed}` first for the full \
                 run; scaling down to {fitting} subscribers."
            );
            assert!(fitting > 0, "the open-file limit is too low to run");
            subscribers = fitting;
        }
        Some(_) => {}
        None => println!("(cannot read the open-file limit; assuming it is enough)"),
    }
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    println!(
        "serve: {subscribers} SSE subscribers, {deltas} text deltas per turn, {rounds} rounds, \
         2 tokio workers, {cores} cores"
    );
    let started = Instant::now();
    if std::env::var(PART_ENV).as_deref() != Ok("fleet") {
        // Memory first, while this process has freed nothing its subscriptions could reuse.
        let memory = memory(subscribers);
        let runtime = runtime();
        let (first, second) = runtime.block_on(throughput(subscribers, deltas, rounds));
        drop(runtime);
        print_table((subscribers, deltas, rounds), &first, &second, &memory);
    }
    runtime().block_on(fleet::fleet(subscribers, deltas, rounds));
    println!("(the bench took {:.1} s)", started.elapsed().as_secs_f64());
}
