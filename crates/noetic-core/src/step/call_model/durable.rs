//! The durability seam of the round loop: what a `call_model` step asks at each of its durable
//! places, and its two implementations.
//!
//! The loop asks [`DurableSteps`] to run each model round and each tool call, to record a round or
//! a call once its result is in the context, to take the steers waiting before a request, and to
//! run a round's gated calls with their decisions. It never asks which implementation it has:
//!
//! - [`Checkpoints`] — noetic's own (a context without an engine's journal). A step runs as it is;
//!   what it produced is recorded afterwards by a checkpoint of the context (on a durable root; a
//!   no-op otherwise), with the step's cursor (its round counters) in the execution's ledger, so a
//!   resumed turn restores the state and goes on from there. Steers come from the turn's in-process
//!   inbox, at every steer point (a round may be cut mid-stream); decisions from the harness's
//!   approvals.
//! - `Arc<dyn StepJournal>` — an engine's journal ([`crate::engine`], e.g. noetic-restate). Each
//!   step runs through the journal, which records its result before handing it back and hands the
//!   recorded one back on a replay from the top; nothing is recorded after it. Steers and decisions
//!   come from the journal, recorded likewise.
//!
//! The cost on the hot path is one dynamic call and one boxed future per round and per call; no
//! result is serialized unless an engine records it.

use std::sync::Arc;

use futures_util::future::{BoxFuture, FutureExt, ready};

use super::EmitPolicy;
use super::stream::RoundOutcome;
use super::tools::{
    ABORTED_AWAITING_APPROVAL, CallOutcome, CallsOutcome, ToolSet, decided, record, start_call,
    until_cancelled,
};
use crate::approval::{ApprovalRequest, Waiting};
use crate::checkpoint::Journal;
use crate::checkpoint::record::Cursor;
use crate::context::{Applied, Context};
use crate::engine::{StepJournal, journaled};
use crate::event::FrameworkEvent;
use crate::id::DEFAULT_THREAD;
use crate::item::{FunctionCallItem, Item};
use crate::steer::SteerPoint;
use crate::{Error, Result};

/// The durability of `ctx`'s steps: its engine's journal when it has one, else checkpoints.
pub(super) fn steps(ctx: &Context) -> &dyn DurableSteps {
    match ctx.step_journal() {
        Some(journal) => journal,
        None => &Checkpoints,
    }
}

/// Where a `call_model` step's rounds are recorded, and where they stood when its turn was resumed.
#[derive(Default)]
pub(super) struct StepRecord<'c> {
    /// The durable root's journal and this step's path in its ledger.
    place: Option<(&'c Arc<Journal>, String)>,
    /// The step's cursor at the last checkpoint, when the turn resumed it mid-step.
    pub(super) resumed: Option<Cursor>,
}

/// What the round loop asks at its durable places (see the module docs). Each method is asked in
/// the tree's order from the task that runs the tree.
pub(super) trait DurableSteps: Send + Sync {
    /// Where the step running in `ctx` keeps its rounds' record, and where it stood when resumed.
    fn record<'c>(&self, ctx: &'c Context) -> StepRecord<'c>;

    /// Runs the model round `round` of `step_id`: `run`'s result, or a recorded one (then `run` is
    /// dropped unpolled).
    fn round<'a>(
        &'a self,
        step_id: &str,
        round: u32,
        run: BoxFuture<'a, Result<RoundOutcome>>,
    ) -> BoxFuture<'a, Result<RoundOutcome>>;

    /// Whether a steer may cut a round mid-stream or skip a round's later calls (a recorded round
    /// must be whole).
    fn cuts_rounds(&self) -> bool;

    /// A round's result is in the context: the next request is `cursor.round` and `cursor.tool_rounds`
    /// rounds' calls ran (or are running).
    fn round_kept<'a>(
        &'a self,
        ctx: &'a Context,
        record: &'a StepRecord<'a>,
        cursor: Cursor,
    ) -> BoxFuture<'a, Result<()>>;

    /// Runs the tool call `call_id`: `run`'s outcome, or a recorded one.
    fn tool_call<'a>(
        &'a self,
        call_id: &str,
        run: BoxFuture<'a, Result<CallOutcome>>,
    ) -> BoxFuture<'a, Result<CallOutcome>>;

    /// A call's output is in the context.
    fn call_kept<'a>(&'a self, ctx: &'a Context) -> BoxFuture<'a, Result<()>>;

    /// The steers that join before request `round` of `step_id` (never asked before a step's first).
    fn steers_before_round<'a>(
        &'a self,
        ctx: &'a Context,
        step_id: &str,
        round: u32,
    ) -> BoxFuture<'a, Result<Applied>>;

    /// Runs a round's calls of which some (`asks`) need a person's decision: the ungated ones first,
    /// then each gated one once decided (run, or answered with its rejection), every output recorded
    /// as it comes. Cancelled while waiting, every waiting call gets an output and `CANCELLED` follows.
    fn gated_calls<'a>(
        &'a self,
        calls: &'a [FunctionCallItem],
        asks: Vec<Option<ApprovalRequest>>,
        tools: &'a ToolSet,
        ctx: &'a Context,
        emit: &'a EmitPolicy,
    ) -> BoxFuture<'a, Result<CallsOutcome>>;
}

/// noetic's checkpoint-and-ledger durability (see the module docs).
pub(super) struct Checkpoints;

impl DurableSteps for Checkpoints {
    fn record<'c>(&self, ctx: &'c Context) -> StepRecord<'c> {
        let Some(journal) = ctx.journal() else {
            return StepRecord::default();
        };
        let path = journal.current_path();
        StepRecord {
            resumed: journal.cursor(&path),
            place: Some((journal, path)),
        }
    }

    fn round<'a>(
        &'a self,
        _step_id: &str,
        _round: u32,
        run: BoxFuture<'a, Result<RoundOutcome>>,
    ) -> BoxFuture<'a, Result<RoundOutcome>> {
        run
    }

    fn cuts_rounds(&self) -> bool {
        true
    }

    fn round_kept<'a>(
        &'a self,
        ctx: &'a Context,
        record: &'a StepRecord<'a>,
        cursor: Cursor,
    ) -> BoxFuture<'a, Result<()>> {
        let Some((journal, path)) = &record.place else {
            return ready(Ok(())).boxed();
        };
        journal.set_cursor(path, cursor);
        ctx.checkpoint().boxed()
    }

    fn tool_call<'a>(
        &'a self,
        _call_id: &str,
        run: BoxFuture<'a, Result<CallOutcome>>,
    ) -> BoxFuture<'a, Result<CallOutcome>> {
        run
    }

    fn call_kept<'a>(&'a self, ctx: &'a Context) -> BoxFuture<'a, Result<()>> {
        // On a durable root each output is recorded as it arrives: a recorded call never runs again
        // after a crash.
        match ctx.journal() {
            Some(_) => ctx.checkpoint().boxed(),
            None => ready(Ok(())).boxed(),
        }
    }

    fn steers_before_round<'a>(
        &'a self,
        ctx: &'a Context,
        _step_id: &str,
        _round: u32,
    ) -> BoxFuture<'a, Result<Applied>> {
        // The inbox counts requests itself: a step after the turn's first offers its first request.
        let applied = match ctx.steers() {
            Some(inbox) if inbox.mark_request() && inbox.has_pending() => {
                inbox.take(SteerPoint::BeforeRound, ctx)
            }
            _ => Applied::default(),
        };
        ready(Ok(applied)).boxed()
    }

    fn gated_calls<'a>(
        &'a self,
        calls: &'a [FunctionCallItem],
        asks: Vec<Option<ApprovalRequest>>,
        tools: &'a ToolSet,
        ctx: &'a Context,
        emit: &'a EmitPolicy,
    ) -> BoxFuture<'a, Result<CallsOutcome>> {
        Box::pin(run_with_approvals(calls, asks, tools, ctx, emit))
    }
}

/// An engine's journal (see the module docs): rounds named `round:{step_id}:{n}`, calls
/// `tool:{call_id}`, steer points `steers:{step_id}:{n}`.
impl DurableSteps for Arc<dyn StepJournal> {
    fn record<'c>(&self, _ctx: &'c Context) -> StepRecord<'c> {
        // A replay runs the step from the top: the journal answers its recorded rounds.
        StepRecord::default()
    }

    fn round<'a>(
        &'a self,
        step_id: &str,
        round: u32,
        run: BoxFuture<'a, Result<RoundOutcome>>,
    ) -> BoxFuture<'a, Result<RoundOutcome>> {
        let name = format!("round:{step_id}:{round}");
        Box::pin(async move {
            journaled(self, name, async {
                match run.await? {
                    RoundOutcome::Finished(response) => Ok(response),
                    RoundOutcome::Steered { .. } => Err(Error::EngineJournal {
                        step: String::new(),
                        message: "a journaled round was cut by a steer".to_owned(),
                    }),
                }
            })
            .await
            .map(RoundOutcome::Finished)
        })
    }

    fn cuts_rounds(&self) -> bool {
        false
    }

    fn round_kept<'a>(
        &'a self,
        _ctx: &'a Context,
        _record: &'a StepRecord<'a>,
        _cursor: Cursor,
    ) -> BoxFuture<'a, Result<()>> {
        // The journal recorded the round's result before it was handed back.
        ready(Ok(())).boxed()
    }

    fn tool_call<'a>(
        &'a self,
        call_id: &str,
        run: BoxFuture<'a, Result<CallOutcome>>,
    ) -> BoxFuture<'a, Result<CallOutcome>> {
        journaled(self, format!("tool:{call_id}"), run).boxed()
    }

    fn call_kept<'a>(&'a self, _ctx: &'a Context) -> BoxFuture<'a, Result<()>> {
        ready(Ok(())).boxed()
    }

    fn steers_before_round<'a>(
        &'a self,
        _ctx: &'a Context,
        step_id: &str,
        round: u32,
    ) -> BoxFuture<'a, Result<Applied>> {
        if round == 0 {
            return ready(Ok(Applied::default())).boxed();
        }
        let name = format!("steers:{step_id}:{round}");
        Box::pin(async move {
            let mut applied = Applied::default();
            for steer in self.steers(name).await? {
                applied.message_ids.push(steer.message_id);
                applied.items.extend(steer.items);
            }
            Ok(applied)
        })
    }

    fn gated_calls<'a>(
        &'a self,
        calls: &'a [FunctionCallItem],
        asks: Vec<Option<ApprovalRequest>>,
        tools: &'a ToolSet,
        ctx: &'a Context,
        emit: &'a EmitPolicy,
    ) -> BoxFuture<'a, Result<CallsOutcome>> {
        if self.decides_approvals() {
            Box::pin(run_with_engine_approvals(
                calls, asks, tools, ctx, emit, self,
            ))
        } else {
            Box::pin(run_with_approvals(calls, asks, tools, ctx, emit))
        }
    }
}

/// [`DurableSteps::gated_calls`] on the harness's approvals: every request is made at once, the other
/// calls run (in order), then each gated call waits for its decision and runs or gets its rejection,
/// in order. Every output is recorded as it comes, so the log holds the ungated outputs first.
/// Steers wait for the next steer point after the round (the calls are not skipped for them).
async fn run_with_approvals(
    calls: &[FunctionCallItem],
    asks: Vec<Option<ApprovalRequest>>,
    tools: &ToolSet,
    ctx: &Context,
    emit: &EmitPolicy,
) -> Result<CallsOutcome> {
    let approvals = ctx.runtime().approvals();
    // A durable turn's requests are kept in the store too: a restarted harness lists them.
    let durable = ctx.journal().is_some();
    let mut waits: Vec<Option<Waiting>> = Vec::with_capacity(asks.len());
    for ask in asks {
        let Some(request) = ask else {
            waits.push(None);
            continue;
        };
        crate::telemetry::approval_requested(ctx.runtime().name(), &request.tool);
        // Announced only once it waits: whoever reads the event may decide at once.
        let event = emit.active(ctx).then(|| FrameworkEvent::ApprovalRequested {
            approval_id: request.approval_id.clone(),
            call_id: request.call_id.clone(),
            tool: request.tool.clone(),
            arguments: request.arguments.clone(),
        });
        waits.push(Some(approvals.ask_durably(request, durable).await?));
        if let Some(event) = event {
            emit.emit(ctx, event);
        }
    }
    let (gated, ungated): (Vec<usize>, Vec<usize>) =
        (0..calls.len()).partition(|index| waits[*index].is_some());
    let mut items = Vec::with_capacity(calls.len());
    let thread = ctx.thread_id().unwrap_or(DEFAULT_THREAD);
    for index in ungated.into_iter().chain(gated) {
        let call = &calls[index];
        let was_gated = waits[index].is_some();
        let outcome = match waits[index].take() {
            None => start_call(call, tools, ctx, emit).await?,
            Some(mut waiting) => match until_cancelled(ctx, waiting.decision()).await {
                Some(Some(decision)) => {
                    let approval_id = ctx.idempotency_key(&call.call_id);
                    decided(call, approval_id, decision, tools, ctx, emit).await?
                }
                // Cancelled while waiting (or the request was replaced): this call and the other
                // waiting ones get an output, so the history stays valid; then the cancel goes on.
                _ => {
                    let answered = answer_waiting(call, calls, &mut waits, ctx, emit, &mut items);
                    if durable {
                        for call in answered {
                            approvals
                                .forget(thread, &ctx.idempotency_key(&call.call_id))
                                .await?;
                        }
                    }
                    ctx.check_aborted()?;
                    // Not cancelled: the request was replaced by a newer ask of the same call,
                    // which answers it. Nothing of this round is left to run.
                    return Ok(CallsOutcome {
                        outputs: items,
                        steered: None,
                    });
                }
            },
        };
        items.push(record(ctx, call, outcome, emit));
        ctx.checkpoint().await?;
        if was_gated {
            // Answered and recorded: the request is done with.
            approvals
                .forget(thread, &ctx.idempotency_key(&call.call_id))
                .await?;
        }
    }
    Ok(CallsOutcome {
        outputs: items,
        steered: None,
    })
}

/// [`DurableSteps::gated_calls`] under an engine's journal that keeps approval waits: the ungated
/// calls run first (in order), then each gated call announces its request and waits for the
/// engine's decision (`StepJournal::decision`), and runs or gets its rejection. Nothing is
/// registered with the harness's in-process approvals.
async fn run_with_engine_approvals(
    calls: &[FunctionCallItem],
    mut asks: Vec<Option<ApprovalRequest>>,
    tools: &ToolSet,
    ctx: &Context,
    emit: &EmitPolicy,
    journal: &Arc<dyn StepJournal>,
) -> Result<CallsOutcome> {
    let (gated, ungated): (Vec<usize>, Vec<usize>) =
        (0..calls.len()).partition(|index| asks[*index].is_some());
    let mut items = Vec::with_capacity(calls.len());
    for index in ungated.into_iter().chain(gated) {
        let call = &calls[index];
        let outcome = match asks[index].take() {
            None => start_call(call, tools, ctx, emit).await?,
            Some(request) => {
                crate::telemetry::approval_requested(ctx.runtime().name(), &request.tool);
                if emit.active(ctx) {
                    emit.emit(
                        ctx,
                        FrameworkEvent::ApprovalRequested {
                            approval_id: request.approval_id.clone(),
                            call_id: request.call_id.clone(),
                            tool: request.tool.clone(),
                            arguments: request.arguments.clone(),
                        },
                    );
                }
                match until_cancelled(ctx, journal.decision(&request)).await {
                    Some(decision) => {
                        decided(call, request.approval_id, decision?, tools, ctx, emit).await?
                    }
                    // Cancelled while waiting: this call and the other waiting ones get an output,
                    // so the history stays valid; then the cancel goes on.
                    None => {
                        answer_waiting(call, calls, &mut asks, ctx, emit, &mut items);
                        ctx.check_aborted()?;
                        return Ok(CallsOutcome {
                            outputs: items,
                            steered: None,
                        });
                    }
                }
            }
        };
        items.push(record(ctx, call, outcome, emit));
    }
    Ok(CallsOutcome {
        outputs: items,
        steered: None,
    })
}

/// A round's gated calls cut short while `call` waited for its decision: it and every call still
/// waiting (`waiting[i]` set) get an output, so the history stays valid. Returns the calls
/// answered so.
fn answer_waiting<'c, T>(
    call: &'c FunctionCallItem,
    calls: &'c [FunctionCallItem],
    waiting: &mut [Option<T>],
    ctx: &Context,
    emit: &EmitPolicy,
    items: &mut Vec<Item>,
) -> Vec<&'c FunctionCallItem> {
    let mut answered = vec![call];
    let later = waiting
        .iter_mut()
        .zip(calls)
        .filter_map(|(wait, call)| wait.take().map(|_| call));
    answered.extend(later);
    for call in &answered {
        let outcome = CallOutcome::not_run(ABORTED_AWAITING_APPROVAL.to_owned());
        items.push(record(ctx, call, outcome, emit));
    }
    answered
}
