//! `cargo xtask e2e [NODE-ARGS]...`: the end-to-end tests of `noetic serve` in `e2e/tests/` (the web
//! page in headless Chromium, the AI SDK wire parsed by the `ai` package, the AG-UI wire run by
//! `@ag-ui/client`'s `HttpAgent`), run by `node --test`.
//!
//! It installs what the tests need, each step bounded by a timeout that kills it (and everything it
//! started: each step runs in a process group of its own):
//! - Node.js ≥ 20 and npm must be on `PATH` (not installed here: Debian's own is too old);
//! - Chromium: `$CHROME_PATH`, else `/usr/bin/chromium`, installed with apt when missing and we are
//!   root (otherwise the error says how to install it);
//! - the npm packages: `npm ci` in `e2e/` when `node_modules` is missing or does not match
//!   `package-lock.json`;
//! - the CLI: `cargo build -p noetic-cli` (the binary under `CARGO_TARGET_DIR`, else `target/`).
//!
//! Then `node --test` runs every `e2e/tests/*.test.mjs` with `NOETIC_BIN` and `CHROME_PATH` set;
//! NODE-ARGS go to `node --test` first (e.g. `--test-name-pattern=reload`). `cargo test --workspace`
//! needs none of this: `.ci/run` calls this command after `cargo xtask ci`.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::Result;
use crate::command::cargo;

/// The oldest Node.js major version the tests run on (`e2e/package.json`'s `engines`).
const NODE_MAJOR: u32 = 20;
/// Where Debian's `chromium` package puts the browser.
const DEBIAN_CHROMIUM: &str = "/usr/bin/chromium";

const VERSION_LIMIT: Duration = Duration::from_secs(60);
const APT_UPDATE_LIMIT: Duration = Duration::from_secs(600);
const APT_INSTALL_LIMIT: Duration = Duration::from_secs(1200);
const NPM_LIMIT: Duration = Duration::from_secs(600);
/// A first build of the CLI from nothing takes minutes on a small machine.
const BUILD_LIMIT: Duration = Duration::from_secs(3600);
/// Every test bounds its own waits well below this.
const TEST_LIMIT: Duration = Duration::from_secs(900);

/// Installs what is missing, builds the CLI and runs the tests.
pub(crate) fn run(root: &Path, node_args: &[String]) -> Result {
    let started = Instant::now();
    let e2e = root.join("e2e");
    let node = node_version()?;
    println!("==> node {node}");
    let chrome = chromium()?;
    npm_packages(&e2e)?;
    let binary = build_cli(root)?;
    let tests = test_files(&e2e.join("tests"))?;

    let mut command = Command::new("node");
    command
        .arg("--test")
        .arg("--test-reporter=spec")
        .args(node_args)
        .args(&tests)
        .current_dir(&e2e)
        .env("NOETIC_BIN", &binary)
        .env("CHROME_PATH", &chrome);
    let header = format!(
        "node --test {} (NOETIC_BIN={}, CHROME_PATH={})",
        tests.join(" "),
        binary.display(),
        chrome.display()
    );
    run_bounded(&header, command, TEST_LIMIT)?;
    println!("==> e2e passed in {:.0} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// The installed Node.js version (`20.11.1`), or an error saying it is missing or too old.
fn node_version() -> Result<String> {
    let missing = || {
        format!(
            "Node.js is not installed: `cargo xtask e2e` needs `node` (>= {NODE_MAJOR}) and `npm` on PATH \
             (e.g. from https://nodejs.org/ or the NodeSource packages; Debian 12's own nodejs is too old)"
        )
    };
    let output =
        capture(command_with("node", "--version"), VERSION_LIMIT).map_err(|_| missing())?;
    let version = output.trim().trim_start_matches('v').to_owned();
    match node_major(&version) {
        Some(major) if major >= NODE_MAJOR => Ok(version),
        Some(_) => Err(format!(
            "Node.js {version} is too old: the e2e tests need {NODE_MAJOR} or later"
        )
        .into()),
        None => Err(format!("`node --version` printed `{output}`, not a version").into()),
    }
}

/// `program arg`.
fn command_with(program: impl AsRef<OsStr>, arg: &str) -> Command {
    let mut command = Command::new(program);
    command.arg(arg);
    command
}

/// The major number of a version such as `20.11.1`.
fn node_major(version: &str) -> Option<u32> {
    version.split('.').next()?.parse().ok()
}

/// The Chromium binary: `$CHROME_PATH`, else Debian's, installed with apt when missing.
fn chromium() -> Result<PathBuf> {
    if let Some(path) = std::env::var_os("CHROME_PATH").filter(|path| !path.is_empty()) {
        let path = PathBuf::from(path);
        if !path.is_file() {
            return Err(format!(
                "CHROME_PATH is {}, which does not exist (unset it to use Debian's {DEBIAN_CHROMIUM})",
                path.display()
            )
            .into());
        }
        print_chromium_version(&path);
        return Ok(path);
    }
    let path = PathBuf::from(DEBIAN_CHROMIUM);
    if !path.is_file() {
        if !is_root() {
            return Err(format!(
                "Chromium is not installed at {DEBIAN_CHROMIUM}: install it with \
                 `sudo apt-get update && sudo apt-get install -y --no-install-recommends chromium`, \
                 or set CHROME_PATH to a Chromium or Chrome binary"
            )
            .into());
        }
        let apt = |args: &[&str]| {
            let mut command = Command::new("apt-get");
            command.args(args).env("DEBIAN_FRONTEND", "noninteractive");
            command
        };
        run_bounded("apt-get update", apt(&["update"]), APT_UPDATE_LIMIT)?;
        run_bounded(
            "apt-get install -y --no-install-recommends chromium",
            apt(&["install", "-y", "--no-install-recommends", "chromium"]),
            APT_INSTALL_LIMIT,
        )?;
        if !path.is_file() {
            return Err(
                format!("apt-get installed chromium but there is no {DEBIAN_CHROMIUM}").into(),
            );
        }
    }
    print_chromium_version(&path);
    Ok(path)
}

/// Prints the browser's version (a note only: a browser that cannot say it may still run).
fn print_chromium_version(path: &Path) {
    match capture(command_with(path, "--version"), VERSION_LIMIT) {
        Ok(version) => println!("==> {} ({})", version.trim(), path.display()),
        Err(error) => println!("==> {} (its version is unknown: {error})", path.display()),
    }
}

/// Whether this process runs as root (the owner of `/proc/self` is the effective user).
fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    match std::fs::metadata("/proc/self") {
        Ok(metadata) => metadata.uid() == 0,
        Err(_) => {
            capture(command_with("id", "-u"), VERSION_LIMIT).is_ok_and(|uid| uid.trim() == "0")
        }
    }
}

/// What node runs to tell whether `node_modules` holds exactly what `package-lock.json` locks: npm
/// records what it installed in `node_modules/.package-lock.json`; every locked package must be
/// there with the same version and integrity and be on disk (an optional one may be missing: it is
/// for another platform), and nothing else may be. Exits 0 when so.
const FRESH_CHECK: &str = r#"
const fs = require('node:fs');
const read = (path) => JSON.parse(fs.readFileSync(path, 'utf8')).packages || {};
let locked, installed;
try { locked = read('package-lock.json'); installed = read('node_modules/.package-lock.json'); }
catch { process.exit(1); }
const fresh = Object.keys(installed).every((name) => name in locked)
  && Object.keys(locked).filter((name) => name !== '').every((name) => installed[name]
    ? installed[name].version === locked[name].version && installed[name].integrity === locked[name].integrity
      && fs.existsSync(`${name}/package.json`)
    : locked[name].optional === true);
process.exit(fresh ? 0 : 1);
"#;

/// `npm ci` in `e2e/` unless `node_modules` already matches the lockfile.
fn npm_packages(e2e: &Path) -> Result {
    let mut check = Command::new("node");
    check
        .args(["--eval", FRESH_CHECK])
        .current_dir(e2e)
        .stdout(Stdio::null());
    if status_within(check, VERSION_LIMIT)? {
        println!("==> e2e/node_modules matches e2e/package-lock.json");
        return Ok(());
    }
    if capture(command_with("npm", "--version"), VERSION_LIMIT).is_err() {
        return Err(
            "npm is not installed: `cargo xtask e2e` needs it to install e2e/'s packages \
                    (it comes with Node.js)"
                .into(),
        );
    }
    let mut npm = Command::new("npm");
    npm.args(["ci", "--no-audit", "--no-fund"]).current_dir(e2e);
    run_bounded("npm ci --no-audit --no-fund (in e2e/)", npm, NPM_LIMIT)
}

/// Builds the CLI; returns the binary's path.
fn build_cli(root: &Path) -> Result<PathBuf> {
    run_bounded(
        "cargo build -p noetic-cli",
        cargo(root, &["build", "-p", "noetic-cli"]),
        BUILD_LIMIT,
    )?;
    let binary = target_dir(root).join("debug").join("noetic");
    if !binary.is_file() {
        return Err(format!(
            "cargo built noetic-cli but there is no {}",
            binary.display()
        )
        .into());
    }
    Ok(binary)
}

/// The target directory: `CARGO_TARGET_DIR` (relative to the root, where cargo runs), else
/// `target/` at the root.
fn target_dir(root: &Path) -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR").filter(|dir| !dir.is_empty()) {
        Some(dir) => root.join(dir),
        None => root.join("target"),
    }
}

/// The test files in `dir` (`*.test.mjs`), sorted, as paths relative to `e2e/`.
fn test_files(dir: &Path) -> Result<Vec<String>> {
    let entries =
        std::fs::read_dir(dir).map_err(|error| format!("reading {}: {error}", dir.display()))?;
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|error| format!("reading {}: {error}", dir.display()))?;
        let name = entry.file_name();
        if let Some(name) = name.to_str().filter(|name| is_test_file(name)) {
            files.push(format!("tests/{name}"));
        }
    }
    files.sort();
    if files.is_empty() {
        return Err(format!("no *.test.mjs files in {}", dir.display()).into());
    }
    Ok(files)
}

fn is_test_file(name: &str) -> bool {
    name.ends_with(".test.mjs") && !name.starts_with('.')
}

/// Runs `command` with inherited output, in a process group of its own, for at most `limit`: past
/// it, the whole group is killed and the step fails.
fn run_bounded(header: &str, command: Command, limit: Duration) -> Result {
    println!("==> {header}");
    let (status, _) = wait_bounded(header, command, limit, false)?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`{header}` failed ({status})").into())
    }
}

/// Whether `command` succeeds within `limit` (killed past it).
fn status_within(command: Command, limit: Duration) -> Result<bool> {
    let program = command.get_program().to_string_lossy().into_owned();
    Ok(wait_bounded(&program, command, limit, false)?.0.success())
}

/// The standard output of `command`, which must succeed within `limit` (its errors are dropped).
fn capture(mut command: Command, limit: Duration) -> Result<String> {
    let program = command.get_program().to_string_lossy().into_owned();
    command.stderr(Stdio::null());
    let (status, output) = wait_bounded(&program, command, limit, true)?;
    if status.success() {
        Ok(output)
    } else {
        Err(format!("`{program}` failed ({status})").into())
    }
}

/// Starts `command` (no input; its standard output kept when `keep_output`) in a process group of
/// its own and waits for it at most `limit`; past it, kills the group (the step and everything it
/// started) and fails.
fn wait_bounded(
    header: &str,
    mut command: Command,
    limit: Duration,
    keep_output: bool,
) -> Result<(std::process::ExitStatus, String)> {
    use std::io::Read;
    use std::os::unix::process::CommandExt;
    command.stdin(Stdio::null()).process_group(0);
    if keep_output {
        command.stdout(Stdio::piped());
    }
    let mut child = command
        .spawn()
        .map_err(|error| format!("`{header}` could not start: {error}"))?;
    let group = child.id();
    let stdout = child.stdout.take();
    let (done, exited) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let mut output = String::new();
        if let Some(mut stdout) = stdout {
            // Ends when the group exits (or is killed): nothing holds the pipe then.
            let _ = stdout.read_to_string(&mut output);
        }
        let _ = done.send(child.wait().map(|status| (status, output)));
    });
    match exited.recv_timeout(limit) {
        Ok(result) => {
            let _ = waiter.join();
            Ok(result.map_err(|error| format!("waiting for `{header}`: {error}"))?)
        }
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{group}")])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            let _ = exited.recv_timeout(Duration::from_secs(10));
            Err(format!("`{header}` did not finish within {limit:?}: killed").into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_versions_give_their_major() {
        assert_eq!(node_major("20.11.1"), Some(20));
        assert_eq!(node_major("22.0.0"), Some(22));
        assert_eq!(node_major("garbage"), None);
    }

    #[test]
    fn only_test_modules_are_run() {
        assert!(is_test_file("browser.test.mjs"));
        assert!(!is_test_file("helpers.mjs"));
        assert!(!is_test_file(".browser.test.mjs"));
        assert!(!is_test_file("browser.test.mjs.swp"));
    }

    #[test]
    fn a_step_past_its_limit_is_killed_with_its_children() {
        let started = Instant::now();
        let mut command = Command::new("sh");
        // The shell's child sleeps too: the whole group must go, or `wait` would not return.
        command.args(["-c", "sleep 30 & sleep 30; wait"]);
        let error = wait_bounded("sleepers", command, Duration::from_millis(200), false)
            .expect_err("the step must time out");
        assert!(error.to_string().contains("did not finish"), "{error}");
        assert!(started.elapsed() < Duration::from_secs(20));
    }

    #[test]
    fn output_is_captured_and_failures_reported() {
        let shell = |script: &str| {
            let mut command = Command::new("sh");
            command.args(["-c", script]);
            command
        };
        let output = capture(shell("echo v20.1.0"), Duration::from_secs(20)).expect("echo runs");
        assert_eq!(output.trim(), "v20.1.0");
        assert!(capture(shell("exit 3"), Duration::from_secs(20)).is_err());
        assert!(
            capture(
                Command::new("/nonexistent/program"),
                Duration::from_secs(20)
            )
            .is_err()
        );
    }
}
