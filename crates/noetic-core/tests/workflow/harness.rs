//! `AgentHarness::parse_and_run_workflow`: the registry on the harness, the harness's own tools, and
//! dispatch through `run()` (hooks and events included).

use std::sync::{Arc, Mutex};

use noetic_core::workflow::{WorkflowDocument, WorkflowRegistry};
use noetic_core::{AgentHooks, ContextOptions};
use noetic_test_support::{EventLog, harness_with};
use serde_json::json;

use crate::support::{answering, assert_invalid, doc, echo_tool, registry};

#[tokio::test]
async fn the_harness_tools_resolve_names_the_registry_lacks() {
    let model = answering("unused");
    let harness = harness_with("wf", &model)
        .tool(echo_tool())
        .workflow_registry(WorkflowRegistry::new())
        .build()
        .unwrap();
    let ctx = harness.create_context(ContextOptions::default());
    let document = doc(
        json!({ "kind": "invokeTool", "id": "t", "toolName": "echo", "args": { "text": "from the harness" } }),
    );
    let output = harness
        .parse_and_run_workflow(document, json!({}), &ctx)
        .await
        .unwrap();
    assert_eq!(output, json!("from the harness"));
    let missing = doc(json!({ "kind": "invokeTool", "id": "t", "toolName": "ghost" }));
    let error = harness
        .parse_and_run_workflow(missing, json!({}), &ctx)
        .await
        .unwrap_err();
    assert_invalid(
        &error,
        "/root/toolName",
        "unknown tool `ghost` (registered: `echo`)",
    );
}

#[tokio::test]
async fn every_document_form_is_accepted() {
    let model = answering("unused");
    let harness = harness_with("wf", &model)
        .workflow_registry(registry())
        .build()
        .unwrap();
    let ctx = harness.create_context(ContextOptions::default());
    let value = doc(json!({ "kind": "runCode", "id": "u", "execute": "upper" }));
    let text = value.to_string();
    let parsed = WorkflowDocument::from_value(value.clone()).unwrap();
    assert_eq!(
        harness
            .parse_and_run_workflow(text.as_str(), json!("a"), &ctx)
            .await
            .unwrap(),
        json!("A")
    );
    assert_eq!(
        harness
            .parse_and_run_workflow(text.clone(), json!("b"), &ctx)
            .await
            .unwrap(),
        json!("B")
    );
    assert_eq!(
        harness
            .parse_and_run_workflow(&text, json!("c"), &ctx)
            .await
            .unwrap(),
        json!("C")
    );
    assert_eq!(
        harness
            .parse_and_run_workflow(&value, json!("d"), &ctx)
            .await
            .unwrap(),
        json!("D")
    );
    assert_eq!(
        harness
            .parse_and_run_workflow(&parsed, json!("e"), &ctx)
            .await
            .unwrap(),
        json!("E")
    );
    assert_eq!(
        harness
            .parse_and_run_workflow(parsed, json!("f"), &ctx)
            .await
            .unwrap(),
        json!("F")
    );
    assert!(harness.workflow_registry().has_code("upper"));
}

#[tokio::test]
async fn workflows_run_through_the_interpreter_with_hooks_and_events() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let hooks = AgentHooks::new().before_step({
        let seen = seen.clone();
        move |step, _ctx| {
            let seen = seen.clone();
            async move { seen.lock().unwrap().push(step.id().to_owned()) }
        }
    });
    let model = answering("unused");
    let harness = harness_with("wf", &model)
        .hooks(hooks)
        .workflow_registry(registry())
        .build()
        .unwrap();
    let log = EventLog::new();
    let ctx = harness.create_context(ContextOptions::new().event_sink(log.sink()));
    let document = doc(json!({
        "kind": "sequence", "id": "s",
        "steps": [
            { "kind": "runCode", "id": "first", "execute": "upper" },
            { "kind": "subflow", "id": "sub", "ref": "finisher", "input": "fixed" }
        ]
    }));
    let output = harness
        .parse_and_run_workflow(document, json!("x"), &ctx)
        .await
        .unwrap();
    assert_eq!(output, json!("fixed."));
    assert_eq!(
        *seen.lock().unwrap(),
        ["s", "first", "sub", "sub/input", "finish"]
    );
    assert!(log.framework_types().contains(&"step_started"));
    assert_eq!(ctx.step_count(), 5);
}

#[tokio::test]
async fn a_cancelled_context_surfaces_cancelled() {
    let model = answering("unused");
    let harness = harness_with("wf", &model)
        .workflow_registry(registry())
        .build()
        .unwrap();
    let ctx = harness.create_context(ContextOptions::default());
    ctx.abort(Some("stop".to_owned()));
    let document = doc(json!({ "kind": "runCode", "id": "u", "execute": "upper" }));
    let error = harness
        .parse_and_run_workflow(document, json!("x"), &ctx)
        .await
        .unwrap_err();
    assert_eq!(error.code(), "CANCELLED");
}

#[tokio::test]
async fn an_endless_schedule_ends_with_cancelled() {
    // Without schedule_max_runs a schedule runs until the context is cancelled.
    let model = answering("unused");
    let harness = harness_with("wf", &model)
        .workflow_registry(registry())
        .build()
        .unwrap();
    let ctx = harness.create_context(ContextOptions::default());
    let document = doc(json!({
        "kind": "schedule", "id": "forever", "interval": 1,
        "step": { "kind": "runCode", "id": "tick", "execute": "identity" }
    }));
    let canceller = {
        let ctx = ctx.clone();
        async move {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            ctx.abort(Some("enough".to_owned()));
        }
    };
    let (result, ()) = tokio::join!(
        harness.parse_and_run_workflow(document, json!(1), &ctx),
        canceller
    );
    assert_eq!(result.unwrap_err().code(), "CANCELLED");
}

#[test]
fn parse_and_run_workflow_is_send() {
    fn assert_send<T: Send>(_: &T) {}
    let model = answering("unused");
    let harness = harness_with("wf", &model).build().unwrap();
    let ctx = harness.create_context(ContextOptions::default());
    let future = harness.parse_and_run_workflow("{}", json!(null), &ctx);
    assert_send(&future);
}
