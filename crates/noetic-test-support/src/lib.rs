//! Test helpers for noetic (a dev-dependency only; `publish = false`).
//!
//! - [`ScriptedModel`]: a [`noetic_core::ModelProvider`] that answers from a queue of canned responses,
//!   each a list of OpenResponses events, and records every request it receives. For testing steps and
//!   sessions, never for testing providers (those are tested over HTTP against a mock server).
//! - [`YieldingModel`]: answers computed from each request, yielding before every stream event, for
//!   tests of interleavings.
//! - [`EventLog`]: an [`noetic_core::EventSink`] that keeps every event, for assertions.
//! - [`MockServer`]: an HTTP server on `127.0.0.1:0` that answers provider requests with queued
//!   [`MockReply`]s in the real wire format (SSE or JSON), with re-chunking, pacing and faults, and records
//!   every request. For testing the real HTTP providers, and for benchmarks.
//! - [`storage_conformance`]: the contract every `StorageAdapter` must pass.
//! - [`conformance`]: the contract every `DurableStore` must pass — records, logs, commits, leases,
//!   runnable marks, and what a harness records (paid calls, approvals, threads, corrupt rows) — as
//!   one `#[tokio::test]` per section from [`durable_store_conformance!`], given a fresh store;
//!   [`durable_conformance`] runs the store sections on one store.
//! - [`mcp`]: a small MCP server (rmcp's server side) over stdio (the `noetic-mcp-test-server`
//!   binary) and streamable HTTP, for testing MCP clients.
//! - `postgres` (feature `postgres`): a throwaway PostgreSQL server started once per test process (or
//!   the one at `NOETIC_TEST_PG_URL`) and a fresh database on it per test, for PostgreSQL adapters.
//! - [`restate`]: a real Restate server (the pinned npm package's binary) per test, on loopback, with
//!   crash and restart, for `noetic-restate`.
//! - [`fixtures_dir`]: where the repository's recorded provider streams live.

pub mod acp;
pub mod conformance;
mod durable;
mod events;
pub mod mcp;
mod mock_server;
mod otlp;
mod paced;
mod platform;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod provider_kit;
pub mod restate;
mod scripted;
mod storage;
mod yielding;

pub use durable::durable_conformance;
pub use events::EventLog;
pub use mock_server::{MockReply, MockServer, RecordedHttpRequest};
pub use otlp::{
    AttributeValue, HistogramPoint, MetricData, NumberPoint, OtlpProtocol, OtlpReceiver,
    ReceivedMetric, ReceivedSpan,
};
pub use paced::{PacedCall, PacedModel};
pub use platform::{fs_conformance, shell_conformance};
pub use scripted::{RecordedRequest, ScriptedModel, ScriptedResponse};
pub use storage::storage_conformance;
pub use yielding::YieldingModel;

use std::path::PathBuf;

/// CPU time (user + system, all threads) a process has used so far, from `/proc/PID/stat` on Linux
/// (`None` elsewhere, or when the process is gone); `pid` `None` is this process. For benchmarks.
pub fn process_cpu(pid: Option<u32>) -> Option<std::time::Duration> {
    let path = pid.map_or_else(
        || "/proc/self/stat".to_owned(),
        |pid| format!("/proc/{pid}/stat"),
    );
    let stat = std::fs::read_to_string(path).ok()?;
    // After the command name (in parentheses): utime is field 14 and stime 15.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // `/proc` counts in USER_HZ, 100 per second on every mainstream Linux.
    Some(std::time::Duration::from_millis(ticks * 10))
}

/// The test's path from the type name of a function item declared in it
/// (`crate::module::test::{{closure}}::__noetic_here` becomes `crate::module::test`), for the
/// `…_or_skip!` macros' skip lines.
#[doc(hidden)]
pub fn __test_name(here: &str) -> String {
    here.split("::")
        .filter(|part| *part != "{{closure}}" && *part != "__noetic_here")
        .collect::<Vec<_>>()
        .join("::")
}

/// The directory of the recorded provider streams (`fixtures/openresponses/` at the workspace root).
pub fn fixtures_dir() -> PathBuf {
    workspace_root().join("fixtures/openresponses")
}

/// The recorded Anthropic Messages responses (`fixtures/anthropic`, with their `SOURCES.md` and
/// `MANIFEST.json`).
pub fn anthropic_fixtures_dir() -> PathBuf {
    workspace_root().join("fixtures/anthropic")
}

/// The workspace root: the nearest ancestor of the running package's directory (`CARGO_MANIFEST_DIR`,
/// which cargo sets when it runs a test, bench or example) that has `fixtures/openresponses`.
///
/// Read at run time on purpose: the compile-time value can name another clone when a shared target
/// directory reuses this library's build.
pub fn workspace_root() -> PathBuf {
    let start = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    start
        .ancestors()
        .find(|dir| dir.join("fixtures/openresponses").is_dir())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.."))
}

/// A harness builder with `model` registered as the provider `scripted`.
pub fn harness_with(name: &str, model: &ScriptedModel) -> noetic_core::AgentHarnessBuilder {
    noetic_core::AgentHarness::builder(name).provider("scripted", model.clone())
}
