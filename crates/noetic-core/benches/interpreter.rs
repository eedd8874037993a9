//! Interpreter overhead: per step (a loop of 10,000 `run_code` steps) and per scripted model round
//! (a `call_model` with an in-process scripted provider, no HTTP), printed next to DESIGN.md §16.
//!
//! Run with `cargo xtask bench` (or `cargo bench -p noetic-core --bench interpreter`). Figures are the
//! median of several runs, as wall time on a current-thread runtime (which is CPU time of the one thread
//! doing the work) and, where the OS reports it, the process CPU time.

use std::hint::black_box;
use std::time::{Duration, Instant};

use noetic_core::{
    AgentHarness, Context, ContextOptions, Tool, ToolContext, ToolError, call_model, loop_step,
    until,
};
use noetic_test_support::{ScriptedModel, ScriptedResponse};
use serde_json::json;

const STEPS: u64 = 10_000;
const RUNS: usize = 7;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// Process CPU time (user + system), from /proc on Linux.
fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // Linux reports in USER_HZ, 100 on every mainstream configuration.
    Some(Duration::from_millis(ticks * 10))
}

struct Measure {
    wall: Duration,
    cpu: Option<Duration>,
}

fn measure(runs: usize, mut body: impl FnMut()) -> Measure {
    body(); // warm up
    let mut walls = Vec::with_capacity(runs);
    let cpu_start = cpu_time();
    for _ in 0..runs {
        let started = Instant::now();
        body();
        walls.push(started.elapsed());
    }
    let cpu = match (cpu_start, cpu_time()) {
        (Some(start), Some(end)) => Some((end - start) / runs as u32),
        _ => None,
    };
    walls.sort();
    Measure {
        wall: walls[walls.len() / 2],
        cpu,
    }
}

fn micros(duration: Duration, per: u64) -> f64 {
    duration.as_secs_f64() * 1e6 / per as f64
}

fn row(name: &str, measure: &Measure, per: u64, unit: &str, target: &str) {
    let cpu = measure
        .cpu
        .map(|cpu| format!("{:>10.2}", micros(cpu, per)))
        .unwrap_or_else(|| format!("{:>10}", "n/a"));
    println!(
        "| {name:<44} | {:>10.2} | {cpu} | {unit:<10} | {target} |",
        micros(measure.wall, per)
    );
}

fn main() {
    let runtime = runtime();
    println!(
        "| benchmark                                    |    wall µs |     cpu µs | per        | target (DESIGN.md §16) |"
    );
    println!(
        "|----------------------------------------------|-----------:|-----------:|------------|------------------------|"
    );

    // 1. Per step: a loop whose body is one run_code step, 10,000 iterations.
    let harness = AgentHarness::builder("bench").build().expect("harness");
    let counter = loop_step("count")
        .step(noetic_core::run_code(
            "inc",
            |n: u64, _ctx: Context| async move { Ok::<_, std::convert::Infallible>(n + 1) },
        ))
        .until(until::max_steps(STEPS))
        .max_iterations(STEPS as u32 + 1)
        .build();
    let steps = measure(RUNS, || {
        let ctx = harness.create_context(ContextOptions::new());
        let out = runtime
            .block_on(harness.run(&counter, 0u64, &ctx))
            .expect("loop runs");
        assert_eq!(out, STEPS);
        black_box(out);
    });
    row(
        "run_code step inside a loop (10,000 steps)",
        &steps,
        STEPS,
        "step",
        "no target; part of ≤ 1,000 µs per turn",
    );

    // 2. Per scripted round: a call_model answering with ~200 words in 50 deltas.
    let answer = "word ".repeat(200);
    let rounds: u64 = 200;
    let model = ScriptedModel::responding(move |_| ScriptedResponse::text_in_deltas(&answer, 20));
    let harness = AgentHarness::builder("bench")
        .provider("scripted", model.clone())
        .build()
        .expect("harness");
    let step = call_model("llm").model("m").build();
    let per_round = measure(RUNS, || {
        for _ in 0..rounds {
            let ctx = harness.create_context(ContextOptions::new());
            black_box(
                runtime
                    .block_on(harness.run(&step, "question".to_owned(), &ctx))
                    .expect("round"),
            );
        }
    });
    row(
        "call_model round, scripted (50 deltas)",
        &per_round,
        rounds,
        "round",
        "no target; HTTP excluded",
    );

    // 3. A react-2 turn without HTTP: tool call round, tool, 50-delta answer, in a loop around call_model.
    let answer = "word ".repeat(200);
    let model = ScriptedModel::responding(move |request| {
        if request.tool_outputs().is_empty() {
            ScriptedResponse::tool_call("call_1", "lookup", json!({"query": "x"}))
        } else {
            ScriptedResponse::text_in_deltas(&answer, 20)
        }
    });
    let lookup = Tool::new(
        "lookup",
        "looks up",
        |args: Args, _ctx: ToolContext| async move { Ok::<_, ToolError>(args.query) },
    );
    let harness = AgentHarness::builder("bench")
        .provider("scripted", model)
        .build()
        .expect("harness");
    let agent = loop_step("agent")
        .step(call_model("llm").model("m").tool(lookup))
        .until(noetic_core::any([
            until::no_tool_calls(),
            until::max_steps(10),
        ]))
        .build();
    let turns: u64 = 200;
    let per_turn = measure(RUNS, || {
        for _ in 0..turns {
            let ctx = harness.create_context(ContextOptions::new());
            black_box(
                runtime
                    .block_on(harness.run(&agent, "question".to_owned(), &ctx))
                    .expect("turn"),
            );
        }
    });
    row(
        "react-2 turn, scripted (2 rounds + 1 tool)",
        &per_turn,
        turns,
        "turn",
        "framework share of ≤ 1,000 µs/turn",
    );
    println!();
    println!(
        "The §16 targets are for a whole turn over loopback HTTP next to a bare reqwest client; they are"
    );
    println!(
        "measured end to end once noetic-providers exists. These figures are the framework alone."
    );
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Args {
    query: String,
}
