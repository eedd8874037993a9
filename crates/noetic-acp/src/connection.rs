//! One agent connection: the process, the handshake (`initialize`, `session/new`) and prompt turns.
//!
//! A turn sends `session/prompt` and, until the answer, reads what the agent sends: updates go to the
//! host, its requests are served concurrently (a permission waiting for a person blocks nothing
//! else). A cancel (the turn's token) answers pending permissions `cancelled` and other pending
//! requests -32800, kills running terminals, sends `session/cancel`, and waits the step's grace for
//! the agent's answer; when none comes, the process group is killed. Either way the turn ends
//! `Cancelled` within the grace (plus the kill's bounded reaping). The idle timeout tears down the
//! same way and ends `ACP_TIMEOUT`.

use std::time::Duration;

use futures_util::StreamExt as _;
use futures_util::future::BoxFuture;
use futures_util::stream::FuturesUnordered;
use noetic_core::acp::{AcpTurn, AcpTurnEnd, AcpUpdate};
use noetic_core::{Error, Result};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::client::{self, Advertised, Terminals};
use crate::error::AcpError;
use crate::process::AgentProcess;
use crate::rpc::{AUTH_REQUIRED, Answer, Incoming, REQUEST_CANCELLED, Rpc, RpcError};
use crate::updates;

/// The only protocol version spoken.
pub const PROTOCOL_VERSION: u64 = 1;

/// A live connection to an agent with one session.
pub(crate) struct Connection {
    agent: String,
    process: AgentProcess,
    rpc: Rpc,
    incoming: mpsc::UnboundedReceiver<Incoming>,
    session_id: String,
    agent_capabilities: Value,
    agent_info: Option<Value>,
    advertised: Advertised,
    /// The session's cost so far (USD), from its last `usage_update`.
    cost: Option<f64>,
    /// Killed or failed: never prompted again.
    pub(crate) broken: bool,
    /// What it was opened with: a reusing step must match.
    pub(crate) command: noetic_core::acp::AcpAgentCommand,
    pub(crate) cwd: std::path::PathBuf,
}

/// How a wait for one answer ended, outside a turn.
enum Waited {
    Answer(Result<Value, RpcError>),
    Closed,
    Violation(String),
    TimedOut,
    Cancelled,
}

impl Connection {
    /// Starts the agent and opens a session, within the step's `initialize` timeout; cancellable.
    pub(crate) async fn open(turn: &AcpTurn<'_>) -> Result<Connection> {
        let agent = turn.agent_name.to_owned();
        let (process, stdin, stdout) = AgentProcess::spawn(&agent, turn.command, &turn.cwd)?;
        let (rpc, incoming) = Rpc::start(&agent, stdin, stdout);
        let advertised = Advertised::for_turn(turn);
        let mut connection = Connection {
            agent,
            process,
            rpc,
            incoming,
            session_id: String::new(),
            agent_capabilities: Value::Null,
            agent_info: None,
            advertised,
            cost: None,
            broken: false,
            command: turn.command.clone(),
            cwd: turn.cwd.clone(),
        };
        match connection.handshake(turn).await {
            Ok(()) => Ok(connection),
            Err(error) => {
                connection.close().await;
                Err(error)
            }
        }
    }

    pub(crate) fn pid(&self) -> Option<u32> {
        self.process.pid()
    }

    async fn handshake(&mut self, turn: &AcpTurn<'_>) -> Result<()> {
        let deadline = Instant::now() + turn.config.timeouts.initialize;
        let answer = self
            .rpc
            .request(
                "initialize",
                json!({
                    "protocolVersion": PROTOCOL_VERSION,
                    "clientCapabilities": self.advertised.to_json(),
                    "clientInfo": {"name": "noetic", "version": env!("CARGO_PKG_VERSION")},
                }),
            )
            .await;
        let initialized = self
            .setup_answer("initialize", answer, deadline, turn)
            .await?;
        let version = initialized
            .get("protocolVersion")
            .cloned()
            .unwrap_or(Value::Null);
        if version.as_u64() != Some(PROTOCOL_VERSION) {
            return Err(AcpError::Version {
                agent: self.agent.clone(),
                version: version.to_string(),
            }
            .into());
        }
        self.agent_capabilities = initialized
            .get("agentCapabilities")
            .cloned()
            .unwrap_or(Value::Null);
        self.agent_info = initialized.get("agentInfo").cloned();
        self.check_servers(turn)?;
        let answer = self
            .rpc
            .request(
                "session/new",
                json!({"cwd": turn.cwd, "mcpServers": turn.config.mcp_servers}),
            )
            .await;
        let session = self
            .setup_answer("session/new", answer, deadline, turn)
            .await?;
        self.session_id = session
            .get("sessionId")
            .and_then(Value::as_str)
            .ok_or_else(|| AcpError::Handshake {
                agent: self.agent.clone(),
                message: format!("`session/new` answered no sessionId: {session}"),
            })?
            .to_owned();
        Ok(())
    }

    /// Whether the agent takes `what` (a path into its capabilities: `["promptCapabilities", "image"]`).
    fn can(&self, path: &[&str]) -> bool {
        let mut value = &self.agent_capabilities;
        for key in path {
            value = &value[*key];
        }
        value.as_bool() == Some(true)
    }

    fn unsupported(&self, what: String) -> Error {
        AcpError::Capability {
            agent: self.agent.clone(),
            what,
        }
        .into()
    }

    fn check_servers(&self, turn: &AcpTurn<'_>) -> Result<()> {
        for server in &turn.config.mcp_servers {
            let kind = server
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or("stdio");
            if matches!(kind, "http" | "sse") && !self.can(&["mcpCapabilities", kind]) {
                return Err(self.unsupported(format!("{kind} MCP servers")));
            }
        }
        Ok(())
    }

    fn check_content(&self, turn: &AcpTurn<'_>) -> Result<()> {
        for block in &turn.config.content {
            let capability = match block.get("type").and_then(Value::as_str) {
                Some("image") => "image",
                Some("audio") => "audio",
                Some("resource") => "embeddedContext",
                _ => continue,
            };
            if !self.can(&["promptCapabilities", capability]) {
                return Err(self.unsupported(format!("{capability} prompt content")));
            }
        }
        Ok(())
    }

    /// The answer to a setup request, as a handshake error when it does not come.
    async fn setup_answer(
        &mut self,
        method: &str,
        answer: Answer,
        deadline: Instant,
        turn: &AcpTurn<'_>,
    ) -> Result<Value> {
        let waited = self.wait(answer, deadline, turn).await;
        let handshake = |message: String| AcpError::Handshake {
            agent: self.agent.clone(),
            message,
        };
        match waited {
            Waited::Answer(Ok(value)) => Ok(value),
            Waited::Answer(Err(error)) if error.code == AUTH_REQUIRED => Err(AcpError::Auth {
                agent: self.agent.clone(),
                message: error.message,
            }
            .into()),
            Waited::Answer(Err(error)) => Err(AcpError::Agent {
                agent: self.agent.clone(),
                method: method.to_owned(),
                code: error.code,
                message: error.message,
                data: error.data,
            }
            .into()),
            Waited::Cancelled => Err(Error::cancelled(Some(format!(
                "cancelled while the agent answered `{method}`"
            )))),
            Waited::TimedOut => {
                let stderr = self.process.stderr.text();
                Err(handshake(with_stderr(
                    format!(
                        "no answer to `{method}` within {:?}",
                        turn.config.timeouts.initialize
                    ),
                    &stderr,
                ))
                .into())
            }
            Waited::Violation(line) => Err(handshake(format!(
                "a line that is not JSON-RPC before `{method}` was answered: {line:?}"
            ))
            .into()),
            Waited::Closed => {
                let (status, stderr) = self.process.exited().await;
                Err(handshake(with_stderr(
                    format!("the agent closed its stdout ({status}) before answering `{method}`"),
                    &stderr,
                ))
                .into())
            }
        }
    }

    /// Waits for `answer` outside a turn, answering what the agent asks meanwhile with errors.
    async fn wait(&mut self, mut answer: Answer, deadline: Instant, turn: &AcpTurn<'_>) -> Waited {
        loop {
            tokio::select! {
                biased;
                answer = &mut answer => return match answer {
                    Ok(answer) => Waited::Answer(answer),
                    Err(_) => Waited::Closed,
                },
                () = turn.cancel.cancelled() => return Waited::Cancelled,
                message = self.incoming.recv() => match message {
                    None | Some(Incoming::Closed) => return Waited::Closed,
                    Some(Incoming::Violation(line)) if !turn.config.lenient => return Waited::Violation(line),
                    Some(Incoming::Violation(line)) => {
                        tracing::warn!(agent = %self.agent, %line, "ACP agent wrote a non-JSON-RPC line: skipped");
                    }
                    Some(Incoming::Request { id, method, .. }) => {
                        self.rpc.respond(id, Err(RpcError::new(crate::rpc::METHOD_NOT_FOUND, format!("no session yet: {method}")))).await;
                    }
                    Some(Incoming::Notification { .. }) => {}
                },
                () = tokio::time::sleep_until(deadline) => return Waited::TimedOut,
            }
        }
    }

    /// Runs one prompt turn on the session.
    pub(crate) async fn prompt(&mut self, turn: &AcpTurn<'_>) -> Result<AcpTurnEnd> {
        self.check_content(turn)?;
        let mut blocks = Vec::new();
        if !turn.prompt.is_empty() {
            blocks.push(json!({"type": "text", "text": turn.prompt}));
        }
        blocks.extend(turn.config.content.iter().cloned());
        let session_id = self.session_id.clone();
        let cost_before = self.cost;
        let mut response = self
            .rpc
            .request(
                "session/prompt",
                json!({"sessionId": session_id, "prompt": blocks}),
            )
            .await;
        let terminals = Terminals::default();
        let advertised = self.advertised;
        // The agent's requests being served: (its id, whether a permission, the answer).
        let mut serving: FuturesUnordered<BoxFuture<'_, (Value, Result<Value, RpcError>)>> =
            FuturesUnordered::new();
        // Ids of requests being served, with whether each is a permission request.
        let mut open: Vec<(Value, bool)> = Vec::new();
        let idle = turn.config.timeouts.idle;
        let mut idle_deadline = idle.map(|idle| Instant::now() + idle);
        // Set once cancelling: the grace deadline, and whether it was the idle timeout.
        let mut cancelling: Option<(Instant, bool)> = None;
        let far = Instant::now() + Duration::from_secs(86_400 * 365);
        // The answer's channel closed (the agent is going): wait for `Closed`.
        let mut closed = false;
        let outcome: Result<Value> = loop {
            let permissions_open = open.iter().any(|(_, permission)| *permission);
            let idle_at = match (idle_deadline, cancelling, permissions_open) {
                (Some(at), None, false) => at,
                _ => far,
            };
            let grace_at = cancelling.map_or(far, |(at, _)| at);
            tokio::select! {
                biased;
                answer = &mut response, if !closed => {
                    // What the agent sent before its answer is queued already (one reader, in
                    // order): it reaches the host first.
                    let mut violation = None;
                    while let Ok(message) = self.incoming.try_recv() {
                        match message {
                            Incoming::Notification { method, params } => {
                                self.on_notification(turn, &method, params);
                            }
                            Incoming::Request { id, method, .. } => {
                                let answer = cancelled_answer(client::is_permission(&method));
                                self.rpc.respond(id, answer).await;
                            }
                            Incoming::Violation(line) if !turn.config.lenient => {
                                violation.get_or_insert(line);
                            }
                            Incoming::Violation(line) => {
                                tracing::warn!(agent = %self.agent, %line, "ACP agent wrote a non-JSON-RPC line: skipped");
                            }
                            Incoming::Closed => {}
                        }
                    }
                    // A violation before the answer fails the turn as it would have on its own.
                    if let (Some(line), None) = (violation, cancelling) {
                        self.broken = true;
                        break Err(AcpError::Violation { agent: self.agent.clone(), line }.into());
                    }
                    match (answer, cancelling) {
                        (Ok(Ok(value)), None) => break Ok(value),
                        (_, Some((_, true))) => break Err(self.timed_out(idle)),
                        (_, Some((_, false))) => break Err(cancelled(turn)),
                        (Ok(Err(error)), None) => break Err(AcpError::Agent {
                            agent: self.agent.clone(),
                            method: "session/prompt".to_owned(),
                            code: error.code,
                            message: error.message,
                            data: error.data,
                        }.into()),
                        // Closed before answering: the `Closed` message says how.
                        (Err(_), None) => closed = true,
                    }
                }
                message = self.incoming.recv() => {
                    if let Some(idle) = idle {
                        idle_deadline = Some(Instant::now() + idle);
                    }
                    match message {
                        None | Some(Incoming::Closed) => {
                            let (status, stderr) = self.process.exited().await;
                            self.broken = true;
                            if let Some((_, timed_out)) = cancelling {
                                break Err(if timed_out { self.timed_out(idle) } else { cancelled(turn) });
                            }
                            break Err(AcpError::Exited { agent: self.agent.clone(), status, stderr }.into());
                        }
                        Some(Incoming::Violation(line)) => {
                            if turn.config.lenient {
                                tracing::warn!(agent = %self.agent, %line, "ACP agent wrote a non-JSON-RPC line: skipped");
                            } else {
                                self.broken = true;
                                break Err(AcpError::Violation { agent: self.agent.clone(), line }.into());
                            }
                        }
                        Some(Incoming::Notification { method, params }) => {
                            self.on_notification(turn, &method, params);
                        }
                        Some(Incoming::Request { id, method, params }) => {
                            if cancelling.is_some() {
                                let answer = cancelled_answer(client::is_permission(&method));
                                self.rpc.respond(id, answer).await;
                            } else {
                                open.push((id.clone(), client::is_permission(&method)));
                                let terminals = &terminals;
                                let session_id = session_id.as_str();
                                serving.push(Box::pin(async move {
                                    let answer = client::serve(turn, advertised, terminals, session_id, &id, &method, params).await;
                                    (id, answer)
                                }));
                            }
                        }
                    }
                }
                Some((id, answer)) = serving.next(), if !serving.is_empty() => {
                    open.retain(|(open_id, _)| *open_id != id);
                    self.rpc.respond(id, answer).await;
                }
                () = turn.cancel.cancelled(), if cancelling.is_none() => {
                    self.start_cancel(turn, &mut serving, &mut open, &session_id).await;
                    cancelling = Some((Instant::now() + turn.config.timeouts.cancel_grace, false));
                }
                () = tokio::time::sleep_until(idle_at), if idle_at != far => {
                    self.start_cancel(turn, &mut serving, &mut open, &session_id).await;
                    // The agent went silent: it is not trusted with the session again.
                    self.broken = true;
                    cancelling = Some((Instant::now() + turn.config.timeouts.cancel_grace, true));
                }
                () = tokio::time::sleep_until(grace_at), if grace_at != far => {
                    self.broken = true;
                    self.process.kill().await;
                    let timed_out = cancelling.is_some_and(|(_, timed_out)| timed_out);
                    break Err(if timed_out { self.timed_out(idle) } else { cancelled(turn) });
                }
            }
        };
        drop(serving);
        drop(terminals);
        let value = outcome?;
        let mut end = AcpTurnEnd::default();
        end.stop_reason = value
            .get("stopReason")
            .and_then(Value::as_str)
            .unwrap_or("end_turn")
            .to_owned();
        end.usage = updates::usage(&value);
        end.cost_usd = match (self.cost, cost_before) {
            (Some(now), before) if Some(now) != before => Some(now - before.unwrap_or(0.0)),
            _ => None,
        };
        end.session_id = session_id;
        end.agent_info = self.agent_info.clone();
        Ok(end)
    }

    /// A notification during a turn: `session/update`s reach the host; others are ignored.
    fn on_notification(&mut self, turn: &AcpTurn<'_>, method: &str, params: Value) {
        if method != "session/update" {
            return;
        }
        let raw = params.get("update").cloned().unwrap_or(Value::Null);
        let update = updates::update(&raw);
        if let AcpUpdate::Usage {
            cost_usd: Some(cost),
            ..
        } = &update
        {
            self.cost = Some(*cost);
        }
        turn.host.update(raw, update);
    }

    fn timed_out(&self, idle: Option<Duration>) -> Error {
        AcpError::Timeout {
            agent: self.agent.clone(),
            idle: idle.unwrap_or_default(),
        }
        .into()
    }

    /// The first steps of a cancel: every request being served answered (permissions `cancelled`,
    /// the rest -32800; terminals die with their futures), then `session/cancel`.
    async fn start_cancel(
        &mut self,
        turn: &AcpTurn<'_>,
        serving: &mut FuturesUnordered<BoxFuture<'_, (Value, Result<Value, RpcError>)>>,
        open: &mut Vec<(Value, bool)>,
        session_id: &str,
    ) {
        serving.clear();
        for (id, permission) in open.drain(..) {
            self.rpc.respond(id, cancelled_answer(permission)).await;
        }
        tracing::debug!(agent = %self.agent, step = turn.step_id, "ACP turn cancelled: session/cancel sent");
        self.rpc
            .notify("session/cancel", json!({"sessionId": session_id}))
            .await;
    }

    /// Ends the connection: stdin closed, the group terminated, the process reaped. Bounded.
    pub(crate) async fn close(&mut self) {
        self.rpc.close_stdin().await;
        self.process.close().await;
    }
}

/// The answer to a request still open when the turn is cancelled.
fn cancelled_answer(permission: bool) -> std::result::Result<Value, RpcError> {
    if permission {
        Ok(json!({"outcome": {"outcome": "cancelled"}}))
    } else {
        Err(RpcError::new(REQUEST_CANCELLED, "the turn was cancelled"))
    }
}

/// The turn's end when it was cancelled (the step puts the context's reason on it).
fn cancelled(_turn: &AcpTurn<'_>) -> Error {
    Error::cancelled(None)
}

fn with_stderr(message: String, stderr: &str) -> String {
    if stderr.is_empty() {
        message
    } else {
        format!("{message}; its stderr ended with:\n{stderr}")
    }
}
