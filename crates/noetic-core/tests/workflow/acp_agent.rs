//! The `acp-agent` node: parsing to the step's configuration (defaults included), writing back, the
//! configuration's serde form read as a node, an error pointer for every kind of mistake, hydration,
//! and runs on harnesses without an ACP runtime, with one but without the named agent, and with a
//! runtime that answers.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::BoxFuture;
use noetic_core::acp::{
    AcpAgentCommand, AcpAgentConfig, AcpAgentRef, AcpClientCapabilities, AcpPermissions,
    AcpRuntime, AcpSessionOptions, AcpTimeouts, AcpTurn, AcpTurnEnd, AcpUpdate, KeepAlive,
    PermissionDefault, PermissionRule,
};
use noetic_core::workflow::{
    AcpAgentNode, HydrateOptions, WorkflowDocument, WorkflowNode, WorkflowRegistry,
};
use noetic_core::{ContextOptions, Error, StepKind};
use noetic_test_support::harness_with;
use serde_json::{Value, json};

use crate::support::{answering, assert_invalid, doc, fixture};

/// A node with every field, each at a value other than its default.
fn full_node() -> Value {
    json!({
        "kind": "acp-agent",
        "id": "fix",
        "agent": {
            "command": "claude-code-acp",
            "args": ["--verbose"],
            "env": { "CLAUDE_MODEL": "sonnet" }
        },
        "prompt": "Fix the failing test.",
        "content": [{ "type": "resource_link", "uri": "file:///work/project/src/lib.rs", "name": "lib.rs" }],
        "cwd": "/work/project",
        "mcpServers": [{ "name": "docs", "command": "docs-mcp", "args": [], "env": [] }],
        "permissions": {
            "default": "allow",
            "allow": [{ "kind": "read" }, { "kind": "edit", "title": "src/" }],
            "deny": [{ "kind": "execute" }],
            "ask": true,
            "persist": true
        },
        "clientCapabilities": { "readTextFile": false, "writeTextFile": false, "terminal": true },
        "session": { "keepAlive": "harness", "reuse": "fixer" },
        "timeouts": { "initializeMs": 10000, "idleMs": 120000, "cancelGraceMs": 2000 },
        "output": {
            "type": "object",
            "properties": { "fixed": { "type": "boolean" } },
            "required": ["fixed"]
        },
        "lenient": true
    })
}

/// The configuration [`full_node`] describes, built field by field.
fn full_config() -> AcpAgentConfig {
    let mut config = AcpAgentConfig::new(AcpAgentRef::Command(
        AcpAgentCommand::new("claude-code-acp", ["--verbose"]).env("CLAUDE_MODEL", "sonnet"),
    ));
    config.prompt = Some("Fix the failing test.".to_owned());
    config.content = vec![
        json!({ "type": "resource_link", "uri": "file:///work/project/src/lib.rs", "name": "lib.rs" }),
    ];
    config.cwd = Some(PathBuf::from("/work/project"));
    config.mcp_servers =
        vec![json!({ "name": "docs", "command": "docs-mcp", "args": [], "env": [] })];
    let mut permissions = AcpPermissions::default();
    permissions.default = PermissionDefault::Allow;
    let mut edit_in_src = PermissionRule::kind("edit");
    edit_in_src.title = Some("src/".to_owned());
    permissions.allow = vec![PermissionRule::kind("read"), edit_in_src];
    permissions.deny = vec![PermissionRule::kind("execute")];
    permissions.ask = true;
    permissions.persist = true;
    config.permissions = permissions;
    let mut capabilities = AcpClientCapabilities::default();
    capabilities.read_text_file = false;
    capabilities.write_text_file = false;
    capabilities.terminal = true;
    config.client_capabilities = capabilities;
    let mut session = AcpSessionOptions::default();
    session.keep_alive = KeepAlive::Harness;
    session.reuse = Some("fixer".to_owned());
    config.session = session;
    let mut timeouts = AcpTimeouts::default();
    timeouts.initialize = Duration::from_secs(10);
    timeouts.idle = Some(Duration::from_secs(120));
    timeouts.cancel_grace = Duration::from_secs(2);
    config.timeouts = timeouts;
    config.output = Some(json!({
        "type": "object",
        "properties": { "fixed": { "type": "boolean" } },
        "required": ["fixed"]
    }));
    config.lenient = true;
    config
}

/// The `acp-agent` node at the root of `document`.
fn acp_node(document: &WorkflowDocument) -> &AcpAgentNode {
    match &document.root {
        WorkflowNode::AcpAgent(node) => node,
        other => panic!("expected an acp-agent node, got {other:?}"),
    }
}

fn parse(node: Value) -> WorkflowDocument {
    WorkflowDocument::from_value(doc(node)).expect("the node parses")
}

#[test]
fn a_full_node_parses_to_the_configuration_it_describes() {
    let document = parse(full_node());
    assert_eq!(document.root.kind(), "acp-agent");
    assert_eq!(document.root.id(), "fix");
    let node = acp_node(&document);
    assert_eq!(node.id, "fix");
    assert_eq!(node.config, full_config());
}

#[test]
fn a_minimal_node_gets_the_defaults() {
    let document = parse(json!({ "kind": "acp-agent", "id": "a", "agent": "x" }));
    let config = &acp_node(&document).config;
    assert_eq!(
        *config,
        AcpAgentConfig::new(AcpAgentRef::Named("x".to_owned()))
    );
    // Spelled out: the defaults documented for the node.
    assert_eq!(config.prompt, None);
    assert!(config.content.is_empty() && config.mcp_servers.is_empty());
    assert_eq!(config.cwd, None);
    assert_eq!(config.permissions.default, PermissionDefault::Deny);
    assert!(config.permissions.allow.is_empty() && config.permissions.deny.is_empty());
    assert!(!config.permissions.ask && !config.permissions.persist);
    assert!(config.client_capabilities.read_text_file);
    assert!(config.client_capabilities.write_text_file);
    assert!(!config.client_capabilities.terminal);
    assert_eq!(config.session.keep_alive, KeepAlive::Step);
    assert_eq!(config.session.reuse, None);
    assert_eq!(config.timeouts.initialize, Duration::from_secs(30));
    assert_eq!(config.timeouts.idle, None);
    assert_eq!(config.timeouts.cancel_grace, Duration::from_secs(5));
    assert_eq!(config.output, None);
    assert!(!config.lenient);
}

#[test]
fn nodes_round_trip_through_encode() {
    for node in [
        full_node(),
        json!({ "kind": "acp-agent", "id": "a", "agent": "x" }),
        json!({ "kind": "acp-agent", "id": "a", "agent": { "command": "/usr/bin/agent" },
                "session": { "keepAlive": "harness", "reuse": "k" }, "timeouts": { "idleMs": 0 } }),
    ] {
        let document = parse(node.clone());
        let written = document.to_value();
        // Every field here differs from its default, so the node is written back as it was read.
        assert_eq!(written["root"], node);
        assert_eq!(WorkflowDocument::from_value(written).unwrap(), document);
    }
}

#[test]
fn fields_at_their_defaults_are_left_out_when_written() {
    let document = parse(json!({
        "kind": "acp-agent", "id": "a", "agent": { "command": "agent", "args": [], "env": {} },
        "content": [], "mcpServers": [],
        "permissions": { "default": "deny", "allow": [], "deny": [], "ask": false, "persist": false },
        "clientCapabilities": { "readTextFile": true, "writeTextFile": true, "terminal": false },
        "session": { "keepAlive": "step" },
        "timeouts": { "initializeMs": 30000, "cancelGraceMs": 5000 },
        "lenient": false
    }));
    assert_eq!(
        document.to_value()["root"],
        json!({ "kind": "acp-agent", "id": "a", "agent": { "command": "agent" } })
    );
    let config = &acp_node(&document).config;
    assert_eq!(
        *config,
        AcpAgentConfig::new(AcpAgentRef::Command(AcpAgentCommand::new(
            "agent",
            Vec::<String>::new()
        )))
    );
}

#[test]
fn the_configurations_serde_form_is_the_nodes_form() {
    for config in [
        full_config(),
        AcpAgentConfig::new(AcpAgentRef::Named("x".to_owned())),
    ] {
        // The serde form, with `kind` and `id`, parses as a node to the same configuration…
        let mut node = serde_json::to_value(&config).unwrap();
        let map = node.as_object_mut().unwrap();
        map.insert("kind".to_owned(), json!("acp-agent"));
        map.insert("id".to_owned(), json!("n"));
        assert_eq!(acp_node(&parse(node)).config, config);
        // …and the node as written deserializes with serde to it.
        let mut written = WorkflowDocument::new(WorkflowNode::AcpAgent(AcpAgentNode {
            id: "n".to_owned(),
            config: config.clone(),
        }))
        .to_value()["root"]
            .clone();
        let map = written.as_object_mut().unwrap();
        map.remove("kind");
        map.remove("id");
        assert_eq!(
            serde_json::from_value::<AcpAgentConfig>(written).unwrap(),
            config
        );
    }
}

#[test]
fn integral_floats_count_as_milliseconds() {
    let document = parse(json!({
        "kind": "acp-agent", "id": "a", "agent": "x", "timeouts": { "idleMs": 1500.0, "initializeMs": 0 }
    }));
    let timeouts = acp_node(&document).config.timeouts;
    assert_eq!(timeouts.idle, Some(Duration::from_millis(1500)));
    assert_eq!(timeouts.initialize, Duration::ZERO);
}

/// `node` as the second step of a sequence, so pointers run through `/root/steps/1`.
fn second_step(node: Value) -> Value {
    doc(json!({
        "kind": "sequence", "id": "s",
        "steps": [{ "kind": "runCode", "id": "u", "execute": "upper" }, node]
    }))
}

/// `fields` added to a valid node (`id` `a`, `agent` `x`, a prompt), as the second step.
fn with(fields: Value) -> Value {
    let mut node = json!({ "kind": "acp-agent", "id": "a", "agent": "x", "prompt": "hi" });
    for (key, value) in fields.as_object().unwrap() {
        node[key] = value.clone();
    }
    second_step(node)
}

fn check(document: Value, path: &str, message: &str) {
    let error = WorkflowDocument::from_value(document.clone())
        .expect_err(&format!("{document} should not parse"));
    assert_invalid(&error, path, message);
}

#[test]
fn the_agent_is_required_and_checked() {
    check(
        second_step(json!({ "kind": "acp-agent", "id": "a", "prompt": "hi" })),
        "/root/steps/1",
        "missing required field `agent`",
    );
    check(
        with(json!({ "agent": "  " })),
        "/root/steps/1/agent",
        "expected the name of a registered agent, got a blank string",
    );
    check(
        with(json!({ "agent": 7 })),
        "/root/steps/1/agent",
        "expected a registered agent's name (a string) or a command (an object with `command`), got a number",
    );
    check(
        with(json!({ "agent": { "args": ["--acp"] } })),
        "/root/steps/1/agent",
        "missing required field `command`",
    );
    check(
        with(json!({ "agent": { "command": " " } })),
        "/root/steps/1/agent/command",
        "expected a non-blank command",
    );
    check(
        with(json!({ "agent": { "command": "" } })),
        "/root/steps/1/agent/command",
        "expected a non-blank command",
    );
    check(
        with(json!({ "agent": { "command": ["agent", "--acp"] } })),
        "/root/steps/1/agent/command",
        "expected a string, got an array",
    );
    check(
        with(json!({ "agent": { "command": "agent", "args": ["--acp", 2] } })),
        "/root/steps/1/agent/args/1",
        "expected a string, got a number",
    );
    check(
        with(json!({ "agent": { "command": "agent", "env": { "TOKEN": true } } })),
        "/root/steps/1/agent/env/TOKEN",
        "expected a string, got a boolean",
    );
    check(
        with(json!({ "agent": { "command": "agent", "env": ["TOKEN=1"] } })),
        "/root/steps/1/agent/env",
        "expected an object of strings, got an array",
    );
    check(
        with(json!({ "agent": { "command": "agent", "cwd": "/tmp" } })),
        "/root/steps/1/agent/cwd",
        "unknown field `cwd`; expected one of command, args, env",
    );
}

#[test]
fn the_cwd_must_be_an_absolute_path() {
    check(
        with(json!({ "cwd": "src" })),
        "/root/steps/1/cwd",
        "expected an absolute path, got `src`",
    );
    check(
        with(json!({ "cwd": "" })),
        "/root/steps/1/cwd",
        "expected an absolute path",
    );
    check(
        with(json!({ "cwd": 1 })),
        "/root/steps/1/cwd",
        "expected a string, got a number",
    );
}

#[test]
fn permissions_are_checked_field_by_field() {
    check(
        with(json!({ "permissions": { "default": "cancel" } })),
        "/root/steps/1/permissions/default",
        "expected one of deny, allow, got \"cancel\"",
    );
    check(
        with(json!({ "permissions": { "allow": [{ "kind": 7 }] } })),
        "/root/steps/1/permissions/allow/0/kind",
        "expected a string, got a number",
    );
    check(
        with(json!({ "permissions": { "deny": [{ "kind": "read" }, { "title": false }] } })),
        "/root/steps/1/permissions/deny/1/title",
        "expected a string, got a boolean",
    );
    check(
        with(json!({ "permissions": { "allow": [{ "title": "" }] } })),
        "/root/steps/1/permissions/allow/0/title",
        "expected a non-empty string",
    );
    check(
        with(json!({ "permissions": { "allow": [{ "tool": "read" }] } })),
        "/root/steps/1/permissions/allow/0/tool",
        "unknown field `tool`; expected one of kind, title",
    );
    check(
        with(json!({ "permissions": { "allow": ["read"] } })),
        "/root/steps/1/permissions/allow/0",
        "expected a permission rule",
    );
    check(
        with(json!({ "permissions": { "ask": "yes" } })),
        "/root/steps/1/permissions/ask",
        "expected a boolean, got a string",
    );
    check(
        with(json!({ "permissions": { "allowAll": true } })),
        "/root/steps/1/permissions/allowAll",
        "unknown field `allowAll`",
    );
}

#[test]
fn session_reuse_and_harness_keep_alive_go_together() {
    check(
        with(json!({ "session": { "reuse": "shared" } })),
        "/root/steps/1/session/reuse",
        "`reuse` needs `keepAlive: \"harness\"`",
    );
    check(
        with(json!({ "session": { "keepAlive": "step", "reuse": "shared" } })),
        "/root/steps/1/session/reuse",
        "`reuse` needs `keepAlive: \"harness\"`",
    );
    check(
        with(json!({ "session": { "keepAlive": "harness" } })),
        "/root/steps/1/session",
        "missing required field `reuse`",
    );
    check(
        with(json!({ "session": { "keepAlive": "harness", "reuse": "" } })),
        "/root/steps/1/session/reuse",
        "expected a non-empty string",
    );
    check(
        with(json!({ "session": { "keepAlive": "run", "reuse": "shared" } })),
        "/root/steps/1/session/keepAlive",
        "expected one of step, harness",
    );
    check(
        with(json!({ "session": { "keepAlive": "harness", "reuse": "k", "load": "s1" } })),
        "/root/steps/1/session/load",
        "unknown field `load`",
    );
}

#[test]
fn timeouts_are_non_negative_integers() {
    check(
        with(json!({ "timeouts": { "idleMs": -1 } })),
        "/root/steps/1/timeouts/idleMs",
        "expected an integer ≥ 0, got -1",
    );
    check(
        with(json!({ "timeouts": { "initializeMs": 1.5 } })),
        "/root/steps/1/timeouts/initializeMs",
        "expected an integer ≥ 0, got 1.5",
    );
    check(
        with(json!({ "timeouts": { "cancelGraceMs": "5s" } })),
        "/root/steps/1/timeouts/cancelGraceMs",
        "expected an integer ≥ 0",
    );
    check(
        with(json!({ "timeouts": { "idleMs": 9_007_199_254_740_992_u64 } })),
        "/root/steps/1/timeouts/idleMs",
        "expected an integer ≥ 0",
    );
    check(
        with(json!({ "timeouts": { "idle": 1000 } })),
        "/root/steps/1/timeouts/idle",
        "unknown field `idle`; expected one of initializeMs, idleMs, cancelGraceMs",
    );
}

#[test]
fn unknown_keys_are_refused() {
    check(
        with(json!({ "model": "sonnet" })),
        "/root/steps/1/model",
        "unknown field `model`; expected one of kind, id, agent, prompt, content, cwd, mcpServers, \
         permissions, clientCapabilities, session, timeouts, output, lenient",
    );
    check(
        with(json!({ "clientCapabilities": { "fs": true } })),
        "/root/steps/1/clientCapabilities/fs",
        "unknown field `fs`",
    );
}

#[test]
fn the_other_fields_are_type_checked() {
    check(
        with(json!({ "prompt": 7 })),
        "/root/steps/1/prompt",
        "expected a string, got a number",
    );
    check(
        with(json!({ "content": [{ "type": "text", "text": "x" }, "more"] })),
        "/root/steps/1/content/1",
        "expected an object, got a string",
    );
    check(
        with(json!({ "mcpServers": { "docs": {} } })),
        "/root/steps/1/mcpServers",
        "expected an array, got an object",
    );
    check(
        with(json!({ "clientCapabilities": { "terminal": "on" } })),
        "/root/steps/1/clientCapabilities/terminal",
        "expected a boolean, got a string",
    );
    check(
        with(json!({ "output": "json" })),
        "/root/steps/1/output",
        "expected an object, got a string",
    );
    check(
        with(json!({ "output": { "type": 7 } })),
        "/root/steps/1/output",
        "not a valid JSON Schema",
    );
    check(
        with(json!({ "lenient": "true" })),
        "/root/steps/1/lenient",
        "expected a boolean, got a string",
    );
    check(
        with(json!({ "id": " " })),
        "/root/steps/1/id",
        "expected a non-blank step id",
    );
}

#[test]
fn a_node_in_the_originals_shape_validates_against_its_schema() {
    // The original's schema knows `acp-agent` with a subset of our fields (a string `agent`, a
    // required `prompt`, rules without `ask`, …); such a node parses, and is written back valid.
    let node = json!({
        "kind": "acp-agent", "id": "review", "agent": "claude", "prompt": "Review the diff.",
        "cwd": "/work/project",
        "permissions": { "default": "allow", "allow": [{ "kind": "read" }], "deny": [{ "title": "rm " }], "persist": true },
        "clientCapabilities": { "terminal": true },
        "session": { "keepAlive": "harness", "reuse": "reviewer" }
    });
    let validator = jsonschema::validator_for(&fixture("noetic-workflow.schema.json")).unwrap();
    assert!(validator.is_valid(&doc(node.clone())));
    let written = parse(node).to_value();
    assert!(validator.is_valid(&written), "{written}");
}

#[test]
fn hydration_checks_a_node_built_in_code() {
    let registry = WorkflowRegistry::new();
    let options = HydrateOptions::default();
    let hydrate = |config: AcpAgentConfig| {
        WorkflowDocument::new(WorkflowNode::AcpAgent(AcpAgentNode {
            id: "a".to_owned(),
            config,
        }))
        .hydrate(&registry, &options)
    };
    let mut relative = AcpAgentConfig::new(AcpAgentRef::Named("x".to_owned()));
    relative.cwd = Some(PathBuf::from("project"));
    assert_invalid(
        &hydrate(relative).unwrap_err(),
        "/root/cwd",
        "expected an absolute path, got `project`",
    );
    let mut reuse = AcpAgentConfig::new(AcpAgentRef::Named("x".to_owned()));
    reuse.session.reuse = Some("k".to_owned());
    assert_invalid(
        &hydrate(reuse).unwrap_err(),
        "/root/session/reuse",
        "`reuse` needs `keepAlive: \"harness\"`",
    );
    let blank = AcpAgentConfig::new(AcpAgentRef::Command(AcpAgentCommand::new(
        "",
        Vec::<String>::new(),
    )));
    assert_invalid(
        &hydrate(blank).unwrap_err(),
        "/root/agent/command",
        "expected a non-blank command",
    );
    // A named agent is not looked up at hydration: registration lives on the harness's runtime.
    let step = hydrate(AcpAgentConfig::new(AcpAgentRef::Named("anyone".to_owned()))).unwrap();
    assert_eq!(step.id(), "a");
    assert_eq!(step.kind(), StepKind::AcpAgent);
}

#[tokio::test]
async fn a_harness_without_an_acp_runtime_fails_the_node() {
    let model = answering("unused");
    let harness = harness_with("wf", &model)
        .acp_agent("claude", AcpAgentCommand::new("claude-code-acp", ["--acp"]))
        .build()
        .unwrap();
    let ctx = harness.create_context(ContextOptions::default());
    let document = doc(json!({
        "kind": "acp-agent", "id": "code", "agent": "claude", "prompt": "hi", "cwd": "/work"
    }));
    let error = harness
        .parse_and_run_workflow(document, json!(null), &ctx)
        .await
        .unwrap_err();
    assert_eq!(error.code(), "ACP_RUNTIME_MISSING", "{error}");
    assert!(error.to_string().contains("acp_agent `code`"), "{error}");
}

/// What [`Recording`] saw of a turn.
#[derive(Debug, Clone)]
struct SeenTurn {
    step_id: String,
    config: AcpAgentConfig,
    agent_name: String,
    command: AcpAgentCommand,
    prompt: String,
    cwd: PathBuf,
}

/// An ACP runtime that records each turn and answers `done` without starting anything.
#[derive(Clone, Default)]
struct Recording {
    turns: Arc<Mutex<Vec<SeenTurn>>>,
}

impl AcpRuntime for Recording {
    fn run_turn<'a>(&'a self, turn: AcpTurn<'a>) -> BoxFuture<'a, noetic_core::Result<AcpTurnEnd>> {
        Box::pin(async move {
            self.turns.lock().unwrap().push(SeenTurn {
                step_id: turn.step_id.to_owned(),
                config: turn.config.clone(),
                agent_name: turn.agent_name.to_owned(),
                command: turn.command.clone(),
                prompt: turn.prompt.clone(),
                cwd: turn.cwd.clone(),
            });
            turn.host.update(
                json!({ "sessionUpdate": "agent_message_chunk", "content": { "type": "text", "text": "done" } }),
                AcpUpdate::Message {
                    message_id: None,
                    text: "done".to_owned(),
                },
            );
            let mut end = AcpTurnEnd::default();
            end.stop_reason = "end_turn".to_owned();
            end.session_id = "session-1".to_owned();
            Ok(end)
        })
    }
}

#[tokio::test]
async fn an_unregistered_agent_name_fails_the_run_naming_the_registered_ones() {
    let model = answering("unused");
    let runtime = Recording::default();
    let harness = harness_with("wf", &model)
        .acp_runtime(runtime.clone())
        .acp_agent("claude", AcpAgentCommand::new("claude-code-acp", ["--acp"]))
        .acp_agent(
            "gemini",
            AcpAgentCommand::new("gemini", ["--experimental-acp"]),
        )
        .build()
        .unwrap();
    let ctx = harness.create_context(ContextOptions::default());
    let document = doc(json!({
        "kind": "acp-agent", "id": "code", "agent": "codex", "prompt": "hi", "cwd": "/work"
    }));
    let error = harness
        .parse_and_run_workflow(document, json!(null), &ctx)
        .await
        .unwrap_err();
    assert_eq!(error.code(), "ACP_CONFIG_INVALID", "{error}");
    assert!(
        error
            .to_string()
            .contains("agent `codex` is not registered (registered: claude, gemini)"),
        "{error}"
    );
    assert!(!matches!(error, Error::WorkflowInvalid { .. }));
    assert!(
        runtime.turns.lock().unwrap().is_empty(),
        "no turn may start"
    );
}

#[tokio::test]
async fn a_hydrated_node_runs_its_configuration_on_the_acp_runtime() {
    let model = answering("unused");
    let runtime = Recording::default();
    let claude = AcpAgentCommand::new("claude-code-acp", ["--acp"]).env("CLAUDE_MODEL", "sonnet");
    let harness = harness_with("wf", &model)
        .acp_runtime(runtime.clone())
        .acp_agent("claude", claude.clone())
        .build()
        .unwrap();
    let ctx = harness.create_context(ContextOptions::default());
    let node = json!({
        "kind": "acp-agent", "id": "code", "agent": "claude", "cwd": "/work/project",
        "permissions": { "allow": [{ "kind": "read" }] },
        "timeouts": { "idleMs": 60000 }
    });
    let expected = acp_node(&parse(node.clone())).config.clone();
    // Without `prompt`, the step's input (a string) is the prompt.
    let output = harness
        .parse_and_run_workflow(doc(node), json!("Fix the bug."), &ctx)
        .await
        .unwrap();
    assert_eq!(output, json!("done"));
    let turns = runtime.turns.lock().unwrap().clone();
    assert_eq!(turns.len(), 1);
    let turn = &turns[0];
    assert_eq!(turn.step_id, "code");
    assert_eq!(turn.config, expected);
    assert_eq!(turn.agent_name, "claude");
    assert_eq!(turn.command, claude);
    assert_eq!(turn.prompt, "Fix the bug.");
    assert_eq!(turn.cwd, PathBuf::from("/work/project"));
}
