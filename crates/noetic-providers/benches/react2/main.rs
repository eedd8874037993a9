//! The react-2 workload of DESIGN.md §16, end to end over loopback HTTP: one turn = the user message →
//! round 1 the model calls the `lookup` tool → the tool returns at once → round 2 the model streams a
//! ~200-word answer in 50 deltas → the turn ends.
//!
//! Four clients run the same turns against the same server:
//! - **framework**: an `AgentHarness` with an `OpenResponses` provider, in the quick start's shape
//!   (`loop_step` around `call_model(…).tool(lookup)` until `any([no_tool_calls(), max_steps(10)])`), one
//!   `harness.run` on a fresh context per turn;
//! - **sessions**: the same harness with that agent as its graph, one `execute` + `agent_response` per
//!   turn on a new thread (so every turn leaves an idle session behind, as a chat service would);
//! - **durable**: the sessions client on a durable SQLite store (a fresh file in the temp dir per
//!   client process), DESIGN.md §16's "durable turn" (target ≤ 1.5× the floor);
//! - **bare** (the floor): plain `reqwest` + `SseDecoder` + `serde_json::Value`, two POSTs per turn;
//! - **durable-pg**: the durable client on PostgreSQL (a fresh database on the server the test support
//!   starts on loopback, or the one at `NOETIC_TEST_PG_URL`; skipped, saying so, without either): CPU
//!   one at a time and at 1,000 concurrent, and its store traffic (the server's CPU is not counted).
//!
//! A `history` phase runs 10 threads of 200 turns each on the sessions and durable clients and prints
//! the CPU per turn over turns 1–20 against turns 181–200: what a long thread costs per turn, and
//! whether what durability adds stays flat as the history grows.
//!
//! The mock server runs in a separate process (this binary re-executed with `NOETIC_BENCH_ROLE=server`),
//! so the client process's CPU time is the client's alone; each measurement runs in a client process of
//! its own (`NOETIC_BENCH_ROLE=client`), all on tokio multi-thread runtimes with 2 workers. Measured:
//! CPU µs per turn one turn at a time and with 1,000 turns at once (process utime + stime), and memory
//! per live turn ((peak RSS − RSS before) / 1,000 while 1,000 turns are live at once, their answers held
//! open by the server), and memory per idle session ((RSS after − RSS before) / 2,000 turns run one
//! after another, each leaving its session behind; the same for the other clients shows what a turn
//! leaves without sessions); CPU per turn with 1,000 turns at once and every event paced 20 ms apart
//! (each in a frame of its own, as a model generating tokens streams); allocations and bytes allocated
//! per turn (a counting global allocator, one at a time); and what the durable client asks of its
//! store per turn, by operation and kind of key (`census.rs`). Every turn must answer, and the server
//! must see exactly 2 requests per turn. One markdown table prints the figures, the ratios to the bare
//! client and the §16 targets.
//!
//! Run with `cargo xtask bench` (all benches), `cargo bench -p noetic-providers --bench react2`, or
//! `cargo xtask bench -- react2`. To profile one client, start a server and run a client role under a
//! profiler, e.g.:
//!
//! ```text
//! NOETIC_BENCH_ROLE=server target/release/deps/react2-… &   # prints the base URL
//! NOETIC_BENCH_ROLE=client NOETIC_BENCH_URL=<url> NOETIC_BENCH_MODE=sequential \
//!   NOETIC_BENCH_CLIENT=framework NOETIC_BENCH_TURNS=200 NOETIC_BENCH_RUNS=1 \
//!   valgrind --tool=callgrind target/release/deps/react2-…
//! ```

mod census;
mod clients;
mod measure;
mod server;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use clients::Kind;

/// Every allocation of the process is counted (allocations per turn, next to CPU). The counters cost
/// a few atomic adds per allocation, alike for every client, the floor included.
#[global_allocator]
static ALLOCATOR: &stats_alloc::StatsAlloc<std::alloc::System> = &stats_alloc::INSTRUMENTED_SYSTEM;

/// Which part this process plays: unset (the orchestrator), `server` or `client`.
const ROLE_VAR: &str = "NOETIC_BENCH_ROLE";
/// The server's base URL, for a client.
const URL_VAR: &str = "NOETIC_BENCH_URL";
/// A client's measurement: `cpu`, `sequential`, `concurrent`, `memory` or `idle`.
const MODE_VAR: &str = "NOETIC_BENCH_MODE";
/// A client's client: `framework`, `sessions`, `bare` or `all`.
const CLIENT_VAR: &str = "NOETIC_BENCH_CLIENT";
/// Sequential turns per run (default: calibrated to about 1 s of CPU).
const TURNS_VAR: &str = "NOETIC_BENCH_TURNS";
/// Runs per CPU measurement (default 5; the median is reported).
const RUNS_VAR: &str = "NOETIC_BENCH_RUNS";

/// The PostgreSQL database URL of the `durable-pg` client.
const PG_URL_VAR: &str = "NOETIC_BENCH_PG_URL";
/// A request header asking the server to hold the answer open (memory measurement).
const HOLD_HEADER: &str = "x-noetic-bench-hold";
/// A request header asking the server to pace its stream: every event in a frame of its own,
/// [`PACE_DELAY`] apart (the paced measurement, as a model generating tokens streams).
const PACE_HEADER: &str = "x-noetic-bench-pace";
/// The pause between two events of a paced stream.
const PACE_DELAY: Duration = Duration::from_millis(20);
const MODEL: &str = "bench/react-2";
const INSTRUCTIONS: &str = "You are a research assistant.";
const QUESTION: &str = "What is the capital of France?";
const LOOKUP_ARGUMENTS: &str = r#"{"query":"capital of France"}"#;
const ANSWER_WORDS: usize = 200;
const ANSWER_DELTAS: usize = 50;
/// Turns at once in the concurrent and memory measurements.
const CONCURRENT: usize = 1000;

/// The longest the CPU measurements may take in all.
const CPU_CHILD_TIMEOUT: Duration = Duration::from_secs(600);
/// The longest one memory measurement may take.
const MEMORY_CHILD_TIMEOUT: Duration = Duration::from_secs(90);
/// The longest the server may take to answer a command.
const SERVER_TIMEOUT: Duration = Duration::from_secs(10);

fn main() {
    match std::env::var(ROLE_VAR).ok().as_deref() {
        None => orchestrate(),
        Some("server") => server::serve(),
        Some("client") => measure::client_role(),
        Some(other) => panic!("{ROLE_VAR} must be server or client, not {other}"),
    }
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

/// One client process to run: its name, its environment and how long it may take.
struct Phase {
    name: &'static str,
    vars: Vec<(&'static str, &'static str)>,
    timeout: Duration,
}

/// One `RESULT` line of a client process.
type Record = HashMap<String, String>;

fn orchestrate() {
    if !selected("react2") {
        return;
    }
    let started = Instant::now();
    let exe = std::env::current_exe().expect("the bench's own path");
    let mut server = ServerProcess::start(&exe);
    let url = server.url.clone();
    eprintln!(
        "react2: server process at {url}; CPU runs (sequential, then {CONCURRENT} concurrent; the clients interleaved)…"
    );
    let mut records = Vec::new();
    let mut server_requests = 0;
    let mut client_requests = 0;
    let mut client_turns = 0;
    // The framework client once more, one turn at a time, exporting every span over OTLP/HTTP to a
    // receiver in this (unmeasured) process: the cost of export on.
    let receiver_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("receiver runtime");
    let receiver = receiver_runtime.block_on(noetic_test_support::OtlpReceiver::start());
    let traces: &'static str =
        Box::leak(format!("{}/v1/traces", receiver.endpoint()).into_boxed_str());
    let mut phases = vec![
        Phase {
            name: "cpu",
            vars: vec![(MODE_VAR, "cpu")],
            timeout: CPU_CHILD_TIMEOUT,
        },
        Phase {
            name: "paced",
            vars: vec![(MODE_VAR, "paced")],
            timeout: CPU_CHILD_TIMEOUT,
        },
        Phase {
            name: "otlp",
            vars: vec![
                (MODE_VAR, "sequential"),
                (CLIENT_VAR, "framework"),
                (measure::OTLP_VAR, traces),
            ],
            timeout: CPU_CHILD_TIMEOUT,
        },
    ];
    // The durable client once more on PostgreSQL (a server the test support starts on loopback, or
    // the one at NOETIC_TEST_PG_URL): one turn at a time, then 1,000 at once.
    let database = receiver_runtime.block_on(noetic_test_support::postgres::test_database());
    let pg_url: Option<&'static str> = database
        .as_ref()
        .map(|database| &*Box::leak(database.url().to_owned().into_boxed_str()));
    match pg_url {
        Some(url) => {
            phases.push(Phase {
                name: "postgres",
                vars: vec![
                    (MODE_VAR, "cpu"),
                    (CLIENT_VAR, Kind::DurablePg.name()),
                    (PG_URL_VAR, url),
                ],
                timeout: CPU_CHILD_TIMEOUT,
            });
        }
        None => noetic_test_support::postgres::print_skip("react2's durable-pg client"),
    }
    // Turn 1 against turn 200 of a thread, in memory and durable (PostgreSQL on a database of its
    // own, as SQLite on a file of its own: thread names repeat across client processes).
    let history_database = match pg_url {
        Some(_) => receiver_runtime.block_on(noetic_test_support::postgres::test_database()),
        None => None,
    };
    let history_pg_url: Option<&'static str> = history_database
        .as_ref()
        .map(|database| &*Box::leak(database.url().to_owned().into_boxed_str()));
    let mut history = vec![(MODE_VAR, "history")];
    match history_pg_url {
        Some(url) => {
            history.push((CLIENT_VAR, "sessions,durable,durable-pg"));
            history.push((PG_URL_VAR, url));
        }
        None => history.push((CLIENT_VAR, "sessions,durable")),
    }
    phases.push(Phase {
        name: "history",
        vars: history,
        timeout: CPU_CHILD_TIMEOUT,
    });
    for kind in Kind::ALL {
        phases.push(Phase {
            name: kind.name(),
            vars: vec![(MODE_VAR, "memory"), (CLIENT_VAR, kind.name())],
            timeout: MEMORY_CHILD_TIMEOUT,
        });
    }
    for kind in Kind::ALL {
        phases.push(Phase {
            name: kind.name(),
            vars: vec![(MODE_VAR, "idle"), (CLIENT_VAR, kind.name())],
            timeout: MEMORY_CHILD_TIMEOUT,
        });
    }
    for Phase {
        name: phase,
        vars,
        timeout,
    } in phases
    {
        match vars.first().map(|(_, mode)| *mode) {
            Some("paced") => eprintln!(
                "react2: paced: {CONCURRENT} turns at once, every event {} ms after the last…",
                PACE_DELAY.as_millis()
            ),
            Some("memory") => eprintln!(
                "react2: memory, {phase}: {CONCURRENT} turns live at once, in a fresh process…"
            ),
            Some("history") => eprintln!(
                "react2: history: turn 1 against turn 200 of a thread, in memory and durable…"
            ),
            Some("idle") => eprintln!(
                "react2: idle memory, {phase}: turns one after another, in a fresh process…"
            ),
            _ => {}
        }
        let before = server.count();
        let phase_records = run_client(&exe, &url, &vars, timeout);
        let seen = server.count() - before;
        let (mut turns, mut requests) = (0, 0);
        for record in phase_records
            .iter()
            .filter(|record| field(record, "case") == "requests")
        {
            turns += number(record, "turns") as usize;
            requests += number(record, "requests") as usize;
        }
        assert_eq!(
            seen, requests,
            "{phase}: the server saw {seen} requests, the clients sent {requests}"
        );
        assert_eq!(
            seen,
            2 * turns,
            "{phase}: {seen} requests for {turns} turns"
        );
        server_requests += seen;
        client_requests += requests;
        client_turns += turns;
        records.extend(phase_records);
    }
    drop(server);
    print_table(&records);
    if database.is_some() {
        let pg = |case: &str| find(&records, Kind::DurablePg, case);
        let bare = |case: &str| number(find(&records, Kind::Bare, case), "cpu_us");
        let (sequential, concurrent) = (pg("sequential"), pg("concurrent"));
        println!(
            "- durable sessions on PostgreSQL (a fresh database on a loopback server; target ≤ 1.5× like \
             SQLite): CPU µs/turn {} one at a time ({:.2}× the floor; {} allocations, {} µs wall), {} \
             at 1,000 concurrent ({:.2}×, {} errors); the server's CPU is not counted.",
            thousands(number(sequential, "cpu_us")),
            number(sequential, "cpu_us") / bare("sequential"),
            thousands(number(sequential, "allocations")),
            thousands(number(sequential, "wall_us")),
            thousands(number(concurrent, "cpu_us")),
            number(concurrent, "cpu_us") / bare("concurrent"),
            number(concurrent, "errors"),
        );
        print_census(&records, Kind::DurablePg);
    }
    print_history(&records, history_database.is_some());
    drop(history_database);
    drop(database);
    let off = number(find(&records, Kind::Framework, "sequential"), "cpu_us");
    let on = find(&records, Kind::Framework, "sequential_otlp");
    let spans = receiver.spans().len();
    println!(
        "- OTLP export on (framework, 1 at a time, every span posted over OTLP/HTTP to a receiver \
         outside the client process): CPU µs/turn {:.0} (min {:.0}, max {:.0}) vs {off:.0} off, \
         {:+.0} µs per turn; the receiver got {spans} spans.",
        number(on, "cpu_us"),
        number(on, "cpu_us_min"),
        number(on, "cpu_us_max"),
        number(on, "cpu_us") - off,
    );
    drop(receiver);
    drop(receiver_runtime);
    println!(
        "- requests: the server saw {server_requests} requests for {client_turns} turns ({:.2} per turn; the \
         clients counted {client_requests}).",
        server_requests as f64 / client_turns.max(1) as f64
    );
    println!(
        "- whole react2 run: {:.1} s.",
        started.elapsed().as_secs_f64()
    );
    println!();
}

fn find<'a>(records: &'a [Record], kind: Kind, case: &str) -> &'a Record {
    records
        .iter()
        .find(|record| field(record, "client") == kind.name() && field(record, "case") == case)
        .unwrap_or_else(|| panic!("no {case} result for {}", kind.name()))
}

fn field<'a>(record: &'a Record, key: &str) -> &'a str {
    record.get(key).map_or("", String::as_str)
}

fn number(record: &Record, key: &str) -> f64 {
    field(record, key)
        .parse()
        .unwrap_or_else(|_| panic!("result field {key} is not a number in {record:?}"))
}

fn print_table(records: &[Record]) {
    let at = |kind: Kind, case: &str, key: &str| number(find(records, kind, case), key);
    let cpu_seq = |kind| at(kind, "sequential", "cpu_us");
    let wall_seq = |kind| at(kind, "sequential", "wall_us");
    let cpu_conc = |kind| at(kind, "concurrent", "cpu_us");
    let cpu_paced = |kind| at(kind, "paced", "cpu_us");
    let allocations = |kind| at(kind, "sequential", "allocations");
    let allocated_kib = |kind| at(kind, "sequential", "allocated_bytes") / 1024.0;
    let errors = |kind| at(kind, "concurrent", "errors") + at(kind, "memory", "errors");
    let memory = |kind| at(kind, "memory", "per_turn_kib");
    let idle = |kind| at(kind, "idle", "per_turn_kib");
    let bare = Kind::Bare;
    let verdict = |met: bool| if met { "met" } else { "**MISSED**" };

    println!();
    println!(
        "react-2 over loopback HTTP (mock server in its own process; client CPU = utime + stime of the \
         client process; 2 tokio workers)"
    );
    println!();
    println!(
        "| client | CPU µs/turn, 1 at a time | wall µs/turn, 1 at a time | CPU µs/turn, 1,000 concurrent | \
         CPU µs/turn, 1,000 concurrent, paced | allocations per turn (KiB) | errors | memory per live turn | \
         memory left per turn (idle session) |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (kind, label) in [
        (
            Kind::Framework,
            "noetic run(): AgentHarness + OpenResponses",
        ),
        (
            Kind::Sessions,
            "noetic sessions: execute + agent_response, a thread per turn",
        ),
        (
            Kind::Durable,
            "noetic durable sessions: the same on a SQLite store (a fresh file)",
        ),
        (bare, "bare: reqwest + SseDecoder + serde_json::Value"),
    ] {
        println!(
            "| {label} | {} | {} | {} | {} | {} ({:.0}) | {} | {:.1} KiB | {:.1} KiB |",
            thousands(cpu_seq(kind)),
            thousands(wall_seq(kind)),
            thousands(cpu_conc(kind)),
            thousands(cpu_paced(kind)),
            thousands(allocations(kind)),
            allocated_kib(kind),
            errors(kind),
            memory(kind),
            idle(kind),
        );
    }
    let ratio = |value: &dyn Fn(Kind) -> f64, kind: Kind| value(kind) / value(bare);
    for kind in [Kind::Framework, Kind::Sessions, Kind::Durable] {
        println!(
            "| ratio {} / bare | {:.2}× | {:.2}× | {:.2}× | {:.2}× | {:.2}× ({:.2}×) | | {:.2}× | |",
            kind.name(),
            ratio(&cpu_seq, kind),
            ratio(&wall_seq, kind),
            ratio(&cpu_conc, kind),
            ratio(&cpu_paced, kind),
            ratio(&allocations, kind),
            ratio(&allocated_kib, kind),
            ratio(&memory, kind),
        );
    }
    println!(
        "| target (DESIGN.md §16) | ≤ 1.2× (durable ≤ 1.5×) | | ≤ 1.2× (durable ≤ 1.5×) | ≤ 1.2× (durable ≤ 1.5×) | | 0 | ≤ 1.3× | ≤ 16 KiB per idle session beyond its history |"
    );
    let history_kib = number(find(records, Kind::Sessions, "idle"), "history_bytes") / 1024.0;
    for kind in [Kind::Framework, Kind::Sessions, Kind::Durable] {
        let cpu_target = if kind == Kind::Durable { 1.5 } else { 1.2 };
        let idle_verdict = if kind == Kind::Sessions {
            verdict(idle(kind) - history_kib <= 16.0)
        } else {
            ""
        };
        println!(
            "| verdict, {} | {} | | {} | {} | | {} | {} | {idle_verdict} |",
            kind.name(),
            verdict(ratio(&cpu_seq, kind) <= cpu_target),
            verdict(ratio(&cpu_conc, kind) <= cpu_target),
            verdict(ratio(&cpu_paced, kind) <= cpu_target),
            verdict(errors(kind) + errors(bare) == 0.0),
            verdict(ratio(&memory, kind) <= 1.3),
        );
    }
    println!();
    println!(
        "DESIGN.md §16 measured the bare client at ~650 µs (1 at a time), ~900 µs (1,000 concurrent) and \
         ~37 KiB per live turn on a similar machine."
    );
    let idle_sessions = find(records, Kind::Sessions, "idle");
    println!(
        "- idle sessions: {} sessions held after the run; RSS {} KiB before {} turns, {} KiB after; \
         one session's history is {:.1} KiB as JSON (the idle target counts what a session keeps beyond \
         it: {:.1} KiB here).",
        field(idle_sessions, "sessions"),
        field(idle_sessions, "before_kib"),
        field(idle_sessions, "turns"),
        field(idle_sessions, "after_kib"),
        history_kib,
        idle(Kind::Sessions) - history_kib,
    );
    print_census(records, Kind::Durable);
    for kind in Kind::ALL {
        let sequential = find(records, kind, "sequential");
        let concurrent = find(records, kind, "concurrent");
        let memory = find(records, kind, "memory");
        println!(
            "- {}: sequential {} turns × {} runs, CPU µs/turn median {} (min {}, max {}, {} s CPU per run); \
             concurrent {} batches of {CONCURRENT} turns at once per run × {} runs after 2 warm-up batches, \
             median {} (min {}, max {}, {} s CPU per run); \
             memory: RSS {} KiB before, {} KiB at peak ({}), {} turns in their answer round at once, \
             {:.0} ms per batch.",
            kind.name(),
            field(sequential, "turns"),
            field(sequential, "runs"),
            thousands(number(sequential, "cpu_us")),
            thousands(number(sequential, "cpu_us_min")),
            thousands(number(sequential, "cpu_us_max")),
            field(sequential, "cpu_s"),
            field(concurrent, "batches"),
            field(concurrent, "runs"),
            thousands(number(concurrent, "cpu_us")),
            thousands(number(concurrent, "cpu_us_min")),
            thousands(number(concurrent, "cpu_us_max")),
            field(concurrent, "cpu_s"),
            field(memory, "before_kib"),
            field(memory, "peak_kib"),
            if field(memory, "hwm_reset") == "true" {
                "VmHWM after resetting it"
            } else {
                "sampled every 5 ms"
            },
            field(memory, "max_live"),
            number(memory, "wall_us") * CONCURRENT as f64 / 1000.0,
        );
    }
    println!(
        "- memory runs hold each answer open: {}-byte chunks {} ms apart.",
        server::HOLD_CHUNK_BYTES,
        server::HOLD_DELAY.as_millis()
    );
}

/// CPU per turn early and late in a thread's life (the `history` phase), and what durability adds.
fn print_history(records: &[Record], with_pg: bool) {
    let at = |kind: Kind, case: &str| number(find(records, kind, case), "cpu_us");
    let mut kinds = vec![Kind::Sessions, Kind::Durable];
    if with_pg {
        kinds.push(Kind::DurablePg);
    }
    let line: Vec<String> = kinds
        .iter()
        .map(|&kind| {
            let (first, last) = (at(kind, "history_first"), at(kind, "history_last"));
            format!(
                "{} {} → {} ({:.2}×)",
                kind.name(),
                thousands(first),
                thousands(last),
                last / first
            )
        })
        .collect();
    let added = |case: &str| at(Kind::Durable, case) - at(Kind::Sessions, case);
    println!(
        "- history (10 threads, 200 turns each; CPU µs/turn over turns 1–20 → 181–200; every request \
         carries the thread's history, so the floor grows too): {}; what SQLite durability adds: {} → {}.",
        line.join(", "),
        thousands(added("history_first")),
        thousands(added("history_last")),
    );
}

/// What `kind`'s store was asked per turn, one at a time.
fn print_census(records: &[Record], kind: Kind) {
    let store: Vec<&Record> = records
        .iter()
        .filter(|record| field(record, "client") == kind.name() && field(record, "case") == "store")
        .collect();
    let commits: f64 = store
        .iter()
        .filter(|record| field(record, "op").starts_with("commit:"))
        .map(|record| number(record, "calls"))
        .sum();
    println!(
        "- {} store traffic per turn (one at a time; `*` an id; rows and bytes of keys and values): \
         {commits:.1} commits, and",
        kind.name()
    );
    for record in store {
        println!(
            "  - {}: {} calls, {} rows, {} bytes",
            field(record, "op").replacen(':', " ", 1),
            field(record, "calls"),
            field(record, "rows"),
            field(record, "bytes"),
        );
    }
}

/// An integer with thousands separators.
fn thousands(value: f64) -> String {
    let digits = format!("{:.0}", value.round());
    let (sign, digits) = digits
        .strip_prefix('-')
        .map_or(("", digits.as_str()), |rest| ("-", rest));
    let mut out = String::new();
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index) % 3 == 0 {
            out.push(',');
        }
        out.push(digit);
    }
    format!("{sign}{out}")
}

/// Runs a client process to completion and returns its `RESULT` lines.
fn run_client(exe: &Path, url: &str, vars: &[(&str, &str)], timeout: Duration) -> Vec<Record> {
    let mut command = Command::new(exe);
    command
        .env(ROLE_VAR, "client")
        .env(URL_VAR, url)
        .env_remove(MODE_VAR)
        .env_remove(CLIENT_VAR)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for (name, value) in vars {
        command.env(name, value);
    }
    let mut child = ChildGuard(command.spawn().expect("start a client process"));
    let mut stdout = child.0.stdout.take().expect("client stdout");
    let (sender, output) = mpsc::channel();
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stdout.read_to_string(&mut text);
        let _ = sender.send(text);
    });
    let status = wait_timeout(&mut child.0, timeout)
        .unwrap_or_else(|| panic!("a client process ran over {timeout:?}; killed"));
    assert!(status.success(), "a client process failed: {status}");
    let text = output
        .recv_timeout(SERVER_TIMEOUT)
        .expect("the client's output");
    text.lines()
        .filter_map(|line| line.strip_prefix("RESULT "))
        .map(|line| {
            line.split_whitespace()
                .filter_map(|pair| pair.split_once('='))
                .map(|(key, value)| (key.to_owned(), value.to_owned()))
                .collect()
        })
        .collect()
}

/// Waits for `child` for at most `timeout`; `None` if it is still running.
fn wait_timeout(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().expect("poll a child process") {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Kills a child process that is still running when dropped (a panic or a timeout in the bench).
struct ChildGuard(Child);

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// The server process: started with piped stdin and stdout, stopped (stdin closed, then killed if it
/// lingers) when dropped.
struct ServerProcess {
    child: ChildGuard,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    url: String,
}

impl ServerProcess {
    fn start(exe: &Path) -> ServerProcess {
        let mut child = Command::new(exe)
            .env(ROLE_VAR, "server")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the server process");
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().expect("server stdout");
        let (sender, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        let mut server = ServerProcess {
            child: ChildGuard(child),
            stdin,
            lines,
            url: String::new(),
        };
        server.url = server.read_line("its base URL");
        server
    }

    /// The number of requests the server has received.
    fn count(&mut self) -> usize {
        let stdin = self.stdin.as_mut().expect("server stdin");
        writeln!(stdin, "count").expect("write to the server");
        stdin.flush().expect("write to the server");
        let line = self.read_line("a request count");
        line.trim()
            .parse()
            .unwrap_or_else(|_| panic!("the server sent {line:?} for a count"))
    }

    fn read_line(&self, what: &str) -> String {
        self.lines
            .recv_timeout(SERVER_TIMEOUT)
            .unwrap_or_else(|_| panic!("the server did not send {what} within {SERVER_TIMEOUT:?}"))
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        // Closing stdin asks the server to exit; the guard kills it if it has not within 5 s.
        drop(self.stdin.take());
        let _ = wait_timeout(&mut self.child.0, Duration::from_secs(5));
    }
}
