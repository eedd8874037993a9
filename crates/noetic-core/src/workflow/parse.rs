//! Parsing a workflow document from a `serde_json::Value`, by hand, so that every error names the JSON
//! pointer of the offending node or field.
//!
//! Checks per object, in order: it is an object; its `kind` (nodes and predicates) is known; it has no
//! field the schema does not list (`additionalProperties: false`); its required fields are present
//! (the pointer is then the object's, the message names the field); each field has the expected type
//! and range. The first problem found is returned.

use serde_json::Value;

use super::acp;
use super::document::{
    AcpAgentNode, BackoffKind, CallModelNode, ConditionalNode, ConnectionDecl, ConnectionKind,
    InParallelNode, InvokeToolNode, LoopNode, McpDecl, MergeStrategy, ModelParamsNode,
    OutputCodecNode, ParallelMode, RetryNode, Route, RunCodeNode, ScheduleErrorMode, ScheduleNode,
    SequenceNode, SpawnNode, SubflowNode, ToolRef, UntilPredicate, WORKFLOW_VERSION,
    WithContextNode, WorkflowDocument, WorkflowNode,
};
use super::fields::{
    Fields, Min, choice, invalid, items, join, non_empty, number, object, positive_integer, string,
};
use crate::Result;

/// The node kinds of the schema that we hydrate.
pub(crate) const NODE_KINDS: &[&str] = &[
    "callModel",
    "invokeTool",
    "runCode",
    "conditional",
    "inParallel",
    "spawn",
    "withContext",
    "loop",
    "sequence",
    "schedule",
    "subflow",
    "acp-agent",
];

/// The until predicate kinds of the schema.
const UNTIL_KINDS: &[&str] = &[
    "maxSteps",
    "maxCost",
    "maxDuration",
    "noToolCalls",
    "never",
    "outputContains",
    "outputEquals",
    "converged",
    "any",
    "all",
];

/// Parses a document at `path` (empty for a top-level document).
pub(crate) fn document(value: &Value, path: &str) -> Result<WorkflowDocument> {
    let fields = Fields::new(
        value,
        path,
        "a workflow document (an object with `version` and `root`)",
    )?;
    fields.only(&["$schema", "version", "connections", "root"])?;
    let (version, version_path) = fields.required("version")?;
    match version.as_f64() {
        Some(number) if number == WORKFLOW_VERSION as f64 => {}
        Some(_) => {
            return Err(invalid(
                version_path,
                format!("unsupported version {version}; expected {WORKFLOW_VERSION}"),
            ));
        }
        None => {
            return Err(invalid(
                version_path,
                format!("expected the number {WORKFLOW_VERSION}"),
            ));
        }
    }
    let schema = fields.optional("$schema", string)?;
    let connections = fields.optional("connections", connections)?;
    let (root, root_path) = fields.required("root")?;
    Ok(WorkflowDocument {
        version: WORKFLOW_VERSION,
        schema,
        connections,
        root: node(root, &root_path)?,
    })
}

/// `connections`: an object of declarations keyed by name.
fn connections(value: &Value, path: &str) -> Result<Vec<ConnectionDecl>> {
    let declared = object(value, path)?;
    declared
        .iter()
        .map(|(name, declaration)| {
            let path = join(path, name);
            if name.is_empty()
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            {
                return Err(invalid(
                    path,
                    format!("a connection's name must be non-empty `[A-Za-z0-9_-]`, not `{name}`"),
                ));
            }
            let fields = Fields::new(declaration, &path, "a connection (an object with `type`)")?;
            let (kind, kind_path) = fields.required("type")?;
            // The only kind so far.
            choice(kind, &kind_path, &["mcp"])?;
            Ok(ConnectionDecl {
                name: name.clone(),
                kind: ConnectionKind::Mcp(mcp(&fields)?),
            })
        })
        .collect()
}

fn mcp(fields: &Fields<'_>) -> Result<McpDecl> {
    fields.only(&[
        "type",
        "command",
        "url",
        "passEnv",
        "allowTools",
        "denyTools",
    ])?;
    let strings = |value: &Value, path: &str| items(value, path, 0, non_empty);
    let command = fields.optional("command", |value, path| items(value, path, 1, non_empty))?;
    let url = fields.optional("url", |value, path| {
        let url = non_empty(value, path)?;
        if url.starts_with("http://") || url.starts_with("https://") {
            Ok(url)
        } else {
            Err(invalid(
                path,
                format!("expected an http:// or https:// URL, got `{url}`"),
            ))
        }
    })?;
    if command.is_some() == url.is_some() {
        return Err(invalid(
            fields.path,
            "an MCP connection needs exactly one of `command` (stdio) and `url` (streamable HTTP)",
        ));
    }
    Ok(McpDecl {
        command,
        url,
        pass_env: fields.optional("passEnv", strings)?.unwrap_or_default(),
        allow_tools: fields.optional("allowTools", strings)?,
        deny_tools: fields.optional("denyTools", strings)?.unwrap_or_default(),
    })
}

/// How many JSON pointer segments deep a node or predicate may sit: the JSON parser's own nesting
/// limit, so a document built as a `Value` (which has no such limit) cannot make the parser recurse
/// without bound. Steps run at most 64 levels deep anyway.
const MAX_NESTING: usize = 128;

fn check_nesting(path: &str) -> Result<()> {
    if path.matches('/').count() > MAX_NESTING {
        return Err(invalid(
            path.to_owned(),
            format!("nested more than {MAX_NESTING} levels deep"),
        ));
    }
    Ok(())
}

/// Parses a node at `path`.
pub(crate) fn node(value: &Value, path: &str) -> Result<WorkflowNode> {
    check_nesting(path)?;
    let fields = Fields::new(value, path, "a workflow node (an object with `kind`)")?;
    let kind = fields.kind()?;
    let node = match kind {
        "callModel" => {
            let allowed = [
                "kind",
                "id",
                "model",
                "instructions",
                "tools",
                "params",
                "output",
            ];
            fields.check(&allowed, &["id", "instructions"])?;
            WorkflowNode::CallModel(CallModelNode {
                id: fields.id()?,
                model: fields.optional("model", string)?,
                instructions: fields.get("instructions", string)?,
                tools: fields.optional("tools", |value, path| items(value, path, 0, tool_ref))?,
                params: fields.optional("params", params)?,
                output: fields.optional("output", output_codec)?,
            })
        }
        "invokeTool" => {
            fields.check(&["kind", "id", "toolName", "args"], &["id", "toolName"])?;
            WorkflowNode::InvokeTool(InvokeToolNode {
                id: fields.id()?,
                tool_name: fields.get("toolName", non_empty)?,
                args: fields.optional("args", object)?,
            })
        }
        "runCode" => {
            fields.check(
                &["kind", "id", "execute", "retry", "subprocess"],
                &["id", "execute"],
            )?;
            WorkflowNode::RunCode(RunCodeNode {
                id: fields.id()?,
                execute: fields.get("execute", non_empty)?,
                retry: fields.optional("retry", retry)?,
                subprocess: fields.optional("subprocess", non_empty)?,
            })
        }
        "conditional" => {
            fields.check(&["kind", "id", "routes", "default"], &["id", "routes"])?;
            WorkflowNode::Conditional(ConditionalNode {
                id: fields.id()?,
                routes: fields.get("routes", |value, path| items(value, path, 1, route))?,
                default: fields.optional("default", boxed_node)?,
            })
        }
        "inParallel" => {
            let allowed = [
                "kind",
                "id",
                "mode",
                "paths",
                "each",
                "over",
                "merge",
                "concurrency",
            ];
            fields.check(&allowed, &["id", "mode"])?;
            in_parallel(&fields)?
        }
        "spawn" => {
            fields.check(
                &["kind", "id", "child", "timeout", "layers"],
                &["id", "child"],
            )?;
            WorkflowNode::Spawn(SpawnNode {
                id: fields.id()?,
                child: fields.get("child", boxed_node)?,
                timeout: fields.optional("timeout", |value, path| {
                    number(value, path, Min::Above(0.0))
                })?,
                layers: fields
                    .optional("layers", |value, path| items(value, path, 1, non_empty))?,
            })
        }
        "withContext" => {
            fields.check(
                &["kind", "id", "child", "layers"],
                &["id", "child", "layers"],
            )?;
            WorkflowNode::WithContext(WithContextNode {
                id: fields.id()?,
                child: fields.get("child", boxed_node)?,
                layers: fields.get("layers", |value, path| items(value, path, 1, non_empty))?,
            })
        }
        "loop" => {
            fields.check(
                &["kind", "id", "body", "until", "maxIterations"],
                &["id", "body", "until"],
            )?;
            WorkflowNode::Loop(LoopNode {
                id: fields.id()?,
                body: fields.get("body", boxed_node)?,
                until: fields.get("until", until)?,
                max_iterations: fields.optional("maxIterations", positive_integer)?,
            })
        }
        "sequence" => {
            fields.check(&["kind", "id", "steps"], &["id", "steps"])?;
            WorkflowNode::Sequence(SequenceNode {
                id: fields.id()?,
                steps: fields.get("steps", |value, path| items(value, path, 1, node))?,
            })
        }
        "schedule" => {
            let allowed = ["kind", "id", "step", "interval", "onError"];
            fields.check(&allowed, &["id", "step", "interval"])?;
            WorkflowNode::Schedule(ScheduleNode {
                id: fields.id()?,
                step: fields.get("step", boxed_node)?,
                interval: fields.get("interval", |value, path| {
                    number(value, path, Min::AtLeast(0.0))
                })?,
                on_error: fields.optional("onError", |value, path| {
                    Ok(match choice(value, path, &["continue", "fail"])? {
                        "fail" => ScheduleErrorMode::Fail,
                        _ => ScheduleErrorMode::Continue,
                    })
                })?,
            })
        }
        "subflow" => {
            fields.check(&["kind", "id", "document", "ref", "input"], &["id"])?;
            let document = fields.optional("document", |value, path| {
                document(value, path).map(Box::new)
            })?;
            let reference = fields.optional("ref", non_empty)?;
            match (&document, &reference) {
                (Some(_), Some(_)) => {
                    return Err(invalid(
                        join(path, "ref"),
                        "give either `document` or `ref`, not both",
                    ));
                }
                (None, None) => {
                    return Err(invalid(
                        path,
                        "a subflow needs `document` (inline) or `ref` (a registered name)",
                    ));
                }
                _ => {}
            }
            WorkflowNode::Subflow(SubflowNode {
                id: fields.id()?,
                document,
                reference,
                input: fields.optional("input", string)?,
            })
        }
        "acp-agent" => {
            fields.check(acp::FIELDS, &["id", "agent"])?;
            WorkflowNode::AcpAgent(AcpAgentNode {
                id: fields.id()?,
                config: acp::parse(&fields)?,
            })
        }
        other => {
            return Err(invalid(
                join(path, "kind"),
                format!(
                    "unknown node kind `{other}`; expected one of {}",
                    NODE_KINDS.join(", ")
                ),
            ));
        }
    };
    Ok(node)
}

fn boxed_node(value: &Value, path: &str) -> Result<Box<WorkflowNode>> {
    node(value, path).map(Box::new)
}

fn in_parallel(fields: &Fields<'_>) -> Result<WorkflowNode> {
    let path = fields.path;
    let mode = match fields.get("mode", |value, path| {
        choice(value, path, &["race", "all", "settle"])
    })? {
        "race" => ParallelMode::Race,
        "settle" => ParallelMode::Settle,
        _ => ParallelMode::All,
    };
    let paths = fields.optional("paths", |value, path| items(value, path, 1, node))?;
    let each = fields.optional("each", boxed_node)?;
    let over = fields.optional("over", non_empty)?;
    let merge = fields.optional("merge", |value, path| {
        Ok(match choice(value, path, &["last", "first", "concat"])? {
            "first" => MergeStrategy::First,
            "concat" => MergeStrategy::Concat,
            _ => MergeStrategy::Last,
        })
    })?;
    match (&paths, &each) {
        (Some(_), Some(_)) => {
            return Err(invalid(
                join(path, "each"),
                "give either `paths` or `each`, not both",
            ));
        }
        (None, None) => {
            return Err(invalid(path, "an inParallel needs `paths` or `each`"));
        }
        _ => {}
    }
    if over.is_some() && each.is_none() {
        return Err(invalid(
            join(path, "over"),
            "`over` only applies with `each`",
        ));
    }
    if mode == ParallelMode::Race && merge.is_some() {
        return Err(invalid(
            join(path, "merge"),
            "`merge` does not apply to race mode (the winner's output is the output)",
        ));
    }
    Ok(WorkflowNode::InParallel(InParallelNode {
        id: fields.id()?,
        mode,
        paths,
        each,
        over,
        merge,
        concurrency: fields.optional("concurrency", positive_integer)?,
    }))
}

fn tool_ref(value: &Value, path: &str) -> Result<ToolRef> {
    let fields = Fields::new(value, path, "a tool reference (an object with `type`)")?;
    fields.check(&["type", "parameters"], &["type"])?;
    Ok(ToolRef {
        name: fields.get("type", non_empty)?,
        parameters: fields.optional("parameters", object)?,
    })
}

fn params(value: &Value, path: &str) -> Result<ModelParamsNode> {
    let fields = Fields::new(value, path, "an object of model parameters")?;
    fields.check(&["temperature", "topP", "maxTokens", "stopSequences"], &[])?;
    Ok(ModelParamsNode {
        temperature: fields.optional("temperature", |value, path| {
            number(value, path, Min::AtLeast(0.0))
        })?,
        top_p: fields.optional("topP", |value, path| {
            let top_p = number(value, path, Min::AtLeast(0.0))?;
            if top_p > 1.0 {
                return Err(invalid(path, "expected a number between 0 and 1"));
            }
            Ok(top_p)
        })?,
        max_tokens: fields.optional("maxTokens", positive_integer)?,
        stop_sequences: fields
            .optional("stopSequences", |value, path| items(value, path, 0, string))?,
    })
}

fn output_codec(value: &Value, path: &str) -> Result<OutputCodecNode> {
    let fields = Fields::new(
        value,
        path,
        "an output codec (an object with `codec` and `library`)",
    )?;
    fields.check(&["codec", "library"], &["codec", "library"])?;
    Ok(OutputCodecNode {
        codec: fields.get("codec", |value, path| {
            choice(value, path, &["openui"]).map(str::to_owned)
        })?,
        library: fields.get("library", non_empty)?,
    })
}

fn retry(value: &Value, path: &str) -> Result<RetryNode> {
    let fields = Fields::new(value, path, "a retry policy (an object)")?;
    let allowed = ["maxAttempts", "backoff", "initialDelay", "maxDelay"];
    fields.check(&allowed, &["maxAttempts", "backoff", "initialDelay"])?;
    let backoff = fields.get("backoff", |value, path| {
        choice(value, path, &["fixed", "linear", "exponential"])
    })?;
    Ok(RetryNode {
        max_attempts: fields.get("maxAttempts", positive_integer)?,
        backoff: match backoff {
            "linear" => BackoffKind::Linear,
            "exponential" => BackoffKind::Exponential,
            _ => BackoffKind::Fixed,
        },
        initial_delay: fields.get("initialDelay", |value, path| {
            number(value, path, Min::AtLeast(0.0))
        })?,
        max_delay: fields.optional("maxDelay", |value, path| {
            number(value, path, Min::AtLeast(0.0))
        })?,
    })
}

fn route(value: &Value, path: &str) -> Result<Route> {
    let fields = Fields::new(value, path, "a route (an object with `match` and `target`)")?;
    fields.check(&["match", "target"], &["match", "target"])?;
    Ok(Route {
        matches: fields.get("match", non_empty)?,
        target: fields.get("target", node)?,
    })
}

/// Parses an until predicate at `path`.
fn until(value: &Value, path: &str) -> Result<UntilPredicate> {
    check_nesting(path)?;
    let fields = Fields::new(value, path, "an until predicate (an object with `kind`)")?;
    let kind = fields.kind()?;
    if !UNTIL_KINDS.contains(&kind) {
        return Err(invalid(
            join(path, "kind"),
            format!(
                "unknown until predicate `{kind}`; expected one of {}",
                UNTIL_KINDS.join(", ")
            ),
        ));
    }
    let predicates = |fields: &Fields<'_>| {
        fields.check(&["kind", "predicates"], &["predicates"])?;
        fields.get("predicates", |value, path| items(value, path, 1, until))
    };
    Ok(match kind {
        "maxSteps" => {
            fields.check(&["kind", "n"], &["n"])?;
            UntilPredicate::MaxSteps {
                n: fields.get("n", positive_integer)?,
            }
        }
        "maxCost" => {
            fields.check(&["kind", "usd"], &["usd"])?;
            UntilPredicate::MaxCost {
                usd: fields.get("usd", |value, path| number(value, path, Min::Above(0.0)))?,
            }
        }
        "maxDuration" => {
            fields.check(&["kind", "duration"], &["duration"])?;
            UntilPredicate::MaxDuration {
                duration: fields.get("duration", |value, path| {
                    number(value, path, Min::Above(0.0))
                })?,
            }
        }
        "noToolCalls" => {
            fields.check(&["kind"], &[])?;
            UntilPredicate::NoToolCalls
        }
        "never" => {
            fields.check(&["kind"], &[])?;
            UntilPredicate::Never
        }
        "outputContains" => {
            fields.check(&["kind", "marker"], &["marker"])?;
            UntilPredicate::OutputContains {
                marker: fields.get("marker", non_empty)?,
            }
        }
        "outputEquals" => {
            fields.check(&["kind", "sentinel"], &["sentinel"])?;
            UntilPredicate::OutputEquals {
                sentinel: fields.get("sentinel", non_empty)?,
            }
        }
        "converged" => {
            fields.check(&["kind", "threshold"], &[])?;
            UntilPredicate::Converged {
                threshold: fields.optional("threshold", |value, path| {
                    let threshold = number(value, path, Min::AtLeast(0.0))?;
                    if threshold > 1.0 {
                        return Err(invalid(path, "expected a number between 0 and 1"));
                    }
                    Ok(threshold)
                })?,
            }
        }
        "any" => UntilPredicate::Any {
            predicates: predicates(&fields)?,
        },
        _ => UntilPredicate::All {
            predicates: predicates(&fields)?,
        },
    })
}
