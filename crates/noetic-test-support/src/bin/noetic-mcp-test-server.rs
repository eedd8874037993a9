//! The stdio MCP test server: see `noetic_test_support::mcp`.
//!
//! `noetic-mcp-test-server [--log FILE] [--report HOST:PORT]`: `--log` appends its event log to
//! FILE, `--report` also writes each line to a TCP connection to HOST:PORT.

use std::process::ExitCode;

const USAGE: &str = "usage: noetic-mcp-test-server [--log FILE] [--report HOST:PORT]";

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let mut log = None;
    let mut report = None;
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        match (flag.as_str(), args.next()) {
            ("--log", Some(file)) => log = Some(std::path::PathBuf::from(file)),
            ("--report", Some(address)) => match address.parse() {
                Ok(address) => report = Some(address),
                Err(error) => {
                    eprintln!("noetic-mcp-test-server: --report {address}: {error}\n{USAGE}");
                    return ExitCode::from(2);
                }
            },
            _ => {
                eprintln!("{USAGE}");
                return ExitCode::from(2);
            }
        }
    }
    match noetic_test_support::mcp::serve_stdio(log, report).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("noetic-mcp-test-server: {error}");
            ExitCode::FAILURE
        }
    }
}
