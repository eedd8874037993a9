//! Repository automation for the noetic workspace, run as `cargo xtask <command>`.
//!
//! - `cargo xtask ci` runs exactly what CI runs (fmt, clippy, codegen check, tests, docs, cargo-deny,
//!   cargo-hack), stopping at the first failure.
//! - `cargo xtask codegen [--check]` regenerates `docs/errors.md` from the crates' `CODES` tables, or
//!   only checks that it is up to date.
//! - `cargo xtask bench [ARGS]...` runs `cargo bench --workspace ARGS...`.
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
        ("help" | "-h" | "--help", _) => {
            println!("{USAGE}");
            Ok(())
        }
        _ => Err(format!("unknown arguments: {}\n\n{USAGE}", args.join(" ")).into()),
    }
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
