//! Workflows with an `acp-agent` node in `noetic run` and `noetic chat`, against the scripted ACP
//! agent of `noetic-test-support` (the official Python SDK, a real process): the agent's text
//! streams to stdout; its permission requests (with `permissions.ask`) are asked in chat like a
//! tool's approval, and refused by `run` unless `--approve-all`; `--acp NAME=COMMAND` registers
//! an agent the node names. No provider is called: the demo model is chosen and never asked.

use noetic_test_support::acp::ScriptedAgent;
use noetic_test_support::scripted_agent_or_skip;
use serde_json::{Value, json};

use crate::approvals::Chat;
use crate::{TempDir, run_noetic};

/// A one-node workflow running `agent` (a name, or a command object) with `permissions`.
fn acp_flow(agent: Value, permissions: Value) -> Value {
    json!({
        "version": 1,
        "root": {"kind": "acp-agent", "id": "coder", "agent": agent, "permissions": permissions}
    })
}

/// The scripted agent as a node's `agent` command object.
fn command_of(agent: &ScriptedAgent) -> Value {
    let (program, arguments) = agent.command();
    json!({"command": program, "args": arguments})
}

/// The scripted agent as one `--acp NAME=COMMAND` command line.
fn command_line(agent: &ScriptedAgent) -> String {
    let (program, arguments) = agent.command();
    std::iter::once(program)
        .chain(arguments)
        .map(|word| format!("'{word}'"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Whether process `pid` has ended (gone, or a zombie nobody has reaped yet).
fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
    }
}

fn pid_of(text: &str) -> u32 {
    text.split("pid: ")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|digits| digits.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {text:?}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn run_streams_the_agent_s_text_with_its_cwd_at_the_fs_root() {
    let agent = scripted_agent_or_skip!();
    let dir = TempDir::new();
    let flow = dir.write("flow.json", &acp_flow(command_of(&agent), json!({})));
    let root = dir.path().canonicalize().unwrap();
    let finished = run_noetic(
        [
            "run",
            flow.as_str(),
            "say Hello from the agent\ncwd",
            "--allow-fs",
            root.to_str().unwrap(),
        ],
        "",
    )
    .await;
    finished.assert_code(0);
    assert_eq!(
        finished.stdout.trim_end(),
        format!("Hello from the agentcwd: {}", root.display()),
        "{}",
        finished.stderr
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn run_without_a_cwd_or_fs_root_says_which_option_is_missing() {
    let agent = scripted_agent_or_skip!();
    let dir = TempDir::new();
    let flow = dir.write("flow.json", &acp_flow(command_of(&agent), json!({})));
    let finished = run_noetic(["run", flow.as_str(), "say hi"], "").await;
    finished.assert_code(1);
    assert!(
        finished.stderr.contains("error[ACP_CONFIG_INVALID]") && finished.stderr.contains("cwd"),
        "{}",
        finished.stderr
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn run_refuses_to_ask_for_an_agent_s_permission_and_leaves_no_agent_behind() {
    let agent = scripted_agent_or_skip!();
    let dir = TempDir::new();
    let flow = dir.write(
        "flow.json",
        &acp_flow(command_of(&agent), json!({"ask": true})),
    );
    let root = dir.path().to_str().unwrap().to_owned();
    let refused = run_noetic(
        [
            "run",
            flow.as_str(),
            "pid\nperm p1 execute\nsay never",
            "--allow-fs",
            &root,
        ],
        "",
    )
    .await;
    refused.assert_code(1);
    assert!(
        refused.stderr.contains("error[APPROVAL_REQUIRED]")
            && refused.stderr.contains("`acp:")
            && refused.stderr.contains(":execute`"),
        "{}",
        refused.stderr
    );
    assert!(!refused.stdout.contains("never"), "{}", refused.stdout);
    let pid = pid_of(&refused.stdout);
    assert!(gone(pid), "the agent {pid} outlived `noetic run`");

    let approved = run_noetic(
        [
            "run",
            flow.as_str(),
            "perm p1 execute\nsay  then done",
            "--allow-fs",
            &root,
            "--approve-all",
        ],
        "",
    )
    .await;
    approved.assert_code(0);
    assert_eq!(
        approved.stdout.trim_end(),
        "permission: selected allow-once then done",
        "{}",
        approved.stderr
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn chat_asks_for_a_named_agent_s_permission_and_takes_approve_and_reject() {
    let agent = scripted_agent_or_skip!();
    let dir = TempDir::new();
    let flow = dir.write(
        "flow.json",
        &acp_flow(json!("scripted"), json!({"ask": true})),
    );
    let mut chat = Chat::spawn(vec![
        "chat".to_owned(),
        flow,
        "--acp".to_owned(),
        format!("scripted={}", command_line(&agent)),
        "--allow-fs".to_owned(),
        dir.path().to_str().unwrap().to_owned(),
    ]);

    let approval = |prompt: &str| {
        prompt
            .split("/approve ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .unwrap()
            .to_owned()
    };
    chat.send("perm p1 edit").await;
    let prompt = chat
        .stderr_line(|line| line.starts_with("approval needed:"))
        .await;
    assert!(prompt.contains("acp:scripted:edit"), "{prompt}");
    assert!(prompt.contains("perm p1"), "the title is shown: {prompt}");
    chat.send(&format!("/approve {}", approval(&prompt))).await;
    chat.stdout_line(|line| line.contains("permission: selected allow-once"))
        .await;

    chat.send("perm p2 edit").await;
    let prompt = chat
        .stderr_line(|line| line.starts_with("approval needed:"))
        .await;
    chat.send(&format!("/reject {} not now", approval(&prompt)))
        .await;
    chat.stdout_line(|line| line.contains("permission: selected reject-once"))
        .await;
    assert_eq!(chat.finish().await, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_agent_name_is_an_error_naming_it() {
    let dir = TempDir::new();
    let flow = dir.write("flow.json", &acp_flow(json!("nobody"), json!({})));
    let finished = run_noetic(
        [
            "run",
            flow.as_str(),
            "say hi",
            "--allow-fs",
            dir.path().to_str().unwrap(),
        ],
        "",
    )
    .await;
    finished.assert_code(1);
    assert!(
        finished.stderr.contains("error[ACP_CONFIG_INVALID]")
            && finished.stderr.contains("`nobody`"),
        "{}",
        finished.stderr
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn validate_prints_the_acp_node_with_its_agent() {
    let dir = TempDir::new();
    let flow = dir.write("flow.json", &acp_flow(json!("claude"), json!({})));
    let finished = run_noetic(["validate", flow.as_str()], "").await;
    finished.assert_code(0);
    assert!(
        finished
            .stdout
            .starts_with("acp-agent coder (agent claude)\n"),
        "{}",
        finished.stdout
    );
}
