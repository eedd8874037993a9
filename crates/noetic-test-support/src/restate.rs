//! A real Restate server for tests, on loopback, with a base directory of its own.
//!
//! The server is the static binary inside the npm package `@restatedev/restate-server` (pinned in
//! `restate/package.json` and its lockfile, next to this crate's `Cargo.toml`), found by
//! [`RestateServer::binary`]:
//!
//! - at `NOETIC_RESTATE_SERVER` when it is set (`.ci/run` exports the one it installed);
//! - otherwise in `~/.cache/noetic-restate/<version>/`, installed there with `npm ci` from the pinned
//!   lockfile on first use (about 216 MB, a few seconds; Node.js's `npm` is needed once).
//!
//! Without either there is no server: a test skips loudly ([`restate_or_skip!`](crate::restate_or_skip)).
//!
//! [`RestateServer::start`] runs one server per call: a fresh temporary base directory, every port
//! chosen free on 127.0.0.1 (`RESTATE_LISTEN_MODE=tcp`: no unix sockets), one partition, a small
//! RocksDB budget, telemetry off (`DO_NOT_TRACK=1`), invocation retries fast and few. It waits
//! (bounded) until the admin and ingress health endpoints answer. [`RestateServer::kill`] is a
//! crash (`SIGKILL`); [`RestateServer::restart`] starts it again on the same base directory and ports.
//!
//! The server never outlives the test process: it runs under a small `sh` wrapper whose stdin is a
//! pipe this process holds. When the pipe closes (the [`RestateServer`] dropped, or the process gone
//! however it went), the wrapper's `read` returns and it stops the server (`SIGTERM`) and waits for it.
//! The base directory is removed on drop.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The environment variable naming the `restate-server` binary to use.
pub const SERVER_VAR: &str = "NOETIC_RESTATE_SERVER";

/// The pinned server version (`restate/package.json`).
pub const VERSION: &str = "1.7.12";

const PACKAGE_JSON: &str = include_str!("../restate/package.json");
const PACKAGE_LOCK: &str = include_str!("../restate/package-lock.json");

/// How long a started server may take to answer its health endpoints.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a stopping server may take before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(15);

/// Knobs of a test server.
#[derive(Debug, Clone, Default)]
pub struct RestateOptions {
    /// "Always replay": `worker.invoker.inactivity-timeout = 0s`, so an invocation suspends at
    /// every await and replays its journal on resumption — a cheap check that a handler is
    /// deterministic. Also set for every server a process starts when
    /// [`ALWAYS_REPLAY_ENV`] is `1` (CI runs the Restate suites a second time so).
    pub always_replay: bool,
}

/// Set to `1`, every server runs in "always replay" mode ([`RestateOptions::always_replay`]).
pub const ALWAYS_REPLAY_ENV: &str = "NOETIC_RESTATE_ALWAYS_REPLAY";

/// A running Restate server (see the module docs).
#[derive(Debug)]
pub struct RestateServer {
    binary: PathBuf,
    options: RestateOptions,
    /// The temporary directory holding `base/` (the server's data) and `server.log`.
    dir: PathBuf,
    ingress_port: u16,
    admin_port: u16,
    fabric_port: u16,
    running: Option<Running>,
}

#[derive(Debug)]
struct Running {
    wrapper: Child,
    stdin: Option<ChildStdin>,
    /// The server's own process id (the wrapper's child).
    pid: u32,
}

impl RestateServer {
    /// The server binary: `NOETIC_RESTATE_SERVER`, else the pinned package in the cache (installed
    /// with `npm ci` when missing). `Err` says why there is none, for a skip line.
    pub fn binary() -> Result<PathBuf, String> {
        if let Some(path) = std::env::var_os(SERVER_VAR) {
            let path = PathBuf::from(path);
            return if path.is_file() {
                Ok(path)
            } else {
                Err(format!("{SERVER_VAR}={} is not a file", path.display()))
            };
        }
        let home = std::env::var_os("HOME").ok_or("HOME is unset")?;
        let dir = Path::new(&home).join(".cache/noetic-restate").join(VERSION);
        let binary = dir.join(package_binary()?);
        if binary.is_file() {
            return Ok(binary);
        }
        install(&dir)?;
        if binary.is_file() {
            Ok(binary)
        } else {
            Err(format!("npm ci left no {}", binary.display()))
        }
    }

    /// Starts a server with the default options.
    ///
    /// # Errors
    /// When there is no binary ([`RestateServer::binary`]; a test skips) or the server did not
    /// become healthy (with its log's tail).
    pub fn start() -> Result<Self, String> {
        Self::start_with(RestateOptions::default())
    }

    /// Starts a server with `options` (see [`RestateServer::start`]).
    ///
    /// # Errors
    /// As [`RestateServer::start`].
    pub fn start_with(mut options: RestateOptions) -> Result<Self, String> {
        options.always_replay |= std::env::var(ALWAYS_REPLAY_ENV).is_ok_and(|value| value == "1");
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let binary = Self::binary()?;
        let dir = std::env::temp_dir().join(format!(
            "noetic-restate-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(dir.join("base"))
            .map_err(|error| format!("creating {}: {error}", dir.display()))?;
        let [ingress_port, admin_port, fabric_port] = free_ports()?;
        let mut server = RestateServer {
            binary,
            options,
            dir,
            ingress_port,
            admin_port,
            fabric_port,
            running: None,
        };
        server.launch()?;
        Ok(server)
    }

    /// The ingress URL (`http://127.0.0.1:PORT`), where handlers are invoked.
    pub fn ingress_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.ingress_port)
    }

    /// The admin API's URL (`http://127.0.0.1:PORT`), where deployments are registered.
    pub fn admin_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.admin_port)
    }

    /// The server's process id while it runs (for a benchmark's CPU reading).
    pub fn pid(&self) -> Option<u32> {
        self.running.as_ref().map(|running| running.pid)
    }

    /// The last lines of the server's log (for a failing test's message).
    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// Kills the server (`SIGKILL`: a crash, nothing flushed) and waits until it is gone.
    pub fn kill(&mut self) {
        if let Some(mut running) = self.running.take() {
            signal(running.pid, "KILL");
            drop(running.stdin.take());
            let _ = running.wrapper.wait();
        }
    }

    /// Starts the server again on the same base directory and ports (after [`RestateServer::kill`],
    /// or to restart a running one: it is stopped first).
    ///
    /// # Errors
    /// When it does not become healthy again.
    pub fn restart(&mut self) -> Result<(), String> {
        self.stop();
        self.launch()
    }

    fn launch(&mut self) -> Result<(), String> {
        let log = std::fs::File::create(self.dir.join("server.log"))
            .map_err(|error| format!("creating the server log: {error}"))?;
        let log_err = log
            .try_clone()
            .map_err(|error| format!("the server log: {error}"))?;
        let mut command = Command::new("sh");
        // The wrapper: starts the server, says its pid, and stops it when stdin closes.
        command
            .arg("-c")
            .arg(r#""$0" "$@" </dev/null & pid=$!; echo "$pid"; read _ignored; kill -TERM "$pid" 2>/dev/null; wait "$pid""#)
            .arg(&self.binary)
            .arg("--base-dir")
            .arg(self.dir.join("base"))
            .args(["--no-logo", "--node-name", "n1"])
            .env("DO_NOT_TRACK", "1")
            .env("RESTATE_DISABLE_TELEMETRY", "true")
            .env("RESTATE_BIND_IP", "127.0.0.1")
            .env("RESTATE_ADVERTISED_HOST", "127.0.0.1")
            .env("RESTATE_LISTEN_MODE", "tcp")
            .env("RESTATE_INGRESS__BIND_PORT", self.ingress_port.to_string())
            .env("RESTATE_ADMIN__BIND_PORT", self.admin_port.to_string())
            .env("RESTATE_BIND_PORT", self.fabric_port.to_string())
            .env("RESTATE_DEFAULT_NUM_PARTITIONS", "1")
            .env("RESTATE_ROCKSDB_TOTAL_MEMORY_SIZE", "32 MB")
            .env("RESTATE_SHUTDOWN_TIMEOUT", "10s")
            .env("RESTATE_LOG_FORMAT", "compact")
            // A retried invocation comes back fast (a crash test waits for it).
            .env(
                "RESTATE_DEFAULT_RETRY_POLICY__INITIAL_INTERVAL",
                "100ms",
            )
            .env("RESTATE_DEFAULT_RETRY_POLICY__MAX_INTERVAL", "1s")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log_err);
        if self.options.always_replay {
            command.env("RESTATE_WORKER__INVOKER__INACTIVITY_TIMEOUT", "0s");
        }
        // The server's own output goes to the log; the wrapper's stdout carries only the pid.
        let mut wrapper = command
            .spawn()
            .map_err(|error| format!("starting {}: {error}", self.binary.display()))?;
        drop(log);
        let stdout = wrapper.stdout.take().ok_or("the wrapper has no stdout")?;
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .map_err(|error| format!("reading the server's pid: {error}"))?;
        let pid: u32 = line
            .trim()
            .parse()
            .map_err(|_| format!("the wrapper said {line:?}, not a pid"))?;
        let stdin = wrapper.stdin.take();
        self.running = Some(Running {
            wrapper,
            stdin,
            pid,
        });
        // The server's stderr/stdout: it writes both to the log file through the wrapper's stderr.
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if http_ok(self.admin_port, "/health") && http_ok(self.ingress_port, "/restate/health")
            {
                return Ok(());
            }
            let exited = self
                .running
                .as_mut()
                .is_some_and(|running| matches!(running.wrapper.try_wait(), Ok(Some(_))));
            if exited || Instant::now() >= deadline {
                let why = if exited {
                    "exited"
                } else {
                    "is not healthy after 30 s"
                };
                let tail = self.log_tail();
                self.stop();
                return Err(format!("the Restate server {why}:\n{tail}"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops the server (`SIGTERM` through the wrapper; `SIGKILL` after 15 s).
    fn stop(&mut self) {
        let Some(mut running) = self.running.take() else {
            return;
        };
        drop(running.stdin.take());
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            match running.wrapper.try_wait() {
                Ok(Some(_)) | Err(_) => return,
                Ok(None) if Instant::now() >= deadline => {
                    signal(running.pid, "KILL");
                    let _ = running.wrapper.kill();
                    let _ = running.wrapper.wait();
                    return;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }
}

impl Drop for RestateServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Starts a server ([`RestateServer::start_with`]) or, when there is no binary, prints the skip line
/// and returns from the calling test. A server that is there but does not start fails the test.
#[macro_export]
macro_rules! restate_or_skip {
    () => {
        $crate::restate_or_skip!($crate::restate::RestateOptions::default())
    };
    ($options:expr) => {
        match $crate::restate::RestateServer::binary() {
            Ok(_) => $crate::restate::RestateServer::start_with($options)
                .unwrap_or_else(|error| panic!("{error}")),
            Err(why) => {
                fn __noetic_here() {}
                $crate::restate::print_skip(
                    &$crate::__test_name(::std::any::type_name_of_val(&__noetic_here)),
                    &why,
                );
                return;
            }
        }
    };
}

/// Prints the line a test prints when it skips for want of a Restate server.
pub fn print_skip(test: &str, why: &str) {
    let _ = writeln!(
        std::io::stderr().lock(),
        "SKIPPED: no Restate server ({why}): `{test}` did not run. Set {SERVER_VAR} to a \
         restate-server {VERSION} binary, or install Node.js's npm so the pinned package can be installed."
    );
}

/// The platform package's binary, relative to the install directory.
fn package_binary() -> Result<String, String> {
    let platform = match (std::env::consts::OS, std::env::consts::ARCH) {
        ("linux", "x86_64") => "linux-x64",
        ("linux", "aarch64") => "linux-arm64",
        ("macos", "x86_64") => "darwin-x64",
        ("macos", "aarch64") => "darwin-arm64",
        (os, arch) => return Err(format!("no restate-server package for {os}/{arch}")),
    };
    Ok(format!(
        "node_modules/@restatedev/restate-server-{platform}/bin/restate-server"
    ))
}

/// Installs the pinned package into `dir` with `npm ci` (in a directory of its own, renamed into
/// place, so concurrent test processes do not see half an install).
fn install(dir: &Path) -> Result<(), String> {
    let staging = dir.with_extension(format!("installing-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&staging);
    std::fs::create_dir_all(&staging)
        .map_err(|error| format!("creating {}: {error}", staging.display()))?;
    let write = |name: &str, text: &str| {
        std::fs::write(staging.join(name), text).map_err(|error| format!("writing {name}: {error}"))
    };
    write("package.json", PACKAGE_JSON)?;
    write("package-lock.json", PACKAGE_LOCK)?;
    let output = Command::new("npm")
        .args(["ci", "--no-audit", "--no-fund", "--ignore-scripts"])
        .current_dir(&staging)
        .env("SCARF_ANALYTICS", "false")
        .stdin(Stdio::null())
        .output()
        .map_err(|error| format!("npm is needed to install restate-server ({error})"))?;
    if !output.status.success() {
        let _ = std::fs::remove_dir_all(&staging);
        return Err(format!(
            "`npm ci` of restate-server {VERSION} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    match std::fs::rename(&staging, dir) {
        Ok(()) => Ok(()),
        // Another process installed it first.
        Err(_) if dir.exists() => {
            let _ = std::fs::remove_dir_all(&staging);
            Ok(())
        }
        Err(error) => Err(format!(
            "moving the install into {}: {error}",
            dir.display()
        )),
    }
}

/// Three distinct free loopback ports (bound at once, then released).
fn free_ports() -> Result<[u16; 3], String> {
    let bind = || {
        TcpListener::bind("127.0.0.1:0").map_err(|error| format!("binding a free port: {error}"))
    };
    let listeners = [bind()?, bind()?, bind()?];
    let mut ports = [0; 3];
    for (port, listener) in ports.iter_mut().zip(&listeners) {
        *port = listener
            .local_addr()
            .map_err(|error| format!("a free port: {error}"))?
            .port();
    }
    Ok(ports)
}

/// Whether `GET path` on the loopback `port` answers 200.
fn http_ok(port: u16, path: &str) -> bool {
    let Ok(mut stream) = TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_millis(500),
    ) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let request =
        format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.1 200")
}

fn signal(pid: u32, name: &str) {
    let _ = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pinned_package_is_the_version_the_module_names() {
        let pin = format!("\"@restatedev/restate-server\": \"{VERSION}\"");
        assert!(PACKAGE_JSON.contains(&pin), "{PACKAGE_JSON}");
        assert!(PACKAGE_LOCK.contains(&format!("\"version\": \"{VERSION}\"")));
    }
}
