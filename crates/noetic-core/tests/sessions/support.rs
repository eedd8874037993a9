//! Shared helpers for the session tests: harnesses over a paced or scripted model, an event recorder,
//! and tools the test releases by hand.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::stream::BoxStream;
use futures_util::{FutureExt, StreamExt};
use noetic_core::item::Item;
use noetic_core::{
    AgentHarness, AgentHarnessBuilder, FrameworkEvent, ResponseEvent, Scope, Step, StreamEvent,
    Tool, ToolContext, ToolError, call_model,
};
use noetic_test_support::{PacedModel, ScriptedModel, ScriptedResponse};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use tokio::sync::{Semaphore, mpsc};

/// How long a test waits for something it caused. Only a guard against hangs: every wait in these tests
/// is for an event the test itself made happen, so a healthy run never comes near it.
pub(crate) const HANG_GUARD: Duration = Duration::from_secs(10);

/// Awaits `future`, failing the test (instead of hanging it) if it does not finish within
/// [`HANG_GUARD`].
/// Runs one turn of `message` on the default thread and waits for its response.
pub(crate) async fn run_turn(harness: &noetic_core::AgentHarness, message: &str) {
    harness
        .execute(message, noetic_core::ExecuteOptions::default())
        .await
        .unwrap();
    guarded(
        "the response",
        harness.agent_response(noetic_core::Scope::default()),
    )
    .await
    .unwrap();
}

pub(crate) async fn guarded<F: Future>(what: &str, future: F) -> F::Output {
    tokio::time::timeout(HANG_GUARD, future)
        .await
        .unwrap_or_else(|_| panic!("hang guard: still waiting for {what}"))
}

/// The agent graph of most tests: one model call.
pub(crate) fn llm() -> Step<String, String> {
    call_model("llm").model("m").build()
}

/// A model call offering `tools`.
pub(crate) fn llm_with(tools: Vec<Tool>) -> Step<String, String> {
    call_model("llm").model("m").tools(tools).build()
}

/// A builder with the paced model as its only provider.
pub(crate) fn paced_builder(model: &PacedModel) -> AgentHarnessBuilder {
    AgentHarness::builder("agent").provider("paced", model.clone())
}

/// A harness whose agent graph is one model call on the paced model.
pub(crate) fn paced_harness(model: &PacedModel) -> AgentHarness {
    paced_builder(model).agent_graph(llm()).build().unwrap()
}

/// A harness whose agent graph is one model call on the scripted model.
pub(crate) fn scripted_harness(model: &ScriptedModel) -> AgentHarness {
    AgentHarness::builder("agent")
        .provider("scripted", model.clone())
        .agent_graph(llm())
        .build()
        .unwrap()
}

/// A scripted model that answers every request with `echo: <last user text>`.
pub(crate) fn echo_model() -> ScriptedModel {
    ScriptedModel::responding(|request| {
        let last = request.user_texts().pop().unwrap_or_default();
        ScriptedResponse::text(&format!("echo: {last}"))
    })
}

/// The events of a text answer (created, item added, deltas, item done, completed with 10/5 usage).
pub(crate) fn text_events(text: &str) -> Vec<ResponseEvent> {
    ScriptedResponse::text(text).into_events()
}

/// The events of a response calling `calls` (`(call_id, tool name)`, arguments `{}`), usage 10/5.
pub(crate) fn tool_call_events(calls: &[(&str, &str)]) -> Vec<ResponseEvent> {
    let calls: Vec<(&str, &str, serde_json::Value)> = calls
        .iter()
        .map(|(call_id, name)| (*call_id, *name, json!({})))
        .collect();
    ScriptedResponse::tool_calls(&calls).into_events()
}

/// A user text message with an id, so tests can find it again.
pub(crate) fn with_id(mut item: Item, id: &str) -> Item {
    if let Item::Message(message) = &mut item {
        message.id = Some(id.to_owned());
    }
    item
}

/// The texts of the message items, in order.
pub(crate) fn texts(items: &[Item]) -> Vec<String> {
    items.iter().filter_map(Item::text).collect()
}

/// The framework events among `events`.
pub(crate) fn framework(events: &[Arc<StreamEvent>]) -> Vec<FrameworkEvent> {
    events
        .iter()
        .filter_map(|event| match &**event {
            StreamEvent::Framework(event) => Some(event.clone()),
            _ => None,
        })
        .collect()
}

/// The types of the framework events among `events`.
pub(crate) fn framework_types(events: &[Arc<StreamEvent>]) -> Vec<&'static str> {
    framework(events)
        .iter()
        .map(FrameworkEvent::event_type)
        .collect()
}

/// The provider events among `events`.
pub(crate) fn sdk(events: &[Arc<StreamEvent>]) -> Vec<ResponseEvent> {
    events
        .iter()
        .filter_map(|event| match &**event {
            StreamEvent::Sdk(event) => Some(event.clone()),
            _ => None,
        })
        .collect()
}

/// The `message_ids` of every `turn_started` among `events`.
pub(crate) fn turn_message_ids(events: &[Arc<StreamEvent>]) -> Vec<Vec<String>> {
    framework(events)
        .into_iter()
        .filter_map(|event| match event {
            FrameworkEvent::TurnStarted { message_ids, .. } => Some(message_ids),
            _ => None,
        })
        .collect()
}

/// `(reason, error_kind)` of every `turn_aborted` among `events`.
pub(crate) fn turn_aborts(events: &[Arc<StreamEvent>]) -> Vec<(String, &'static str)> {
    framework(events)
        .into_iter()
        .filter_map(|event| match event {
            FrameworkEvent::TurnAborted {
                reason, error_kind, ..
            } => Some((reason, error_kind)),
            _ => None,
        })
        .collect()
}

/// Whether `event` ends a turn.
pub(crate) fn is_turn_end(event: &StreamEvent) -> bool {
    matches!(
        event,
        StreamEvent::Framework(
            FrameworkEvent::TurnCompleted { .. } | FrameworkEvent::TurnAborted { .. }
        )
    )
}

/// A session event subscription that keeps what it read.
pub(crate) struct Events {
    stream: BoxStream<'static, Arc<StreamEvent>>,
}

impl Events {
    /// Subscribes to the thread's events.
    pub(crate) fn subscribe(harness: &AgentHarness, scope: Scope) -> Self {
        Self::new(harness.events(scope))
    }

    /// Reads `stream` (e.g. from `events_with`).
    pub(crate) fn new(stream: BoxStream<'static, Arc<StreamEvent>>) -> Self {
        Events { stream }
    }

    /// The next event.
    pub(crate) async fn next(&mut self) -> Arc<StreamEvent> {
        guarded("the next session event", self.stream.next())
            .await
            .expect("session streams never end")
    }

    /// The events up to and including the first that matches `stop`.
    pub(crate) async fn until(
        &mut self,
        stop: impl Fn(&StreamEvent) -> bool,
    ) -> Vec<Arc<StreamEvent>> {
        let mut seen = Vec::new();
        loop {
            let event = self.next().await;
            let done = stop(&event);
            seen.push(event);
            if done {
                return seen;
            }
        }
    }

    /// The events up to and including the end of the next turn to end.
    pub(crate) async fn turn(&mut self) -> Vec<Arc<StreamEvent>> {
        self.until(is_turn_end).await
    }

    /// The events of the next `count` turns to end.
    pub(crate) async fn turns(&mut self, count: usize) -> Vec<Arc<StreamEvent>> {
        let mut seen = Vec::new();
        for _ in 0..count {
            seen.extend(self.turn().await);
        }
        seen
    }

    /// The events available right now, without waiting for more.
    pub(crate) fn ready(&mut self) -> Vec<Arc<StreamEvent>> {
        let mut seen = Vec::new();
        while let Some(Some(event)) = self.stream.next().now_or_never() {
            seen.push(event);
        }
        seen
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct NoArgs {}

/// A tool (`wait`) whose calls block until the test releases them, reporting each start; it gives up
/// (cooperatively) when its context is aborted.
pub(crate) struct Gate {
    started: tokio::sync::Mutex<mpsc::UnboundedReceiver<String>>,
    permits: Arc<Semaphore>,
    runs: Arc<AtomicUsize>,
    tool: Tool,
}

impl Gate {
    pub(crate) fn new() -> Self {
        let (started_tx, started) = mpsc::unbounded_channel();
        let permits = Arc::new(Semaphore::new(0));
        let runs = Arc::new(AtomicUsize::new(0));
        let tool = {
            let permits = permits.clone();
            let runs = runs.clone();
            Tool::new(
                "wait",
                "Waits until the test releases it",
                move |_: NoArgs, tool_ctx: ToolContext| {
                    let permits = permits.clone();
                    let started = started_tx.clone();
                    runs.fetch_add(1, Ordering::SeqCst);
                    async move {
                        let _ = started.send(tool_ctx.call_id.clone());
                        tokio::select! {
                            permit = permits.acquire() => {
                                permit.expect("never closed").forget();
                                Ok(format!("released {}", tool_ctx.call_id))
                            }
                            () = tool_ctx.ctx.cancelled() => Err(ToolError::new("aborted")),
                        }
                    }
                },
            )
        };
        Gate {
            started: tokio::sync::Mutex::new(started),
            permits,
            runs,
            tool,
        }
    }

    /// The tool.
    pub(crate) fn tool(&self) -> Tool {
        self.tool.clone()
    }

    /// Waits until a call starts; returns its call id.
    pub(crate) async fn started(&self) -> String {
        guarded("a `wait` tool call to start", async {
            self.started.lock().await.recv().await.expect("gate open")
        })
        .await
    }

    /// Lets one call finish.
    pub(crate) fn release(&self) {
        self.permits.add_permits(1);
    }

    /// How many calls ran.
    pub(crate) fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }
}

/// Sets its flag when dropped: shows that a future holding it was dropped.
struct DropFlag(Arc<std::sync::atomic::AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// A tool (`stubborn`) whose calls never return and ignore cancellation; it reports each start, and
/// whether its future was dropped.
pub(crate) struct Stubborn {
    started: tokio::sync::Mutex<mpsc::UnboundedReceiver<String>>,
    dropped: Arc<std::sync::atomic::AtomicBool>,
    tool: Tool,
}

impl Stubborn {
    pub(crate) fn new() -> Self {
        let (started_tx, started) = mpsc::unbounded_channel();
        let dropped = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let tool = {
            let dropped = dropped.clone();
            Tool::new(
                "stubborn",
                "Never returns, whatever happens",
                move |_: NoArgs, tool_ctx: ToolContext| {
                    let started = started_tx.clone();
                    let flag = DropFlag(dropped.clone());
                    async move {
                        let _flag = flag;
                        let _ = started.send(tool_ctx.call_id.clone());
                        std::future::pending::<()>().await;
                        Ok(String::new())
                    }
                },
            )
        };
        Stubborn {
            started: tokio::sync::Mutex::new(started),
            dropped,
            tool,
        }
    }

    /// The tool.
    pub(crate) fn tool(&self) -> Tool {
        self.tool.clone()
    }

    /// Waits until a call starts; returns its call id.
    pub(crate) async fn started(&self) -> String {
        guarded("a `stubborn` tool call to start", async {
            self.started.lock().await.recv().await.expect("tool alive")
        })
        .await
    }

    /// Whether a call's future was dropped.
    pub(crate) fn dropped(&self) -> bool {
        self.dropped.load(Ordering::SeqCst)
    }
}
