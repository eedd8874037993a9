//! Tidy checks over the workspace sources, run by `cargo test -p xtask` (and so by `cargo xtask ci`).

use std::fs;
use std::path::{Path, PathBuf};

use crate::{Result, workspace_root};

/// Every `.rs` file under `crates/*/src` opens with a `//!` module doc, so that each module says what
/// it is for. All offenders are reported at once.
#[test]
fn every_source_file_starts_with_a_module_doc() -> Result {
    let root = workspace_root();
    let mut files = Vec::new();
    for entry in fs::read_dir(root.join("crates"))? {
        let src = entry?.path().join("src");
        if src.is_dir() {
            rust_files(&src, &mut files)?;
        }
    }
    files.sort();

    let mut offenders = Vec::new();
    for file in &files {
        let text = fs::read_to_string(file)?;
        let first = text.lines().map(str::trim).find(|line| !line.is_empty());
        if !first.is_some_and(|line| line.starts_with("//!")) {
            offenders.push(format!(
                "  {}",
                file.strip_prefix(root).unwrap_or(file).display()
            ));
        }
    }
    assert!(
        offenders.is_empty(),
        "these files do not start with a `//!` module doc comment:\n{}",
        offenders.join("\n")
    );
    Ok(())
}

/// Appends every `.rs` file under `dir`, recursively.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result {
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            rust_files(&path, out)?;
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
    Ok(())
}

/// Crates that only adapter crates may pull in (DESIGN.md §1): `noetic-core` must build without them.
const ADAPTER_ONLY: &[&str] = &[
    "reqwest",
    "hyper",
    "sqlx",
    "nix",
    "opentelemetry",
    "opentelemetry_sdk",
];

/// `cargo tree -p noetic-core -e normal` names none of the adapter-only crates, so the core stays free
/// of network, database and OS-process dependencies.
#[test]
fn core_pulls_in_no_adapter_dependency() -> Result {
    let root = workspace_root();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = std::process::Command::new(cargo)
        .args([
            "tree",
            "-p",
            "noetic-core",
            "-e",
            "normal",
            "--prefix",
            "none",
        ])
        .current_dir(root)
        .output()?;
    assert!(
        output.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let tree = String::from_utf8(output.stdout)?;
    let names: Vec<&str> = tree
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .collect();
    assert!(
        names.contains(&"noetic-core"),
        "unexpected cargo tree output:\n{tree}"
    );
    let found: Vec<&&str> = ADAPTER_ONLY
        .iter()
        .filter(|banned| names.contains(banned))
        .collect();
    assert!(
        found.is_empty(),
        "noetic-core depends on adapter-only crates {found:?}:\n{tree}"
    );
    Ok(())
}
