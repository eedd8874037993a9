//! Claude through the Anthropic Messages API, natively: a weather question answered with one tool call.
//!
//! ```text
//! cargo run --example anthropic                                  # offline: recorded Claude replies
//! ANTHROPIC_API_KEY=sk-ant-... cargo run --example anthropic     # the real API
//! ```
//!
//! Without a key it says so and points the same provider at a local mock server replaying two real
//! recorded Claude responses (`fixtures/anthropic`: a `tool_use` of `weather`, then the answer), so the
//! request, the stream decoding and the tool round trip all run over HTTP as they would against the API.

use noetic_core::{
    AgentHarness, ContextOptions, Tool, ToolContext, any, call_model, loop_step, until,
};
use noetic_providers::Anthropic;
use noetic_test_support::{MockReply, MockServer, anthropic_fixtures_dir};
use schemars::JsonSchema;
use serde::Deserialize;

#[derive(Debug, Deserialize, JsonSchema)]
struct WeatherArgs {
    /// The place, e.g. `Florence,Italy`.
    location: String,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let weather = Tool::new(
        "weather",
        "The current weather at a location",
        |args: WeatherArgs, _ctx: ToolContext| async move { Ok(format!("40 C in {}", args.location)) },
    );
    // Keep the mock server alive for the whole run: it stops when dropped.
    let mut _server = None;
    let provider = match Anthropic::from_env() {
        Ok(provider) => {
            eprintln!("note: using the Anthropic API");
            provider
        }
        Err(_) => {
            let server = MockServer::start().await;
            for file in [
                "anthropic.text-then-tool.claude-sonnet-4.turn1.sse",
                "anthropic.text-after-tool-result.claude-sonnet-4.turn2.sse",
            ] {
                server.push(MockReply::fixture_file(
                    &anthropic_fixtures_dir().join(file),
                ));
            }
            eprintln!(
                "note: no ANTHROPIC_API_KEY set; replaying recorded Claude responses from a mock server at {}",
                server.base_url()
            );
            let provider = Anthropic::builder("offline")
                .base_url(server.base_url())
                .build()?;
            _server = Some(server);
            provider
        }
    };
    let agent = loop_step("weather-loop")
        .step(
            call_model("weather-llm")
                .model("claude-sonnet-4-0")
                .instructions("You are a helpful assistant")
                .tool(weather),
        )
        .until(any([until::no_tool_calls(), until::max_steps(5)]))
        .build();
    let harness = AgentHarness::builder("weather")
        .provider("anthropic", provider)
        .build()?;
    let ctx = harness.create_context(ContextOptions::new());
    let answer = harness
        .run(
            &agent,
            "What's the weather in Florence,Italy?".to_owned(),
            &ctx,
        )
        .await?;
    println!("{answer}");
    let tokens = ctx.tokens();
    eprintln!(
        "({} input tokens, {} output tokens)",
        tokens.input_tokens, tokens.output_tokens
    );
    Ok(())
}
