//! A scripted ACP (Agent Client Protocol, v1) agent to test ACP clients against: a real peer on the
//! official ACP Python SDK (PyPI `agent-client-protocol`, pinned to [`SDK_VERSION`]), installed on
//! first use, with no model and no network once installed.
//!
//! # Getting it
//!
//! [`scripted_agent`] returns a [`ScriptedAgent`]: the venv's Python and the script
//! (`acp/scripted_agent.py` in this crate, [`script_path`]). Spawn it with
//! [`ScriptedAgent::command`] (program and arguments: `<venv>/bin/python -u <script>`) or
//! [`ScriptedAgent::std_command`] (a [`std::process::Command`]; `tokio::process::Command` converts
//! from one with `From`), then speak ACP over its stdin/stdout. Its stderr has one line per message
//! it receives, `[scripted] <method>`, and `[scripted] cancel <sessionId>` for each `session/cancel`.
//!
//! The venv is:
//!
//! - the directory named by `NOETIC_TEST_ACP_VENV` ([`VENV_VAR`]) when that is set (`.ci/run` may
//!   point it at a cache; a missing directory is created there);
//! - otherwise `<cargo target dir>/noetic-acp-venv`, the target directory being found from the
//!   running executable (a test binary lives in `<target>/<profile>/deps/`), else from
//!   `CARGO_TARGET_DIR`, else the system temp directory.
//!
//! It counts as made when its marker file ([`MARKER_FILE`]) holds [`SDK_VERSION`] and it has
//! `bin/python`. Otherwise it is (re)made: `python3 -m venv` into a temp directory beside it, then
//! `<tmp>/bin/pip install --disable-pip-version-check -q agent-client-protocol==0.12.1`, then the
//! marker, then a rename into place, so a half-made venv never counts. (A renamed venv's `bin/pip`
//! still names the temp path in its shebang; use `<venv>/bin/python -m pip` on it.) One thread per
//! process makes it (a [`OnceLock`]), and one process at a time: the maker holds an exclusive lock
//! on `<venv>.lock` beside it, which other test binaries wait for. Every wait is bounded: the venv
//! step 2 minutes, pip 5 minutes (it needs PyPI, or a pip index or cache that has the package), the
//! lock the sum of both plus one minute. A directory at the venv's path that is not a venv (no
//! `pyvenv.cfg`) is never deleted: that is an error.
//!
//! To prepare one by hand (for example, for an offline run):
//!
//! ```text
//! python3 -m venv "$DIR" && "$DIR/bin/pip" install agent-client-protocol==0.12.1 \
//!   && echo 0.12.1 > "$DIR/noetic-acp-sdk-version"      # then: export NOETIC_TEST_ACP_VENV="$DIR"
//! ```
//!
//! The first call can therefore take a while (it downloads about 3 MB, and the venv takes about
//! 37 MB); it blocks the calling thread. Later calls, and later runs, are instant.
//!
//! A test that cannot get the agent (no `python3`, no venv module, no PyPI) uses
//! [`scripted_agent_or_skip!`](crate::scripted_agent_or_skip): under CI (the `CI` variable set) it
//! fails with the reason; elsewhere it prints a loud `SKIPPED:` line and returns.
//!
//! ```no_run
//! # fn main() {
//! let agent = noetic_test_support::scripted_agent_or_skip!();
//! let child = agent
//!     .std_command()
//!     .env("SCRIPTED_VERSION", "2")
//!     .stdin(std::process::Stdio::piped())
//!     .stdout(std::process::Stdio::piped())
//!     .spawn()
//!     .unwrap();
//! # drop(child);
//! # }
//! ```
//!
//! # What the agent does
//!
//! - `initialize`: answers `protocolVersion` 1 (whatever the client asked), or the integer in the
//!   environment variable `SCRIPTED_VERSION`; `agentCapabilities`
//!   `{"loadSession":false,"promptCapabilities":{"image":false}}` (`image` is `true` when
//!   `SCRIPTED_IMAGE=1`); `agentInfo` `{"name":"scripted","version":"0.1.0"}`; no `authMethods`. It
//!   keeps the `clientCapabilities` it was sent, verbatim.
//! - `session/new`: a fresh session id (32 lowercase hex digits, a uuid); keeps `cwd`.
//! - `session/prompt`: the text of the prompt's text blocks, joined with `\n`, split into lines;
//!   every line that is not blank is a directive, run in order; then the answer
//!   `{"stopReason":"end_turn"}`, unless a directive ended the turn otherwise. A prompt for a session
//!   it does not know is answered with error -32602.
//! - `session/cancel` (a notification): marks the session's running turn cancelled. A running
//!   `slow`, `sleep` or `perm` then ends the turn at once with `{"stopReason":"cancelled"}`, and so
//!   does the next directive of the turn; only `hang` ignores it.
//! - Anything else: the SDK's answer (error -32601 for an unknown method).
//!
//! The agent does not check the client's capabilities before it calls the client (`read`, `write`,
//! `term`), so a test can see what a client does with a call it did not advertise.
//!
//! # Directives
//!
//! `ARGS` are split on single spaces; `TEXT` is the rest of the line, verbatim, after the directive
//! word (or its last named argument) and one space: `say  world` says ` world`. "Says X" means a
//! `session/update` `agent_message_chunk` whose content is the text block X.
//!
//! | directive | what the agent does |
//! |---|---|
//! | `say TEXT` | says TEXT |
//! | `say_in MSGID TEXT` | says TEXT with `"messageId": MSGID` |
//! | `think TEXT` | an `agent_thought_chunk` with the text TEXT |
//! | `plan A;B;C` | a `plan` update, one entry per `;`-separated item, priority `medium`, status `pending` |
//! | `tool ID KIND TITLE` | `tool_call` `{toolCallId: ID, title: TITLE, kind: KIND, status: "pending", rawInput: {"id": ID}}`, then `tool_call_update` `in_progress`, then `tool_call_update` `completed` with `content` `[{"type":"content","content":{"type":"text","text":"ID done"}}]` and `rawOutput` `{"ok": true}` |
//! | `toolfail ID KIND TITLE` | the same, ending `failed` with the text `ID failed` and `rawOutput` `{"ok": false}` |
//! | `diff ID PATH TEXT` | `tool_call` `{toolCallId: ID, title: "edit PATH", kind: "edit", status: "completed", content: [{"type":"diff","path":PATH,"oldText":null,"newText":TEXT}]}` (`oldText` is an explicit `null`) |
//! | `perm ID [KIND]` | `session/request_permission` with `toolCall` `{toolCallId: ID, title: "perm ID", kind: KIND (default execute), rawInput: {"id": ID}}` and four options, optionIds `allow-once` `allow-always` `reject-once` `reject-always`, kinds `allow_once` `allow_always` `reject_once` `reject_always`, names `Allow once` `Allow always` `Reject once` `Reject always`; then says `permission: selected <optionId>`, `permission: cancelled`, or (for a JSON-RPC error answer) `permission: error <code>`. Ends the turn `cancelled` when the outcome was `cancelled` or a `session/cancel` arrived meanwhile. After a `session/cancel` it waits at most 5 s more for the answer (which the client must still send), else says `permission: unanswered after cancel` and ends the turn `cancelled` |
//! | `perm_reject_only ID [KIND]` | as `perm`, offering only `reject-once` and `reject-always` |
//! | `read PATH [LINE [LIMIT]]` | `fs/read_text_file` (`line`, `limit` only when given); says `read: <content>` or `read error <code>: <message>` |
//! | `read2 PATH1 PATH2` | two `fs/read_text_file` requests at once (both sent before either is answered); says `read2: <content1>\|<content2>`, or `read2 error <code>: <message>` (the first failure) |
//! | `write PATH TEXT` | `fs/write_text_file`; says `write: ok` or `write error <code>: <message>` |
//! | `term CMD [ARGS…]` | `terminal/create` `{command: CMD, args: [ARGS…]}` (`args` always sent, maybe `[]`), `terminal/wait_for_exit`, `terminal/output`, `terminal/release` (also after a failed wait or output); says `term exit=<exitCode> out=<Python repr of output>` (e.g. `term exit=0 out='hi\n'`; `exit=None` for a null code) or `term error <code>: <message>` |
//! | `slow N` | N `agent_message_chunk`s `chunk <i> ` (i from 0, note the trailing space), 0.2 s apart; cancellable |
//! | `sleep S` | sleeps S seconds (a float); cancellable |
//! | `usage USED SIZE [COST]` | `session/update` `usage_update` `{used, size, cost: {amount: COST, currency: "USD"}}` (`cost` only when given; `amount` a JSON float) |
//! | `usage_response IN OUT` | the turn's final answer carries the unstable `usage`: `{"stopReason":…,"usage":{"totalTokens":IN+OUT,"inputTokens":IN,"outputTokens":OUT}}` (whatever the stop reason) |
//! | `unknown_update` | `session/update` with `sessionUpdate` `made_up_kind`, a text `content`, an unknown field `madeUpField` and `_meta` at every level: `{"sessionId":…,"update":{"sessionUpdate":"made_up_kind","content":{"type":"text","text":"made up","_meta":{"scripted":"content"}},"madeUpField":{"nested":true,"_meta":{"scripted":"field"}},"_meta":{"scripted":"update"}},"_meta":{"scripted":"params"}}` |
//! | `stop REASON` | ends the turn at once (later directives do not run) with `stopReason` REASON: `end_turn`, `max_tokens`, `max_turn_requests`, `refusal`, `cancelled`, or any other word, sent verbatim |
//! | `error X` | answers the prompt with the JSON-RPC error `{"code":-32603,"message":"Internal error","data":{"why":X}}` (X is TEXT) |
//! | `crash N` | flushes stdout and stderr, then exits with status N, mid-turn |
//! | `garbage` | writes the line `this is not json` to stdout (between whole messages), then goes on |
//! | `hang` | never answers this prompt, and ignores `session/cancel` (closing stdin still ends the process) |
//! | `pid` | says `pid: <process id>` |
//! | `env NAME` | says `env NAME=<value>` or `env NAME unset` |
//! | `caps` | says the `clientCapabilities` received at `initialize` as compact JSON with sorted keys (`null` if none) |
//! | `cwd` | says `cwd: <the session's cwd>` |
//! | anything else | says `unknown directive: <line>` |
//!
//! A directive whose arguments do not parse (`slow x`) says `bad directive: <line> (<reason>)` and
//! the turn goes on. `KIND` is one of the schema's tool kinds (`read`, `edit`, `delete`, `move`,
//! `search`, `execute`, `think`, `fetch`, `switch_mode`, `other`); the SDK drops another (the
//! message then has no `kind`). The agent's own requests are numbered from 0, like the client's:
//! a client must keep the two id spaces apart.

use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The version of the ACP Python SDK (`agent-client-protocol` on PyPI) the agent runs on.
pub const SDK_VERSION: &str = "0.12.1";

/// The environment variable naming the venv to use (and to make, when it is not made yet).
pub const VENV_VAR: &str = "NOETIC_TEST_ACP_VENV";

/// The file in the venv that records the SDK version installed in it.
pub const MARKER_FILE: &str = "noetic-acp-sdk-version";

/// The venv's directory name under the cargo target directory.
const VENV_DIR_NAME: &str = "noetic-acp-venv";

/// How long `python3 -m venv` may take.
const VENV_TIMEOUT: Duration = Duration::from_secs(120);
/// How long `pip install` may take.
const PIP_TIMEOUT: Duration = Duration::from_secs(300);
/// How long to wait for another process that is making the venv.
const LOCK_TIMEOUT: Duration = Duration::from_secs(120 + 300 + 60);

/// What is missing, said once for every error about the Python side.
const NEEDS: &str = "the ACP tests need CPython 3.10+ with venv and pip (Debian/Ubuntu: \
                     `apt-get install python3 python3-venv`) and PyPI access once, or \
                     NOETIC_TEST_ACP_VENV set to a venv with agent-client-protocol==0.12.1 and a \
                     `noetic-acp-sdk-version` file holding 0.12.1";

/// The scripted ACP agent, ready to spawn: the venv's Python and the agent's script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScriptedAgent {
    /// `<venv>/bin/python`.
    pub python: PathBuf,
    /// The agent's script ([`script_path`]).
    pub script: PathBuf,
}

impl ScriptedAgent {
    /// The program and arguments that start the agent: `(python, ["-u", script])`.
    pub fn command(&self) -> (String, Vec<String>) {
        (
            self.python.to_string_lossy().into_owned(),
            vec!["-u".to_owned(), self.script.to_string_lossy().into_owned()],
        )
    }

    /// A [`Command`] that starts the agent (`python -u script`), with nothing else set: the caller
    /// picks the stdio (pipes, to speak ACP), environment and directory.
    pub fn std_command(&self) -> Command {
        let mut command = Command::new(&self.python);
        command.arg("-u").arg(&self.script);
        command
    }
}

/// The agent's script, `acp/scripted_agent.py` in this crate: under the workspace found at run
/// time ([`crate::workspace_root`]) when it is there, else under the `CARGO_MANIFEST_DIR` this crate
/// was compiled in.
pub fn script_path() -> PathBuf {
    const RELATIVE: &str = "acp/scripted_agent.py";
    let at_runtime = crate::workspace_root()
        .join("crates/noetic-test-support")
        .join(RELATIVE);
    if at_runtime.is_file() {
        return at_runtime;
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(RELATIVE)
}

/// The scripted agent, making its venv first if needed (see the [module docs](self)). Made once per
/// process; the result (an error too) is kept.
///
/// # Errors
/// What is missing, as text: no `python3`, a failed `python3 -m venv` or `pip install` (with its
/// output's tail), a step that took too long, a venv path that is not a venv.
pub fn scripted_agent() -> Result<ScriptedAgent, String> {
    static AGENT: OnceLock<Result<ScriptedAgent, String>> = OnceLock::new();
    AGENT
        .get_or_init(|| {
            let script = script_path();
            if !script.is_file() {
                return Err(format!(
                    "the scripted ACP agent's script is missing: {}",
                    script.display()
                ));
            }
            let venv = venv_dir();
            ensure_venv(&venv)?;
            Ok(ScriptedAgent {
                python: venv.join("bin/python"),
                script,
            })
        })
        .clone()
}

/// Gets the scripted agent ([`scripted_agent`]) or, when there is none, fails the test under CI
/// and otherwise prints a loud skip line and returns from the calling test ([`skip_or_fail`]).
#[macro_export]
macro_rules! scripted_agent_or_skip {
    () => {
        match $crate::acp::scripted_agent() {
            Ok(agent) => agent,
            Err(problem) => {
                fn __noetic_here() {}
                $crate::acp::skip_or_fail(
                    &$crate::__test_name(::std::any::type_name_of_val(&__noetic_here)),
                    &problem,
                );
                return;
            }
        }
    };
}

/// For a test that cannot get the scripted agent: panics with `problem` when the `CI` environment
/// variable is set (not empty, `0` or `false`), else prints a `SKIPPED:` line to the stderr stream
/// itself (not through `eprintln!`, which the test harness captures), so a skip is seen in every run.
///
/// # Panics
/// Under CI, always.
pub fn skip_or_fail(test: &str, problem: &str) {
    let ci = std::env::var("CI").is_ok_and(|value| !matches!(value.as_str(), "" | "0" | "false"));
    if ci {
        panic!(
            "`{test}`: no scripted ACP agent (CI is set, so this fails instead of skipping): {problem}"
        );
    }
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr().lock(),
        "SKIPPED: no scripted ACP agent: `{test}` did not run. {problem}"
    );
}

/// Where the venv is: `$NOETIC_TEST_ACP_VENV`, else `<target dir>/noetic-acp-venv`.
fn venv_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os(VENV_VAR).filter(|dir| !dir.is_empty()) {
        let dir = PathBuf::from(dir);
        return std::path::absolute(&dir).unwrap_or(dir);
    }
    let target = std::env::current_exe()
        .ok()
        .and_then(|exe| target_dir_of(&exe))
        .or_else(|| {
            let dir = PathBuf::from(std::env::var_os("CARGO_TARGET_DIR")?);
            Some(if dir.is_relative() {
                crate::workspace_root().join(dir)
            } else {
                dir
            })
        })
        .unwrap_or_else(std::env::temp_dir);
    target.join(VENV_DIR_NAME)
}

/// The cargo target directory of an executable built in it: `<target>/<profile>/deps/<exe>` (tests,
/// benches), `<target>/<profile>/examples/<exe>`, else the nearest ancestor with cargo's
/// `CACHEDIR.TAG`.
fn target_dir_of(exe: &Path) -> Option<PathBuf> {
    let parent = exe.parent()?;
    let name = parent.file_name().and_then(|name| name.to_str());
    if matches!(name, Some("deps" | "examples")) {
        return parent.parent()?.parent().map(Path::to_path_buf);
    }
    parent
        .ancestors()
        .find(|dir| dir.join("CACHEDIR.TAG").is_file())
        .map(Path::to_path_buf)
}

/// Whether `venv` is made, with the pinned SDK.
fn is_made(venv: &Path) -> bool {
    venv.join("bin/python").exists()
        && fs::read_to_string(venv.join(MARKER_FILE))
            .is_ok_and(|version| version.trim() == SDK_VERSION)
}

/// Makes `venv` unless it is made, under the lock file beside it.
fn ensure_venv(venv: &Path) -> Result<(), String> {
    if is_made(venv) {
        return Ok(());
    }
    let (parent, name) = match (venv.parent(), venv.file_name()) {
        (Some(parent), Some(name)) => (parent, name.to_string_lossy().into_owned()),
        _ => return Err(format!("not a usable venv path: {}", venv.display())),
    };
    fs::create_dir_all(parent)
        .map_err(|error| format!("creating {}: {error}", parent.display()))?;
    let lock_path = parent.join(format!("{name}.lock"));
    let _lock = lock_exclusive(&lock_path, LOCK_TIMEOUT)?;
    // Another process may have made it while this one waited.
    if is_made(venv) {
        return Ok(());
    }
    if venv.exists() {
        let is_venv = venv.join("pyvenv.cfg").is_file();
        let is_empty = fs::read_dir(venv).is_ok_and(|mut entries| entries.next().is_none());
        if !is_venv && !is_empty {
            return Err(format!(
                "{} exists but is not a Python venv (no pyvenv.cfg); not replacing it. Remove it or \
                 point {VENV_VAR} elsewhere",
                venv.display()
            ));
        }
        fs::remove_dir_all(venv).map_err(|error| {
            format!(
                "removing the outdated venv {} (its {MARKER_FILE} is not {SDK_VERSION}): {error}",
                venv.display()
            )
        })?;
    }
    // Temp directories left by a maker that died (only the lock holder makes them).
    let temp_prefix = format!(".{name}.tmp-");
    for entry in fs::read_dir(parent).into_iter().flatten().flatten() {
        if entry
            .file_name()
            .to_string_lossy()
            .starts_with(&temp_prefix)
        {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
    let temp = parent.join(format!("{temp_prefix}{}", std::process::id()));
    let made = make_venv(&temp).and_then(|()| {
        fs::rename(&temp, venv).map_err(|error| {
            format!(
                "moving the new venv {} to {}: {error}",
                temp.display(),
                venv.display()
            )
        })
    });
    if made.is_err() {
        let _ = fs::remove_dir_all(&temp);
    }
    made
}

/// `python3 -m venv dir`, the pinned SDK into it, and the marker.
fn make_venv(dir: &Path) -> Result<(), String> {
    let mut venv = Command::new("python3");
    venv.arg("-m").arg("venv").arg(dir);
    let outcome = run_bounded(venv, VENV_TIMEOUT).map_err(|problem| match problem {
        Failure::Spawn(error) if error.kind() == ErrorKind::NotFound => {
            format!("python3 not found: {NEEDS}")
        }
        problem => format!("`python3 -m venv {}` {problem}; {NEEDS}", dir.display()),
    })?;
    outcome.check(&format!("python3 -m venv {}", dir.display()))?;
    let requirement = format!("agent-client-protocol=={SDK_VERSION}");
    let mut pip = Command::new(dir.join("bin/pip"));
    pip.args(["install", "--disable-pip-version-check", "-q", &requirement]);
    let outcome = run_bounded(pip, PIP_TIMEOUT)
        .map_err(|problem| format!("`pip install {requirement}` {problem}; {NEEDS}"))?;
    outcome.check(&format!("pip install {requirement}"))?;
    fs::write(dir.join(MARKER_FILE), format!("{SDK_VERSION}\n"))
        .map_err(|error| format!("writing {}: {error}", dir.join(MARKER_FILE).display()))
}

/// An exclusive lock on `path` (created if missing), held until the returned file is dropped.
/// Waits at most `limit` for another holder.
fn lock_exclusive(path: &Path, limit: Duration) -> Result<File, String> {
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(path)
        .map_err(|error| format!("opening the lock file {}: {error}", path.display()))?;
    // Locks on a thread of its own, so the wait can be bounded. When it gives up, the thread still
    // gets the lock eventually, finds no receiver and drops (so unlocks) the file.
    let (locked, receive) = mpsc::channel();
    std::thread::spawn(move || {
        let outcome = file.lock().map(|()| file);
        let _ = locked.send(outcome);
    });
    match receive.recv_timeout(limit) {
        Ok(Ok(file)) => Ok(file),
        Ok(Err(error)) => Err(format!("locking {}: {error}", path.display())),
        Err(_) => Err(format!(
            "waited {limit:?} for another process making the ACP venv (it holds {}); \
             is a stuck test process still running?",
            path.display()
        )),
    }
}

/// Why a bounded command did not finish.
enum Failure {
    Spawn(std::io::Error),
    TimedOut(Duration),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Spawn(error) => write!(f, "could not start: {error}"),
            Failure::TimedOut(limit) => write!(f, "did not finish within {limit:?} and was killed"),
        }
    }
}

/// A finished command's status and output.
struct Finished {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

impl Finished {
    /// `Ok` when it succeeded, else an error with the tail of its output.
    fn check(self, what: &str) -> Result<(), String> {
        if self.status.success() {
            return Ok(());
        }
        let output = format!("{}{}", self.stdout, self.stderr);
        let tail: Vec<&str> = output.lines().rev().take(15).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        Err(format!(
            "`{what}` failed ({}): {}; {NEEDS}",
            self.status,
            tail.join("\n")
        ))
    }
}

/// Runs `command` (stdin closed, output captured), killing it after `limit`.
fn run_bounded(mut command: Command, limit: Duration) -> Result<Finished, Failure> {
    let deadline = Instant::now() + limit;
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(Failure::Spawn)?;
    // Both pipes reach end of file when the process exits (pip and venv leave nothing behind that
    // holds them): read on threads, wait for both with a deadline.
    let (sent, received) = mpsc::channel();
    let pipes: [Option<Box<dyn Read + Send>>; 2] = [
        child
            .stdout
            .take()
            .map(|pipe| Box::new(pipe) as Box<dyn Read + Send>),
        child
            .stderr
            .take()
            .map(|pipe| Box::new(pipe) as Box<dyn Read + Send>),
    ];
    for (index, pipe) in pipes.into_iter().enumerate() {
        let sent = sent.clone();
        std::thread::spawn(move || {
            let mut text = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut text);
            }
            let _ = sent.send((index, String::from_utf8_lossy(&text).into_owned()));
        });
    }
    let mut outputs = [String::new(), String::new()];
    for _ in 0..2 {
        let left = deadline.saturating_duration_since(Instant::now());
        match received.recv_timeout(left) {
            Ok((index, text)) => outputs[index] = text,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(Failure::TimedOut(limit));
            }
        }
    }
    let status = child.wait().map_err(Failure::Spawn)?;
    let [stdout, stderr] = outputs;
    Ok(Finished {
        status,
        stdout,
        stderr,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_target_dir_is_found_from_a_test_binary() {
        assert_eq!(
            target_dir_of(Path::new("/t/target/debug/deps/acp-0123abcd")),
            Some(PathBuf::from("/t/target"))
        );
        assert_eq!(
            target_dir_of(Path::new(
                "/t/target/x86_64-unknown-linux-gnu/release/examples/demo"
            )),
            Some(PathBuf::from("/t/target/x86_64-unknown-linux-gnu"))
        );
    }

    #[test]
    fn the_command_runs_the_script_unbuffered() {
        let agent = ScriptedAgent {
            python: PathBuf::from("/v/bin/python"),
            script: PathBuf::from("/s/agent.py"),
        };
        assert_eq!(
            agent.command(),
            (
                "/v/bin/python".to_owned(),
                vec!["-u".to_owned(), "/s/agent.py".to_owned()]
            )
        );
        let command = agent.std_command();
        assert_eq!(command.get_program(), "/v/bin/python");
        assert_eq!(
            command.get_args().collect::<Vec<_>>(),
            ["-u", "/s/agent.py"]
        );
    }

    #[test]
    fn the_test_name_drops_the_marker_function() {
        assert_eq!(
            crate::__test_name("acp::a_test::{{closure}}::__noetic_here"),
            "acp::a_test"
        );
    }

    #[test]
    fn the_script_is_found() {
        assert!(script_path().is_file(), "{}", script_path().display());
    }
}
