//! Checkpointed steps per second of a durable run on a SQLite file, and checkpoint time per step at a
//! history of 10 vs 1,000 items.
//!
//! ```text
//! cargo bench -p noetic-storage-sqlite --bench steps     # or: cargo xtask bench
//! ```
//!
//! The run is a loop of `run_code` steps, each appending one ~200-byte item to the context's log, on a
//! harness made durable on a SQLite file: every completed step is checkpointed (its new item, its
//! ledger row and the state record, in one fenced commit) before the next starts. The same loop on a
//! harness without a durable store gives the interpreter's own cost, so the difference is what
//! durability costs per step. Target (DESIGN §11, issue 11): ≥ 2,000 checkpointed steps/s, and
//! checkpoint time per step flat in history.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark: failures are bugs to see at once

use std::time::{Duration, Instant};

use noetic_core::{AgentHarness, Context, ContextOptions, Item, Step, loop_step, run_code, until};
use noetic_storage_sqlite::SqliteStorage;

fn grow(steps: u64) -> Step<u64, u64> {
    let step = run_code("grow", |n: u64, ctx: Context| async move {
        ctx.append_item(Item::user_text(format!("{n:08} {}", "x".repeat(180))));
        Ok::<_, std::convert::Infallible>(n + 1)
    });
    loop_step("grow-loop")
        .step(step)
        .until(until::max_steps(steps))
        .max_iterations(u32::try_from(steps).unwrap())
        .build()
}

/// Runs `steps` steps on `harness` from a context already holding `history` items; the elapsed time.
async fn run(harness: &AgentHarness, steps: u64, history: usize) -> Duration {
    let items = (0..history)
        .map(|n| Item::user_text(format!("{n:08} {}", "x".repeat(180))))
        .collect();
    let ctx = harness.create_context(ContextOptions::new().items(items));
    let graph = grow(steps);
    let start = Instant::now();
    let out = harness.run(&graph, 0_u64, &ctx).await.unwrap();
    let elapsed = start.elapsed();
    assert_eq!(out, steps);
    ctx.close().await;
    elapsed
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStorage::open(dir.path().join("steps.db"))
        .await
        .unwrap();
    let durable = AgentHarness::builder("bench")
        .durable(store)
        .build()
        .unwrap();
    let plain = AgentHarness::builder("bench").build().unwrap();

    const STEPS: u64 = 1_000;
    // Warm up the file and the connections.
    run(&durable, 100, 0).await;
    println!("durable run on SQLite (a checkpoint per completed step), {STEPS} steps:");
    println!("| history at start | steps/s | time per step | of which checkpoint | target |");
    println!("|---|---|---|---|---|");
    for history in [10_usize, 1_000] {
        let durable_time = run(&durable, STEPS, history).await;
        let plain_time = run(&plain, STEPS, history).await;
        let per_step = durable_time / STEPS as u32;
        let checkpoint = durable_time.saturating_sub(plain_time) / STEPS as u32;
        println!(
            "| {history} items | {:.0} | {:.1} µs | {:.1} µs | ≥ 2,000 steps/s, flat in history |",
            STEPS as f64 / durable_time.as_secs_f64(),
            per_step.as_secs_f64() * 1e6,
            checkpoint.as_secs_f64() * 1e6,
        );
    }
}
