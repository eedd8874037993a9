//! Graceful drain under paused time: a round that finishes within the window (`settled`), one still
//! streaming at the deadline (`deadline`, cut off, its paid-call record pending), a second cancel
//! during a drain (`stopped`, one report for both callers), a drain with nothing in flight, and a
//! session turn's drain (`status` reports `Draining`, then `Idle`).

mod second_stop;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use noetic_core::{
    AbortOptions, AgentHarness, CallKind, CancelOptions, ContextOptions, DrainReason, Error,
    ExecuteOptions, FrameworkEvent, ModelProvider, ModelRequest, ModelStream, ResponseEvent,
    Result, Scope, SessionStatus, StreamEvent, TokenUsage, Tool, ToolContext, call_model,
};
use noetic_test_support::ScriptedResponse;
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// One request the gated model received: the test feeds its events.
struct Round {
    events: mpsc::UnboundedSender<Result<ResponseEvent>>,
}

/// A model whose every request waits for the test to send its events; its generation id is
/// `gen-<n>` for the n-th request.
struct GatedModel {
    rounds: mpsc::UnboundedSender<Round>,
    count: AtomicUsize,
}

impl ModelProvider for GatedModel {
    fn stream<'a>(&'a self, _request: &'a ModelRequest<'a>) -> BoxFuture<'a, Result<ModelStream>> {
        let n = self.count.fetch_add(1, Ordering::SeqCst);
        let (events, receiver) = mpsc::unbounded_channel();
        let _ = self.rounds.send(Round { events });
        Box::pin(async move {
            let events = futures_util::stream::unfold(receiver, |mut receiver| async move {
                receiver.recv().await.map(|event| (event, receiver))
            })
            .boxed();
            Ok(ModelStream {
                generation_id: Some(format!("gen-{n}")),
                events,
            })
        })
    }
}

fn usage() -> TokenUsage {
    TokenUsage {
        input_tokens: 12,
        output_tokens: 5,
        ..TokenUsage::default()
    }
}

fn feed(round: &Round, response: ScriptedResponse) {
    for event in response.with_usage(usage(), Some(0.25)).into_events() {
        round.events.send(Ok(event)).unwrap();
    }
}

/// A harness over the gated model, the model's rounds, and a tool whose runs are counted.
fn setup() -> (
    AgentHarness,
    mpsc::UnboundedReceiver<Round>,
    Tool,
    Arc<AtomicUsize>,
) {
    let (rounds_tx, rounds) = mpsc::unbounded_channel();
    let model = GatedModel {
        rounds: rounds_tx,
        count: AtomicUsize::new(0),
    };
    let harness = AgentHarness::builder("drain")
        .provider("gated", model)
        .build()
        .unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = runs.clone();
    let tool = Tool::dynamic(
        "lookup",
        "Looks something up",
        json!({"type": "object"}),
        move |_: Value, _ctx: ToolContext| {
            counted.fetch_add(1, Ordering::SeqCst);
            async move { Ok(json!("found")) }
        },
    )
    .unwrap();
    (harness, rounds, tool, runs)
}

/// A root context whose framework events go to the returned receiver.
fn observed(
    harness: &AgentHarness,
) -> (
    noetic_core::Context,
    mpsc::UnboundedReceiver<FrameworkEvent>,
) {
    let (events_tx, events) = mpsc::unbounded_channel();
    let sink = move |event: StreamEvent| {
        if let StreamEvent::Framework(event) = event {
            let _ = events_tx.send(event);
        }
    };
    let ctx = harness.create_context(ContextOptions::new().event_sink(Arc::new(sink)));
    (ctx, events)
}

async fn drain_started(events: &mut mpsc::UnboundedReceiver<FrameworkEvent>) -> FrameworkEvent {
    loop {
        let event = events.recv().await.expect("the drain starts");
        if matches!(event, FrameworkEvent::DrainStarted { .. }) {
            return event;
        }
    }
}

/// A harness whose agent graph is one `call_model` on the gated model, and the model's rounds.
fn session_harness() -> (Arc<AgentHarness>, mpsc::UnboundedReceiver<Round>) {
    let (rounds_tx, rounds) = mpsc::unbounded_channel();
    let model = GatedModel {
        rounds: rounds_tx,
        count: AtomicUsize::new(0),
    };
    let harness = AgentHarness::builder("drain")
        .provider("gated", model)
        .agent_graph(
            call_model("chat")
                .model("m")
                .idle_timeout(Duration::from_secs(600)),
        )
        .build()
        .unwrap();
    (Arc::new(harness), rounds)
}

/// Runs a `call_model` step offering `tool` on `ctx`, on its own task.
fn start_run(
    harness: &Arc<AgentHarness>,
    ctx: &noetic_core::Context,
    tool: Tool,
) -> tokio::task::JoinHandle<Result<String>> {
    let step = call_model("llm")
        .model("m")
        .tool(tool)
        .idle_timeout(Duration::from_secs(600))
        .build();
    let (harness, ctx) = (harness.clone(), ctx.clone());
    tokio::spawn(async move { harness.run(&step, "go".to_owned(), &ctx).await })
}

#[tokio::test(start_paused = true)]
async fn a_round_finishing_within_the_drain_is_settled_with_its_spend_and_nothing_new_starts() {
    let (harness, mut rounds, tool, tool_runs) = setup();
    let harness = Arc::new(harness);
    let (ctx, mut events) = observed(&harness);
    let run = start_run(&harness, &ctx, tool);
    let round = rounds.recv().await.unwrap();
    assert!(
        matches!(
            harness.execution_status(ctx.id()),
            SessionStatus::Running { .. }
        ),
        "{:?}",
        harness.execution_status(ctx.id())
    );
    let cancel = tokio::spawn({
        let (harness, ctx) = (harness.clone(), ctx.clone());
        async move {
            let options = CancelOptions::new()
                .reason("SIGTERM")
                .drain(Duration::from_secs(10));
            harness.cancel(&ctx, options).await
        }
    });
    let FrameworkEvent::DrainStarted { calls } = drain_started(&mut events).await else {
        unreachable!()
    };
    assert_eq!(calls.len(), 1, "the round in flight: {calls:?}");
    assert_eq!(calls[0].generation_id.as_deref(), Some("gen-0"));
    // `execution_status` shows the run draining, with the wall-clock deadline.
    let SessionStatus::Draining { turn_id, deadline } = harness.execution_status(ctx.id()) else {
        panic!("not draining: {:?}", harness.execution_status(ctx.id()));
    };
    assert_eq!(turn_id, ctx.id());
    assert!(deadline > std::time::SystemTime::now());
    // The round's response asks for a tool: the drain must not let the call (or another round) start.
    feed(
        &round,
        ScriptedResponse::tool_call("c1", "lookup", json!({})),
    );

    let report = cancel.await.unwrap().expect("a drain reports");
    assert_eq!(report.reason, DrainReason::Settled);
    assert_eq!(report.execution_id, ctx.id());
    assert!(report.cut_off.is_empty(), "{report:?}");
    assert_eq!(report.finished.len(), 1, "{report:?}");
    let call = &report.finished[0];
    assert_eq!(call.kind, CallKind::ModelRound);
    assert_eq!(call.model, "m");
    assert_eq!(call.round, Some(0));
    assert_eq!(call.dispatch_id, calls[0].dispatch_id);
    assert_eq!(call.generation_id.as_deref(), Some("gen-0"));
    assert_eq!(call.usage, Some(usage()));
    assert_eq!(call.cost, Some(0.25));
    // Charged to the context, exactly as reported.
    assert_eq!(ctx.tokens().input_tokens, 12);

    let error = run.await.unwrap().unwrap_err();
    assert!(matches!(error, Error::Cancelled { .. }), "{error:?}");
    assert_eq!(harness.execution_status(ctx.id()), SessionStatus::Idle);
    assert_eq!(
        harness.execution_status("no-such-execution"),
        SessionStatus::Idle
    );
    assert_eq!(tool_runs.load(Ordering::SeqCst), 0, "no tool call started");
    assert!(rounds.try_recv().is_err(), "no new round was requested");
    assert!(
        harness.pending_spend().await.unwrap().is_empty(),
        "a priced round leaves no record"
    );
    let finished = std::iter::from_fn(|| events.try_recv().ok())
        .find_map(|event| match event {
            FrameworkEvent::DrainFinished { report } => Some(report),
            _ => None,
        })
        .expect("drain_finished");
    assert_eq!(finished, report);
}

#[tokio::test(start_paused = true)]
async fn a_round_still_streaming_at_the_deadline_is_cut_off_and_left_pending() {
    let (harness, mut rounds, tool, _runs) = setup();
    let harness = Arc::new(harness);
    let (ctx, mut events) = observed(&harness);
    let run = start_run(&harness, &ctx, tool);
    let round = rounds.recv().await.unwrap();
    // The response starts (its `created` event) but never finishes.
    let mut partial = ScriptedResponse::text("half an answer").into_events();
    partial.truncate(1);
    round.events.send(Ok(partial.remove(0))).unwrap();
    let started = tokio::time::Instant::now();
    let cancel = tokio::spawn({
        let (harness, ctx) = (harness.clone(), ctx.clone());
        async move {
            harness
                .cancel(&ctx, CancelOptions::new().drain(Duration::from_secs(5)))
                .await
        }
    });
    drain_started(&mut events).await;
    let report = cancel.await.unwrap().expect("a drain reports");
    assert_eq!(report.reason, DrainReason::Deadline);
    assert_eq!(started.elapsed(), Duration::from_secs(5));
    assert_eq!(report.duration, Duration::from_secs(5));
    assert!(report.finished.is_empty(), "{report:?}");
    assert_eq!(report.cut_off.len(), 1, "{report:?}");
    let cut = &report.cut_off[0];
    assert_eq!(cut.generation_id.as_deref(), Some("gen-0"));
    assert!(cut.dispatch_id.is_some());
    assert_eq!((cut.cost, cut.usage), (None, None));

    let error = run.await.unwrap().unwrap_err();
    assert!(matches!(error, Error::Cancelled { .. }), "{error:?}");
    assert!(round.events.is_closed(), "the request was dropped");
    let pending = harness.pending_spend().await.unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].dispatch_id, cut.dispatch_id);
    assert_eq!(pending[0].generation_id.as_deref(), Some("gen-0"));
    let dispatch_id = cut.dispatch_id.as_deref().unwrap();
    let settled = harness
        .settle_spend(dispatch_id, Some(0.1))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(settled.cost, Some(0.1));
    assert!(harness.pending_spend().await.unwrap().is_empty());
    assert!(
        harness
            .settle_spend(dispatch_id, None)
            .await
            .unwrap()
            .is_none(),
        "settled once"
    );
}

#[tokio::test(start_paused = true)]
async fn a_second_cancel_during_a_drain_stops_it_at_once_with_the_same_report() {
    let (harness, mut rounds, tool, _runs) = setup();
    let harness = Arc::new(harness);
    let (ctx, mut events) = observed(&harness);
    let run = start_run(&harness, &ctx, tool);
    let _round = rounds.recv().await.unwrap();
    let started = tokio::time::Instant::now();
    let first = tokio::spawn({
        let (harness, ctx) = (harness.clone(), ctx.clone());
        async move {
            harness
                .cancel(&ctx, CancelOptions::new().drain(Duration::from_secs(30)))
                .await
        }
    });
    drain_started(&mut events).await;
    let second = harness.cancel(&ctx, CancelOptions::new()).await;
    let first = first.await.unwrap();
    assert_eq!(started.elapsed(), Duration::ZERO, "stopped at once");
    let report = second.expect("the second cancel shares the report");
    assert_eq!(report.reason, DrainReason::Stopped);
    assert_eq!(first, Some(report.clone()));
    assert_eq!(report.cut_off.len(), 1);
    assert!(run.await.unwrap().is_err());
}

#[tokio::test(start_paused = true)]
async fn a_drain_with_nothing_in_flight_settles_at_once_and_a_plain_cancel_reports_nothing() {
    let (harness, _rounds, _tool, _runs) = setup();
    let ctx = harness.create_context(ContextOptions::new());
    let report = harness
        .cancel(&ctx, CancelOptions::new().drain(Duration::from_secs(10)))
        .await
        .expect("a drain reports");
    assert_eq!(report.reason, DrainReason::Settled);
    assert_eq!(report.duration, Duration::ZERO);
    assert!(report.finished.is_empty() && report.cut_off.is_empty());
    assert!(ctx.aborted());

    let other = harness.create_context(ContextOptions::new());
    assert_eq!(harness.cancel(&other, CancelOptions::new()).await, None);
    assert!(other.aborted());
}

#[tokio::test(start_paused = true)]
async fn a_session_turn_drains_with_status_draining_then_idle() {
    let (harness, mut rounds) = session_harness();
    let mut session_events = harness.events(Scope::thread("t"));
    harness
        .execute("hello", ExecuteOptions::new().thread_id("t"))
        .await
        .unwrap();
    let round = rounds.recv().await.unwrap();
    let abort = tokio::spawn({
        let harness = harness.clone();
        async move {
            harness
                .abort(
                    AbortOptions::new()
                        .thread_id("t")
                        .drain(Duration::from_secs(10)),
                )
                .await
        }
    });
    loop {
        let event = session_events.next().await.unwrap();
        if matches!(
            &*event,
            StreamEvent::Framework(FrameworkEvent::DrainStarted { .. })
        ) {
            break;
        }
    }
    // The deadline is the wall-clock time the drain cuts at: about ten seconds from its start.
    let SessionStatus::Draining { deadline, .. } = harness.status(Scope::thread("t")) else {
        panic!("not draining: {:?}", harness.status(Scope::thread("t")));
    };
    let left = deadline
        .duration_since(std::time::SystemTime::now())
        .unwrap_or_default();
    assert!(
        left > Duration::from_secs(9) && left <= Duration::from_secs(10),
        "{left:?}"
    );
    feed(&round, ScriptedResponse::text("hi there"));
    let report = abort.await.unwrap().expect("a drain reports");
    assert_eq!(report.reason, DrainReason::Settled);
    assert_eq!(report.finished.len(), 1);
    assert_eq!(report.finished[0].usage, Some(usage()));
    assert_eq!(harness.status(Scope::thread("t")), SessionStatus::Idle);
    assert!(rounds.try_recv().is_err(), "no new round");
}
