//! Serving: the harness mounted at `/agent` in an existing axum app, beside the app's own routes.
//!
//! ```text
//! cargo run -p noetic-examples --example serve            # serves until Ctrl-C: open the printed URL
//! cargo run -p noetic-examples --example serve -- --once  # sends itself one message over HTTP, then stops
//! ```
//!
//! The agent is the quick start's (offline demo model, no key). Everything the native API, the AI SDK
//! stream and the page offer is under `/agent` (`/agent/`, `/agent/v1/threads/…`); see docs/serve.md.

use noetic_core::{AgentHarness, Scope};
use noetic_providers::DemoModel;
use noetic_server::{NoeticServer, ServeConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One HTTP/1.1 request to `address`, answered as (status line, body).
async fn request(
    address: std::net::SocketAddr,
    method: &str,
    path: &str,
    body: &str,
) -> std::io::Result<(String, String)> {
    let mut stream = tokio::net::TcpStream::connect(address).await?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await?;
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    Ok((
        head.lines().next().unwrap_or("").to_owned(),
        body.to_owned(),
    ))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let once = std::env::args().any(|arg| arg == "--once");
    let demo = DemoModel::start().await?;
    eprintln!("note: using the offline demo model at {}", demo.base_url());
    let harness = AgentHarness::builder("assistant")
        .provider("demo", demo.provider()?)
        .agent_graph(noetic_examples::quickstart::agent("demo"))
        .build()?;
    let server = NoeticServer::new(harness.clone(), ServeConfig::new());
    // The app's own routes, and the harness under /agent.
    let app: axum::Router = axum::Router::new()
        .route(
            "/",
            axum::routing::get(|| async { "my app: the agent is at /agent/" }),
        )
        .nest_service("/agent", server.router());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let address = listener.local_addr()?;
    println!("serving on http://{address}/agent/");
    let serving = tokio::spawn(async move { axum::serve(listener, app).await });
    if !once {
        tokio::signal::ctrl_c().await?;
        server.stop(None).await;
        serving.abort();
        return Ok(());
    }
    let (status, body) = request(
        address,
        "POST",
        "/agent/v1/threads/demo/messages",
        r#"{"input": "What is Rust?", "message_id": "m1"}"#,
    )
    .await?;
    println!("POST messages: {status} {body}");
    let response = harness.agent_response(Scope::thread("demo")).await?;
    println!("answer: {}", response.text);
    let (status, _) = request(address, "GET", "/agent/v1/threads/demo", "").await?;
    println!("GET thread: {status}");
    let (status, body) = request(address, "GET", "/", "").await?;
    println!("GET /: {status} {body}");
    server.stop(None).await;
    serving.abort();
    Ok(())
}
