//! A run cut at every round and step boundary, and mid-tool, resumes on a new harness to the uncrashed
//! result, asking for no completed round again and running no recorded step or call again.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use noetic_core::{
    ContextOptions, ExecutionStatus, FrameworkEvent, KvDurableStore, RestoreOptions, Spend,
    StreamEvent,
};
use noetic_test_support::RecordedRequest;
use serde_json::Value;
use tokio::sync::mpsc;

use crate::support::{Counts, INPUT, echo_tool, harness, json_of, model, run_until};

/// What an uncrashed durable run gives: output, items, spend and the model's requests.
struct Expected {
    output: String,
    items: Value,
    spend: Spend,
    requests: Vec<RecordedRequest>,
}

async fn uncrashed() -> Expected {
    let store = Arc::new(KvDurableStore::in_memory());
    let counts = Arc::new(Counts::default());
    let model = model(0, None, None);
    let harness = harness(&store, &model, echo_tool(counts.clone(), None), counts);
    let ctx = harness.create_context(ContextOptions::new());
    let graph = harness.agent_graph::<String, String>().unwrap();
    let output = harness.run(&graph, INPUT.to_owned(), &ctx).await.unwrap();
    ctx.close().await;
    let record = harness.execution(ctx.id()).await.unwrap().unwrap();
    assert_eq!(record.status, ExecutionStatus::Completed);
    Expected {
        output,
        items: json_of(&ctx.items()),
        spend: ctx.spend(),
        requests: model.requests(),
    }
}

/// Cuts the run while request `k` is in flight, resumes it on a fresh harness, and checks it.
async fn cut_at_request(k: usize, expected: &Expected) {
    let store = Arc::new(KvDurableStore::in_memory());
    let counts = Arc::new(Counts::default());
    let (stalled, mut stop) = mpsc::unbounded_channel();
    let first = model(0, Some(k), Some(stalled));
    let crashed = harness(
        &store,
        &first,
        echo_tool(counts.clone(), None),
        counts.clone(),
    );
    let id = run_until(&crashed, &mut stop).await;
    assert_eq!(first.requests().len(), k + 1, "cut at request {k}");

    let second = model(k, None, None);
    let resumed = harness(
        &store,
        &second,
        echo_tool(counts.clone(), None),
        counts.clone(),
    );
    let replayed = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = replayed.clone();
    let ctx = resumed
        .restore(
            &id,
            RestoreOptions::new().event_sink(Arc::new(move |event: StreamEvent| {
                if let StreamEvent::Framework(FrameworkEvent::StepReplayed { step_id, .. }) = event
                {
                    sink.lock().unwrap().push(step_id);
                }
            })),
        )
        .await
        .unwrap();
    assert_eq!(ctx.id(), id);
    let graph = resumed.agent_graph::<String, String>().unwrap();
    let output = resumed.resume_with(&graph, &ctx).await.unwrap();
    ctx.close().await;

    assert_eq!(output, expected.output, "cut at request {k}");
    assert_eq!(json_of(&ctx.items()), expected.items, "cut at request {k}");
    // The cut round reported no usage: the whole execution paid exactly what the uncrashed one did.
    assert_eq!(ctx.spend(), expected.spend, "cut at request {k}");
    // The new harness asked only for the cut round and those after it, exactly as the uncrashed run.
    assert_eq!(
        second.requests(),
        expected.requests[k..],
        "cut at request {k}: no completed round asked for again"
    );
    // Code that completed before the cut did not run again; each tool call ran once.
    assert_eq!(
        counts.prepare.load(Ordering::SeqCst),
        1,
        "cut at request {k}"
    );
    assert_eq!(
        counts.middle.load(Ordering::SeqCst),
        1,
        "cut at request {k}"
    );
    assert!(
        counts.call_runs().values().all(|runs| *runs == 1),
        "cut at request {k}: {:?}",
        counts.call_runs()
    );
    // Completed steps were replayed from the ledger: `prepare` always; `gather` and `middle` when the
    // cut was in `answer`.
    let replayed = replayed.lock().unwrap().clone();
    assert!(replayed.contains(&"prepare".to_owned()), "{replayed:?}");
    assert_eq!(
        replayed.contains(&"gather".to_owned()),
        k == 3,
        "cut at request {k}: {replayed:?}"
    );
    let record = resumed.execution(&id).await.unwrap().unwrap();
    assert_eq!(record.status, ExecutionStatus::Completed);
    assert_eq!(record.output, Some(Value::String(expected.output.clone())));
}

#[tokio::test]
async fn a_run_cut_at_every_round_and_step_boundary_resumes_to_the_uncrashed_result() {
    let expected = uncrashed().await;
    assert_eq!(expected.output, "the answer is three");
    assert_eq!(expected.requests.len(), 4);
    // 0: the first round; 1, 2: after a tool round of `gather`; 3: `answer`, after `middle`.
    for k in 0..4 {
        cut_at_request(k, &expected).await;
    }
}

#[tokio::test]
async fn a_tool_call_in_flight_at_the_cut_runs_again_with_the_same_idempotency_key() {
    let expected = uncrashed().await;
    let store = Arc::new(KvDurableStore::in_memory());
    let counts = Arc::new(Counts::default());
    let (started, mut stop) = mpsc::unbounded_channel();
    let first = model(0, None, None);
    // `call_b` (the second round's call) never finishes in the first harness.
    let crashed = harness(
        &store,
        &first,
        echo_tool(counts.clone(), Some(("call_b", started))),
        counts.clone(),
    );
    let id = run_until(&crashed, &mut stop).await;
    assert_eq!(first.requests().len(), 2);

    let second = model(2, None, None);
    let resumed = harness(
        &store,
        &second,
        echo_tool(counts.clone(), None),
        counts.clone(),
    );
    let ctx = resumed.restore(&id, RestoreOptions::new()).await.unwrap();
    let graph = resumed.agent_graph::<String, String>().unwrap();
    let output = resumed.resume_with(&graph, &ctx).await.unwrap();
    ctx.close().await;

    assert_eq!(output, expected.output);
    assert_eq!(json_of(&ctx.items()), expected.items);
    // The recorded call ran once; the one in flight ran again (at-least-once), with one key.
    let calls = counts.calls.lock().unwrap().clone();
    assert_eq!(calls["call_a"].len(), 1);
    assert_eq!(calls["call_b"].len(), 2);
    assert_eq!(calls["call_b"][0], calls["call_b"][1]);
    assert_eq!(calls["call_b"][0], format!("{id}:call_b"));
    // The round whose response was recorded was not asked for again: the next request is round 2's.
    assert_eq!(second.requests(), expected.requests[2..]);
}

#[tokio::test]
async fn resuming_a_completed_execution_returns_its_output_without_running_anything() {
    let store = Arc::new(KvDurableStore::in_memory());
    let counts = Arc::new(Counts::default());
    let model = model(0, None, None);
    let harness = harness(
        &store,
        &model,
        echo_tool(counts.clone(), None),
        counts.clone(),
    );
    let ctx = harness.create_context(ContextOptions::new());
    let graph = harness.agent_graph::<String, String>().unwrap();
    let output = harness.run(&graph, INPUT.to_owned(), &ctx).await.unwrap();
    ctx.close().await;
    let requests = model.requests().len();

    let again: String = harness.resume(ctx.id()).await.unwrap();
    assert_eq!(again, output);
    assert_eq!(model.requests().len(), requests);
    assert_eq!(counts.prepare.load(Ordering::SeqCst), 1);
    let listed = harness.executions().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].execution_id, ctx.id());
    assert_eq!(listed[0].input, Value::String(INPUT.to_owned()));

    harness.clear_checkpoint(ctx.id()).await.unwrap();
    assert!(harness.execution(ctx.id()).await.unwrap().is_none());
    assert_eq!(
        harness
            .restore(ctx.id(), RestoreOptions::new())
            .await
            .unwrap_err()
            .code(),
        "CHECKPOINT_NOT_FOUND"
    );
}
