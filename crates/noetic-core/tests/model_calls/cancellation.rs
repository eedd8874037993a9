//! The tool contract under cancellation: a tool that ignores its context's cancellation is dropped
//! when the context is aborted, so the step ends with `CANCELLED` at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use noetic_core::item::Item;
use noetic_core::{Tool, ToolContext, call_model};
use noetic_test_support::{ScriptedModel, ScriptedResponse};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::support::setup;

/// Sets its flag when dropped.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// A tool that reports its start and then never returns, ignoring cancellation.
fn stubborn(started: mpsc::UnboundedSender<()>, dropped: &Arc<AtomicBool>) -> Tool {
    let dropped = dropped.clone();
    Tool::dynamic(
        "stubborn",
        "Never returns",
        json!({"type": "object"}),
        move |_: Value, _ctx: ToolContext| {
            let started = started.clone();
            let flag = DropFlag(dropped.clone());
            async move {
                let _flag = flag;
                let _ = started.send(());
                std::future::pending::<()>().await;
                Ok(Value::Null)
            }
        },
    )
    .unwrap()
}

#[tokio::test(start_paused = true)]
async fn aborting_the_context_drops_a_tool_that_ignores_cancellation() {
    for concurrency in [1, 2] {
        let model = ScriptedModel::with_responses([ScriptedResponse::tool_call(
            "c1",
            "stubborn",
            json!({}),
        )]);
        let (harness, ctx, _log) = setup(&model);
        let (started_tx, mut started) = mpsc::unbounded_channel();
        let dropped = Arc::new(AtomicBool::new(false));
        let step = call_model("llm")
            .model("m")
            .tool(stubborn(started_tx, &dropped))
            .tool_concurrency(concurrency)
            .build();

        let run = harness.run(&step, "go".to_owned(), &ctx);
        let abort = async {
            started.recv().await.unwrap();
            ctx.abort(Some("stop".to_owned()));
        };
        // Paused time: if the run hangs on the tool, the clock jumps to this timeout at once.
        let (result, ()) = tokio::time::timeout(Duration::from_secs(3600), async {
            tokio::join!(run, abort)
        })
        .await
        .unwrap_or_else(|_| panic!("the run hung on the tool (concurrency {concurrency})"));

        let error = result.unwrap_err();
        assert_eq!(error.code(), "CANCELLED", "{error}");
        assert!(
            dropped.load(Ordering::SeqCst),
            "the tool's future was dropped"
        );
        let items = ctx.items();
        assert_eq!(
            items[items.len() - 2..],
            [
                Item::function_call("c1", "stubborn", "{}"),
                Item::function_call_output(
                    "c1",
                    "Tool call aborted: the run was cancelled while the tool was running."
                ),
            ],
            "the call keeps an output saying it was aborted (concurrency {concurrency})"
        );
    }
}
