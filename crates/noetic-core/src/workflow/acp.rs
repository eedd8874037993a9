//! The `acp-agent` node: its fields read into an [`AcpAgentConfig`] (by hand, so every error carries
//! the pointer of the offending part), the checks parsing and hydration share, and the node written
//! back.
//!
//! The node's JSON form is the configuration's serde form with `kind` and `id` added: the parser
//! reads what `serde_json::to_value(&config)` writes, and [`encode`] writes the same keys, leaving
//! out those whose value is the default.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Map, Value};

use super::fields::{
    Fields, boolean, choice, invalid, items, join, non_empty, non_negative_integer, object, string,
    type_name,
};
use crate::Result;
use crate::acp::{
    AcpAgentCommand, AcpAgentConfig, AcpAgentRef, AcpClientCapabilities, AcpPermissions,
    AcpSessionOptions, AcpTimeouts, KeepAlive, PermissionDefault, PermissionRule,
};

/// The fields an `acp-agent` node may have.
pub(super) const FIELDS: &[&str] = &[
    "kind",
    "id",
    "agent",
    "prompt",
    "content",
    "cwd",
    "mcpServers",
    "permissions",
    "clientCapabilities",
    "session",
    "timeouts",
    "output",
    "lenient",
];

/// How deep an `output` schema may nest before it is compiled: the JSON parser's own limit, so a
/// schema built as a `Value` cannot make the compiler recurse without bound.
const MAX_SCHEMA_NESTING: usize = 128;

/// Reads the configuration of the `acp-agent` node in `fields` (its `kind` and `id` aside; unknown
/// and missing fields already checked), then [`check`]s it.
pub(super) fn parse(fields: &Fields<'_>) -> Result<AcpAgentConfig> {
    let mut config = AcpAgentConfig::new(fields.get("agent", agent)?);
    config.prompt = fields.optional("prompt", string)?;
    config.content = fields.optional("content", objects)?.unwrap_or_default();
    config.cwd = fields.optional("cwd", string)?.map(PathBuf::from);
    config.mcp_servers = fields.optional("mcpServers", objects)?.unwrap_or_default();
    if let Some(permissions) = fields.optional("permissions", permissions)? {
        config.permissions = permissions;
    }
    if let Some(capabilities) = fields.optional("clientCapabilities", capabilities)? {
        config.client_capabilities = capabilities;
    }
    if let Some(session) = fields.optional("session", session)? {
        config.session = session;
    }
    if let Some(timeouts) = fields.optional("timeouts", timeouts)? {
        config.timeouts = timeouts;
    }
    config.output = fields.optional("output", |value, path| {
        object(value, path).map(Value::Object)
    })?;
    config.lenient = fields.optional("lenient", boolean)?.unwrap_or(false);
    check(&config, fields.path)?;
    Ok(config)
}

/// What the `acp_agent` step would refuse when it runs (`ACP_CONFIG_INVALID`), refused up front as
/// `WORKFLOW_INVALID` at the pointer of the part at fault, `path` being the node's: a blank agent
/// name (`/agent`) or command (`/agent/command`), a relative `cwd`, a `reuse` key without
/// `keepAlive: "harness"` (`/session/reuse`) or `keepAlive: "harness"` without one (`/session`); and
/// an `output` that does not compile as a JSON Schema (`/output`), which the step would only find
/// out once the agent has answered.
pub(super) fn check(config: &AcpAgentConfig, path: &str) -> Result<()> {
    let agent_path = join(path, "agent");
    match &config.agent {
        AcpAgentRef::Named(name) if name.trim().is_empty() => {
            return Err(invalid(
                agent_path,
                "expected the name of a registered agent, got a blank string",
            ));
        }
        AcpAgentRef::Command(command) if command.command.trim().is_empty() => {
            return Err(invalid(
                join(&agent_path, "command"),
                "expected a non-blank command (a program's path or name)",
            ));
        }
        _ => {}
    }
    if let Some(cwd) = &config.cwd
        && !cwd.is_absolute()
    {
        return Err(invalid(
            join(path, "cwd"),
            format!("expected an absolute path, got `{}`", cwd.display()),
        ));
    }
    let session_path = join(path, "session");
    match (config.session.keep_alive, config.session.reuse.as_deref()) {
        (KeepAlive::Step, Some(_)) => {
            return Err(invalid(
                join(&session_path, "reuse"),
                "`reuse` needs `keepAlive: \"harness\"` (a session that ends with its step cannot \
                 be reused)",
            ));
        }
        (KeepAlive::Harness, None) => {
            return Err(invalid(
                session_path,
                "missing required field `reuse` (`keepAlive: \"harness\"` keeps the session under \
                 that key)",
            ));
        }
        (KeepAlive::Harness, Some("")) => {
            return Err(invalid(
                join(&session_path, "reuse"),
                "expected a non-empty string",
            ));
        }
        _ => {}
    }
    if let Some(schema) = &config.output {
        let output_path = join(path, "output");
        if nesting(schema) > MAX_SCHEMA_NESTING {
            return Err(invalid(
                output_path,
                format!("nested more than {MAX_SCHEMA_NESTING} levels deep"),
            ));
        }
        if let Err(error) = jsonschema::validator_for(schema) {
            return Err(invalid(
                output_path,
                format!("not a valid JSON Schema: {error}"),
            ));
        }
    }
    Ok(())
}

/// How many levels deep `value` nests (a scalar is 1), counted without recursing and no further
/// than one level past [`MAX_SCHEMA_NESTING`].
fn nesting(value: &Value) -> usize {
    let mut deepest = 0;
    let mut pending = vec![(value, 1)];
    while let Some((value, depth)) = pending.pop() {
        deepest = deepest.max(depth);
        if depth > MAX_SCHEMA_NESTING {
            break;
        }
        match value {
            Value::Array(values) => pending.extend(values.iter().map(|value| (value, depth + 1))),
            Value::Object(map) => pending.extend(map.values().map(|value| (value, depth + 1))),
            _ => {}
        }
    }
    deepest
}

/// `agent`: a registered agent's name, or `{ "command", "args"?, "env"? }`.
fn agent(value: &Value, path: &str) -> Result<AcpAgentRef> {
    match value {
        Value::String(name) => Ok(AcpAgentRef::Named(name.clone())),
        Value::Object(_) => {
            let fields = Fields::new(value, path, "a command")?;
            fields.check(&["command", "args", "env"], &["command"])?;
            let program = fields.get("command", string)?;
            let args = fields
                .optional("args", |value, path| items(value, path, 0, string))?
                .unwrap_or_default();
            let mut command = AcpAgentCommand::new(program, args);
            if let Some(env) = fields.optional("env", env)? {
                command.env = env;
            }
            Ok(AcpAgentRef::Command(command))
        }
        other => Err(invalid(
            path,
            format!(
                "expected a registered agent's name (a string) or a command (an object with \
                 `command`), got {}",
                type_name(other)
            ),
        )),
    }
}

/// `agent.env`: an object of strings.
fn env(value: &Value, path: &str) -> Result<BTreeMap<String, String>> {
    let Value::Object(map) = value else {
        return Err(invalid(
            path,
            format!("expected an object of strings, got {}", type_name(value)),
        ));
    };
    map.iter()
        .map(|(name, value)| Ok((name.clone(), string(value, &join(path, name))?)))
        .collect()
}

/// An array of objects (`content`, `mcpServers`), kept as they are.
fn objects(value: &Value, path: &str) -> Result<Vec<Value>> {
    items(value, path, 0, |value, path| {
        object(value, path).map(Value::Object)
    })
}

fn permissions(value: &Value, path: &str) -> Result<AcpPermissions> {
    let fields = Fields::new(value, path, "a permission policy (an object)")?;
    fields.check(&["default", "allow", "deny", "ask", "persist"], &[])?;
    let rules = |value: &Value, path: &str| items(value, path, 0, rule);
    Ok(AcpPermissions {
        deny: fields.optional("deny", rules)?.unwrap_or_default(),
        allow: fields.optional("allow", rules)?.unwrap_or_default(),
        ask: fields.optional("ask", boolean)?.unwrap_or(false),
        persist: fields.optional("persist", boolean)?.unwrap_or(false),
        default: match fields.optional("default", |value, path| {
            choice(value, path, &["deny", "allow"])
        })? {
            Some("allow") => PermissionDefault::Allow,
            _ => PermissionDefault::Deny,
        },
    })
}

/// A permission rule: `{ "kind"?, "title"? }`, each a non-empty string (an empty `title` would match
/// every request, an empty `kind` none).
fn rule(value: &Value, path: &str) -> Result<PermissionRule> {
    let fields = Fields::new(
        value,
        path,
        "a permission rule (an object with `kind` and/or `title`)",
    )?;
    fields.check(&["kind", "title"], &[])?;
    Ok(PermissionRule {
        kind: fields.optional("kind", non_empty)?,
        title: fields.optional("title", non_empty)?,
    })
}

fn capabilities(value: &Value, path: &str) -> Result<AcpClientCapabilities> {
    let fields = Fields::new(value, path, "an object of client capabilities")?;
    fields.check(&["readTextFile", "writeTextFile", "terminal"], &[])?;
    let defaults = AcpClientCapabilities::default();
    Ok(AcpClientCapabilities {
        read_text_file: fields
            .optional("readTextFile", boolean)?
            .unwrap_or(defaults.read_text_file),
        write_text_file: fields
            .optional("writeTextFile", boolean)?
            .unwrap_or(defaults.write_text_file),
        terminal: fields
            .optional("terminal", boolean)?
            .unwrap_or(defaults.terminal),
    })
}

fn session(value: &Value, path: &str) -> Result<AcpSessionOptions> {
    let fields = Fields::new(value, path, "a session (an object)")?;
    fields.check(&["keepAlive", "reuse"], &[])?;
    Ok(AcpSessionOptions {
        keep_alive: match fields.optional("keepAlive", |value, path| {
            choice(value, path, &["step", "harness"])
        })? {
            Some("harness") => KeepAlive::Harness,
            _ => KeepAlive::Step,
        },
        reuse: fields.optional("reuse", non_empty)?,
    })
}

fn timeouts(value: &Value, path: &str) -> Result<AcpTimeouts> {
    let fields = Fields::new(value, path, "an object of timeouts in milliseconds")?;
    fields.check(&["initializeMs", "idleMs", "cancelGraceMs"], &[])?;
    let millis = |key: &str| {
        fields
            .optional(key, non_negative_integer)
            .map(|millis| millis.map(Duration::from_millis))
    };
    let defaults = AcpTimeouts::default();
    Ok(AcpTimeouts {
        initialize: millis("initializeMs")?.unwrap_or(defaults.initialize),
        idle: millis("idleMs")?,
        cancel_grace: millis("cancelGraceMs")?.unwrap_or(defaults.cancel_grace),
    })
}

/// Writes `config`'s fields into the node's `map`, leaving out those at their default (absent
/// options, empty lists, `false` flags, default sub-objects and sub-fields).
pub(super) fn encode(config: &AcpAgentConfig, map: &mut Map<String, Value>) {
    let mut put = |key: &str, value: Value| {
        map.insert(key.to_owned(), value);
    };
    put(
        "agent",
        match &config.agent {
            AcpAgentRef::Named(name) => Value::from(name.as_str()),
            AcpAgentRef::Command(command) => {
                let mut fields = Map::new();
                fields.insert("command".to_owned(), Value::from(command.command.as_str()));
                if !command.args.is_empty() {
                    fields.insert("args".to_owned(), Value::from(command.args.clone()));
                }
                if !command.env.is_empty() {
                    let env = command
                        .env
                        .iter()
                        .map(|(name, value)| (name.clone(), Value::from(value.as_str())))
                        .collect();
                    fields.insert("env".to_owned(), Value::Object(env));
                }
                Value::Object(fields)
            }
        },
    );
    if let Some(prompt) = &config.prompt {
        put("prompt", Value::from(prompt.as_str()));
    }
    if !config.content.is_empty() {
        put("content", Value::Array(config.content.clone()));
    }
    if let Some(cwd) = &config.cwd {
        // Parsed paths are UTF-8; a path built in code that is not is written lossily.
        put("cwd", Value::from(cwd.to_string_lossy().as_ref()));
    }
    if !config.mcp_servers.is_empty() {
        put("mcpServers", Value::Array(config.mcp_servers.clone()));
    }
    let permissions = &config.permissions;
    if *permissions != AcpPermissions::default() {
        let mut fields = Map::new();
        if permissions.default != PermissionDefault::default() {
            fields.insert("default".to_owned(), Value::from("allow"));
        }
        for (key, rules) in [("allow", &permissions.allow), ("deny", &permissions.deny)] {
            if !rules.is_empty() {
                fields.insert(
                    key.to_owned(),
                    Value::Array(rules.iter().map(encode_rule).collect()),
                );
            }
        }
        for (key, flag) in [("ask", permissions.ask), ("persist", permissions.persist)] {
            if flag {
                fields.insert(key.to_owned(), Value::Bool(true));
            }
        }
        put("permissions", Value::Object(fields));
    }
    let capabilities = &config.client_capabilities;
    let default_capabilities = AcpClientCapabilities::default();
    if *capabilities != default_capabilities {
        let mut fields = Map::new();
        for (key, flag, default) in [
            (
                "readTextFile",
                capabilities.read_text_file,
                default_capabilities.read_text_file,
            ),
            (
                "writeTextFile",
                capabilities.write_text_file,
                default_capabilities.write_text_file,
            ),
            (
                "terminal",
                capabilities.terminal,
                default_capabilities.terminal,
            ),
        ] {
            if flag != default {
                fields.insert(key.to_owned(), Value::Bool(flag));
            }
        }
        put("clientCapabilities", Value::Object(fields));
    }
    let session = &config.session;
    if *session != AcpSessionOptions::default() {
        let mut fields = Map::new();
        if session.keep_alive == KeepAlive::Harness {
            fields.insert("keepAlive".to_owned(), Value::from("harness"));
        }
        if let Some(reuse) = &session.reuse {
            fields.insert("reuse".to_owned(), Value::from(reuse.as_str()));
        }
        put("session", Value::Object(fields));
    }
    let timeouts = &config.timeouts;
    let default_timeouts = AcpTimeouts::default();
    if *timeouts != default_timeouts {
        let mut fields = Map::new();
        if timeouts.initialize != default_timeouts.initialize {
            fields.insert("initializeMs".to_owned(), millis(timeouts.initialize));
        }
        if let Some(idle) = timeouts.idle {
            fields.insert("idleMs".to_owned(), millis(idle));
        }
        if timeouts.cancel_grace != default_timeouts.cancel_grace {
            fields.insert("cancelGraceMs".to_owned(), millis(timeouts.cancel_grace));
        }
        put("timeouts", Value::Object(fields));
    }
    if let Some(output) = &config.output {
        put("output", output.clone());
    }
    if config.lenient {
        put("lenient", Value::Bool(true));
    }
}

fn encode_rule(rule: &PermissionRule) -> Value {
    let mut fields = Map::new();
    if let Some(kind) = &rule.kind {
        fields.insert("kind".to_owned(), Value::from(kind.as_str()));
    }
    if let Some(title) = &rule.title {
        fields.insert("title".to_owned(), Value::from(title.as_str()));
    }
    Value::Object(fields)
}

/// A duration in whole milliseconds, at most `2^53 − 1` (what the parser reads back).
fn millis(duration: Duration) -> Value {
    const MAX_SAFE_INTEGER: u128 = 9_007_199_254_740_991;
    // Below 2^53, so the cast is exact.
    Value::from(duration.as_millis().min(MAX_SAFE_INTEGER) as u64)
}
