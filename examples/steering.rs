//! Steering a running turn: while the agent's tool is working, the user sends a new message with
//! `next-item` delivery; it joins the same turn at the next steer point instead of waiting for the turn
//! to end, and the model's next request carries it.
//!
//! ```text
//! cargo run --example steering
//! ```
//!
//! Runs offline against the demo model (a real provider works the same way). Prints the session's
//! framework events as they happen, then the answer.

use std::time::Duration;

use futures_util::StreamExt;
use noetic_core::{
    AgentHarness, DeliveryMode, ExecuteOptions, FrameworkEvent, Scope, StreamEvent, Tool,
    ToolContext, ToolError, any, call_model, loop_step, until,
};
use noetic_providers::DemoModel;
use schemars::JsonSchema;
use serde::Deserialize;

#[derive(Deserialize, JsonSchema)]
struct Topic {
    /// What to research.
    topic: String,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let demo = DemoModel::start().await?;
    eprintln!("note: using the offline demo model at {}", demo.base_url());

    // A slow tool: the window in which the user steers.
    let research = Tool::new(
        "research",
        "Research a topic",
        |args: Topic, _ctx: ToolContext| async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            Ok::<_, ToolError>(format!("three sources about {}", args.topic))
        },
    );
    let agent = loop_step("agent")
        .step(call_model("assistant").model("demo").tool(research))
        .until(any([until::no_tool_calls(), until::max_steps(5)]));
    let harness = AgentHarness::builder("researcher")
        .provider("demo", demo.provider()?)
        .agent_graph(agent)
        .build()?;

    // Subscribe before the first execute: every event of the turn arrives, in order.
    let mut events = harness.events(Scope::default());
    harness
        .execute("Research the history of Rust", ExecuteOptions::default())
        .await?;

    while let Some(event) = events.next().await {
        if let StreamEvent::Framework(framework) = &*event {
            println!(
                "event: {}",
                event.to_json(harness.name())["type"]
                    .as_str()
                    .unwrap_or_default()
            );
            match framework {
                FrameworkEvent::ToolCallStarted { name, .. } => {
                    println!("  the agent is running `{name}`; the user steers now");
                    harness
                        .execute(
                            "Focus on the 2015 1.0 release.",
                            ExecuteOptions::default()
                                .delivery_mode(DeliveryMode::NextItem)
                                .message_id("steer-1"),
                        )
                        .await?;
                }
                FrameworkEvent::SteerApplied {
                    message_ids,
                    point,
                    round,
                } => {
                    println!("  steer {message_ids:?} applied at {point:?} in round {round}");
                }
                FrameworkEvent::TurnCompleted { .. } | FrameworkEvent::TurnAborted { .. } => break,
                _ => {}
            }
        }
    }
    let response = harness.agent_response(Scope::default()).await?;
    println!("answer: {}", response.text);
    Ok(())
}
