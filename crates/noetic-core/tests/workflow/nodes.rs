//! Every node kind hydrates and runs, with the semantics documented in `docs/workflows.md`.

use noetic_core::Error;
use noetic_test_support::{ScriptedModel, ScriptedResponse};
use serde_json::{Value, json};

use crate::support::{answering, doc, every_kind_document, run, run_with};

fn code(id: &str, execute: &str) -> Value {
    json!({ "kind": "runCode", "id": id, "execute": execute })
}

#[tokio::test]
async fn the_every_kind_document_runs() {
    let model = answering("model answer");
    let output = run_with(&model, every_kind_document(), json!("hello"))
        .await
        .unwrap();
    assert_eq!(output, json!("FROM THE SUBFLOW."));
    // The conditional routed to the model call (the fan-out's "A\n\nB" contains "a").
    let requests = model.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].model, "scripted/model");
    assert_eq!(requests[0].instructions.as_deref(), Some("Summarise."));
    assert_eq!(requests[0].tools, vec!["echo".to_owned()]);
    assert_eq!(requests[0].user_texts(), vec!["A\n\nB".to_owned()]);
}

#[tokio::test]
async fn call_model_uses_its_model_or_the_default() {
    let model = ScriptedModel::with_responses([
        ScriptedResponse::text("first"),
        ScriptedResponse::text("second"),
    ]);
    let document = doc(json!({
        "kind": "sequence", "id": "s",
        "steps": [
            { "kind": "callModel", "id": "named", "model": "vendor/named", "instructions": "One." },
            { "kind": "callModel", "id": "defaulted", "instructions": "Two." }
        ]
    }));
    let registry = crate::support::registry().default_model("vendor/default");
    let (harness, ctx) = crate::support::harness(&model, registry);
    let output = harness
        .parse_and_run_workflow(&document, json!("question"), &ctx)
        .await
        .unwrap();
    assert_eq!(output, json!("second"));
    let requests = model.requests();
    assert_eq!(requests[0].model, "vendor/named");
    assert_eq!(requests[1].model, "vendor/default");
    // The first answer is the second call's input; it is in the log already as the assistant's
    // answer, so it is not sent again (and never as a user message).
    assert_eq!(requests[1].user_texts(), vec!["question".to_owned()]);
    assert_eq!(requests[1].input.len(), 2, "{:?}", requests[1].input);
    assert_eq!(requests[1].input[1].text().as_deref(), Some("first"));
}

#[tokio::test]
async fn call_model_runs_tool_rounds_with_registered_tools() {
    let model = ScriptedModel::with_responses([
        ScriptedResponse::tool_call("call_1", "echo", json!({ "text": "ping" })),
        ScriptedResponse::text("pong"),
    ]);
    let document = doc(json!({
        "kind": "callModel", "id": "agent", "model": "m", "instructions": "Use tools.",
        "tools": [{ "type": "echo" }]
    }));
    let output = run_with(&model, document, json!("go")).await.unwrap();
    assert_eq!(output, json!("pong"));
    assert_eq!(model.requests()[1].tool_outputs(), vec!["ping".to_owned()]);
}

#[tokio::test]
async fn invoke_tool_merges_preset_args_over_the_input() {
    let document = doc(
        json!({ "kind": "invokeTool", "id": "t", "toolName": "echo", "args": { "text": "preset" } }),
    );
    assert_eq!(
        run(document, json!({ "text": "input" })).await.unwrap(),
        json!("preset")
    );
    let bare = doc(json!({ "kind": "invokeTool", "id": "t", "toolName": "echo" }));
    assert_eq!(
        run(bare.clone(), json!({ "text": "input" })).await.unwrap(),
        json!("input")
    );
    let error = run(bare, json!("not an object")).await.unwrap_err();
    assert_eq!(error.code(), "STEP_FAILED");
}

#[tokio::test]
async fn run_code_retries_with_its_policy() {
    let retried = doc(json!({
        "kind": "runCode", "id": "r", "execute": "flaky",
        "retry": { "maxAttempts": 2, "backoff": "fixed", "initialDelay": 1 }
    }));
    assert_eq!(run(retried, json!("ok")).await.unwrap(), json!("ok"));
    let once = doc(code("r", "flaky"));
    let error = run(once, json!("ok")).await.unwrap_err();
    assert_eq!(error.code(), "STEP_FAILED");
    // Typed code steps decode their input: a mismatch is STEP_FAILED too.
    let error = run(doc(code("c", "count")), json!("three"))
        .await
        .unwrap_err();
    assert_eq!(error.code(), "STEP_FAILED");
    assert_eq!(
        run(doc(code("c", "count")), json!(2)).await.unwrap(),
        json!(3)
    );
}

#[tokio::test]
async fn conditional_matches_text_case_insensitively_in_route_order() {
    let document = doc(json!({
        "kind": "conditional", "id": "c",
        "routes": [
            { "match": "URGENT", "target": code("shout", "upper") },
            { "match": "later", "target": code("dot", "append-dot") }
        ],
        "default": { "kind": "invokeTool", "id": "d", "toolName": "echo", "args": { "text": "default" } }
    }));
    assert_eq!(
        run(document.clone(), json!("this is urgent, later"))
            .await
            .unwrap(),
        json!("THIS IS URGENT, LATER")
    );
    assert_eq!(
        run(document.clone(), json!("see you Later")).await.unwrap(),
        json!("see you Later.")
    );
    assert_eq!(
        run(document, json!("nothing")).await.unwrap(),
        json!("default")
    );
}

#[tokio::test]
async fn conditional_routes_objects_by_their_text_field() {
    let document = doc(json!({
        "kind": "conditional", "id": "c",
        "routes": [{ "match": "later", "target": code("keep", "identity") }],
        "default": { "kind": "invokeTool", "id": "d", "toolName": "echo", "args": { "text": "default" } }
    }));
    assert_eq!(
        run(document.clone(), json!({ "text": "Later" }))
            .await
            .unwrap(),
        json!({ "text": "Later" })
    );
    // Other JSON is matched as its text: `["later"]` contains "later".
    assert_eq!(
        run(document.clone(), json!(["later"])).await.unwrap(),
        json!(["later"])
    );
    assert_eq!(
        run(document, json!({ "other": 1 })).await.unwrap(),
        json!("default")
    );
}

#[tokio::test]
async fn conditional_without_default_passes_the_input_through() {
    let document = doc(json!({
        "kind": "conditional", "id": "c",
        "routes": [{ "match": "yes", "target": code("shout", "upper") }]
    }));
    assert_eq!(
        run(document.clone(), json!("no")).await.unwrap(),
        json!("no")
    );
    assert_eq!(
        run(document, json!({ "n": 1 })).await.unwrap(),
        json!({ "n": 1 })
    );
}

#[tokio::test]
async fn in_parallel_all_race_and_settle() {
    let paths = json!([code("a", "upper"), code("b", "append-dot")]);
    let all = |merge: &str| {
        doc(
            json!({ "kind": "inParallel", "id": "p", "mode": "all", "merge": merge, "paths": paths }),
        )
    };
    assert_eq!(run(all("first"), json!("x")).await.unwrap(), json!("X"));
    assert_eq!(run(all("last"), json!("x")).await.unwrap(), json!("x."));
    assert_eq!(
        run(all("concat"), json!("x")).await.unwrap(),
        json!("X\n\nx.")
    );
    let default_merge =
        doc(json!({ "kind": "inParallel", "id": "p", "mode": "all", "paths": paths }));
    assert_eq!(run(default_merge, json!("x")).await.unwrap(), json!("x."));

    let failing = json!([
        code("a", "upper"),
        code("b", "fail"),
        code("c", "append-dot")
    ]);
    let error = run(
        doc(json!({ "kind": "inParallel", "id": "p", "mode": "all", "paths": failing })),
        json!("x"),
    )
    .await
    .unwrap_err();
    assert_eq!(error.code(), "FORK_PARTIAL");
    let settle = doc(
        json!({ "kind": "inParallel", "id": "p", "mode": "settle", "merge": "concat", "paths": failing }),
    );
    assert_eq!(run(settle, json!("x")).await.unwrap(), json!("X\n\nx."));
    let settle_last =
        doc(json!({ "kind": "inParallel", "id": "p", "mode": "settle", "paths": failing }));
    assert_eq!(run(settle_last, json!("x")).await.unwrap(), json!("x."));

    let race = doc(json!({
        "kind": "inParallel", "id": "p", "mode": "race", "concurrency": 1,
        "paths": [code("a", "fail"), code("b", "upper")]
    }));
    assert_eq!(run(race, json!("x")).await.unwrap(), json!("X"));
}

#[tokio::test]
async fn in_parallel_each_runs_once_per_element() {
    let each = |over: Value| {
        let mut node = json!({
            "kind": "inParallel", "id": "fan", "mode": "all", "merge": "concat",
            "each": code("shout", "upper")
        });
        if !over.is_null() {
            node["over"] = over;
        }
        doc(node)
    };
    // A JSON pointer, a field name, the input itself, and a string holding JSON.
    let input = json!({ "nested": { "items": ["a", "b", "c"] }, "items": ["d"] });
    assert_eq!(
        run(each(json!("/nested/items")), input.clone())
            .await
            .unwrap(),
        json!("A\n\nB\n\nC")
    );
    assert_eq!(run(each(json!("items")), input).await.unwrap(), json!("D"));
    assert_eq!(
        run(each(Value::Null), json!(["x", "y"])).await.unwrap(),
        json!("X\n\nY")
    );
    assert_eq!(
        run(each(Value::Null), json!("[\"s\"]")).await.unwrap(),
        json!("S")
    );
    // An empty array merges nothing.
    assert_eq!(run(each(Value::Null), json!([])).await.unwrap(), json!(""));
    // No array: STEP_FAILED from the `<id>/over` step.
    let error = run(each(json!("missing")), json!({ "items": [] }))
        .await
        .unwrap_err();
    assert_eq!(error.code(), "STEP_FAILED");
    assert!(error.to_string().contains("fan/over"), "{error}");
}

#[tokio::test]
async fn in_parallel_each_gives_every_path_its_own_predicate_state() {
    // A loop with `converged` inside `each`: each element's loop stops on its own second iteration.
    let document = doc(json!({
        "kind": "inParallel", "id": "fan", "mode": "all", "merge": "concat",
        "each": {
            "kind": "loop", "id": "settle-down", "maxIterations": 5,
            "body": code("same", "same"),
            "until": { "kind": "converged" }
        }
    }));
    assert_eq!(
        run(document, json!([1, 2, 3])).await.unwrap(),
        json!("steady\n\nsteady\n\nsteady")
    );
}

#[tokio::test]
async fn spawn_replaces_layers_and_enforces_its_timeout() {
    let layered = doc(json!({
        "kind": "withContext", "id": "w", "layers": ["audit"],
        "child": {
            "kind": "sequence", "id": "s",
            "steps": [
                { "kind": "spawn", "id": "sp", "layers": ["memory"], "child": code("ids", "layer-ids") }
            ]
        }
    }));
    assert_eq!(run(layered, Value::Null).await.unwrap(), json!(["memory"]));
    let inherited = doc(json!({
        "kind": "withContext", "id": "w", "layers": ["audit"],
        "child": { "kind": "spawn", "id": "sp", "child": code("ids", "layer-ids") }
    }));
    assert_eq!(run(inherited, Value::Null).await.unwrap(), json!(["audit"]));
    let slow =
        doc(json!({ "kind": "spawn", "id": "sp", "timeout": 20, "child": code("slow", "sleep") }));
    let error = run(slow, Value::Null).await.unwrap_err();
    assert_eq!(error.code(), "STEP_FAILED");
    assert!(error.to_string().contains("timed out"), "{error}");
}

#[tokio::test]
async fn with_context_adds_layers_for_its_child_only() {
    let document = doc(json!({
        "kind": "sequence", "id": "s",
        "steps": [
            { "kind": "withContext", "id": "w", "layers": ["audit", "memory"], "child": code("inside", "layer-ids") },
            code("outside", "layer-ids")
        ]
    }));
    // The sequence's output is the last step's: outside, no layers are left.
    assert_eq!(run(document, Value::Null).await.unwrap(), json!([]));
    let inside = doc(
        json!({ "kind": "withContext", "id": "w", "layers": ["audit", "memory"], "child": code("inside", "layer-ids") }),
    );
    assert_eq!(
        run(inside, Value::Null).await.unwrap(),
        json!(["audit", "memory"])
    );
}

#[tokio::test]
async fn loop_predicates() {
    let looped = |until: Value, max: Option<u64>| {
        let mut node =
            json!({ "kind": "loop", "id": "l", "body": code("count", "count"), "until": until });
        if let Some(max) = max {
            node["maxIterations"] = json!(max);
        }
        doc(node)
    };
    assert_eq!(
        run(
            looped(json!({ "kind": "maxSteps", "n": 3 }), None),
            json!(0)
        )
        .await
        .unwrap(),
        json!(3)
    );
    assert_eq!(
        run(
            looped(json!({ "kind": "outputContains", "marker": "5" }), None),
            json!(0)
        )
        .await
        .unwrap(),
        json!(5)
    );
    assert_eq!(
        run(
            looped(json!({ "kind": "outputEquals", "sentinel": "4" }), None),
            json!(0)
        )
        .await
        .unwrap(),
        json!(4)
    );
    // No call_model in the body: noToolCalls stops after the first iteration.
    assert_eq!(
        run(looped(json!({ "kind": "noToolCalls" }), None), json!(0))
            .await
            .unwrap(),
        json!(1)
    );
    let combined = json!({ "kind": "all", "predicates": [{ "kind": "maxSteps", "n": 2 }, { "kind": "outputContains", "marker": "3" }] });
    assert_eq!(
        run(looped(combined, None), json!(0)).await.unwrap(),
        json!(3)
    );
    let either = json!({ "kind": "any", "predicates": [{ "kind": "never" }, { "kind": "maxSteps", "n": 2 }] });
    assert_eq!(run(looped(either, None), json!(0)).await.unwrap(), json!(2));
    // `never` ends at maxIterations, with an error.
    let error = run(looped(json!({ "kind": "never" }), Some(4)), json!(0))
        .await
        .unwrap_err();
    assert_eq!(error.code(), "STEP_FAILED");
    // maxCost: nothing is charged, so the iteration cap ends it.
    let error = run(
        looped(json!({ "kind": "maxCost", "usd": 0.01 }), Some(2)),
        json!(0),
    )
    .await
    .unwrap_err();
    assert_eq!(error.code(), "STEP_FAILED");
    // converged: the same text twice in a row.
    let converging = doc(
        json!({ "kind": "loop", "id": "l", "body": code("same", "same"), "until": { "kind": "converged", "threshold": 1 } }),
    );
    assert_eq!(run(converging, Value::Null).await.unwrap(), json!("steady"));
}

#[tokio::test(start_paused = true)]
async fn loop_max_duration_counts_milliseconds() {
    // Each iteration naps 10 ms (paused time): 10, 20, 30 ≥ 25 stops after the third.
    let document = doc(json!({
        "kind": "loop", "id": "l", "body": code("nap", "nap"),
        "until": { "kind": "maxDuration", "duration": 25 }
    }));
    assert_eq!(run(document, json!(0)).await.unwrap(), json!(3));
}

#[tokio::test]
async fn sequence_passes_outputs_along() {
    let document = doc(json!({
        "kind": "sequence", "id": "s",
        "steps": [code("a", "append-dot"), code("b", "upper"), code("c", "append-dot")]
    }));
    assert_eq!(run(document, json!("x")).await.unwrap(), json!("X.."));
}

#[tokio::test]
async fn schedule_runs_its_step_and_honours_on_error() {
    // `run` hydrates with schedule_max_runs = 2.
    let ticking = doc(
        json!({ "kind": "schedule", "id": "t", "interval": 1, "step": code("dot", "append-dot") }),
    );
    assert_eq!(run(ticking, json!("x")).await.unwrap(), json!("x."));
    let failing = doc(
        json!({ "kind": "schedule", "id": "t", "interval": 0, "onError": "fail", "step": code("f", "fail") }),
    );
    assert_eq!(
        run(failing, Value::Null).await.unwrap_err().code(),
        "STEP_FAILED"
    );
    let continuing =
        doc(json!({ "kind": "schedule", "id": "t", "interval": 0, "step": code("f", "fail") }));
    assert_eq!(run(continuing, Value::Null).await.unwrap(), Value::Null);
    let flaky = doc(
        json!({ "kind": "schedule", "id": "t", "interval": 0, "onError": "continue", "step": code("f", "flaky") }),
    );
    assert_eq!(
        run(flaky, json!("second time")).await.unwrap(),
        json!("second time")
    );
}

#[tokio::test]
async fn subflows_inline_and_by_reference() {
    let inline = doc(json!({
        "kind": "subflow", "id": "f",
        "document": { "version": 1, "root": code("shout", "upper") }
    }));
    assert_eq!(run(inline, json!("in")).await.unwrap(), json!("IN"));
    let fixed = doc(json!({ "kind": "subflow", "id": "f", "ref": "finisher", "input": "fixed" }));
    assert_eq!(run(fixed, json!("ignored")).await.unwrap(), json!("fixed."));
    let by_ref = doc(json!({
        "kind": "sequence", "id": "s",
        "steps": [{ "kind": "subflow", "id": "one", "ref": "finisher" }, { "kind": "subflow", "id": "two", "ref": "finisher" }]
    }));
    assert_eq!(run(by_ref, json!("x")).await.unwrap(), json!("x.."));
}

#[tokio::test]
async fn a_failing_step_keeps_its_error() {
    let error = run(doc(code("f", "fail")), Value::Null).await.unwrap_err();
    match error {
        Error::StepFailed { step_id, .. } => assert_eq!(step_id, "f"),
        other => panic!("expected STEP_FAILED, got {other:?}"),
    }
}
