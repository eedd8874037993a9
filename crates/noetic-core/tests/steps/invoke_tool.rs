//! `invoke_tool`: preset arguments, validation and events.

use std::collections::BTreeMap;

use noetic_core::{
    ContextOptions, FrameworkEvent, StepFailure, Tool, ToolContext, ToolError, invoke_tool,
};
use noetic_test_support::EventLog;
use serde_json::{Value, json};

use crate::support::{Record, harness, record, recorded, root, step_failure};

/// `{a, b}` integers → `{sum}`, recording the arguments it gets.
fn adder(seen: &Record<Value>) -> Tool {
    let seen = seen.clone();
    Tool::dynamic(
        "adder",
        "Adds a and b",
        json!({
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"]
        }),
        move |args: Value, _ctx: ToolContext| {
            seen.lock().unwrap().push(args.clone());
            async move {
                let sum =
                    args["a"].as_i64().unwrap_or_default() + args["b"].as_i64().unwrap_or_default();
                Ok::<_, ToolError>(json!({"sum": sum}))
            }
        },
    )
    .expect("valid schema")
}

type Args = BTreeMap<String, Value>;

#[tokio::test]
async fn preset_arguments_override_the_input_fields() {
    let harness = harness();
    let seen = record();
    let step = invoke_tool::<Args, Value>("add", adder(&seen))
        .args(json!({"a": 10}))
        .build();
    let input: Args = serde_json::from_value(json!({"a": 1, "b": 2})).unwrap();

    let output = harness.run(&step, input, &root(&harness)).await.unwrap();

    assert_eq!(recorded(&seen), [json!({"a": 10, "b": 2})]);
    assert_eq!(output, json!({"sum": 12}));
}

#[tokio::test]
async fn arguments_failing_the_schema_fail_the_step_without_calling_the_tool() {
    let harness = harness();
    let seen = record();
    let step = invoke_tool::<Args, Value>("add", adder(&seen)).build();
    let input: Args = serde_json::from_value(json!({"a": "one", "b": 2})).unwrap();

    let error = harness
        .run(&step, input, &root(&harness))
        .await
        .unwrap_err();

    let (step_id, cause) = step_failure(error);
    assert_eq!(step_id, "add");
    match cause {
        StepFailure::Tool { tool, message } => {
            assert_eq!(tool, "adder");
            assert!(message.contains("invalid arguments"), "{message}");
        }
        other => panic!("expected a tool failure, got {other:?}"),
    }
    assert!(recorded(&seen).is_empty());
}

#[tokio::test]
async fn emits_tool_call_events_inside_the_step_events() {
    let harness = harness();
    let log = EventLog::new();
    let ctx = harness.create_context(ContextOptions::new().event_sink(log.sink()));
    let step = invoke_tool::<Args, Value>("add", adder(&record()))
        .args(json!({"a": 3, "b": 4}))
        .build();

    harness.run(&step, Args::new(), &ctx).await.unwrap();

    assert_eq!(
        log.framework_types(),
        [
            "step_started",
            "tool_call_started",
            "tool_call_completed",
            "step_completed"
        ]
    );
    let completed = log
        .framework()
        .into_iter()
        .find(|event| event.event_type() == "tool_call_completed")
        .unwrap();
    assert_eq!(
        completed,
        FrameworkEvent::ToolCallCompleted {
            name: "adder".to_owned(),
            call_id: "add".to_owned(),
            error: false,
            output: r#"{"sum":7}"#.to_owned(),
        }
    );
}

#[tokio::test]
async fn a_failing_tool_fails_the_step_and_reports_the_error() {
    let harness = harness();
    let log = EventLog::new();
    let ctx = harness.create_context(ContextOptions::new().event_sink(log.sink()));
    let broken =
        Tool::dynamic(
            "broken",
            "Always fails",
            json!({"type": "object"}),
            |_args: Value, _ctx: ToolContext| async move {
                Err::<Value, _>(ToolError::new("out of order"))
            },
        )
        .unwrap();
    let step = invoke_tool::<Args, Value>("use-broken", broken).build();

    let error = harness.run(&step, Args::new(), &ctx).await.unwrap_err();

    let (_, cause) = step_failure(error);
    assert!(
        matches!(&cause, StepFailure::Tool { message, .. } if message == "out of order"),
        "{cause:?}"
    );
    assert_eq!(
        log.framework_types(),
        ["step_started", "tool_call_started", "tool_call_completed"]
    );
    assert!(
        log.framework()
            .contains(&FrameworkEvent::ToolCallCompleted {
                name: "broken".to_owned(),
                call_id: "use-broken".to_owned(),
                error: true,
                output: "Error: out of order".to_owned(),
            })
    );
}

#[tokio::test(start_paused = true)]
async fn aborting_the_context_drops_an_invoked_tool_that_ignores_cancellation() {
    let harness = harness();
    let ctx = root(&harness);
    let (started_tx, mut started) = tokio::sync::mpsc::unbounded_channel::<()>();
    let stubborn = Tool::dynamic(
        "stubborn",
        "Never returns",
        json!({"type": "object"}),
        move |_: Value, _ctx: ToolContext| {
            let started = started_tx.clone();
            async move {
                let _ = started.send(());
                std::future::pending::<()>().await;
                Ok::<_, ToolError>(Value::Null)
            }
        },
    )
    .unwrap();
    let step = invoke_tool::<Args, Value>("invoke", stubborn).build();

    let run = harness.run(&step, Args::new(), &ctx);
    let abort = async {
        started.recv().await.unwrap();
        ctx.abort(Some("stop".to_owned()));
    };
    let (result, ()) = tokio::time::timeout(std::time::Duration::from_secs(3600), async {
        tokio::join!(run, abort)
    })
    .await
    .expect("the run does not hang on the tool");

    assert_eq!(result.unwrap_err().code(), "CANCELLED");
}
