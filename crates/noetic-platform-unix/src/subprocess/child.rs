//! The child's side: [`serve_if_child`] runs the step a host asked for and serves its messages.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::getpgrp;
use noetic_core::adapter::{ChildError, ChildMessage, StepRequest};
use noetic_core::{Context, EventSink, Runtime, Spend, StepRegistry, StreamEvent, TokenUsage};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::net::UnixListener;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::mpsc;

use super::protocol::{Control, Frame, LINGER_ENV, SOCKET_ENV, line};

/// Set once this process serves as a child, so that the steps it runs may start children of their
/// own (a process that is a child but never served refuses to: its `main` forgot
/// [`serve_if_child`] and would start itself again).
pub(crate) static SERVING: AtomicBool = AtomicBool::new(false);

/// How long a finished detached child waits for a host to take its result, unless the host said.
const DEFAULT_LINGER: Duration = Duration::from_secs(3600);

/// Exit codes of a child that could not serve (sysexits).
const EX_DATAERR: i32 = 65;
const EX_SOFTWARE: i32 = 70;
const EX_OSERR: i32 = 71;

/// When this process was started by [`super::LocalSubprocess`] as a child, runs the step the host
/// asked for (its own copy from `registry`, on the runtime `runtime` builds), serves its events,
/// spend and result to the host, and exits the process; otherwise returns at once.
///
/// Call it first thing in `main`, before anything else runs (in particular before a tokio runtime
/// starts: it runs one of its own; from inside one, use [`serve_if_child_async`]):
///
/// ```no_run
/// use noetic_core::{Context, Runtime, StepRegistry, run_code};
///
/// fn registry() -> StepRegistry {
///     StepRegistry::new().register(run_code("square", |n: u64, _: Context| async move {
///         Ok::<_, std::convert::Infallible>(n * n)
///     }))
/// }
///
/// fn main() {
///     noetic_platform_unix::serve_if_child(&registry(), || Runtime::builder("worker").build());
///     // … the host program: a harness whose environment has a LocalSubprocess over registry() …
/// }
/// ```
///
/// An attached child whose host goes away (its socket closes) cancels its step and kills its process
/// group; a detached one runs on, keeps what it sent until a host acknowledges it, and exits once a
/// host took its result (or after its linger time with no host).
pub fn serve_if_child(registry: &StepRegistry, runtime: impl FnOnce() -> Arc<Runtime>) {
    let Some(socket) = std::env::var_os(SOCKET_ENV) else {
        return;
    };
    SERVING.store(true, Ordering::SeqCst);
    let code = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(executor) => executor.block_on(serve(registry, runtime, PathBuf::from(socket))),
        Err(error) => {
            eprintln!("noetic child: cannot start a tokio runtime: {error}");
            EX_OSERR
        }
    };
    std::process::exit(code)
}

/// [`serve_if_child`] from inside a tokio runtime (a `#[tokio::main]`): when this process is a
/// child, serves and exits; otherwise returns at once.
pub async fn serve_if_child_async(registry: &StepRegistry, runtime: impl FnOnce() -> Arc<Runtime>) {
    let Some(socket) = std::env::var_os(SOCKET_ENV) else {
        return;
    };
    SERVING.store(true, Ordering::SeqCst);
    let code = serve(registry, runtime, PathBuf::from(socket)).await;
    std::process::exit(code)
}

/// The connection to the current host.
struct Host {
    lines: Lines<BufReader<OwnedReadHalf>>,
    writer: OwnedWriteHalf,
    /// Whether the host said hello (frames go out only then).
    greeted: bool,
}

impl Host {
    async fn send(&mut self, bytes: &[u8]) -> bool {
        self.writer.write_all(bytes).await.is_ok()
    }
}

async fn serve(
    registry: &StepRegistry,
    runtime: impl FnOnce() -> Arc<Runtime>,
    socket: PathBuf,
) -> i32 {
    let mut request_line = String::new();
    if let Err(error) = std::io::stdin().read_line(&mut request_line) {
        eprintln!("noetic child: cannot read the request from stdin: {error}");
        return EX_DATAERR;
    }
    let request: StepRequest = match serde_json::from_str(&request_line) {
        Ok(request) => request,
        Err(error) => {
            eprintln!("noetic child: the request on stdin is not a step request: {error}");
            return EX_DATAERR;
        }
    };
    let linger = std::env::var(LINGER_ENV)
        .ok()
        .and_then(|ms| ms.parse().ok())
        .map_or(DEFAULT_LINGER, Duration::from_millis);
    let _ = std::fs::remove_file(&socket);
    let listener = match UnixListener::bind(&socket) {
        Ok(listener) => listener,
        Err(error) => {
            eprintln!(
                "noetic child: cannot serve on {}: {error}",
                socket.display()
            );
            return EX_OSERR;
        }
    };
    let runtime = runtime();
    let (messages, mut outgoing) = mpsc::unbounded_channel::<ChildMessage>();
    let sink = event_sink(messages.clone(), runtime.name().to_owned());
    let ctx = registry.context_for(&runtime, &request, Some(sink));
    let step = {
        let (registry, request, ctx) = (registry.clone(), request.clone(), ctx.clone());
        tokio::spawn(async move {
            let result = registry.run(&request, &ctx).await;
            ctx.close().await;
            let _ = messages.send(ChildMessage::Finished {
                result: result.map_err(|error| ChildError::from(&error)),
            });
        })
    };

    let mut unacked: VecDeque<(u64, Vec<u8>)> = VecDeque::new();
    let mut next_seq = 1;
    let mut reported = Spend::default();
    let mut finished_at: Option<u64> = None;
    let mut host: Option<Host> = None;
    let linger_until = |finished: bool, host: &Option<Host>| {
        (finished && host.is_none()).then(|| tokio::time::Instant::now() + linger)
    };
    let mut lingering: Option<tokio::time::Instant> = None;
    let code = loop {
        tokio::select! {
            accepted = listener.accept() => {
                // A new host replaces the previous one (one host at a time).
                if let Ok((stream, _)) = accepted {
                    let (read, writer) = stream.into_split();
                    host = Some(Host { lines: BufReader::new(read).lines(), writer, greeted: false });
                    lingering = None;
                }
            }
            control = async { host.as_mut()?.lines.next_line().await.ok().flatten() }, if host.is_some() => {
                let control = control.and_then(|line| serde_json::from_str::<Control>(&line).ok());
                match control {
                    Some(Control::Hello { after }) => {
                        unacked.retain(|(seq, _)| *seq > after);
                        let Some(current) = host.as_mut() else { continue };
                        current.greeted = true;
                        let mut delivered = true;
                        for (_, bytes) in &unacked {
                            delivered = delivered && current.send(bytes).await;
                        }
                        if !delivered {
                            host = None;
                        }
                    }
                    Some(Control::Ack { seq }) => {
                        unacked.retain(|(sent, _)| *sent > seq);
                        if finished_at.is_some_and(|finished| seq >= finished) {
                            break 0;
                        }
                    }
                    Some(Control::Cancel { reason }) => ctx.abort(reason),
                    // The host went away (or spoke nonsense, which is the same to a child).
                    None => host = None,
                }
                if host.is_none() {
                    if !request.detached {
                        gone_with_host(&ctx);
                    }
                    lingering = linger_until(finished_at.is_some(), &host);
                }
            }
            message = outgoing.recv(), if finished_at.is_none() => {
                let Some(message) = message else { break EX_SOFTWARE };
                let finished = matches!(message, ChildMessage::Finished { .. });
                let mut batch = Vec::with_capacity(2);
                // Spend travels as it happens, so a child killed later has reported what it paid.
                let spend = ctx.spend();
                if spend != reported {
                    batch.push(ChildMessage::Spend { spend: since(spend, reported) });
                    reported = spend;
                }
                batch.push(message);
                for message in batch {
                    let bytes = line(&Frame { seq: next_seq, msg: message });
                    if let Some(current) = host.as_mut().filter(|host| host.greeted)
                        && !current.send(&bytes).await
                    {
                        host = None;
                        if !request.detached {
                            gone_with_host(&ctx);
                        }
                    }
                    unacked.push_back((next_seq, bytes));
                    next_seq += 1;
                }
                if finished {
                    finished_at = Some(next_seq - 1);
                    lingering = linger_until(true, &host);
                }
            }
            () = async {
                match lingering {
                    Some(until) => tokio::time::sleep_until(until).await,
                    None => std::future::pending().await,
                }
            } => {
                eprintln!("noetic child: no host took the result within {linger:?}; exiting");
                break 0;
            }
        }
    };
    step.abort();
    let _ = std::fs::remove_file(&socket);
    code
}

/// The events of the child's context, as `Event` messages in their `to_json` shape.
fn event_sink(messages: mpsc::UnboundedSender<ChildMessage>, name: String) -> Arc<dyn EventSink> {
    Arc::new(move |event: StreamEvent| {
        let _ = messages.send(ChildMessage::Event {
            event: event.to_json(&name),
        });
    })
}

/// An attached child's host is gone: nobody takes its result, so the step is cancelled and the
/// child's whole process group (the child with it) is killed, leaving no orphan.
fn gone_with_host(ctx: &Context) -> ! {
    ctx.abort(Some("the host went away".to_owned()));
    let _ = killpg(getpgrp(), Signal::SIGKILL);
    // Not the leader of a group of its own (started by hand): end this process alone.
    std::process::exit(EX_SOFTWARE)
}

/// What was spent between `before` and `now` (`now` includes `before`).
fn since(now: Spend, before: Spend) -> Spend {
    let minus = |now: Option<u64>, before: Option<u64>| {
        now.map(|now| now.saturating_sub(before.unwrap_or(0)))
    };
    Spend {
        usage: TokenUsage {
            input_tokens: now
                .usage
                .input_tokens
                .saturating_sub(before.usage.input_tokens),
            output_tokens: now
                .usage
                .output_tokens
                .saturating_sub(before.usage.output_tokens),
            cached_tokens: minus(now.usage.cached_tokens, before.usage.cached_tokens),
            cache_write_tokens: minus(
                now.usage.cache_write_tokens,
                before.usage.cache_write_tokens,
            ),
            reasoning_tokens: minus(now.usage.reasoning_tokens, before.usage.reasoning_tokens),
        },
        cost: now.cost.map(|now| now - before.cost.unwrap_or(0.0)),
    }
}
