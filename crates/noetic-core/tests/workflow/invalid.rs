//! Invalid documents give `WORKFLOW_INVALID` with the exact JSON pointer of the offending part.

use noetic_core::workflow::{HydrateOptions, WorkflowDocument, WorkflowRegistry};
use serde_json::{Value, json};

use crate::support::{assert_invalid, doc, hydrate_error};

fn code(id: &str) -> Value {
    json!({ "kind": "runCode", "id": id, "execute": "upper" })
}

/// `document` fails (parsing or hydrating with a default model) at `path` with `message`.
fn check(document: Value, path: &str, message: &str) {
    let error = hydrate_error(
        document,
        &HydrateOptions::new().default_model("scripted/model"),
    );
    assert_invalid(&error, path, message);
}

#[test]
fn wrong_or_missing_version() {
    check(
        json!({ "version": 2, "root": code("a") }),
        "/version",
        "unsupported version 2; expected 1",
    );
    check(
        json!({ "version": "1", "root": code("a") }),
        "/version",
        "expected the number 1",
    );
    check(
        json!({ "root": code("a") }),
        "",
        "missing required field `version`",
    );
    check(json!({ "version": 1 }), "", "missing required field `root`");
    check(json!([1]), "", "expected a workflow document");
}

#[test]
fn text_that_is_not_json() {
    let error = WorkflowDocument::from_json("{ not json").unwrap_err();
    assert_invalid(&error, "", "not valid JSON");
}

#[test]
fn unknown_node_kind() {
    let document = doc(json!({
        "kind": "sequence", "id": "s",
        "steps": [code("a"), { "kind": "teleport", "id": "b" }]
    }));
    check(
        document,
        "/root/steps/1/kind",
        "unknown node kind `teleport`; expected one of callModel",
    );
    check(
        doc(json!({ "id": "a", "execute": "upper" })),
        "/root",
        "missing required field `kind`",
    );
    check(
        doc(json!({ "kind": 7, "id": "a" })),
        "/root/kind",
        "expected a string",
    );
    check(doc(json!("runCode")), "/root", "expected a workflow node");
}

#[test]
fn missing_required_fields_are_named() {
    check(
        doc(json!({ "kind": "callModel", "id": "a" })),
        "/root",
        "missing required field `instructions`",
    );
    check(
        doc(json!({ "kind": "runCode", "execute": "upper" })),
        "/root",
        "missing required field `id`",
    );
    let loop_without_until = doc(json!({ "kind": "loop", "id": "l", "body": code("b") }));
    check(
        loop_without_until,
        "/root",
        "missing required field `until`",
    );
    let route_without_target =
        doc(json!({ "kind": "conditional", "id": "c", "routes": [{ "match": "x" }] }));
    check(
        route_without_target,
        "/root/routes/0",
        "missing required field `target`",
    );
    let retry = doc(
        json!({ "kind": "runCode", "id": "a", "execute": "upper", "retry": { "maxAttempts": 2 } }),
    );
    check(retry, "/root/retry", "missing required field `backoff`");
}

#[test]
fn unknown_fields_are_errors() {
    check(
        doc(json!({ "kind": "runCode", "id": "a", "execute": "upper", "retries": 3 })),
        "/root/retries",
        "unknown field `retries`",
    );
    check(
        json!({ "version": 1, "root": code("a"), "extra": true }),
        "/extra",
        "unknown field `extra`",
    );
    let params = doc(
        json!({ "kind": "callModel", "id": "a", "instructions": "x", "params": { "top_p": 0.5 } }),
    );
    check(params, "/root/params/top_p", "unknown field `top_p`");
    // Pointer tokens are escaped (RFC 6901).
    check(
        doc(json!({ "kind": "runCode", "id": "a", "execute": "upper", "a/b~c": 1 })),
        "/root/a~1b~0c",
        "unknown field",
    );
}

#[test]
fn wrong_types_and_ranges() {
    check(
        doc(json!({ "kind": "runCode", "id": 5, "execute": "upper" })),
        "/root/id",
        "expected a string",
    );
    check(
        doc(json!({ "kind": "runCode", "id": "  ", "execute": "upper" })),
        "/root/id",
        "non-blank",
    );
    check(
        doc(json!({ "kind": "sequence", "id": "s", "steps": [] })),
        "/root/steps",
        "at least 1",
    );
    check(
        doc(json!({ "kind": "inParallel", "id": "p", "mode": "fastest", "paths": [code("a")] })),
        "/root/mode",
        "expected one of race, all, settle",
    );
    check(
        doc(json!({ "kind": "spawn", "id": "s", "child": code("a"), "timeout": 0 })),
        "/root/timeout",
        "expected a number > 0",
    );
    check(
        doc(
            json!({ "kind": "loop", "id": "l", "body": code("b"), "until": { "kind": "maxSteps", "n": 0 } }),
        ),
        "/root/until/n",
        "expected an integer ≥ 1",
    );
    let params = doc(
        json!({ "kind": "callModel", "id": "a", "instructions": "x", "params": { "topP": 1.5 } }),
    );
    check(params, "/root/params/topP", "between 0 and 1");
}

#[test]
fn bad_until_predicates() {
    let document = doc(json!({
        "kind": "sequence", "id": "s",
        "steps": [code("a"), { "kind": "loop", "id": "l", "body": code("b"), "until": { "kind": "untilDone" } }]
    }));
    check(
        document,
        "/root/steps/1/until/kind",
        "unknown until predicate `untilDone`; expected one of maxSteps",
    );
    let nested = doc(json!({
        "kind": "loop", "id": "l", "body": code("b"),
        "until": { "kind": "any", "predicates": [{ "kind": "never" }, { "kind": "sometimes" }] }
    }));
    check(
        nested,
        "/root/until/predicates/1/kind",
        "unknown until predicate `sometimes`",
    );
    let missing = doc(
        json!({ "kind": "loop", "id": "l", "body": code("b"), "until": { "kind": "maxSteps" } }),
    );
    check(missing, "/root/until", "missing required field `n`");
    let extra = doc(
        json!({ "kind": "loop", "id": "l", "body": code("b"), "until": { "kind": "never", "n": 1 } }),
    );
    check(extra, "/root/until/n", "unknown field `n`");
    let threshold = doc(
        json!({ "kind": "loop", "id": "l", "body": code("b"), "until": { "kind": "converged", "threshold": 0.5 } }),
    );
    check(threshold, "/root/until/threshold", "needs embeddings");
}

#[test]
fn unknown_tools() {
    let invoke = doc(json!({ "kind": "invokeTool", "id": "t", "toolName": "teleport" }));
    check(
        invoke,
        "/root/toolName",
        "unknown tool `teleport` (registered: `echo`)",
    );
    let offered = doc(json!({
        "kind": "callModel", "id": "m", "instructions": "x",
        "tools": [{ "type": "echo" }, { "type": "search" }]
    }));
    check(offered, "/root/tools/1/type", "unknown tool `search`");
    let parameters = doc(json!({
        "kind": "callModel", "id": "m", "instructions": "x",
        "tools": [{ "type": "echo", "parameters": { "loud": true } }]
    }));
    check(
        parameters,
        "/root/tools/0/parameters",
        "tool parameters are not supported",
    );
}

#[test]
fn unknown_code_steps_layers_and_subflows() {
    let document = doc(json!({
        "kind": "sequence", "id": "s",
        "steps": [code("a"), code("b"), { "kind": "runCode", "id": "c", "execute": "teleport" }]
    }));
    check(
        document,
        "/root/steps/2/execute",
        "unknown code step `teleport`",
    );
    let layer = doc(
        json!({ "kind": "withContext", "id": "w", "layers": ["audit", "ghost"], "child": code("a") }),
    );
    check(layer, "/root/layers/1", "unknown layer `ghost`");
    let spawn_layer =
        doc(json!({ "kind": "spawn", "id": "s", "layers": ["ghost"], "child": code("a") }));
    check(spawn_layer, "/root/layers/0", "unknown layer `ghost`");
    check(
        doc(json!({ "kind": "subflow", "id": "f", "ref": "nowhere" })),
        "/root/ref",
        "unknown workflow `nowhere`",
    );
    check(
        doc(json!({ "kind": "subflow", "id": "f" })),
        "/root",
        "needs `document`",
    );
    let both =
        doc(json!({ "kind": "subflow", "id": "f", "ref": "finisher", "document": doc(code("a")) }));
    check(both, "/root/ref", "not both");
}

#[test]
fn errors_inside_subflows_carry_their_pointers() {
    let inline = doc(json!({
        "kind": "subflow", "id": "f",
        "document": { "version": 1, "root": { "kind": "runCode", "id": "x", "execute": "teleport" } }
    }));
    check(
        inline,
        "/root/document/root/execute",
        "unknown code step `teleport`",
    );

    let broken = WorkflowDocument::from_value(doc(json!({
        "kind": "sequence", "id": "s", "steps": [code("a"), { "kind": "invokeTool", "id": "t", "toolName": "ghost" }]
    })))
    .unwrap();
    let registry = crate::support::registry().document("broken", broken);
    let document = WorkflowDocument::from_value(doc(
        json!({ "kind": "subflow", "id": "f", "ref": "broken" }),
    ))
    .unwrap();
    let error = document
        .hydrate(&registry, &HydrateOptions::new())
        .unwrap_err();
    assert_invalid(
        &error,
        "/root/ref",
        "in workflow `broken` at `/root/steps/1/toolName`: unknown tool `ghost`",
    );
}

#[test]
fn subflow_reference_cycles_are_errors() {
    let a =
        WorkflowDocument::from_value(doc(json!({ "kind": "subflow", "id": "to-b", "ref": "b" })))
            .unwrap();
    let b =
        WorkflowDocument::from_value(doc(json!({ "kind": "subflow", "id": "to-a", "ref": "a" })))
            .unwrap();
    let registry = WorkflowRegistry::new().document("a", a).document("b", b);
    let document =
        WorkflowDocument::from_value(doc(json!({ "kind": "subflow", "id": "start", "ref": "a" })))
            .unwrap();
    let error = document
        .hydrate(&registry, &HydrateOptions::new())
        .unwrap_err();
    assert_invalid(&error, "/root/ref", "subflow reference cycle: a -> b -> a");
}

#[test]
fn missing_model_is_reported_at_hydration() {
    let document = doc(json!({
        "kind": "sequence", "id": "s",
        "steps": [{ "kind": "callModel", "id": "answer", "instructions": "x" }]
    }));
    let error = hydrate_error(document.clone(), &HydrateOptions::new());
    assert_invalid(&error, "/root/steps/0", "MISSING_MODEL");
    // With a default model it hydrates.
    let parsed = WorkflowDocument::from_value(document).unwrap();
    parsed
        .hydrate(
            &crate::support::registry(),
            &HydrateOptions::new().default_model("scripted/model"),
        )
        .unwrap();
    let blank =
        doc(json!({ "kind": "callModel", "id": "answer", "instructions": "x", "model": " " }));
    check(blank, "/root/model", "MISSING_MODEL");
}

#[test]
fn unsupported_features_and_unknown_subprocess_adapters_are_refused() {
    let codec = doc(json!({
        "kind": "callModel", "id": "ui", "instructions": "x",
        "output": { "codec": "openui", "library": "dashboard" }
    }));
    check(codec, "/root/output", "output codecs are not supported");
    let subprocess =
        doc(json!({ "kind": "runCode", "id": "a", "execute": "upper", "subprocess": "node" }));
    check(
        subprocess,
        "/root/subprocess",
        "unknown subprocess adapter `node` (none are registered)",
    );
}

#[test]
fn in_parallel_shape_rules() {
    let both = doc(
        json!({ "kind": "inParallel", "id": "p", "mode": "all", "paths": [code("a")], "each": code("b") }),
    );
    check(both, "/root/each", "not both");
    check(
        doc(json!({ "kind": "inParallel", "id": "p", "mode": "all" })),
        "/root",
        "needs `paths` or `each`",
    );
    let over = doc(
        json!({ "kind": "inParallel", "id": "p", "mode": "all", "paths": [code("a")], "over": "items" }),
    );
    check(over, "/root/over", "only applies with `each`");
    let race_merge = doc(
        json!({ "kind": "inParallel", "id": "p", "mode": "race", "merge": "first", "paths": [code("a")] }),
    );
    check(race_merge, "/root/merge", "does not apply to race");
}

#[test]
fn deserialize_reports_the_pointer_too() {
    let text = r#"{ "version": 1, "root": { "kind": "runCode", "id": "a" } }"#;
    let error = serde_json::from_str::<WorkflowDocument>(text).unwrap_err();
    assert!(error.to_string().contains("`/root`"), "{error}");
    assert!(
        error
            .to_string()
            .contains("missing required field `execute`"),
        "{error}"
    );
}
