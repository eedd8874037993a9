//! `NoeticInbox`: where a thread's messages and steers wait and what the thread is doing is told,
//! a virtual object keyed by the thread's id beside `NoeticThread`. A message sent to the running
//! turn's own object would queue behind the turn (its handler is exclusive) where no steer point
//! could reach it; the inbox answers at once instead. Its handlers are exclusive per thread, so no
//! message or steer is lost between a turn's last look and its end:
//!
//! - `execute` (a client's message) joins the batch of the thread's next turn, sending that turn
//!   (one `NoeticThread/turn` invocation) when none is scheduled: every message queued while a turn
//!   runs becomes one next turn's input, coalesced in order, as a session's queued messages do.
//! - `begin` (the turn, as it starts) marks it running and hands it its batch; `finish` (the turn,
//!   as it ends, however it ends) clears the mark, and the steers it did not take join the next
//!   turn's batch.
//! - `push` (a client's steer) queues the steer while a turn runs; with none running it is a
//!   message of the next turn, as `execute`'s.
//! - `take` (the turn, at each steer point, a journaled call) hands the queued steers over.
//! - `dropped` (the thread's `abort`, for a turn cancelled before it began) drops its batch.
//! - `awaiting` / `settled` (the turn, around a gated call's wait) list the calls waiting for a
//!   person; `status` (shared: answers while the others run) tells the running and next turns, the
//!   waiting messages, steers and approvals, and how the last turn ended.
//!
//! Each message id is kept (the last [`SEEN`] of them) with the turn it joined, so a message or
//! steer sent again, by either handler, is the same turn's.

use restate_sdk::prelude::*;
use serde::{Deserialize, Serialize};

use crate::thread::{NoeticThreadClient, TurnInput};

/// State keys.
const RUNNING: &str = "running";
const NEXT: &str = "next";
const MESSAGES: &str = "messages";
const QUEUED: &str = "queued";
const AWAITING: &str = "awaiting";
const LAST: &str = "last";
const TURNS: &str = "turns";
const SEEN_KEY: &str = "seen";

/// How many message ids the inbox remembers (with their turns) to know one sent again.
pub(crate) const SEEN: usize = 256;

/// A user's message for the thread: a turn's (`execute`) or a steer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageInput {
    /// The message's text.
    pub text: String,
    /// The message's id: a message sent twice (the same id) is taken once.
    pub message_id: String,
}

/// Where a message went (`execute`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Accepted {
    /// The invocation of the turn that answers it (the thread's next turn, or the one that took it
    /// when it was sent before).
    pub invocation_id: String,
    /// Whether the inbox had the message already (sent before with the same id).
    pub duplicate: bool,
}

/// What became of a steer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum SteerOutcome {
    /// A turn was running: the steer joins it before its next model request (or, if it ends
    /// first, becomes a message of the thread's next turn).
    Queued,
    /// No turn was running: the steer is a message of the thread's next turn, this invocation.
    Started {
        /// The next turn's invocation.
        invocation_id: String,
    },
}

/// How a thread's last turn ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastTurn {
    /// Its invocation.
    pub invocation_id: String,
    /// Its output as text, when it succeeded.
    pub text: Option<String>,
    /// Why it failed (`CODE: message`, `CANCELLED: …` for an abort), when it did.
    pub error: Option<String>,
}

/// What a thread is doing ([`crate::RestateClient::status`]).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ThreadStatus {
    /// The invocation of the turn running now.
    pub running: Option<String>,
    /// The invocation of the thread's next turn, sent and not begun.
    pub next: Option<String>,
    /// The messages waiting for the next turn, in order.
    pub queued_messages: Vec<MessageInput>,
    /// Steers waiting for the running turn's next steer point.
    pub queued_steers: Vec<MessageInput>,
    /// Gated calls of the running turn waiting for a person's decision.
    pub pending_approvals: Vec<noetic_core::ApprovalRequest>,
    /// How many turns ended (succeeded or not).
    pub turns: u64,
    /// How the last of them ended.
    pub last: Option<LastTurn>,
}

/// The inbox object (no state of its own in this process: all of it is Restate's).
pub(crate) struct NoeticInbox;

/// The inbox's state read in an exclusive handler.
struct State<'a, 'c> {
    ctx: &'a ObjectContext<'c>,
}

impl State<'_, '_> {
    async fn list<T: serde::de::DeserializeOwned + Serialize + 'static>(
        &self,
        key: &str,
    ) -> HandlerResult<Vec<T>> {
        Ok(self
            .ctx
            .get::<Json<Vec<T>>>(key)
            .await?
            .map(Json::into_inner)
            .unwrap_or_default())
    }

    async fn id(&self, key: &str) -> HandlerResult<Option<String>> {
        Ok(self
            .ctx
            .get::<Json<String>>(key)
            .await?
            .map(Json::into_inner))
    }

    /// The turn that took `message_id` already, when one did.
    async fn seen(&self, message_id: &str) -> HandlerResult<Option<String>> {
        let seen: Vec<(String, String)> = self.list(SEEN_KEY).await?;
        Ok(seen
            .into_iter()
            .find(|(id, _)| id == message_id)
            .map(|(_, turn)| turn))
    }

    /// Keeps `message_ids` as taken by `turn` (one read and one write of the list, whatever
    /// their number).
    async fn remember(&self, message_ids: &[&str], turn: &str) -> HandlerResult<()> {
        let mut seen: Vec<(String, String)> = self.list(SEEN_KEY).await?;
        // A steer the running turn did not take moves to the next turn.
        seen.retain(|(id, _)| !message_ids.contains(&id.as_str()));
        seen.extend(
            message_ids
                .iter()
                .map(|id| ((*id).to_owned(), turn.to_owned())),
        );
        let excess = seen.len().saturating_sub(SEEN);
        seen.drain(..excess);
        self.ctx.set(SEEN_KEY, Json(seen));
        Ok(())
    }

    /// Adds `messages` to the next turn's batch, sending that turn when none is scheduled; returns
    /// its invocation. The caller knows none of them was seen.
    async fn next_turn(&self, messages: Vec<MessageInput>) -> HandlerResult<String> {
        let next = match self.id(NEXT).await? {
            Some(next) => next,
            None => {
                let first = &messages[0];
                let handle = self
                    .ctx
                    .object_client::<NoeticThreadClient>(self.ctx.key())
                    .turn(Json(TurnInput {
                        text: first.text.clone(),
                        message_id: Some(first.message_id.clone()),
                    }))
                    // Keyed, so Restate keeps the turn's outcome for `RestateClient::output` after
                    // it ends; by this inbox call, which sends one turn at most.
                    .idempotency_key(format!("turn-sent-by:{}", self.ctx.invocation_id()))
                    .send()
                    .await?;
                let next = handle.invocation_id().to_owned();
                self.ctx.set(NEXT, Json(next.clone()));
                next
            }
        };
        let ids: Vec<&str> = messages
            .iter()
            .map(|message| message.message_id.as_str())
            .collect();
        self.remember(&ids, &next).await?;
        let mut batch: Vec<MessageInput> = self.list(MESSAGES).await?;
        batch.extend(messages);
        self.ctx.set(MESSAGES, Json(batch));
        Ok(next)
    }
}

#[restate_sdk::object(name = "NoeticInbox")]
impl NoeticInbox {
    /// A client's message: joins the thread's next turn (sent now when none is scheduled).
    #[handler]
    async fn execute(
        &self,
        ctx: ObjectContext<'_>,
        Json(message): Json<MessageInput>,
    ) -> HandlerResult<Json<Accepted>> {
        let state = State { ctx: &ctx };
        if let Some(turn) = state.seen(&message.message_id).await? {
            return Ok(Json(Accepted {
                invocation_id: turn,
                duplicate: true,
            }));
        }
        let invocation_id = state.next_turn(vec![message]).await?;
        Ok(Json(Accepted {
            invocation_id,
            duplicate: false,
        }))
    }

    /// A client's steer: queued for the running turn, or a message of the next turn.
    #[handler]
    async fn push(
        &self,
        ctx: ObjectContext<'_>,
        Json(steer): Json<MessageInput>,
    ) -> HandlerResult<Json<SteerOutcome>> {
        let state = State { ctx: &ctx };
        let running = state.id(RUNNING).await?;
        if let Some(turn) = state.seen(&steer.message_id).await? {
            return Ok(Json(if running.as_deref() == Some(turn.as_str()) {
                SteerOutcome::Queued
            } else {
                SteerOutcome::Started {
                    invocation_id: turn,
                }
            }));
        }
        if let Some(running) = running {
            state.remember(&[&steer.message_id], &running).await?;
            let mut queued: Vec<MessageInput> = state.list(QUEUED).await?;
            queued.push(steer);
            ctx.set(QUEUED, Json(queued));
            return Ok(Json(SteerOutcome::Queued));
        }
        let invocation_id = state.next_turn(vec![steer]).await?;
        Ok(Json(SteerOutcome::Started { invocation_id }))
    }

    /// The turn (its invocation) starts: steers from now on wait for its steer points. Hands it its
    /// batch: the messages queued for it, in order (none for a turn the inbox did not send).
    #[handler]
    async fn begin(
        &self,
        ctx: ObjectContext<'_>,
        Json(invocation): Json<String>,
    ) -> HandlerResult<Json<Vec<MessageInput>>> {
        let state = State { ctx: &ctx };
        let batch = if state.id(NEXT).await?.as_deref() == Some(invocation.as_str()) {
            ctx.clear(NEXT);
            let batch = state.list(MESSAGES).await?;
            ctx.clear(MESSAGES);
            batch
        } else {
            Vec::new()
        };
        ctx.set(RUNNING, Json(invocation));
        Ok(Json(batch))
    }

    /// The turn's steer point: hands over (and forgets) the waiting steers.
    #[handler]
    async fn take(&self, ctx: ObjectContext<'_>) -> HandlerResult<Json<Vec<MessageInput>>> {
        let queued = State { ctx: &ctx }.list(QUEUED).await?;
        ctx.clear(QUEUED);
        Ok(Json(queued))
    }

    /// A gated call of the turn waits for a person.
    #[handler]
    async fn awaiting(
        &self,
        ctx: ObjectContext<'_>,
        Json(request): Json<noetic_core::ApprovalRequest>,
    ) -> HandlerResult<()> {
        let mut awaiting: Vec<noetic_core::ApprovalRequest> =
            State { ctx: &ctx }.list(AWAITING).await?;
        if !awaiting
            .iter()
            .any(|held| held.approval_id == request.approval_id)
        {
            awaiting.push(request);
        }
        ctx.set(AWAITING, Json(awaiting));
        Ok(())
    }

    /// A gated call's decision came.
    #[handler]
    async fn settled(
        &self,
        ctx: ObjectContext<'_>,
        Json(approval_id): Json<String>,
    ) -> HandlerResult<()> {
        let mut awaiting: Vec<noetic_core::ApprovalRequest> =
            State { ctx: &ctx }.list(AWAITING).await?;
        awaiting.retain(|held| held.approval_id != approval_id);
        ctx.set(AWAITING, Json(awaiting));
        Ok(())
    }

    /// The turn ended (`last`): the steers it did not take join the next turn's batch, in order.
    #[handler]
    async fn finish(
        &self,
        ctx: ObjectContext<'_>,
        Json(last): Json<LastTurn>,
    ) -> HandlerResult<()> {
        let state = State { ctx: &ctx };
        let known = ctx.get::<Json<LastTurn>>(LAST).await?.map(Json::into_inner);
        if known.is_some_and(|known| known.invocation_id == last.invocation_id) {
            // Told twice (the turn asked again after a cancel cut its first call short).
            return Ok(());
        }
        let queued: Vec<MessageInput> = state.list(QUEUED).await?;
        let turns = ctx.get::<u64>(TURNS).await?.unwrap_or(0);
        ctx.clear(QUEUED);
        ctx.clear(RUNNING);
        ctx.clear(AWAITING);
        ctx.set(TURNS, turns + 1);
        ctx.set(LAST, Json(last));
        if !queued.is_empty() {
            state.next_turn(queued).await?;
        }
        Ok(())
    }

    /// The thread's `abort` cancelled `invocation`: when it is the next turn (not begun, so it never
    /// will), its batch is dropped with it and it ends the thread's last turn, cancelled.
    #[handler]
    async fn dropped(
        &self,
        ctx: ObjectContext<'_>,
        Json(invocation): Json<String>,
    ) -> HandlerResult<()> {
        let state = State { ctx: &ctx };
        if state.id(NEXT).await?.as_deref() != Some(invocation.as_str()) {
            return Ok(());
        }
        let turns = ctx.get::<u64>(TURNS).await?.unwrap_or(0);
        ctx.clear(NEXT);
        ctx.clear(MESSAGES);
        ctx.set(TURNS, turns + 1);
        ctx.set(
            LAST,
            Json(LastTurn {
                invocation_id: invocation,
                text: None,
                error: Some("CANCELLED: aborted before it began".to_owned()),
            }),
        );
        Ok(())
    }

    /// What the thread is doing. Shared: answers while a turn runs.
    #[handler]
    async fn status(&self, ctx: SharedObjectContext<'_>) -> HandlerResult<Json<ThreadStatus>> {
        Ok(Json(ThreadStatus {
            running: ctx
                .get::<Json<String>>(RUNNING)
                .await?
                .map(Json::into_inner),
            next: ctx.get::<Json<String>>(NEXT).await?.map(Json::into_inner),
            queued_messages: ctx
                .get::<Json<Vec<MessageInput>>>(MESSAGES)
                .await?
                .map(Json::into_inner)
                .unwrap_or_default(),
            queued_steers: ctx
                .get::<Json<Vec<MessageInput>>>(QUEUED)
                .await?
                .map(Json::into_inner)
                .unwrap_or_default(),
            pending_approvals: ctx
                .get::<Json<Vec<noetic_core::ApprovalRequest>>>(AWAITING)
                .await?
                .map(Json::into_inner)
                .unwrap_or_default(),
            turns: ctx.get::<u64>(TURNS).await?.unwrap_or(0),
            last: ctx.get::<Json<LastTurn>>(LAST).await?.map(Json::into_inner),
        }))
    }
}
