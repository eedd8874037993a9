//! The one error type of `noetic-core`, with stable codes.
//!
//! Every variant maps to a `SCREAMING_SNAKE` code through [`Error::code`]. Codes are part of the public
//! API: they are listed in `docs/errors.md` (generated from [`CODES`] by `cargo xtask codegen`) and are
//! never renamed or reused.

use std::time::Duration;

/// A boxed error from user code or an adapter.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// `Result` with [`Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Every stable error code with a one-line meaning.
///
/// `cargo xtask codegen` renders this table into `docs/errors.md`; a test fails when the two differ, and
/// another when [`Error::code`] returns a code missing from it. Keep one entry per line in the form
/// `("CODE", "meaning"),`: xtask reads this source text.
pub const CODES: &[(&str, &str)] = &[
    (
        "ACP_RUNTIME_MISSING",
        "An `acp_agent` step ran on a harness without an ACP runtime (`AgentHarnessBuilder::acp_runtime`).",
    ),
    (
        "ACP_CONFIG_INVALID",
        "An `acp_agent` step's configuration cannot run: no prompt, an unknown agent name, a cwd outside the fs root, reuse without keep-alive; the message names the field.",
    ),
    (
        "ACP_REFUSED",
        "An ACP agent ended its turn with the stop reason `refusal`; the message carries what it said.",
    ),
    (
        "NO_STEP_CONFIGURED",
        "`execute()` was called on a harness built without an agent graph.",
    ),
    (
        "NO_LLM_PROVIDER",
        "A model call found no provider for its model; the hint names the env var to set.",
    ),
    ("MISSING_MODEL", "A `call_model` step has a blank model id."),
    (
        "INVALID_STEP",
        "A step graph is malformed (blank step id, empty loop or sequence body, a retry policy of 0 attempts).",
    ),
    (
        "STEP_FAILED",
        "A step failed: user code returned an error, retries ran out, depth or iteration limits were hit, a timeout expired or its input did not deserialize.",
    ),
    (
        "MODEL_PARSE_ERROR",
        "Structured output: the model's final text is not valid JSON for the requested type.",
    ),
    (
        "MODEL_CALL_FAILED",
        "A model response stayed incomplete, failed or empty after the recovery rounds.",
    ),
    (
        "TOOL_ROUND_LIMIT",
        "The model kept calling tools past 32 rounds and the 3 recovery rounds.",
    ),
    (
        "PROVIDER_ERROR",
        "The provider refused the request or broke the stream (HTTP status and message included).",
    ),
    (
        "MODEL_STREAM_STALLED",
        "No stream event arrived within the idle timeout of a model round.",
    ),
    (
        "FORK_PARTIAL",
        "An `in_parallel` step in `all` mode had a failing path, or every `race` path failed (paths stopped because of it are listed as cancelled).",
    ),
    (
        "CHANNEL_TIMEOUT",
        "A channel `recv` or parked `send` timed out.",
    ),
    (
        "CHANNEL_CLOSED",
        "A channel was used after its execution ended.",
    ),
    (
        "CANCELLED",
        "The context was cancelled (abort, cancel, or a cancelled parent).",
    ),
    (
        "BUDGET_EXCEEDED",
        "*Reserved: nothing produces it yet.* A cost, token or step budget was exceeded.",
    ),
    (
        "STEERING_DENIED",
        "A context layer denied the model's response.",
    ),
    (
        "HANDLE_EVICTED",
        "A detached or routed child vanished without finishing (killed, crashed, or no live child for the execution id): its manifest is cleared.",
    ),
    (
        "ITEM_SCHEMA_MISMATCH",
        "An item did not match the expected schema (named by category and type).",
    ),
    (
        "CONNECTION_UNSATISFIED",
        "A step needs an operation of a connection that is not registered, or that lacks it (the message says which).",
    ),
    (
        "CHECKPOINT_SCHEMA_MISMATCH",
        "A stored checkpoint of the named execution has a schema version this build does not read.",
    ),
    (
        "CHECKPOINT_NOT_FOUND",
        "`restore`/`resume` of an execution id with no checkpoint in the durable store (the id is named).",
    ),
    (
        "CHECKPOINT_CORRUPT",
        "A stored row of the named execution (header, state, item or ledger entry, named by key) does not parse; other executions are unaffected.",
    ),
    (
        "STEP_LEDGER_RETENTION_INVALID",
        "A step-ledger retention cap (`max_entry_bytes`, `max_entries`) is 0 (the cap is named).",
    ),
    (
        "WORKFLOW_INVALID",
        "A JSON workflow document failed validation (the path names the offending node).",
    ),
    (
        "STORAGE_ERROR",
        "A storage adapter failed or returned a corrupt row.",
    ),
    (
        "APPROVAL_NOT_FOUND",
        "`approve` / `reject` named an approval id that no tool call awaits on that thread: unknown, already decided (decisions are single-use), or its run ended.",
    ),
    (
        "LEASE_LOST",
        "A lease this writer held (a thread's or an execution's) was taken over by another holder; the write was refused and the writer stops.",
    ),
    (
        "LEASE_HELD",
        "Another holder's lease on the thread or execution is live (the holder and expiry are named).",
    ),
    (
        "STORAGE_BUSY",
        "The database stayed locked by another writer past the store's busy timeout (the operation and key are named).",
    ),
    (
        "STORAGE_READ_ONLY",
        "The storage cannot be written: a read-only database file or directory (the operation and key are named).",
    ),
    (
        "ENGINE_JOURNAL",
        "A step run through an engine's journal (`StepJournal`, e.g. noetic-restate) could not be recorded or read back: its result does not serialize, a recorded one does not parse, or a replay reached another step than the one recorded at that place (the code between journaled steps took another path).",
    ),
    (
        "FS_PATH_REFUSED",
        "An fs adapter refused a path: it leads outside the sandbox root (`..`, an absolute path elsewhere, a symlink out) or holds a NUL byte; nothing outside was touched.",
    ),
    (
        "FS_NOT_FOUND",
        "An fs adapter found nothing at the path (named).",
    ),
    (
        "FS_NOT_A_DIRECTORY",
        "An fs adapter expected a directory at the path (named).",
    ),
    (
        "FS_IS_A_DIRECTORY",
        "An fs adapter expected a file but the path (named) is a directory.",
    ),
    (
        "FS_NOT_EMPTY",
        "An fs adapter was asked to remove a directory that is not empty.",
    ),
    (
        "FS_IO",
        "The operating system failed a file operation (path and OS error named).",
    ),
    (
        "SHELL_SPAWN_FAILED",
        "A shell adapter could not start the shell at all (a command that runs and fails is an exit status, not this).",
    ),
    (
        "SUBPROCESS_FAILED",
        "A subprocess adapter could not start a child, or the child did not serve (its stderr tail named).",
    ),
    (
        "SUBPROCESS_MANIFEST_CORRUPT",
        "A child's manifest in storage cannot be read (not JSON, unknown version); it is left in place, key named.",
    ),
    (
        "INVALID_ARGUMENT",
        "An API was called with an invalid argument (named in the message).",
    ),
    (
        "NOT_FOUND",
        "An id names nothing the harness knows, e.g. `agent_response` for a thread that never received a message (the kind and the id are named).",
    ),
];

/// The error type of `noetic-core`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `execute()` without an agent graph.
    #[error("no agent graph configured: build the harness with `.agent_graph(step)`")]
    NoStepConfigured,

    /// No provider could serve a model call.
    #[error("no model provider `{provider}` for model `{model}`: {hint}")]
    NoLlmProvider {
        /// The provider name that was looked up.
        provider: String,
        /// The model id of the call.
        model: String,
        /// What to do about it (names the env var that carries the key).
        hint: String,
    },

    /// A `call_model` step has a blank model.
    #[error("step `{step_id}` has no model: set `.model(\"vendor/model\")`")]
    MissingModel {
        /// The step's id.
        step_id: String,
    },

    /// The step graph is malformed.
    #[error("invalid step `{step_id}`: {problem}")]
    InvalidStep {
        /// The offending step's id (may be empty when the id itself is the problem).
        step_id: String,
        /// What is wrong.
        problem: &'static str,
    },

    /// A step failed.
    #[error("step `{step_id}` failed: {cause}")]
    StepFailed {
        /// The failing step's id.
        step_id: String,
        /// Why it failed.
        cause: StepFailure,
    },

    /// Structured output did not parse.
    #[error(
        "step `{step_id}`: model output is not valid for the output type: {message} (raw: {raw:?})"
    )]
    ModelParseError {
        /// The `call_model` step's id.
        step_id: String,
        /// The model's raw final text.
        raw: String,
        /// The parse or validation message.
        message: String,
    },

    /// The model's responses stayed unusable after the recovery rounds.
    #[error(
        "step `{step_id}`: model call failed in round {round} with status {status:?}: {message}"
    )]
    ModelCallFailed {
        /// The `call_model` step's id.
        step_id: String,
        /// The 0-based round of the last failure.
        round: u32,
        /// The last response's terminal status.
        status: ResponseStatus,
        /// The provider's message or the incomplete reason.
        message: String,
    },

    /// Too many tool rounds.
    #[error("step `{step_id}`: model exceeded maximum tool rounds ({max_rounds})")]
    ToolRoundLimit {
        /// The `call_model` step's id.
        step_id: String,
        /// The cap (32).
        max_rounds: u32,
    },

    /// The provider refused a request or broke the stream. Built with [`Error::provider`].
    #[error("provider `{provider}` error{}: {message}", status.map(|s| format!(" (HTTP {s})")).unwrap_or_default())]
    #[non_exhaustive]
    Provider {
        /// The provider's name.
        provider: String,
        /// The HTTP status, when there was one.
        status: Option<u16>,
        /// The provider's message (never contains credentials).
        message: String,
        /// The 0-based round the error happened in, when known.
        round: Option<u32>,
        /// The error underneath (a transport error, say), when there is one; its text is already in
        /// `message`. Never holds credentials or a request URL.
        #[source]
        source: Option<BoxError>,
    },

    /// The stream idle watchdog fired.
    #[error("model stream idle timeout after {idle_timeout_ms}ms")]
    ModelStreamStalled {
        /// The 0-based round.
        round: u32,
        /// The idle timeout that expired, in milliseconds.
        idle_timeout_ms: u64,
    },

    /// Parallel paths failed.
    #[error(
        "step `{step_id}`: {} of {} parallel paths failed{}",
        failed.len(),
        succeeded.len() + failed.len() + cancelled.len(),
        if cancelled.is_empty() { String::new() } else { format!(", {} cancelled", cancelled.len()) }
    )]
    ForkPartial {
        /// The `in_parallel` step's id.
        step_id: String,
        /// Indexes of paths that succeeded.
        succeeded: Vec<usize>,
        /// Indexes of paths that failed, with their errors.
        failed: Vec<(usize, Box<Error>)>,
        /// Indexes of paths that did not finish because a sibling's outcome ended the step (stopped
        /// mid-way or never started), or that ended `CANCELLED` themselves, with their `CANCELLED`
        /// errors.
        cancelled: Vec<(usize, Box<Error>)>,
    },

    /// A channel operation timed out.
    #[error("channel `{channel}` timed out after {timeout:?}")]
    ChannelTimeout {
        /// The channel's name.
        channel: String,
        /// The timeout that expired.
        timeout: Duration,
    },

    /// A channel was closed.
    #[error("channel `{channel}` is closed")]
    ChannelClosed {
        /// The channel's name.
        channel: String,
    },

    /// The context was cancelled.
    #[error("cancelled{}", reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default())]
    Cancelled {
        /// The abort reason, when one was given.
        reason: Option<String>,
    },

    /// A budget was exceeded.
    #[error("budget exceeded: {field} is {actual}, limit {limit}")]
    BudgetExceeded {
        /// Which budget (`cost`, `tokens`, `steps`).
        field: &'static str,
        /// The limit.
        limit: f64,
        /// The value reached.
        actual: f64,
    },

    /// A layer denied the model's response.
    #[error("steering denied{}", guidance.as_deref().map(|g| format!(": {g}")).unwrap_or_default())]
    SteeringDenied {
        /// The layer's guidance.
        guidance: Option<String>,
    },

    /// A detached handle's child vanished.
    #[error("handle `{handle_id}` was evicted")]
    HandleEvicted {
        /// The handle's id.
        handle_id: String,
    },

    /// An item did not match its schema.
    #[error("{category} item{} does not match its schema: {message}", item_type.as_deref().map(|t| format!(" of type `{t}`")).unwrap_or_default())]
    ItemSchemaMismatch {
        /// Where the item came from (`input`, `output`, `tool_result`, `stored`).
        category: &'static str,
        /// The item's `type`, when it had one.
        item_type: Option<String>,
        /// The parse message.
        message: String,
    },

    /// A step needs an operation of a connection that is not registered, or that lacks it.
    #[error(
        "connection `{connection}` {}",
        if *registered {
            format!("lacks operation `{operation}`")
        } else {
            format!("is not registered (step needs its operation `{operation}`)")
        }
    )]
    ConnectionUnsatisfied {
        /// The connection's name.
        connection: String,
        /// The operation the step needs.
        operation: String,
        /// Whether a connection of that name is registered (then it lacks the operation); `false`
        /// when none is.
        registered: bool,
    },

    /// A checkpoint has an unknown schema version.
    #[error(
        "checkpoint of execution `{execution_id}` has schema version {found}; this build reads {expected}"
    )]
    CheckpointSchemaMismatch {
        /// The execution.
        execution_id: String,
        /// The version found in storage.
        found: u32,
        /// The version this build reads.
        expected: u32,
    },

    /// No checkpoint of this execution exists.
    #[error(
        "no checkpoint of execution `{execution_id}`: it never ran durably here, or it was cleared"
    )]
    CheckpointNotFound {
        /// The execution id asked for.
        execution_id: String,
    },

    /// A stored row of an execution does not parse.
    #[error("checkpoint of execution `{execution_id}` is corrupt at `{key}`: {problem}")]
    CheckpointCorrupt {
        /// The execution.
        execution_id: String,
        /// The record, or the log and entry (`exec/E/items#7`).
        key: String,
        /// What is wrong with it.
        problem: String,
    },

    /// Step-ledger retention caps are invalid.
    #[error("step ledger retention `{field}` must be at least 1, got {value}")]
    StepLedgerRetentionInvalid {
        /// The offending field.
        field: &'static str,
        /// Its value.
        value: u64,
    },

    /// A workflow document is invalid.
    #[error("workflow invalid at `{path}`: {message}")]
    WorkflowInvalid {
        /// JSON pointer of the offending node.
        path: String,
        /// What is wrong.
        message: String,
    },

    /// A storage adapter failed.
    #[error("storage error in `{operation}` of `{key}`: {source}")]
    Storage {
        /// The operation (`get`, `set`, …).
        operation: &'static str,
        /// The key involved.
        key: String,
        /// The adapter's error.
        #[source]
        source: BoxError,
    },

    /// No tool call waits for approval under this id on this thread: the id is unknown, was decided
    /// already (decisions are single-use), or its run ended.
    #[error(
        "no tool call awaits approval `{approval_id}` on thread `{thread_id}` (unknown, already decided, or its run ended)"
    )]
    ApprovalNotFound {
        /// The approval id given.
        approval_id: String,
        /// The thread given.
        thread_id: String,
    },

    /// A lease this writer held was taken over: its write was refused and it must stop.
    #[error("lease `{lease}` lost: another holder took it over (our epoch {epoch} is fenced)")]
    LeaseLost {
        /// The lease (`thread/{id}`, `execution/{id}`).
        lease: String,
        /// Our epoch, now fenced.
        epoch: u64,
    },

    /// Another holder's lease is live.
    #[error("lease `{lease}` is held by `{holder}` until {expires_at_ms} ms after the Unix epoch")]
    LeaseHeld {
        /// The lease (`thread/{id}`, `execution/{id}`).
        lease: String,
        /// Who holds it.
        holder: String,
        /// When it expires unless renewed (milliseconds since the Unix epoch).
        expires_at_ms: u64,
    },

    /// A step run through a [`StepJournal`](crate::engine::StepJournal) could not be recorded or read
    /// back.
    #[error("engine journal, step `{step}`: {message}")]
    EngineJournal {
        /// The step's name (`round:{step_id}:{n}`, `tool:{call_id}`; empty when not known).
        step: String,
        /// What went wrong.
        message: String,
    },

    /// The database is locked by another writer past the store's busy timeout.
    #[error("storage busy in `{operation}` of `{key}`: {source}")]
    StorageBusy {
        /// The operation.
        operation: &'static str,
        /// The key, log or lease involved.
        key: String,
        /// The store's error.
        #[source]
        source: BoxError,
    },

    /// The storage cannot be written (a read-only file or directory).
    #[error("storage is read-only in `{operation}` of `{key}`: {source}")]
    StorageReadOnly {
        /// The operation.
        operation: &'static str,
        /// The key, log or lease involved.
        key: String,
        /// The store's error.
        #[source]
        source: BoxError,
    },

    /// An API was called with an invalid argument.
    #[error("invalid argument `{argument}`: {message}")]
    InvalidArgument {
        /// The argument's name.
        argument: &'static str,
        /// What is wrong with it.
        message: String,
    },

    /// An id names nothing the harness knows.
    #[error("unknown {kind} `{id}`: {hint}")]
    NotFound {
        /// What kind of thing was looked up (`thread`, …).
        kind: &'static str,
        /// The id that was not found.
        id: String,
        /// What would make it known.
        hint: &'static str,
    },

    /// A session turn failed; `agent_response` returns the turn's own error inside, and `code()` is that
    /// error's code.
    #[error("turn failed: {source}")]
    TurnFailed {
        /// The turn's error.
        #[source]
        source: std::sync::Arc<Error>,
    },

    /// An error from an adapter crate, carrying that crate's own stable code.
    #[error("{code}: {source}")]
    Adapter {
        /// The adapter's stable code.
        code: &'static str,
        /// The adapter's error.
        #[source]
        source: BoxError,
    },
}

/// Why a step failed (the cause inside [`Error::StepFailed`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StepFailure {
    /// The context is already at the maximum depth.
    #[error("maximum step depth {limit} exceeded")]
    DepthLimit {
        /// The limit (64).
        limit: u32,
    },
    /// User code returned an error.
    #[error("{source} (after {attempts} attempt{})", if *attempts == 1 { "" } else { "s" })]
    Error {
        /// The error.
        #[source]
        source: BoxError,
        /// How many attempts ran.
        attempts: u32,
        /// Whether a retry policy with more than one attempt ran out.
        retries_exhausted: bool,
    },
    /// A loop ran past its iteration cap.
    #[error("loop exceeded maximum iterations ({max_iterations})")]
    MaxIterations {
        /// The cap.
        max_iterations: u32,
    },
    /// A loop's iteration cap is zero.
    #[error("loop max_iterations must be at least 1")]
    InvalidMaxIterations,
    /// A loop stopped before any iteration produced output.
    #[error("loop stopped without output")]
    NoOutput,
    /// The step's input (or its output) did not convert to the step's type.
    #[error("{direction} does not match the step's type: {message}")]
    TypeMismatch {
        /// `input` or `output`.
        direction: &'static str,
        /// The serde message.
        message: String,
    },
    /// A spawn's timeout expired.
    #[error("timed out after {after:?}")]
    Timeout {
        /// The timeout.
        after: Duration,
    },
    /// A tool invoked by `invoke_tool` rejected its arguments or failed.
    #[error("tool `{tool}`: {message}")]
    Tool {
        /// The tool's name.
        tool: String,
        /// The validation or execution message.
        message: String,
    },
}

impl Error {
    /// A provider error (`PROVIDER_ERROR`): the server refused a request (`status`) or broke the
    /// stream. What a custom [`ModelProvider`](crate::ModelProvider) returns; set the round with
    /// [`Error::in_round`] and the underlying error with [`Error::with_source`].
    pub fn provider(
        provider: impl Into<String>,
        status: Option<u16>,
        message: impl Into<String>,
    ) -> Error {
        Error::Provider {
            provider: provider.into(),
            status,
            message: message.into(),
            round: None,
            source: None,
        }
    }

    /// A provider error that does not name its round yet, naming `round`; any other error as is.
    #[must_use]
    pub fn in_round(mut self, round: u32) -> Error {
        if let Error::Provider {
            round: slot @ None, ..
        } = &mut self
        {
            *slot = Some(round);
        }
        self
    }

    /// A provider error with `source` as its [`source()`](std::error::Error::source); any other
    /// error as is.
    #[must_use]
    pub fn with_source(mut self, source: impl Into<BoxError>) -> Error {
        if let Error::Provider { source: slot, .. } = &mut self {
            *slot = Some(source.into());
        }
        self
    }

    /// The stable code of this error, listed in `docs/errors.md`.
    pub fn code(&self) -> &'static str {
        match self {
            Error::NoStepConfigured => "NO_STEP_CONFIGURED",
            Error::NoLlmProvider { .. } => "NO_LLM_PROVIDER",
            Error::MissingModel { .. } => "MISSING_MODEL",
            Error::InvalidStep { .. } => "INVALID_STEP",
            Error::StepFailed { .. } => "STEP_FAILED",
            Error::ModelParseError { .. } => "MODEL_PARSE_ERROR",
            Error::ModelCallFailed { .. } => "MODEL_CALL_FAILED",
            Error::ToolRoundLimit { .. } => "TOOL_ROUND_LIMIT",
            Error::Provider { .. } => "PROVIDER_ERROR",
            Error::ModelStreamStalled { .. } => "MODEL_STREAM_STALLED",
            Error::ForkPartial { .. } => "FORK_PARTIAL",
            Error::ChannelTimeout { .. } => "CHANNEL_TIMEOUT",
            Error::ChannelClosed { .. } => "CHANNEL_CLOSED",
            Error::Cancelled { .. } => "CANCELLED",
            Error::BudgetExceeded { .. } => "BUDGET_EXCEEDED",
            Error::SteeringDenied { .. } => "STEERING_DENIED",
            Error::HandleEvicted { .. } => "HANDLE_EVICTED",
            Error::ItemSchemaMismatch { .. } => "ITEM_SCHEMA_MISMATCH",
            Error::ConnectionUnsatisfied { .. } => "CONNECTION_UNSATISFIED",
            Error::CheckpointSchemaMismatch { .. } => "CHECKPOINT_SCHEMA_MISMATCH",
            Error::CheckpointNotFound { .. } => "CHECKPOINT_NOT_FOUND",
            Error::CheckpointCorrupt { .. } => "CHECKPOINT_CORRUPT",
            Error::StepLedgerRetentionInvalid { .. } => "STEP_LEDGER_RETENTION_INVALID",
            Error::WorkflowInvalid { .. } => "WORKFLOW_INVALID",
            Error::Storage { .. } => "STORAGE_ERROR",
            Error::ApprovalNotFound { .. } => "APPROVAL_NOT_FOUND",
            Error::LeaseLost { .. } => "LEASE_LOST",
            Error::LeaseHeld { .. } => "LEASE_HELD",
            Error::StorageBusy { .. } => "STORAGE_BUSY",
            Error::StorageReadOnly { .. } => "STORAGE_READ_ONLY",
            Error::EngineJournal { .. } => "ENGINE_JOURNAL",
            Error::InvalidArgument { .. } => "INVALID_ARGUMENT",
            Error::NotFound { .. } => "NOT_FOUND",
            Error::TurnFailed { source } => source.code(),
            Error::Adapter { code, .. } => code,
        }
    }

    /// Whether this is [`Error::Cancelled`].
    pub fn is_cancelled(&self) -> bool {
        match self {
            Error::Cancelled { .. } => true,
            Error::TurnFailed { source } => source.is_cancelled(),
            _ => false,
        }
    }

    /// A cancellation error with an optional reason.
    pub fn cancelled(reason: Option<String>) -> Self {
        Error::Cancelled { reason }
    }

    /// An error read back from a record of it (an engine's journal holding a step's failure): its
    /// code is `code`, its text `message`; a `CANCELLED` one is [`Error::Cancelled`] again (with
    /// `message` as its reason, when not empty), so a replay of a cancelled step ends the way the
    /// first run did.
    pub fn recorded(code: &str, message: impl Into<String>) -> Error {
        let message = message.into();
        if code == "CANCELLED" {
            return Error::cancelled((!message.is_empty()).then_some(message));
        }
        Error::Adapter {
            code: static_code(code),
            source: message.into(),
        }
    }
}

#[cfg(test)]
mod tests;

/// The terminal status of a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ResponseStatus {
    /// The response finished normally.
    Completed,
    /// The response stopped early (token limit, content filter).
    Incomplete,
    /// The response failed.
    Failed,
}

/// A stored error code (read back from a durable store) as the `&'static str` codes are: core's own
/// from [`CODES`], any other (an adapter crate's, which core does not list) interned once per
/// distinct code — a small set in practice, bounded at [`MAX_INTERNED_CODES`] (`ERROR` beyond, so a
/// store full of made-up codes cannot grow memory).
pub(crate) fn static_code(code: &str) -> &'static str {
    if let Some((known, _)) = CODES.iter().find(|(known, _)| *known == code) {
        return known;
    }
    static INTERNED: std::sync::Mutex<Vec<&'static str>> = std::sync::Mutex::new(Vec::new());
    let mut interned = crate::sync::lock(&INTERNED);
    if let Some(known) = interned.iter().find(|known| **known == code) {
        return known;
    }
    if interned.len() >= MAX_INTERNED_CODES {
        return "ERROR";
    }
    let leaked: &'static str = Box::leak(code.to_owned().into_boxed_str());
    interned.push(leaked);
    leaked
}

/// How many distinct codes of other crates [`static_code`] keeps.
const MAX_INTERNED_CODES: usize = 256;
