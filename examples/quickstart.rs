//! The quick start: a research assistant with a search tool.
//!
//! ```text
//! cargo run --example quickstart                 # offline, with the demo model
//! cargo run --example quickstart -- "your task"  # a task of your own
//! OPENROUTER_API_KEY=sk-or-... cargo run --example quickstart   # a real model through OpenRouter
//! ```
//!
//! The model calls `search` once, reads the result and answers: two model requests in all. Without a
//! key it talks to the offline demo model, a deterministic OpenResponses server on 127.0.0.1 inside this
//! process, over the same HTTP path as a real provider.

use noetic_core::{AgentHarness, ContextOptions};
use noetic_examples::quickstart::agent;
use noetic_providers::{DemoModel, OpenRouter};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let task = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "Find recent AI news".to_owned());
    let model = std::env::var("NOETIC_MODEL").unwrap_or_else(|_| "openai/gpt-4o".to_owned());

    // Keep the demo server alive for the whole run: it stops when dropped.
    let mut _demo = None;
    let builder = AgentHarness::builder("researcher");
    let builder = if std::env::var("OPENROUTER_API_KEY").is_ok_and(|key| !key.trim().is_empty()) {
        eprintln!("note: using OpenRouter with model {model}");
        builder.provider("openrouter", OpenRouter::from_env()?)
    } else {
        let demo = DemoModel::start().await?;
        eprintln!(
            "note: no OPENROUTER_API_KEY set; using the offline demo model at {}",
            demo.base_url()
        );
        let provider = demo.provider()?;
        _demo = Some(demo);
        builder.provider("demo", provider)
    };
    let agent = agent(&model);
    let harness = builder.agent_graph(agent.clone()).build()?;
    let ctx = harness.create_context(ContextOptions::new());
    let answer = harness.run(&agent, task, &ctx).await?;
    println!("{answer}");
    let tokens = ctx.tokens();
    eprintln!(
        "({} input tokens, {} output tokens)",
        tokens.input_tokens, tokens.output_tokens
    );
    Ok(())
}
