//! `noetic run FLOW.json [PROMPT]`: one turn, its text (or events) streamed to stdout.

use std::io::Write;

use futures_util::StreamExt;
use noetic_core::{AbortOptions, ExecuteOptions, FrameworkEvent, Replay, Scope, StreamEvent};
use tokio::io::AsyncReadExt;

use crate::Failure;
use crate::args::Options;
use crate::output::{TextPrinter, response_json, usage_line};
use crate::signals::{self, Signals};
use crate::workflow::setup;

pub(crate) async fn run(
    flow: &str,
    prompt: Option<String>,
    options: &Options,
) -> Result<(), Failure> {
    // From the start: a signal before the turn is not the default action either.
    let mut signals = Signals::install()?;
    let prompt = match prompt {
        Some(prompt) => prompt,
        None => {
            let mut text = String::new();
            tokio::io::stdin()
                .read_to_string(&mut text)
                .await
                .map_err(|error| {
                    Failure::Usage(format!("cannot read the prompt from stdin: {error}"))
                })?;
            text.trim_end().to_owned()
        }
    };
    if options.storage.is_some() {
        return crate::durable::run(flow, prompt, options, signals).await;
    }
    let setup = setup(flow, options).await?;
    let harness = &setup.harness;
    let scope = Scope::thread_or_default(options.thread.clone());
    // Subscribe before executing so no event of the turn is missed, and none of an earlier one shown.
    let mut events = harness.events_with(scope.clone(), Replay::None);
    let mut execute = ExecuteOptions::new();
    if let Some(thread) = &options.thread {
        execute = execute.thread_id(thread.clone());
    }
    harness.execute(prompt, execute).await?;

    let mut text = TextPrinter::new();
    // A call needing approval that `run` may not grant (no `--approve-all`): its tool.
    let mut refused: Option<String> = None;
    let thread = options
        .thread
        .clone()
        .unwrap_or_else(|| noetic_core::DEFAULT_THREAD.to_owned());
    let turn = async {
        while let Some(event) = events.next().await {
            if let StreamEvent::Framework(FrameworkEvent::ApprovalRequested {
                approval_id,
                tool,
                ..
            }) = &*event
            {
                if options.approve_all {
                    harness.approve(&thread, approval_id).await?;
                } else {
                    refused = Some(tool.clone());
                    let abort = AbortOptions::new()
                        .thread_id(thread.clone())
                        .reason(format!(
                            "`{tool}` needs approval and `noetic run` cannot ask"
                        ));
                    harness.abort(abort).await;
                    break;
                }
            }
            let mut stdout = std::io::stdout().lock();
            if options.events_jsonl {
                let _ = writeln!(stdout, "{}", event.to_json(harness.name()));
            } else if !options.output_json {
                text.event(&event, &mut stdout);
            }
            if matches!(
                &*event,
                StreamEvent::Framework(
                    FrameworkEvent::TurnCompleted { .. } | FrameworkEvent::TurnAborted { .. }
                )
            ) {
                break;
            }
        }
        harness.agent_response(scope.clone()).await
    };
    let mut turn = Box::pin(turn);
    let response = tokio::select! {
        response = &mut turn => response,
        signo = signals.next() => {
            // The turn runs on the session's own task, so it keeps going while it drains; its
            // events are still printed meanwhile (a drain lets its round finish).
            let mut abort = AbortOptions::new().reason(signals::reason(signo));
            if let Some(thread) = &options.thread {
                abort = abort.thread_id(thread.clone());
            }
            let stop = async {
                let drain = options.drain.map(|window| harness.abort(abort.clone().drain(window)));
                match drain {
                    Some(drain) => tokio::select! {
                        report = drain => report,
                        _ = signals.next() => harness.abort(abort).await,
                    },
                    None => harness.abort(abort).await,
                }
            };
            let (report, _) = tokio::join!(stop, &mut turn);
            let spend = harness.usage(scope.clone());
            signals::report(report.as_ref(), spend, None, options.output_json);
            return Err(Failure::Signal(signo));
        }
    };
    drop(turn);
    if let Some(tool) = refused {
        return Err(Failure::Refused {
            code: "APPROVAL_REQUIRED",
            message: format!(
                "a call of `{tool}` needs approval, and `noetic run` cannot ask for it: pass \
                 --approve-all to approve every such call, or use `noetic chat`, which asks"
            ),
        });
    }
    let mut stdout = std::io::stdout().lock();
    let usage = harness.usage(scope);
    let plain = !options.events_jsonl && !options.output_json;
    match response {
        Ok(response) => {
            if plain {
                if !text.wrote() {
                    text.text(&response.text, &mut stdout);
                }
                text.end_line(&mut stdout);
            }
            if options.output_json {
                let _ = writeln!(stdout, "{}", response_json(&response));
            } else {
                eprintln!("{}", usage_line(&usage));
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
