//! [`LocalShell`]: `sh -c` in its own process group, confined to a [`LocalFs`] root.

use std::ffi::OsString;
use std::os::fd::AsRawFd;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use futures_util::future::BoxFuture;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use noetic_core::adapter::{ShellAdapter, ShellCommand, ShellError, ShellOutput, ShellStatus};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use crate::LocalFs;

/// The variables a [`LocalShell`] passes on from the host's environment unless told otherwise: what
/// commands need to find programs and speak the user's locale, never credentials.
pub const DEFAULT_ENV: &[&str] = &[
    "PATH", "HOME", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TERM", "TZ", "USER", "LOGNAME",
    "SHELL", "TMPDIR",
];

/// The default timeout of a command: 30 s.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// The default cap on each of stdout and stderr: 256 KiB.
pub const DEFAULT_OUTPUT_CAP: usize = 256 * 1024;

/// Runs commands with `sh -c`, each in a process group of its own, with its cwd inside a
/// [`LocalFs`] root.
///
/// - **Timeout** (default 30 s, or the command's own): the whole process group is killed, so nothing
///   the command started survives it. When the command exits in time, whatever it left running in its
///   group is killed too.
/// - **Output**: stdout and stderr are each capped (default 256 KiB); the rest is read and discarded.
/// - **Environment**: built from an allow-list ([`DEFAULT_ENV`] plus [`LocalShell::pass_env`]) and
///   explicit values ([`LocalShell::env`]); nothing else of the host's environment, so the harness's
///   API keys never reach a command unless named.
/// - **cwd**: resolved inside the root like any path of the [`LocalFs`] (refused with
///   `FS_PATH_REFUSED` when it leads outside), and entered through the directory descriptor the
///   resolution opened, so a symlink swapped in afterwards cannot redirect it.
///
/// Dropping a running command's future kills its process group.
#[derive(Clone)]
pub struct LocalShell {
    fs: LocalFs,
    timeout: Duration,
    output_cap: usize,
    allow: Vec<String>,
    env: Vec<(String, String)>,
    shell: PathBuf,
}

impl std::fmt::Debug for LocalShell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Values set with `env` may be secrets: only their names are shown.
        f.debug_struct("LocalShell")
            .field("root", &self.fs.root())
            .field("timeout", &self.timeout)
            .field("output_cap", &self.output_cap)
            .field("allow", &self.allow)
            .field(
                "env",
                &self.env.iter().map(|(name, _)| name).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl LocalShell {
    /// A shell whose commands run inside `fs`'s root (their default cwd).
    pub fn new(fs: &LocalFs) -> Self {
        LocalShell {
            fs: fs.clone(),
            timeout: DEFAULT_TIMEOUT,
            output_cap: DEFAULT_OUTPUT_CAP,
            allow: DEFAULT_ENV.iter().map(|name| (*name).to_owned()).collect(),
            env: Vec::new(),
            shell: PathBuf::from("/bin/sh"),
        }
    }

    /// The timeout of commands that set none (default 30 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The cap on each of stdout and stderr (default 256 KiB).
    pub fn output_cap(mut self, bytes: usize) -> Self {
        self.output_cap = bytes;
        self
    }

    /// Passes the host's variable `name` on to commands (when it is set), besides [`DEFAULT_ENV`].
    pub fn pass_env(mut self, name: impl Into<String>) -> Self {
        self.allow.push(name.into());
        self
    }

    /// Sets variable `name` to `value` for every command.
    pub fn env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((name.into(), value.into()));
        self
    }

    /// Passes on nothing of the host's environment (only [`LocalShell::env`] values and later
    /// [`LocalShell::pass_env`] names).
    pub fn clear_env(mut self) -> Self {
        self.allow.clear();
        self
    }

    fn environment(&self) -> Vec<(OsString, OsString)> {
        let mut vars: Vec<(OsString, OsString)> = self
            .allow
            .iter()
            .filter_map(|name| std::env::var_os(name).map(|value| (name.into(), value)))
            .collect();
        vars.extend(
            self.env
                .iter()
                .map(|(name, value)| (name.into(), value.into())),
        );
        vars
    }

    async fn run_command(&self, command: ShellCommand) -> Result<ShellOutput, ShellError> {
        let dir = self
            .fs
            .open_dir(command.cwd.as_deref().unwrap_or(""))
            .map_err(ShellError::Cwd)?;
        // The child enters the directory through the descriptor held open here: no path is
        // resolved again.
        let cwd = if std::path::Path::new("/proc/self/fd").is_dir() {
            PathBuf::from(format!(
                "/proc/{}/fd/{}",
                std::process::id(),
                dir.as_raw_fd()
            ))
        } else {
            self.fs.root().join(command.cwd.as_deref().unwrap_or(""))
        };
        let mut child = tokio::process::Command::new(&self.shell)
            .arg("-c")
            .arg(&command.command)
            .current_dir(cwd)
            .env_clear()
            .envs(self.environment())
            .process_group(0)
            .stdin(if command.stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(ShellError::Spawn)?;
        drop(dir);
        let group = GroupGuard(child.id().map(|pid| Pid::from_raw(pid as i32)));
        if let (Some(mut stdin), Some(bytes)) = (child.stdin.take(), command.stdin) {
            // A command that does not read its stdin must not block the run: write it aside.
            tokio::spawn(async move {
                let _ = stdin.write_all(&bytes).await;
            });
        }
        let cap = self.output_cap;
        let stdout = tokio::spawn(read_capped(child.stdout.take(), cap));
        let stderr = tokio::spawn(read_capped(child.stderr.take(), cap));
        let timeout = command.timeout.unwrap_or(self.timeout);
        let status = tokio::select! {
            status = child.wait() => status.map_err(ShellError::Spawn)?,
            () = tokio::time::sleep(timeout) => {
                group.kill();
                let _ = child.wait().await;
                group.gone().await;
                let (stdout, stderr) = (joined(stdout).await, joined(stderr).await);
                return Ok(output(ShellStatus::TimedOut(timeout), stdout, stderr));
            }
        };
        // Whatever the command left running in its group ends with it.
        group.kill();
        group.gone().await;
        let (stdout, stderr) = (joined(stdout).await, joined(stderr).await);
        let status = match (status.code(), status.signal()) {
            (Some(code), _) => ShellStatus::Exited(code),
            (None, Some(signal)) => ShellStatus::Signaled(signal),
            (None, None) => ShellStatus::Exited(-1),
        };
        Ok(output(status, stdout, stderr))
    }
}

impl ShellAdapter for LocalShell {
    fn run(&self, command: ShellCommand) -> BoxFuture<'_, Result<ShellOutput, ShellError>> {
        Box::pin(self.run_command(command))
    }
}

/// Kills a process group when dropped (a dropped run), or when asked.
struct GroupGuard(Option<Pid>);

impl GroupGuard {
    fn kill(&self) {
        if let Some(group) = self.0 {
            // ESRCH: nothing is left in the group.
            let _ = killpg(group, Signal::SIGKILL);
        }
    }
}

impl GroupGuard {
    /// Waits (bounded by [`crate::group::GRACE`]) until no live process is left in the group, so
    /// that when a run returns, what it started is dead, not merely signalled.
    async fn gone(&self) {
        if let Some(group) = self.0 {
            crate::group::wait_gone(group, crate::group::GRACE).await;
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

type Captured = (Vec<u8>, bool);

async fn read_capped(pipe: Option<impl AsyncRead + Unpin>, cap: usize) -> Captured {
    let Some(mut pipe) = pipe else {
        return (Vec::new(), false);
    };
    let mut kept = Vec::new();
    let mut truncated = false;
    let mut buffer = [0u8; 8192];
    loop {
        match pipe.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = cap.saturating_sub(kept.len());
                if n > room {
                    truncated = true;
                }
                kept.extend_from_slice(&buffer[..n.min(room)]);
            }
        }
    }
    (kept, truncated)
}

/// The output read from a pipe. A process that left the group (`setsid`) may hold the pipe open
/// past the command's end: what was read by then is kept, after a short wait.
async fn joined(mut task: tokio::task::JoinHandle<Captured>) -> Captured {
    match tokio::time::timeout(PIPE_GRACE, &mut task).await {
        Ok(captured) => captured.unwrap_or_default(),
        Err(_) => {
            task.abort();
            (Vec::new(), true)
        }
    }
}

/// How long the pipes may stay open after the command's group is gone.
const PIPE_GRACE: Duration = Duration::from_secs(2);

fn output(status: ShellStatus, stdout: Captured, stderr: Captured) -> ShellOutput {
    let mut output = ShellOutput::new(status, stdout.0, stderr.0);
    output.stdout_truncated = stdout.1;
    output.stderr_truncated = stderr.1;
    output
}
