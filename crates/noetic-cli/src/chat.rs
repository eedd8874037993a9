//! `noetic chat FLOW.json`: a session fed from stdin while turns run, so a person or a program can
//! queue, steer and abort.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::{BoxStream, SelectAll};
use noetic_core::item::Item;
use noetic_core::{
    AbortOptions, AgentHarness, DEFAULT_THREAD, DeliveryMode, ExecuteOptions, FrameworkEvent,
    Replay, Scope, SessionStatus, StreamEvent,
};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::Failure;
use crate::args::Options;
use crate::output::TextPrinter;
use crate::signals::{self, Signals};
use crate::workflow::{read, setup, setup_document};

/// What one stdin line asks for.
#[derive(Debug, PartialEq)]
enum Line {
    Message {
        input: Vec<Item>,
        mode: DeliveryMode,
        thread: Option<String>,
        message_id: Option<String>,
    },
    Abort {
        thread: Option<String>,
        /// `drainMs`: let the turn's rounds in flight finish for this long first.
        drain: Option<Duration>,
    },
    Status {
        thread: Option<String>,
    },
    /// A decision on a tool call waiting for approval: approve (`reason: None`) or reject.
    Decide {
        thread: Option<String>,
        approval_id: String,
        reason: Option<String>,
    },
    Quit,
    Skip,
}

fn text(text: &str) -> Vec<Item> {
    vec![Item::user_text(text)]
}

/// A plain line: a message, or a `/command`.
fn parse_plain(line: &str) -> Result<Line, String> {
    let line = line.trim_end();
    let message = |body: &str, mode| Line::Message {
        input: text(body.trim()),
        mode,
        thread: None,
        message_id: None,
    };
    Ok(
        match line
            .split_once(' ')
            .map_or((line, ""), |(head, rest)| (head, rest))
        {
            ("", _) => Line::Skip,
            ("/steer", body) if !body.trim().is_empty() => message(body, DeliveryMode::NextItem),
            ("/between", body) if !body.trim().is_empty() => {
                message(body, DeliveryMode::BetweenRounds)
            }
            ("/interrupt", body) if !body.trim().is_empty() => {
                message(body, DeliveryMode::Interrupt)
            }
            ("/abort", "") => Line::Abort {
                thread: None,
                drain: None,
            },
            ("/status", "") => Line::Status { thread: None },
            ("/approve", id) if !id.trim().is_empty() && !id.trim().contains(' ') => Line::Decide {
                thread: None,
                approval_id: id.trim().to_owned(),
                reason: None,
            },
            ("/reject", rest) if !rest.trim().is_empty() => {
                let (id, reason) = rest.trim().split_once(' ').unwrap_or((rest.trim(), ""));
                Line::Decide {
                    thread: None,
                    approval_id: id.to_owned(),
                    reason: Some(match reason.trim() {
                        "" => "rejected by the user".to_owned(),
                        reason => reason.to_owned(),
                    }),
                }
            }
            ("/quit", "") => Line::Quit,
            (command, _) if command.starts_with('/') => {
                return Err(format!(
                    "unknown or incomplete command `{line}` (try /steer TEXT, /between TEXT, /interrupt TEXT, /approve ID, /reject ID REASON, /abort, /status, /quit)"
                ));
            }
            _ => Line::Message {
                input: text(line),
                mode: DeliveryMode::NextTurn,
                thread: None,
                message_id: None,
            },
        },
    )
}

/// A JSON line: `{"input", "threadId"?, "deliveryMode"?, "messageId"?}` or `{"command", "threadId"?}`.
fn parse_json(line: &str) -> Result<Line, String> {
    if line.trim().is_empty() {
        return Ok(Line::Skip);
    }
    let value: Value =
        serde_json::from_str(line).map_err(|error| format!("not a JSON line: {error}"))?;
    let thread = value
        .get("threadId")
        .and_then(Value::as_str)
        .map(str::to_owned);
    if let Some(command) = value.get("command") {
        return match command.as_str() {
            Some("abort") => {
                let drain = match value.get("drainMs") {
                    None | Some(Value::Null) => None,
                    Some(millis) => {
                        Some(Duration::from_millis(millis.as_u64().ok_or_else(|| {
                            format!(
                                "`drainMs` must be a whole number of milliseconds, not {millis}"
                            )
                        })?))
                    }
                };
                Ok(Line::Abort { thread, drain })
            }
            Some("status") => Ok(Line::Status { thread }),
            Some(decision @ ("approve" | "reject")) => {
                let approval_id = value
                    .get("approvalId")
                    .and_then(Value::as_str)
                    .filter(|id| !id.is_empty())
                    .ok_or_else(|| format!("`{decision}` needs `approvalId` (a string)"))?
                    .to_owned();
                let reason = (decision == "reject").then(|| {
                    value
                        .get("reason")
                        .and_then(Value::as_str)
                        .unwrap_or("rejected by the user")
                        .to_owned()
                });
                Ok(Line::Decide {
                    thread,
                    approval_id,
                    reason,
                })
            }
            Some("quit") => Ok(Line::Quit),
            _ => Err(format!(
                "`command` must be abort, status, approve, reject or quit, not {command}"
            )),
        };
    }
    let input = match value.get("input") {
        Some(Value::String(body)) if body.is_empty() => return Err("`input` is empty".to_owned()),
        Some(Value::Array(items)) if items.is_empty() => {
            return Err("`input` is empty".to_owned());
        }
        Some(Value::String(body)) => text(body),
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(index, item)| {
                Item::from_json(item.clone(), "input")
                    .map_err(|error| format!("input/{index}: {error}"))
            })
            .collect::<Result<Vec<_>, _>>()?,
        Some(item @ Value::Object(_)) => vec![
            Item::from_json(item.clone(), "input").map_err(|error| format!("input: {error}"))?,
        ],
        _ => return Err("a line needs `input` (text or items) or `command`".to_owned()),
    };
    let mode = match value.get("deliveryMode") {
        None => DeliveryMode::NextTurn,
        Some(mode) => serde_json::from_value(mode.clone())
            .map_err(|_| format!("`deliveryMode` must be next-turn, between-rounds, next-item or interrupt, not {mode}"))?,
    };
    let message_id = value
        .get("messageId")
        .and_then(Value::as_str)
        .map(str::to_owned);
    Ok(Line::Message {
        input,
        mode,
        thread,
        message_id,
    })
}

fn status_json(status: &SessionStatus, queued: usize) -> Value {
    match status {
        SessionStatus::Running { turn_id, .. } => {
            serde_json::json!({"status": "running", "turnId": turn_id, "queued": queued})
        }
        SessionStatus::Aborting { turn_id } => {
            serde_json::json!({"status": "aborting", "turnId": turn_id, "queued": queued})
        }
        SessionStatus::Draining { turn_id, .. } => {
            serde_json::json!({"status": "draining", "turnId": turn_id, "queued": queued})
        }
        SessionStatus::AwaitingApproval { turn_id, calls } => {
            let approvals: Vec<&str> = calls.iter().map(|call| call.approval_id.as_str()).collect();
            serde_json::json!({"status": "awaiting_approval", "turnId": turn_id,
                "approvalIds": approvals, "queued": queued})
        }
        SessionStatus::Queued { .. } => serde_json::json!({"status": "queued", "queued": queued}),
        _ => serde_json::json!({"status": "idle", "queued": queued}),
    }
}

/// Prints one event of `thread`. As JSON lines, the events of a thread other than the chat's own
/// carry its `threadId`.
fn print_event(
    harness: &AgentHarness,
    (thread, event): &(Option<String>, Arc<StreamEvent>),
    events_jsonl: bool,
    jsonl_input: bool,
    text: &mut TextPrinter,
    out: &mut impl Write,
) {
    // An approval request is shown whatever the output mode: someone has to answer it. As a JSON
    // line to a program (`--jsonl`), as a prompt line to a person.
    if let StreamEvent::Framework(FrameworkEvent::ApprovalRequested {
        approval_id,
        tool,
        arguments,
        ..
    }) = &**event
        && !events_jsonl
    {
        if jsonl_input {
            let mut line = event.to_json(harness.name());
            if let (Some(thread), Value::Object(fields)) = (thread, &mut line) {
                fields.insert("threadId".to_owned(), Value::String(thread.clone()));
            }
            let _ = writeln!(out, "{line}");
            let _ = out.flush();
        } else {
            text.end_line(out);
            eprintln!(
                "approval needed: {tool} {arguments} — /approve {approval_id} or /reject {approval_id} REASON"
            );
        }
        return;
    }
    if events_jsonl {
        let mut line = event.to_json(harness.name());
        if let (Some(thread), Value::Object(fields)) = (thread, &mut line) {
            fields.insert("threadId".to_owned(), Value::String(thread.clone()));
        }
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
        return;
    }
    text.event(event, out);
    match &**event {
        StreamEvent::Framework(FrameworkEvent::TurnCompleted { .. }) => text.end_line(out),
        StreamEvent::Framework(FrameworkEvent::TurnAborted {
            reason, error_kind, ..
        }) => {
            text.end_line(out);
            eprintln!("turn ended: error[{error_kind}]: {reason}");
        }
        _ => {}
    }
}

/// The events of every thread the chat has sent to, each tagged with its thread (`None` for the
/// chat's own).
struct Threads {
    own: String,
    known: Vec<String>,
    events: SelectAll<BoxStream<'static, (Option<String>, Arc<StreamEvent>)>>,
}

impl Threads {
    fn new(harness: &AgentHarness, own: Option<String>) -> Self {
        let mut threads = Threads {
            own: own.unwrap_or_else(|| DEFAULT_THREAD.to_owned()),
            known: Vec::new(),
            events: SelectAll::new(),
        };
        threads.watch(harness, None);
        threads
    }

    /// Subscribes to `thread`'s events (`None`: the chat's own thread) unless already subscribed, and
    /// returns its id. Called before sending to it, so none of its events is missed.
    fn watch(&mut self, harness: &AgentHarness, thread: Option<String>) -> String {
        let thread = thread.unwrap_or_else(|| self.own.clone());
        if !self.known.contains(&thread) {
            self.known.push(thread.clone());
            let tag = (thread != self.own).then(|| thread.clone());
            // From now on: the chat subscribes before it sends, so it sees all of its turns.
            let events = harness.events_with(Scope::thread(thread.clone()), Replay::None);
            self.events
                .push(events.map(move |event| (tag.clone(), event)).boxed());
        }
        thread
    }

    /// Aborts the turns waiting for an approval (stdin is closed: no decision can come).
    fn abort_awaiting(&self, harness: &AgentHarness) {
        for thread in &self.known {
            let scope = Scope::thread(thread.clone());
            if let SessionStatus::AwaitingApproval { calls, .. } = harness.status(scope) {
                eprintln!(
                    "note: input ended while {} tool call(s) of thread `{thread}` awaited approval; aborting that turn",
                    calls.len()
                );
                let harness = harness.clone();
                let abort = AbortOptions::new()
                    .thread_id(thread.clone())
                    .reason("input ended while tool calls awaited approval");
                tokio::spawn(async move { harness.abort(abort).await });
            }
        }
    }

    /// Whether every thread the chat has sent to is idle with nothing queued.
    fn all_idle(&self, harness: &AgentHarness) -> bool {
        self.known.iter().all(|thread| {
            let scope = Scope::thread(thread.clone());
            harness.status(scope.clone()) == SessionStatus::Idle && harness.queue_len(scope) == 0
        })
    }
}

pub(crate) async fn chat(flow: &str, jsonl: bool, options: &Options) -> Result<(), Failure> {
    let setup = match &options.storage {
        Some(path) => {
            let store = noetic_storage_sqlite::SqliteStorage::open(path).await?;
            setup_document(flow, &read(flow)?, options, Some(store.into())).await?
        }
        None => setup(flow, options).await?,
    };
    let harness = setup.harness.clone();
    let mut threads = Threads::new(&harness, options.thread.clone());
    let mut signals = Signals::install()?;
    let result = tokio::select! {
        result = converse(&harness, &mut threads, jsonl, options) => result,
        signo = signals.next() => {
            stop(&harness, &mut threads, jsonl, options, &mut signals, signo).await;
            Err(Failure::Signal(signo))
        }
    };
    if options.storage.is_some() {
        // Release the thread's lease now, not when it expires: the next `chat` on it starts at once.
        drop(threads);
        harness.release_idle_sessions().await;
    }
    result
}

/// A signal's stop: aborts the running turn of every thread the chat watches (draining for
/// `--drain-ms` first; a second signal stops at once), printing the turns' events meanwhile (a
/// drain lets rounds finish: their text is shown), then each drain's report.
async fn stop(
    harness: &AgentHarness,
    threads: &mut Threads,
    jsonl: bool,
    options: &Options,
    signals: &mut Signals,
    signo: i32,
) {
    let abort = |thread: &String, drain: Option<Duration>| {
        let mut abort = AbortOptions::new()
            .thread_id(thread.clone())
            .reason(signals::reason(signo));
        if let Some(window) = drain {
            abort = abort.drain(window);
        }
        harness.abort(abort)
    };
    let known = threads.known.clone();
    let stopping = async {
        let all =
            futures_util::future::join_all(known.iter().map(|thread| abort(thread, options.drain)));
        tokio::select! {
            reports = all => reports,
            _ = signals.next() => {
                futures_util::future::join_all(known.iter().map(|thread| abort(thread, None))).await
            }
        }
    };
    let mut stopping = std::pin::pin!(stopping);
    let mut text = TextPrinter::new();
    let mut out = std::io::stdout();
    let reports = loop {
        tokio::select! {
            reports = &mut stopping => break reports,
            Some(event) = threads.events.next() => {
                print_event(harness, &event, options.events_jsonl, jsonl, &mut text, &mut out);
            }
        }
    };
    // The turns have ended: what they published is there now.
    while let Ok(Some(event)) = tokio::time::timeout(Duration::ZERO, threads.events.next()).await {
        print_event(
            harness,
            &event,
            options.events_jsonl,
            jsonl,
            &mut text,
            &mut out,
        );
    }
    text.end_line(&mut out);
    let mut spend = noetic_core::Spend::default();
    for thread in &known {
        spend += harness.usage(Scope::thread(thread.clone()));
    }
    let reports: Vec<_> = reports.into_iter().flatten().collect();
    if reports.is_empty() {
        signals::report(None, spend, None, options.output_json);
    }
    for report in &reports {
        signals::report(Some(report), spend, None, options.output_json);
    }
}

async fn converse(
    harness: &AgentHarness,
    threads: &mut Threads,
    jsonl: bool,
    options: &Options,
) -> Result<(), Failure> {
    if options.storage.is_some() {
        // Subscribed already: a turn a crash cut resumes now (with its pending steers) and prints,
        // then what was queued. A live chat elsewhere on the thread fails this with LEASE_HELD.
        harness.load_thread(&threads.own).await?;
    }
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut text = TextPrinter::new();
    let mut quitting = false;
    let print = |event: &(Option<String>, Arc<StreamEvent>), text: &mut TextPrinter| {
        print_event(
            harness,
            event,
            options.events_jsonl,
            jsonl,
            text,
            &mut std::io::stdout(),
        );
    };
    let mut unanswerable_aborted = false;
    // The abort commands in flight: each prints its drain's report once its turn has ended.
    let mut aborts = tokio::task::JoinSet::new();
    loop {
        if quitting {
            if !unanswerable_aborted {
                // No one is left to answer an approval request: those turns end now.
                unanswerable_aborted = true;
                threads.abort_awaiting(harness);
            }
            // Let the running turns and the queued messages finish, printing their events.
            if threads.all_idle(harness) {
                // Everything is published: print what this subscriber has not shown yet, then stop.
                while let Ok(Some(event)) =
                    tokio::time::timeout(Duration::ZERO, threads.events.next()).await
                {
                    print(&event, &mut text);
                }
                // Their turns have ended, so they are done or about to be: let them print.
                let _ = tokio::time::timeout(Duration::from_secs(1), async {
                    while aborts.join_next().await.is_some() {}
                })
                .await;
                return Ok(());
            }
            if let Some(event) = threads.events.next().await {
                print(&event, &mut text);
            }
            continue;
        }
        tokio::select! {
            Some(event) = threads.events.next() => print(&event, &mut text),
            // Reaps the abort commands that finished.
            Some(_) = aborts.join_next(), if !aborts.is_empty() => {}
            line = lines.next_line() => {
                let line = match line {
                    Ok(Some(line)) => line,
                    Ok(None) => { quitting = true; continue; }
                    Err(error) => return Err(Failure::Usage(format!("cannot read stdin: {error}"))),
                };
                let parsed = if jsonl { parse_json(&line) } else { parse_plain(&line) };
                match parsed {
                    Err(message) => eprintln!("error: {message}"),
                    Ok(Line::Skip) => {}
                    Ok(Line::Quit) => quitting = true,
                    Ok(Line::Status { thread }) => {
                        let scope = Scope::thread(thread.unwrap_or_else(|| threads.own.clone()));
                        let status = status_json(&harness.status(scope.clone()), harness.queue_len(scope));
                        eprintln!("{status}");
                    }
                    Ok(Line::Decide { thread, approval_id, reason }) => {
                        let thread_id = thread.unwrap_or_else(|| threads.own.clone());
                        let decided = match reason {
                            None => harness.approve(&thread_id, &approval_id).await,
                            Some(reason) => harness.reject(&thread_id, &approval_id, reason).await,
                        };
                        if let Err(error) = decided {
                            eprintln!("error[{}]: {error}", error.code());
                        }
                    }
                    Ok(Line::Abort { thread, drain }) => {
                        // Abort waits for the turn to end; keep reading stdin meanwhile.
                        let harness = harness.clone();
                        let thread_id = thread.unwrap_or_else(|| threads.own.clone());
                        let mut abort = AbortOptions::new().thread_id(thread_id).reason("aborted from the chat");
                        if let Some(window) = drain {
                            abort = abort.drain(window);
                        }
                        aborts.spawn(async move {
                            if let Some(report) = harness.abort(abort).await {
                                eprintln!("drain: {}", serde_json::json!(report));
                            }
                        });
                    }
                    Ok(Line::Message { input, mode, thread, message_id }) => {
                        let mut execute = ExecuteOptions::default().delivery_mode(mode);
                        execute.thread_id = Some(threads.watch(harness, thread));
                        execute.message_id = message_id;
                        harness.execute(input, execute).await?;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_lines_map_to_messages_and_commands() {
        assert!(matches!(
            parse_plain("hello").unwrap(),
            Line::Message {
                mode: DeliveryMode::NextTurn,
                ..
            }
        ));
        assert!(matches!(
            parse_plain("/steer use bullets").unwrap(),
            Line::Message {
                mode: DeliveryMode::NextItem,
                ..
            }
        ));
        assert!(matches!(
            parse_plain("/between later").unwrap(),
            Line::Message {
                mode: DeliveryMode::BetweenRounds,
                ..
            }
        ));
        assert!(matches!(
            parse_plain("/interrupt stop").unwrap(),
            Line::Message {
                mode: DeliveryMode::Interrupt,
                ..
            }
        ));
        assert_eq!(
            parse_plain("/abort").unwrap(),
            Line::Abort {
                thread: None,
                drain: None
            }
        );
        assert_eq!(parse_plain("/quit").unwrap(), Line::Quit);
        assert!(parse_plain("/steer").unwrap_err().contains("/steer"));
        assert!(parse_plain("/bogus x").unwrap_err().contains("/bogus"));
    }

    #[test]
    fn json_lines_map_to_messages_and_commands() {
        let line = parse_json(
            r#"{"input": "hi", "threadId": "t", "deliveryMode": "next-item", "messageId": "m1"}"#,
        )
        .unwrap();
        assert_eq!(
            line,
            Line::Message {
                input: text("hi"),
                mode: DeliveryMode::NextItem,
                thread: Some("t".into()),
                message_id: Some("m1".into())
            }
        );
        assert_eq!(parse_json(r#"{"command": "quit"}"#).unwrap(), Line::Quit);
        assert_eq!(
            parse_json(r#"{"command": "abort", "drainMs": 1500}"#).unwrap(),
            Line::Abort {
                thread: None,
                drain: Some(Duration::from_millis(1500))
            }
        );
        assert!(
            parse_json(r#"{"command": "abort", "drainMs": "soon"}"#)
                .unwrap_err()
                .contains("drainMs")
        );
        assert!(
            parse_json(r#"{"input": "x", "deliveryMode": "soon"}"#)
                .unwrap_err()
                .contains("deliveryMode")
        );
        assert!(parse_json("{oops").unwrap_err().contains("JSON"));
        assert!(parse_json(r#"{"foo": 1}"#).unwrap_err().contains("input"));
        assert!(
            parse_json(r#"{"input": ""}"#)
                .unwrap_err()
                .contains("`input` is empty")
        );
        assert!(
            parse_json(r#"{"input": []}"#)
                .unwrap_err()
                .contains("`input` is empty")
        );
    }

    #[test]
    fn a_thread_with_a_queued_message_reports_queued_not_idle() {
        assert_eq!(
            status_json(&SessionStatus::Queued { queued: 1 }, 1),
            serde_json::json!({"status": "queued", "queued": 1})
        );
        assert_eq!(
            status_json(&SessionStatus::Idle, 0),
            serde_json::json!({"status": "idle", "queued": 0})
        );
    }
}
