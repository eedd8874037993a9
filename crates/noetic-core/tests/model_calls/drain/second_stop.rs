//! A second stop during a drain ends it at once with the first call's report (reason `stopped`),
//! whether the first call's future is still polled, was spawned, or was dropped; and a drain whose
//! future was dropped still ends (at its deadline) with its context or turn aborted, never wedged.
//! For `cancel` on a `run()` context and for `abort` on a session turn.

use std::future::Future;

use noetic_core::DrainReport;

use super::*;

/// How long a stop may take here: the clock is paused, so a stop that waits for anything but the
/// work already done trips this at once (auto-advance) instead of hanging.
const PROMPT: Duration = Duration::from_millis(1);

async fn promptly<F: Future>(what: &str, future: F) -> F::Output {
    tokio::time::timeout(PROMPT, future)
        .await
        .unwrap_or_else(|_| panic!("{what} did not resolve promptly"))
}

/// A drain of 30 s on `ctx`'s run, its first round in flight (never fed).
fn drain_30s() -> CancelOptions {
    CancelOptions::new()
        .reason("first stop")
        .drain(Duration::from_secs(30))
}

/// Polls `future` until the drain has started (its `drain_started` event), then drops it.
async fn drop_once_started<F: Future>(
    future: F,
    events: &mut mpsc::UnboundedReceiver<FrameworkEvent>,
) {
    tokio::select! {
        _ = future => panic!("the drain ended before it was dropped"),
        _ = drain_started(events) => {}
    }
}

fn assert_stopped(report: &DrainReport) {
    assert_eq!(report.reason, DrainReason::Stopped, "{report:?}");
    assert_eq!(report.cut_off.len(), 1, "the round in flight: {report:?}");
    assert!(report.finished.is_empty(), "{report:?}");
}

#[tokio::test(start_paused = true)]
async fn a_second_cancel_while_the_first_is_still_polled_resolves_both_with_one_report() {
    let (harness, mut rounds, tool, _runs) = setup();
    let harness = Arc::new(harness);
    let (ctx, mut events) = observed(&harness);
    let run = start_run(&harness, &ctx, tool);
    let _round = rounds.recv().await.unwrap();
    let (first, second) = promptly("two cancels in one task", async {
        tokio::join!(harness.cancel(&ctx, drain_30s()), async {
            drain_started(&mut events).await;
            harness.cancel(&ctx, CancelOptions::new()).await
        })
    })
    .await;
    let report = second.expect("the second cancel shares the report");
    assert_stopped(&report);
    assert_eq!(first, Some(report));
    assert!(run.await.unwrap().is_err(), "the run is cancelled");
}

#[tokio::test(start_paused = true)]
async fn a_second_cancel_after_the_first_was_dropped_resolves_at_once_with_its_report() {
    let (harness, mut rounds, tool, _runs) = setup();
    let harness = Arc::new(harness);
    let (ctx, mut events) = observed(&harness);
    let run = start_run(&harness, &ctx, tool);
    let _round = rounds.recv().await.unwrap();
    drop_once_started(harness.cancel(&ctx, drain_30s()), &mut events).await;
    let report = promptly(
        "a cancel after a dropped drain",
        harness.cancel(&ctx, CancelOptions::new()),
    )
    .await
    .expect("the second cancel reports the drain");
    assert_stopped(&report);
    let finished = events
        .try_recv()
        .expect("drain_finished was emitted for the dropped drain");
    assert_eq!(finished, FrameworkEvent::DrainFinished { report });
    let error = promptly("the run's end", run).await.unwrap().unwrap_err();
    assert_eq!(error.code(), "CANCELLED");
    assert!(ctx.aborted());
}

#[tokio::test(start_paused = true)]
async fn a_dropped_drain_still_ends_at_its_deadline_and_aborts_its_context() {
    let (harness, mut rounds, tool, tool_runs) = setup();
    let harness = Arc::new(harness);
    let (ctx, mut events) = observed(&harness);
    let run = start_run(&harness, &ctx, tool);
    let _round = rounds.recv().await.unwrap();
    let started = tokio::time::Instant::now();
    drop_once_started(harness.cancel(&ctx, drain_30s()), &mut events).await;
    let error = run.await.unwrap().unwrap_err();
    assert_eq!(error.code(), "CANCELLED");
    assert!(
        error.to_string().contains("first stop"),
        "the drain's reason: {error}"
    );
    assert_eq!(
        started.elapsed(),
        Duration::from_secs(30),
        "cut at the deadline"
    );
    assert_eq!(tool_runs.load(Ordering::SeqCst), 0);
    // A later stop gets the report the dropped drain made.
    let report = promptly(
        "a cancel after the drain ended",
        harness.cancel(&ctx, CancelOptions::new()),
    )
    .await
    .expect("the drain's report");
    assert_eq!(report.reason, DrainReason::Deadline);
    assert_eq!(report.cut_off.len(), 1);
}

/// A harness whose agent is one `call_model` on the gated model, with a turn on thread `t` whose
/// first round is in flight (kept open by the returned `Round`); the session's framework events.
async fn running_turn() -> (
    Arc<AgentHarness>,
    mpsc::UnboundedReceiver<Round>,
    mpsc::UnboundedReceiver<FrameworkEvent>,
    Round,
) {
    let (harness, mut rounds) = session_harness();
    let mut stream = harness.events(Scope::thread("t"));
    let (events_tx, events) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(event) = stream.next().await {
            if let StreamEvent::Framework(event) = &*event {
                let _ = events_tx.send(event.clone());
            }
        }
    });
    harness
        .execute("hello", ExecuteOptions::new().thread_id("t"))
        .await
        .unwrap();
    let round = rounds.recv().await.unwrap();
    (harness, rounds, events, round)
}

fn abort_draining() -> AbortOptions {
    AbortOptions::new()
        .thread_id("t")
        .reason("first stop")
        .drain(Duration::from_secs(30))
}

fn abort_now() -> AbortOptions {
    AbortOptions::new().thread_id("t")
}

/// The turn ended and the thread takes the next message (a new turn, a new round).
async fn thread_goes_on(harness: &AgentHarness, rounds: &mut mpsc::UnboundedReceiver<Round>) {
    assert!(
        !matches!(
            harness.status(Scope::thread("t")),
            SessionStatus::Running { .. } | SessionStatus::Draining { .. }
        ),
        "{:?}",
        harness.status(Scope::thread("t"))
    );
    harness
        .execute("again", ExecuteOptions::new().thread_id("t"))
        .await
        .unwrap();
    let round = promptly("the next turn's round", rounds.recv())
        .await
        .expect("a new round");
    feed(&round, ScriptedResponse::text("back"));
    let response = promptly("the next turn", harness.agent_response(Scope::thread("t")))
        .await
        .expect("the next turn answers");
    assert_eq!(response.text, "back");
}

#[tokio::test(start_paused = true)]
async fn a_second_abort_while_the_first_is_still_polled_resolves_both_with_one_report() {
    let (harness, mut rounds, mut events, _round) = running_turn().await;
    let (first, second) = promptly("two aborts in one task", async {
        tokio::join!(harness.abort(abort_draining()), async {
            drain_started(&mut events).await;
            harness.abort(abort_now()).await
        })
    })
    .await;
    let report = second.expect("the second abort shares the report");
    assert_stopped(&report);
    assert_eq!(first, Some(report));
    thread_goes_on(&harness, &mut rounds).await;
}

#[tokio::test(start_paused = true)]
async fn a_second_abort_after_a_spawned_first_resolves_both_with_one_report() {
    let (harness, mut rounds, mut events, _round) = running_turn().await;
    let first = tokio::spawn({
        let harness = harness.clone();
        async move { harness.abort(abort_draining()).await }
    });
    drain_started(&mut events).await;
    let second = promptly("the second abort", harness.abort(abort_now()))
        .await
        .expect("the second abort shares the report");
    assert_stopped(&second);
    let first = promptly("the spawned first abort", first).await.unwrap();
    assert_eq!(first, Some(second));
    thread_goes_on(&harness, &mut rounds).await;
}

#[tokio::test(start_paused = true)]
async fn a_second_abort_after_the_first_was_dropped_resolves_at_once_with_its_report() {
    let (harness, mut rounds, mut events, _round) = running_turn().await;
    drop_once_started(harness.abort(abort_draining()), &mut events).await;
    assert!(
        matches!(
            harness.status(Scope::thread("t")),
            SessionStatus::Draining { .. }
        ),
        "the drain goes on without its caller: {:?}",
        harness.status(Scope::thread("t"))
    );
    let report = promptly("an abort after a dropped drain", harness.abort(abort_now()))
        .await
        .expect("the second abort reports the drain");
    assert_stopped(&report);
    thread_goes_on(&harness, &mut rounds).await;
}

#[tokio::test(start_paused = true)]
async fn a_dropped_turn_drain_still_ends_at_its_deadline_and_the_thread_goes_on() {
    let (harness, mut rounds, mut events, _round) = running_turn().await;
    let started = tokio::time::Instant::now();
    drop_once_started(harness.abort(abort_draining()), &mut events).await;
    let error = harness
        .agent_response(Scope::thread("t"))
        .await
        .expect_err("the turn was aborted");
    assert!(error.to_string().contains("first stop"), "{error}");
    assert_eq!(
        started.elapsed(),
        Duration::from_secs(30),
        "cut at the deadline"
    );
    assert_eq!(harness.status(Scope::thread("t")), SessionStatus::Idle);
    thread_goes_on(&harness, &mut rounds).await;
}
