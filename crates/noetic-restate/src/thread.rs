//! `NoeticThread`: a thread as a Restate virtual object keyed by its id. `turn` (exclusive: one
//! at a time per thread, queued by Restate; sent by the thread's inbox) runs the harness's agent
//! graph on the thread's history and the messages the inbox hands it, with its model rounds and
//! tool calls journaled; `history` (shared) reads the history while a turn runs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use noetic_core::{AgentHarness, ContextOptions, Error, Item};
use restate_sdk::prelude::*;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::mpsc;

use noetic_core::session::{EngineMessage, EngineTurn, ThreadRecorder};
use noetic_core::{EventSink, FrameworkEvent};

use crate::inbox::{LastTurn, MessageInput, NoeticInboxClient};
use crate::journal::{Bridge, Call, DecisionCall, StepCall};
use crate::record::{EventWriter, Records, Tee, read_history};

/// What `turn` takes: the first message of its batch. The inbox hands the turn the whole batch
/// when it begins; a turn sent straight to the object (not through the inbox) runs this message
/// alone.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TurnInput {
    /// The message's text.
    pub text: String,
    /// The message's id (the `execute` idempotency key), named by the turn's `turn_started`
    /// event and recorded with the message in a store; the invocation's id when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
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

/// What `decide` takes: a gated call's approval id and the decision.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DecideInput {
    /// The approval id (`{invocation id}:{call id}`), as the `approval_requested` event gives it.
    pub approval_id: String,
    /// The decision.
    #[serde(flatten)]
    pub decision: noetic_core::ApprovalDecision,
}

/// The object's implementation: the harness whose graph every turn runs, and where the turns'
/// events go in this process.
pub(crate) struct NoeticThread {
    pub(crate) harness: AgentHarness,
    pub(crate) event_sink: Option<Arc<dyn noetic_core::EventSink>>,
    /// The store that is the thread's record, when there is one (see `record.rs`).
    pub(crate) recorder: Option<ThreadRecorder>,
    /// The turns running in this process, by invocation id: `abort` cuts one at once when it is
    /// here.
    pub(crate) running: Running,
}

/// The turns running in this process, by invocation id.
pub(crate) type Running = Arc<Mutex<HashMap<String, noetic_core::Context>>>;

/// What `abort` takes: the turn's invocation.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AbortInput {
    /// The invocation running the turn.
    pub invocation_id: String,
}

/// Ends the turn's task when the handler's future is dropped (the invocation suspended or its
/// connection lost): a replay runs the turn again from the top, so nothing of this attempt may go on.
struct TurnTask {
    ctx: noetic_core::Context,
    task: tokio::task::JoinHandle<noetic_core::Result<Value>>,
    /// Where the turn is listed as running here, and under which invocation.
    running: Running,
    invocation_id: String,
}

impl Drop for TurnTask {
    fn drop(&mut self) {
        lock(&self.running).remove(&self.invocation_id);
        self.ctx
            .abort(Some("the Restate invocation's attempt ended".to_owned()));
        self.task.abort();
    }
}

/// A failed turn as the invocation's terminal error: `CODE: message`, status 409 when cancelled.
fn terminal(error: &Error) -> TerminalError {
    let status = if error.is_cancelled() { 409 } else { 500 };
    TerminalError::new_with_code(status, format!("{}: {error}", error.code()))
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
        // Steers from now on wait in the inbox for this turn's steer points; the ones it does not
        // take become turns of their own when it ends, however it ends.
        let invocation_id = ctx.invocation_id().to_owned();
        let Json(batch) = ctx
            .object_client::<NoeticInboxClient>(ctx.key())
            .begin(Json(invocation_id.clone()))
            .call()
            .await?;
        // The messages queued for this turn, coalesced; a turn sent straight to the object (not
        // through the inbox) has its own input alone.
        let messages = if batch.is_empty() {
            vec![MessageInput {
                message_id: input.message_id.unwrap_or_else(|| invocation_id.clone()),
                text: input.text,
            }]
        } else {
            batch
        };
        let message_ids: Vec<String> = messages
            .iter()
            .map(|message| message.message_id.clone())
            .collect();
        let records = Records {
            recorder: self.recorder.as_ref(),
            thread_id: ctx.key().to_owned(),
            turn_id: invocation_id.clone(),
            events: self.recorder.as_ref().map(|recorder| {
                EventWriter::new(recorder.clone(), ctx.key(), &invocation_id, message_ids)
            }),
        };
        // Outer error: the attempt failed (a store write, say) and Restate retries it; inner: the
        // turn's own outcome.
        let outcome = self.run_turn(&ctx, &records, messages).await?;
        let last = LastTurn {
            invocation_id,
            text: outcome.as_ref().ok().map(|output| output.text.clone()),
            error: outcome
                .as_ref()
                .err()
                .map(|error| error.message().to_owned()),
        };
        let inbox = || ctx.object_client::<NoeticInboxClient>(ctx.key());
        let mut finished = inbox().finish(Json(last.clone())).call().await;
        if matches!(&finished, Err(error) if error.code() == 409) {
            // An abort's cancel that reached the invocation as the turn ended lands on this call
            // (Restate delivers it once, at the next await): the inbox must still hear of the end.
            finished = inbox().finish(Json(last)).call().await;
        }
        // The turn's last events (`turn_completed` or `turn_aborted`) are written once the thread's
        // status says it ended: a client that reads them finds the thread idle.
        records.flush("end").await?;
        let output = outcome?;
        finished?;
        Ok(Json(output))
    }

    /// Decides a gated call of the thread's running (or next) turn: resolves the turn's signal
    /// `approval/{approval_id}`. Shared: answers while the turn runs. A decision sent before the turn
    /// waits is kept until it does; a second decision of the same call is ignored by the turn.
    #[handler]
    async fn decide(
        &self,
        ctx: SharedObjectContext<'_>,
        Json(input): Json<DecideInput>,
    ) -> HandlerResult<()> {
        let Some((invocation_id, _call_id)) = input.approval_id.split_once(':') else {
            return Err(TerminalError::new_with_code(
                400,
                format!(
                    "INVALID_ARGUMENT: `{}` is not an approval id (`{{invocation id}}:{{call id}}`)",
                    input.approval_id
                ),
            )
            .into());
        };
        ctx.invocation_handle(invocation_id.to_owned())
            .signal(format!("approval/{}", input.approval_id))
            .resolve(Json(input.decision));
        Ok(())
    }

    /// Aborts a turn of the thread: cancels its invocation and, when the turn runs in this process,
    /// aborts it here at once, so a round streaming now is cut (dropped, its spend accounted as a
    /// cancel's is) rather than run to its end. A turn running in another process learns of the
    /// cancel from Restate at its next step; a turn not begun yet (the thread's next) is dropped with
    /// its messages. Shared: answers while the turn runs.
    #[handler]
    async fn abort(
        &self,
        ctx: SharedObjectContext<'_>,
        Json(input): Json<AbortInput>,
    ) -> HandlerResult<()> {
        if let Some(turn) = lock(&self.running).get(&input.invocation_id) {
            turn.abort(Some("aborted through Restate".to_owned()));
        }
        ctx.invocation_handle(input.invocation_id.clone()).cancel();
        // A turn not begun never will: its messages go with it.
        drop(
            ctx.object_client::<NoeticInboxClient>(ctx.key())
                .dropped(Json(input.invocation_id))
                .send(),
        );
        Ok(())
    }

    /// The thread's history (shared: answers while a turn runs, with the history before it).
    #[handler]
    async fn history(&self, ctx: SharedObjectContext<'_>) -> HandlerResult<Json<Vec<Item>>> {
        Ok(Json(read_history(self.recorder.as_ref(), &ctx).await?))
    }
}

impl NoeticThread {
    /// The turn itself: `messages` appended to the history, the agent graph run with each model
    /// round and tool call a journaled step, the turn's new items recorded. The outer error ends
    /// the attempt (Restate retries it); the inner result is the turn's outcome.
    async fn run_turn(
        &self,
        ctx: &ObjectContext<'_>,
        records: &Records<'_>,
        messages: Vec<MessageInput>,
    ) -> HandlerResult<Result<TurnOutput, TerminalError>> {
        let history = records.history(ctx).await?;
        let start = history.len();
        let started = std::time::Instant::now();
        let (calls, mut steps) = mpsc::unbounded_channel();
        // The root takes the invocation's id: tool idempotency keys and approval ids are the same
        // on every attempt.
        let mut options = ContextOptions::new()
            .id(ctx.invocation_id())
            .thread_id(ctx.key())
            .items(history)
            .step_journal(Arc::new(Bridge {
                calls,
                events: records.events.clone(),
            }));
        let mut sinks: Vec<Arc<dyn EventSink>> = self.event_sink.iter().cloned().collect();
        if let Some(events) = &records.events {
            sinks.push(Arc::new(events.buffer.clone()));
        }
        if !sinks.is_empty() {
            options = options.event_sink(Arc::new(Tee(sinks)));
        }
        let turn_ctx = self.harness.create_context(options);
        let graph = match self.harness.agent_graph::<Value, Value>() {
            Ok(graph) => graph,
            Err(error) => return Ok(Err(terminal(&error))),
        };
        let messages: Vec<EngineMessage> = messages
            .into_iter()
            .map(|message| EngineMessage {
                id: message.message_id,
                items: vec![Item::user_text(message.text)],
            })
            .collect();
        turn_ctx.emit(FrameworkEvent::TurnStarted {
            turn_id: records.turn_id.clone(),
            message_ids: messages.iter().map(|message| message.id.clone()).collect(),
        });
        // Followers see the turn start now, not when its first round is journaled.
        records.flush("start").await?;
        lock(&self.running).insert(records.turn_id.clone(), turn_ctx.clone());
        let items: Vec<Item> = messages
            .iter()
            .flat_map(|message| message.items.iter().cloned())
            .collect();
        let mut turn = TurnTask {
            running: self.running.clone(),
            invocation_id: records.turn_id.clone(),
            ctx: turn_ctx.clone(),
            task: tokio::spawn({
                let turn_ctx = turn_ctx.clone();
                async move {
                    let result = turn_ctx.run_turn(&graph, items).await;
                    turn_ctx.close().await;
                    result
                }
            }),
        };
        let result = loop {
            tokio::select! {
                call = steps.recv() => {
                    // The turn holds its sender until it ends; `None` comes only after.
                    match call {
                        Some(Call::Step(call)) => journal_step(ctx, call).await,
                        Some(Call::Decision(call)) => wait_decision(ctx, records, call).await?,
                        Some(Call::Steers(reply)) => take_steers(ctx, reply).await,
                        // The turn's events could not be written: this attempt ends, Restate
                        // retries it (its writes are idempotent).
                        Some(Call::Fail(error)) => return Err(HandlerError::from(error)),
                        None => {}
                    }
                }
                ended = &mut turn.task => break ended,
            }
        };
        let elapsed = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let spend = turn.ctx.spend();
        // The history the turn started from: its context's items before its own.
        let base = || {
            let mut history = turn.ctx.items();
            history.truncate(start);
            history
        };
        let result = result.unwrap_or_else(|join| {
            Err(Error::Adapter {
                code: "RESTATE_TURN_FAILED",
                source: format!("the turn's task failed: {join}").into(),
            })
        });
        let output = match result {
            Ok(output) => output,
            Err(error) => {
                turn.ctx.emit(FrameworkEvent::TurnAborted {
                    turn_id: records.turn_id.clone(),
                    reason: error.to_string(),
                    error_kind: error.code(),
                });
                // With a store, the message is settled and the failure is the thread's last turn;
                // the object's history is left as it was.
                if records.recorder.is_some() {
                    let ended = EngineTurn {
                        turn_id: records.turn_id.clone(),
                        messages,
                        items: Vec::new(),
                        outcome: Err((error.code().to_owned(), error.to_string())),
                        spend,
                    };
                    records.record(ctx, base, &ended).await?;
                }
                return Ok(Err(terminal(&error)));
            }
        };
        // The turn's new items, journaled (their ids are made afresh on a replay), then recorded.
        let new_items = turn.ctx.items_since(start);
        let Json(new_items) = ctx
            .run(|| async move { Ok(Json(new_items)) })
            .name("record-turn")
            .await?;
        turn.ctx.emit(FrameworkEvent::TurnCompleted {
            turn_id: records.turn_id.clone(),
            duration_ms: elapsed,
        });
        let ended = EngineTurn {
            turn_id: records.turn_id.clone(),
            messages,
            items: new_items,
            outcome: Ok(output.clone()),
            spend,
        };
        records.record(ctx, base, &ended).await?;
        let text = match &output {
            Value::String(text) => text.clone(),
            Value::Null => String::new(),
            other => other.to_string(),
        };
        Ok(Ok(TurnOutput {
            output,
            text,
            usage: turn.ctx.tokens(),
        }))
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
    let _ = reply.send(
        journaled
            .map(Json::into_inner)
            .map_err(|error| journal_error(&error, String::new())),
    );
}

/// What a failed journal operation is to the turn: a cancel (Restate's 409: the invocation was
/// cancelled) or an `ENGINE_JOURNAL` error naming `step`.
fn journal_error(error: &TerminalError, step: String) -> Error {
    if error.code() == 409 {
        return Error::cancelled(Some("the Restate invocation was cancelled".to_owned()));
    }
    Error::EngineJournal {
        step,
        message: error.to_string(),
    }
}

/// Takes the steers waiting in the thread's inbox: a journaled call, so a replay gets the same.
async fn take_steers(
    ctx: &ObjectContext<'_>,
    reply: tokio::sync::oneshot::Sender<noetic_core::Result<Vec<MessageInput>>>,
) {
    let taken = ctx
        .object_client::<NoeticInboxClient>(ctx.key())
        .take()
        .call()
        .await;
    let _ = reply.send(
        taken
            .map(Json::into_inner)
            .map_err(|error| journal_error(&error, "steers".to_owned())),
    );
}

/// Waits for a gated call's decision: the invocation's signal `approval/{approval_id}`, journaled
/// once it comes (a replay gets it at once).
async fn wait_decision(
    ctx: &ObjectContext<'_>,
    records: &Records<'_>,
    call: DecisionCall,
) -> HandlerResult<()> {
    let DecisionCall { request, reply } = call;
    let inbox = || ctx.object_client::<NoeticInboxClient>(ctx.key());
    // Listed while it waits (`status`); journaled calls, so a replay lists it once. Then what led
    // here is written, before the wait (an attempt may end while it waits: the write must not).
    let decided = match inbox().awaiting(Json(request.clone())).call().await {
        Ok(()) => {
            records
                .flush(&format!("approval:{}:asked", request.approval_id))
                .await?;
            ctx.signal::<Json<noetic_core::ApprovalDecision>>(&format!(
                "approval/{}",
                request.approval_id
            ))
            .await
        }
        Err(error) => Err(error),
    };
    if decided.is_ok() {
        let _ = inbox()
            .settled(Json(request.approval_id.clone()))
            .call()
            .await;
    }
    let _ = reply.send(
        decided
            .map(Json::into_inner)
            .map_err(|error| journal_error(&error, format!("approval:{}", request.approval_id))),
    );
    Ok(())
}

fn lock(running: &Running) -> MutexGuard<'_, HashMap<String, noetic_core::Context>> {
    running
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The object's service options: a model round may run long, so an attempt is never aborted (and
/// its round paid again) for being slow: `abort_timeout` is `round_timeout`.
pub(crate) fn options(round_timeout: Duration) -> ServiceOptions {
    ServiceOptions::new().abort_timeout(round_timeout)
}
