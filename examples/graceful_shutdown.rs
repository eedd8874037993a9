//! A host that stops gracefully on SIGTERM: it drains the model rounds in flight (they finish and
//! are charged, nothing new starts), charges the finished calls to its budget, and prints the
//! drain's report, with the calls it had to cut off (to reconcile later from `pending_spend`).
//!
//! ```text
//! cargo run --example graceful_shutdown
//! ```
//!
//! Runs offline against the demo model. The demo answers at once where a real model streams for
//! seconds, so a small wrapper spaces its events 20 ms apart; and so that the example shows the
//! drain on its own, the host sends itself SIGTERM as soon as the answer starts streaming (a real
//! host gets it from its supervisor).

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use noetic_core::{
    AgentHarness, CancelOptions, ContextOptions, DrainReason, ModelProvider, ModelRequest,
    ModelStream, ResponseEvent, Result, StreamEvent, call_model,
};
use noetic_providers::DemoModel;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;

/// A provider whose events arrive 20 ms apart, like a real model's stream.
struct Streaming<P>(P);

impl<P: ModelProvider> ModelProvider for Streaming<P> {
    fn stream<'a>(&'a self, request: &'a ModelRequest<'a>) -> BoxFuture<'a, Result<ModelStream>> {
        Box::pin(async move {
            let mut started = self.0.stream(request).await?;
            started.events = started
                .events
                .then(|event| async move {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    event
                })
                .boxed();
            Ok(started)
        })
    }
}

/// What the host has spent.
#[derive(Default)]
struct Budget {
    tokens: u64,
    cost: f64,
}

impl Budget {
    fn charge(&mut self, tokens: u64, cost: Option<f64>) {
        self.tokens += tokens;
        self.cost += cost.unwrap_or(0.0);
    }
}

#[tokio::main]
async fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    let demo = DemoModel::start().await?;
    eprintln!("note: using the offline demo model at {}", demo.base_url());
    let harness = Arc::new(
        AgentHarness::builder("host")
            .provider("demo", Streaming(demo.provider()?))
            .build()?,
    );
    // Listening from the start: SIGTERM no longer kills the process, it asks for a drain.
    let mut sigterm = signal(SignalKind::terminate())?;

    // The run's events: the host watches for the answer to start streaming.
    let (deltas_tx, mut deltas) = mpsc::unbounded_channel();
    let sink = move |event: StreamEvent| {
        if let StreamEvent::Sdk(ResponseEvent::OutputTextDelta { .. }) = event {
            let _ = deltas_tx.send(());
        }
    };
    let ctx = harness.create_context(ContextOptions::new().event_sink(Arc::new(sink)));
    let step = call_model("assistant").model("demo").build();
    let run = tokio::spawn({
        let (harness, ctx) = (harness.clone(), ctx.clone());
        async move {
            harness
                .run(&step, "Tell me about graceful shutdown".to_owned(), &ctx)
                .await
        }
    });

    // The demo's supervisor: SIGTERM once the answer is streaming.
    deltas.recv().await;
    std::process::Command::new("kill")
        .args(["-TERM", &std::process::id().to_string()])
        .status()?;

    sigterm.recv().await;
    println!("SIGTERM: draining for up to 10 s");
    let report = harness
        .cancel(
            &ctx,
            CancelOptions::new()
                .reason("SIGTERM")
                .drain(Duration::from_secs(10)),
        )
        .await
        .ok_or("a drain always reports")?;
    let mut budget = Budget::default();
    for call in &report.finished {
        budget.charge(call.usage.map_or(0, |usage| usage.total()), call.cost);
    }
    println!("drain: {}", serde_json::to_string(&report)?);
    println!(
        "drain {} after {} ms: {} call(s) finished and charged ({} tokens, ${:.4}), {} cut off",
        report.reason.as_str(),
        report.duration.as_millis(),
        report.finished.len(),
        budget.tokens,
        budget.cost,
        report.cut_off.len()
    );
    for call in &report.cut_off {
        println!(
            "cut off: dispatch {:?}, generation {:?}: reconcile it from pending_spend()",
            call.dispatch_id, call.generation_id
        );
    }
    println!(
        "pending paid calls: {}",
        harness.pending_spend().await?.len()
    );
    let outcome = run.await?;
    println!(
        "the run ended: {}",
        match outcome {
            Ok(_) => "finished".to_owned(),
            Err(error) => format!("error[{}]", error.code()),
        }
    );
    if report.reason != DrainReason::Settled {
        return Err("the demo's round should finish within the drain".into());
    }
    Ok(())
}
