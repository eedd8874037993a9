//! What a durable execution stores, and under which names.
//!
//! Per execution `E` (the root context's id), in a [`DurableStore`](crate::adapter::DurableStore):
//!
//! | name | kind | what |
//! |---|---|---|
//! | `exec/E/header` | record | [`Header`]: status, input, output, metadata — written when the run starts and ends |
//! | `exec/E/state` | record | [`StateRecord`]: state, spend, step count, item count, open `call_model` cursors — small, replaced at every checkpoint |
//! | `exec/E/items` | log | one [`Item`](crate::Item) per entry, appended, never rewritten |
//! | `exec/E/ledger` | log | one [`LedgerRow`] per completed step |
//!
//! So a checkpoint writes the new items, the new ledger rows and one small record: its cost does not
//! grow with the history behind it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::step_kind::StepKind;
use crate::usage::Spend;

/// The schema version this build writes and reads.
pub const SCHEMA_VERSION: u32 = 1;

pub(crate) fn header_key(execution_id: &str) -> String {
    format!("exec/{execution_id}/header")
}

pub(crate) fn state_key(execution_id: &str) -> String {
    format!("exec/{execution_id}/state")
}

pub(crate) fn items_log(execution_id: &str) -> String {
    format!("exec/{execution_id}/items")
}

pub(crate) fn ledger_log(execution_id: &str) -> String {
    format!("exec/{execution_id}/ledger")
}

pub(crate) fn prefix(execution_id: &str) -> String {
    format!("exec/{execution_id}/")
}

/// The lease that fences an execution's writers.
pub(crate) fn lease_name(execution_id: &str) -> String {
    format!("execution/{execution_id}")
}

/// Where an execution stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ExecutionStatus {
    /// Started and not finished: a crash leaves it so, and `resume` continues it.
    Running,
    /// Finished with an output.
    Completed,
    /// Finished with an error (resuming runs it again from its last checkpoint).
    Failed,
}

/// The header of an execution (`exec/E/header`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Header {
    pub(crate) schema_version: u32,
    pub(crate) execution_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) thread_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) resource_id: Option<String>,
    pub(crate) status: ExecutionStatus,
    pub(crate) input: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) output: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<ErrorRecord>,
    #[serde(default)]
    pub(crate) metadata: Value,
    /// Where the context's first items are recorded instead of `exec/E/items` (a session turn's
    /// history is its thread's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) base: Option<Base>,
    pub(crate) created_ms: u64,
    pub(crate) updated_ms: u64,
}

/// The first `count` items of an execution's context: entries `0..count` of the log `log`. The
/// execution's own item log holds the items after them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Base {
    pub(crate) log: String,
    pub(crate) count: u64,
}

/// A failed execution's error, as recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ErrorRecord {
    /// The error's stable code.
    pub code: String,
    /// Its message.
    pub message: String,
}

/// The state of an execution at its latest checkpoint (`exec/E/state`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct StateRecord {
    pub(crate) schema_version: u32,
    /// How many items the context has: its base's and then its log's (entries beyond it were written by
    /// a commit that also wrote this record, so this always equals the base plus the log's length).
    pub(crate) item_count: u64,
    pub(crate) state: Value,
    pub(crate) spend: Spend,
    pub(crate) step_count: u64,
    /// Open `call_model` steps, by ledger path.
    #[serde(default)]
    pub(crate) cursors: BTreeMap<String, Cursor>,
    /// The message ids of the session steers the context has applied or dropped so far.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) steers_taken: Vec<String>,
}

/// Where an open `call_model` step stands: enough to continue its rounds after a crash without asking
/// again for a round whose response was recorded.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Cursor {
    /// The item index where the step's items start (its input message included).
    pub(crate) step_start: usize,
    /// The item index of the step's first item after its input.
    pub(crate) first_new_item: usize,
    /// The next round's number.
    pub(crate) round: u32,
    /// Rounds whose calls ran.
    pub(crate) tool_rounds: u32,
    /// What the step's rounds have spent.
    pub(crate) spend: Spend,
}

/// One entry of the step ledger (`exec/E/ledger`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct LedgerRow {
    pub(crate) path: String,
    pub(crate) step_id: String,
    pub(crate) kind: StepKind,
    /// `None` for a tombstone: the path and everything under it no longer count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) output: Option<Value>,
}

/// A durable execution as recorded: what [`crate::AgentHarness::execution`] returns.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ExecutionRecord {
    /// The execution id (the root context's id).
    pub execution_id: String,
    /// Where it stands.
    pub status: ExecutionStatus,
    /// The input of its run.
    pub input: Value,
    /// The output, once completed.
    pub output: Option<Value>,
    /// The error, once failed.
    pub error: Option<ErrorRecord>,
    /// What the caller attached with [`crate::ContextOptions::metadata`] (the CLI keeps the workflow
    /// document there).
    pub metadata: Value,
    /// The thread, when the context had one.
    pub thread_id: Option<String>,
    /// What it has spent so far (at its latest checkpoint).
    pub spend: Spend,
    /// When it started and when it was last recorded, in milliseconds since the Unix epoch.
    pub created_ms: u64,
    /// See `created_ms`.
    pub updated_ms: u64,
}
