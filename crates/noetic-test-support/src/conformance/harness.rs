//! The harness sections of the conformance suite: what a harness records in the store (paid-call
//! rows, approval rows, threads) read back by a new harness on a new handle, as after a restart.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use noetic_core::{
    AgentHarness, CancelOptions, ContextOptions, DrainReason, Error, ExecuteOptions,
    FrameworkEvent, Item, Scope, StreamEvent, Tool, ToolContext, ToolError, call_model,
};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::{ConformanceStore, StoreOpener, within};
use crate::{ScriptedModel, ScriptedResponse};

/// A thread's lease in the harness sections: short, so a crashed holder's expires soon.
const LEASE_TTL: Duration = Duration::from_millis(300);

/// A round cut off mid-stream by a drain's deadline stays pending — listed by
/// [`AgentHarness::pending_spend`] on a new harness on a new handle, with its dispatch and generation
/// ids and execution — while a priced round on the same store adds no record; settling it (once)
/// removes it for every harness on the store.
///
/// # Panics
/// When the store breaks the contract or fails.
///
/// # Cancel safety
/// Not meant to be cancelled: a dropped run leaves test data behind.
#[allow(clippy::unwrap_used)] // a test helper: a failure is a panic with the store's error
pub async fn paid_calls<S: ConformanceStore>(opener: &StoreOpener<S>) {
    let model = ScriptedModel::new();
    // The first round starts its answer and never ends; the next ones answer.
    let mut started = ScriptedResponse::text("never finished").into_events();
    started.truncate(2);
    model.push(ScriptedResponse::stall_after(started));
    model.push(ScriptedResponse::text("done"));
    let paid = |store: S| {
        AgentHarness::builder("paid")
            .provider("scripted", model.clone())
            .durable(store)
            .build()
            .unwrap()
    };
    let first = Arc::new(paid(opener.open().await));
    let (events_tx, mut events) = mpsc::unbounded_channel();
    let sink = move |event: StreamEvent| {
        if let StreamEvent::Framework(event) = event {
            let _ = events_tx.send(event);
        }
    };
    let ctx = first.create_context(ContextOptions::new().event_sink(Arc::new(sink)));
    let step = call_model("llm").model("m").build();
    let run = tokio::spawn({
        let (harness, ctx, step) = (first.clone(), ctx.clone(), step.clone());
        async move { harness.run(&step, "go".to_owned(), &ctx).await }
    });
    // Its stream has started (so its record has the generation id of the response headers).
    within("the cut-off round's first stream event", async {
        loop {
            match events.recv().await {
                Some(FrameworkEvent::ModelCallFirstEvent { .. }) => return,
                Some(_) => {}
                None => panic!("the run ended before its round streamed"),
            }
        }
    })
    .await;
    let report = within(
        "the drain's report",
        first.cancel(&ctx, CancelOptions::new().drain(Duration::from_millis(50))),
    )
    .await
    .expect("a drain reports");
    assert_eq!(report.reason, DrainReason::Deadline);
    assert_eq!(report.cut_off.len(), 1, "{report:?}");
    let cut = report.cut_off[0].clone();
    assert_eq!(cut.generation_id.as_deref(), Some("gen-scripted"));
    assert!(within("the cut-off run", run).await.unwrap().is_err());
    assert_eq!(
        first.pending_spend().await.unwrap(),
        std::slice::from_ref(&cut)
    );

    // A priced round on the same store adds no record.
    let other = first.create_context(ContextOptions::new());
    let answer: String = within(
        "a priced round",
        first.run(&step, "again".to_owned(), &other),
    )
    .await
    .unwrap();
    assert_eq!(answer, "done");
    first.close_context(&other).await;
    drop(first);

    // A new harness on a new handle lists the cut-off round, and settling it removes it for good.
    let second = paid(opener.open().await);
    let pending = second.pending_spend().await.unwrap();
    assert_eq!(pending, std::slice::from_ref(&cut));
    assert_eq!(pending[0].execution_id, ctx.id());
    let dispatch_id = cut.dispatch_id.as_deref().unwrap();
    let settled = second
        .settle_spend(dispatch_id, Some(0.02))
        .await
        .unwrap()
        .expect("the pending round settles");
    assert_eq!(settled.cost, Some(0.02));
    drop(second);
    let third = paid(opener.open().await);
    assert!(third.pending_spend().await.unwrap().is_empty());
    assert!(
        third
            .settle_spend(dispatch_id, None)
            .await
            .unwrap()
            .is_none(),
        "settled once"
    );
}

/// A durable turn's call awaiting approval when its harness crashes (its runtime dropped) is listed
/// by [`AgentHarness::pending_approvals`] on a new harness on a new handle (before the thread is read
/// back), can be approved there once (a second decision is `APPROVAL_NOT_FOUND`), and runs exactly once
/// when the resumed turn reaches it; answered, it is no longer listed.
///
/// # Panics
/// When the store breaks the contract or fails.
///
/// # Cancel safety
/// Not meant to be cancelled: a dropped run leaves test data behind.
#[allow(clippy::unwrap_used)] // a test helper: a failure is a panic with the store's error
pub async fn approvals<S: ConformanceStore>(opener: &StoreOpener<S>) {
    const THREAD: &str = "approval-t";
    // Runs of the gated tool, per approval id (its idempotency key).
    let runs: Arc<Mutex<BTreeMap<String, usize>>> = Arc::default();
    // Calls `echo` once, answers once it has the output.
    let model = || {
        ScriptedModel::responding(|request| {
            if request.tool_outputs().is_empty() {
                ScriptedResponse::tool_call("c1", "echo", json!({"text": "sent"}))
            } else {
                ScriptedResponse::text(&format!("done: {}", request.tool_outputs().join(",")))
            }
        })
    };
    let gated_harness = {
        let runs = runs.clone();
        move |store: S, model: ScriptedModel| {
            let runs = runs.clone();
            let echo = Tool::dynamic(
                "echo",
                "Echoes the text once approved",
                json!({"type": "object", "properties": {"text": {"type": "string"}}}),
                move |args: Value, ctx: ToolContext| {
                    let runs = runs.clone();
                    async move {
                        *runs
                            .lock()
                            .unwrap()
                            .entry(ctx.idempotency_key())
                            .or_default() += 1;
                        Ok::<_, ToolError>(args["text"].clone())
                    }
                },
            )
            .unwrap()
            .needs_approval(true);
            AgentHarness::builder("approvals")
                .provider("scripted", model)
                .agent_graph(
                    call_model("chat")
                        .model("scripted-model")
                        .instructions("Chat.")
                        .tool(echo),
                )
                .durable(store)
                .lease_ttl(LEASE_TTL)
                .build()
                .unwrap()
        }
    };

    {
        let (gated_harness, first_model) = (gated_harness.clone(), model());
        crash_after(opener, move |store: S| async move {
            let first = gated_harness(store, first_model);
            let mut events = first.events(Scope::thread(THREAD));
            first
                .execute("send it", ExecuteOptions::new().thread_id(THREAD))
                .await
                .unwrap();
            within("the approval request", async {
                while let Some(event) = events.next().await {
                    if matches!(
                        &*event,
                        StreamEvent::Framework(FrameworkEvent::ApprovalRequested { .. })
                    ) {
                        return;
                    }
                }
                panic!("the thread's events ended before an approval was requested");
            })
            .await;
            // Crash while the call waits for a person.
        })
        .await;
    }
    assert!(
        runs.lock().unwrap().is_empty(),
        "nothing ran before the decision"
    );

    let second = gated_harness(opener.open().await, model());
    // Listed from the store, before the thread is read back.
    let pending = second
        .pending_approvals(Scope::thread(THREAD))
        .await
        .unwrap();
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(pending[0].tool, "echo");
    assert_eq!(pending[0].thread_id, THREAD);
    assert_eq!(pending[0].arguments, json!({"text": "sent"}));
    let id = pending[0].approval_id.clone();
    // The decision is kept with the request (the crashed holder's lease may still be live).
    second.approve(THREAD, &id).await.unwrap();
    assert_eq!(
        second.approve(THREAD, &id).await.unwrap_err().code(),
        "APPROVAL_NOT_FOUND",
        "single-use across the restart too"
    );
    load_after_the_lease(&second, THREAD).await;
    let response = within(
        "the resumed turn's answer",
        second.agent_response(Scope::thread(THREAD)),
    )
    .await
    .unwrap();

    assert_eq!(response.text, "done: sent");
    assert_eq!(
        runs.lock().unwrap().values().copied().collect::<Vec<_>>(),
        [1],
        "ran exactly once"
    );
    assert!(
        runs.lock().unwrap().contains_key(&id),
        "under its approval id"
    );
    assert!(
        second
            .pending_approvals(Scope::thread(THREAD))
            .await
            .unwrap()
            .is_empty(),
        "answered: no longer listed"
    );
}

/// Threads on the store: every idle thread leaves memory (evicted), and each one touched again
/// resumes its own history from the store; a harness on a new handle reads a released thread back,
/// takes its lease over at a higher epoch, and continues it.
///
/// # Panics
/// When the store breaks the contract or fails.
///
/// # Cancel safety
/// Not meant to be cancelled: a dropped run leaves test data behind.
#[allow(clippy::unwrap_used)] // a test helper: a failure is a panic with the store's error
pub async fn threads<S: ConformanceStore>(opener: &StoreOpener<S>) {
    const THREADS: usize = 24;
    let greeter = |store: S| {
        let model = ScriptedModel::responding(|request| {
            ScriptedResponse::text(&format!("hello, {}", request.user_texts().join(" + ")))
        });
        AgentHarness::builder("threads")
            .provider("scripted", model)
            .agent_graph(
                call_model("chat")
                    .model("scripted-model")
                    .instructions("Greet."),
            )
            .durable(store)
            .session_idle_ttl(Duration::from_secs(600))
            .build()
            .unwrap()
    };
    let answer = async |harness: &AgentHarness, thread: &str, text: &str| {
        harness
            .execute(text, ExecuteOptions::new().thread_id(thread))
            .await
            .unwrap();
        within(
            &format!("the answer on {thread}"),
            harness.agent_response(Scope::thread(thread)),
        )
        .await
        .unwrap()
    };

    // Each thread is evicted as soon as its answer is read, while the next threads run, as a
    // long-running host's keeper would. (Not with an idle TTL of zero: the keeper may then evict a
    // thread between `execute` and `agent_response`, which answers `NOT_FOUND` for it.)
    let first = greeter(opener.open().await);
    for n in 0..THREADS {
        let response = answer(&first, &format!("thread-{n}"), &format!("user {n}")).await;
        assert_eq!(response.text, format!("hello, user {n}"));
        first.evict_idle_sessions(Duration::ZERO).await;
    }
    assert_eq!(first.session_count(), 0, "every idle thread left memory");

    // Touching some of them again reads each back from the store, with its own first turn.
    for n in (0..THREADS).step_by(4) {
        let response = answer(&first, &format!("thread-{n}"), &format!("again {n}")).await;
        assert_eq!(response.text, format!("hello, user {n} + again {n}"));
        assert_eq!(
            texts(&response.items),
            [
                format!("user {n}"),
                format!("hello, user {n}"),
                format!("again {n}"),
                format!("hello, user {n} + again {n}"),
            ]
        );
    }
    first.evict_idle_sessions(Duration::ZERO).await;
    assert_eq!(first.session_count(), 0);
    let check = opener.open().await;
    let released = check
        .lease("thread/thread-0")
        .await
        .unwrap()
        .expect("the thread's lease is kept, released");
    drop(first);

    // Another harness on a new handle sees the same threads, and continues one.
    let second = greeter(opener.open().await);
    for n in [0, 1, THREADS - 1] {
        let thread = format!("thread-{n}");
        second.load_thread(&thread).await.unwrap();
        let history = texts(&second.session_history(Scope::thread(&thread)));
        let expected_len = if n % 4 == 0 { 4 } else { 2 };
        assert_eq!(history.len(), expected_len, "{thread}: {history:?}");
        assert_eq!(history[1], format!("hello, user {n}"));
    }
    assert_eq!(second.session_count(), 3);
    let response = answer(&second, "thread-1", "more").await;
    assert_eq!(response.text, "hello, user 1 + more");
    assert_eq!(
        texts(&response.items),
        ["user 1", "hello, user 1", "more", "hello, user 1 + more"]
    );
    let taken = check.lease("thread/thread-0").await.unwrap().unwrap();
    assert!(
        taken.epoch > released.epoch,
        "the second harness took the lease over: {released:?} then {taken:?}"
    );
}

fn texts(items: &[Item]) -> Vec<String> {
    items
        .iter()
        .map(|item| item.text().unwrap_or_default())
        .collect()
}

/// Runs `crashing` with a handle of its own on a runtime of its own, then drops the runtime: every
/// task of the harness it built stops where it is, as in a crash (its leases stay until they expire).
pub(super) async fn crash_after<S, F, Fut>(opener: &StoreOpener<S>, crashing: F)
where
    S: ConformanceStore + Send,
    F: FnOnce(S) -> Fut + Send + 'static,
    Fut: Future<Output = ()>,
{
    let opener = opener.clone();
    let crashed = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime for the harness that crashes");
        runtime.block_on(async move { crashing(opener.open().await).await });
        drop(runtime);
    });
    let joined = within(
        "the crashing harness's thread",
        tokio::task::spawn_blocking(move || crashed.join()),
    )
    .await
    .expect("joining the crashing harness's thread");
    if let Err(panic) = joined {
        std::panic::resume_unwind(panic);
    }
}

/// Reads `thread` back once a crashed holder's lease has expired (the error says when).
pub(super) async fn load_after_the_lease(harness: &AgentHarness, thread: &str) {
    for _ in 0..20 {
        match harness.load_thread(thread).await {
            Ok(()) => return,
            Err(Error::LeaseHeld { expires_at_ms, .. }) => {
                // Waiting out a known deadline on the wall clock (which leases use).
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |since| since.as_millis() as u64);
                let wait = Duration::from_millis(expires_at_ms.saturating_sub(now) + 1);
                tokio::time::sleep(wait.min(super::WAIT)).await;
            }
            Err(error) => panic!("reading {thread} back: {error}"),
        }
    }
    panic!("the crashed holder's lease on {thread} never expired");
}
