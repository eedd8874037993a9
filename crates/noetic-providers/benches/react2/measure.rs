//! The client role: runs turns against the server and prints `RESULT key=value …` lines on stdout.
//!
//! Modes (`NOETIC_BENCH_MODE`):
//! - `cpu` (default): `sequential`, then `concurrent`, for the clients in `NOETIC_BENCH_CLIENT`
//!   (`framework`, `sessions`, `bare` or `all`, the default; runs interleave the clients so that a
//!   noisy machine affects them alike);
//! - `sequential`: turns one at a time in one spawned task, `NOETIC_BENCH_TURNS` per run (default:
//!   calibrated to about 1.5 s of CPU), `NOETIC_BENCH_RUNS` runs (default 5);
//! - `concurrent`: batches of 1,000 turns spawned at once, enough batches per run for about 1 s of CPU,
//!   after two warm-up batches;
//! - `paced`: as `concurrent`, every event of every stream paced (its own frame, 20 ms apart), so
//!   the 1,000 turns of a batch are live at once and their events arrive one by one;
//! - `memory` (one client): RSS before, and the peak while 1,000 turns are live at once, their answers
//!   held open by the server. Run in a fresh process so that no earlier measurement has grown the heap.
//! - `history` (sessions clients): [`HISTORY_THREADS`] threads, [`HISTORY_TURNS`] turns each, in rounds
//!   (every thread's turn n, then every thread's turn n + 1); the CPU per turn of the first
//!   [`HISTORY_WINDOW`] rounds (`history_first`) and of the last (`history_last`): what a turn costs
//!   once its thread holds 200 turns of history, which every request carries;
//! - `idle` (one client): RSS before and after [`IDLE_TURNS`] turns one after another; for the
//!   sessions client (one new thread per turn) the growth per turn is the memory per idle session.
//!
//! With `NOETIC_BENCH_OTLP=<traces URL>` the client exports every span there through `noetic-otel`
//! (OTLP/HTTP, batch thread included in the CPU): run one by hand against any OTLP receiver.
//!
//! CPU is the whole process's (utime + stime from `/proc/self/stat`, 10 ms granularity, hence runs of
//! at least about 1 s of CPU); every run happens on a multi-thread runtime with 2 workers.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::census::Tally;
use crate::clients::{Client, Kind};
use crate::{CLIENT_VAR, CONCURRENT, MODE_VAR, RUNS_VAR, TURNS_VAR, URL_VAR};

/// The longest any one run may take.
const RUN_TIMEOUT: Duration = Duration::from_secs(60);
/// The CPU time a sequential run aims at (the clock has 10 ms granularity).
const SEQUENTIAL_CPU: Duration = Duration::from_millis(1500);
/// The CPU time a concurrent run aims at: as many batches of [`CONCURRENT`] turns as that takes.
const CONCURRENT_CPU: Duration = Duration::from_millis(1200);
/// Sequential warm-up turns, also used to calibrate the run length.
const WARMUP_TURNS: usize = 200;
/// Turns in the warm-up of the memory measurement (held open like the measured ones).
const MEMORY_WARMUP_TURNS: usize = 10;
/// Turns (for the sessions client: idle sessions left behind) in the idle measurement.
const IDLE_TURNS: usize = 2000;
/// Threads in the history measurement.
const HISTORY_THREADS: usize = 10;
/// Turns per thread in the history measurement.
const HISTORY_TURNS: usize = 200;
/// Rounds measured at the start and at the end of the history measurement.
const HISTORY_WINDOW: usize = 20;
/// Turns before the idle measurement's first reading.
const IDLE_WARMUP_TURNS: usize = 50;

/// One measured run.
struct Sample {
    cpu: Duration,
    wall: Duration,
    turns: usize,
    errors: usize,
    /// Allocations (and reallocations) during the run, and the bytes they asked for.
    allocations: usize,
    allocated: usize,
}

/// Allocations and bytes allocated so far by the whole process.
fn allocations() -> (usize, usize) {
    let stats = crate::ALLOCATOR.stats();
    (
        stats.allocations + stats.reallocations,
        stats.bytes_allocated,
    )
}

impl Sample {
    fn allocations_per_turn(&self) -> f64 {
        self.allocations as f64 / self.turns as f64
    }

    fn allocated_per_turn(&self) -> f64 {
        self.allocated as f64 / self.turns as f64
    }

    fn cpu_us(&self) -> f64 {
        self.cpu.as_secs_f64() * 1e6 / self.turns as f64
    }

    fn wall_us(&self) -> f64 {
        self.wall.as_secs_f64() * 1e6 / self.turns as f64
    }
}

/// Runs the client role.
/// The OTLP traces URL to export the client's spans to, when set.
pub(crate) const OTLP_VAR: &str = "NOETIC_BENCH_OTLP";

pub(crate) fn client_role() {
    let url = std::env::var(URL_VAR).unwrap_or_else(|_| panic!("{URL_VAR} is not set"));
    let mode = std::env::var(MODE_VAR).unwrap_or_else(|_| "cpu".to_owned());
    let kinds = match std::env::var(CLIENT_VAR).ok().as_deref() {
        None | Some("all") => Kind::ALL.to_vec(),
        Some(names) => names
            .split(',')
            .map(|name| {
                Kind::parse(name).unwrap_or_else(|| {
                    panic!(
                        "{CLIENT_VAR} must be all or a comma-separated list of framework, sessions, \
                         durable, durable-pg and bare, not {names}"
                    )
                })
            })
            .collect(),
    };
    let runs: usize = env_number(RUNS_VAR).unwrap_or(5).max(1);
    let turns = env_number(TURNS_VAR);
    // With `NOETIC_BENCH_OTLP=<traces URL>`, every span is exported there over OTLP/HTTP (the
    // exporter's batch thread counts in this process's CPU): the "OTLP export on" figure.
    let _otel = std::env::var(OTLP_VAR).ok().map(|url| {
        let exporter = noetic_otel::exporter_to(&url).expect("otlp exporter");
        let (layer, guard) = noetic_otel::layer_with_exporter(exporter);
        let subscriber =
            tracing_subscriber::layer::SubscriberExt::with(tracing_subscriber::registry(), layer);
        tracing::subscriber::set_global_default(subscriber).expect("subscriber");
        guard
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("client runtime");
    let header = match mode.as_str() {
        "memory" => Some(crate::HOLD_HEADER),
        "paced" => Some(crate::PACE_HEADER),
        _ => None,
    };
    let clients: Vec<Arc<Client>> = runtime.block_on(async {
        let mut clients = Vec::new();
        for kind in &kinds {
            clients.push(Arc::new(Client::new(*kind, &url, header).await));
        }
        clients
    });
    match mode.as_str() {
        "cpu" => {
            sequential_runs(&runtime, &clients, runs, turns);
            concurrent_runs(&runtime, &clients, runs, "concurrent");
        }
        "sequential" => sequential_runs(&runtime, &clients, runs, turns),
        "concurrent" => concurrent_runs(&runtime, &clients, runs, "concurrent"),
        "paced" => concurrent_runs(&runtime, &clients, runs, "paced"),
        "memory" => {
            assert_eq!(clients.len(), 1, "memory mode measures one client");
            memory(&runtime, &clients[0]);
        }
        "idle" => {
            assert_eq!(clients.len(), 1, "idle mode measures one client");
            idle(&runtime, &clients[0]);
        }
        "history" => {
            for client in &clients {
                history(&runtime, client);
            }
        }
        other => {
            panic!(
                "{MODE_VAR} must be cpu, sequential, concurrent, paced, memory, idle or history, not {other}"
            )
        }
    }
    for client in &clients {
        let (turns, requests) = (client.turns(), client.requests());
        assert_eq!(
            requests,
            2 * turns,
            "{}: {requests} requests for {turns} turns (react-2 makes exactly 2 per turn)",
            client.kind().name()
        );
        println!(
            "RESULT client={} case=requests turns={turns} requests={requests}",
            client.kind().name()
        );
    }
}

fn env_number(name: &str) -> Option<usize> {
    let value = std::env::var(name).ok()?;
    Some(
        value
            .parse()
            .unwrap_or_else(|_| panic!("{name} must be a number, not {value}")),
    )
}

fn sequential_runs(
    runtime: &tokio::runtime::Runtime,
    clients: &[Arc<Client>],
    runs: usize,
    turns: Option<usize>,
) {
    let lengths: Vec<usize> = clients
        .iter()
        .map(|client| {
            let warm = sequential(runtime, client, WARMUP_TURNS);
            turns.unwrap_or_else(|| {
                let per_turn = if warm.cpu.is_zero() {
                    warm.wall / WARMUP_TURNS as u32
                } else {
                    warm.cpu / WARMUP_TURNS as u32
                };
                let wanted = SEQUENTIAL_CPU.as_secs_f64() / per_turn.as_secs_f64().max(1e-6);
                (wanted.ceil() as usize).clamp(300, 20_000)
            })
        })
        .collect();
    let censuses: Vec<_> = clients.iter().map(|client| client.census()).collect();
    let mut samples: Vec<Vec<Sample>> = clients.iter().map(|_| Vec::new()).collect();
    for _ in 0..runs {
        for (index, client) in clients.iter().enumerate() {
            samples[index].push(sequential(runtime, client, lengths[index]));
        }
    }
    for ((client, samples), before) in clients.iter().zip(&mut samples).zip(censuses) {
        let turns: usize = samples.iter().map(|sample| sample.turns).sum();
        report(client.kind(), "sequential", samples, "");
        if let (Some(before), Some(after)) = (before, client.census()) {
            report_census(client.kind(), &before, &after, turns);
        }
    }
}

/// Prints what the store was asked per turn between `before` and `after`, one line per operation and
/// kind of key (`op=put:exec/*/checkpoint`).
fn report_census(
    kind: Kind,
    before: &BTreeMap<String, Tally>,
    after: &BTreeMap<String, Tally>,
    turns: usize,
) {
    let per_turn = |value: u64| value as f64 / turns.max(1) as f64;
    for (name, tally) in after {
        let earlier = before.get(name).copied().unwrap_or_default();
        let calls = tally.calls - earlier.calls;
        if calls == 0 {
            continue;
        }
        println!(
            "RESULT client={} case=store op={} calls={:.2} rows={:.2} bytes={:.0}",
            kind.name(),
            name.replace(' ', ":"),
            per_turn(calls),
            per_turn(tally.rows - earlier.rows),
            per_turn(tally.bytes - earlier.bytes),
        );
    }
}

/// Concurrent runs, reported as `case`.
fn concurrent_runs(
    runtime: &tokio::runtime::Runtime,
    clients: &[Arc<Client>],
    runs: usize,
    case: &str,
) {
    // Two warm-up batches: the first opens the connections a batch needs (so the measured batches reuse
    // a warm pool, as a long-running service would), the second sizes the runs.
    let batches: Vec<usize> = clients
        .iter()
        .map(|client| {
            let first = concurrent(runtime, client, CONCURRENT, 1);
            let warm = concurrent(runtime, client, CONCURRENT, 1);
            assert_eq!(
                first.errors + warm.errors,
                0,
                "{}: a warm-up batch failed",
                client.kind().name()
            );
            let per_batch = warm.cpu.max(Duration::from_millis(10)).as_secs_f64();
            ((CONCURRENT_CPU.as_secs_f64() / per_batch).ceil() as usize).clamp(1, 20)
        })
        .collect();
    let mut samples: Vec<Vec<Sample>> = clients.iter().map(|_| Vec::new()).collect();
    for _ in 0..runs {
        for (index, client) in clients.iter().enumerate() {
            samples[index].push(concurrent(runtime, client, CONCURRENT, batches[index]));
        }
    }
    for ((client, samples), batches) in clients.iter().zip(&mut samples).zip(&batches) {
        let errors: usize = samples.iter().map(|sample| sample.errors).sum();
        report(
            client.kind(),
            case,
            samples,
            &format!(" batches={batches} errors={errors}"),
        );
    }
}

/// Prints the median run (by CPU) of `samples`, with the spread.
fn report(kind: Kind, case: &str, samples: &mut [Sample], extra: &str) {
    samples.sort_by(|a, b| a.cpu_us().total_cmp(&b.cpu_us()));
    let median = &samples[samples.len() / 2];
    let (low, high) = (&samples[0], &samples[samples.len() - 1]);
    // Runs exporting their spans are told apart from the others.
    let case = if std::env::var_os(OTLP_VAR).is_some() {
        format!("{case}_otlp")
    } else {
        case.to_owned()
    };
    println!(
        "RESULT client={} case={case} turns={} runs={} cpu_us={:.1} cpu_us_min={:.1} cpu_us_max={:.1} \
         wall_us={:.1} cpu_s={:.2} allocations={:.0} allocated_bytes={:.0}{extra}",
        kind.name(),
        median.turns,
        samples.len(),
        median.cpu_us(),
        low.cpu_us(),
        high.cpu_us(),
        median.wall_us(),
        median.cpu.as_secs_f64(),
        median.allocations_per_turn(),
        median.allocated_per_turn(),
    );
}

/// `turns` turns one after the other in one spawned task.
fn sequential(runtime: &tokio::runtime::Runtime, client: &Arc<Client>, turns: usize) -> Sample {
    let task_client = Arc::clone(client);
    timed(runtime, client, "sequential", turns, async move {
        for _ in 0..turns {
            task_client.turn().await?;
        }
        Ok(())
    })
}

/// Runs `work` (`turns` turns of `client`, `what` in a failure's message) in one spawned task and
/// measures it; panics if a turn fails or it takes over [`RUN_TIMEOUT`].
fn timed(
    runtime: &tokio::runtime::Runtime,
    client: &Client,
    what: &str,
    turns: usize,
    work: impl Future<Output = Result<(), String>> + Send + 'static,
) -> Sample {
    let alloc_start = allocations();
    let cpu_start = process_cpu();
    let started = Instant::now();
    let outcome = runtime
        .block_on(async move { tokio::time::timeout(RUN_TIMEOUT, tokio::spawn(work)).await });
    let wall = started.elapsed();
    let cpu = process_cpu().saturating_sub(cpu_start);
    let alloc_end = allocations();
    let name = client.kind().name();
    match outcome {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(error))) => panic!("{name}: a {what} turn failed: {error}"),
        Ok(Err(error)) => panic!("{name}: the {what} task panicked: {error}"),
        Err(_) => panic!("{name}: {turns} {what} turns took over {RUN_TIMEOUT:?}"),
    }
    Sample {
        cpu,
        wall,
        turns,
        errors: 0,
        allocations: alloc_end.0 - alloc_start.0,
        allocated: alloc_end.1 - alloc_start.1,
    }
}

/// The history measurement (see the module's doc): `history_first` and `history_last` results.
fn history(runtime: &tokio::runtime::Runtime, client: &Arc<Client>) {
    assert!(
        matches!(
            client.kind(),
            Kind::Sessions | Kind::Durable | Kind::DurablePg
        ),
        "the history measurement needs a sessions client, not {}",
        client.kind().name()
    );
    // Warm up on fresh threads.
    sequential(runtime, client, WARMUP_TURNS);
    let rounds = |range: std::ops::Range<usize>| {
        let task_client = Arc::clone(client);
        let turns = range.len() * HISTORY_THREADS;
        timed(runtime, client, "history", turns, async move {
            for _ in range {
                for thread in 0..HISTORY_THREADS {
                    task_client
                        .turn_on(Some(&format!("history-{thread}")))
                        .await?;
                }
            }
            Ok(())
        })
    };
    let first = rounds(0..HISTORY_WINDOW);
    let middle = HISTORY_TURNS - HISTORY_WINDOW;
    for start in (HISTORY_WINDOW..middle).step_by(HISTORY_WINDOW) {
        rounds(start..(start + HISTORY_WINDOW).min(middle));
    }
    let last = rounds(middle..HISTORY_TURNS);
    report(client.kind(), "history_first", &mut [first], "");
    report(client.kind(), "history_last", &mut [last], "");
}

/// `batches` batches, one after the other, of `turns` turns spawned at once; failed turns are counted,
/// not fatal.
fn concurrent(
    runtime: &tokio::runtime::Runtime,
    client: &Arc<Client>,
    turns: usize,
    batches: usize,
) -> Sample {
    let batch_client = Arc::clone(client);
    let alloc_start = allocations();
    let cpu_start = process_cpu();
    let started = Instant::now();
    let outcome = runtime.block_on(async move {
        tokio::time::timeout(RUN_TIMEOUT, async move {
            let mut errors = 0;
            let mut first_error = None;
            for _ in 0..batches {
                let handles: Vec<_> = (0..turns)
                    .map(|_| {
                        let client = Arc::clone(&batch_client);
                        tokio::spawn(async move { client.turn().await })
                    })
                    .collect();
                for handle in handles {
                    let error = match handle.await {
                        Ok(Ok(_)) => continue,
                        Ok(Err(error)) => error,
                        Err(error) => error.to_string(),
                    };
                    errors += 1;
                    first_error.get_or_insert(error);
                }
            }
            (errors, first_error)
        })
        .await
    });
    let wall = started.elapsed();
    let cpu = process_cpu().saturating_sub(cpu_start);
    let alloc_end = allocations();
    let name = client.kind().name();
    let (errors, first_error) = outcome.unwrap_or_else(|_| {
        panic!("{name}: {batches} × {turns} concurrent turns took over {RUN_TIMEOUT:?}")
    });
    if let Some(error) = first_error {
        eprintln!(
            "react2: {name}: {errors} of {} concurrent turns failed; first: {error}",
            batches * turns
        );
    }
    Sample {
        cpu,
        wall,
        turns: batches * turns,
        errors,
        allocations: alloc_end.0 - alloc_start.0,
        allocated: alloc_end.1 - alloc_start.1,
    }
}

/// RSS before and at the peak of a batch of [`CONCURRENT`] turns that are all live at once.
fn memory(runtime: &tokio::runtime::Runtime, client: &Arc<Client>) {
    let warm = concurrent(runtime, client, MEMORY_WARMUP_TURNS, 1);
    assert_eq!(warm.errors, 0, "memory warm-up failed");
    client.gauge().reset();
    // A sampler thread, as a fallback where the kernel cannot reset VmHWM.
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut peak = 0;
            while !stop.load(Ordering::SeqCst) {
                peak = peak.max(status_kib("VmRSS").unwrap_or(0));
                std::thread::sleep(Duration::from_millis(5));
            }
            peak
        })
    };
    std::thread::sleep(Duration::from_millis(100));
    let before = status_kib("VmRSS").expect("VmRSS in /proc/self/status");
    // "5" resets the peak RSS (VmHWM) to the current RSS (Linux ≥ 4.0).
    let reset = std::fs::write("/proc/self/clear_refs", "5").is_ok();
    let sample = concurrent(runtime, client, CONCURRENT, 1);
    let hwm = status_kib("VmHWM").expect("VmHWM in /proc/self/status");
    stop.store(true, Ordering::SeqCst);
    let sampled = sampler.join().expect("sampler thread");
    let peak = if reset { hwm } else { sampled };
    println!(
        "RESULT client={} case=memory turns={CONCURRENT} before_kib={before} peak_kib={peak} \
         hwm_kib={hwm} sampled_kib={sampled} hwm_reset={reset} max_live={} errors={} wall_us={:.1} \
         per_turn_kib={:.2}",
        client.kind().name(),
        client.gauge().max_live(),
        sample.errors,
        sample.wall_us(),
        peak.saturating_sub(before) as f64 / CONCURRENT as f64,
    );
}

/// RSS before and after [`IDLE_TURNS`] turns one after another: what each turn leaves behind (for the
/// sessions client, an idle session with its history).
fn idle(runtime: &tokio::runtime::Runtime, client: &Arc<Client>) {
    sequential(runtime, client, IDLE_WARMUP_TURNS);
    std::thread::sleep(Duration::from_millis(100));
    let before = status_kib("VmRSS").expect("VmRSS in /proc/self/status");
    let sample = sequential(runtime, client, IDLE_TURNS);
    std::thread::sleep(Duration::from_millis(100));
    let after = status_kib("VmRSS").expect("VmRSS in /proc/self/status");
    let (sessions, history_bytes) = client.sessions().unwrap_or((0, 0));
    println!(
        "RESULT client={} case=idle turns={} before_kib={before} after_kib={after} sessions={sessions} \
         history_bytes={history_bytes} wall_us={:.1} per_turn_kib={:.2}",
        client.kind().name(),
        sample.turns,
        sample.wall_us(),
        after.saturating_sub(before) as f64 / sample.turns as f64,
    );
}

/// The process's CPU time (user + system, all threads), from `/proc/self/stat` in USER_HZ ticks.
pub(crate) fn process_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .expect("a stat line")
        .1
        .split_whitespace()
        .collect();
    // Fields 14 and 15 of stat(5), counted after the command name. USER_HZ is 100 on every mainstream
    // Linux configuration.
    let ticks: u64 =
        fields[11].parse::<u64>().expect("utime") + fields[12].parse::<u64>().expect("stime");
    Duration::from_millis(ticks * 10)
}

/// A `kB` field of `/proc/self/status`.
fn status_kib(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status.lines().find_map(|line| {
        let value = line.strip_prefix(field)?.strip_prefix(':')?;
        value.trim().strip_suffix("kB")?.trim().parse().ok()
    })
}
