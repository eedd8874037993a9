//! Threads on Restate: the quick start's agent served as the `NoeticThread` virtual object, a turn
//! sent through the ingress, its answer and the thread's history read back.
//!
//! ```text
//! cargo run -p noetic-examples --example restate
//! cargo run -p noetic-examples --example restate -- --ingress http://127.0.0.1:8080 --admin http://127.0.0.1:9070
//! cargo run -p noetic-examples --example restate -- --serve 127.0.0.1:9080 --provider-url URL [--needs-approval]
//! cargo run -p noetic-examples --example restate -- --store sqlite:threads.db
//! ```
//!
//! Without `--ingress`/`--admin` it starts a throwaway Restate server of its own (the pinned npm
//! package, installed with `npm ci` on first use; see docs/restate.md) and stops it at the end. The
//! model is the offline demo model unless `--provider-url` names an OpenResponses server. `--serve`
//! only serves the object on the address until killed, printing `approval_requested ID` for each
//! gated call it waits on (the crash tests run it so); `--needs-approval` gates the search tool.
//! `--store sqlite:PATH` keeps the threads' record (history, last turn, event log) in a SQLite file,
//! where a harness on the same file — `noetic serve --engine restate=…` — reads them.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use noetic_core::{AgentHarness, FrameworkEvent, StreamEvent, call_model};
use noetic_examples::quickstart::{agent, search_tool};
use noetic_providers::{DemoModel, OpenResponses};
use noetic_restate::{RestateClient, RestateHost};

fn flag(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|arg| arg == name)
        .and_then(|at| args.get(at + 1).cloned())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The model: an OpenResponses server when named, else the offline demo model.
    let mut _demo = None;
    let provider = match flag("--provider-url") {
        Some(url) => OpenResponses::builder(&url).name("demo").build()?,
        None => {
            let demo = DemoModel::start().await?;
            eprintln!("note: using the offline demo model at {}", demo.base_url());
            let provider = demo.provider()?;
            _demo = Some(demo);
            provider
        }
    };
    let builder = AgentHarness::builder("researcher").provider("demo", provider);
    let harness = if std::env::args().any(|arg| arg == "--needs-approval") {
        builder.agent_graph(
            call_model("researcher-llm")
                .model("demo")
                .instructions("You are a research assistant.")
                .tool(search_tool().needs_approval(true)),
        )
    } else {
        builder.agent_graph(agent("demo"))
    }
    .build()?;

    // The threads' record: a SQLite file when named, else the object's Restate state.
    let store = match flag("--store") {
        Some(spec) => {
            let path = spec
                .strip_prefix("sqlite:")
                .ok_or("--store must be sqlite:PATH")?;
            let store: Arc<dyn noetic_core::adapter::durable::DurableStore> =
                Arc::new(noetic_storage_sqlite::SqliteStorage::open(path).await?);
            Some(store)
        }
        None => None,
    };
    let host = |harness: AgentHarness| match &store {
        Some(store) => RestateHost::new(harness).store(store.clone()),
        None => RestateHost::new(harness),
    };

    if let Some(address) = flag("--serve") {
        let listener = tokio::net::TcpListener::bind(&address).await?;
        println!("serving NoeticThread on http://{}", listener.local_addr()?);
        // The gated calls this process waits on, for whoever decides them.
        let approvals = |event: StreamEvent| {
            if let StreamEvent::Framework(FrameworkEvent::ApprovalRequested {
                approval_id, ..
            }) = event
            {
                let mut out = std::io::stdout().lock();
                let _ = writeln!(out, "approval_requested {approval_id}");
                let _ = out.flush();
            }
        };
        host(harness)
            .event_sink(Arc::new(approvals))
            .serve(listener, std::future::pending::<()>())
            .await;
        return Ok(());
    }

    // The Restate server: the one named, or a throwaway one.
    let mut _server = None;
    let client = match (flag("--ingress"), flag("--admin")) {
        (Some(ingress), Some(admin)) => RestateClient::new(ingress, admin),
        _ => {
            let server = noetic_test_support::restate::RestateServer::start()?;
            eprintln!(
                "note: started a throwaway Restate server (ingress {}, admin {})",
                server.ingress_url(),
                server.admin_url()
            );
            let client = RestateClient::new(server.ingress_url(), server.admin_url());
            _server = Some(server);
            client
        }
    };

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let endpoint = format!("http://{}", listener.local_addr()?);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(host(harness).serve(listener, stopped));
    client.register(&endpoint).await?;

    let turn = client
        .execute("example-thread", "Find recent AI news", "example-message-1")
        .await?;
    let output = client.output(&turn, Duration::from_secs(120)).await?;
    println!("{}", output.text);
    let history = client.history("example-thread").await?;
    let status = client.status("example-thread").await?;
    println!(
        "(turn {}: {} items in the thread's history{}, {} input tokens; {} turn(s) ended on the thread)",
        turn.invocation_id,
        history.len(),
        if store.is_some() {
            " (in the store)"
        } else {
            ""
        },
        output.usage.input_tokens,
        status.turns
    );
    let _ = stop.send(());
    let _ = tokio::time::timeout(Duration::from_secs(10), serving).await;
    Ok(())
}
