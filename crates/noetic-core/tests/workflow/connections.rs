//! `connections` (our extension of the format): MCP servers declared at the top level, parsed with
//! pointers on every error, written back, and referenced from a `callModel`'s tools by name, which
//! offers the tool source the host registered under that name.

use std::sync::Arc;

use noetic_core::workflow::{
    ConnectionKind, HydrateOptions, McpDecl, WorkflowDocument, WorkflowRegistry,
};
use noetic_core::{ContextOptions, Tool, ToolContext, ToolError, ToolSource};
use noetic_test_support::{ScriptedModel, ScriptedResponse, harness_with};
use serde_json::{Value, json};

use crate::support::{assert_invalid, registry};

fn with_connections(connections: Value, tools: Value) -> Value {
    json!({"version": 1, "connections": connections,
        "root": {"kind": "callModel", "id": "assistant", "model": "gpt-test",
            "instructions": "Help.", "tools": tools}})
}

#[test]
fn declared_mcp_servers_parse_and_write_back_unchanged() {
    let document = with_connections(
        json!({
            "calc": {"type": "mcp", "command": ["calc-server", "--stdio"], "passEnv": ["CALC_HOME"],
                "allowTools": ["add"], "denyTools": ["die"]},
            "docs": {"type": "mcp", "url": "https://mcp.example.com/mcp"}
        }),
        json!([{"type": "calc"}]),
    );
    let parsed = WorkflowDocument::from_value(document.clone()).unwrap();

    let connections = parsed.connections.as_ref().unwrap();
    assert_eq!(connections.len(), 2);
    assert_eq!(connections[0].name, "calc");
    assert_eq!(
        connections[0].kind,
        ConnectionKind::Mcp(McpDecl {
            command: Some(vec!["calc-server".to_owned(), "--stdio".to_owned()]),
            url: None,
            pass_env: vec!["CALC_HOME".to_owned()],
            allow_tools: Some(vec!["add".to_owned()]),
            deny_tools: vec!["die".to_owned()],
        })
    );
    assert_eq!(parsed.to_value(), document);
    assert_eq!(
        WorkflowDocument::from_value(parsed.to_value()).unwrap(),
        parsed
    );
}

#[test]
fn a_malformed_declaration_is_invalid_at_its_pointer() {
    for (connections, path, message) in [
        (
            json!({"calc": {"type": "mcp"}}),
            "/connections/calc",
            "exactly one of `command`",
        ),
        (
            json!({"calc": {"type": "mcp", "command": ["x"], "url": "http://h/mcp"}}),
            "/connections/calc",
            "exactly one of `command`",
        ),
        (
            json!({"calc": {"type": "mcp", "command": []}}),
            "/connections/calc/command",
            "at least 1",
        ),
        (
            json!({"calc": {"type": "mcp", "url": "ftp://h"}}),
            "/connections/calc/url",
            "http:// or https://",
        ),
        (
            json!({"calc": {"type": "database", "url": "http://h"}}),
            "/connections/calc/type",
            "expected one of mcp",
        ),
        (
            json!({"calc": {"type": "mcp", "command": ["x"], "headers": {}}}),
            "/connections/calc/headers",
            "unknown field",
        ),
        (
            json!({"my server": {"type": "mcp", "command": ["x"]}}),
            "/connections/my server",
            "[A-Za-z0-9_-]",
        ),
        (json!(["calc"]), "/connections", "expected an object"),
    ] {
        let error =
            WorkflowDocument::from_value(with_connections(connections, json!([]))).unwrap_err();
        assert_invalid(&error, path, message);
    }
}

/// A source holding one tool.
struct OneTool(Arc<[Tool]>);

impl ToolSource for OneTool {
    fn name(&self) -> &str {
        "calc"
    }

    fn tools(&self) -> Arc<[Tool]> {
        self.0.clone()
    }
}

fn calc_source() -> OneTool {
    let add = Tool::dynamic(
        "calc__add",
        "Adds",
        json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}),
        |args: Value, _ctx: ToolContext| async move {
            let sum = args["a"].as_f64().unwrap_or(0.0) + args["b"].as_f64().unwrap_or(0.0);
            Ok::<_, ToolError>(json!(sum))
        },
    )
    .unwrap();
    OneTool(Arc::from(vec![add]))
}

#[tokio::test]
async fn a_tool_entry_naming_a_connection_offers_the_registered_source_s_tools() {
    let document = WorkflowDocument::from_value(with_connections(
        json!({"calc": {"type": "mcp", "command": ["calc-server"]}}),
        json!([{"type": "calc"}]),
    ))
    .unwrap();
    let registry = WorkflowRegistry::new().tool_source("calc", calc_source());
    let step = document
        .hydrate(&registry, &HydrateOptions::default())
        .unwrap();
    let model = ScriptedModel::with_responses([
        ScriptedResponse::tool_call("c1", "calc__add", json!({"a": 2, "b": 3})),
        ScriptedResponse::text("5"),
    ]);
    let harness = harness_with("flows", &model).build().unwrap();
    let ctx = harness.create_context(ContextOptions::new());

    harness.run(&step, json!("2 + 3?"), &ctx).await.unwrap();

    let requests = model.requests();
    assert_eq!(requests[0].tools, ["calc__add"]);
    assert_eq!(requests[1].tool_outputs(), ["5.0"]);
}

#[test]
fn an_unregistered_connection_or_a_name_that_is_both_is_invalid_at_the_entry() {
    let document = WorkflowDocument::from_value(with_connections(
        json!({"calc": {"type": "mcp", "command": ["calc-server"]}}),
        json!([{"type": "calc"}]),
    ))
    .unwrap();
    // Declared, but the host registered nothing under the name.
    let error = document
        .hydrate(
            &WorkflowRegistry::new().tool_source("docs", calc_source()),
            &HydrateOptions::default(),
        )
        .unwrap_err();
    assert_invalid(&error, "/root/tools/0/type", "connections: `docs`");

    // `echo` is a registered tool of the shared registry; a source of the same name is ambiguous.
    let document = WorkflowDocument::from_value(with_connections(
        json!({"echo": {"type": "mcp", "command": ["x"]}}),
        json!([{"type": "echo"}]),
    ))
    .unwrap();
    let error = document
        .hydrate(
            &registry().tool_source("echo", calc_source()),
            &HydrateOptions::default(),
        )
        .unwrap_err();
    assert_invalid(&error, "/root/tools/0/type", "both a tool and a connection");
}
