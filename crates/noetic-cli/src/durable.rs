//! Durable runs: `noetic run … --storage sqlite:PATH` and `noetic resume ID --storage sqlite:PATH`.
//!
//! A durable run goes through `AgentHarness::run` on a root context of a harness made durable on the
//! SQLite file, so the core records every round, tool output and step as it completes. The execution's
//! header keeps the workflow document and its file name (never a key), which is what `resume` hydrates
//! again.

use std::io::Write;
use std::sync::{Arc, Mutex};

use noetic_core::{
    AgentHarness, CancelOptions, Context, ContextOptions, Error, EventSink, StreamEvent,
};
use noetic_storage_sqlite::SqliteStorage;
use serde_json::{Map, Value, json};

use crate::Failure;
use crate::args::Options;
use crate::output::{TextPrinter, usage_line};
use crate::signals::{self, Signals};
use crate::workflow::{Setup, read, setup_document};

/// The header metadata key of the workflow document, and of the file it came from.
const DOCUMENT: &str = "document";
const FLOW: &str = "flow";

async fn open(options: &Options) -> Result<SqliteStorage, Failure> {
    let Some(path) = &options.storage else {
        return Err(Failure::Usage(
            "--storage sqlite:PATH is required".to_owned(),
        ));
    };
    Ok(SqliteStorage::open(path).await?)
}

/// `run FLOW PROMPT --storage sqlite:PATH`.
pub(crate) async fn run(
    flow: &str,
    prompt: String,
    options: &Options,
    signals: Signals,
) -> Result<(), Failure> {
    let document = read(flow)?;
    let store = open(options).await?;
    let metadata = json!({ FLOW: flow, DOCUMENT: document.to_value() });
    let setup = setup_document(flow, &document, options, Some(store.into())).await?;
    let printer = Printer::new(&setup, options);
    let mut context = ContextOptions::new()
        .metadata(metadata)
        .event_sink(printer.sink());
    if let Some(thread) = &options.thread {
        context = context.thread_id(thread.clone());
    }
    let ctx = setup.harness.create_context(context);
    // Before the first model request: a script keeps the id even if the process dies right after.
    eprintln!("execution: {}", ctx.id());
    let graph = setup.harness.agent_graph::<Value, Value>()?;
    let run = setup.harness.run(&graph, Value::String(prompt), &ctx);
    let result = until_signal(&setup.harness, &ctx, run, options, signals).await;
    let outcome = match result {
        Ok(result) => printer.finish(&ctx, result, options),
        Err(stopped) => Err(stopped),
    };
    ctx.close().await;
    outcome
}

/// Runs `run` to its end, unless a signal comes first: then `ctx` is cancelled (draining for
/// `--drain-ms` first, a second signal stopping the drain), `run` is driven to its end meanwhile (it
/// is what finishes the rounds in flight), the report is printed, and the signal is the failure.
async fn until_signal(
    harness: &AgentHarness,
    ctx: &Context,
    run: impl std::future::Future<Output = noetic_core::Result<Value>>,
    options: &Options,
    mut signals: Signals,
) -> Result<noetic_core::Result<Value>, Failure> {
    let mut run = std::pin::pin!(run);
    tokio::select! {
        result = &mut run => Ok(result),
        signo = signals.next() => {
            let reason = signals::reason(signo);
            let stop = async {
                let mut first = CancelOptions::new().reason(reason);
                if let Some(window) = options.drain {
                    first = first.drain(window);
                }
                tokio::select! {
                    report = harness.cancel(ctx, first) => report,
                    _ = signals.next() => harness.cancel(ctx, CancelOptions::new().reason(reason)).await,
                }
            };
            let (report, _) = tokio::join!(stop, &mut run);
            signals::report(report.as_ref(), ctx.spend(), Some(ctx.id()), options.output_json);
            Err(Failure::Signal(signo))
        }
    }
}

/// `spend --storage sqlite:PATH`: the paid calls left unpriced in the file, as a JSON array.
pub(crate) async fn spend(options: &Options) -> Result<(), Failure> {
    let store = open(options).await?;
    let harness = AgentHarness::builder("noetic").durable(store).build()?;
    let pending = harness.pending_spend().await?;
    println!("{}", json!(pending));
    Ok(())
}

/// `resume ID --storage sqlite:PATH`.
pub(crate) async fn resume(execution_id: &str, options: &Options) -> Result<(), Failure> {
    let store = open(options).await?;
    // The workflow comes from the execution itself: read its header before building the harness.
    let reader = AgentHarness::builder("noetic")
        .durable(store.clone())
        .build()?;
    let record =
        reader
            .execution(execution_id)
            .await?
            .ok_or_else(|| Error::CheckpointNotFound {
                execution_id: execution_id.to_owned(),
            })?;
    let flow = record.metadata[FLOW]
        .as_str()
        .unwrap_or("(stored workflow)")
        .to_owned();
    let document =
        noetic_core::workflow::WorkflowDocument::from_value(record.metadata[DOCUMENT].clone())
            .map_err(|error| Failure::Usage(format!("{flow}: error[{}]: {error}", error.code())))?;
    let setup = setup_document(&flow, &document, options, Some(store.into())).await?;
    let printer = Printer::new(&setup, options);
    let ctx = setup
        .harness
        .restore(
            execution_id,
            noetic_core::RestoreOptions::new().event_sink(printer.sink()),
        )
        .await?;
    eprintln!("execution: {}", ctx.id());
    let graph = setup.harness.agent_graph::<Value, Value>()?;
    let result = setup.harness.resume_with(&graph, &ctx).await;
    let outcome = printer.finish(&ctx, result, options);
    ctx.close().await;
    outcome
}

/// Prints a durable run's events as `run` prints a turn's, and its result at the end.
struct Printer {
    state: Arc<Mutex<TextPrinter>>,
    name: String,
    events_jsonl: bool,
    output_json: bool,
}

impl Printer {
    fn new(setup: &Setup, options: &Options) -> Self {
        Printer {
            state: Arc::new(Mutex::new(TextPrinter::new())),
            name: setup.harness.name().to_owned(),
            events_jsonl: options.events_jsonl,
            output_json: options.output_json,
        }
    }

    fn sink(&self) -> Arc<dyn EventSink> {
        let state = self.state.clone();
        let name = self.name.clone();
        let (events_jsonl, output_json) = (self.events_jsonl, self.output_json);
        Arc::new(move |event: StreamEvent| {
            let mut stdout = std::io::stdout().lock();
            if events_jsonl {
                let _ = writeln!(stdout, "{}", event.to_json(&name));
            } else if !output_json {
                let mut printer = state
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
                printer.event(&event, &mut stdout);
            }
        })
    }

    fn finish(
        &self,
        ctx: &Context,
        result: noetic_core::Result<Value>,
        options: &Options,
    ) -> Result<(), Failure> {
        let mut stdout = std::io::stdout().lock();
        let mut text = self
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let plain = !options.events_jsonl && !options.output_json;
        let spend = ctx.spend();
        match result {
            Ok(output) => {
                let answer = match &output {
                    Value::String(text) => text.clone(),
                    other => other.to_string(),
                };
                if plain {
                    if !text.wrote() {
                        text.text(&answer, &mut stdout);
                    }
                    text.end_line(&mut stdout);
                }
                if options.output_json {
                    let mut usage = Map::new();
                    usage.insert("inputTokens".to_owned(), json!(spend.usage.input_tokens));
                    usage.insert("outputTokens".to_owned(), json!(spend.usage.output_tokens));
                    if let Some(cached) = spend.usage.cached_tokens {
                        usage.insert("cachedTokens".to_owned(), json!(cached));
                    }
                    let mut out = Map::new();
                    out.insert("executionId".to_owned(), json!(ctx.id()));
                    out.insert("text".to_owned(), json!(answer));
                    out.insert("items".to_owned(), json!(ctx.items()));
                    out.insert("usage".to_owned(), Value::Object(usage));
                    if let Some(cost) = spend.cost {
                        out.insert("cost".to_owned(), json!(cost));
                    }
                    let _ = writeln!(stdout, "{}", Value::Object(out));
                } else {
                    eprintln!("{}", usage_line(&spend));
                }
                Ok(())
            }
            Err(error) => {
                if plain {
                    text.end_line(&mut stdout);
                }
                Err(Failure::Runtime(error))
            }
        }
    }
}
