//! The agent the durability tests crash and resume, and the pieces to crash it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use noetic_core::{
    AgentHarness, Context, ContextOptions, KvDurableStore, ServeOptions, ServeReport, Step, Tool,
    ToolContext, ToolError, call_model, run_code, sequence,
};
use noetic_test_support::{ScriptedModel, ScriptedResponse};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};

/// What the agent's code and tools did, across every harness that ran it.
#[derive(Default)]
pub(crate) struct Counts {
    pub(crate) prepare: AtomicUsize,
    pub(crate) middle: AtomicUsize,
    /// Per call id: the idempotency keys of each run of the call.
    pub(crate) calls: Mutex<BTreeMap<String, Vec<String>>>,
}

impl Counts {
    pub(crate) fn call_runs(&self) -> BTreeMap<String, usize> {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .map(|(id, keys)| (id.clone(), keys.len()))
            .collect()
    }
}

#[derive(Deserialize, JsonSchema)]
pub(crate) struct EchoArgs {
    /// The text to echo.
    pub(crate) text: String,
}

/// A tool that records each run. When `block` names a call id, that call signals `started` and never
/// finishes (it is in flight when the run is dropped).
pub(crate) fn echo_tool(
    counts: Arc<Counts>,
    block: Option<(&'static str, mpsc::UnboundedSender<()>)>,
) -> Tool {
    Tool::new(
        "echo",
        "Echoes the text",
        move |args: EchoArgs, ctx: ToolContext| {
            let counts = counts.clone();
            let block = block.clone();
            async move {
                counts
                    .calls
                    .lock()
                    .unwrap()
                    .entry(ctx.call_id.clone())
                    .or_default()
                    .push(ctx.idempotency_key());
                if let Some((id, started)) = block
                    && id == ctx.call_id
                {
                    let _ = started.send(());
                    std::future::pending::<()>().await;
                }
                Ok::<_, ToolError>(args.text)
            }
        },
    )
}

/// `prepare` (code) → `gather` (model with `echo`) → `middle` (code) → `answer` (model).
pub(crate) fn agent(tool: Tool, counts: Arc<Counts>) -> Step<String, String> {
    let (prepare, middle) = (counts.clone(), counts);
    sequence("durable")
        .step(run_code("prepare", move |text: String, _: Context| {
            let counts = prepare.clone();
            async move {
                counts.prepare.fetch_add(1, Ordering::SeqCst);
                Ok::<_, std::convert::Infallible>(text)
            }
        }))
        .step(
            call_model("gather")
                .model("scripted-model")
                .instructions("Gather with echo.")
                .tool(tool),
        )
        .step(run_code("middle", move |text: String, _: Context| {
            let counts = middle.clone();
            async move {
                counts.middle.fetch_add(1, Ordering::SeqCst);
                Ok::<_, std::convert::Infallible>(format!("notes: {text}"))
            }
        }))
        .step(
            call_model("answer")
                .model("scripted-model")
                .instructions("Answer."),
        )
        .build()
}

/// The model's replies in request order: two echo rounds and the gathered text, then the answer.
pub(crate) fn replies() -> Vec<ScriptedResponse> {
    vec![
        ScriptedResponse::tool_call("call_a", "echo", json!({"text": "one"})),
        ScriptedResponse::tool_call("call_b", "echo", json!({"text": "two"})),
        ScriptedResponse::text("gathered one and two"),
        ScriptedResponse::text("the answer is three"),
    ]
}

/// A model serving `replies` from `from` on; the request with index `stall_at` (counted from `from`)
/// signals `stalled` and never ends.
pub(crate) fn model(
    from: usize,
    stall_at: Option<usize>,
    stalled: Option<mpsc::UnboundedSender<()>>,
) -> ScriptedModel {
    let served = AtomicUsize::new(from);
    ScriptedModel::responding(move |_| {
        let index = served.fetch_add(1, Ordering::SeqCst);
        if Some(index) == stall_at {
            if let Some(stalled) = &stalled {
                let _ = stalled.send(());
            }
            return ScriptedResponse::stall_after(Vec::new());
        }
        replies()
            .into_iter()
            .nth(index)
            .unwrap_or_else(|| panic!("no reply {index}"))
    })
}

pub(crate) fn harness(
    store: &Arc<KvDurableStore>,
    model: &ScriptedModel,
    tool: Tool,
    counts: Arc<Counts>,
) -> AgentHarness {
    AgentHarness::builder("durable")
        .provider("scripted", model.clone())
        .agent_graph(agent(tool, counts))
        .durable(store.clone())
        .build()
        .unwrap()
}

pub(crate) const INPUT: &str = "What is one plus two?";

/// Runs the agent on `harness` until `stop` fires (then drops the run: nothing more is recorded) and
/// closes the context; returns the execution id.
pub(crate) async fn run_until(
    harness: &AgentHarness,
    stop: &mut mpsc::UnboundedReceiver<()>,
) -> String {
    let ctx = harness.create_context(ContextOptions::new());
    let graph = harness.agent_graph::<String, String>().unwrap();
    tokio::select! {
        result = harness.run(&graph, INPUT.to_owned(), &ctx) => {
            panic!("the run was meant to be cut, but ended: {result:?}")
        }
        _ = stop.recv() => {}
    }
    // The run's future is gone: the last checkpoint is what a crash at this point leaves. Closing
    // releases the lease, as the lease's expiry would after a real crash.
    ctx.close().await;
    ctx.id().to_owned()
}

/// The JSON of items, to compare logs.
pub(crate) fn json_of(items: &[noetic_core::Item]) -> Value {
    serde_json::to_value(items).unwrap()
}

/// Serves `harness` (a host of a fleet, polling every 50 ms) on a task until the sender is used.
pub(crate) fn serve(
    harness: &AgentHarness,
) -> (oneshot::Sender<()>, tokio::task::JoinHandle<ServeReport>) {
    let (stop, stopped) = oneshot::channel::<()>();
    let harness = harness.clone();
    let serving = tokio::spawn(async move {
        harness
            .serve(
                async {
                    let _ = stopped.await;
                },
                ServeOptions::default().poll_interval(std::time::Duration::from_millis(50)),
            )
            .await
            .unwrap()
    });
    (stop, serving)
}
