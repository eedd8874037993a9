//! Shell commands: the [`ShellAdapter`] trait and its sandboxed default, [`NoShell`].
//!
//! A harness built without a shell adapter gets [`NoShell`], which runs nothing: every command answers
//! exit status 127 with `no shell in this environment` on stderr (what a shell answers for a command it
//! cannot find). `noetic_platform_unix::LocalShell` runs commands for real: `sh -c` in their own process
//! group, with a cwd inside its fs root, a timeout that kills the whole group, capped output and an
//! environment built from an allow-list.

use std::time::Duration;

use futures_util::future::BoxFuture;

/// The exit status a shell gives for a command it cannot find, and [`NoShell`] gives for every one.
pub const COMMAND_NOT_FOUND: i32 = 127;

/// One command for [`ShellAdapter::run`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShellCommand {
    /// The command line, for `sh -c`.
    pub command: String,
    /// The working directory, a path inside the adapter's root (default: the root).
    pub cwd: Option<String>,
    /// How long it may run (default: the adapter's).
    pub timeout: Option<Duration>,
    /// Bytes written to its stdin (default: none; stdin is empty).
    pub stdin: Option<Vec<u8>>,
}

impl ShellCommand {
    /// A command line with the adapter's defaults.
    pub fn new(command: impl Into<String>) -> Self {
        ShellCommand {
            command: command.into(),
            cwd: None,
            timeout: None,
            stdin: None,
        }
    }

    /// Runs it in `cwd`, a path inside the adapter's root.
    pub fn cwd(mut self, cwd: impl Into<String>) -> Self {
        self.cwd = Some(cwd.into());
        self
    }

    /// Kills it (with its whole process group) after `timeout`.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Feeds `stdin` to it.
    pub fn stdin(mut self, stdin: impl Into<Vec<u8>>) -> Self {
        self.stdin = Some(stdin.into());
        self
    }
}

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ShellStatus {
    /// It exited with this status.
    Exited(i32),
    /// A signal ended it (its number).
    Signaled(i32),
    /// It outlived its timeout and was killed with its process group.
    TimedOut(Duration),
}

impl ShellStatus {
    /// Whether it exited with status 0.
    pub fn success(&self) -> bool {
        matches!(self, ShellStatus::Exited(0))
    }
}

impl std::fmt::Display for ShellStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ShellStatus::Exited(code) => write!(f, "exit status {code}"),
            ShellStatus::Signaled(signal) => write!(f, "killed by signal {signal}"),
            ShellStatus::TimedOut(after) => {
                write!(f, "timed out after {} ms and was killed", after.as_millis())
            }
        }
    }
}

/// What a command did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShellOutput {
    /// How it ended.
    pub status: ShellStatus,
    /// Its stdout, up to the adapter's cap.
    pub stdout: Vec<u8>,
    /// Its stderr, up to the adapter's cap.
    pub stderr: Vec<u8>,
    /// Whether stdout went past the cap (the rest was discarded).
    pub stdout_truncated: bool,
    /// Whether stderr went past the cap.
    pub stderr_truncated: bool,
}

impl ShellOutput {
    /// An output with nothing truncated.
    pub fn new(status: ShellStatus, stdout: Vec<u8>, stderr: Vec<u8>) -> Self {
        ShellOutput {
            status,
            stdout,
            stderr,
            stdout_truncated: false,
            stderr_truncated: false,
        }
    }
}

/// Why a command could not be run at all (a command that runs and fails is a [`ShellOutput`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ShellError {
    /// The working directory is refused or missing.
    #[error("working directory: {0}")]
    Cwd(#[source] super::fs::FsError),
    /// The shell could not be started.
    #[error("the shell could not be started: {0}")]
    Spawn(#[source] std::io::Error),
}

impl ShellError {
    /// The stable code: the fs error's for a bad cwd, `SHELL_SPAWN_FAILED` otherwise.
    pub fn code(&self) -> &'static str {
        match self {
            ShellError::Cwd(error) => error.code(),
            ShellError::Spawn(_) => "SHELL_SPAWN_FAILED",
        }
    }
}

impl From<ShellError> for crate::Error {
    fn from(error: ShellError) -> Self {
        crate::Error::Adapter {
            code: error.code(),
            source: Box::new(error),
        }
    }
}

/// Runs shell commands. Object safe: the runtime holds one as an `Arc<dyn ShellAdapter>`; tools reach
/// it through `ctx.runtime().shell()`.
///
/// # Cancel safety
/// Dropping the future of a running command must end the command (and everything it started).
pub trait ShellAdapter: Send + Sync + 'static {
    /// Runs `command` to its end (or its timeout).
    ///
    /// # Errors
    /// [`ShellError`] when it cannot be started at all.
    fn run(&self, command: ShellCommand) -> BoxFuture<'_, Result<ShellOutput, ShellError>>;
}

/// The sandboxed default: no shell. Every command answers exit status 127 and
/// `no shell in this environment` on stderr, and nothing runs.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoShell;

impl ShellAdapter for NoShell {
    fn run(&self, _command: ShellCommand) -> BoxFuture<'_, Result<ShellOutput, ShellError>> {
        Box::pin(async {
            Ok(ShellOutput::new(
                ShellStatus::Exited(COMMAND_NOT_FOUND),
                Vec::new(),
                b"no shell in this environment\n".to_vec(),
            ))
        })
    }
}
