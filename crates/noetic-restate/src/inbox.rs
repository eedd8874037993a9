//! `NoeticInbox`: where a thread's steers wait, a virtual object keyed by the thread's id beside
//! `NoeticThread`. A steer sent to the running turn's own object would queue behind the turn (its
//! handler is exclusive); the inbox answers at once instead. Its handlers are exclusive per
//! thread, so a steer is never lost between a turn's last look and its end:
//!
//! - `begin` (the turn, as it starts) marks a turn running; `finish` (the turn, as it ends, however
//!   it ends) clears the mark and sends each steer still waiting as a turn of its own.
//! - `push` (a client's steer) queues the steer while a turn runs, and sends it as a new turn
//!   otherwise; either way with its message id as the idempotency key.
//! - `take` (the turn, at each steer point, a journaled call) hands the queued steers over.

use restate_sdk::prelude::*;
use serde::{Deserialize, Serialize};

use crate::thread::{NoeticThreadClient, TurnInput};

/// State keys.
const RUNNING: &str = "running";
const QUEUED: &str = "queued";

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

/// The inbox object (no state of its own in this process: all of it is Restate's).
pub(crate) struct NoeticInbox;

/// Sends `steer` as a turn of the thread `key`, idempotent by its message id.
fn send_turn(ctx: &ObjectContext<'_>, steer: SteerInput) -> restate_sdk::context::SendHandle {
    ctx.object_client::<NoeticThreadClient>(ctx.key())
        .turn(Json(TurnInput { text: steer.text }))
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
        if ctx.get::<bool>(RUNNING).await?.unwrap_or(false) {
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

    /// The turn starts: steers from now on wait for its steer points.
    #[handler]
    async fn begin(&self, ctx: ObjectContext<'_>) -> HandlerResult<()> {
        ctx.set(RUNNING, true);
        Ok(())
    }

    /// The turn's steer point: hands over (and forgets) the waiting steers.
    #[handler]
    async fn take(&self, ctx: ObjectContext<'_>) -> HandlerResult<Json<Vec<SteerInput>>> {
        let queued = queued(&ctx).await?;
        ctx.clear(QUEUED);
        Ok(Json(queued))
    }

    /// The turn ended: steers it did not take become turns of their own, in order.
    #[handler]
    async fn finish(&self, ctx: ObjectContext<'_>) -> HandlerResult<()> {
        let queued = queued(&ctx).await?;
        ctx.clear(QUEUED);
        ctx.clear(RUNNING);
        for steer in queued {
            // Fire and forget: the send is journaled, its invocation id not needed.
            drop(send_turn(&ctx, steer));
        }
        Ok(())
    }
}

async fn queued(ctx: &ObjectContext<'_>) -> HandlerResult<Vec<SteerInput>> {
    Ok(ctx
        .get::<Json<Vec<SteerInput>>>(QUEUED)
        .await?
        .map(Json::into_inner)
        .unwrap_or_default())
}
