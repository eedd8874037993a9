//! Running `cargo` child processes with inherited stdio and environment.

use std::ffi::OsString;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::Result;

/// A `cargo` command run from the workspace root.
///
/// Uses the `CARGO` variable that `cargo run` sets, so the children use the same toolchain as the
/// `cargo xtask` invocation; falls back to `cargo` on `PATH`. The environment is inherited, which passes
/// `CARGO_TARGET_DIR`, `CARGO_TERM_COLOR` and friends through.
pub(crate) fn cargo(root: &Path, args: &[&str]) -> Command {
    let program = std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let mut command = Command::new(program);
    command.args(args).current_dir(root);
    command
}

/// Prints a `==> header` line, then runs `command` with inherited stdio and fails unless it succeeds.
pub(crate) fn run_step(header: &str, mut command: Command) -> Result {
    println!("==> {header}");
    let status = command
        .status()
        .map_err(|error| format!("`{header}` could not start: {error}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("`{header}` failed ({status})").into())
    }
}

/// Whether the cargo subcommand `name` (e.g. `deny` for cargo-deny) is installed.
///
/// Asks for `cargo <name> --version` with its output discarded: cargo exits non-zero for an unknown
/// subcommand.
pub(crate) fn subcommand_installed(root: &Path, name: &str) -> bool {
    cargo(root, &[name, "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}
