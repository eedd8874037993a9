//! Shared helpers: a registry of code steps, tools and layers, a harness around it, and checks.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use noetic_core::workflow::{HydrateOptions, WorkflowDocument, WorkflowRegistry};
use noetic_core::{
    AgentHarness, Context, ContextLayer, ContextOptions, Error, Result, Tool, ToolContext,
};
use noetic_test_support::{ScriptedModel, ScriptedResponse, harness_with};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

/// A layer that does nothing but carry an id.
pub(crate) struct NamedLayer(pub(crate) &'static str);

impl ContextLayer for NamedLayer {
    fn id(&self) -> &str {
        self.0
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct EchoArgs {
    pub(crate) text: String,
}

/// `echo`: returns its `text` argument.
pub(crate) fn echo_tool() -> Tool {
    Tool::new(
        "echo",
        "Echo the text back",
        |args: EchoArgs, _ctx: ToolContext| async move { Ok(args.text) },
    )
}

/// The registry the tests share; `flaky` fails its first call (per registry).
pub(crate) fn registry() -> WorkflowRegistry {
    let flaky_calls = Arc::new(AtomicU32::new(0));
    WorkflowRegistry::new()
        .code("upper", |text: String, _: Context| async move {
            Ok::<_, std::convert::Infallible>(text.to_uppercase())
        })
        .code("prepare", |text: String, _: Context| async move {
            Ok::<_, std::convert::Infallible>(json!({ "text": text, "items": ["a", "b"] }))
        })
        .code("append-dot", |text: String, _: Context| async move {
            Ok::<_, std::convert::Infallible>(format!("{text}."))
        })
        .code("count", |n: i64, _: Context| async move {
            Ok::<_, std::convert::Infallible>(n + 1)
        })
        .code("same", |_: Value, _: Context| async move {
            Ok::<_, std::convert::Infallible>("steady".to_owned())
        })
        .code("identity", |input: Value, _: Context| async move {
            Ok::<_, std::convert::Infallible>(input)
        })
        .code("layer-ids", |_: Value, ctx: Context| async move {
            let ids: Vec<String> = ctx
                .layers()
                .iter()
                .map(|layer| layer.id().to_owned())
                .collect();
            Ok::<_, std::convert::Infallible>(ids)
        })
        .code("sleep", |input: Value, _: Context| async move {
            tokio::time::sleep(Duration::from_secs(10)).await;
            Ok::<_, std::convert::Infallible>(input)
        })
        .code("nap", |n: i64, _: Context| async move {
            tokio::time::sleep(Duration::from_millis(10)).await;
            Ok::<_, std::convert::Infallible>(n + 1)
        })
        .code("fail", |_: Value, _: Context| async move {
            Err::<Value, _>("boom".to_owned())
        })
        .code("flaky", move |input: Value, _: Context| {
            let calls = flaky_calls.clone();
            async move {
                if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                    Err("first call fails".to_owned())
                } else {
                    Ok(input)
                }
            }
        })
        .tool(echo_tool())
        .layer("audit", Arc::new(NamedLayer("audit")))
        .layer("memory", Arc::new(NamedLayer("memory")))
        .document(
            "finisher",
            WorkflowDocument::from_value(doc(json!({
                "kind": "runCode", "id": "finish", "execute": "append-dot"
            })))
            .expect("finisher parses"),
        )
}

/// A model answering every request with `answer`.
pub(crate) fn answering(answer: &'static str) -> ScriptedModel {
    ScriptedModel::responding(move |_| ScriptedResponse::text(answer))
}

/// A harness over `model` and `registry`, and a root context.
pub(crate) fn harness(
    model: &ScriptedModel,
    registry: WorkflowRegistry,
) -> (AgentHarness, Context) {
    let harness = harness_with("workflow", model)
        .workflow_registry(registry)
        .build()
        .expect("harness builds");
    let ctx = harness.create_context(ContextOptions::default());
    (harness, ctx)
}

/// Parses, hydrates and runs `document` on a fresh harness with the shared registry (schedules end
/// after two runs).
pub(crate) async fn run(document: Value, input: Value) -> Result<Value> {
    run_with(&answering("model answer"), document, input).await
}

/// As [`run`], with `model`.
pub(crate) async fn run_with(
    model: &ScriptedModel,
    document: Value,
    input: Value,
) -> Result<Value> {
    let registry = registry().options(HydrateOptions::new().schedule_max_runs(2));
    let (harness, ctx) = harness(model, registry);
    harness.parse_and_run_workflow(document, input, &ctx).await
}

/// A version-1 document around `root`.
pub(crate) fn doc(root: Value) -> Value {
    json!({ "version": 1, "root": root })
}

/// Asserts that `error` is `WORKFLOW_INVALID` at exactly `path`, its message containing `message`.
pub(crate) fn assert_invalid(error: &Error, path: &str, message: &str) {
    assert_eq!(error.code(), "WORKFLOW_INVALID", "{error}");
    match error {
        Error::WorkflowInvalid {
            path: actual,
            message: actual_message,
        } => {
            assert_eq!(actual, path, "pointer of: {actual_message}");
            assert!(
                actual_message.contains(message),
                "message {actual_message:?} lacks {message:?}"
            );
        }
        other => panic!("expected WorkflowInvalid, got {other:?}"),
    }
}

/// Parses and hydrates `document` against the shared registry; returns the error.
pub(crate) fn hydrate_error(document: Value, options: &HydrateOptions) -> Error {
    match WorkflowDocument::from_value(document) {
        Err(error) => error,
        Ok(document) => document
            .hydrate(&registry(), options)
            .expect_err("the document should not hydrate"),
    }
}

/// The fixtures directory of these tests.
pub(crate) fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/workflow/fixtures")
}

/// A fixture parsed as JSON.
pub(crate) fn fixture(name: &str) -> Value {
    let text = std::fs::read_to_string(fixtures().join(name)).expect("fixture exists");
    serde_json::from_str(&text).expect("fixture is JSON")
}

/// A document that uses every node kind the hydrator supports, and every field they have (bar the
/// refused ones). Runs against [`registry`] with a default model.
pub(crate) fn every_kind_document() -> Value {
    doc(json!({
        "kind": "sequence",
        "id": "all-kinds",
        "steps": [
            {
                "kind": "runCode", "id": "prepare", "execute": "prepare",
                "retry": { "maxAttempts": 2, "backoff": "exponential", "initialDelay": 1, "maxDelay": 10 }
            },
            {
                "kind": "inParallel", "id": "fan-out", "mode": "all", "merge": "concat",
                "each": { "kind": "runCode", "id": "shout", "execute": "upper" },
                "over": "/items", "concurrency": 2
            },
            {
                "kind": "conditional", "id": "route",
                "routes": [
                    {
                        "match": "a",
                        "target": {
                            "kind": "withContext", "id": "with-audit", "layers": ["audit"],
                            "child": {
                                "kind": "spawn", "id": "isolated", "timeout": 5000, "layers": ["memory"],
                                "child": {
                                    "kind": "callModel", "id": "summarise", "model": "scripted/model",
                                    "instructions": "Summarise.",
                                    "tools": [{ "type": "echo" }],
                                    "params": { "temperature": 0.2, "topP": 0.9, "maxTokens": 100, "stopSequences": ["END"] }
                                }
                            }
                        }
                    }
                ],
                "default": { "kind": "runCode", "id": "fallback", "execute": "upper" }
            },
            {
                "kind": "loop", "id": "refine", "maxIterations": 10,
                "body": { "kind": "runCode", "id": "append", "execute": "append-dot" },
                "until": {
                    "kind": "any",
                    "predicates": [
                        { "kind": "outputContains", "marker": "..." },
                        { "kind": "all", "predicates": [{ "kind": "maxSteps", "n": 5 }, { "kind": "noToolCalls" }] },
                        { "kind": "maxCost", "usd": 1.5 },
                        { "kind": "maxDuration", "duration": 60000 },
                        { "kind": "outputEquals", "sentinel": "DONE" },
                        { "kind": "converged", "threshold": 1 },
                        { "kind": "never" }
                    ]
                }
            },
            {
                "kind": "inParallel", "id": "panel", "mode": "settle", "merge": "first",
                "paths": [
                    { "kind": "runCode", "id": "broken", "execute": "fail" },
                    { "kind": "invokeTool", "id": "echo-it", "toolName": "echo", "args": { "text": "echoed" } }
                ]
            },
            {
                "kind": "schedule", "id": "tick", "interval": 1, "onError": "continue",
                "step": { "kind": "runCode", "id": "tock", "execute": "identity" }
            },
            {
                "kind": "subflow", "id": "inline", "input": "from the subflow",
                "document": {
                    "version": 1,
                    "root": { "kind": "runCode", "id": "inner-upper", "execute": "upper" }
                }
            },
            { "kind": "subflow", "id": "by-name", "ref": "finisher" }
        ]
    }))
}
