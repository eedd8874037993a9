//! Surviving restarts with append-only JSONL history: every item of the conversation is one line in a
//! file; on start the file is read back with `seed_session_history`, and after each turn only the new
//! items are appended (the write cost never grows with the history).
//!
//! ```text
//! cargo run --example jsonl_history                  # history in a temporary file, two "runs"
//! cargo run --example jsonl_history -- chat.jsonl    # history in chat.jsonl: run it again to continue
//! ```

use std::fs::OpenOptions;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use noetic_core::item::Item;
use noetic_core::{AgentHarness, ExecuteOptions, Scope, call_model};
use noetic_providers::DemoModel;

const THREAD: &str = "task-T-abc123";

/// Reads the items back, one JSON item per line. A line that does not parse is reported with its line
/// number, and nothing already read is lost.
fn read_items(path: &Path) -> Result<Vec<Item>, Box<dyn std::error::Error>> {
    let Ok(file) = std::fs::File::open(path) else {
        return Ok(Vec::new());
    };
    let mut items = Vec::new();
    for (number, line) in BufReader::new(file).lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let at =
            |error: &dyn std::fmt::Display| format!("{}:{}: {error}", path.display(), number + 1);
        let value: serde_json::Value = serde_json::from_str(&line).map_err(|error| at(&error))?;
        // Valid JSON that is not an item (a corrupt or foreign line) names its line too.
        items.push(Item::from_json(value, "stored").map_err(|error| at(&error))?);
    }
    Ok(items)
}

fn append_items(path: &Path, items: &[Item]) -> Result<(), Box<dyn std::error::Error>> {
    let mut file = OpenOptions::new().create(true).append(true).open(path)?;
    for item in items {
        writeln!(file, "{}", serde_json::to_string(item)?)?;
    }
    file.flush()?;
    Ok(())
}

/// One "process": a fresh harness that continues the conversation stored at `path`.
async fn run_once(
    path: &Path,
    demo: &DemoModel,
    prompt: &str,
) -> Result<String, Box<dyn std::error::Error>> {
    let harness = AgentHarness::builder("chat")
        .provider("demo", demo.provider()?)
        .agent_graph(call_model("assistant").model("demo"))
        .build()?;
    let prior = read_items(path)?;
    let known = prior.len();
    harness.seed_session_history(THREAD, prior);
    harness
        .execute(prompt, ExecuteOptions::default().thread_id(THREAD))
        .await?;
    let response = harness.agent_response(Scope::thread(THREAD)).await?;
    append_items(path, &response.items[known..])?;
    Ok(response.text)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = match std::env::args().nth(1) {
        Some(path) => PathBuf::from(path),
        None => {
            let path =
                std::env::temp_dir().join(format!("noetic-history-{}.jsonl", std::process::id()));
            let _ = std::fs::remove_file(&path);
            path
        }
    };
    let demo = DemoModel::start().await?;
    eprintln!(
        "note: using the offline demo model; history in {}",
        path.display()
    );

    println!(
        "run 1: {}",
        run_once(&path, &demo, "My name is Ada.").await?
    );
    println!(
        "run 2: {}",
        run_once(&path, &demo, "What did I tell you?").await?
    );
    let lines = std::fs::read_to_string(&path)?.lines().count();
    println!("{lines} items stored in {}", path.display());
    Ok(())
}
