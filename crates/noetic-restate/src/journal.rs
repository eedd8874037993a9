//! The bridge between noetic's turn loop and a Restate invocation's journal.
//!
//! A turn runs on a task of its own (noetic's `Context` is `'static`; a Restate context borrows its
//! invocation), so its [`StepJournal`] cannot call `ctx.run` itself. It sends each step to the
//! handler instead, which runs `ctx.run` with a closure that asks the turn to run the step and waits
//! for its result. When Restate has the step recorded (a replay), it never calls the closure: the
//! closure is dropped, the turn sees no go-ahead, drops its step unpolled and takes the recorded
//! result. Steps are journaled one at a time, in the order the turn asks for them.
//!
//! A gated tool call's wait is the invocation's signal `approval/{approval_id}` (approval ids are
//! `{invocation id}:{call id}`, the turn's root context taking the invocation's id): whoever knows
//! the id resolves it through `NoeticThread/{thread}/decide`, before or while the turn waits, and a
//! thread waiting for a person holds no process once Restate suspends the invocation.
//!
//! At each steer point the turn asks for the steers waiting in the thread's `NoeticInbox`: the
//! handler calls its `take`, a journaled call, so a replay gets the same steers at the same place.

use futures_util::future::BoxFuture;
use noetic_core::engine::StepJournal;
use noetic_core::{ApprovalDecision, ApprovalRequest, DeliveryMode, Error, Item, Result, Steer};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use crate::inbox::MessageInput;
use crate::record::EventWriter;

/// A step's result as the journal keeps it: a failure is recorded too, so a replay takes the same
/// path the first run took.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Recorded {
    Ok(Value),
    Failed { code: String, message: String },
}

/// What the turn asks of the handler.
pub(crate) enum Call {
    /// Journal a step.
    Step(StepCall),
    /// Wait, durably, for the decision on a gated call.
    Decision(DecisionCall),
    /// Take the steers waiting in the thread's inbox (a journaled call to `NoeticInbox/take`).
    Steers(oneshot::Sender<Result<Vec<MessageInput>>>),
    /// End the attempt: the turn's events could not be written (Restate retries it).
    Fail(Error),
}

/// A gated call's wait: the handler awaits the invocation's signal `approval/{approval_id}`.
pub(crate) struct DecisionCall {
    pub(crate) request: ApprovalRequest,
    pub(crate) reply: oneshot::Sender<Result<ApprovalDecision>>,
}

/// One step the turn asks the handler to journal.
pub(crate) struct StepCall {
    pub(crate) name: String,
    /// Sent when the engine has no record of the step: the turn runs it and answers on the sender.
    pub(crate) go: oneshot::Sender<oneshot::Sender<Recorded>>,
    /// The journaled result (recorded now or earlier), or why there is none (the invocation was
    /// cancelled: `CANCELLED`).
    pub(crate) reply: oneshot::Sender<Result<Recorded>>,
}

/// The turn's side: a [`StepJournal`] that hands every step to the invocation's handler.
pub(crate) struct Bridge {
    pub(crate) calls: mpsc::UnboundedSender<Call>,
    /// With a store: writes the events of each step once it is journaled, before the turn goes on.
    pub(crate) events: Option<EventWriter>,
}

impl Bridge {
    /// Writes the events gathered up to the end of the journaled step `name` (`ran`: this attempt
    /// ran it). When that fails,
    /// asks the handler to end the attempt and waits for it to (the turn never goes on unwritten).
    async fn written(&self, name: &str, ran: bool) {
        let Some(events) = &self.events else {
            return;
        };
        if let Err(error) = events.write(name, ran).await {
            let _ = self.calls.send(Call::Fail(error));
            std::future::pending::<()>().await;
        }
    }
}

fn gone(step: &str) -> Error {
    Error::EngineJournal {
        step: step.to_owned(),
        message: "the invocation running the turn is gone (suspended, cancelled or ended)"
            .to_owned(),
    }
}

impl StepJournal for Bridge {
    fn step<'a>(
        &'a self,
        name: String,
        step: BoxFuture<'a, Result<Value>>,
    ) -> BoxFuture<'a, Result<Value>> {
        Box::pin(async move {
            let (go, go_rx) = oneshot::channel();
            let (reply, reply_rx) = oneshot::channel();
            self.calls
                .send(Call::Step(StepCall {
                    name: name.clone(),
                    go,
                    reply,
                }))
                .map_err(|_| gone(&name))?;
            // Run here only when the engine asks; a replay drops the go-ahead unsent.
            let ran = match go_rx.await {
                Ok(answer) => {
                    let result = match &self.events {
                        Some(events) => events.live(&name, step).await,
                        None => step.await,
                    };
                    let recorded = match &result {
                        Ok(value) => Recorded::Ok(value.clone()),
                        Err(Error::Cancelled { reason }) => Recorded::Failed {
                            code: "CANCELLED".to_owned(),
                            message: reason.clone().unwrap_or_default(),
                        },
                        Err(error) => Recorded::Failed {
                            code: error.code().to_owned(),
                            message: error.to_string(),
                        },
                    };
                    let _ = answer.send(recorded);
                    Some(result)
                }
                Err(_) => None,
            };
            let reply = reply_rx.await;
            if matches!(reply, Ok(Ok(_))) {
                self.written(&name, ran.is_some()).await;
            }
            match (ran, reply) {
                // Run here and journaled: the step's own result (the journal holds the same).
                (Some(result), Ok(Ok(_))) => result,
                (None, Ok(Ok(Recorded::Ok(value)))) => Ok(value),
                // Failed when it first ran: the same failure, so the replay takes the same path.
                (None, Ok(Ok(Recorded::Failed { code, message }))) => {
                    Err(Error::recorded(&code, message))
                }
                (_, Ok(Err(error))) => Err(error),
                (_, Err(_)) => Err(gone(&name)),
            }
        })
    }

    fn decides_approvals(&self) -> bool {
        true
    }

    fn decision<'a>(
        &'a self,
        request: &'a ApprovalRequest,
    ) -> BoxFuture<'a, Result<ApprovalDecision>> {
        Box::pin(async move {
            let name = format!("approval:{}", request.approval_id);
            // The handler lists the call, writes what led here (the `approval_requested` event
            // among it: the turn waits, so nothing more comes), then waits for the decision.
            let (reply, decided) = oneshot::channel();
            self.calls
                .send(Call::Decision(DecisionCall {
                    request: request.clone(),
                    reply,
                }))
                .map_err(|_| gone(&name))?;
            let decision = decided.await.map_err(|_| gone(&name))??;
            self.written(&name, false).await;
            Ok(decision)
        })
    }

    fn steers(&self, name: String) -> BoxFuture<'_, Result<Vec<Steer>>> {
        Box::pin(async move {
            let (reply, taken) = oneshot::channel();
            self.calls
                .send(Call::Steers(reply))
                .map_err(|_| gone(&name))?;
            let taken = taken.await.map_err(|_| gone(&name))??;
            self.written(&name, false).await;
            Ok(taken
                .into_iter()
                .map(|steer| {
                    Steer::new(
                        steer.message_id,
                        DeliveryMode::BetweenRounds,
                        vec![Item::user_text(steer.text)],
                    )
                })
                .collect())
        })
    }
}
