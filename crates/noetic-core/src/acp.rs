//! The seam of the `acp_agent` step: what core knows of a coding agent driven over the Agent Client
//! Protocol, without the protocol. A leaf: it names only adapters, items' usage and errors.
//!
//! Core owns the step's configuration ([`AcpAgentConfig`], plain data the JSON workflow format reads
//! and writes), the turn as the harness sees it (text and reasoning deltas, tool calls becoming items,
//! approvals, events, usage, the drain) and the [`AcpHost`] a turn reports to. An [`AcpRuntime`] —
//! `noetic_acp::AcpClient`, which speaks ACP v1 to a child process — runs the turn: it starts the
//! agent, sends the prompt, turns what the agent streams into [`AcpUpdate`]s, asks the host about
//! permissions, serves file requests through the confined [`FsAdapter`] and terminals through the
//! [`ShellAdapter`], and cuts the turn short when the cancellation token fires.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::adapter::{FsAdapter, ShellAdapter};
use crate::usage::TokenUsage;

/// How to start an agent: a program and its arguments, environment variables layered over a minimal
/// one, and the directory it starts in (default: the turn's cwd).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[non_exhaustive]
pub struct AcpAgentCommand {
    /// The program (a path, or a name looked up on `PATH`).
    pub command: String,
    /// Its arguments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Variables set for it, over the minimal environment (`PATH`, `HOME`, `LANG`, `TERM`, `TMPDIR`,
    /// `USER`). Values are never logged or put in events.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
}

impl AcpAgentCommand {
    /// `command` with `args`.
    pub fn new(
        command: impl Into<String>,
        args: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        AcpAgentCommand {
            command: command.into(),
            args: args.into_iter().map(Into::into).collect(),
            env: BTreeMap::new(),
        }
    }

    /// Sets the variable `name` for the agent.
    pub fn env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.insert(name.into(), value.into());
        self
    }
}

/// Which agent a step drives: a command, or the name of one registered on the harness
/// (`AgentHarnessBuilder::acp_agent`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum AcpAgentRef {
    /// A registered agent's name.
    Named(String),
    /// A command of its own.
    Command(AcpAgentCommand),
}

/// A permission rule: matches a request whose tool kind equals `kind` (when set) and whose title
/// contains `title` (when set). A rule with neither matches every request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct PermissionRule {
    /// The ACP tool kind (`read`, `edit`, `delete`, `move`, `search`, `execute`, `think`, `fetch`,
    /// `other`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// A substring of the tool call's title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
}

impl PermissionRule {
    /// A rule on the tool kind.
    pub fn kind(kind: impl Into<String>) -> Self {
        PermissionRule {
            kind: Some(kind.into()),
            title: None,
        }
    }

    /// A rule on a substring of the title.
    pub fn title(title: impl Into<String>) -> Self {
        PermissionRule {
            kind: None,
            title: Some(title.into()),
        }
    }

    /// Whether the rule matches a request of `kind` titled `title`.
    pub fn matches(&self, kind: Option<&str>, title: Option<&str>) -> bool {
        self.kind
            .as_deref()
            .is_none_or(|wanted| kind == Some(wanted))
            && self
                .title
                .as_deref()
                .is_none_or(|part| title.is_some_and(|title| title.contains(part)))
    }
}

/// What a step answers when no rule decides and nobody is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum PermissionDefault {
    /// Reject (the default).
    #[default]
    Deny,
    /// Allow.
    Allow,
}

/// How a step answers the agent's permission requests: `deny` rules first, then `allow` rules, then
/// (with `ask`) a person through the harness's approvals, then `default`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct AcpPermissions {
    /// Requests matching one of these are rejected.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<PermissionRule>,
    /// Requests matching one of these (and no deny rule) are allowed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<PermissionRule>,
    /// Ask a person (an approval, decided with `approve` / `reject`) when no rule matches.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ask: bool,
    /// Prefer the agent's `*_always` options over `*_once` ones.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub persist: bool,
    /// The answer when no rule matches and nobody is asked.
    #[serde(default)]
    pub default: PermissionDefault,
}

/// What the client offers the agent in `initialize`. A capability is offered only when the step
/// allows it and the harness can back it (file requests need an fs adapter with a host root).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct AcpClientCapabilities {
    /// `fs/read_text_file`, through the fs adapter (default on).
    #[serde(default = "yes")]
    pub read_text_file: bool,
    /// `fs/write_text_file`, through the fs adapter (default on).
    #[serde(default = "yes")]
    pub write_text_file: bool,
    /// `terminal/*`, through the shell adapter (default off: a terminal can reach any path the
    /// shell can, whatever the fs confinement).
    #[serde(default)]
    pub terminal: bool,
}

fn yes() -> bool {
    true
}

impl Default for AcpClientCapabilities {
    fn default() -> Self {
        AcpClientCapabilities {
            read_text_file: true,
            write_text_file: true,
            terminal: false,
        }
    }
}

/// How long an agent connection lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum KeepAlive {
    /// Started for the step and closed when it ends (the default).
    #[default]
    Step,
    /// Kept by the runtime under the step's `reuse` key until the harness's runtime is dropped or
    /// the connection fails; a later step with the same key prompts the same agent session.
    Harness,
}

/// A step's agent session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct AcpSessionOptions {
    /// How long the connection lives.
    #[serde(default)]
    pub keep_alive: KeepAlive,
    /// The key steps share a kept-alive session under (required with [`KeepAlive::Harness`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reuse: Option<String>,
}

/// A step's time limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct AcpTimeouts {
    /// For the handshake (`initialize` and `session/new`); default 30 s.
    #[serde(
        rename = "initializeMs",
        default = "default_initialize",
        with = "millis"
    )]
    pub initialize: Duration,
    /// The longest silence from the agent during a turn before it fails with `ACP_TIMEOUT`; default
    /// none. A turn waiting for a person's approval is not silent.
    #[serde(
        rename = "idleMs",
        default,
        with = "opt_millis",
        skip_serializing_if = "Option::is_none"
    )]
    pub idle: Option<Duration>,
    /// How long a cancelled turn waits for the agent's `cancelled` before its process group is
    /// killed; default 5 s.
    #[serde(
        rename = "cancelGraceMs",
        default = "default_cancel_grace",
        with = "millis"
    )]
    pub cancel_grace: Duration,
}

fn default_initialize() -> Duration {
    Duration::from_secs(30)
}

fn default_cancel_grace() -> Duration {
    Duration::from_secs(5)
}

impl Default for AcpTimeouts {
    fn default() -> Self {
        AcpTimeouts {
            initialize: default_initialize(),
            idle: None,
            cancel_grace: default_cancel_grace(),
        }
    }
}

mod millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(value: &Duration, to: S) -> Result<S::Ok, S::Error> {
        to.serialize_u64(u64::try_from(value.as_millis()).unwrap_or(u64::MAX))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(from: D) -> Result<Duration, D::Error> {
        u64::deserialize(from).map(Duration::from_millis)
    }
}

mod opt_millis {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(
        value: &Option<Duration>,
        to: S,
    ) -> Result<S::Ok, S::Error> {
        match value {
            Some(value) => super::millis::serialize(value, to),
            None => to.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        from: D,
    ) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<u64>::deserialize(from)?.map(Duration::from_millis))
    }
}

/// Everything an `acp_agent` step is configured with; its serde form is the JSON workflow node's
/// (camelCase keys, `timeouts` in milliseconds: `initializeMs`, `idleMs`, `cancelGraceMs`). Built by `acp_agent(id)`; read by the [`AcpRuntime`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct AcpAgentConfig {
    /// The agent.
    pub agent: AcpAgentRef,
    /// The prompt's text; when absent, the step's input (a string) is the prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    /// More ACP content blocks sent after the text (images, resources), checked against what the
    /// agent says it accepts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub content: Vec<Value>,
    /// The session's working directory: absolute, inside the fs adapter's root (default: the root).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<PathBuf>,
    /// MCP servers handed to the agent in `session/new`, in ACP's form.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp_servers: Vec<Value>,
    /// How permission requests are answered.
    #[serde(default)]
    pub permissions: AcpPermissions,
    /// What the agent may ask of the client.
    #[serde(default)]
    pub client_capabilities: AcpClientCapabilities,
    /// The session's lifetime.
    #[serde(default)]
    pub session: AcpSessionOptions,
    /// Time limits.
    #[serde(default)]
    pub timeouts: AcpTimeouts,
    /// A JSON Schema the final text must parse as (structured output); the step then returns the
    /// parsed value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// Skip (and log) a line on the agent's stdout that is not a JSON-RPC message, instead of
    /// failing the turn with `ACP_PROTOCOL_VIOLATION`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub lenient: bool,
}

impl AcpAgentConfig {
    /// A configuration for `agent` with every default.
    pub fn new(agent: AcpAgentRef) -> Self {
        AcpAgentConfig {
            agent,
            prompt: None,
            content: Vec::new(),
            cwd: None,
            mcp_servers: Vec::new(),
            permissions: AcpPermissions::default(),
            client_capabilities: AcpClientCapabilities::default(),
            session: AcpSessionOptions::default(),
            timeouts: AcpTimeouts::default(),
            output: None,
            lenient: false,
        }
    }
}

/// A tool call as the agent reports it: the first report (`tool_call`) and each change
/// (`tool_call_update`, where only changed fields are set).
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
pub struct AcpToolCall {
    /// The agent's id of the call.
    pub id: String,
    /// A title for people.
    pub title: Option<String>,
    /// The ACP tool kind.
    pub kind: Option<String>,
    /// `pending`, `in_progress`, `completed` or `failed`.
    pub status: Option<String>,
    /// The input.
    pub raw_input: Option<Value>,
    /// The output.
    pub raw_output: Option<Value>,
    /// The content blocks (`content`, `diff`, `terminal`), replacing earlier ones.
    pub content: Option<Vec<Value>>,
}

impl AcpToolCall {
    /// A report of call `id` with nothing else set.
    pub fn new(id: impl Into<String>) -> Self {
        AcpToolCall {
            id: id.into(),
            ..AcpToolCall::default()
        }
    }
}

/// What the agent streamed, read from one `session/update`.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum AcpUpdate {
    /// A piece of the agent's answer (`agent_message_chunk`); a new `message_id` starts a new
    /// message.
    Message {
        /// The message it belongs to, when the agent says.
        message_id: Option<String>,
        /// The text.
        text: String,
    },
    /// A piece of its reasoning (`agent_thought_chunk`).
    Thought {
        /// The text.
        text: String,
    },
    /// A new tool call (`tool_call`).
    ToolCall(AcpToolCall),
    /// A change to one (`tool_call_update`).
    ToolCallUpdate(AcpToolCall),
    /// The context window and cost so far (`usage_update`); cost cumulative over the session.
    Usage {
        /// Tokens used of the context window.
        used: Option<u64>,
        /// The window's size.
        size: Option<u64>,
        /// The session's cost so far, in USD (other currencies are left out).
        cost_usd: Option<f64>,
    },
    /// Anything else (`plan`, `user_message_chunk`, mode and command updates, kinds this version
    /// does not know): only its raw event.
    Other,
}

/// One option the agent offers in a permission request.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct AcpPermissionOption {
    /// Its id (what the answer names).
    pub option_id: String,
    /// Its label.
    pub name: String,
    /// `allow_once`, `allow_always`, `reject_once` or `reject_always`.
    pub kind: String,
}

impl AcpPermissionOption {
    /// An option.
    pub fn new(
        option_id: impl Into<String>,
        name: impl Into<String>,
        kind: impl Into<String>,
    ) -> Self {
        AcpPermissionOption {
            option_id: option_id.into(),
            name: name.into(),
            kind: kind.into(),
        }
    }
}

/// The agent asks before running a tool call (`session/request_permission`).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct AcpPermissionRequest {
    /// The agent's session.
    pub session_id: String,
    /// The request's JSON-RPC id, as text (part of the approval id).
    pub request_id: String,
    /// The call it is about.
    pub tool_call: AcpToolCall,
    /// What the agent offers.
    pub options: Vec<AcpPermissionOption>,
}

impl AcpPermissionRequest {
    /// A request.
    pub fn new(
        session_id: impl Into<String>,
        request_id: impl Into<String>,
        tool_call: AcpToolCall,
        options: Vec<AcpPermissionOption>,
    ) -> Self {
        AcpPermissionRequest {
            session_id: session_id.into(),
            request_id: request_id.into(),
            tool_call,
            options,
        }
    }
}

/// The host's answer to a permission request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PermissionAnswer {
    /// Answer with this option.
    Selected(String),
    /// The decision has no option of its kind among those offered: answer an error, not
    /// `cancelled` (which would tell the agent its whole turn was cancelled).
    NoMatchingOption {
        /// Whether the decision was to allow.
        allowed: bool,
    },
    /// The turn is being cancelled: answer `cancelled`.
    Cancelled,
}

/// A request of the agent to the client, served or refused, for events.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct AcpActivity {
    /// The method (`fs/read_text_file`, `terminal/create`, …).
    pub method: String,
    /// The path or command it named.
    pub target: Option<String>,
    /// Whether it was served.
    pub served: bool,
    /// Why not, when refused (the error's message).
    pub detail: Option<String>,
}

impl AcpActivity {
    /// An activity.
    pub fn new(
        method: impl Into<String>,
        target: Option<String>,
        served: bool,
        detail: Option<String>,
    ) -> Self {
        AcpActivity {
            method: method.into(),
            target,
            served,
            detail,
        }
    }
}

/// Where a running turn reports: implemented by core's `acp_agent` step.
pub trait AcpHost: Send + Sync {
    /// The agent said something; `raw` is the whole `update` object as received.
    fn update(&self, raw: Value, update: AcpUpdate);

    /// The agent asks permission; the future ends with the answer (or [`PermissionAnswer::Cancelled`]
    /// as soon as the turn is cancelled).
    fn permission(&self, request: AcpPermissionRequest) -> BoxFuture<'_, PermissionAnswer>;

    /// A request of the agent to the client was served or refused.
    fn activity(&self, activity: AcpActivity);
}

/// One turn for an [`AcpRuntime`] to run.
#[non_exhaustive]
pub struct AcpTurn<'a> {
    /// The step's id.
    pub step_id: &'a str,
    /// The step's configuration.
    pub config: &'a AcpAgentConfig,
    /// The agent's name (the registered name, or the command's).
    pub agent_name: &'a str,
    /// The command to start it with (a named agent resolved).
    pub command: &'a AcpAgentCommand,
    /// The prompt's text.
    pub prompt: String,
    /// The session's cwd: absolute.
    pub cwd: PathBuf,
    /// The host path of the fs adapter's root, when it has one: file requests under it are served
    /// (relative to it) through `fs`; without one no file capability is offered.
    pub fs_root: Option<PathBuf>,
    /// The confined file system.
    pub fs: Arc<dyn FsAdapter>,
    /// The shell terminals run on.
    pub shell: Arc<dyn ShellAdapter>,
    /// Fires when the turn is cancelled (the context aborted, a drain's window over).
    pub cancel: CancellationToken,
    /// Where the turn reports.
    pub host: &'a dyn AcpHost,
}

impl std::fmt::Debug for AcpTurn<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AcpTurn")
            .field("step_id", &self.step_id)
            .field("agent_name", &self.agent_name)
            .field("cwd", &self.cwd)
            .finish_non_exhaustive()
    }
}

impl AcpTurn<'_> {
    /// `path` relative to the fs root when it is absolute and lies beneath it (lexically: `..`
    /// components and sibling prefixes refused); `None` otherwise.
    pub fn confine(&self, path: &Path) -> Option<String> {
        let root = self.fs_root.as_deref()?;
        confine(root, path)
    }
}

/// `path` relative to `root` when it is absolute and lies beneath it, lexically.
pub fn confine(root: &Path, path: &Path) -> Option<String> {
    use std::path::Component;
    if !path.is_absolute() {
        return None;
    }
    let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
    for component in path.components() {
        match component {
            Component::RootDir | Component::Prefix(_) => parts.clear(),
            Component::CurDir => {}
            Component::ParentDir => {
                parts.pop()?;
            }
            Component::Normal(part) => parts.push(part),
        }
    }
    let normal: PathBuf = std::iter::once(std::ffi::OsStr::new("/"))
        .chain(parts)
        .collect();
    let relative = normal.strip_prefix(root).ok()?;
    Some(relative.to_str()?.to_owned())
}

/// How a turn ended, as the agent answered the prompt.
#[derive(Debug, Clone, PartialEq, Default)]
#[non_exhaustive]
pub struct AcpTurnEnd {
    /// The stop reason as sent (`end_turn`, `max_tokens`, `max_turn_requests`, `refusal`,
    /// `cancelled`, or a value newer than this version).
    pub stop_reason: String,
    /// Token usage, when the agent reported it (the prompt response's `usage`).
    pub usage: Option<TokenUsage>,
    /// What this turn cost in USD, when the agent reported its session's cost (the difference its
    /// `usage_update`s made during the turn).
    pub cost_usd: Option<f64>,
    /// The agent's session id.
    pub session_id: String,
    /// The agent's `agentInfo`, when it sent one.
    pub agent_info: Option<Value>,
}

/// Runs ACP turns: `noetic_acp::AcpClient`. Registered on the harness with
/// `AgentHarnessBuilder::acp_runtime`; without one an `acp_agent` step fails with
/// `ACP_RUNTIME_MISSING`.
pub trait AcpRuntime: Send + Sync + 'static {
    /// Runs one turn to its end, reporting to `turn.host` as it goes.
    ///
    /// # Errors
    /// The runtime's coded errors (`Error::Adapter` with an `ACP_*` code); `Error::Cancelled` when
    /// `turn.cancel` fired, after the agent answered `cancelled` or its process was killed.
    fn run_turn<'a>(&'a self, turn: AcpTurn<'a>) -> BoxFuture<'a, crate::Result<AcpTurnEnd>>;
}
