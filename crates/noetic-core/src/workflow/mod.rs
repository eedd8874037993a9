//! JSON workflow documents in the original noetic's format (version 1), hydrated into step trees.
//!
//! A [`WorkflowDocument`] is `{ "version": 1, "root": <node> }`; each node has a `kind` and an `id`.
//! [`WorkflowDocument::from_json`] parses one (by hand, so every error is
//! [`crate::Error::WorkflowInvalid`] with the JSON pointer of the offending node or field, e.g.
//! `/root/steps/1/until/kind`); [`WorkflowDocument::hydrate`] turns it into a `Step<Value, Value>`
//! with the public step builders, resolving names against a [`WorkflowRegistry`];
//! [`crate::AgentHarness::parse_and_run_workflow`] does both and runs the tree with
//! [`crate::AgentHarness::run`]. The full guide is `docs/workflows.md`.
//!
//! # Parsing
//! - Unknown `version`, unknown `kind` (of a node or an until predicate) and unknown fields are errors
//!   (the schema's `additionalProperties: false`), never ignored. A missing required field is reported
//!   at the pointer of the object lacking it, the message naming the field.
//! - A top-level `$schema` string is accepted and kept: the original's own examples carry one.
//! - Beyond the schema: `inParallel` needs exactly one of `paths` and `each`, `over` only goes with
//!   `each`, and `merge` does not go with `race`; `subflow` needs exactly one of `document` and `ref`;
//!   step ids must not be blank; an `acp-agent` node is refused for what its step would refuse when
//!   it runs (see below).
//!
//! # Node kinds and their semantics
//! Values between steps are JSON. The *text* of a value is: a string as is, `null` as empty, an
//! object's string `text` field, else the value's JSON.
//! - `callModel` → [`crate::call_model`]. `model` falls back to [`HydrateOptions::default_model`];
//!   with neither it is `WORKFLOW_INVALID` (message `MISSING_MODEL: …`) at hydration. `params`
//!   (`temperature`, `topP`, `maxTokens`, `stopSequences`) become [`crate::model::ModelParams`].
//!   `tools` name registered tools (`type`); an unknown name is an error, `parameters` are refused,
//!   and the harness's own tools are offered as well, as for every `call_model`. `output` codecs are
//!   refused ("output codecs are not supported"). The input is handled as for every `call_model`:
//!   only a non-empty string root input is appended as a user message; a previous node's output is
//!   sent with the requests without being stored.
//! - `invokeTool` → [`crate::invoke_tool`] with `args` as preset arguments.
//! - `runCode` → [`crate::run_code`] around the code step registered under `execute`; `retry`
//!   (delays in ms) → [`crate::RetryPolicy`]; `subprocess` names an adapter registered with
//!   [`WorkflowRegistry::subprocess`] (an unknown name is an error).
//! - `conditional` → [`crate::conditional`]: the first route whose `match` is a case-insensitive
//!   substring of the input's text runs with the input; else `default`; else the input passes through.
//! - `inParallel` → [`crate::in_parallel`] in mode `all`, `race` or `settle`, with `concurrency`.
//!   `merge` (for `all` and `settle`; default `last`): `last`/`first` output in path order (`null` if
//!   none), or `concat`, the texts joined by a blank line; `settle` merges the fulfilled outputs only.
//!   With `each`, the step is a sequence `<id>` of `<id>/over`, which selects the array (`over` is a
//!   JSON pointer if it starts with `/`, else a field name; absent, the input itself; a string input
//!   is parsed as JSON first; no array → `STEP_FAILED`), then the parallel step `<id>/each` with one
//!   path `<id>/each/<i>` per element, running `each` on that element.
//! - `spawn` → [`crate::spawn`], `timeout` in ms, `layers` (registered names) replacing the parent's.
//! - `withContext` → [`crate::with_context`] with the named layers.
//! - `loop` → [`crate::loop_step`] with `body`, `until` and `maxIterations`. Predicates map to
//!   [`crate::until`]: `maxSteps`, `maxCost`, `maxDuration` (ms), `noToolCalls`, `never`,
//!   `outputContains`, `outputEquals` (exact text), `converged` (the text equals the previous
//!   iteration's; a `threshold` below 1 needs embeddings and is refused), `any`, `all`.
//! - `sequence` → [`crate::sequence`].
//! - `schedule` → [`crate::schedule`]: `step` every `interval` ms, `onError` `continue` (default) or
//!   `fail`. It runs until the context is cancelled, which surfaces as `CANCELLED`, unless
//!   [`HydrateOptions::schedule_max_runs`] ends it with the last output.
//! - `subflow` → a sequence `<id>` running the inline `document`'s root or the registered `ref`'s
//!   (resolved and hydrated up front; reference cycles are errors), on the node's input or, when given,
//!   on the fixed `input` string (a step `<id>/input` provides it). Errors inside a referenced
//!   document are reported at the subflow's `/ref`, the message carrying the inner pointer.
//! - `acp-agent` → [`crate::acp_agent`] with the node's [`crate::acp::AcpAgentConfig`] (every field
//!   but `kind` and `id`, in the configuration's serde form: `agent` a registered agent's name or
//!   `{command, args?, env?}`, `prompt`, `content`, `cwd`, `mcpServers`, `permissions`,
//!   `clientCapabilities`, `session`, `timeouts` in ms, `output`, `lenient`). Parsing refuses a blank
//!   agent or command, a relative `cwd`, `session.reuse` without `keepAlive: "harness"` and the
//!   reverse, and an `output` that is not a valid JSON Schema. Whether a named agent is registered is
//!   checked when the step runs (hydration does not see the harness's runtime): an unknown name
//!   fails it with `ACP_CONFIG_INVALID`, listing the registered agents; a harness without an ACP
//!   runtime fails it with `ACP_RUNTIME_MISSING`.
//!
//! Node ids are kept as written.

mod acp;
mod document;
mod encode;
mod fields;
mod hydrate;
mod parallel;
mod parse;
mod predicates;
mod registry;

pub use document::{
    AcpAgentNode, BackoffKind, CallModelNode, ConditionalNode, ConnectionDecl, ConnectionKind,
    InParallelNode, InvokeToolNode, LoopNode, McpDecl, MergeStrategy, ModelParamsNode,
    OutputCodecNode, ParallelMode, RetryNode, Route, RunCodeNode, ScheduleErrorMode, ScheduleNode,
    SequenceNode, SpawnNode, SubflowNode, ToolRef, UntilPredicate, WORKFLOW_VERSION,
    WithContextNode, WorkflowDocument, WorkflowNode,
};
pub use hydrate::WorkflowStep;
pub use registry::{HydrateOptions, WorkflowRegistry};

use serde_json::Value;

use crate::Result;

/// Anything [`crate::AgentHarness::parse_and_run_workflow`] accepts as a document: JSON text, a JSON value,
/// or a parsed [`WorkflowDocument`].
pub trait IntoWorkflowDocument {
    /// Parses (or hands over) the document.
    ///
    /// # Errors
    /// [`crate::Error::WorkflowInvalid`] with the pointer of the first problem.
    fn into_workflow_document(self) -> Result<WorkflowDocument>;
}

impl IntoWorkflowDocument for &str {
    fn into_workflow_document(self) -> Result<WorkflowDocument> {
        WorkflowDocument::from_json(self)
    }
}

impl IntoWorkflowDocument for String {
    fn into_workflow_document(self) -> Result<WorkflowDocument> {
        WorkflowDocument::from_json(&self)
    }
}

impl IntoWorkflowDocument for &String {
    fn into_workflow_document(self) -> Result<WorkflowDocument> {
        WorkflowDocument::from_json(self)
    }
}

impl IntoWorkflowDocument for Value {
    fn into_workflow_document(self) -> Result<WorkflowDocument> {
        WorkflowDocument::from_value(self)
    }
}

impl IntoWorkflowDocument for &Value {
    fn into_workflow_document(self) -> Result<WorkflowDocument> {
        WorkflowDocument::from_value(self.clone())
    }
}

impl IntoWorkflowDocument for WorkflowDocument {
    fn into_workflow_document(self) -> Result<WorkflowDocument> {
        Ok(self)
    }
}

impl IntoWorkflowDocument for &WorkflowDocument {
    fn into_workflow_document(self) -> Result<WorkflowDocument> {
        Ok(self.clone())
    }
}
