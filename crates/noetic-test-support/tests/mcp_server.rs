//! The stdio MCP test server answers `initialize` as an MCP server must, and exits when its stdin
//! closes. (Being an integration test of this package, this also makes `cargo test --workspace`
//! build the `noetic-mcp-test-server` binary that other packages' tests start.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

#[test]
fn the_stdio_server_answers_initialize_and_exits_when_stdin_closes() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_noetic-mcp-test-server"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the server starts");
    let mut stdin = child.stdin.take().unwrap();
    writeln!(
        stdin,
        r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"protocolVersion":"2025-06-18","capabilities":{{}},"clientInfo":{{"name":"probe","version":"0"}}}}}}"#
    )
    .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let reply: serde_json::Value = serde_json::from_str(&line).expect("one JSON-RPC line");
    assert_eq!(reply["id"], 1);
    assert_eq!(
        reply["result"]["serverInfo"]["name"],
        "noetic-mcp-test-server"
    );
    assert_eq!(
        reply["result"]["capabilities"]["tools"]["listChanged"],
        true
    );
    drop(stdin);
    assert!(child.wait().unwrap().success());
}
