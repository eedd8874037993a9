//! Hydration: a [`WorkflowDocument`] turned into a `Step<Value, Value>` with the public step builders,
//! every name resolved against a [`WorkflowRegistry`] first, so that nothing runs if a name is unknown.
//!
//! The semantics chosen for each node kind are documented in the module docs (`workflow/mod.rs`) and
//! in `docs/workflows.md`.

use std::borrow::Cow;
use std::convert::Infallible;
use std::sync::Arc;

use serde_json::Value;

use super::document::{
    CallModelNode, RunCodeNode, ScheduleErrorMode, SubflowNode, WORKFLOW_VERSION, WorkflowDocument,
    WorkflowNode,
};
use super::fields::{invalid, join};
use super::predicates::{self, millis};
use super::registry::{HydrateOptions, WorkflowRegistry};
use crate::context::Context;
use crate::layer::ContextLayer;
use crate::model::ModelParams;
use crate::step::{
    Backoff, RetryPolicy, ScheduleOnError, Step, acp_agent, call_model, conditional, invoke_tool,
    loop_step, run_code, schedule, sequence, spawn, with_context,
};
use crate::tool::Tool;
use crate::{Error, Result};

/// A workflow step: JSON in, JSON out.
pub type WorkflowStep = Step<Value, Value>;

impl WorkflowDocument {
    /// Turns the document into a step tree, resolving every name against `registry`.
    ///
    /// # Errors
    /// [`Error::WorkflowInvalid`] with the JSON pointer of the first node or field that names something
    /// unknown (tool, code step, layer, subflow document, subprocess adapter), needs a missing model
    /// (`MISSING_MODEL` in the message), uses a feature that is not supported (output codecs, tool
    /// parameters, `converged` thresholds below 1) or, for an `acp-agent` node built in code, holds
    /// a configuration its step would refuse (see [`super::AcpAgentNode`]).
    ///
    /// # Examples
    /// ```
    /// use noetic_core::{AgentHarness, Context, ContextOptions};
    /// use noetic_core::workflow::{HydrateOptions, WorkflowDocument, WorkflowRegistry};
    /// use serde_json::json;
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let registry = WorkflowRegistry::new().code("double", |n: i64, _: Context| async move {
    ///     Ok::<_, std::convert::Infallible>(n * 2)
    /// });
    /// let document = WorkflowDocument::from_value(json!({
    ///     "version": 1,
    ///     "root": { "kind": "runCode", "id": "double", "execute": "double" }
    /// }))?;
    /// let step = document.hydrate(&registry, &HydrateOptions::default())?;
    /// let harness = AgentHarness::builder("calc").build()?;
    /// let ctx = harness.create_context(ContextOptions::default());
    /// assert_eq!(harness.run(&step, json!(21), &ctx).await?, json!(42));
    /// # Ok::<(), noetic_core::Error>(())
    /// # }).unwrap();
    /// ```
    pub fn hydrate(
        &self,
        registry: &WorkflowRegistry,
        options: &HydrateOptions,
    ) -> Result<WorkflowStep> {
        hydrate(self, registry, options, &[])
    }
}

/// Hydrates `document`; `extra_tools` (the harness's own) resolve names the registry lacks.
pub(crate) fn hydrate(
    document: &WorkflowDocument,
    registry: &WorkflowRegistry,
    options: &HydrateOptions,
    extra_tools: &[Tool],
) -> Result<WorkflowStep> {
    let hydrator = Arc::new(Hydrator {
        registry: registry.clone(),
        options: options.clone(),
        extra_tools: extra_tools.to_vec(),
    });
    hydrator.document(document, "", &mut Vec::new())
}

/// What hydration resolves against; shared with `each` paths, which are hydrated per element.
pub(super) struct Hydrator {
    registry: WorkflowRegistry,
    pub(super) options: HydrateOptions,
    extra_tools: Vec<Tool>,
}

pub(super) fn erase<I, O>(step: impl Into<Step<I, O>>) -> WorkflowStep {
    Step::from_arc(step.into().node)
}

fn known(names: impl Iterator<Item = impl AsRef<str>>) -> String {
    let names: Vec<String> = names.map(|name| format!("`{}`", name.as_ref())).collect();
    if names.is_empty() {
        "none are registered".to_owned()
    } else {
        format!("registered: {}", names.join(", "))
    }
}

/// A constant step: outputs `value` whatever its input.
pub(super) fn constant(id: String, value: Value) -> WorkflowStep {
    erase(run_code(id, move |_: Value, _: Context| {
        let value = value.clone();
        async move { Ok::<_, Infallible>(value) }
    }))
}

/// A value's text: a string as is, `null` as empty, an object's string `text` field, else its JSON.
pub(crate) fn text_of(value: &Value) -> Cow<'_, str> {
    match value {
        Value::String(text) => Cow::Borrowed(text),
        Value::Null => Cow::Borrowed(""),
        Value::Object(map) => match map.get("text") {
            Some(Value::String(text)) => Cow::Borrowed(text),
            _ => Cow::Owned(value.to_string()),
        },
        other => Cow::Owned(other.to_string()),
    }
}

impl Hydrator {
    fn document(
        self: &Arc<Self>,
        document: &WorkflowDocument,
        path: &str,
        refs: &mut Vec<String>,
    ) -> Result<WorkflowStep> {
        if document.version != WORKFLOW_VERSION {
            return Err(invalid(
                join(path, "version"),
                format!(
                    "unsupported version {}; expected {WORKFLOW_VERSION}",
                    document.version
                ),
            ));
        }
        self.node(&document.root, &join(path, "root"), refs)
    }

    pub(super) fn node(
        self: &Arc<Self>,
        node: &WorkflowNode,
        path: &str,
        refs: &mut Vec<String>,
    ) -> Result<WorkflowStep> {
        let child = |key: &str| join(path, key);
        Ok(match node {
            WorkflowNode::CallModel(node) => self.call_model(node, path)?,
            WorkflowNode::InvokeTool(node) => {
                let tool = self.tool(&node.tool_name, &child("toolName"))?;
                let builder = invoke_tool::<Value, Value>(node.id.as_str(), tool);
                match &node.args {
                    Some(args) => erase(builder.args(args)),
                    None => erase(builder),
                }
            }
            WorkflowNode::RunCode(node) => self.run_code(node, path)?,
            WorkflowNode::Conditional(node) => {
                let routes_path = child("routes");
                let mut routes = Vec::with_capacity(node.routes.len());
                for (index, route) in node.routes.iter().enumerate() {
                    let target_path = join(&join(&routes_path, &index.to_string()), "target");
                    let target = self.node(&route.target, &target_path, refs)?;
                    routes.push((route.matches.to_lowercase(), target));
                }
                let default = match &node.default {
                    Some(default) => Some(self.node(default, &child("default"), refs)?),
                    None => None,
                };
                erase(conditional(
                    node.id.as_str(),
                    move |input: &Value, _: &Context| {
                        let text = text_of(input).to_lowercase();
                        routes
                            .iter()
                            .find(|(needle, _)| text.contains(needle.as_str()))
                            .map(|(_, target)| target.clone())
                            .or_else(|| default.clone())
                    },
                ))
            }
            WorkflowNode::InParallel(node) => self.in_parallel(node, path, refs)?,
            WorkflowNode::Spawn(node) => {
                let body = self.node(&node.child, &child("child"), refs)?;
                let mut builder = spawn(node.id.as_str(), body);
                if let Some(timeout) = node.timeout {
                    builder = builder.timeout(millis(timeout, &child("timeout"))?);
                }
                if let Some(names) = &node.layers {
                    builder = builder.layers(self.layers(names, &child("layers"))?);
                }
                erase(builder)
            }
            WorkflowNode::WithContext(node) => {
                let body = self.node(&node.child, &child("child"), refs)?;
                let layers = self.layers(&node.layers, &child("layers"))?;
                with_context(node.id.as_str(), body, layers)
            }
            WorkflowNode::Loop(node) => {
                let body = self.node(&node.body, &child("body"), refs)?;
                let until = predicates::hydrate(&node.until, &child("until"))?;
                let mut builder = loop_step(node.id.as_str()).step(body).until(until);
                if let Some(max) = node.max_iterations {
                    let max = u32::try_from(max).map_err(|_| {
                        invalid(
                            child("maxIterations"),
                            format!("expected at most {}", u32::MAX),
                        )
                    })?;
                    builder = builder.max_iterations(max);
                }
                erase(builder)
            }
            WorkflowNode::Sequence(node) => {
                let steps_path = child("steps");
                let mut steps = node.steps.iter().enumerate().map(|(index, step)| {
                    self.node(step, &join(&steps_path, &index.to_string()), refs)
                });
                let first = match steps.next() {
                    Some(first) => first?,
                    None => return Err(invalid(steps_path, "expected at least 1 step")),
                };
                let mut builder = sequence(node.id.as_str()).step(first);
                for step in steps {
                    builder = builder.step(step?);
                }
                erase(builder)
            }
            WorkflowNode::Schedule(node) => {
                let body = self.node(&node.step, &child("step"), refs)?;
                let interval = millis(node.interval, &child("interval"))?;
                let mut builder =
                    schedule(node.id.as_str(), body, interval).on_error(match node.on_error {
                        Some(ScheduleErrorMode::Fail) => ScheduleOnError::Fail,
                        _ => ScheduleOnError::Continue,
                    });
                if let Some(runs) = self.options.schedule_max_runs {
                    builder = builder.max_runs(runs);
                }
                erase(builder)
            }
            WorkflowNode::Subflow(node) => self.subflow(node, path, refs)?,
            WorkflowNode::AcpAgent(node) => {
                // Parsing checked a parsed node already; a node built in code is checked here.
                // Whether a named agent is registered is left to the run: hydration does not see
                // the harness's runtime, where agents are registered.
                super::acp::check(&node.config, path)?;
                erase(acp_agent::<Value, Value>(node.id.as_str()).config(node.config.clone()))
            }
        })
    }

    fn call_model(&self, node: &CallModelNode, path: &str) -> Result<WorkflowStep> {
        if node.output.is_some() {
            return Err(invalid(
                join(path, "output"),
                "output codecs are not supported",
            ));
        }
        let model = match (&node.model, &self.options.default_model) {
            (Some(model), _) if model.trim().is_empty() => {
                return Err(invalid(
                    join(path, "model"),
                    "MISSING_MODEL: `model` is blank",
                ));
            }
            (Some(model), _) => model.clone(),
            (None, Some(model)) => model.clone(),
            (None, None) => {
                return Err(invalid(
                    path,
                    "MISSING_MODEL: no `model`, and no default model was given \
                     (HydrateOptions::default_model)",
                ));
            }
        };
        let mut tools = Vec::new();
        let mut sources = Vec::new();
        let tools_path = join(path, "tools");
        for (index, tool) in node.tools.iter().flatten().enumerate() {
            let entry_path = join(&tools_path, &index.to_string());
            if tool.parameters.is_some() {
                return Err(invalid(
                    join(&entry_path, "parameters"),
                    "tool parameters are not supported (tools are referenced by registered name)",
                ));
            }
            let name_path = join(&entry_path, "type");
            match self.registry.tool_source_named(&tool.name) {
                Some(_) if self.has_tool(&tool.name) => {
                    return Err(invalid(
                        name_path,
                        format!(
                            "`{}` names both a tool and a connection; rename one of them",
                            tool.name
                        ),
                    ));
                }
                Some(source) => sources.push(source.clone()),
                None => tools.push(self.tool(&tool.name, &name_path)?),
            }
        }
        let mut params = ModelParams::default();
        if let Some(given) = &node.params {
            params.temperature = given.temperature;
            params.top_p = given.top_p;
            params.max_output_tokens = given.max_tokens;
            params.stop = given.stop_sequences.clone().unwrap_or_default();
        }
        let mut builder = call_model(node.id.as_str())
            .model(model)
            .instructions(node.instructions.as_str())
            .tools(tools)
            .params(params);
        for source in sources {
            builder = builder.tools_from(source);
        }
        Ok(erase(builder))
    }

    fn run_code(&self, node: &RunCodeNode, path: &str) -> Result<WorkflowStep> {
        let subprocess = match &node.subprocess {
            Some(name) => match self.registry.subprocess_adapter(name) {
                Some(adapter) => Some(adapter.clone()),
                None => {
                    return Err(invalid(
                        join(path, "subprocess"),
                        format!(
                            "unknown subprocess adapter `{name}` ({})",
                            known(self.registry.subprocess_names())
                        ),
                    ));
                }
            },
            None => None,
        };
        let Some(factory) = self.registry.code_factory(&node.execute) else {
            return Err(invalid(
                join(path, "execute"),
                format!(
                    "unknown code step `{}` ({})",
                    node.execute,
                    known(self.registry.code_names())
                ),
            ));
        };
        let retry = match &node.retry {
            Some(retry) => {
                let retry_path = join(path, "retry");
                let backoff = match retry.backoff {
                    super::document::BackoffKind::Fixed => Backoff::Fixed,
                    super::document::BackoffKind::Linear => Backoff::Linear,
                    super::document::BackoffKind::Exponential => Backoff::Exponential,
                };
                let attempts = u32::try_from(retry.max_attempts).unwrap_or(u32::MAX);
                let initial = millis(retry.initial_delay, &join(&retry_path, "initialDelay"))?;
                let mut policy = RetryPolicy::new(attempts, backoff, initial);
                if let Some(max_delay) = retry.max_delay {
                    policy = policy.max_delay(millis(max_delay, &join(&retry_path, "maxDelay"))?);
                }
                Some(policy)
            }
            None => None,
        };
        Ok(factory(node.id.clone(), retry, subprocess))
    }

    fn subflow(
        self: &Arc<Self>,
        node: &SubflowNode,
        path: &str,
        refs: &mut Vec<String>,
    ) -> Result<WorkflowStep> {
        let body = match (&node.document, &node.reference) {
            (Some(document), _) => self.document(document, &join(path, "document"), refs)?,
            (None, Some(name)) => {
                let ref_path = join(path, "ref");
                if refs.contains(name) {
                    let mut chain = refs.clone();
                    chain.push(name.clone());
                    return Err(invalid(
                        ref_path,
                        format!("subflow reference cycle: {}", chain.join(" -> ")),
                    ));
                }
                let Some(document) = self.registry.document_named(name) else {
                    return Err(invalid(
                        ref_path,
                        format!(
                            "unknown workflow `{name}` ({})",
                            known(self.registry.document_names())
                        ),
                    ));
                };
                refs.push(name.clone());
                let hydrated = self.document(document, "", refs);
                refs.pop();
                hydrated.map_err(|error| match error {
                    Error::WorkflowInvalid {
                        path: inner,
                        message,
                    } => invalid(
                        ref_path.as_str(),
                        format!("in workflow `{name}` at `{inner}`: {message}"),
                    ),
                    other => other,
                })?
            }
            (None, None) => {
                return Err(invalid(
                    path,
                    "a subflow needs `document` (inline) or `ref` (a registered name)",
                ));
            }
        };
        let start = sequence(node.id.as_str());
        Ok(match &node.input {
            Some(input) => {
                let fixed = constant(format!("{}/input", node.id), Value::from(input.as_str()));
                erase(start.step(fixed).step(body))
            }
            None => erase(start.step(body)),
        })
    }

    fn has_tool(&self, name: &str) -> bool {
        self.registry.tool_named(name).is_some()
            || self.extra_tools.iter().any(|tool| tool.name() == name)
    }

    fn tool(&self, name: &str, path: &str) -> Result<Tool> {
        self.registry
            .tool_named(name)
            .or_else(|| self.extra_tools.iter().find(|tool| tool.name() == name))
            .cloned()
            .ok_or_else(|| {
                let names = self
                    .registry
                    .tool_names()
                    .chain(self.extra_tools.iter().map(Tool::name));
                let mut message = format!("unknown tool `{name}` ({})", known(names));
                let connections: Vec<String> = self
                    .registry
                    .tool_source_names()
                    .map(|name| format!("`{name}`"))
                    .collect();
                if !connections.is_empty() {
                    message.push_str(&format!("; connections: {}", connections.join(", ")));
                }
                invalid(path, message)
            })
    }

    fn layers(&self, names: &[String], path: &str) -> Result<Vec<Arc<dyn ContextLayer>>> {
        names
            .iter()
            .enumerate()
            .map(|(index, name)| {
                self.registry.layer_named(name).cloned().ok_or_else(|| {
                    invalid(
                        join(path, &index.to_string()),
                        format!(
                            "unknown layer `{name}` ({})",
                            known(self.registry.layer_names())
                        ),
                    )
                })
            })
            .collect()
    }
}
