//! A served harness on a real loopback port, an HTTP client, and an SSE reader.

use std::time::Duration;

use futures_util::StreamExt;
use noetic_core::{AgentHarness, ResponseEvent, Tool, ToolContext, ToolError, call_model};
use noetic_server::{NoeticServer, ServeConfig};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// The longest any wait of a test lasts: only a guard against hangs.
pub(crate) const WAIT: Duration = Duration::from_secs(20);

/// A harness whose agent is one model call on `provider`, offering `tools`.
pub(crate) fn harness(
    provider: impl noetic_core::ModelProvider + 'static,
    tools: Vec<Tool>,
) -> AgentHarness {
    AgentHarness::builder("agent")
        .provider("p", provider)
        .agent_graph(call_model("llm").model("m").tools(tools).build())
        .build()
        .unwrap()
}

/// `echo`, which answers `echoed <text>`; gated when `approval`.
pub(crate) fn echo_tool(approval: bool) -> Tool {
    Tool::dynamic(
        "echo",
        "Echoes its text",
        json!({"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}),
        |args: Value, _: ToolContext| async move {
            Ok::<_, ToolError>(json!(format!(
                "echoed {}",
                args["text"].as_str().unwrap_or("")
            )))
        },
    )
    .unwrap()
    .needs_approval(approval)
}

/// A text delta of the first output item's first part.
pub(crate) fn delta(text: &str) -> ResponseEvent {
    ResponseEvent::OutputTextDelta {
        output_index: 0,
        content_index: 0,
        delta: text.to_owned(),
    }
}

/// `future`, or a panic naming `what` after [`WAIT`].
pub(crate) async fn bounded<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(WAIT, future)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

/// A harness served on 127.0.0.1 (an ephemeral port) until dropped.
pub(crate) struct Served {
    pub(crate) server: NoeticServer,
    pub(crate) base: String,
    pub(crate) client: reqwest::Client,
    stop: CancellationToken,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Served {
    pub(crate) async fn start(harness: AgentHarness, config: ServeConfig) -> Served {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let server = NoeticServer::new(harness, config);
        let stop = CancellationToken::new();
        let serving = server.clone();
        let stopped = stop.clone();
        let task = tokio::spawn(async move {
            let _ = serving
                .serve(listener, stopped.cancelled_owned(), None)
                .await;
        });
        Served {
            server,
            base: format!("http://{address}"),
            client: reqwest::Client::new(),
            stop,
            task: Some(task),
        }
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub(crate) async fn get(&self, path: &str) -> (u16, Value) {
        let response = self.client.get(self.url(path)).send().await.unwrap();
        status_and_json(response).await
    }

    pub(crate) async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let response = self
            .client
            .post(self.url(path))
            .json(&body)
            .send()
            .await
            .unwrap();
        status_and_json(response).await
    }

    /// Subscribes to a thread's events (`query` appended, `last_event_id` sent when given).
    pub(crate) async fn events(
        &self,
        thread: &str,
        query: &str,
        last_event_id: Option<u64>,
    ) -> SseReader {
        let mut request = self
            .client
            .get(self.url(&format!("/v1/threads/{thread}/events{query}")));
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id.to_string());
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 200, "the events stream opens");
        assert_eq!(
            response.headers()["content-type"],
            "text/event-stream",
            "an SSE stream"
        );
        SseReader::new(response)
    }

    /// Stops serving and waits for the server task.
    pub(crate) async fn shutdown(mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            bounded("the server to stop", task).await.unwrap();
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

pub(crate) async fn status_and_json(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, body)
}

/// One SSE event as received.
#[derive(Debug, Clone)]
pub(crate) struct SseEvent {
    pub(crate) id: Option<u64>,
    pub(crate) data: Value,
}

impl SseEvent {
    pub(crate) fn kind(&self) -> &str {
        self.data["type"].as_str().unwrap_or("")
    }
}

/// Reads SSE events off a response body.
pub(crate) struct SseReader {
    body: futures_util::stream::BoxStream<'static, reqwest::Result<axum::body::Bytes>>,
    buffer: String,
}

impl SseReader {
    pub(crate) fn new(response: reqwest::Response) -> Self {
        SseReader {
            body: response.bytes_stream().boxed(),
            buffer: String::new(),
        }
    }

    /// The next event with data (comments and retry-only events skipped); `None` at the end.
    pub(crate) async fn next(&mut self) -> Option<SseEvent> {
        bounded("an SSE event", async {
            loop {
                while let Some(end) = self.buffer.find("\n\n") {
                    let block: String = self.buffer.drain(..end + 2).collect();
                    let mut id = None;
                    let mut data = String::new();
                    for line in block.lines() {
                        if let Some(value) = line.strip_prefix("id:") {
                            id = value.trim().parse().ok();
                        } else if let Some(value) = line.strip_prefix("data:") {
                            data.push_str(value.strip_prefix(' ').unwrap_or(value));
                        }
                    }
                    if !data.is_empty() {
                        return Some(SseEvent {
                            id,
                            data: serde_json::from_str(&data).unwrap(),
                        });
                    }
                }
                match self.body.next().await {
                    Some(Ok(chunk)) => self.buffer.push_str(&String::from_utf8_lossy(&chunk)),
                    _ => return None,
                }
            }
        })
        .await
    }

    /// Events up to and including the first whose type ends with `suffix`.
    pub(crate) async fn until(&mut self, suffix: &str) -> Vec<SseEvent> {
        let mut seen = Vec::new();
        loop {
            let event = self
                .next()
                .await
                .unwrap_or_else(|| panic!("the stream ended before `{suffix}`: {seen:#?}"));
            let done = event.kind().ends_with(suffix);
            seen.push(event);
            if done {
                return seen;
            }
        }
    }
}

/// The text of the `response.output_text.delta` events among `events`, joined.
pub(crate) fn text_of(events: &[SseEvent]) -> String {
    events
        .iter()
        .filter(|event| event.kind() == "response.output_text.delta")
        .map(|event| {
            event.data["data"]["delta"]
                .as_str()
                .unwrap_or("")
                .to_owned()
        })
        .collect()
}
