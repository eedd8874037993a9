//! `cargo xtask bench`: runs the workspace benches.
//!
//! The benches are `harness = false` binaries that print their own tables, so this only forwards.

use std::path::Path;

use crate::Result;
use crate::command::{cargo, run_step};

/// Runs `cargo bench --workspace` followed by `extra`, verbatim.
///
/// `cargo xtask bench -- <filter>` therefore becomes `cargo bench --workspace -- <filter>`, which hands
/// `<filter>` to the bench binaries.
pub(crate) fn run(root: &Path, extra: &[String]) -> Result {
    let mut command = cargo(root, &["bench", "--workspace"]);
    command.args(extra);
    let mut header = String::from("cargo bench --workspace");
    for arg in extra {
        header.push(' ');
        header.push_str(arg);
    }
    run_step(&header, command)
}
