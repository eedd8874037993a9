//! `--mcp NAME=COMMAND` / `--mcp NAME=URL`: an MCP server's tools offered to every model call as
//! `NAME__TOOL`, against the real test MCP server (a child process of the CLI, or HTTP on loopback);
//! a SIGTERM mid-call cancels the call on the server before the connection closes.

use noetic_test_support::MockServer;
use noetic_test_support::mcp::{
    McpTestServer, assert_cancelled_before_close, mcp_test_server_path, read_event_log,
};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, BufReader};
use tokio::process::Child;

use crate::{
    CHILD_TIMEOUT, TempDir, answer_with_tool_output, args, call_reply, mock_options, run_noetic,
};

/// A one-node workflow with no tools of its own: the MCP server's come from `--mcp`.
fn flow() -> Value {
    json!({"version": 1, "root": {"kind": "callModel", "id": "calculator",
        "instructions": "Use the calculator."}})
}

fn server_command() -> String {
    format!("calc={}", mcp_test_server_path().display())
}

#[tokio::test(flavor = "multi_thread")]
async fn run_with_an_mcp_server_returns_the_tool_s_sum_in_the_final_answer() {
    let provider = MockServer::start().await;
    provider.push(call_reply("calc__add", &json!({"a": 19, "b": 23})));
    provider.set_responder(answer_with_tool_output);
    let dir = TempDir::new();
    let flow = dir.write("flow.json", &flow());
    let command = server_command();

    let finished = run_noetic(
        args(
            &["run", &flow, "What is 19 + 23?", "--mcp", &command],
            &mock_options(&provider),
        ),
        "",
    )
    .await;

    finished.assert_code(0);
    assert_eq!(finished.stdout, "The tool said {\"sum\":42.0}\n");
    let first = &provider.requests()[0];
    let offered: Vec<&str> = first.body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|tool| tool["name"].as_str())
        .collect();
    assert!(offered.contains(&"calc__add"), "{offered:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_api_key_does_not_reach_a_stdio_server() {
    let provider = MockServer::start().await;
    provider.push(call_reply("calc__env", &json!({"name": "NOETIC_TEST_KEY"})));
    provider.set_responder(answer_with_tool_output);
    let dir = TempDir::new();
    let flow = dir.write("flow.json", &flow());
    let command = server_command();

    let mut child = crate::noetic(args(
        &[
            "run",
            &flow,
            "Read the key",
            "--mcp",
            &command,
            "--api-key-env",
            "NOETIC_TEST_KEY",
        ],
        &mock_options(&provider),
    ));
    child
        .env("NOETIC_TEST_KEY", "sk-mcp-must-not-leak-51c2")
        .stdin(std::process::Stdio::null());
    let finished = crate::finished(child.spawn().unwrap()).await;

    finished.assert_code(0);
    // The provider got the key; the server's environment did not have it.
    assert_eq!(
        provider.requests()[0].header("authorization"),
        Some("Bearer sk-mcp-must-not-leak-51c2")
    );
    assert_eq!(finished.stdout, "The tool said <unset>\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_http_mcp_server_works_the_same() {
    let mcp = McpTestServer::start_http(None).await;
    let provider = MockServer::start().await;
    provider.push(call_reply("web__add", &json!({"a": 1, "b": 2})));
    provider.set_responder(answer_with_tool_output);
    let dir = TempDir::new();
    let flow = dir.write("flow.json", &flow());
    let target = format!("web={}", mcp.url());

    let finished = run_noetic(
        args(
            &["run", &flow, "1 + 2?", "--mcp", &target],
            &mock_options(&provider),
        ),
        "",
    )
    .await;

    finished.assert_code(0);
    assert_eq!(finished.stdout, "The tool said {\"sum\":3.0}\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_cannot_start_or_initialise_exits_1_naming_it_before_any_request() {
    let provider = MockServer::start().await;
    let dir = TempDir::new();
    let flow = dir.write("flow.json", &flow());
    for (target, code) in [
        (
            "calc=/nonexistent/mcp-server",
            "error[MCP_SPAWN_FAILED]: MCP server `calc`",
        ),
        (
            "calc=sh -c 'exit 3'",
            "error[MCP_INIT_FAILED]: MCP server `calc`",
        ),
    ] {
        let finished = run_noetic(
            args(
                &["run", &flow, "hi", "--mcp", target],
                &mock_options(&provider),
            ),
            "",
        )
        .await;
        finished.assert_code(1);
        assert!(finished.stderr.contains(code), "{}", finished.stderr);
    }
    assert_eq!(provider.request_count(), 0);

    let finished = run_noetic(
        args(
            &["run", &flow, "hi", "--mcp", "calc"],
            &mock_options(&provider),
        ),
        "",
    )
    .await;
    finished.assert_code(2);
    assert!(
        finished
            .stderr
            .contains("--mcp must be NAME=COMMAND or NAME=URL"),
        "{}",
        finished.stderr
    );
}

/// A workflow declaring the server under `connections` and offering it to its `callModel` by name.
fn declaring(command: &[String]) -> Value {
    json!({"version": 1,
        "connections": {"calc": {"type": "mcp", "command": command, "allowTools": ["add"]}},
        "root": {"kind": "callModel", "id": "calculator", "instructions": "Use the calculator.",
            "tools": [{"type": "calc"}]}})
}

#[tokio::test(flavor = "multi_thread")]
async fn a_workflow_declaring_an_mcp_connection_offers_its_tools_where_named() {
    let provider = MockServer::start().await;
    provider.push(call_reply("calc__add", &json!({"a": 40, "b": 2})));
    provider.set_responder(answer_with_tool_output);
    let dir = TempDir::new();
    let server = mcp_test_server_path().display().to_string();
    let flow = dir.write("flow.json", &declaring(&[server]));

    let finished = run_noetic(
        args(&["run", &flow, "40 + 2?"], &mock_options(&provider)),
        "",
    )
    .await;

    finished.assert_code(0);
    assert_eq!(finished.stdout, "The tool said {\"sum\":42.0}\n");
    // `allowTools` kept the rest of the server's tools out.
    let offered: Vec<String> = provider.requests()[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|tool| tool["name"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(offered, ["calc__add"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn validate_accepts_a_declared_connection_without_starting_it() {
    let dir = TempDir::new();
    let flow = dir.write(
        "flow.json",
        &declaring(&["/nonexistent/mcp-server".to_owned()]),
    );
    let finished = run_noetic(["validate", flow.as_str()], "").await;
    finished.assert_code(0);
    assert!(finished.stdout.contains("valid"), "{}", finished.stdout);

    // A tool entry naming neither a tool nor a declared connection is invalid at its pointer.
    let mut document = declaring(&["/nonexistent/mcp-server".to_owned()]);
    document["root"]["tools"][0]["type"] = json!("kalk");
    let flow = dir.write("typo.json", &document);
    let finished = run_noetic(["validate", flow.as_str()], "").await;
    finished.assert_code(2);
    assert!(
        finished.stderr.contains("/root/tools/0/type") && finished.stderr.contains("`calc`"),
        "{}",
        finished.stderr
    );
}

/// Sends SIGTERM to `child`.
fn sigterm(child: &tokio::process::Child) {
    let pid = child.id().expect("the child runs").to_string();
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("run kill");
    assert!(status.success());
}

/// `noetic run` offering the MCP server `target` (`NAME=COMMAND` or `NAME=URL`), whose model calls
/// `<NAME>__slow` for a minute.
fn run_calling_slow(provider: &MockServer, dir: &TempDir, name: &str, target: &str) -> Child {
    provider.push(call_reply(&format!("{name}__slow"), &json!({"ms": 60_000})));
    let flow = dir.write("flow.json", &flow());
    let mcp = format!("{name}={target}");
    crate::noetic(args(
        &["run", &flow, "Wait a minute", "--mcp", &mcp],
        &mock_options(provider),
    ))
    .spawn()
    .expect("the noetic binary starts")
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_mid_call_cancels_that_request_on_a_stdio_server_before_its_stdin_closes() {
    let provider = MockServer::start().await;
    let dir = TempDir::new();
    let log = dir.path().join("events.log");
    // The server reports each event as it happens on a connection to this listener.
    let reports = tokio::net::TcpListener::bind(("127.0.0.1", 0))
        .await
        .unwrap();
    let command = format!(
        "{} --log {} --report {}",
        mcp_test_server_path().display(),
        log.display(),
        reports.local_addr().unwrap()
    );
    let child = run_calling_slow(&provider, &dir, "calc", &command);

    let (stream, _) = tokio::time::timeout(CHILD_TIMEOUT, reports.accept())
        .await
        .expect("the server connects to report its events")
        .unwrap();
    let mut events = BufReader::new(stream).lines();
    loop {
        let event = tokio::time::timeout(CHILD_TIMEOUT, events.next_line())
            .await
            .expect("the server reports its call of slow")
            .unwrap()
            .expect("the server reported its call of slow before it ended");
        if event.starts_with("call slow") {
            break;
        }
    }
    sigterm(&child);
    let finished = crate::finished(child).await;

    finished.assert_code(143);
    assert_cancelled_before_close(
        &read_event_log(&log),
        "slow",
        "notification cancelled",
        |event| event.starts_with("quit"),
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_mid_call_cancels_that_request_on_an_http_server_before_its_session_ends() {
    let mcp = McpTestServer::start_http(None).await;
    let provider = MockServer::start().await;
    let dir = TempDir::new();
    let child = run_calling_slow(&provider, &dir, "web", &mcp.url());

    tokio::time::timeout(
        CHILD_TIMEOUT,
        mcp.wait_for_event(|event| event.starts_with("call slow")),
    )
    .await
    .expect("the server gets the call of slow");
    sigterm(&child);
    let finished = crate::finished(child).await;

    finished.assert_code(143);
    assert_cancelled_before_close(
        &mcp.events(),
        "slow",
        "posted notifications/cancelled",
        |event| event == "session deleted",
    );
}
