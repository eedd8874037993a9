//! Taking a session's next turn: its batch, its context and its steer inbox, under the session lock.

use std::sync::Arc;
use std::time::SystemTime;

use super::{Running, Session};
use crate::context::{Context, ContextOptions, RestoreOptions, SteerInbox, Transcript};
use crate::item::Item;
use crate::runtime::Runtime;
use crate::session::durable::{ThreadJournal, ThreadWriter};
use crate::steer::Steer;

/// What a turn starts with, taken under the session lock.
pub(super) struct TurnStart {
    pub(super) turn_id: String,
    pub(super) started: tokio::time::Instant,
    pub(super) inbox: Arc<SteerInbox>,
    pub(super) ctx: Context,
    pub(super) message_ids: Vec<String>,
    pub(super) inputs: Arc<[Item]>,
    pub(super) transcript: Arc<Transcript>,
    pub(super) history_start: usize,
    pub(super) turn_start: usize,
    /// What the store records of the start (the batch and what still waits), for a durable turn
    /// not read back from a checkpoint.
    pub(super) begin: Option<(Vec<u64>, Vec<u64>)>,
}

/// Takes the next turn's batch — the turn a crash interrupted, else every queued message — and marks
/// it running, under one lock: a message sent meanwhile either is in the batch or meets the running
/// turn (a steer joins it, an interrupt aborts it), never a turn about to start without it. `None`
/// (the runner stopping) when there is nothing to run.
pub(super) fn take_turn(
    session: &Session,
    runtime: &Arc<Runtime>,
    journal: Option<&ThreadJournal>,
    writer: Option<&ThreadWriter>,
    restored: Option<crate::checkpoint::Restored>,
) -> Option<TurnStart> {
    let was_restored = restored.is_some();
    let mut guard = session.state();
    let state = &mut *guard;
    if state.stopping {
        state.runner_active = false;
        return None;
    }
    let (turn_id, batch, resumed_steers) = match state.resume.take() {
        Some(resume) if !resume.messages.is_empty() => {
            (resume.turn_id, resume.messages, resume.steers)
        }
        _ => {
            if state.queue.is_empty() {
                state.runner_active = false;
                return None;
            }
            (
                crate::id::new_id(),
                state.queue.drain(..).collect::<Vec<_>>(),
                Vec::new(),
            )
        }
    };
    let started = tokio::time::Instant::now();
    let message_ids: Vec<String> = batch.iter().map(|message| message.id.clone()).collect();
    let resource_id = batch.iter().find_map(|message| message.resource_id.clone());
    let batch_seqs: Vec<u64> = batch.iter().filter_map(|message| message.seq).collect();
    let inputs: Arc<[Item]> = batch
        .into_iter()
        .flat_map(|message| message.items)
        .collect();
    let history_start = state.history.len();
    // Where the turn's own items start in its root log: after the history and the messages.
    let turn_start = history_start + inputs.len();
    let transcript = Arc::new(Transcript::default());
    let taken = restored
        .as_ref()
        .map(|restored: &crate::checkpoint::Restored| restored.state.steers_taken.clone())
        .unwrap_or_default();
    let pending: Vec<Steer> = resumed_steers
        .into_iter()
        .filter(|message| !taken.contains(&message.id))
        .map(|message| {
            if let Some(seq) = message.seq {
                state.steer_seqs.insert(message.id.clone(), seq);
            }
            Steer {
                message_id: message.id,
                mode: message.mode,
                items: message.items,
            }
        })
        .collect();
    let requested = restored
        .as_ref()
        .is_some_and(|restored| restored.items.len() > turn_start);
    let inbox = Arc::new(SteerInbox::resumed(
        runtime.on_steer_hook(),
        pending,
        taken,
        requested,
    ));
    let ctx = match restored {
        Some(restored) => {
            let mut options = RestoreOptions::new().event_sink(session.bus.clone());
            options.turn = Some((inbox.clone(), transcript.clone()));
            Context::restored(runtime.clone(), restored, options)
        }
        None => {
            let mut items = state.history.clone();
            items.extend(inputs.iter().cloned());
            let mut options = ContextOptions::new()
                .thread_id(session.thread_id.clone())
                .items(items);
            options.resource_id = resource_id;
            options.event_sink = Some(session.bus.clone());
            options.steers = Some(inbox.clone());
            options.transcript = Some(transcript.clone());
            if let (Some(journal), Some(writer)) = (journal, writer)
                && state.history_stored
            {
                options.durable_base = Some(journal.base(writer));
            }
            Context::new(runtime.clone(), options)
        }
    };
    state.running = Some(Running {
        turn_id: turn_id.clone(),
        ctx: ctx.clone(),
        inbox: inbox.clone(),
        started_at: SystemTime::now(),
        aborting: false,
    });
    // What the store records of the start: the batch and what still waits.
    let begin = (journal.is_some() && !was_restored).then(|| {
        let queued: Vec<u64> = state
            .queue
            .iter()
            .filter_map(|message| message.seq)
            .collect();
        (batch_seqs, queued)
    });
    Some(TurnStart {
        turn_id,
        started,
        inbox,
        ctx,
        message_ids,
        inputs,
        transcript,
        history_start,
        turn_start,
        begin,
    })
}
