//! Paid-call records on a SQLite file: a round cut off by a drain's deadline stays pending across a
//! restart, with its dispatch and generation ids; a priced round leaves no record; settling one
//! removes it for every harness on the file.

#![allow(clippy::unwrap_used)] // a test: a failure is a panic

use std::sync::Arc;
use std::time::Duration;

use noetic_core::{
    AgentHarness, CancelOptions, ContextOptions, DrainReason, FrameworkEvent, StreamEvent,
    call_model,
};
use noetic_storage_sqlite::SqliteStorage;
use noetic_test_support::{ScriptedModel, ScriptedResponse};
use tokio::sync::mpsc;

use crate::support::temp_db;

fn harness(store: SqliteStorage, model: &ScriptedModel) -> AgentHarness {
    AgentHarness::builder("paid")
        .provider("scripted", model.clone())
        .durable(store)
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_cut_off_round_stays_pending_across_a_restart_and_a_priced_one_leaves_none() {
    let db = temp_db();
    let model = ScriptedModel::new();
    // The first round starts its answer and never ends; the next ones answer.
    let mut started = ScriptedResponse::text("never finished").into_events();
    started.truncate(2);
    model.push(ScriptedResponse::stall_after(started));
    model.push(ScriptedResponse::text("done"));
    let first = Arc::new(harness(
        SqliteStorage::open(&db.path).await.unwrap(),
        &model,
    ));
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
    while !matches!(
        events.recv().await.unwrap(),
        FrameworkEvent::ModelCallFirstEvent { .. }
    ) {}
    let report = first
        .cancel(&ctx, CancelOptions::new().drain(Duration::from_millis(50)))
        .await
        .unwrap();
    assert_eq!(report.reason, DrainReason::Deadline);
    assert_eq!(report.cut_off.len(), 1, "{report:?}");
    let cut = report.cut_off[0].clone();
    assert_eq!(cut.generation_id.as_deref(), Some("gen-scripted"));
    assert!(run.await.unwrap().is_err());
    assert_eq!(
        first.pending_spend().await.unwrap(),
        std::slice::from_ref(&cut)
    );

    // A priced round on the same file adds no record.
    let other = first.create_context(ContextOptions::new());
    assert_eq!(
        first.run(&step, "again".to_owned(), &other).await.unwrap(),
        "done"
    );
    first.close_context(&other).await;
    drop(first);

    // A new harness on the file lists the cut-off round, and settling it removes it for good.
    let second = harness(SqliteStorage::open(&db.path).await.unwrap(), &model);
    let pending = second.pending_spend().await.unwrap();
    assert_eq!(pending, std::slice::from_ref(&cut));
    assert_eq!(pending[0].execution_id, ctx.id());
    let dispatch_id = cut.dispatch_id.as_deref().unwrap();
    let settled = second
        .settle_spend(dispatch_id, Some(0.02))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(settled.cost, Some(0.02));
    drop(second);
    let third = harness(SqliteStorage::open(&db.path).await.unwrap(), &model);
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
