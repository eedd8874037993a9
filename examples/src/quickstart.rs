//! The quick start agent: a research assistant that loops around one model call with a search tool.

use noetic_core::{Step, Tool, ToolContext, any, call_model, loop_step, until};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The search tool's arguments.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct SearchArgs {
    /// What to search for.
    pub query: String,
}

/// The search tool's result.
#[derive(Debug, Serialize, JsonSchema)]
pub struct SearchResult {
    /// What was found.
    pub result: String,
}

/// A stand-in web search: it answers every query with a fixed sentence.
pub fn search_tool() -> Tool {
    Tool::new(
        "search",
        "Search the web for information",
        |args: SearchArgs, _ctx: ToolContext| async move {
            Ok(SearchResult {
                result: format!("Results for: {}", args.query),
            })
        },
    )
}

/// The agent graph: call the model with the search tool until it answers without tool calls (it runs its
/// own tool rounds), or ten iterations.
pub fn agent(model: &str) -> Step<String, String> {
    loop_step("researcher-loop")
        .step(
            call_model("researcher-llm")
                .model(model)
                .instructions("You are a research assistant.")
                .tool(search_tool()),
        )
        .until(any([until::no_tool_calls(), until::max_steps(10)]))
        .build()
}
