//! `cargo xtask soak-fleet [RUNS] [-- FILTER]`: runs the PostgreSQL fleet test
//! (`noetic-storage-postgres`'s `tests/fleet/`, worker processes on one database) RUNS times in a row
//! (200 by default), to find a failure or hang that shows once in dozens of runs.
//!
//! The test binary is built once (`cargo test --no-run`) and then run directly, each run in a process
//! group of its own with its output kept in `target/soak-fleet/run-N.log`. A run that has not exited
//! after [`RUN_LIMIT`] is a hang: its whole process group (the test, its workers) is killed. The loop
//! stops at the first failure or hang, printing the run's log path and tail; at the end it prints
//! the count and the slowest run.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::Result;
use crate::command::cargo;

/// How many runs without an argument.
pub(crate) const DEFAULT_RUNS: u32 = 200;

/// How long one run may take before it counts as hung (one takes about 12 s on the 2-core machine;
/// the test bounds each of its own waits well below this).
const RUN_LIMIT: Duration = Duration::from_secs(300);

/// Builds the fleet test and runs it `runs` times (passing `filter` to it when given).
pub(crate) fn run(root: &Path, runs: u32, filter: Option<&str>) -> Result {
    let binary = build(root)?;
    let package = root.join("crates/noetic-storage-postgres");
    let logs = target_dir(root).join("soak-fleet");
    std::fs::create_dir_all(&logs)
        .map_err(|error| format!("creating {}: {error}", logs.display()))?;
    println!(
        "==> {runs} runs of {} (each at most {RUN_LIMIT:?}); logs in {}",
        binary.display(),
        logs.display()
    );
    let mut slowest = Duration::ZERO;
    let started = Instant::now();
    for index in 1..=runs {
        let log = logs.join(format!("run-{index}.log"));
        let outcome = run_once(&binary, &package, filter, &log)?;
        match outcome {
            Outcome::Passed(took) => {
                slowest = slowest.max(took);
                println!("run {index}/{runs}: ok in {:.1} s", took.as_secs_f64());
            }
            Outcome::Failed(status) => {
                print_tail(&log);
                return Err(format!(
                    "run {index}/{runs} failed ({status}); its output: {}",
                    log.display()
                )
                .into());
            }
            Outcome::Hung => {
                print_tail(&log);
                return Err(format!(
                    "run {index}/{runs} HUNG: no exit within {RUN_LIMIT:?} (killed); its output: {}",
                    log.display()
                )
                .into());
            }
        }
        // Keep only the logs of runs that went wrong.
        let _ = std::fs::remove_file(&log);
    }
    println!(
        "==> {runs} passed, 0 failed, 0 hung in {:.0} s (slowest run {:.1} s)",
        started.elapsed().as_secs_f64(),
        slowest.as_secs_f64()
    );
    Ok(())
}

/// What one run did.
enum Outcome {
    Passed(Duration),
    Failed(std::process::ExitStatus),
    Hung,
}

/// Builds the fleet test binary; returns its path (from cargo's JSON messages).
fn build(root: &Path) -> Result<PathBuf> {
    println!("==> cargo test -p noetic-storage-postgres --test fleet --no-run");
    let output = cargo(
        root,
        &[
            "test",
            "-p",
            "noetic-storage-postgres",
            "--test",
            "fleet",
            "--no-run",
            "--message-format=json-render-diagnostics",
        ],
    )
    .stderr(Stdio::inherit())
    .output()
    .map_err(|error| format!("running cargo: {error}"))?;
    if !output.status.success() {
        return Err(format!("building the fleet test failed ({})", output.status).into());
    }
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|line| line.contains("\"name\":\"fleet\"") && line.contains("\"test\":true"))
        .find_map(|line| json_string(line, "executable"))
        .map(PathBuf::from)
        .ok_or_else(|| "cargo named no executable for the fleet test".into())
}

/// The string value of `"key":"…"` in a line of JSON (no escapes in the value, as cargo's paths here).
fn json_string(line: &str, key: &str) -> Option<String> {
    let start = line.find(&format!("\"{key}\":\""))? + key.len() + 4;
    let end = start + line[start..].find('"')?;
    Some(line[start..end].to_owned())
}

/// The target directory: `CARGO_TARGET_DIR`, else `target/` at the root.
fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"))
}

/// Runs the binary once in a process group of its own, output to `log`, for at most [`RUN_LIMIT`].
fn run_once(binary: &Path, package: &Path, filter: Option<&str>, log: &Path) -> Result<Outcome> {
    use std::os::unix::process::CommandExt;
    let file = std::fs::File::create(log)
        .map_err(|error| format!("creating {}: {error}", log.display()))?;
    let errors = file
        .try_clone()
        .map_err(|error| format!("opening {}: {error}", log.display()))?;
    let mut command = Command::new(binary);
    command
        .current_dir(package)
        .env("CARGO_MANIFEST_DIR", package)
        .stdin(Stdio::null())
        .stdout(file)
        .stderr(errors)
        .process_group(0);
    if let Some(filter) = filter {
        command.arg(filter);
    }
    let started = Instant::now();
    let mut child = command
        .spawn()
        .map_err(|error| format!("starting {}: {error}", binary.display()))?;
    let group = child.id();
    let (done, exited) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let _ = done.send(child.wait());
    });
    match exited.recv_timeout(RUN_LIMIT) {
        Ok(Ok(status)) => {
            let _ = waiter.join();
            if status.success() {
                Ok(Outcome::Passed(started.elapsed()))
            } else {
                Ok(Outcome::Failed(status))
            }
        }
        Ok(Err(error)) => Err(format!("waiting for the fleet test: {error}").into()),
        Err(_) => {
            // The test, its worker processes: everything in its group.
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{group}")])
                .status();
            let _ = exited.recv_timeout(Duration::from_secs(10));
            Ok(Outcome::Hung)
        }
    }
}

/// Prints the last 60 lines of `log`.
fn print_tail(log: &Path) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    println!("---- last lines of {} ----", log.display());
    for line in &lines[lines.len().saturating_sub(60)..] {
        println!("{line}");
    }
    println!("----");
}

#[cfg(test)]
mod tests {
    use super::json_string;

    #[test]
    fn the_executable_is_read_from_a_cargo_json_line() {
        let line = r#"{"reason":"compiler-artifact","target":{"kind":["test"],"name":"fleet","test":true},"executable":"/t/debug/deps/fleet-abc","fresh":true}"#;
        assert_eq!(
            json_string(line, "executable").as_deref(),
            Some("/t/debug/deps/fleet-abc")
        );
        assert_eq!(json_string(line, "missing"), None);
    }
}
