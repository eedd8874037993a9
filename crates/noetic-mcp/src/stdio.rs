//! A stdio server's process: spawned in a process group of its own, its stderr logged, ended with
//! its group.

use std::collections::VecDeque;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use rmcp::service::RunningService;
use rmcp::transport::TokioChildProcess;
use rmcp::{RoleClient, ServiceExt as _};
use tokio::io::AsyncBufReadExt as _;

use crate::{Handler, McpCommand, McpError};

/// How many of the server's last stderr lines an initialization error quotes.
const STDERR_TAIL: usize = 20;
/// How long an initialization error waits for the rest of a dying server's stderr.
const STDERR_DRAIN: Duration = Duration::from_secs(1);

/// The server's process group (its leader is the server).
pub(crate) struct ChildGroup {
    pgid: Option<Pid>,
}

impl ChildGroup {
    /// The server's pid.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.pgid.and_then(|pid| u32::try_from(pid.as_raw()).ok())
    }

    /// SIGKILL to whatever is left of the group (the server's own children); no-op once it is gone.
    pub(crate) fn kill_group(&self) {
        if let Some(pgid) = self.pgid {
            // ESRCH (no such group) is the usual, and fine, answer.
            let _ = killpg(pgid, Signal::SIGKILL);
        }
    }
}

/// The last lines the server wrote to stderr.
#[derive(Clone, Default)]
struct StderrTail(Arc<Mutex<VecDeque<String>>>);

impl StderrTail {
    fn push(&self, line: String) {
        let mut lines = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if lines.len() == STDERR_TAIL {
            lines.pop_front();
        }
        lines.push_back(line);
    }

    fn text(&self) -> String {
        let lines = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        lines
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Spawns the server and initializes MCP over its stdin and stdout.
pub(crate) async fn connect(
    server: &str,
    command: &McpCommand,
    handler: Handler,
    init_timeout: Duration,
) -> Result<(RunningService<RoleClient, Handler>, ChildGroup), McpError> {
    let (transport, stderr) = TokioChildProcess::builder(command.to_tokio())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| McpError::Spawn {
            server: server.to_owned(),
            program: command.program.clone(),
            source,
        })?;
    let group = ChildGroup {
        pgid: transport
            .id()
            .and_then(|pid| i32::try_from(pid).ok())
            .map(Pid::from_raw),
    };
    let tail = StderrTail::default();
    let reader = stderr.map(|stderr| {
        let tail = tail.clone();
        let server = server.to_owned();
        tokio::spawn(async move {
            let mut lines = tokio::io::BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                tracing::info!(target: "noetic_mcp::stderr", server = %server, "{line}");
                tail.push(line);
            }
        })
    });
    let failed = |message: String| async {
        group.kill_group();
        if let Some(reader) = reader {
            // The server is gone or going: its stderr ends soon.
            let _ = tokio::time::timeout(STDERR_DRAIN, reader).await;
        }
        let stderr = tail.text();
        let message = if stderr.is_empty() {
            message
        } else {
            format!("{message}; its stderr ended with:\n{stderr}")
        };
        McpError::Init {
            server: server.to_owned(),
            message,
        }
    };
    match tokio::time::timeout(init_timeout, handler.serve(transport)).await {
        Ok(Ok(service)) => Ok((service, group)),
        Ok(Err(error)) => Err(failed(format!("`{}`: {error}", command.program)).await),
        Err(_) => Err(failed(format!(
            "`{}`: no answer to initialize within {} ms",
            command.program,
            init_timeout.as_millis()
        ))
        .await),
    }
}
