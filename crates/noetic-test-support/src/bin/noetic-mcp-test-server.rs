//! The stdio MCP test server: see `noetic_test_support::mcp`.

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::process::ExitCode {
    match noetic_test_support::mcp::serve_stdio().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("noetic-mcp-test-server: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}
