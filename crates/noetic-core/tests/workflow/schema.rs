//! Documents we write validate against the original's JSON Schema (draft 2020-12).

use noetic_core::workflow::WorkflowDocument;
use serde_json::{Value, json};

use crate::support::{doc, every_kind_document, fixture};

fn validator() -> jsonschema::Validator {
    jsonschema::validator_for(&fixture("noetic-workflow.schema.json")).expect("the schema compiles")
}

fn assert_valid(document: &Value) {
    let validator = validator();
    let errors: Vec<String> = validator
        .iter_errors(document)
        .map(|error| format!("{} at {}", error, error.instance_path()))
        .collect();
    assert!(errors.is_empty(), "schema errors: {errors:#?}");
}

#[test]
fn the_every_kind_document_validates_against_the_schema() {
    let document = every_kind_document();
    assert_valid(&document);
    // And what we write back from it validates too.
    let parsed = WorkflowDocument::from_value(document).unwrap();
    assert_valid(&parsed.to_value());
}

#[test]
fn every_node_kind_is_in_the_every_kind_document() {
    let text = every_kind_document().to_string();
    for kind in [
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
    ] {
        assert!(
            text.contains(&format!("\"kind\":\"{kind}\"")),
            "{kind} missing"
        );
    }
    for predicate in [
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
    ] {
        assert!(
            text.contains(&format!("\"kind\":\"{predicate}\"")),
            "{predicate} missing"
        );
    }
}

#[test]
fn the_judge_example_validates_once_its_schema_uri_is_set_aside() {
    // The original's example carries `$schema`, which its own schema (additionalProperties: false at
    // the top) does not list; we accept it, the schema does not.
    let mut example = fixture("multi-model-judge.workflow.json");
    assert!(!validator().is_valid(&example));
    example.as_object_mut().unwrap().remove("$schema");
    assert_valid(&example);
}

#[test]
fn documents_the_schema_rejects_are_rejected_by_the_parser_too() {
    let cases = [
        json!({ "version": 2, "root": { "kind": "runCode", "id": "a", "execute": "upper" } }),
        doc(json!({ "kind": "teleport", "id": "a" })),
        doc(json!({ "kind": "runCode", "id": "a" })),
        doc(json!({ "kind": "runCode", "id": "a", "execute": "upper", "extra": true })),
        doc(json!({
            "kind": "loop", "id": "a",
            "body": { "kind": "runCode", "id": "b", "execute": "upper" },
            "until": { "kind": "whenever" }
        })),
    ];
    let validator = validator();
    for case in cases {
        assert!(!validator.is_valid(&case), "schema accepts {case}");
        assert!(
            WorkflowDocument::from_value(case.clone()).is_err(),
            "parser accepts {case}"
        );
    }
}
