//! Steps in child processes, with `noetic-platform-unix`'s `LocalSubprocess`.
//!
//! 1. A `run_code` registered in a `StepRegistry` runs in a child process (this binary, re-executed):
//!    its result, its events and its spend come back to the host.
//! 2. A detached child outlives its host: a first host process starts it and exits; this process,
//!    as the restarted host, finds it through the durable manifests (`list_live`) and rejoins it
//!    (`restore`) for its result.
//!
//! Run with `cargo run -p noetic-examples --example subprocess`. No key, no network.

use std::time::Duration;

use noetic_core::{
    AgentHarness, Context, ContextOptions, DetachedOptions, Environment, Error, FrameworkEvent,
    Runtime, Spend, Step, StepRegistry, StreamEvent, TokenUsage, run_code,
};
use noetic_platform_unix::{LocalSubprocess, serve_if_child};
use noetic_storage_sqlite::SqliteStorage;
use serde_json::{Value, json};

/// Sums 1..=n, charging a pretend model call's spend (which travels back to the host).
fn crunch() -> Step<u64, Value> {
    run_code("crunch", |n: u64, ctx: Context| async move {
        ctx.charge(Spend {
            usage: TokenUsage {
                input_tokens: n,
                output_tokens: 3,
                ..TokenUsage::default()
            },
            cost: Some(0.001),
        });
        let sum: u64 = (1..=n).sum();
        Ok::<_, Error>(json!({"sum": sum, "pid": std::process::id()}))
    })
    .build()
}

/// A report that takes long enough for its first host to be gone before it finishes.
fn report() -> Step<String, String> {
    run_code("report", |topic: String, _: Context| async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        Ok::<_, Error>(format!(
            "report on {topic}: done in child {}",
            std::process::id()
        ))
    })
    .build()
}

/// The steps that run out of process. Host and child build the same registry: a step holds
/// closures, so the host sends the step's id and its input, and the child runs its own copy.
fn registry() -> StepRegistry {
    StepRegistry::new().register(crunch()).register(report())
}

fn adapter(dir: &std::path::Path) -> LocalSubprocess {
    LocalSubprocess::new(&registry()).socket_dir(dir)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A child serves the step its host asked for and exits here; a host goes on.
    serve_if_child(&registry(), || Runtime::builder("worker").build());
    let executor = tokio::runtime::Runtime::new()?;
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("--first-host") => executor.block_on(first_host(args.get(2).ok_or("dir")?.into())),
        _ => executor.block_on(demo()),
    }
}

async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    let dir =
        std::env::temp_dir().join(format!("noetic-subprocess-example-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let result = attached_and_detached(&dir).await;
    let _ = std::fs::remove_dir_all(&dir);
    result
}

async fn attached_and_detached(dir: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
    // 1. A step in a child process.
    let harness = AgentHarness::builder("host")
        .environment(Environment::new().subprocess(adapter(dir)))
        .build()?;
    let sink = |event: StreamEvent| {
        if let StreamEvent::Framework(FrameworkEvent::SubprocessEvent { event, .. }) = event {
            println!("  child event: {}", event["type"].as_str().unwrap_or("?"));
        }
    };
    let ctx = harness.create_context(ContextOptions::new().event_sink(std::sync::Arc::new(sink)));
    println!("host {} runs `crunch` out of process", std::process::id());
    let output = harness.run(&crunch(), 100, &ctx).await?;
    println!(
        "crunch(100) = {} in child {}; spent {} input tokens, ${:.3}",
        output["sum"],
        output["pid"],
        ctx.tokens().input_tokens,
        ctx.cost().unwrap_or(0.0)
    );

    // 2. A detached child, started by a host that exits.
    let first = std::process::Command::new(std::env::current_exe()?)
        .arg("--first-host")
        .arg(dir)
        .output()?;
    if !first.status.success() {
        return Err(format!(
            "first host failed: {}",
            String::from_utf8_lossy(&first.stderr)
        )
        .into());
    }
    print!("{}", String::from_utf8_lossy(&first.stdout));

    // This process is the restarted host: same manifests, same socket dir.
    let manifests = SqliteStorage::open(dir.join("manifests.db")).await?;
    let restarted = AgentHarness::builder("host")
        .environment(Environment::new().subprocess(adapter(dir).manifests(manifests)))
        .build()?;
    let live = restarted.runtime().subprocess().list_live().await?;
    for child in &live {
        println!(
            "restarted host finds live child {} (step `{}`, pid {}, detached: {})",
            child.handle_id, child.step_id, child.pid, child.detached
        );
    }
    let child = live.first().ok_or("the detached child is gone")?;
    let handle = restarted
        .restore_detached::<String>(&child.execution_id)
        .await?;
    let report = handle.wait(Some(Duration::from_secs(30))).await?;
    println!("rejoined: {report}");
    Ok(())
}

/// The first host: starts the detached child and exits without waiting for it.
async fn first_host(dir: std::path::PathBuf) -> Result<(), Box<dyn std::error::Error>> {
    let manifests = SqliteStorage::open(dir.join("manifests.db")).await?;
    let harness = AgentHarness::builder("host")
        .environment(Environment::new().subprocess(adapter(&dir).manifests(manifests)))
        .build()?;
    let ctx = harness.create_context(ContextOptions::new());
    let handle = harness
        .detached_spawn(
            &report(),
            "subprocesses".to_owned(),
            &ctx,
            DetachedOptions::new(),
        )
        .await?;
    println!(
        "first host {} started detached child {} (pid {}) and exits",
        std::process::id(),
        handle.handle_id(),
        handle.pid().unwrap_or_default()
    );
    Ok(())
}
