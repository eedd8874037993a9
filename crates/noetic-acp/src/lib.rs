//! The `acp_agent` step's runtime: coding agents (Claude Code, Codex, Gemini CLI, Qwen Code,
//! opencode, …) driven over the Agent Client Protocol v1, JSON-RPC 2.0 one message per line on the
//! agent's stdin and stdout.
//!
//! Register an [`AcpClient`] on the harness and add `acp_agent` steps (or `{"kind": "acp-agent"}`
//! workflow nodes):
//!
//! ```no_run
//! use noetic_acp::AcpClient;
//! use noetic_core::acp::{AcpAgentCommand, PermissionRule};
//! use noetic_core::{AgentHarness, acp_agent};
//! let code = acp_agent::<String, String>("code")
//!     .agent("claude")
//!     .allow(PermissionRule::kind("read"))
//!     .build();
//! let harness = AgentHarness::builder("coder")
//!     .acp_runtime(AcpClient::new())
//!     .acp_agent("claude", AcpAgentCommand::new("npx", ["-y", "@zed-industries/claude-code-acp"]))
//!     .agent_graph(code)
//!     .build();
//! ```
//!
//! Each turn spawns the agent in a process group of its own with a minimal environment
//! ([`MINIMAL_ENV`] plus the command's `env`), its stderr traced at `noetic_acp::stderr` and kept as a
//! tail for errors; `initialize` (version 1 only; client capabilities are what the step allows and
//! the harness backs), `session/new`, then `session/prompt`. What the agent streams reaches the
//! step; its permission requests go to the step's policy and the harness's approvals; file requests
//! to the fs adapter (absolute paths under its root only); terminals to the shell adapter (off unless
//! the step turns them on). A cancel answers what is pending, sends `session/cancel`, waits the
//! step's grace, then kills the process group. See `docs/acp.md`.
//!
//! Core never links the protocol: it knows the step's configuration and the
//! [`noetic_core::acp::AcpRuntime`] seam this crate implements.

mod client;
mod connection;
mod error;
mod process;
mod rpc;
mod sync;
mod updates;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;
use noetic_core::acp::{AcpRuntime, AcpTurn, AcpTurnEnd, KeepAlive};
use noetic_core::{Error, Result};

pub use connection::PROTOCOL_VERSION;
pub use error::{AcpError, CODES};
pub use process::MINIMAL_ENV;

use connection::Connection;

/// A kept-alive connection (or none yet): one turn at a time.
type Slot = Arc<tokio::sync::Mutex<Option<Connection>>>;

/// Runs `acp_agent` turns over ACP v1 (see the crate docs). Connections of steps with
/// `keep_alive: harness` live here under their reuse key until [`AcpClient::close_sessions`] or the
/// client is dropped (their process groups are killed then).
#[derive(Default, Clone)]
pub struct AcpClient {
    kept: Arc<Mutex<HashMap<String, Slot>>>,
}

impl std::fmt::Debug for AcpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AcpClient")
            .field("kept_sessions", &sync::lock(&self.kept).len())
            .finish()
    }
}

impl AcpClient {
    /// A client with no sessions.
    pub fn new() -> Self {
        Self::default()
    }

    /// The reuse keys of the sessions kept alive.
    pub fn kept_sessions(&self) -> Vec<String> {
        let mut keys: Vec<String> = sync::lock(&self.kept).keys().cloned().collect();
        keys.sort();
        keys
    }

    /// The pid of the agent kept under `key`, when one is live.
    pub async fn kept_pid(&self, key: &str) -> Option<u32> {
        let slot = sync::lock(&self.kept).get(key).cloned()?;
        let connection = slot.lock().await;
        connection.as_ref().and_then(Connection::pid)
    }

    /// Closes every kept-alive session (each agent's stdin closed, its group terminated, reaped).
    pub async fn close_sessions(&self) {
        let slots: Vec<Slot> = sync::lock(&self.kept)
            .drain()
            .map(|(_, slot)| slot)
            .collect();
        for slot in slots {
            if let Some(mut connection) = slot.lock().await.take() {
                connection.close().await;
            }
        }
    }

    async fn step_turn(&self, turn: &AcpTurn<'_>) -> Result<AcpTurnEnd> {
        let mut connection = Connection::open(turn).await?;
        let ended = connection.prompt(turn).await;
        connection.close().await;
        ended
    }

    async fn kept_turn(&self, key: &str, turn: &AcpTurn<'_>) -> Result<AcpTurnEnd> {
        let slot = sync::lock(&self.kept)
            .entry(key.to_owned())
            .or_default()
            .clone();
        let mut guard = tokio::select! {
            guard = slot.lock() => guard,
            () = turn.cancel.cancelled() => return Err(Error::cancelled(None)),
        };
        if let Some(connection) = guard.as_ref()
            && (connection.command != *turn.command || connection.cwd != turn.cwd)
        {
            return Err(Error::Adapter {
                code: "ACP_CONFIG_INVALID",
                source: format!(
                    "acp_agent `{}`: the session kept under `{key}` runs another agent or cwd; a reusing step must name the same agent and cwd",
                    turn.step_id
                )
                .into(),
            });
        }
        if guard.is_none() {
            *guard = Some(Connection::open(turn).await?);
        }
        let Some(connection) = guard.as_mut() else {
            return Err(Error::cancelled(None));
        };
        let ended = connection.prompt(turn).await;
        if connection.broken
            && let Some(mut connection) = guard.take()
        {
            connection.close().await;
        }
        ended
    }
}

impl AcpRuntime for AcpClient {
    fn run_turn<'a>(&'a self, turn: AcpTurn<'a>) -> BoxFuture<'a, Result<AcpTurnEnd>> {
        Box::pin(async move {
            let session = &turn.config.session;
            match (session.keep_alive, session.reuse.as_deref()) {
                (KeepAlive::Harness, Some(key)) => self.kept_turn(key, &turn).await,
                _ => self.step_turn(&turn).await,
            }
        })
    }
}
