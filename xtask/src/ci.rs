//! `cargo xtask ci`: every CI check, in order, stopping at the first failure.
//!
//! `.ci/run` calls this, so a local `cargo xtask ci` runs exactly what CI runs. Cheap checks come first
//! so a formatting slip fails in seconds rather than after the test build.

use std::path::Path;

use crate::Result;
use crate::codegen;
use crate::command::{cargo, run_step, subcommand_installed};

/// Runs the checks; returns an error naming the first one that failed.
pub(crate) fn run(root: &Path) -> Result {
    run_step(
        "cargo fmt --all --check",
        cargo(root, &["fmt", "--all", "--check"]),
    )?;
    run_step(
        "cargo clippy --workspace --all-targets -- -D warnings",
        cargo(
            root,
            &[
                "clippy",
                "--workspace",
                "--all-targets",
                "--",
                "-D",
                "warnings",
            ],
        ),
    )?;

    // The opt-in OTLP/gRPC export (noetic-otel's `grpc` feature) is not in the workspace build above.
    run_step(
        "cargo clippy -p noetic-otel --features grpc --all-targets -- -D warnings",
        cargo(
            root,
            &[
                "clippy",
                "-p",
                "noetic-otel",
                "--features",
                "grpc",
                "--all-targets",
                "--",
                "-D",
                "warnings",
            ],
        ),
    )?;

    // In-process, before the (slow) tests, so a stale doc fails fast with the fix in the message.
    println!("==> cargo xtask codegen --check");
    codegen::check(root)?;

    run_step(
        "cargo test --workspace",
        cargo(root, &["test", "--workspace"]),
    )?;

    // The Restate suites again with every server in "always replay" mode: each invocation suspends
    // at every await and replays its journal, so a turn that is not deterministic fails here.
    let mut replay = cargo(
        root,
        &[
            "test",
            "-p",
            "noetic-restate",
            "-p",
            "noetic-examples",
            "--test",
            "restate",
        ],
    );
    replay.env("NOETIC_RESTATE_ALWAYS_REPLAY", "1");
    run_step(
        "NOETIC_RESTATE_ALWAYS_REPLAY=1 cargo test -p noetic-restate -p noetic-examples --test restate",
        replay,
    )?;
    let mut replay_serve = cargo(
        root,
        &["test", "-p", "noetic-cli", "--test", "cli", "restate::"],
    );
    replay_serve.env("NOETIC_RESTATE_ALWAYS_REPLAY", "1");
    run_step(
        "NOETIC_RESTATE_ALWAYS_REPLAY=1 cargo test -p noetic-cli --test cli restate::",
        replay_serve,
    )?;

    run_step(
        "cargo test -p noetic-otel --features grpc --test grpc",
        cargo(
            root,
            &[
                "test",
                "-p",
                "noetic-otel",
                "--features",
                "grpc",
                "--test",
                "grpc",
            ],
        ),
    )?;

    // The README's first command must work on a fresh machine with no key: run it for real.
    let mut quickstart = cargo(root, &["run", "--quiet", "--example", "quickstart"]);
    quickstart
        .env_remove("OPENROUTER_API_KEY")
        .env_remove("OPENAI_API_KEY");
    run_step("cargo run --example quickstart (offline)", quickstart)?;

    let mut doc = cargo(root, &["doc", "--workspace", "--no-deps"]);
    doc.env("RUSTDOCFLAGS", "-D warnings");
    run_step(
        "RUSTDOCFLAGS='-D warnings' cargo doc --workspace --no-deps",
        doc,
    )?;

    // `advisories` is left out on purpose: it clones the RustSec database from GitHub, which CI
    // machines cannot reach. See deny.toml.
    if subcommand_installed(root, "deny") {
        run_step(
            "cargo deny check bans licenses sources",
            cargo(root, &["deny", "check", "bans", "licenses", "sources"]),
        )?;
    } else if std::env::var_os("CI").is_some() {
        // `.ci/run` installs it: on CI a missing cargo-deny is a broken set-up, not a skip.
        return Err("cargo-deny is not installed (`.ci/run` installs it; CI=true is set)".into());
    } else {
        print_skip("cargo-deny");
    }

    if subcommand_installed(root, "hack") {
        run_step(
            "cargo hack check --each-feature --workspace",
            cargo(root, &["hack", "check", "--each-feature", "--workspace"]),
        )?;
    } else {
        print_skip("cargo-hack");
    }

    println!("==> ci passed");
    Ok(())
}

/// Reports an optional tool that is not installed; installing it is left to the developer because it
/// takes too long on CI machines.
fn print_skip(tool: &str) {
    println!("==> {tool} not installed; skipping (install: cargo install --locked {tool})");
}
