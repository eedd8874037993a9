//! react-2 turns on Restate against the in-process durable path (SQLite), with the same scripted
//! model: turns per second and CPU per turn.
//!
//! ```text
//! cargo bench -p noetic-restate --bench turns          # NOETIC_BENCH_TURNS=N (default 200)
//! ```
//!
//! Each turn is DESIGN §16's react-2 on its own thread: round 1 calls a tool that answers at once,
//! round 2 streams a ~200-word answer in ~50 deltas. The model is in-process and free, so what is
//! measured is the framework's and the engine's work. Turns go one at a time, then 32 at once. CPU is
//! read from `/proc`: this process (the service, or the harness) and, on Restate, the server's.
//!
//! DESIGN §16 sets no Restate target; the in-process durable turn's target is CPU ≤ 1.5× the
//! floor (355 µs), i.e. ≤ ~530 µs per react-2 turn with the provider's HTTP included — the scripted
//! model here has no HTTP, so the durable figure is below what the target measures.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a benchmark: failures are bugs to see at once

use std::sync::Arc;
use std::time::{Duration, Instant};

use noetic_core::{AgentHarness, ExecuteOptions, Scope, Tool, ToolContext, ToolError, call_model};
use noetic_restate::{RestateClient, RestateHost};
use noetic_test_support::restate::RestateServer;
use noetic_test_support::{RecordedRequest, ScriptedModel, ScriptedResponse, process_cpu};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

#[derive(Deserialize, JsonSchema)]
struct LookArgs {
    /// What to look up.
    query: String,
}

fn harness() -> noetic_core::AgentHarnessBuilder {
    let answer: String = (0..200).map(|n| format!("word{n} ")).collect();
    let model = ScriptedModel::responding(move |request: &RecordedRequest| {
        if request.tool_outputs().is_empty() {
            ScriptedResponse::tool_call("call_1", "look", json!({"query": "rust"}))
        } else {
            ScriptedResponse::text_in_deltas(&answer, answer.len() / 50)
        }
    });
    let tool = Tool::new(
        "look",
        "Looks it up",
        |args: LookArgs, _: ToolContext| async move { Ok::<_, ToolError>(args.query) },
    );
    AgentHarness::builder("bench")
        .provider("scripted", model)
        .agent_graph(
            call_model("chat")
                .model("scripted-model")
                .instructions("Look it up, then answer.")
                .tool(tool),
        )
}

struct Figures {
    turns: usize,
    wall: Duration,
    cpu: Duration,
    server_cpu: Option<Duration>,
}

impl Figures {
    fn print(&self, label: &str) {
        let per_turn = |cpu: Duration| cpu.as_secs_f64() * 1e6 / self.turns as f64;
        let server = self.server_cpu.map_or(String::new(), |cpu| {
            format!(
                ", server {:>7.0} µs, total {:>7.0} µs",
                per_turn(cpu),
                per_turn(cpu + self.cpu)
            )
        });
        println!(
            "  {label:<42} {:>7.0} turns/s   CPU per turn: this process {:>7.0} µs{server}",
            self.turns as f64 / self.wall.as_secs_f64(),
            per_turn(self.cpu),
        );
    }
}

/// Runs `turns` turns, `parallel` at a time, each through `turn(n)`.
async fn drive<F, Fut>(turns: usize, parallel: usize, server: Option<u32>, turn: F) -> Figures
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = ()>,
{
    use futures_util::StreamExt;
    let (cpu, server_cpu) = (
        process_cpu(None),
        server.and_then(|pid| process_cpu(Some(pid))),
    );
    let started = Instant::now();
    futures_util::stream::iter((0..turns).map(turn))
        .buffer_unordered(parallel)
        .collect::<Vec<()>>()
        .await;
    let wall = started.elapsed();
    Figures {
        turns,
        wall,
        cpu: process_cpu(None).unwrap_or_default() - cpu.unwrap_or_default(),
        server_cpu: server
            .and_then(|pid| process_cpu(Some(pid)))
            .zip(server_cpu)
            .map(|(now, then)| now - then),
    }
}

fn main() {
    let turns: usize = std::env::var("NOETIC_BENCH_TURNS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(200);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        println!("restate: {turns} react-2 turns per run, each on its own thread (scripted model)");

        // The in-process durable path: sessions on SQLite.
        let dir = tempfile::tempdir().unwrap();
        let store = noetic_storage_sqlite::SqliteStorage::open(dir.path().join("bench.db"))
            .await
            .unwrap();
        let local = Arc::new(harness().durable(store).build().unwrap());
        for (parallel, label) in [
            (1, "durable (SQLite), 1 at a time"),
            (32, "durable (SQLite), 32 at once"),
        ] {
            let prefix = format!("local-{parallel}");
            let figures = drive(turns, parallel, None, |n| {
                let (local, thread) = (local.clone(), format!("{prefix}-{n}"));
                async move {
                    local
                        .execute("go", ExecuteOptions::new().thread_id(&thread))
                        .await
                        .unwrap();
                    local.agent_response(Scope::thread(&thread)).await.unwrap();
                }
            })
            .await;
            figures.print(label);
        }

        // Restate: the service in this process, the server beside it.
        let server = match RestateServer::start() {
            Ok(server) => server,
            Err(why) => {
                println!("  restate: skipped, no Restate server ({why})");
                return;
            }
        };
        let client = Arc::new(RestateClient::new(server.ingress_url(), server.admin_url()));
        // The history as the object's state, then the threads' record in a SQLite store (the
        // deployment registered last takes the new invocations).
        let record_dir = tempfile::tempdir().unwrap();
        let record: Arc<dyn noetic_core::adapter::durable::DurableStore> = Arc::new(
            noetic_storage_sqlite::SqliteStorage::open(record_dir.path().join("record.db"))
                .await
                .unwrap(),
        );
        for (kind, store) in [("Restate", None), ("Restate + SQLite record", Some(record))] {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let endpoint = format!("http://{}", listener.local_addr().unwrap());
            let mut host = RestateHost::new(harness().build().unwrap());
            if let Some(store) = store {
                host = host.store(store);
            }
            tokio::spawn(host.serve(listener, std::future::pending::<()>()));
            client.register(&endpoint).await.unwrap();
            for parallel in [1, 32] {
                let prefix = format!("{kind}-{parallel}").replace([' ', '+'], "-");
                let figures = drive(turns, parallel, server.pid(), |n| {
                    let (client, thread) = (client.clone(), format!("{prefix}-{n}"));
                    async move {
                        let turn = client.execute(&thread, "go", &thread).await.unwrap();
                        client.output(&turn, Duration::from_secs(60)).await.unwrap();
                    }
                })
                .await;
                let label = if parallel == 1 {
                    format!("{kind}, 1 at a time")
                } else {
                    format!("{kind}, {parallel} at once")
                };
                figures.print(&label);
            }
        }
    });
}
