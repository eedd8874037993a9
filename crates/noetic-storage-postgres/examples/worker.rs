//! A host of a fleet sharing one PostgreSQL database (see `docs/scaling.md`).
//!
//! ```text
//! export DATABASE_URL=postgres://user:password@localhost/noetic
//! cargo run -p noetic-storage-postgres --example worker                 # serve until Ctrl-C / SIGTERM
//! cargo run -p noetic-storage-postgres --example worker -- send t1 "hi" # accept a message, from any host
//! cargo run -p noetic-storage-postgres --example worker -- show t1      # read a thread, from any host
//! ```
//!
//! Run several `worker`s (on one machine or many) and send messages from anywhere: each thread runs
//! on one worker at a time, and a worker that dies is replaced by another after its lease (10 s here).
//! With `OPENROUTER_API_KEY` set the agent uses OpenRouter; without, the offline demo model.

use std::time::Duration;

use noetic_core::{AgentHarness, ExecuteOptions, ServeOptions, call_model};
use noetic_providers::{DemoModel, OpenRouter};
use noetic_storage_postgres::PostgresStorage;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Ok(url) = std::env::var("DATABASE_URL") else {
        eprintln!("set DATABASE_URL to a PostgreSQL database (postgres://user:password@host/db)");
        std::process::exit(2);
    };
    let store = PostgresStorage::connect(&url).await?;

    let mut _demo = None;
    let builder = AgentHarness::builder("fleet-example");
    let (builder, model) = if std::env::var("OPENROUTER_API_KEY").is_ok_and(|key| !key.is_empty()) {
        (
            builder.provider("openrouter", OpenRouter::from_env()?),
            "openai/gpt-4o-mini",
        )
    } else {
        let demo = DemoModel::start().await?;
        eprintln!("note: no OPENROUTER_API_KEY set; using the offline demo model");
        let builder = builder.provider("demo", demo.provider()?);
        _demo = Some(demo);
        (builder, noetic_providers::DEMO_MODEL_ID)
    };
    let harness = builder
        .agent_graph(
            call_model("chat")
                .model(model)
                .instructions("Answer briefly."),
        )
        .durable(store)
        .shared_threads()
        .lease_ttl(Duration::from_secs(10))
        .build()?;

    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["send", thread, text] => {
            harness
                .execute(text, ExecuteOptions::new().thread_id(thread))
                .await?;
            println!("accepted on {thread}");
        }
        ["show", thread] => match harness.stored_thread(thread).await? {
            None => println!("{thread}: nothing recorded"),
            Some(stored) => {
                for item in &stored.history {
                    if let (Some(role), Some(text)) = (item.role(), item.text()) {
                        println!("{role:?}: {text}");
                    }
                }
                println!("({} accepted, {} pending)", stored.accepted, stored.pending);
            }
        },
        [] => {
            eprintln!("serving; Ctrl-C or SIGTERM drains and stops");
            let mut terminate =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
            let shutdown = async move {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = terminate.recv() => {}
                }
            };
            let report = harness.serve(shutdown, ServeOptions::default()).await?;
            eprintln!("{report:?}");
        }
        _ => {
            eprintln!("usage: worker | worker send THREAD TEXT | worker show THREAD");
            std::process::exit(2);
        }
    }
    Ok(())
}
