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

/// The prefix of a code's meaning in a `CODES` table when nothing produces the code yet.
const RESERVED: &str = "*Reserved:";

/// A code is marked reserved in its `CODES` table exactly when no source constructs its variant, so
/// docs/errors.md never lists a code as live that nothing produces, and a code gains its real meaning
/// in the same change that starts producing it.
///
/// The variant of each code comes from the `Enum::Variant { .. } => "CODE"` arms of `code()` in the
/// crate's `error.rs`; a variant counts as constructed when `Enum::Variant` (or `Self::Variant` in
/// `error.rs`) appears in any crate's `src` on a line where no `=>` follows it (so not as a match
/// pattern) and not inside `matches!`.
#[test]
fn reserved_codes_are_exactly_the_codes_nothing_produces() -> Result {
    let root = workspace_root();
    let mut sources = Vec::new();
    for entry in fs::read_dir(root.join("crates"))? {
        let src = entry?.path().join("src");
        if src.is_dir() {
            rust_files(&src, &mut sources)?;
        }
    }
    let texts: Vec<(PathBuf, String)> = sources
        .into_iter()
        .map(|path| fs::read_to_string(&path).map(|text| (path, text)))
        .collect::<std::io::Result<_>>()?;

    let mut wrong = Vec::new();
    for krate in crate::codegen::collect(root)? {
        let error_rs = root.join("crates").join(&krate.name).join("src/error.rs");
        let arms = code_arms(&fs::read_to_string(&error_rs)?);
        for code in &krate.codes {
            let Some((enum_name, variant, _)) = arms.iter().find(|arm| arm.2 == code.code) else {
                continue;
            };
            let variant = &variant[..];
            let produced = texts.iter().any(|(path, text)| {
                let self_too = *path == error_rs;
                text.lines().any(|line| {
                    constructs(line, &format!("{enum_name}::{variant}"))
                        || (self_too && constructs(line, &format!("Self::{variant}")))
                })
            });
            let reserved = code.meaning.starts_with(RESERVED);
            if produced == reserved {
                wrong.push(format!(
                    "  {}: `{}` is {} but its meaning {} `{RESERVED}`",
                    krate.name,
                    code.code,
                    if produced {
                        "produced"
                    } else {
                        "never produced"
                    },
                    if reserved {
                        "starts with"
                    } else {
                        "does not start with"
                    },
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "fix these CODES entries, then run `cargo xtask codegen`:\n{}",
        wrong.join("\n")
    );
    Ok(())
}

/// `(enum, variant, code)` for every `Enum::Variant ... => "CODE"` line of an `error.rs`.
fn code_arms(source: &str) -> Vec<(String, String, String)> {
    source
        .lines()
        .filter_map(|line| {
            let (pattern, code) = line.trim().split_once("=> \"")?;
            let code = code.strip_suffix("\",")?;
            let path = pattern.split_whitespace().next()?;
            let (enum_name, variant) = path.split_once("::")?;
            Some((enum_name.to_owned(), variant.to_owned(), code.to_owned()))
        })
        .collect()
}

/// Whether `line` builds `path` (an `Enum::Variant`) rather than matching on it.
fn constructs(line: &str, path: &str) -> bool {
    let mut rest = line;
    while let Some(at) = rest.find(path) {
        let after = &rest[at + path.len()..];
        let whole_word = !after.starts_with(|c: char| c.is_alphanumeric() || c == '_');
        if whole_word && !after.contains("=>") && !line.contains("matches!") {
            return true;
        }
        rest = after;
    }
    false
}
