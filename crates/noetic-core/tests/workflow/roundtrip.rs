//! `WorkflowDocument` → JSON → parse gives the same document.

use noetic_core::workflow::{
    CallModelNode, RunCodeNode, SequenceNode, UntilPredicate, WorkflowDocument, WorkflowNode,
};
use serde_json::json;

use crate::support::{every_kind_document, fixture};

#[test]
fn the_every_kind_document_round_trips() {
    let parsed = WorkflowDocument::from_value(every_kind_document()).unwrap();
    let written = parsed.to_value();
    assert_eq!(
        WorkflowDocument::from_value(written.clone()).unwrap(),
        parsed
    );
    // Through text as well, and through serde.
    let text = parsed.to_json_pretty();
    assert_eq!(WorkflowDocument::from_json(&text).unwrap(), parsed);
    let via_serde: WorkflowDocument =
        serde_json::from_str(&serde_json::to_string(&parsed).unwrap()).unwrap();
    assert_eq!(via_serde, parsed);
}

#[test]
fn the_judge_example_round_trips_with_its_schema_uri() {
    let example = fixture("multi-model-judge.workflow.json");
    let parsed = WorkflowDocument::from_value(example.clone()).unwrap();
    assert_eq!(
        parsed.schema.as_deref(),
        Some("https://noetic.tools/schema/noetic-workflow.schema.json")
    );
    // Nothing in it is a float, so the JSON comes back exactly.
    assert_eq!(parsed.to_value(), example);
}

#[test]
fn a_document_built_in_code_round_trips() {
    let document = WorkflowDocument::new(WorkflowNode::Sequence(SequenceNode {
        id: "built".to_owned(),
        steps: vec![
            WorkflowNode::RunCode(RunCodeNode {
                id: "first".to_owned(),
                execute: "upper".to_owned(),
                retry: None,
                subprocess: None,
            }),
            WorkflowNode::CallModel(CallModelNode {
                id: "answer".to_owned(),
                model: None,
                instructions: "Be brief.".to_owned(),
                tools: Some(Vec::new()),
                params: None,
                output: None,
            }),
        ],
    }));
    let value = document.to_value();
    assert_eq!(
        value,
        json!({ "version": 1, "root": { "kind": "sequence", "id": "built", "steps": [
            { "kind": "runCode", "id": "first", "execute": "upper" },
            { "kind": "callModel", "id": "answer", "instructions": "Be brief.", "tools": [] }
        ] } })
    );
    assert_eq!(WorkflowDocument::from_value(value).unwrap(), document);
    assert_eq!(document.root.kind(), "sequence");
    assert_eq!(
        UntilPredicate::NoToolCalls.to_value(),
        json!({ "kind": "noToolCalls" })
    );
}
