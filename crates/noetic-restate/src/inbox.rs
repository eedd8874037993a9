//! `NoeticInbox`: where a thread's steers wait and what the thread is doing is told, a virtual
//! object keyed by the thread's id beside `NoeticThread`. A steer sent to the running turn's own
//! object would queue behind the turn (its handler is exclusive); the inbox answers at once
//! instead. Its handlers are exclusive per thread, so a steer is never lost between a turn's last
//! look and its end:
//!
//! - `begin` (the turn, as it starts) marks a turn running; `finish` (the turn, as it ends, however
//!   it ends) clears the mark and sends each steer still waiting as a turn of its own.
//! - `push` (a client's steer) queues the steer while a turn runs, and sends it as a new turn
//!   otherwise; either way with its message id as the idempotency key.
//! - `take` (the turn, at each steer point, a journaled call) hands the queued steers over.
//! - `awaiting` / `settled` (the turn, around a gated call's wait) list the calls waiting for a
//!   person; `status` (shared: answers while the others run) tells the running turn, the waiting
//!   steers and approvals, and how the last turn ended.

use restate_sdk::prelude::*;
use serde::{Deserialize, Serialize};

use crate::thread::{NoeticThreadClient, TurnInput};

/// State keys.
const RUNNING: &str = "running";
const QUEUED: &str = "queued";
const AWAITING: &str = "awaiting";
const LAST: &str = "last";
const TURNS: &str = "turns";

/// A steer: a user's message for the thread's running turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SteerInput {
    /// The message's text.
    pub text: String,
    /// The message's id: a steer pushed twice (the same id) joins once.
    pub message_id: String,
}

/// What became of a steer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum SteerOutcome {
    /// A turn was running: the steer joins it before its next model request (or, if it ends
    /// first, becomes a turn of its own).
    Queued,
    /// No turn was running: the steer became a turn of its own, this invocation.
    Started {
        /// The new turn's invocation.
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
    /// Steers waiting for the running turn's next steer point.
    pub queued_steers: Vec<SteerInput>,
    /// Gated calls of the running turn waiting for a person's decision.
    pub pending_approvals: Vec<noetic_core::ApprovalRequest>,
    /// How many turns ended (succeeded or not).
    pub turns: u64,
    /// How the last of them ended.
    pub last: Option<LastTurn>,
}

/// The inbox object (no state of its own in this process: all of it is Restate's).
pub(crate) struct NoeticInbox;

/// Sends `steer` as a turn of the thread `key`, idempotent by its message id.
fn send_turn(ctx: &ObjectContext<'_>, steer: SteerInput) -> restate_sdk::context::SendHandle {
    ctx.object_client::<NoeticThreadClient>(ctx.key())
        .turn(Json(TurnInput {
            text: steer.text,
            message_id: Some(steer.message_id.clone()),
        }))
        .idempotency_key(steer.message_id)
        .send()
}

#[restate_sdk::object(name = "NoeticInbox")]
impl NoeticInbox {
    /// A client's steer: queued for the running turn, or sent as a turn of its own.
    #[handler]
    async fn push(
        &self,
        ctx: ObjectContext<'_>,
        Json(steer): Json<SteerInput>,
    ) -> HandlerResult<Json<SteerOutcome>> {
        if ctx.get::<Json<String>>(RUNNING).await?.is_some() {
            let mut queued = queued(&ctx).await?;
            if !queued
                .iter()
                .any(|held| held.message_id == steer.message_id)
            {
                queued.push(steer);
            }
            ctx.set(QUEUED, Json(queued));
            return Ok(Json(SteerOutcome::Queued));
        }
        let handle = send_turn(&ctx, steer).await?;
        Ok(Json(SteerOutcome::Started {
            invocation_id: handle.invocation_id().to_owned(),
        }))
    }

    /// The turn (its invocation) starts: steers from now on wait for its steer points.
    #[handler]
    async fn begin(
        &self,
        ctx: ObjectContext<'_>,
        Json(invocation): Json<String>,
    ) -> HandlerResult<()> {
        ctx.set(RUNNING, Json(invocation));
        Ok(())
    }

    /// The turn's steer point: hands over (and forgets) the waiting steers.
    #[handler]
    async fn take(&self, ctx: ObjectContext<'_>) -> HandlerResult<Json<Vec<SteerInput>>> {
        let queued = queued(&ctx).await?;
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
        let mut awaiting = awaiting(&ctx).await?;
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
        let mut awaiting = awaiting(&ctx).await?;
        awaiting.retain(|held| held.approval_id != approval_id);
        ctx.set(AWAITING, Json(awaiting));
        Ok(())
    }

    /// The turn ended (`last`): steers it did not take become turns of their own, in order.
    #[handler]
    async fn finish(
        &self,
        ctx: ObjectContext<'_>,
        Json(last): Json<LastTurn>,
    ) -> HandlerResult<()> {
        let queued = queued(&ctx).await?;
        let turns = ctx.get::<u64>(TURNS).await?.unwrap_or(0);
        ctx.clear(QUEUED);
        ctx.clear(RUNNING);
        ctx.clear(AWAITING);
        ctx.set(TURNS, turns + 1);
        ctx.set(LAST, Json(last));
        for steer in queued {
            // Fire and forget: the send is journaled, its invocation id not needed.
            drop(send_turn(&ctx, steer));
        }
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
            queued_steers: ctx
                .get::<Json<Vec<SteerInput>>>(QUEUED)
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

async fn awaiting(ctx: &ObjectContext<'_>) -> HandlerResult<Vec<noetic_core::ApprovalRequest>> {
    Ok(ctx
        .get::<Json<Vec<noetic_core::ApprovalRequest>>>(AWAITING)
        .await?
        .map(Json::into_inner)
        .unwrap_or_default())
}

async fn queued(ctx: &ObjectContext<'_>) -> HandlerResult<Vec<SteerInput>> {
    Ok(ctx
        .get::<Json<Vec<SteerInput>>>(QUEUED)
        .await?
        .map(Json::into_inner)
        .unwrap_or_default())
}
