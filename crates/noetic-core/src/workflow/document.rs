//! The document model: [`WorkflowDocument`] and its nodes, one type per node kind of the original's
//! schema (version 1), and their JSON form.
//!
//! The types mirror the schema field for field (camelCase on the wire, snake_case here). Parsing, with
//! a JSON pointer on every error, is in `parse.rs`; writing back ([`WorkflowDocument::to_value`]) in
//! `encode.rs`.

use serde_json::{Map, Value};

use super::parse;
use crate::Result;
use crate::acp::AcpAgentConfig;

/// The only document version there is.
pub const WORKFLOW_VERSION: u64 = 1;

/// A JSON workflow document: `{ "version": 1, "root": <node> }`.
///
/// # Examples
/// ```
/// use noetic_core::workflow::{WorkflowDocument, WorkflowNode};
/// let document = WorkflowDocument::from_json(r#"{
///     "version": 1,
///     "root": { "kind": "runCode", "id": "shout", "execute": "upper" }
/// }"#)?;
/// assert_eq!(document.root.id(), "shout");
/// assert_eq!(WorkflowDocument::from_value(document.to_value())?, document);
/// # Ok::<(), noetic_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct WorkflowDocument {
    /// The format version; always [`WORKFLOW_VERSION`] once parsed.
    pub version: u64,
    /// The optional top-level `$schema` URI. The original's example documents carry one although its
    /// schema does not list it; it is accepted, kept and written back, and means nothing else.
    pub schema: Option<String>,
    /// The connections the document declares (`connections`, our extension of the original's
    /// format), in name order; `None` when the field is absent. The host connects them (the `noetic`
    /// CLI starts MCP servers) and registers each with [`super::WorkflowRegistry::tool_source`] under
    /// its name, so a `callModel` tool entry `{"type": "<name>"}` offers that connection's tools.
    pub connections: Option<Vec<ConnectionDecl>>,
    /// The root node.
    pub root: WorkflowNode,
}

/// A connection a document declares: `"connections": {"<name>": {"type": "mcp", …}}`.
#[derive(Debug, Clone, PartialEq)]
pub struct ConnectionDecl {
    /// Its name (`[A-Za-z0-9_-]`): the key in `connections`, and what tool entries reference.
    pub name: String,
    /// What it is.
    pub kind: ConnectionKind,
}

/// The kinds of declared connection.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ConnectionKind {
    /// `{"type": "mcp", "command": [..] | "url": "..", "passEnv"?, "allowTools"?, "denyTools"?}`: a
    /// Model Context Protocol server, started as a child process (stdio) or reached over streamable
    /// HTTP; exactly one of `command` and `url`.
    Mcp(McpDecl),
}

/// An MCP server's declaration.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct McpDecl {
    /// `command`: the program and its arguments (a stdio server).
    pub command: Option<Vec<String>>,
    /// `url`: the server's MCP endpoint (`http://` or `https://`; streamable HTTP).
    pub url: Option<String>,
    /// `passEnv`: host variables passed on to a stdio server besides the default allow-list.
    pub pass_env: Vec<String>,
    /// `allowTools`: when present, only these tools are offered.
    pub allow_tools: Option<Vec<String>>,
    /// `denyTools`: tools never offered.
    pub deny_tools: Vec<String>,
}

/// One node of a workflow: a step of the kind named by its `kind` field.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum WorkflowNode {
    /// `callModel`: a model call with tools.
    CallModel(CallModelNode),
    /// `invokeTool`: one tool run directly.
    InvokeTool(InvokeToolNode),
    /// `runCode`: a code step registered by name.
    RunCode(RunCodeNode),
    /// `conditional`: text-matching routes.
    Conditional(ConditionalNode),
    /// `inParallel`: paths run concurrently.
    InParallel(InParallelNode),
    /// `spawn`: a child context.
    Spawn(SpawnNode),
    /// `withContext`: the same context with named layers.
    WithContext(WithContextNode),
    /// `loop`: a body repeated until a predicate stops it.
    Loop(LoopNode),
    /// `sequence`: steps in order.
    Sequence(SequenceNode),
    /// `schedule`: a step run every interval.
    Schedule(ScheduleNode),
    /// `subflow`: another workflow document, inline or registered by name.
    Subflow(SubflowNode),
    /// `acp-agent`: one prompt turn of a coding agent driven over the Agent Client Protocol.
    AcpAgent(AcpAgentNode),
}

/// `callModel`.
#[derive(Debug, Clone, PartialEq)]
pub struct CallModelNode {
    /// The step id.
    pub id: String,
    /// The model (`vendor/model`); the hydration default when absent.
    pub model: Option<String>,
    /// The system instructions.
    pub instructions: String,
    /// The tools offered, by registered name; `None` when the field is absent.
    pub tools: Option<Vec<ToolRef>>,
    /// Sampling parameters.
    pub params: Option<ModelParamsNode>,
    /// An output codec (not supported by hydration).
    pub output: Option<OutputCodecNode>,
}

/// An entry of a `callModel`'s `tools`: `{ "type": <tool name>, "parameters"?: {..} }`. The name may
/// also be a connection's (a [`ConnectionDecl`], or a tool source registered under that name): the entry
/// then offers all of that connection's tools.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolRef {
    /// The registered tool's name.
    pub name: String,
    /// Tool parameters (not supported by hydration).
    pub parameters: Option<Map<String, Value>>,
}

/// `callModel.params`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ModelParamsNode {
    /// `temperature` (≥ 0).
    pub temperature: Option<f64>,
    /// `topP` (0..=1).
    pub top_p: Option<f64>,
    /// `maxTokens` (> 0): the cap on output tokens per round.
    pub max_tokens: Option<u64>,
    /// `stopSequences`.
    pub stop_sequences: Option<Vec<String>>,
}

/// `callModel.output`: `{ "codec": "openui", "library": .. }`.
#[derive(Debug, Clone, PartialEq)]
pub struct OutputCodecNode {
    /// The codec; always `openui`.
    pub codec: String,
    /// The component library's name.
    pub library: String,
}

/// `invokeTool`.
#[derive(Debug, Clone, PartialEq)]
pub struct InvokeToolNode {
    /// The step id.
    pub id: String,
    /// The registered tool's name.
    pub tool_name: String,
    /// Preset arguments, merged over the input's fields.
    pub args: Option<Map<String, Value>>,
}

/// `runCode`.
#[derive(Debug, Clone, PartialEq)]
pub struct RunCodeNode {
    /// The step id.
    pub id: String,
    /// The registered code step's name.
    pub execute: String,
    /// The retry policy.
    pub retry: Option<RetryNode>,
    /// A subprocess adapter name (not supported by hydration yet).
    pub subprocess: Option<String>,
}

/// `runCode.retry`; delays in milliseconds.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryNode {
    /// `maxAttempts` (> 0), the first attempt included.
    pub max_attempts: u64,
    /// `backoff`.
    pub backoff: BackoffKind,
    /// `initialDelay` in ms (≥ 0).
    pub initial_delay: f64,
    /// `maxDelay` in ms (≥ 0; default 30 000).
    pub max_delay: Option<f64>,
}

/// `runCode.retry.backoff`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackoffKind {
    /// `fixed`.
    Fixed,
    /// `linear`.
    Linear,
    /// `exponential`.
    Exponential,
}

/// `conditional`.
#[derive(Debug, Clone, PartialEq)]
pub struct ConditionalNode {
    /// The step id.
    pub id: String,
    /// The routes, tried in order (at least one).
    pub routes: Vec<Route>,
    /// The target when no route matches.
    pub default: Option<Box<WorkflowNode>>,
}

/// One route of a `conditional`.
#[derive(Debug, Clone, PartialEq)]
pub struct Route {
    /// The text to look for (case-insensitive substring of the input's text).
    pub matches: String,
    /// The step to run when it is found.
    pub target: WorkflowNode,
}

/// `inParallel`.
#[derive(Debug, Clone, PartialEq)]
pub struct InParallelNode {
    /// The step id.
    pub id: String,
    /// `all`, `race` or `settle`.
    pub mode: ParallelMode,
    /// Static paths (exclusive with `each`).
    pub paths: Option<Vec<WorkflowNode>>,
    /// A template run once per element of an array (exclusive with `paths`).
    pub each: Option<Box<WorkflowNode>>,
    /// Where the array is: a JSON pointer (`/a/0`) or a field name; the input itself when absent.
    pub over: Option<String>,
    /// How outputs are merged (`all`, `settle`; default `last`).
    pub merge: Option<MergeStrategy>,
    /// How many paths run at once (> 0; default all).
    pub concurrency: Option<u64>,
}

/// `inParallel.mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParallelMode {
    /// Every path must succeed.
    All,
    /// The first success wins.
    Race,
    /// Every outcome is collected; failures are dropped from the merge.
    Settle,
}

/// `inParallel.merge`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MergeStrategy {
    /// The last path's output (in path order).
    Last,
    /// The first path's output.
    First,
    /// The outputs' texts joined by a blank line.
    Concat,
}

/// `spawn`.
#[derive(Debug, Clone, PartialEq)]
pub struct SpawnNode {
    /// The step id.
    pub id: String,
    /// The step run in the child context.
    pub child: Box<WorkflowNode>,
    /// Timeout in ms (> 0).
    pub timeout: Option<f64>,
    /// Layer names replacing the parent's layers in the child (at least one when present).
    pub layers: Option<Vec<String>>,
}

/// `withContext`.
#[derive(Debug, Clone, PartialEq)]
pub struct WithContextNode {
    /// The step id.
    pub id: String,
    /// The step run with the layers.
    pub child: Box<WorkflowNode>,
    /// Layer names added for the child (at least one).
    pub layers: Vec<String>,
}

/// `loop`.
#[derive(Debug, Clone, PartialEq)]
pub struct LoopNode {
    /// The step id.
    pub id: String,
    /// The body.
    pub body: Box<WorkflowNode>,
    /// When to stop.
    pub until: UntilPredicate,
    /// The cap on iterations (> 0; default 1000).
    pub max_iterations: Option<u64>,
}

/// `sequence`.
#[derive(Debug, Clone, PartialEq)]
pub struct SequenceNode {
    /// The step id.
    pub id: String,
    /// The steps, in order (at least one).
    pub steps: Vec<WorkflowNode>,
}

/// `schedule`.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleNode {
    /// The step id.
    pub id: String,
    /// The step run every interval.
    pub step: Box<WorkflowNode>,
    /// The interval in ms (≥ 0).
    pub interval: f64,
    /// `continue` (default) or `fail`.
    pub on_error: Option<ScheduleErrorMode>,
}

/// `schedule.onError`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScheduleErrorMode {
    /// `continue`.
    Continue,
    /// `fail`.
    Fail,
}

/// `subflow`: exactly one of `document` and `ref`.
#[derive(Debug, Clone, PartialEq)]
pub struct SubflowNode {
    /// The step id.
    pub id: String,
    /// An inline document.
    pub document: Option<Box<WorkflowDocument>>,
    /// The name of a document registered with the registry.
    pub reference: Option<String>,
    /// A fixed input for the subflow (instead of the node's input).
    pub input: Option<String>,
}

/// `acp-agent`: every field but `kind` and `id` is the step's [`AcpAgentConfig`], whose serde form
/// is the node's (camelCase keys, `timeouts` in milliseconds). Parsing, and hydration for a node
/// built in code, refuse what the step would refuse when it runs (a blank agent or command, a
/// relative `cwd`, a `reuse` key without `keepAlive: "harness"` or the reverse) and an `output` that
/// does not compile as a JSON Schema. Whether a named agent is registered is only known to the
/// harness that runs the step: an unknown name fails the step with `ACP_CONFIG_INVALID`.
#[derive(Debug, Clone, PartialEq)]
pub struct AcpAgentNode {
    /// The step id.
    pub id: String,
    /// The step's configuration (`agent`, `prompt`, `content`, `cwd`, `mcpServers`, `permissions`,
    /// `clientCapabilities`, `session`, `timeouts`, `output`, `lenient`).
    pub config: AcpAgentConfig,
}

/// A loop's stop predicate (`$defs/UntilPredicate`).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum UntilPredicate {
    /// `maxSteps { n }`.
    MaxSteps {
        /// Iterations (> 0).
        n: u64,
    },
    /// `maxCost { usd }`.
    MaxCost {
        /// Dollars (> 0).
        usd: f64,
    },
    /// `maxDuration { duration }`, in ms.
    MaxDuration {
        /// Milliseconds (> 0).
        duration: f64,
    },
    /// `noToolCalls`.
    NoToolCalls,
    /// `never`.
    Never,
    /// `outputContains { marker }`.
    OutputContains {
        /// The substring.
        marker: String,
    },
    /// `outputEquals { sentinel }`.
    OutputEquals {
        /// The exact text.
        sentinel: String,
    },
    /// `converged { threshold? }`.
    Converged {
        /// Similarity threshold (0..=1; only 1, exact equality, is supported).
        threshold: Option<f64>,
    },
    /// `any { predicates }`.
    Any {
        /// At least one predicate.
        predicates: Vec<UntilPredicate>,
    },
    /// `all { predicates }`.
    All {
        /// At least one predicate.
        predicates: Vec<UntilPredicate>,
    },
}

impl WorkflowDocument {
    /// A version-1 document around `root`.
    pub fn new(root: WorkflowNode) -> Self {
        WorkflowDocument {
            version: WORKFLOW_VERSION,
            schema: None,
            connections: None,
            root,
        }
    }

    /// Parses a document from JSON text.
    ///
    /// # Errors
    /// [`crate::Error::WorkflowInvalid`]: `path` is the JSON pointer of the offending node or field
    /// (empty for the document itself), `message` says what was expected.
    pub fn from_json(text: &str) -> Result<Self> {
        let value: Value =
            serde_json::from_str(text).map_err(|source| crate::Error::WorkflowInvalid {
                path: String::new(),
                message: format!("not valid JSON: {source}"),
            })?;
        Self::from_value(value)
    }

    /// Parses a document from a JSON value.
    ///
    /// # Errors
    /// [`crate::Error::WorkflowInvalid`] with the JSON pointer of the first problem.
    pub fn from_value(value: Value) -> Result<Self> {
        parse::document(&value, "")
    }
}

impl WorkflowNode {
    /// The node's step id.
    pub fn id(&self) -> &str {
        match self {
            WorkflowNode::CallModel(node) => &node.id,
            WorkflowNode::InvokeTool(node) => &node.id,
            WorkflowNode::RunCode(node) => &node.id,
            WorkflowNode::Conditional(node) => &node.id,
            WorkflowNode::InParallel(node) => &node.id,
            WorkflowNode::Spawn(node) => &node.id,
            WorkflowNode::WithContext(node) => &node.id,
            WorkflowNode::Loop(node) => &node.id,
            WorkflowNode::Sequence(node) => &node.id,
            WorkflowNode::Schedule(node) => &node.id,
            WorkflowNode::Subflow(node) => &node.id,
            WorkflowNode::AcpAgent(node) => &node.id,
        }
    }

    /// The node's `kind` as written in JSON (`callModel`, `inParallel`, `acp-agent`, …).
    pub fn kind(&self) -> &'static str {
        match self {
            WorkflowNode::CallModel(_) => "callModel",
            WorkflowNode::InvokeTool(_) => "invokeTool",
            WorkflowNode::RunCode(_) => "runCode",
            WorkflowNode::Conditional(_) => "conditional",
            WorkflowNode::InParallel(_) => "inParallel",
            WorkflowNode::Spawn(_) => "spawn",
            WorkflowNode::WithContext(_) => "withContext",
            WorkflowNode::Loop(_) => "loop",
            WorkflowNode::Sequence(_) => "sequence",
            WorkflowNode::Schedule(_) => "schedule",
            WorkflowNode::Subflow(_) => "subflow",
            WorkflowNode::AcpAgent(_) => "acp-agent",
        }
    }
}

impl UntilPredicate {
    /// The predicate's `kind` as written in JSON.
    pub fn kind(&self) -> &'static str {
        match self {
            UntilPredicate::MaxSteps { .. } => "maxSteps",
            UntilPredicate::MaxCost { .. } => "maxCost",
            UntilPredicate::MaxDuration { .. } => "maxDuration",
            UntilPredicate::NoToolCalls => "noToolCalls",
            UntilPredicate::Never => "never",
            UntilPredicate::OutputContains { .. } => "outputContains",
            UntilPredicate::OutputEquals { .. } => "outputEquals",
            UntilPredicate::Converged { .. } => "converged",
            UntilPredicate::Any { .. } => "any",
            UntilPredicate::All { .. } => "all",
        }
    }
}
