//! MCP: an agent using the tools of a Model Context Protocol server, on the offline demo model.
//!
//! ```text
//! cargo run -p noetic-examples --example mcp
//! ```
//!
//! The example starts a small MCP server of its own as a child process over stdio (the test server of
//! `noetic-test-support`, built on the official `rmcp` SDK; `cargo build -p noetic-test-support --bin
//! noetic-mcp-test-server` first when running only this package), lists its tools, calls one directly,
//! and runs an agent that is offered the server's `echo` tool as `demo__echo`. With a real server, give
//! its command instead: `McpCommand::parse("name", "npx -y @modelcontextprotocol/server-everything")`.

use noetic_core::{AgentHarness, CallModelDefaults, ContextOptions, call_model};
use noetic_mcp::{McpCommand, McpServer};
use noetic_providers::DemoModel;
use noetic_test_support::mcp::mcp_test_server_path;
use serde_json::json;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    eprintln!(
        "note: no API key needed: the offline demo model answers, the MCP server runs locally"
    );
    let command = McpCommand::new(mcp_test_server_path().to_string_lossy());
    // The model is offered `echo` only; `add` stays callable from code.
    let server = McpServer::stdio("demo", command)
        .allow_tools(["echo"])
        .connect()
        .await?;
    println!("offered tools: {:?}", server.tool_names());
    let sum = server
        .call_tool("add", json!({"a": 19, "b": 23}))
        .await
        .map_err(|error| error.message().to_owned())?;
    println!("add(19, 23) called directly: {sum}");

    let demo = DemoModel::start().await?;
    let agent = call_model("assistant")
        .model("demo-model")
        .instructions("Use the MCP server's tools.")
        .tools_from(server.clone())
        // Checked before the first request: the server must have `echo`.
        .requires("demo", "echo")
        .build();
    let harness = AgentHarness::builder("mcp-demo")
        .provider("demo", demo.provider()?)
        .call_model_defaults(CallModelDefaults::default().provider("demo"))
        .connection(server.clone())
        .build()?;
    let ctx = harness.create_context(ContextOptions::new());
    let answer = harness
        .run(&agent, "Hello, server".to_owned(), &ctx)
        .await?;
    println!("answer: {answer}");

    // Closes the server's stdin, then SIGTERM, SIGKILL; then whatever is left of its process group.
    server.shutdown().await;
    Ok(())
}
