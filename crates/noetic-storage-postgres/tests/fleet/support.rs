//! A fleet of worker processes on one PostgreSQL database, for the fleet tests and the fleet bench.
//!
//! The test binary is also the worker: run with `NOETIC_FLEET_WORKER=<name>` it serves the thread
//! space on `DATABASE_URL` with a model at `MODEL_URL` (the test's mock provider) and logs what it
//! claims and lets go on stdout, which the test reads as its event stream.

#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)] // shared by a test and a bench

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use noetic_core::{AgentHarness, ServeOptions, Tool, ToolContext, ToolError, call_model};
use noetic_providers::OpenResponses;
use noetic_storage_postgres::{LeaseClock, PostgresOptions, PostgresStorage};
use noetic_test_support::{MockReply, RecordedHttpRequest};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// Set (to the worker's name) in a worker process.
pub const WORKER: &str = "NOETIC_FLEET_WORKER";

/// How a worker is configured.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    pub database_url: String,
    pub model_url: String,
    pub lease_ttl: Duration,
    pub poll: Duration,
    pub max_threads: usize,
    /// The worker whose `lookup` tool hangs on a `hang…` text, and how: `forever`, or a number of
    /// milliseconds to sleep.
    pub hang: Option<(String, String)>,
}

impl WorkerConfig {
    pub fn new(database_url: &str, model_url: &str) -> Self {
        WorkerConfig {
            database_url: database_url.to_owned(),
            model_url: model_url.to_owned(),
            lease_ttl: Duration::from_millis(1_000),
            poll: Duration::from_millis(100),
            max_threads: 64,
            hang: None,
        }
    }
}

/// A worker process, its stdout lines forwarded to the fleet's event channel.
pub struct Worker {
    pub name: String,
    pub child: Child,
}

impl Worker {
    /// Starts worker `name`; its stdout lines arrive on `events` as `(name, line)`.
    pub fn start(
        name: &str,
        config: &WorkerConfig,
        events: &mpsc::UnboundedSender<(String, String)>,
    ) -> Worker {
        let mut command = Command::new(std::env::current_exe().unwrap());
        command
            .env(WORKER, name)
            .env("DATABASE_URL", &config.database_url)
            .env("MODEL_URL", &config.model_url)
            .env("LEASE_TTL_MS", config.lease_ttl.as_millis().to_string())
            .env("POLL_MS", config.poll.as_millis().to_string())
            .env("MAX_THREADS", config.max_threads.to_string())
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if let Some((who, how)) = &config.hang {
            command.env("HANG_ON", who).env("HANG_MODE", how);
        }
        let mut child = command.spawn().expect("start a worker process");
        let stdout = child.stdout.take().unwrap();
        let (events, who) = (events.clone(), name.to_owned());
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if events.send((who.clone(), line)).is_err() {
                    break;
                }
            }
            let _ = events.send((who, "exited".to_owned()));
        });
        Worker {
            name: name.to_owned(),
            child,
        }
    }

    /// Sends `signal` (`STOP`, `CONT`, `TERM`, `KILL`) to the process.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} {}", self.child.id());
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Awaits `future` for at most `limit`, panicking with `what` it waited for: every wait of the fleet
/// tests is bounded, so a hang fails naming what never came.
pub async fn within<T>(
    what: &str,
    limit: Duration,
    future: impl std::future::Future<Output = T>,
) -> T {
    match tokio::time::timeout(limit, future).await {
        Ok(value) => value,
        Err(_) => panic!("timed out after {limit:?} waiting for {what}"),
    }
}

/// Reads fleet events until `done` says so (at most `timeout`); returns every line read, in order.
pub async fn until_event(
    events: &mut mpsc::UnboundedReceiver<(String, String)>,
    timeout: Duration,
    what: &str,
    mut done: impl FnMut(&str, &str) -> bool,
) -> Vec<(String, String)> {
    let mut seen = Vec::new();
    let waited = tokio::time::timeout(timeout, async {
        while let Some((worker, line)) = events.recv().await {
            let stop = done(&worker, &line);
            seen.push((worker, line));
            if stop {
                return true;
            }
        }
        false
    })
    .await;
    assert!(
        waited == Ok(true),
        "no event for {what} within {timeout:?}; saw: {seen:#?}"
    );
    seen
}

/// The user texts of a request's input, in order.
pub fn user_texts(body: &Value) -> Vec<String> {
    let Some(input) = body.get("input").and_then(Value::as_array) else {
        return Vec::new();
    };
    input
        .iter()
        .filter(|item| item.get("role").and_then(Value::as_str) == Some("user"))
        .filter_map(|item| match item.get("content")? {
            Value::String(text) => Some(text.clone()),
            Value::Array(parts) => Some(
                parts
                    .iter()
                    .filter_map(|part| part.get("text").and_then(Value::as_str))
                    .collect::<String>(),
            ),
            _ => None,
        })
        .collect()
}

/// How many assistant messages a request's input carries.
pub fn answers_in(body: &Value) -> usize {
    body.get("input")
        .and_then(Value::as_array)
        .map_or(0, |input| {
            input
                .iter()
                .filter(|item| item.get("role").and_then(Value::as_str) == Some("assistant"))
                .count()
        })
}

/// The tool outputs of a request's input.
pub fn tool_outputs(body: &Value) -> Vec<String> {
    body.get("input")
        .and_then(Value::as_array)
        .map_or_else(Vec::new, |input| {
            input
                .iter()
                .filter(|item| {
                    item.get("type").and_then(Value::as_str) == Some("function_call_output")
                })
                .filter_map(|item| {
                    item.get("output")
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                })
                .collect()
        })
}

/// The thread a request is for: the prefix (up to the first space) of its first user text.
pub fn thread_of(request: &RecordedHttpRequest) -> String {
    user_texts(&request.body)
        .first()
        .and_then(|text| text.split(' ').next())
        .unwrap_or_default()
        .to_owned()
}

/// The mock model: a request whose newest input is a user text starting `<thread> hang` calls
/// `lookup` with it; one with a tool output answers `found: <output>`; any other answers
/// `re: <user texts>`.
pub fn respond(request: &RecordedHttpRequest) -> MockReply {
    let body = &request.body;
    let last = body
        .get("input")
        .and_then(Value::as_array)
        .and_then(|input| input.last());
    let outputs = tool_outputs(body);
    let is_user = last
        .and_then(|item| item.get("role"))
        .and_then(Value::as_str)
        == Some("user");
    let texts = user_texts(body);
    match texts.last() {
        Some(text) if is_user && text.split(' ').nth(1) == Some("hang") => {
            MockReply::function_call(
                &format!("call_{}", thread_of(request)),
                "lookup",
                &json!({ "text": text }),
            )
        }
        _ if !outputs.is_empty() && !is_user => {
            MockReply::answer(&format!("found: {}", outputs.join(", ")))
        }
        _ => MockReply::answer(&format!("re: {}", texts.join(" + "))),
    }
}

#[derive(Deserialize, JsonSchema)]
struct LookupArgs {
    /// What to look up.
    text: String,
}

/// The worker process: serves until SIGTERM, then prints its report.
pub fn worker_main(name: &str) {
    let var = |key: &str| std::env::var(key).unwrap_or_else(|_| panic!("{key} is not set"));
    let ms = |key: &str| Duration::from_millis(var(key).parse().unwrap());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    tracing_subscriber::fmt()
        .with_writer(std::io::stdout)
        .with_ansi(false)
        .with_target(false)
        .with_max_level(tracing::Level::INFO)
        .init();
    let hangs = std::env::var("HANG_ON").is_ok_and(|who| who == name);
    let hang_mode = std::env::var("HANG_MODE").unwrap_or_default();
    runtime.block_on(async move {
        let store = PostgresStorage::connect_with(
            &var("DATABASE_URL"),
            PostgresOptions::default()
                .lease_clock(LeaseClock::Database)
                .max_connections(8),
        )
        .await
        .expect("connect to the database");
        let provider = OpenResponses::builder(var("MODEL_URL")).build().unwrap();
        let lookup = Tool::new(
            "lookup",
            "Looks the text up",
            move |args: LookupArgs, _: ToolContext| {
                let mode = hang_mode.clone();
                async move {
                    if hangs && args.text.split(' ').nth(1) == Some("hang") {
                        println!("tool started");
                        let _ = std::io::stdout().flush();
                        match mode.parse::<u64>() {
                            Ok(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
                            Err(_) => std::future::pending::<()>().await,
                        }
                    }
                    Ok::<_, ToolError>(format!("looked up {}", args.text))
                }
            },
        );
        let harness = AgentHarness::builder("fleet-worker")
            .provider("mock", provider)
            .agent_graph(
                call_model("chat")
                    .model("mock-model")
                    .instructions("Answer.")
                    .tool(lookup),
            )
            .durable(store)
            .shared_threads()
            .lease_ttl(ms("LEASE_TTL_MS"))
            .build()
            .unwrap();
        let mut terminate =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).unwrap();
        println!("ready");
        let report = harness
            .serve(
                async move {
                    terminate.recv().await;
                },
                ServeOptions::default()
                    .poll_interval(ms("POLL_MS"))
                    .max_threads(var("MAX_THREADS").parse().unwrap())
                    .drain(Duration::from_secs(5)),
            )
            .await
            .unwrap();
        println!(
            "report claimed={} released={} lost={} failed={} abandoned={}",
            report.claimed, report.released, report.lost, report.failed, report.abandoned
        );
    });
}

/// Whether `line` says `thread` was let go (with `outcome`, when given).
pub fn let_go(line: &str, thread: &str, outcome: Option<&str>) -> bool {
    line.contains("thread let go")
        && line.contains(&format!("thread_id={thread} "))
        && outcome.is_none_or(|outcome| line.contains(&format!("outcome={outcome}")))
}

/// Whether `line` says `thread` was claimed.
pub fn claimed(line: &str, thread: &str) -> bool {
    line.contains("thread claimed") && line.contains(&format!("thread_id={thread} "))
}

/// A store on the fleet's database (its own small pool).
pub async fn store(database_url: &str) -> PostgresStorage {
    PostgresStorage::connect_with(database_url, PostgresOptions::default().max_connections(4))
        .await
        .unwrap()
}

/// A host of the fleet that only accepts messages (and reads threads), in the test process.
pub async fn front(database_url: &str) -> AgentHarness {
    let store =
        PostgresStorage::connect_with(database_url, PostgresOptions::default().max_connections(4))
            .await
            .unwrap();
    AgentHarness::builder("fleet-front")
        .agent_graph(call_model("chat").model("mock-model"))
        .provider("mock", noetic_test_support::ScriptedModel::new())
        .durable(store)
        .shared_threads()
        .build()
        .unwrap()
}
