//! [`LocalSubprocess`]: the steps of a [`StepRegistry`] in child processes of this program.
//!
//! A host starts a child by re-executing a program (by default its own binary) with the socket path
//! in `NOETIC_SUBPROCESS_SOCKET` and the [`StepRequest`] as one line on its stdin; the child's `main`
//! calls [`serve_if_child`], which runs the step and serves its messages on that Unix socket (see
//! [`protocol`] for the numbering and acks). Each child leads a process group of its own, and a
//! manifest per live child (pid, start time, step, execution id, input, socket) is kept in a storage
//! adapter so that a restarted host finds the children still alive.

mod child;
mod manifest;
mod protocol;

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::io::Read;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use noetic_core::adapter::{
    ChildError, ChildMessage, ChildProcess, InMemoryStorage, LiveChild, SignalOutcome, StepRequest,
    StorageAdapter, SubprocessAdapter,
};
use noetic_core::{Error, StepRegistry};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::sync::mpsc;

pub use child::{serve_if_child, serve_if_child_async};
pub use manifest::MANIFEST_PREFIX;

use crate::group;
use manifest::Manifest;
use protocol::{Control, Frame, LINGER_ENV, SOCKET_ENV, line};

/// The default time a child has to start serving: 10 s.
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(10);
/// The default time a finished detached child waits for a host to take its result: 1 h.
pub const DEFAULT_LINGER: Duration = Duration::from_secs(3600);

/// Why a child could not be started or read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SubprocessError {
    /// The child could not be started, or did not serve (`SUBPROCESS_FAILED`).
    #[error("subprocess for step `{step_id}`: {problem}")]
    Failed {
        /// The step the child was to run.
        step_id: String,
        /// What went wrong (with the tail of the child's stderr when it exited early).
        problem: String,
    },
    /// A manifest in the storage adapter cannot be read (`SUBPROCESS_MANIFEST_CORRUPT`); it is left
    /// in place.
    #[error("subprocess manifest `{key}` is corrupt: {problem}; delete the key to go on")]
    ManifestCorrupt {
        /// Its storage key.
        key: String,
        /// What is wrong with it.
        problem: String,
    },
}

impl SubprocessError {
    /// The stable code.
    pub fn code(&self) -> &'static str {
        match self {
            SubprocessError::Failed { .. } => "SUBPROCESS_FAILED",
            SubprocessError::ManifestCorrupt { .. } => "SUBPROCESS_MANIFEST_CORRUPT",
        }
    }

    fn failed(step_id: &str, problem: impl Into<String>) -> Self {
        SubprocessError::Failed {
            step_id: step_id.to_owned(),
            problem: problem.into(),
        }
    }
}

impl From<SubprocessError> for Error {
    fn from(error: SubprocessError) -> Self {
        Error::Adapter {
            code: error.code(),
            source: Box::new(error),
        }
    }
}

/// Runs the steps of a [`StepRegistry`] in child processes: the same program re-executed, whose
/// `main` calls [`serve_if_child`] with the same registry. Every other step runs in its caller.
///
/// - **Process groups.** Each child leads a group of its own; [`ChildProcess::stop`] and
///   [`SubprocessAdapter::stop`] send SIGTERM to the group, then SIGKILL after the grace, and return
///   once no process of the group is alive. Pause and resume are SIGSTOP and SIGCONT to the group.
/// - **Attached children** (a routed `run_code` or `spawn`) end with their host: when its socket
///   closes, the child cancels its step and kills its group.
/// - **Detached children** ([`noetic_core::Context::detached_spawn`]) outlive their host. Give the
///   adapter durable [`LocalSubprocess::manifests`] storage and a restarted host finds them with
///   [`SubprocessAdapter::list_live`] and rejoins them with [`SubprocessAdapter::restore`]; what the
///   child sent that no host acknowledged is sent again, nothing twice.
/// - **Manifests** name a child by pid *and* start time (from `/proc`), so a pid that another process
///   got later is not taken for the child; a dead child's manifest is cleared when it is found.
///
/// # Examples
/// ```no_run
/// use noetic_core::{AgentHarness, Context, Environment, Runtime, StepRegistry, run_code};
/// use noetic_platform_unix::{LocalSubprocess, serve_if_child};
///
/// fn registry() -> StepRegistry {
///     StepRegistry::new().register(run_code("square", |n: u64, _: Context| async move {
///         Ok::<_, std::convert::Infallible>(n * n)
///     }))
/// }
///
/// fn main() -> Result<(), Box<dyn std::error::Error>> {
///     serve_if_child(&registry(), || Runtime::builder("worker").build());
///     let harness = AgentHarness::builder("host")
///         .environment(Environment::new().subprocess(LocalSubprocess::new(&registry())))
///         .build()?;
///     # let _ = harness;
///     Ok(())
/// }
/// ```
#[derive(Clone)]
pub struct LocalSubprocess {
    steps: Arc<BTreeSet<String>>,
    program: Option<PathBuf>,
    args: Vec<OsString>,
    socket_dir: PathBuf,
    manifests: Arc<dyn StorageAdapter>,
    startup_timeout: Duration,
    linger: Duration,
}

impl std::fmt::Debug for LocalSubprocess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalSubprocess")
            .field("steps", &self.steps)
            .field("program", &self.program)
            .field("args", &self.args)
            .field("socket_dir", &self.socket_dir)
            .field("startup_timeout", &self.startup_timeout)
            .field("linger", &self.linger)
            .finish_non_exhaustive()
    }
}

impl LocalSubprocess {
    /// Runs the steps of `registry` in children of this program (`std::env::current_exe()`, no
    /// arguments), with sockets in a per-user directory under the temp dir and manifests in memory
    /// (they do not survive this process: see [`LocalSubprocess::manifests`]).
    pub fn new(registry: &StepRegistry) -> Self {
        let uid = std::fs::metadata("/proc/self").map_or(0, |meta| meta.uid());
        LocalSubprocess {
            steps: Arc::new(registry.ids().map(str::to_owned).collect()),
            program: std::env::current_exe().ok(),
            args: Vec::new(),
            socket_dir: std::env::temp_dir().join(format!("noetic-subprocess-{uid}")),
            manifests: Arc::new(InMemoryStorage::new()),
            startup_timeout: DEFAULT_STARTUP_TIMEOUT,
            linger: DEFAULT_LINGER,
        }
    }

    /// Runs `program` as the child instead of this binary (it must call [`serve_if_child`] with
    /// the same registry).
    pub fn program(mut self, program: impl Into<PathBuf>) -> Self {
        self.program = Some(program.into());
        self
    }

    /// Passes `args` to the child program (a test binary re-executed for one probe test, say:
    /// `["--exact", "child_entry", "--nocapture"]`).
    pub fn args<A: Into<OsString>>(mut self, args: impl IntoIterator<Item = A>) -> Self {
        self.args = args.into_iter().map(Into::into).collect();
        self
    }

    /// Puts the children's sockets (and stderr logs) in `dir` (created `0700` when missing). A Unix
    /// socket path is limited to about 100 bytes: keep `dir` short.
    pub fn socket_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.socket_dir = dir.into();
        self
    }

    /// Keeps the manifests in `storage`: durable storage (SQLite, say) lets a restarted host find
    /// the children its predecessor started.
    pub fn manifests(mut self, storage: impl StorageAdapter) -> Self {
        self.manifests = Arc::new(storage);
        self
    }

    /// How long a child has to start serving before it is killed and the spawn fails (default
    /// [`DEFAULT_STARTUP_TIMEOUT`]).
    pub fn startup_timeout(mut self, timeout: Duration) -> Self {
        self.startup_timeout = timeout;
        self
    }

    /// How long a finished detached child waits for a host to take its result (default
    /// [`DEFAULT_LINGER`]).
    pub fn linger(mut self, linger: Duration) -> Self {
        self.linger = linger;
        self
    }

    async fn spawn_child(&self, request: StepRequest) -> Result<LocalChild, SubprocessError> {
        let step_id = request.step_id.clone();
        if std::env::var_os(SOCKET_ENV).is_some()
            && !child::SERVING.load(std::sync::atomic::Ordering::SeqCst)
        {
            return Err(SubprocessError::failed(
                &step_id,
                "this process is a subprocess child that never served: call \
                 noetic_platform_unix::serve_if_child first thing in main",
            ));
        }
        if !self.steps.contains(&step_id) {
            return Err(SubprocessError::failed(
                &step_id,
                "the step is not in this adapter's registry",
            ));
        }
        let program = self.program.as_ref().ok_or_else(|| {
            SubprocessError::failed(&step_id, "the current executable cannot be found")
        })?;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.socket_dir)
            .map_err(|error| {
                SubprocessError::failed(
                    &step_id,
                    format!("socket dir {}: {error}", self.socket_dir.display()),
                )
            })?;
        let socket = self.socket_dir.join(format!("{}.sock", request.handle_id));
        let log = self.socket_dir.join(format!("{}.log", request.handle_id));
        let _ = std::fs::remove_file(&socket);
        let stderr = std::fs::File::create(&log).map_err(|error| {
            SubprocessError::failed(&step_id, format!("log {}: {error}", log.display()))
        })?;
        let mut process = tokio::process::Command::new(program)
            .args(&self.args)
            .env(SOCKET_ENV, &socket)
            .env(LINGER_ENV, self.linger.as_millis().to_string())
            .process_group(0)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .map_err(|error| {
                SubprocessError::failed(
                    &step_id,
                    format!("cannot start {}: {error}", program.display()),
                )
            })?;
        let pid = process
            .id()
            .ok_or_else(|| SubprocessError::failed(&step_id, "the child exited at once"))?;
        let start_ticks = i32::try_from(pid)
            .ok()
            .and_then(group::stat)
            .map_or(0, |stat| stat.start_ticks);
        let manifest = Manifest::new(request, pid, start_ticks, socket, log);
        if let Some(mut stdin) = process.stdin.take() {
            // A child that cannot take its request exits; the wait for it to serve below reports
            // that with its status and stderr.
            let _ = stdin.write_all(&line(&manifest.request)).await;
        }
        // Recorded before the child serves: a host that dies now leaves its child findable.
        if let Err(error) = self.manifests.set(&manifest.key(), manifest.encode()).await {
            kill_group(pid);
            return Err(SubprocessError::failed(
                &step_id,
                format!("cannot record the manifest: {error}"),
            ));
        }
        match self.connect(&manifest, &mut process).await {
            Ok(stream) => Ok(LocalChild::start(
                stream,
                manifest,
                self.manifests.clone(),
                Some(process),
            )),
            Err(problem) => {
                kill_group(pid);
                let _ = process.wait().await;
                let tail = log_tail(&manifest.log);
                let _ = manifest.clear(&*self.manifests).await;
                Err(SubprocessError::failed(
                    &step_id,
                    format!("{problem}{tail}"),
                ))
            }
        }
    }

    /// Connects to a child that is starting, until it serves, exits, or the startup timeout passes.
    async fn connect(
        &self,
        manifest: &Manifest,
        process: &mut tokio::process::Child,
    ) -> Result<UnixStream, String> {
        let deadline = tokio::time::Instant::now() + self.startup_timeout;
        let mut pause = Duration::from_millis(1);
        loop {
            if let Ok(stream) = UnixStream::connect(&manifest.socket).await {
                return Ok(stream);
            }
            if let Ok(Some(status)) = process.try_wait() {
                return Err(format!(
                    "the child exited ({status}) before serving; does its main call \
                     serve_if_child with a registry holding the step?"
                ));
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(format!(
                    "the child did not serve within {:?}",
                    self.startup_timeout
                ));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(50));
        }
    }

    /// The manifest of `handle_id`, when its child is alive; a dead child's manifest is cleared.
    async fn live_manifest(&self, handle_id: &str) -> noetic_core::Result<Option<Manifest>> {
        let key = manifest::key(handle_id);
        let Some(bytes) = self.manifests.get(&key).await? else {
            return Ok(None);
        };
        let manifest = Manifest::decode(&key, &bytes)?;
        if manifest.is_alive() {
            Ok(Some(manifest))
        } else {
            manifest.clear(&*self.manifests).await?;
            Ok(None)
        }
    }

    async fn signal(&self, handle_id: &str, signal: Signal) -> noetic_core::Result<SignalOutcome> {
        Ok(match self.live_manifest(handle_id).await? {
            Some(manifest) => match killpg(group_of(manifest.pid), signal) {
                Ok(()) => {
                    group::wait_stopped(group_of(manifest.pid), signal == Signal::SIGSTOP).await;
                    SignalOutcome::Done
                }
                Err(_) => SignalOutcome::NotFound,
            },
            None => SignalOutcome::NotFound,
        })
    }
}

impl SubprocessAdapter for LocalSubprocess {
    fn runs_out_of_process(&self, step_id: &str) -> bool {
        self.steps.contains(step_id)
    }

    fn spawn(
        &self,
        request: StepRequest,
    ) -> BoxFuture<'_, noetic_core::Result<Box<dyn ChildProcess>>> {
        Box::pin(async move {
            let child = self.spawn_child(request).await?;
            Ok(Box::new(child) as Box<dyn ChildProcess>)
        })
    }

    fn list_live(&self) -> BoxFuture<'_, noetic_core::Result<Vec<LiveChild>>> {
        Box::pin(async move {
            let keys = self.manifests.list(MANIFEST_PREFIX).await?;
            let values = self.manifests.get_many(&keys).await?;
            let mut live = Vec::new();
            for (key, bytes) in keys.iter().zip(values) {
                let Some(bytes) = bytes else { continue };
                let manifest = Manifest::decode(key, &bytes)?;
                if manifest.is_alive() {
                    live.push(manifest.live_child());
                } else {
                    manifest.clear(&*self.manifests).await?;
                }
            }
            Ok(live)
        })
    }

    fn reattach<'a>(
        &'a self,
        handle_id: &'a str,
    ) -> BoxFuture<'a, noetic_core::Result<Option<Box<dyn ChildProcess>>>> {
        Box::pin(async move {
            let Some(manifest) = self.live_manifest(handle_id).await? else {
                return Ok(None);
            };
            match UnixStream::connect(&manifest.socket).await {
                Ok(stream) => Ok(Some(Box::new(LocalChild::start(
                    stream,
                    manifest,
                    self.manifests.clone(),
                    None,
                )) as Box<dyn ChildProcess>)),
                Err(error) => Err(SubprocessError::failed(
                    &manifest.request.step_id,
                    format!(
                        "child {} (pid {}) is alive but its socket {} refuses: {error}",
                        handle_id,
                        manifest.pid,
                        manifest.socket.display()
                    ),
                )
                .into()),
            }
        })
    }

    fn stop<'a>(
        &'a self,
        handle_id: &'a str,
        grace: Duration,
    ) -> BoxFuture<'a, noetic_core::Result<SignalOutcome>> {
        Box::pin(async move {
            let Some(manifest) = self.live_manifest(handle_id).await? else {
                return Ok(SignalOutcome::NotFound);
            };
            stop_group(manifest.pid, grace).await;
            manifest.clear(&*self.manifests).await?;
            Ok(SignalOutcome::Done)
        })
    }

    fn pause<'a>(
        &'a self,
        handle_id: &'a str,
    ) -> BoxFuture<'a, noetic_core::Result<SignalOutcome>> {
        Box::pin(self.signal(handle_id, Signal::SIGSTOP))
    }

    fn resume<'a>(
        &'a self,
        handle_id: &'a str,
    ) -> BoxFuture<'a, noetic_core::Result<SignalOutcome>> {
        Box::pin(self.signal(handle_id, Signal::SIGCONT))
    }
}

fn group_of(pid: u32) -> Pid {
    Pid::from_raw(i32::try_from(pid).unwrap_or(i32::MAX))
}

fn kill_group(pid: u32) {
    let _ = killpg(group_of(pid), Signal::SIGKILL);
}

/// SIGTERM to the group, SIGKILL after `grace`; returns once no process of it is alive (or the
/// bounded wait after SIGKILL passed).
async fn stop_group(pid: u32, grace: Duration) {
    let group = group_of(pid);
    // A paused group would not act on SIGTERM.
    let _ = killpg(group, Signal::SIGCONT);
    if killpg(group, Signal::SIGTERM).is_err() {
        return;
    }
    if !group::wait_gone(group, grace).await {
        let _ = killpg(group, Signal::SIGKILL);
        group::wait_gone(group, group::GRACE).await;
    }
}

/// The last lines of a child's stderr, for an error message.
fn log_tail(log: &Path) -> String {
    let mut text = String::new();
    if let Ok(mut file) = std::fs::File::open(log) {
        let _ = file.read_to_string(&mut text);
    }
    let tail: Vec<&str> = text.lines().rev().take(5).collect();
    if tail.is_empty() {
        String::new()
    } else {
        let lines: Vec<&str> = tail.into_iter().rev().collect();
        format!("; its stderr ends: {}", lines.join(" / "))
    }
}

/// The host's handle on one child: a task reads the child's socket, acknowledges each frame and
/// passes the messages on.
struct LocalChild {
    handle_id: String,
    pid: u32,
    messages: mpsc::UnboundedReceiver<ChildMessage>,
    control: mpsc::UnboundedSender<Control>,
    manifest: Manifest,
    manifests: Arc<dyn StorageAdapter>,
    reader: tokio::task::JoinHandle<()>,
}

impl LocalChild {
    fn start(
        stream: UnixStream,
        manifest: Manifest,
        manifests: Arc<dyn StorageAdapter>,
        process: Option<tokio::process::Child>,
    ) -> Self {
        let (messages_tx, messages) = mpsc::unbounded_channel();
        let (control, control_rx) = mpsc::unbounded_channel();
        let reader = tokio::spawn(read_child(
            stream,
            manifest.clone(),
            manifests.clone(),
            process,
            messages_tx,
            control_rx,
        ));
        LocalChild {
            handle_id: manifest.request.handle_id.clone(),
            pid: manifest.pid,
            messages,
            control,
            manifest,
            manifests,
            reader,
        }
    }
}

impl Drop for LocalChild {
    fn drop(&mut self) {
        // Closes the socket: an attached child then ends with its group; a detached one runs on.
        self.reader.abort();
    }
}

/// Reads the child's frames to its end. A `Finished` clears the child's manifest before it is
/// passed on; an end of the socket without one waits (bounded) for the process to die and clears
/// its manifest when it did, so a caller that sees the end finds the manifest gone.
async fn read_child(
    stream: UnixStream,
    manifest: Manifest,
    manifests: Arc<dyn StorageAdapter>,
    mut process: Option<tokio::process::Child>,
    messages: mpsc::UnboundedSender<ChildMessage>,
    mut control: mpsc::UnboundedReceiver<Control>,
) {
    let (read, mut writer) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    let mut last = 0;
    let mut writable = writer
        .write_all(&line(&Control::Hello { after: last }))
        .await
        .is_ok();
    let mut controls_open = true;
    loop {
        tokio::select! {
            next = lines.next_line() => {
                let Ok(Some(text)) = next else { break };
                let frame = match serde_json::from_str::<Frame>(&text) {
                    Ok(frame) => frame,
                    Err(error) => {
                        let _ = messages.send(ChildMessage::Finished {
                            result: Err(ChildError::new(
                                "SUBPROCESS_FAILED",
                                format!("child {}: unreadable frame ({error})", manifest.request.handle_id),
                            )),
                        });
                        return;
                    }
                };
                if frame.seq <= last {
                    continue;
                }
                last = frame.seq;
                let finished = matches!(frame.msg, ChildMessage::Finished { .. });
                if finished {
                    let _ = manifest.clear(&*manifests).await;
                }
                if writable {
                    writable = writer.write_all(&line(&Control::Ack { seq: last })).await.is_ok();
                }
                let _ = messages.send(frame.msg);
                if finished {
                    return;
                }
            }
            command = control.recv(), if controls_open => match command {
                Some(command) if writable => {
                    writable = writer.write_all(&line(&command)).await.is_ok();
                }
                Some(_) => {}
                None => controls_open = false,
            },
        }
    }
    // The socket ended without a result: the child is dying or dead.
    let dead = match process.as_mut() {
        Some(process) => tokio::time::timeout(group::GRACE, process.wait())
            .await
            .is_ok(),
        None => group::poll_until(group::GRACE, || !manifest.is_alive()).await,
    };
    if dead {
        let _ = manifest.clear(&*manifests).await;
    }
}

impl ChildProcess for LocalChild {
    fn handle_id(&self) -> &str {
        &self.handle_id
    }

    fn pid(&self) -> Option<u32> {
        Some(self.pid)
    }

    fn next(&mut self) -> BoxFuture<'_, Option<ChildMessage>> {
        Box::pin(self.messages.recv())
    }

    fn cancel(&self, reason: Option<String>) -> BoxFuture<'_, ()> {
        let _ = self.control.send(Control::Cancel { reason });
        Box::pin(async {})
    }

    fn stop(&self, grace: Duration) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            stop_group(self.pid, grace).await;
            let _ = self.manifest.clear(&*self.manifests).await;
        })
    }
}
