//! Durability: a run killed mid-way by a crash, and resumed by a second process from its SQLite file.
//!
//! ```text
//! cargo run --example durable
//! ```
//!
//! The example runs itself three times: the parent starts a first process that runs a three-step agent
//! (research with a tool, a `crash-point` step, a summary) on a SQLite file and aborts the process at
//! the crash point, as a power cut would; then a second process resumes the execution from the same
//! file. The research step is not run again (it was recorded: no model request, no tool call), the
//! crash point runs again and passes, and the summary runs. Both processes' output is printed.
//! It talks to the offline demo model (a deterministic OpenResponses server on 127.0.0.1 inside each
//! process), so it needs no key.

use std::process::Command;

use noetic_core::{
    AgentHarness, ContextOptions, FrameworkEvent, RestoreOptions, Step, StreamEvent, Tool,
    ToolContext, call_model, run_code, sequence,
};
use noetic_providers::DemoModel;
use noetic_storage_sqlite::SqliteStorage;
use schemars::JsonSchema;
use serde::Deserialize;

/// How long an execution's lease lasts unless its holder renews it.
const LEASE_TTL: std::time::Duration = std::time::Duration::from_millis(500);

/// Set in the first process only: the crash point aborts it.
const CRASH: &str = "NOETIC_EXAMPLE_CRASH";

#[derive(Deserialize, JsonSchema)]
struct LookupArgs {
    /// What to look up.
    topic: String,
}

fn agent(model: &str) -> Step<String, String> {
    let lookup = Tool::new(
        "lookup",
        "Look a topic up in the encyclopedia",
        |args: LookupArgs, ctx: ToolContext| async move {
            // The key is the same if this call is run again after a crash: use it to make a side
            // effect (a payment, an email) happen once.
            eprintln!(
                "  tool lookup runs (idempotency key {})",
                ctx.idempotency_key()
            );
            Ok::<_, noetic_core::ToolError>(format!("{} is a durable topic", args.topic))
        },
    );
    sequence("durable-agent")
        .step(
            call_model("research")
                .model(model)
                .instructions("Research the topic with the lookup tool.")
                .tool(lookup),
        )
        .step(run_code("crash-point", |notes: String, _| async move {
            if std::env::var_os(CRASH).is_some() {
                eprintln!("  crash-point: aborting the process (as a power cut would)");
                std::process::abort();
            }
            eprintln!("  crash-point: passing");
            Ok::<_, std::convert::Infallible>(notes)
        }))
        .step(
            call_model("summary")
                .model(model)
                .instructions("Summarize the research in one sentence."),
        )
        .build()
}

async fn harness(db: &str, demo: &DemoModel) -> Result<AgentHarness, Box<dyn std::error::Error>> {
    let model = noetic_providers::DEMO_MODEL_ID;
    Ok(AgentHarness::builder("durable")
        .provider("demo", demo.provider()?)
        .agent_graph(agent(model))
        .durable(SqliteStorage::open(db).await?)
        // A crashed holder's lease blocks a resume until it expires: keep it short for the demo.
        .lease_ttl(LEASE_TTL)
        .build()?)
}

/// Prints the events that show what a resume replays.
fn sink() -> std::sync::Arc<dyn noetic_core::EventSink> {
    std::sync::Arc::new(|event: StreamEvent| {
        if let StreamEvent::Framework(FrameworkEvent::StepReplayed { step_id, .. }) = &event {
            eprintln!("  step {step_id} replayed from the ledger (not run again)");
        }
    })
}

async fn first(db: &str) -> Result<(), Box<dyn std::error::Error>> {
    let demo = DemoModel::start().await?;
    let harness = harness(db, &demo).await?;
    let ctx = harness.create_context(ContextOptions::new().event_sink(sink()));
    println!("execution: {}", ctx.id());
    let graph = harness.agent_graph::<String, String>()?;
    let answer = harness
        .run(&graph, "the Rust borrow checker".to_owned(), &ctx)
        .await?;
    println!("unexpected: the first process finished: {answer}");
    Ok(())
}

async fn second(db: &str, id: &str) -> Result<(), Box<dyn std::error::Error>> {
    let demo = DemoModel::start().await?;
    let harness = harness(db, &demo).await?;
    let ctx = harness
        .restore(id, RestoreOptions::new().event_sink(sink()))
        .await?;
    let graph = harness.agent_graph::<serde_json::Value, serde_json::Value>()?;
    let answer = loop {
        match harness.resume_with(&graph, &ctx).await {
            // The crashed process still "holds" the execution until its lease expires.
            Err(noetic_core::Error::LeaseHeld { expires_at_ms, .. }) => {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)?
                    .as_millis() as u64;
                let wait = expires_at_ms.saturating_sub(now) + 10;
                eprintln!("  the crashed holder's lease expires in {wait} ms: waiting for it");
                tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
            }
            other => break other?,
        }
    };
    println!("answer: {answer}");
    let tokens = ctx.tokens();
    println!(
        "whole execution: {} input tokens, {} output tokens",
        tokens.input_tokens, tokens.output_tokens
    );
    ctx.close().await;
    Ok(())
}

fn run_child(args: &[&str], crash: bool) -> Result<std::process::Output, std::io::Error> {
    let mut command = Command::new(std::env::current_exe()?);
    command.args(args);
    if crash {
        command.env(CRASH, "1");
    } else {
        command.env_remove(CRASH);
    }
    command.output()
}

fn show(label: &str, output: &std::process::Output) {
    println!("--- {label} (exit: {}) ---", output.status);
    print!("{}", String::from_utf8_lossy(&output.stderr));
    print!("{}", String::from_utf8_lossy(&output.stdout));
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["first", db] => return first(db).await,
        ["second", db, id] => return second(db, id).await,
        _ => {}
    }
    eprintln!("note: using the offline demo model");
    let dir = std::env::temp_dir().join(format!("noetic-durable-example-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let db = dir.join("runs.db");
    let db = db.to_str().ok_or("a UTF-8 temp path")?;

    let crashed = run_child(&["first", db], true)?;
    show("first process", &crashed);
    let stdout = String::from_utf8_lossy(&crashed.stdout);
    let id = stdout
        .lines()
        .find_map(|line| line.strip_prefix("execution: "))
        .ok_or("the first process printed no execution id")?
        .to_owned();
    if crashed.status.success() {
        return Err("the first process was meant to crash".into());
    }

    let resumed = run_child(&["second", db, &id], false)?;
    show("second process", &resumed);
    std::fs::remove_dir_all(&dir)?;
    if !resumed.status.success() {
        return Err("the second process failed".into());
    }
    Ok(())
}
