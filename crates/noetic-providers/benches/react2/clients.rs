//! The clients of one react-2 turn: the framework through `run()` (`AgentHarness` +
//! `OpenResponses`, the quick start's shape), the framework through sessions (the same harness with
//! the agent as its graph: `execute` + `agent_response`, one new thread per turn), the same sessions
//! on a durable SQLite store, and the bare floor (plain `reqwest` + `SseDecoder` +
//! `serde_json::Value`).
//!
//! All count their HTTP requests and report to a [`Gauge`] when a turn's answer request starts and when
//! the turn ends, so the memory measurement can show how many turns were live at once.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use noetic_core::model::{ModelRequest, ModelStream};
use noetic_core::{
    AgentHarness, ContextOptions, ExecuteOptions, ModelProvider, Scope, Step, Tool, ToolContext,
    ToolError, call_model, loop_step, until,
};
use noetic_providers::{OpenResponses, RetryConfig, SseDecoder};
use noetic_storage_sqlite::SqliteStorage;
use serde::Serialize;
use serde_json::{Value, json};

use crate::census::{Census, Tallies, Tally};
use crate::{INSTRUCTIONS, MODEL, QUESTION};

/// Which client a process runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Framework,
    Sessions,
    /// Sessions on a durable SQLite store (a fresh file per client process).
    Durable,
    /// Sessions on a durable PostgreSQL store (a fresh database of the bench's server, its URL in
    /// [`crate::PG_URL_VAR`]); one turn at a time only.
    DurablePg,
    Bare,
}

impl Kind {
    /// Every client, in the table's order.
    pub(crate) const ALL: [Kind; 4] = [Kind::Framework, Kind::Sessions, Kind::Durable, Kind::Bare];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Framework => "framework",
            Kind::Sessions => "sessions",
            Kind::Durable => "durable",
            Kind::DurablePg => "durable-pg",
            Kind::Bare => "bare",
        }
    }

    pub(crate) fn parse(name: &str) -> Option<Kind> {
        Kind::ALL
            .into_iter()
            .chain([Kind::DurablePg])
            .find(|kind| kind.name() == name)
    }
}

/// Counts turns whose answer (round 2) request has started and turns that ended, and keeps the largest
/// number of turns seen in round 2 at the same time.
#[derive(Debug, Default)]
pub(crate) struct Gauge {
    answering: AtomicUsize,
    ended: AtomicUsize,
    max_live: AtomicUsize,
}

impl Gauge {
    fn answer_started(&self) {
        let started = self.answering.fetch_add(1, Ordering::SeqCst) + 1;
        let live = started.saturating_sub(self.ended.load(Ordering::SeqCst));
        self.max_live.fetch_max(live, Ordering::SeqCst);
    }

    fn turn_ended(&self) {
        self.ended.fetch_add(1, Ordering::SeqCst);
    }

    /// The most turns seen in their answer round at once since the last reset.
    pub(crate) fn max_live(&self) -> usize {
        self.max_live.load(Ordering::SeqCst)
    }

    pub(crate) fn reset(&self) {
        self.answering.store(0, Ordering::SeqCst);
        self.ended.store(0, Ordering::SeqCst);
        self.max_live.store(0, Ordering::SeqCst);
    }
}

/// One of the two clients, ready to run turns from many tasks.
pub(crate) struct Client {
    kind: Kind,
    turns: AtomicUsize,
    requests: Arc<AtomicUsize>,
    gauge: Arc<Gauge>,
    inner: Inner,
}

enum Inner {
    Framework {
        harness: AgentHarness,
        agent: Step<String, String>,
    },
    Sessions {
        harness: AgentHarness,
        threads: AtomicUsize,
        /// The durable clients' store traffic so far.
        census: Option<Tallies>,
    },
    Bare {
        http: reqwest::Client,
        url: String,
        header: Option<&'static str>,
        tools: Value,
    },
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct LookupArgs {
    query: String,
}

/// What the `lookup` tool returns; the same text in both clients.
fn lookup(query: &str) -> String {
    format!("Results for: {query}")
}

impl Client {
    /// A client of the server at `base_url`; `header`, when given, is sent (set to `1`) with every
    /// request: [`crate::HOLD_HEADER`] asks the server to hold each answer open, [`crate::PACE_HEADER`] to pace
    /// every event.
    pub(crate) async fn new(kind: Kind, base_url: &str, header: Option<&'static str>) -> Client {
        let requests = Arc::new(AtomicUsize::new(0));
        let gauge = Arc::new(Gauge::default());
        let inner = match kind {
            Kind::Framework | Kind::Sessions | Kind::Durable | Kind::DurablePg => {
                let mut provider = OpenResponses::builder(base_url)
                    .name("bench")
                    .retry(RetryConfig::none());
                if let Some(header) = header {
                    provider = provider.header(header, "1");
                }
                let provider = Counting {
                    inner: provider.build().expect("provider"),
                    requests: Arc::clone(&requests),
                    gauge: Arc::clone(&gauge),
                };
                let lookup = Tool::new(
                    "lookup",
                    "Looks a query up",
                    |args: LookupArgs, _ctx: ToolContext| async move {
                        Ok::<_, ToolError>(lookup(&args.query))
                    },
                );
                let agent = loop_step("agent")
                    .step(
                        call_model("llm")
                            .model(MODEL)
                            .instructions(INSTRUCTIONS)
                            .tool(lookup),
                    )
                    .until(noetic_core::any([
                        until::no_tool_calls(),
                        until::max_steps(10),
                    ]))
                    .build();
                let mut builder = AgentHarness::builder("react2").provider("bench", provider);
                let mut census = None;
                if kind == Kind::Durable {
                    let path = std::env::temp_dir()
                        .join(format!("noetic-react2-{}.db", std::process::id()));
                    for suffix in ["", "-wal", "-shm"] {
                        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
                    }
                    let store = SqliteStorage::open(&path)
                        .await
                        .expect("a SQLite store in the temp dir");
                    let store = Census::new(store);
                    census = Some(store.tallies());
                    builder = builder.durable(store);
                }
                if kind == Kind::DurablePg {
                    let url = std::env::var(crate::PG_URL_VAR)
                        .unwrap_or_else(|_| panic!("{} is not set", crate::PG_URL_VAR));
                    let store = noetic_storage_postgres::PostgresStorage::connect(&url)
                        .await
                        .expect("the bench's PostgreSQL database");
                    let store = Census::new(store);
                    census = Some(store.tallies());
                    builder = builder.durable(store);
                }
                if kind != Kind::Framework {
                    let harness = builder.agent_graph(agent).build().expect("harness");
                    Inner::Sessions {
                        harness,
                        threads: AtomicUsize::new(0),
                        census,
                    }
                } else {
                    let harness = builder.build().expect("harness");
                    Inner::Framework { harness, agent }
                }
            }
            Kind::Bare => {
                // The same client settings as the provider's.
                let http = reqwest::Client::builder()
                    .connect_timeout(Duration::from_secs(10))
                    .build()
                    .expect("reqwest client");
                let tools = json!([{
                    "type": "function",
                    "name": "lookup",
                    "description": "Looks a query up",
                    "parameters": noetic_core::schema_for::<LookupArgs>(),
                    "strict": false,
                }]);
                Inner::Bare {
                    http,
                    url: format!("{}/responses", base_url.trim_end_matches('/')),
                    header,
                    tools,
                }
            }
        };
        Client {
            kind,
            turns: AtomicUsize::new(0),
            requests,
            gauge,
            inner,
        }
    }

    pub(crate) fn kind(&self) -> Kind {
        self.kind
    }

    /// Turns run so far.
    pub(crate) fn turns(&self) -> usize {
        self.turns.load(Ordering::SeqCst)
    }

    /// HTTP requests sent so far.
    pub(crate) fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    pub(crate) fn gauge(&self) -> &Gauge {
        &self.gauge
    }

    /// For the sessions client: how many sessions the harness holds, and the JSON size of the first
    /// thread's history (what an idle session must keep in any case).
    pub(crate) fn sessions(&self) -> Option<(usize, usize)> {
        match &self.inner {
            Inner::Sessions { harness, .. } => {
                let history = harness.session_history(Scope::thread("thread-0"));
                let bytes = serde_json::to_vec(&history).map_or(0, |json| json.len());
                Some((harness.session_count(), bytes))
            }
            _ => None,
        }
    }

    /// For the durable clients: what their store has been asked so far, by operation and kind.
    pub(crate) fn census(&self) -> Option<BTreeMap<String, Tally>> {
        match &self.inner {
            Inner::Sessions {
                census: Some(census),
                ..
            } => Some(census.lock().expect("census lock").clone()),
            _ => None,
        }
    }

    /// Runs one turn on a fresh context; returns the answer's length.
    ///
    /// # Errors
    /// A message when the turn fails or its answer is empty.
    pub(crate) async fn turn(&self) -> Result<usize, String> {
        self.turn_on(None).await
    }

    /// As [`Client::turn`]; a sessions client runs it on `thread` when given (the thread's history
    /// grows turn by turn, and every request carries it), else on a new thread.
    ///
    /// # Errors
    /// As [`Client::turn`].
    pub(crate) async fn turn_on(&self, thread: Option<&str>) -> Result<usize, String> {
        self.turns.fetch_add(1, Ordering::SeqCst);
        let answer = match &self.inner {
            Inner::Framework { harness, agent } => {
                let ctx = harness.create_context(ContextOptions::new());
                harness
                    .run(agent, QUESTION.to_owned(), &ctx)
                    .await
                    .map_err(|error| error.to_string())
            }
            Inner::Sessions {
                harness, threads, ..
            } => {
                let thread = thread.map_or_else(
                    || format!("thread-{}", threads.fetch_add(1, Ordering::SeqCst)),
                    str::to_owned,
                );
                let scope = Scope::thread(thread.clone());
                match harness
                    .execute(QUESTION, ExecuteOptions::default().thread_id(thread))
                    .await
                {
                    Ok(()) => harness
                        .agent_response(scope)
                        .await
                        .map(|response| response.text)
                        .map_err(|error| error.to_string()),
                    Err(error) => Err(error.to_string()),
                }
            }
            Inner::Bare {
                http,
                url,
                header,
                tools,
            } => self.bare_turn(http, url, *header, tools).await,
        };
        self.gauge.turn_ended();
        let answer = answer?;
        if answer.trim().is_empty() {
            return Err("the turn's answer is empty".to_owned());
        }
        Ok(answer.len())
    }

    /// The floor: two POSTs, read with `SseDecoder`, every event parsed as a `serde_json::Value`.
    async fn bare_turn(
        &self,
        http: &reqwest::Client,
        url: &str,
        header: Option<&'static str>,
        tools: &Value,
    ) -> Result<String, String> {
        let user = json!({"type": "message", "role": "user", "content": QUESTION});
        let mut input = vec![user];
        let mut call = None;
        let first = Body {
            model: MODEL,
            instructions: INSTRUCTIONS,
            input: &input,
            tools,
            stream: true,
        };
        self.post(http, url, header, &first, |mut event| {
            if event_type(&event) == Some("response.output_item.done")
                && event.pointer("/item/type").and_then(Value::as_str) == Some("function_call")
            {
                call = event.get_mut("item").map(Value::take);
            }
        })
        .await?;
        let call = call.ok_or("round 1 returned no function call")?;
        let call_id = call.get("call_id").cloned().unwrap_or(Value::Null);
        let arguments: Value = call
            .get("arguments")
            .and_then(Value::as_str)
            .map(serde_json::from_str)
            .transpose()
            .map_err(|error| format!("bad arguments: {error}"))?
            .unwrap_or(Value::Null);
        let query = arguments.get("query").and_then(Value::as_str).unwrap_or("");
        let output = lookup(query);
        input.push(call);
        input.push(json!({"type": "function_call_output", "call_id": call_id, "output": output}));
        let second = Body {
            model: MODEL,
            instructions: INSTRUCTIONS,
            input: &input,
            tools,
            stream: true,
        };
        self.gauge.answer_started();
        let mut answer = String::new();
        self.post(http, url, header, &second, |event| {
            if event_type(&event) == Some("response.output_text.delta")
                && let Some(delta) = event.get("delta").and_then(Value::as_str)
            {
                answer.push_str(delta);
            }
        })
        .await?;
        Ok(answer)
    }

    /// POSTs `body` and hands every parsed event to `on_event`; fails unless the stream completes.
    async fn post(
        &self,
        http: &reqwest::Client,
        url: &str,
        header: Option<&'static str>,
        body: &Body<'_>,
        mut on_event: impl FnMut(Value),
    ) -> Result<(), String> {
        self.requests.fetch_add(1, Ordering::SeqCst);
        let body = serde_json::to_vec(body).map_err(|error| error.to_string())?;
        let mut request = http
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(reqwest::header::ACCEPT, "text/event-stream")
            .body(body);
        if let Some(header) = header {
            request = request.header(header, "1");
        }
        let response = request.send().await.map_err(|error| error.to_string())?;
        if !response.status().is_success() {
            return Err(format!("HTTP {}", response.status()));
        }
        let mut decoder = SseDecoder::default();
        let mut chunks = response.bytes_stream();
        let mut failure = None;
        let mut completed = false;
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk.map_err(|error| error.to_string())?;
            decoder
                .feed(&chunk, &mut |event| {
                    if event.data == "[DONE]" || failure.is_some() {
                        return;
                    }
                    match serde_json::from_str::<Value>(&event.data) {
                        Ok(value) => {
                            completed |= event_type(&value) == Some("response.completed");
                            on_event(value);
                        }
                        Err(error) => failure = Some(error.to_string()),
                    }
                })
                .map_err(|error| error.to_string())?;
        }
        match failure {
            Some(error) => Err(error),
            None if !completed => Err("the stream ended without response.completed".to_owned()),
            None => Ok(()),
        }
    }
}

fn event_type(event: &Value) -> Option<&str> {
    event.get("type").and_then(Value::as_str)
}

/// A Responses request body, serialized straight from borrowed parts.
#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    instructions: &'a str,
    input: &'a [Value],
    tools: &'a Value,
    stream: bool,
}

/// The framework's provider, counting requests on the way (the count is the check that a turn makes
/// exactly two).
struct Counting {
    inner: OpenResponses,
    requests: Arc<AtomicUsize>,
    gauge: Arc<Gauge>,
}

impl ModelProvider for Counting {
    fn stream<'a>(
        &'a self,
        request: &'a ModelRequest<'a>,
    ) -> BoxFuture<'a, noetic_core::Result<ModelStream>> {
        self.requests.fetch_add(1, Ordering::SeqCst);
        if request.round > 0 {
            self.gauge.answer_started();
        }
        self.inner.stream(request)
    }
}
