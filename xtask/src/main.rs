//! Repository automation for the noetic workspace, run as `cargo xtask <command>`.
//!
//! - `cargo xtask ci` runs exactly what CI runs (fmt, clippy, codegen check, tests, docs, cargo-deny,
//!   cargo-hack), stopping at the first failure.
//! - `cargo xtask codegen [--check]` regenerates `docs/errors.md` from the crates' `CODES` tables, or
//!   only checks that it is up to date.
//! - `cargo xtask bench [ARGS]...` runs `cargo bench --workspace ARGS...`.
//! - `cargo xtask e2e [NODE-ARGS]...` runs the end-to-end tests of `noetic serve` in `e2e/` (the web
//!   page in headless Chromium, the AI SDK wire), installing Chromium and the npm packages they need.
//! - `cargo xtask soak-fleet [RUNS] [-- FILTER]` runs the PostgreSQL fleet test RUNS times in a row
//!   (200 by default), each bounded, stopping at the first failure or hang.
//!
//! The tidy checks (every source file has a module doc) and the `docs/errors.md` freshness check run
//! under `cargo test -p xtask`, so `cargo test --workspace` covers them too.
//!
//! xtask uses std only: it is the first thing CI builds and should never wait on a dependency.

mod bench;
mod ci;
mod codegen;
mod codes;
mod command;
mod e2e;
mod soak;
#[cfg(test)]
mod tidy;

use std::path::Path;
use std::process::ExitCode;

/// The error type of every xtask command: a message for the user.
pub(crate) type Error = Box<dyn std::error::Error>;

/// `Result` with [`Error`].
pub(crate) type Result<T = ()> = std::result::Result<T, Error>;

const USAGE: &str = "\
usage: cargo xtask <command>

commands:
  ci                 run every CI check in order, stopping at the first failure
  codegen            regenerate docs/errors.md from the crates' error code tables
  codegen --check    fail when docs/errors.md is stale
  bench [ARGS]...    run `cargo bench --workspace ARGS...` (e.g. `cargo xtask bench -- <filter>`)
  e2e [NODE-ARGS]... run the end-to-end tests in e2e/tests/ with `node --test` (Chromium, npm
                     packages and the CLI installed or built first; NODE-ARGS e.g.
                     --test-name-pattern=reload)
  soak-fleet [RUNS] [-- FILTER]
                     run the PostgreSQL fleet test RUNS times (default 200), each at most 300 s,
                     stopping at the first failure or hang (FILTER: a test name part)
  help               print this message";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Dispatches one command line (without the program name).
fn run(args: &[String]) -> Result {
    let root = workspace_root();
    let (command, rest) = match args.split_first() {
        Some((command, rest)) => (command.as_str(), rest),
        None => return Err(format!("missing command\n\n{USAGE}").into()),
    };
    match (command, rest) {
        ("ci", []) => ci::run(root),
        ("codegen", []) => codegen::write(root),
        ("codegen", [flag]) if flag == "--check" => codegen::check(root),
        ("bench", extra) => bench::run(root, extra),
        ("e2e", extra) => e2e::run(root, extra),
        ("soak-fleet", rest) => {
            let (runs, filter) = soak_args(rest)?;
            soak::run(root, runs, filter)
        }
        ("help" | "-h" | "--help", _) => {
            println!("{USAGE}");
            Ok(())
        }
        _ => Err(format!("unknown arguments: {}\n\n{USAGE}", args.join(" ")).into()),
    }
}

/// `[RUNS] [-- FILTER]` of `soak-fleet`.
fn soak_args(args: &[String]) -> Result<(u32, Option<&str>)> {
    let (runs, filter) = match args.iter().position(|arg| arg == "--") {
        Some(at) => (&args[..at], args.get(at + 1).map(String::as_str)),
        None => (args, None),
    };
    let runs =
        match runs {
            [] => soak::DEFAULT_RUNS,
            [count] => count.parse().ok().filter(|runs| *runs > 0).ok_or_else(|| {
                format!("RUNS must be a positive number, not `{count}`\n\n{USAGE}")
            })?,
            _ => return Err(format!("unknown arguments: {}\n\n{USAGE}", args.join(" ")).into()),
        };
    Ok((runs, filter))
}

/// The workspace root: the parent of this crate's manifest directory.
///
/// xtask always runs from source (`cargo run`), so the compile-time manifest path is reliable and,
/// unlike the current directory, does not depend on where the user typed the command.
pub(crate) fn workspace_root() -> &'static Path {
    static ROOT: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    ROOT.get_or_init(|| {
        // Read at run time: `cargo run`/`cargo test` set it for the process. The compile-time value can
        // name another clone when a shared target directory reuses this binary (cargo does not rebuild
        // a workspace member just because the workspace moved).
        let manifest_dir = std::env::var_os("CARGO_MANIFEST_DIR")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")));
        // Cargo always passes an absolute path, so a parent exists; the fallback is never taken.
        manifest_dir
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or(manifest_dir)
    })
}
