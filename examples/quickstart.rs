//! The quick start: a research assistant with a search tool.
//!
//! ```text
//! cargo run --example quickstart                 # offline, with the scripted demo model
//! cargo run --example quickstart -- "your task"  # a task of your own
//! ```
//!
//! The model calls `search` once, reads the result and answers: two model requests in all.

use noetic_core::{AgentHarness, ContextOptions};
use noetic_examples::quickstart::agent;
use noetic_test_support::{ScriptedModel, ScriptedResponse};

/// An offline stand-in for a real model: with tools offered and no tool output yet, it calls the first
/// tool with the user's message as the query; otherwise it answers from the tool outputs it sees.
fn offline_demo_model() -> ScriptedModel {
    ScriptedModel::responding(|request| {
        let outputs = request.tool_outputs();
        match (request.tools.first(), outputs.is_empty()) {
            (Some(tool), true) => {
                let query = request.user_texts().last().cloned().unwrap_or_default();
                ScriptedResponse::tool_call(
                    "call_demo_1",
                    tool,
                    serde_json::json!({ "query": query }),
                )
            }
            _ => ScriptedResponse::text(&format!("Here is what I found. {}", outputs.join(" "))),
        }
    })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let task = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "Find recent AI news".to_owned());
    if std::env::var_os("OPENROUTER_API_KEY").is_some() {
        eprintln!(
            "note: OPENROUTER_API_KEY is set, but the HTTP providers are not built yet; using the offline demo model"
        );
    } else {
        eprintln!("note: no OPENROUTER_API_KEY set; using the offline demo model");
    }
    let agent = agent("openai/gpt-4o");
    let harness = AgentHarness::builder("researcher")
        .agent_graph(agent.clone())
        .provider("demo", offline_demo_model())
        .build()?;
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
