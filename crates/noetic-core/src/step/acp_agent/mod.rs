//! `acp_agent`: one prompt turn of a coding agent driven over the Agent Client Protocol.
//!
//! The step resolves its agent, prompt and cwd, appends the prompt to the log as a user message
//! (unless it is a session turn's message, already there, or an earlier step's output) and
//! hands the turn to the runtime's [`AcpRuntime`] with itself as the [`AcpHost`]: what the agent
//! streams becomes text and reasoning deltas (the same `Sdk` events a model call emits), tool calls
//! `tool_call_started` / `tool_call_completed`, every update an `acp_update` event; permission
//! requests go through the step's rules, then the harness's approvals, then its default. When the
//! turn ends, the agent's messages and its tool calls (with their outputs, for those that ended) are
//! appended to the log, its usage charged when it reported some (unknown otherwise, never 0), and
//! the stop reason decides the result. The turn holds a paid-call record (kind `agent_turn`) like a
//! model round, so a drain waits for it and reports it.

mod host;

use std::marker::PhantomData;
use std::path::PathBuf;
use std::sync::Mutex;

use serde_json::Value;

use super::{Origin, Step, StepBody, StepNode};
use crate::acp::{
    AcpAgentCommand, AcpAgentConfig, AcpAgentRef, AcpClientCapabilities, AcpPermissions,
    AcpSessionOptions, AcpTurn, AcpTurnEnd, KeepAlive, PermissionRule,
};
use crate::context::{Context, StepMeta};
use crate::drain::CallKind;
use crate::event::FrameworkEvent;
use crate::item::Item;
use crate::sync::lock;
use crate::usage::Spend;
use crate::{Error, Result};
use host::{Host, TurnState};

pub(crate) struct AcpAgentSpec {
    pub(crate) config: AcpAgentConfig,
}

/// Builds an `acp_agent` step; see [`acp_agent`].
#[must_use = "a builder does nothing until turned into a step"]
pub struct AcpAgentBuilder<I, O> {
    id: String,
    config: AcpAgentConfig,
    _types: PhantomData<fn(I) -> O>,
}

/// A step that prompts a coding agent over ACP and returns its final text (or, with
/// [`AcpAgentBuilder::output_schema`], the text parsed as JSON). Name the agent with
/// [`AcpAgentBuilder::command`] or [`AcpAgentBuilder::agent`]; the prompt is
/// [`AcpAgentBuilder::prompt`] or the step's input (a string). It runs on the harness's ACP runtime
/// (`noetic_acp::AcpClient`, registered with `AgentHarnessBuilder::acp_runtime`). See
/// `docs/acp.md`.
///
/// # Examples
/// ```
/// use noetic_core::acp::{AcpAgentCommand, PermissionRule};
/// use noetic_core::acp_agent;
/// let step = acp_agent::<String, String>("code")
///     .command(AcpAgentCommand::new("my-agent", ["--acp"]))
///     .allow(PermissionRule::kind("read"))
///     .build();
/// assert_eq!(step.id(), "code");
/// ```
pub fn acp_agent<I, O>(id: impl Into<String>) -> AcpAgentBuilder<I, O> {
    AcpAgentBuilder {
        id: id.into(),
        config: AcpAgentConfig::new(AcpAgentRef::Named(String::new())),
        _types: PhantomData,
    }
}

impl<I, O> AcpAgentBuilder<I, O> {
    /// The whole configuration at once (what a JSON node holds).
    pub fn config(mut self, config: AcpAgentConfig) -> Self {
        self.config = config;
        self
    }

    /// Starts the agent with `command`.
    pub fn command(mut self, command: AcpAgentCommand) -> Self {
        self.config.agent = AcpAgentRef::Command(command);
        self
    }

    /// The agent registered on the harness under `name` (`AgentHarnessBuilder::acp_agent`).
    pub fn agent(mut self, name: impl Into<String>) -> Self {
        self.config.agent = AcpAgentRef::Named(name.into());
        self
    }

    /// The prompt's text (default: the step's input, which must then be a string).
    pub fn prompt(mut self, prompt: impl Into<String>) -> Self {
        self.config.prompt = Some(prompt.into());
        self
    }

    /// An ACP content block sent after the text (an image, a resource link).
    pub fn content(mut self, block: Value) -> Self {
        self.config.content.push(block);
        self
    }

    /// The session's working directory: absolute, inside the fs adapter's root (default: the root).
    pub fn cwd(mut self, cwd: impl Into<PathBuf>) -> Self {
        self.config.cwd = Some(cwd.into());
        self
    }

    /// An MCP server handed to the agent, in ACP's form (`{"name", "command", "args", "env"}` or
    /// `{"type": "http", "name", "url", "headers"}`).
    pub fn mcp_server(mut self, server: Value) -> Self {
        self.config.mcp_servers.push(server);
        self
    }

    /// The whole permission policy.
    pub fn permissions(mut self, permissions: AcpPermissions) -> Self {
        self.config.permissions = permissions;
        self
    }

    /// Allows requests matching `rule` (unless a deny rule matches).
    pub fn allow(mut self, rule: PermissionRule) -> Self {
        self.config.permissions.allow.push(rule);
        self
    }

    /// Rejects requests matching `rule`.
    pub fn deny(mut self, rule: PermissionRule) -> Self {
        self.config.permissions.deny.push(rule);
        self
    }

    /// Asks a person (an approval) when no rule decides.
    pub fn ask(mut self) -> Self {
        self.config.permissions.ask = true;
        self
    }

    /// What the agent may ask of the client (default: read and write files, no terminal).
    pub fn client_capabilities(mut self, capabilities: AcpClientCapabilities) -> Self {
        self.config.client_capabilities = capabilities;
        self
    }

    /// Keeps the agent's session alive across steps under `key`: a later step with the same key
    /// prompts the same session.
    pub fn reuse(mut self, key: impl Into<String>) -> Self {
        self.config.session = AcpSessionOptions {
            keep_alive: KeepAlive::Harness,
            reuse: Some(key.into()),
        };
        self
    }

    /// Fails the turn with `ACP_TIMEOUT` after `idle` without a message from the agent.
    pub fn idle_timeout(mut self, idle: std::time::Duration) -> Self {
        self.config.timeouts.idle = Some(idle);
        self
    }

    /// How long a cancelled turn waits for the agent before its process group is killed (default
    /// 5 s).
    pub fn cancel_grace(mut self, grace: std::time::Duration) -> Self {
        self.config.timeouts.cancel_grace = grace;
        self
    }

    /// The final text must parse as JSON (valid for `schema`); the step returns the value.
    pub fn output_schema(mut self, schema: Value) -> Self {
        self.config.output = Some(schema);
        self
    }

    /// Skips (and logs) non-JSON lines on the agent's stdout instead of failing the turn.
    pub fn lenient(mut self) -> Self {
        self.config.lenient = true;
        self
    }

    /// The finished step.
    pub fn build(self) -> Step<I, O> {
        Step::from_node(StepNode {
            id: self.id,
            body: StepBody::AcpAgent(Box::new(AcpAgentSpec {
                config: self.config,
            })),
        })
    }
}

impl<I, O> From<AcpAgentBuilder<I, O>> for Step<I, O> {
    fn from(builder: AcpAgentBuilder<I, O>) -> Self {
        builder.build()
    }
}

/// An `ACP_CONFIG_INVALID` error naming the step and what is wrong.
fn invalid(step_id: &str, message: impl std::fmt::Display) -> Error {
    Error::Adapter {
        code: "ACP_CONFIG_INVALID",
        source: format!("acp_agent `{step_id}`: {message}").into(),
    }
}

impl AcpAgentSpec {
    /// What can be checked before anything runs.
    pub(crate) fn validate(&self, step_id: &str) -> Result<()> {
        match &self.config.agent {
            AcpAgentRef::Named(name) if name.trim().is_empty() => {
                return Err(invalid(
                    step_id,
                    "no agent (`.command(..)` or `.agent(name)`)",
                ));
            }
            AcpAgentRef::Command(command) if command.command.trim().is_empty() => {
                return Err(invalid(step_id, "the agent's command is blank"));
            }
            _ => {}
        }
        if let Some(cwd) = &self.config.cwd
            && !cwd.is_absolute()
        {
            return Err(invalid(
                step_id,
                format_args!("cwd `{}` is not absolute", cwd.display()),
            ));
        }
        let session = &self.config.session;
        if session.keep_alive == KeepAlive::Harness
            && session.reuse.as_deref().is_none_or(str::is_empty)
        {
            return Err(invalid(
                step_id,
                "session.keep_alive `harness` needs a `reuse` key",
            ));
        }
        if session.reuse.is_some() && session.keep_alive == KeepAlive::Step {
            return Err(invalid(
                step_id,
                "session.reuse needs keep_alive `harness` (a step-long session cannot be reused)",
            ));
        }
        Ok(())
    }
}

pub(crate) async fn execute(
    step_id: &str,
    spec: &AcpAgentSpec,
    input: Value,
    origin: &Origin,
    ctx: &Context,
) -> Result<Value> {
    let config = &spec.config;
    let runtime = ctx.runtime().clone();
    let Some(acp) = runtime.acp_runtime() else {
        return Err(Error::Adapter {
            code: "ACP_RUNTIME_MISSING",
            source: format!(
                "acp_agent `{step_id}`: this runtime has no ACP runtime: register one with `.acp_runtime(noetic_acp::AcpClient::new())` on the harness or runtime builder"
            )
            .into(),
        });
    };
    spec.validate(step_id)?;
    let (agent_name, command): (String, AcpAgentCommand) = match &config.agent {
        AcpAgentRef::Named(name) => match runtime.acp_agent(name) {
            Some(command) => (name.clone(), command.clone()),
            None => {
                let known: Vec<&str> = runtime.acp_agent_names().collect();
                return Err(invalid(
                    step_id,
                    format_args!(
                        "agent `{name}` is not registered (registered: {})",
                        if known.is_empty() {
                            "none".to_owned()
                        } else {
                            known.join(", ")
                        }
                    ),
                ));
            }
        },
        AcpAgentRef::Command(command) => (
            std::path::Path::new(&command.command)
                .file_name()
                .and_then(|name| name.to_str())
                .unwrap_or(&command.command)
                .to_owned(),
            command.clone(),
        ),
    };
    // Whether the prompt still has to be appended to the log: a turn's messages are there already,
    // and a forwarded output is input, not a message (as for `call_model`).
    let mut append = true;
    let prompt = match (&config.prompt, &input) {
        (Some(prompt), _) if !prompt.is_empty() => prompt.clone(),
        (_, Value::String(text)) if !text.is_empty() => {
            append = matches!(origin, Origin::Root);
            text.clone()
        }
        _ if !config.content.is_empty() => String::new(),
        _ => {
            return Err(invalid(
                step_id,
                "no prompt: set `.prompt(..)` or give the step a string input",
            ));
        }
    };
    let fs_root = runtime.fs().host_root().map(std::path::Path::to_path_buf);
    let cwd = match (&config.cwd, &fs_root) {
        (Some(cwd), Some(root)) => {
            if crate::acp::confine(root, cwd).is_none() {
                return Err(invalid(
                    step_id,
                    format_args!(
                        "cwd `{}` is outside the fs root `{}`",
                        cwd.display(),
                        root.display()
                    ),
                ));
            }
            cwd.clone()
        }
        (Some(cwd), None) => cwd.clone(),
        (None, Some(root)) => root.clone(),
        (None, None) => {
            return Err(invalid(
                step_id,
                "no cwd: the fs adapter has no directory on the host (use LocalFs) and the step sets no `cwd`",
            ));
        }
    };

    ctx.hold_if_draining().await?;
    if append && !prompt.is_empty() {
        ctx.append_item(Item::user_text(prompt.clone()));
    }
    let guard = ctx
        .dispatch_call_of(CallKind::AgentTurn, &format!("acp:{agent_name}"), 0)
        .await?;
    ctx.emit(FrameworkEvent::AcpTurnStarted {
        step_id: step_id.to_owned(),
        agent: agent_name.clone(),
    });
    let host = Host {
        ctx,
        step_id,
        agent: &agent_name,
        permissions: &config.permissions,
        turn: Mutex::new(TurnState::default()),
    };
    let turn = AcpTurn {
        step_id,
        config,
        agent_name: &agent_name,
        command: &command,
        prompt,
        cwd,
        fs_root,
        fs: runtime.fs().clone(),
        shell: runtime.shell().clone(),
        cancel: ctx.cancellation_token().clone(),
        host: &host,
    };
    let ended = acp.run_turn(turn).await;
    let state = std::mem::take(&mut *lock(&host.turn));
    match ended {
        Ok(end) => {
            let usage = end.usage;
            let cost = end.cost_usd;
            let spend = Spend {
                usage: usage.unwrap_or_default(),
                cost,
            };
            ctx.charge(spend);
            guard.priced(usage, cost).await;
            finish(step_id, config, ctx, state, end)
        }
        Err(error) => {
            // The agent may have worked and paid: the record closes unpriced (usage unknown).
            guard.refused().await;
            let error = match error {
                Error::Cancelled { reason: None } => Error::cancelled(ctx.abort_reason()),
                other => other,
            };
            ctx.emit(FrameworkEvent::AcpTurnFinished {
                step_id: step_id.to_owned(),
                stop_reason: None,
                error: Some(error.code().to_owned()),
            });
            Err(error)
        }
    }
}

/// The turn answered: items appended, meta set, the stop reason mapped to the result.
fn finish(
    step_id: &str,
    config: &AcpAgentConfig,
    ctx: &Context,
    state: TurnState,
    end: AcpTurnEnd,
) -> Result<Value> {
    let stop = end.stop_reason.as_str();
    ctx.emit(FrameworkEvent::AcpTurnFinished {
        step_id: step_id.to_owned(),
        stop_reason: Some(end.stop_reason.clone()),
        error: None,
    });
    if stop == "cancelled" {
        return Err(Error::cancelled(ctx.abort_reason().or_else(|| {
            Some("the agent reported its turn cancelled".to_owned())
        })));
    }
    let text = state.final_text();
    if stop == "refusal" {
        return Err(Error::Adapter {
            code: "ACP_REFUSED",
            source: format!(
                "acp_agent `{step_id}`: the agent refused{}",
                if text.is_empty() {
                    String::new()
                } else {
                    format!(": {text}")
                }
            )
            .into(),
        });
    }
    let items = state.items();
    for item in &items {
        ctx.append_item(item.clone());
    }
    let tool_calls = items
        .iter()
        .filter_map(|item| item.as_function_call().cloned())
        .collect();
    ctx.set_last_step_meta(StepMeta {
        tool_calls,
        ended_with_tool_calls: false,
        usage: end.usage.unwrap_or_default(),
        cost: end.cost_usd,
        response_items: items,
        last_layer_usage: Vec::new(),
    });
    match &config.output {
        None => Ok(Value::String(text)),
        Some(schema) => parse_output(step_id, schema, &text),
    }
}

/// The final text as JSON valid for `schema` (a fenced code block's content is read too).
fn parse_output(step_id: &str, schema: &Value, text: &str) -> Result<Value> {
    let trimmed = text.trim();
    let body = trimmed
        .strip_prefix("```json")
        .or_else(|| trimmed.strip_prefix("```"))
        .and_then(|rest| rest.strip_suffix("```"))
        .unwrap_or(trimmed);
    let fail = |message: String| Error::ModelParseError {
        step_id: step_id.to_owned(),
        raw: text.to_owned(),
        message,
    };
    let value: Value =
        serde_json::from_str(body.trim()).map_err(|error| fail(error.to_string()))?;
    let validator = jsonschema::validator_for(schema)
        .map_err(|error| fail(format!("the output schema is invalid: {error}")))?;
    if let Some(error) = validator.iter_errors(&value).next() {
        return Err(fail(error.to_string()));
    }
    Ok(value)
}
