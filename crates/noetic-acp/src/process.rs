//! The agent's process: spawned in a process group of its own with a minimal environment, its
//! stderr logged and kept as a bounded tail, ended with its whole group and reaped.

use std::collections::VecDeque;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use noetic_core::acp::AcpAgentCommand;
use tokio::io::AsyncBufReadExt as _;
use tokio::process::{Child, ChildStdin, ChildStdout};

use crate::error::AcpError;

/// The variables passed from our environment when set; everything else the agent gets comes from
/// its command's `env`.
pub const MINIMAL_ENV: &[&str] = &["PATH", "HOME", "LANG", "LC_ALL", "TERM", "TMPDIR", "USER"];

/// How many of the agent's last stderr lines an error quotes.
const STDERR_TAIL: usize = 20;
/// How long a closing agent may take to exit after SIGTERM before its group gets SIGKILL.
pub(crate) const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// The last lines the agent wrote to stderr.
#[derive(Clone, Default)]
pub(crate) struct StderrTail(Arc<Mutex<VecDeque<String>>>);

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

    /// The tail, one line each.
    pub(crate) fn text(&self) -> String {
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

/// A running agent.
pub(crate) struct AgentProcess {
    child: Child,
    pgid: Option<Pid>,
    pub(crate) stderr: StderrTail,
    /// Ends when stderr closes (the process is gone or going).
    stderr_done: Option<tokio::task::JoinHandle<()>>,
}

impl AgentProcess {
    /// Starts `command` in `cwd`; its stdin and stdout are returned for the protocol.
    pub(crate) fn spawn(
        agent: &str,
        command: &AcpAgentCommand,
        cwd: &std::path::Path,
    ) -> Result<(AgentProcess, ChildStdin, ChildStdout), AcpError> {
        let mut process = tokio::process::Command::new(&command.command);
        process
            .args(&command.args)
            .env_clear()
            .current_dir(cwd)
            .process_group(0)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        for name in MINIMAL_ENV {
            if let Some(value) = std::env::var_os(name) {
                process.env(name, value);
            }
        }
        for (name, value) in &command.env {
            process.env(name, value);
        }
        let mut child = process.spawn().map_err(|source| AcpError::Spawn {
            agent: agent.to_owned(),
            program: command.command.clone(),
            source,
        })?;
        let pgid = child
            .id()
            .and_then(|pid| i32::try_from(pid).ok())
            .map(Pid::from_raw);
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            // Piped above: never happens.
            return Err(AcpError::Spawn {
                agent: agent.to_owned(),
                program: command.command.clone(),
                source: std::io::Error::other("no stdio pipes"),
            });
        };
        let tail = StderrTail::default();
        let stderr_done = {
            let tail = tail.clone();
            let agent = agent.to_owned();
            tokio::spawn(async move {
                let mut lines = tokio::io::BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    tracing::debug!(target: "noetic_acp::stderr", agent = %agent, "{line}");
                    tail.push(line);
                }
            })
        };
        Ok((
            AgentProcess {
                child,
                pgid,
                stderr: tail,
                stderr_done: Some(stderr_done),
            },
            stdin,
            stdout,
        ))
    }

    /// The agent's pid.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.pgid.and_then(|pid| u32::try_from(pid.as_raw()).ok())
    }

    fn signal(&self, signal: Signal) {
        if let Some(pgid) = self.pgid {
            // ESRCH (the group is gone) is the usual, and fine, answer.
            let _ = killpg(pgid, signal);
        }
    }

    /// Its exit, described for an error (`exit code 3`, `signal 9`), once it has exited, and its
    /// stderr tail once the pipe has closed (bounded: at most 1 s more).
    pub(crate) async fn exited(&mut self) -> (String, String) {
        let status = match tokio::time::timeout(Duration::from_secs(1), self.child.wait()).await {
            Ok(Ok(status)) => describe(status),
            _ => "status unknown".to_owned(),
        };
        if let Some(done) = self.stderr_done.take() {
            let _ = tokio::time::timeout(Duration::from_secs(1), done).await;
        }
        (status, self.stderr.text())
    }

    /// Ends the agent: SIGTERM to its group, SIGKILL after [`SHUTDOWN_GRACE`], then reaped. Bounded.
    pub(crate) async fn close(&mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            // Its own children may linger in the group.
            self.signal(Signal::SIGKILL);
            return;
        }
        self.signal(Signal::SIGTERM);
        if tokio::time::timeout(SHUTDOWN_GRACE, self.child.wait())
            .await
            .is_err()
        {
            self.kill().await;
        } else {
            self.signal(Signal::SIGKILL);
        }
    }

    /// SIGKILL to the group, then reaped (bounded).
    pub(crate) async fn kill(&mut self) {
        self.signal(Signal::SIGKILL);
        let _ = tokio::time::timeout(Duration::from_secs(2), self.child.wait()).await;
    }
}

impl Drop for AgentProcess {
    /// A process dropped without `close` (a dropped step future) dies with its group; tokio reaps it.
    fn drop(&mut self) {
        // Also when the agent has exited: children it left in the group die with it.
        self.signal(Signal::SIGKILL);
        if let Some(done) = self.stderr_done.take() {
            done.abort();
        }
    }
}

fn describe(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt as _;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(signal)) => format!("signal {signal}"),
        _ => "status unknown".to_owned(),
    }
}
