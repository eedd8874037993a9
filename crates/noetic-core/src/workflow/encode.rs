//! Writing a workflow document back to JSON, in the original's format, and `serde` support through
//! that JSON form. [`WorkflowDocument::from_value`] reads what [`WorkflowDocument::to_value`] writes back
//! to an equal document.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value, json};

use super::document::{
    BackoffKind, ConnectionKind, MergeStrategy, ModelParamsNode, ParallelMode, RetryNode,
    ScheduleErrorMode, ToolRef, UntilPredicate, WorkflowDocument, WorkflowNode,
};

impl WorkflowDocument {
    /// The document as JSON, in the original's format.
    pub fn to_value(&self) -> Value {
        let mut map = Map::new();
        if let Some(schema) = &self.schema {
            map.insert("$schema".to_owned(), Value::from(schema.as_str()));
        }
        map.insert("version".to_owned(), Value::from(self.version));
        if let Some(connections) = &self.connections {
            let declared: Map<String, Value> = connections
                .iter()
                .map(|connection| (connection.name.clone(), connection.kind.to_value()))
                .collect();
            map.insert("connections".to_owned(), Value::Object(declared));
        }
        map.insert("root".to_owned(), self.root.to_value());
        Value::Object(map)
    }

    /// The document as JSON text (pretty-printed).
    pub fn to_json_pretty(&self) -> String {
        // Serializing a `Value` whose keys are strings cannot fail.
        serde_json::to_string_pretty(&self.to_value()).unwrap_or_default()
    }
}

impl WorkflowNode {
    /// The node as JSON.
    pub fn to_value(&self) -> Value {
        let mut map = Map::new();
        map.insert("kind".to_owned(), Value::from(self.kind()));
        map.insert("id".to_owned(), Value::from(self.id()));
        let mut put = |key: &str, value: Option<Value>| {
            if let Some(value) = value {
                map.insert(key.to_owned(), value);
            }
        };
        let nodes =
            |nodes: &[WorkflowNode]| Value::Array(nodes.iter().map(Self::to_value).collect());
        let strings = |names: &[String]| json!(names);
        match self {
            WorkflowNode::CallModel(node) => {
                put("model", node.model.as_deref().map(Value::from));
                put(
                    "instructions",
                    Some(Value::from(node.instructions.as_str())),
                );
                put(
                    "tools",
                    node.tools
                        .as_ref()
                        .map(|tools| Value::Array(tools.iter().map(ToolRef::to_value).collect())),
                );
                put(
                    "params",
                    node.params.as_ref().map(ModelParamsNode::to_value),
                );
                put(
                    "output",
                    node.output
                        .as_ref()
                        .map(|output| json!({ "codec": output.codec, "library": output.library })),
                );
            }
            WorkflowNode::InvokeTool(node) => {
                put("toolName", Some(Value::from(node.tool_name.as_str())));
                put("args", node.args.clone().map(Value::Object));
            }
            WorkflowNode::RunCode(node) => {
                put("execute", Some(Value::from(node.execute.as_str())));
                put("retry", node.retry.as_ref().map(RetryNode::to_value));
                put("subprocess", node.subprocess.as_deref().map(Value::from));
            }
            WorkflowNode::Conditional(node) => {
                let routes = node
                    .routes
                    .iter()
                    .map(|route| json!({ "match": route.matches, "target": route.target.to_value() }))
                    .collect();
                put("routes", Some(Value::Array(routes)));
                put("default", node.default.as_deref().map(Self::to_value));
            }
            WorkflowNode::InParallel(node) => {
                put("mode", Some(Value::from(node.mode.as_str())));
                put("paths", node.paths.as_deref().map(nodes));
                put("each", node.each.as_deref().map(Self::to_value));
                put("over", node.over.as_deref().map(Value::from));
                put("merge", node.merge.map(|merge| Value::from(merge.as_str())));
                put("concurrency", node.concurrency.map(Value::from));
            }
            WorkflowNode::Spawn(node) => {
                put("child", Some(node.child.to_value()));
                put("timeout", node.timeout.map(Value::from));
                put("layers", node.layers.as_deref().map(strings));
            }
            WorkflowNode::WithContext(node) => {
                put("child", Some(node.child.to_value()));
                put("layers", Some(strings(&node.layers)));
            }
            WorkflowNode::Loop(node) => {
                put("body", Some(node.body.to_value()));
                put("until", Some(node.until.to_value()));
                put("maxIterations", node.max_iterations.map(Value::from));
            }
            WorkflowNode::Sequence(node) => put("steps", Some(nodes(&node.steps))),
            WorkflowNode::Schedule(node) => {
                put("step", Some(node.step.to_value()));
                put("interval", Some(Value::from(node.interval)));
                put(
                    "onError",
                    node.on_error.map(|mode| Value::from(mode.as_str())),
                );
            }
            WorkflowNode::Subflow(node) => {
                put(
                    "document",
                    node.document.as_deref().map(WorkflowDocument::to_value),
                );
                put("ref", node.reference.as_deref().map(Value::from));
                put("input", node.input.as_deref().map(Value::from));
            }
            WorkflowNode::AcpAgent(node) => super::acp::encode(&node.config, &mut map),
        }
        Value::Object(map)
    }
}

impl ConnectionKind {
    fn to_value(&self) -> Value {
        match self {
            ConnectionKind::Mcp(mcp) => {
                let mut map = Map::new();
                map.insert("type".to_owned(), Value::from("mcp"));
                if let Some(command) = &mcp.command {
                    map.insert("command".to_owned(), json!(command));
                }
                if let Some(url) = &mcp.url {
                    map.insert("url".to_owned(), Value::from(url.as_str()));
                }
                if !mcp.pass_env.is_empty() {
                    map.insert("passEnv".to_owned(), json!(mcp.pass_env));
                }
                if let Some(allow) = &mcp.allow_tools {
                    map.insert("allowTools".to_owned(), json!(allow));
                }
                if !mcp.deny_tools.is_empty() {
                    map.insert("denyTools".to_owned(), json!(mcp.deny_tools));
                }
                Value::Object(map)
            }
        }
    }
}

impl ToolRef {
    fn to_value(&self) -> Value {
        let mut map = Map::new();
        map.insert("type".to_owned(), Value::from(self.name.as_str()));
        if let Some(parameters) = &self.parameters {
            map.insert("parameters".to_owned(), Value::Object(parameters.clone()));
        }
        Value::Object(map)
    }
}

impl ModelParamsNode {
    fn to_value(&self) -> Value {
        let mut map = Map::new();
        if let Some(temperature) = self.temperature {
            map.insert("temperature".to_owned(), Value::from(temperature));
        }
        if let Some(top_p) = self.top_p {
            map.insert("topP".to_owned(), Value::from(top_p));
        }
        if let Some(max_tokens) = self.max_tokens {
            map.insert("maxTokens".to_owned(), Value::from(max_tokens));
        }
        if let Some(stop) = &self.stop_sequences {
            map.insert("stopSequences".to_owned(), json!(stop));
        }
        Value::Object(map)
    }
}

impl RetryNode {
    fn to_value(&self) -> Value {
        let mut map = Map::new();
        map.insert("maxAttempts".to_owned(), Value::from(self.max_attempts));
        map.insert("backoff".to_owned(), Value::from(self.backoff.as_str()));
        map.insert("initialDelay".to_owned(), Value::from(self.initial_delay));
        if let Some(max_delay) = self.max_delay {
            map.insert("maxDelay".to_owned(), Value::from(max_delay));
        }
        Value::Object(map)
    }
}

impl UntilPredicate {
    /// The predicate as JSON.
    pub fn to_value(&self) -> Value {
        let kind = self.kind();
        match self {
            UntilPredicate::MaxSteps { n } => json!({ "kind": kind, "n": n }),
            UntilPredicate::MaxCost { usd } => json!({ "kind": kind, "usd": usd }),
            UntilPredicate::MaxDuration { duration } => {
                json!({ "kind": kind, "duration": duration })
            }
            UntilPredicate::NoToolCalls | UntilPredicate::Never => json!({ "kind": kind }),
            UntilPredicate::OutputContains { marker } => json!({ "kind": kind, "marker": marker }),
            UntilPredicate::OutputEquals { sentinel } => {
                json!({ "kind": kind, "sentinel": sentinel })
            }
            UntilPredicate::Converged { threshold: None } => json!({ "kind": kind }),
            UntilPredicate::Converged {
                threshold: Some(threshold),
            } => json!({ "kind": kind, "threshold": threshold }),
            UntilPredicate::Any { predicates } | UntilPredicate::All { predicates } => {
                let predicates: Vec<Value> = predicates.iter().map(Self::to_value).collect();
                json!({ "kind": kind, "predicates": predicates })
            }
        }
    }
}

impl BackoffKind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            BackoffKind::Fixed => "fixed",
            BackoffKind::Linear => "linear",
            BackoffKind::Exponential => "exponential",
        }
    }
}

impl ParallelMode {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ParallelMode::All => "all",
            ParallelMode::Race => "race",
            ParallelMode::Settle => "settle",
        }
    }
}

impl MergeStrategy {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            MergeStrategy::Last => "last",
            MergeStrategy::First => "first",
            MergeStrategy::Concat => "concat",
        }
    }
}

impl ScheduleErrorMode {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ScheduleErrorMode::Continue => "continue",
            ScheduleErrorMode::Fail => "fail",
        }
    }
}

impl Serialize for WorkflowDocument {
    fn serialize<S: Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        self.to_value().serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for WorkflowDocument {
    /// Deserializes through [`WorkflowDocument::from_value`]; the error message carries the pointer.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        WorkflowDocument::from_value(value).map_err(D::Error::custom)
    }
}
