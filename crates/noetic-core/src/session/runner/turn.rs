//! One turn of a session: taking what is queued (or the turn a crash interrupted), running the graph
//! on it, and ending it — the history and the last response kept, the end published and recorded.

use std::collections::HashSet;
use std::sync::Arc;

use serde_json::Value;

use super::start::{TurnStart, take_turn};
use super::{ABORTED_CALL_OUTPUT, CANCELLED_CALL_OUTPUT, Message, Session};
use crate::event::{FrameworkEvent, StreamEvent};
use crate::item::Item;
use crate::runtime::Runtime;
use crate::session::DeliveryMode;
use crate::session::api::HarnessResponse;
use crate::session::durable::{FailedTurn, LastRecord, TurnEnd};
use crate::session::last::LastTurn;
use crate::step::{Origin, StepNode};
use crate::{Error, Result};

/// The runner: one turn per batch of queued messages until the queue is empty.
pub(super) async fn run_session(
    session: Arc<Session>,
    runtime: Arc<Runtime>,
    graph: Arc<StepNode>,
) {
    while run_turn(&session, &runtime, &graph).await {}
}

/// Runs one turn: the turn a crash interrupted when there is one, else one for every queued message;
/// returns `false` (the runner stops) when there is nothing to run.
async fn run_turn(session: &Arc<Session>, runtime: &Arc<Runtime>, graph: &Arc<StepNode>) -> bool {
    let journal = session.journal.get();
    // A durable thread's writer is held while the turn starts, so what the start records (the batch,
    // the queue) is what memory holds.
    let mut writer = match journal {
        Some(journal) => Some(journal.writer().await),
        None => None,
    };
    // The interrupted turn stays in the state (the thread shows as queued) until it runs.
    let resume_id = session
        .state()
        .resume
        .as_ref()
        .map(|resume| resume.execution_id.clone());
    let mut restored = None;
    let mut begun: Result<()> = Ok(());
    if let (Some(execution_id), Some(durability)) = (&resume_id, runtime.durability()) {
        match crate::checkpoint::load(&*durability.store, execution_id).await {
            Ok(found) => restored = Some(found),
            // Cut before its execution recorded anything: it starts afresh.
            Err(Error::CheckpointNotFound { .. }) => {}
            Err(error) => begun = Err(error),
        }
    }
    let was_restored = restored.is_some();
    let Some(TurnStart {
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
    }) = take_turn(session, runtime, journal, writer.as_deref(), restored)
    else {
        drop(writer);
        session.bump();
        return false;
    };
    if let (Some(journal), Some(writer), Some((batch, queued)), Ok(())) =
        (journal, writer.as_deref_mut(), begin, &begun)
    {
        begun = journal
            .begin_turn(writer, &turn_id, ctx.id(), batch, queued)
            .await;
    }
    drop(writer);
    if resume_id.is_some() {
        // Its start and its messages were announced where it began.
        session
            .bus
            .publish_turn_start(FrameworkEvent::RoundRestarted {
                turn_id: turn_id.clone(),
                message_ids,
            });
    } else {
        session.bus.publish_turn_start(FrameworkEvent::TurnStarted {
            turn_id: turn_id.clone(),
            message_ids,
        });
        for item in inputs.iter() {
            session
                .bus
                .publish(StreamEvent::Framework(FrameworkEvent::ItemAppended {
                    item: item.clone(),
                }));
        }
    }
    // The graph's root input: the text of the turn's messages, which are already in the log. Marked
    // as the turn's messages, it is not appended again, and a spawn handed it starts its child with
    // the messages themselves (roles and parts as sent).
    let text = crate::context::turn_text(&inputs);

    // The one run protocol (`exec`), then the turn's end closes its context (its layers complete,
    // children first); nothing was initialized when the protocol failed before running.
    let input = Value::String(text);
    let span =
        crate::telemetry::agent_span(runtime.name(), ctx.thread_id(), ctx.id(), Some(&turn_id));
    let result: Result<Value> = crate::telemetry::traced(span, async {
        let mut result: Result<Value> = begun.map(|()| Value::Null);
        let mut waits = 0;
        while result.is_ok() {
            result =
                crate::exec::run(&ctx, graph, input.clone(), Origin::Turn(inputs.clone())).await;
            match &result {
                // The thread is ours, but a dead holder's lease on the turn's execution outlives its
                // thread lease by a moment: wait it out (bounded) rather than fail the turn.
                Err(Error::LeaseHeld { expires_at_ms, .. }) if was_restored && waits < 3 => {
                    waits += 1;
                    let wait = expires_at_ms.saturating_sub(crate::checkpoint::now_ms()) + 1;
                    tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
                    result = Ok(Value::Null);
                }
                _ => break,
            }
        }
        result
    })
    .await;
    let outcome = crate::layer::lifecycle::outcome_of(&ctx, &result);
    crate::layer::lifecycle::close(&ctx, outcome).await;
    if let Some(journal) = ctx.journal() {
        journal.release().await;
    }

    let duration_ms = started.elapsed().as_millis() as u64;
    let mut writer = match journal {
        Some(journal) => Some(journal.writer().await),
        None => None,
    };
    let end = {
        let mut guard = session.state();
        let state = &mut *guard;
        state.running = None;
        // Drained under the session lock, after `running` is cleared: `enqueue` hands a steer to the
        // running turn under the same lock, so a steer sent as the turn ends is either drained here or
        // queued, never left in an inbox nobody reads.
        let held = inbox.drain();
        state.spend += ctx.spend();
        // The history before the turn, its messages, then everything appended in any context of the
        // turn (root and children), in order.
        let mut history = transcript.assemble(ctx.take_items(), turn_start);
        // Steers still held were never seen by the model: they start the next turn, in order.
        for steer in held.into_iter().rev() {
            let seq = state.steer_seqs.get(&steer.message_id).copied();
            state.queue.push_front(Message {
                id: steer.message_id,
                items: steer.items,
                mode: DeliveryMode::NextTurn,
                resource_id: None,
                seq,
            });
        }
        state.steer_seqs.clear();
        let mut last = None;
        let event = match result {
            Ok(output) => {
                // A cancelled child (a losing race path) may have left calls it never ran; earlier turns'
                // calls were answered when they ended.
                answer_unanswered_calls(&mut history, history_start, CANCELLED_CALL_OUTPUT);
                let spend = ctx.spend();
                if journal.is_some() {
                    last = Some(LastRecord {
                        output: output.clone(),
                        spend,
                        failed: None,
                    });
                }
                // `items` and `text` are filled in when the response is read (`LastTurn`): an idle
                // session keeps neither a second copy of its history nor of its answer.
                let response = HarnessResponse {
                    items: Vec::new(),
                    usage: spend.usage,
                    cost: spend.cost,
                    text: output_text(&output),
                    output,
                    last_layer_usage: ctx
                        .last_step_meta()
                        .map(|meta| meta.last_layer_usage)
                        .unwrap_or_default(),
                };
                state.history = history;
                state.last = Some(Ok(LastTurn::keep(response)));
                FrameworkEvent::TurnCompleted {
                    turn_id,
                    duration_ms,
                }
            }
            Err(error) => {
                answer_unanswered_calls(&mut history, 0, ABORTED_CALL_OUTPUT);
                state.history = history;
                let event = FrameworkEvent::TurnAborted {
                    turn_id,
                    reason: error.to_string(),
                    error_kind: error.code(),
                };
                if journal.is_some() {
                    // Read back, the thread answers `agent_response` with this error, not with an
                    // earlier turn's answer.
                    last = Some(LastRecord {
                        output: Value::Null,
                        spend: ctx.spend(),
                        failed: Some(FailedTurn::of(&error)),
                    });
                }
                state.last = Some(Err(Arc::new(error)));
                event
            }
        };
        state.last_used = Some(tokio::time::Instant::now());
        // What the store records of the turn's end: the history's new items (all of it when the
        // stored one no longer matched), the queue and the spend.
        let end = journal.map(|_| {
            let delta = if state.history_stored {
                HistoryDelta::Append(history_start)
            } else {
                HistoryDelta::Replace
            };
            let entries = match delta {
                HistoryDelta::Append(from) => state.history.get(from..).unwrap_or_default(),
                HistoryDelta::Replace => &state.history[..],
            }
            .iter()
            .map(crate::checkpoint::to_bytes)
            .collect::<Result<Vec<_>>>();
            state.history_stored = true;
            TurnEnd {
                execution_id: ctx.id().to_owned(),
                replace: matches!(delta, HistoryDelta::Replace),
                entries,
                history_count: state.history.len() as u64,
                queued: state
                    .queue
                    .iter()
                    .filter_map(|message| message.seq)
                    .collect(),
                spend: state.spend,
                last,
            }
        });
        // Published before the lock is released, so whoever sees the turn gone (`abort`, `status`)
        // finds its end event already on the stream; held back from the event log until the store
        // has the turn's end, so a host reading the end from the log finds the turn's history.
        let hold = end.as_ref().and_then(|_| session.bus.hold_log());
        session.bus.publish_turn_end(event);
        (end, hold)
    };
    let (end, hold) = end;
    if let (Some(journal), Some(writer), Some(end)) = (journal, writer.as_deref_mut(), end)
        && let Err(error) = journal.end_turn(writer, end).await
    {
        // Memory has the turn; the store still has it in flight, so a restart resumes it again.
        tracing::error!(thread_id = %session.thread_id, %error, "could not record the end of a turn");
    }
    drop(hold);
    drop(writer);
    session.bump();
    true
}

/// A turn's output as text: a string as is, nothing for null, anything else as JSON.
/// A turn's end as the store recorded it, as `agent_response` gives it (without the turn's items,
/// which the history holds): its response, or its error.
pub(crate) fn response_of(last: LastRecord) -> Result<HarnessResponse> {
    match last {
        LastRecord {
            failed: Some(failed),
            ..
        } => Err(failed.into_error()),
        LastRecord { output, spend, .. } => Ok(HarnessResponse {
            items: Vec::new(),
            usage: spend.usage,
            cost: spend.cost,
            text: output_text(&output),
            output,
            last_layer_usage: Vec::new(),
        }),
    }
}

fn output_text(output: &Value) -> String {
    match output {
        Value::String(text) => text.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// Which of a turn's history the store gets at its end.
enum HistoryDelta {
    /// The items from this index on, appended.
    Append(usize),
    /// All of it, as a new generation.
    Replace,
}

/// Gives every function call from `history[from..]` without an output the output `text` (saying why it
/// never ran), so the history stays valid for every provider.
fn answer_unanswered_calls(history: &mut Vec<Item>, from: usize, text: &str) {
    let scanned = history.get(from..).unwrap_or_default();
    if !scanned.iter().any(|item| item.as_function_call().is_some()) {
        return;
    }
    let answered: HashSet<&str> = scanned
        .iter()
        .filter_map(|item| match item {
            Item::FunctionCallOutput(output) => Some(output.call_id.as_str()),
            _ => None,
        })
        .collect();
    let missing: Vec<String> = scanned
        .iter()
        .filter_map(Item::as_function_call)
        .filter(|call| !answered.contains(call.call_id.as_str()))
        .map(|call| call.call_id.clone())
        .collect();
    for call_id in missing {
        history.push(Item::function_call_output(call_id, text));
    }
}
