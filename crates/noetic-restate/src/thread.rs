//! `NoeticThread`: a thread as a Restate virtual object keyed by its id. `turn` (exclusive: one
//! at a time per thread, queued by Restate) runs the harness's agent graph on the thread's history
//! with its model rounds and tool calls journaled; `history` (shared) reads the history while a
//! turn runs.

use std::sync::Arc;
use std::time::Duration;

use noetic_core::{AgentHarness, ContextOptions, Error, Item};
use restate_sdk::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::journal::{Bridge, StepCall};

/// The state key of the thread's history.
const HISTORY: &str = "history";

/// What `turn` takes: the user's message.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TurnInput {
    /// The message's text.
    pub text: String,
}

/// What `turn` answers: the graph's output and what the turn spent.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TurnOutput {
    /// The graph's output.
    pub output: Value,
    /// The output as text (a string as is, JSON otherwise).
    pub text: String,
    /// Tokens the turn's rounds used, replayed ones included.
    pub usage: noetic_core::TokenUsage,
}

/// The object's implementation: the harness whose graph every turn runs.
pub(crate) struct NoeticThread {
    pub(crate) harness: AgentHarness,
}

/// Ends the turn's task when the handler's future is dropped (the invocation suspended or its
/// connection lost): a replay runs the turn again from the top, so nothing of this attempt may go on.
struct TurnTask {
    ctx: noetic_core::Context,
    task: tokio::task::JoinHandle<noetic_core::Result<Value>>,
}

impl Drop for TurnTask {
    fn drop(&mut self) {
        self.ctx
            .abort(Some("the Restate invocation's attempt ended".to_owned()));
        self.task.abort();
    }
}

/// A failed turn as the invocation's terminal error: `CODE: message`, status 409 when cancelled.
fn terminal(error: &Error) -> HandlerError {
    let status = if error.is_cancelled() { 409 } else { 500 };
    TerminalError::new_with_code(status, format!("{}: {error}", error.code())).into()
}

#[restate_sdk::object(name = "NoeticThread")]
impl NoeticThread {
    /// Runs one turn of the thread: `input` appended to its history, the agent graph run with each
    /// model round and tool call a journaled step, the turn's new items recorded.
    #[handler]
    async fn turn(
        &self,
        ctx: ObjectContext<'_>,
        Json(input): Json<TurnInput>,
    ) -> HandlerResult<Json<TurnOutput>> {
        let history: Vec<Item> = ctx
            .get::<Json<Vec<Item>>>(HISTORY)
            .await?
            .map(Json::into_inner)
            .unwrap_or_default();
        let start = history.len();
        let (calls, mut steps) = mpsc::unbounded_channel();
        let turn_ctx = self.harness.create_context(
            ContextOptions::new()
                .thread_id(ctx.key())
                .items(history)
                .step_journal(Arc::new(Bridge { calls })),
        );
        let graph = self
            .harness
            .agent_graph::<Value, Value>()
            .map_err(|error| terminal(&error))?;
        let mut turn = TurnTask {
            ctx: turn_ctx.clone(),
            task: tokio::spawn({
                let (harness, turn_ctx) = (self.harness.clone(), turn_ctx.clone());
                async move {
                    let result = harness
                        .run(&graph, Value::String(input.text), &turn_ctx)
                        .await;
                    turn_ctx.close().await;
                    result
                }
            }),
        };
        let result = loop {
            tokio::select! {
                call = steps.recv() => {
                    // The turn holds its sender until it ends; `None` comes only after.
                    if let Some(call) = call {
                        journal_step(&ctx, call).await;
                    }
                }
                ended = &mut turn.task => break ended,
            }
        };
        let output = match result {
            Ok(Ok(output)) => output,
            Ok(Err(error)) => return Err(terminal(&error)),
            Err(join) => {
                return Err(TerminalError::new(format!("the turn's task failed: {join}")).into());
            }
        };
        // The turn's new items, journaled (their ids are made afresh on a replay), then stored.
        let new_items = turn.ctx.items_since(start);
        let Json(new_items) = ctx
            .run(|| async move { Ok(Json(new_items)) })
            .name("record-turn")
            .await?;
        let mut history = turn.ctx.items();
        history.truncate(start);
        history.extend(new_items);
        ctx.set(HISTORY, Json(history));
        let text = match &output {
            Value::String(text) => text.clone(),
            Value::Null => String::new(),
            other => other.to_string(),
        };
        Ok(Json(TurnOutput {
            output,
            text,
            usage: turn.ctx.tokens(),
        }))
    }

    /// The thread's history (shared: answers while a turn runs, with the history before it).
    #[handler]
    async fn history(&self, ctx: SharedObjectContext<'_>) -> HandlerResult<Json<Vec<Item>>> {
        Ok(ctx
            .get::<Json<Vec<Item>>>(HISTORY)
            .await?
            .unwrap_or_else(|| Json(Vec::new())))
    }
}

/// Journals one step the turn asked for: `ctx.run` calls the closure (the turn runs the step) only
/// when the journal has no result for it yet.
async fn journal_step(ctx: &ObjectContext<'_>, call: StepCall) {
    let StepCall { name, go, reply } = call;
    let journaled = ctx
        .run(move || async move {
            let (answer, result) = tokio::sync::oneshot::channel();
            go.send(answer)
                .map_err(|_| TerminalError::new("the turn is gone"))?;
            let recorded = result
                .await
                .map_err(|_| TerminalError::new("the turn ended without a result"))?;
            Ok(Json(recorded))
        })
        .name(name)
        .await;
    let _ = reply.send(match journaled {
        Ok(Json(recorded)) => Ok(recorded),
        Err(error) => Err(if error.code() == 409 {
            Error::cancelled(Some("the Restate invocation was cancelled".to_owned()))
        } else {
            Error::EngineJournal {
                step: String::new(),
                message: error.to_string(),
            }
        }),
    });
}

/// The object's service options: a model round may run long, so an attempt is never aborted (and
/// its round paid again) for being slow: `abort_timeout` is `round_timeout`.
pub(crate) fn options(round_timeout: Duration) -> ServiceOptions {
    ServiceOptions::new().abort_timeout(round_timeout)
}
