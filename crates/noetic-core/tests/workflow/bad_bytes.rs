//! Bad bytes: arbitrary input and mutated real documents never panic or hang the workflow parser or
//! the hydrator; whatever does not parse is `WORKFLOW_INVALID` with a JSON pointer into the document.

use noetic_core::Error;
use noetic_core::workflow::{HydrateOptions, WorkflowDocument};
use proptest::prelude::*;
use serde_json::{Value, json};

use crate::support::{every_kind_document, fixtures, registry};

/// The real documents the mutations start from: the original's judge example, ours, and the one that
/// uses every node kind.
fn seeds() -> Vec<String> {
    let examples =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/workflows");
    let mut texts = vec![
        std::fs::read_to_string(fixtures().join("multi-model-judge.workflow.json")).unwrap(),
        serde_json::to_string_pretty(&every_kind_document()).unwrap(),
    ];
    for name in [
        "researcher.json",
        "plan-then-execute.json",
        "multi-model-judge.json",
    ] {
        texts.push(std::fs::read_to_string(examples.join(name)).unwrap());
    }
    texts
}

/// Parses and hydrates `text`; every failure must be `WORKFLOW_INVALID` whose pointer names a place
/// in the document (a prefix of some path in it, or the document itself).
fn check(text: &str) {
    let parsed = WorkflowDocument::from_json(text);
    let hydrated = parsed.and_then(|document| {
        document
            .hydrate(
                &registry(),
                &HydrateOptions::new().default_model("scripted/model"),
            )
            .map(drop)
    });
    if let Err(error) = hydrated {
        assert_workflow_invalid(&error, text);
    }
}

fn assert_workflow_invalid(error: &Error, text: &str) {
    assert_eq!(error.code(), "WORKFLOW_INVALID", "{error} for {text:.200}");
    let Error::WorkflowInvalid { path, message } = error else {
        panic!("not a WorkflowInvalid: {error:?}");
    };
    assert!(!message.is_empty());
    if let Ok(value) = serde_json::from_str::<Value>(text) {
        // The pointer names the node or field at fault: its parent exists in the document.
        let parent = path.rsplit_once('/').map_or("", |(parent, _)| parent);
        assert!(
            value.pointer(parent).is_some(),
            "pointer `{path}` is not in the document: {text:.300}"
        );
    } else {
        assert_eq!(
            path, "",
            "a document that is not JSON is invalid as a whole"
        );
    }
}

/// A random JSON value, a few levels deep.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        ".{0,12}".prop_map(Value::String),
        prop::sample::select(vec![
            "callModel",
            "invokeTool",
            "runCode",
            "conditional",
            "inParallel",
            "spawn",
            "withContext",
            "loop",
            "sequence",
            "subflow",
            "schedule",
            "any",
            "all",
            "upper",
        ])
        .prop_map(|kind| json!(kind)),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec(
                (
                    prop::sample::select(vec![
                        "kind",
                        "id",
                        "root",
                        "version",
                        "steps",
                        "child",
                        "body",
                        "until",
                        "paths",
                        "each",
                        "routes",
                        "target",
                        "tools",
                        "retry",
                        "document",
                        "ref",
                        "predicates",
                        "mode",
                        "model",
                        "execute",
                        "timeout",
                        "layers",
                    ]),
                    inner
                ),
                0..4
            )
            .prop_map(|fields| Value::Object(
                fields
                    .into_iter()
                    .map(|(key, value)| (key.to_owned(), value))
                    .collect()
            )),
        ]
    })
}

/// Every place in `value`, as JSON pointers.
fn pointers(value: &Value, at: String, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                pointers(
                    child,
                    format!("{at}/{}", key.replace('~', "~0").replace('/', "~1")),
                    out,
                );
            }
        }
        Value::Array(items) => {
            for (index, child) in items.iter().enumerate() {
                pointers(child, format!("{at}/{index}"), out);
            }
        }
        _ => {}
    }
    out.push(at);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_are_workflow_invalid_never_a_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        check(&String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn a_truncated_document_is_workflow_invalid(seed in 0usize..5, cut in any::<prop::sample::Index>()) {
        let text = &seeds()[seed];
        let end = text.char_indices().map(|(at, _)| at).nth(cut.index(text.chars().count())).unwrap_or(0);
        check(&text[..end]);
    }

    #[test]
    fn a_document_with_flipped_bytes_never_panics(
        seed in 0usize..5,
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
    ) {
        let mut bytes = seeds()[seed].clone().into_bytes();
        for (at, byte) in flips {
            let index = at.index(bytes.len());
            bytes[index] = byte;
        }
        check(&String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn two_documents_spliced_never_panic(
        first in 0usize..5,
        second in 0usize..5,
        cut_first in any::<prop::sample::Index>(),
        cut_second in any::<prop::sample::Index>(),
    ) {
        let seeds = seeds();
        let (a, b) = (seeds[first].as_bytes(), seeds[second].as_bytes());
        let mut bytes = a[..cut_first.index(a.len())].to_vec();
        bytes.extend_from_slice(&b[cut_second.index(b.len())..]);
        check(&String::from_utf8_lossy(&bytes));
    }

    #[test]
    fn a_node_replaced_by_random_json_is_workflow_invalid_at_a_real_pointer(
        seed in 0usize..5,
        at in any::<prop::sample::Index>(),
        replacement in any_json(),
    ) {
        let mut document: Value = serde_json::from_str(&seeds()[seed]).unwrap();
        let mut places = Vec::new();
        pointers(&document, String::new(), &mut places);
        let place = &places[at.index(places.len())];
        match document.pointer_mut(place) {
            Some(slot) => *slot = replacement,
            None => unreachable!("pointers() lists only existing places"),
        }
        check(&document.to_string());
    }
}

#[test]
fn a_huge_line_and_deep_nesting_are_workflow_invalid() {
    // A 4 MiB string where an id goes: parsed (it is valid JSON) or refused, never a hang or a panic.
    let huge = format!(
        r#"{{"version":1,"root":{{"kind":"runCode","id":"{}","execute":"upper"}}}}"#,
        "x".repeat(4 << 20)
    );
    check(&huge);
    // Ten thousand open brackets: the JSON parser's depth limit refuses it.
    let deep = "[".repeat(10_000);
    let error = WorkflowDocument::from_json(&deep).unwrap_err();
    assert_eq!(error.code(), "WORKFLOW_INVALID");
}

#[test]
fn a_document_nested_deeper_than_the_json_limit_is_refused_with_its_pointer() {
    // Built as a value, which has no parser depth limit: 1,000 nested sequences (deep enough that an
    // unbounded parser would accept it or overflow; shallow enough that cloning and dropping the
    // `Value`, which recurse too, fit the thread's ordinary 8 MiB stack).
    let outcome = std::thread::Builder::new()
        .stack_size(8 << 20)
        .spawn(|| {
            let mut node = json!({"kind": "runCode", "id": "leaf", "execute": "upper"});
            for level in 0..1_000 {
                node = json!({"kind": "sequence", "id": format!("s{level}"), "steps": [node]});
            }
            WorkflowDocument::from_value(json!({"version": 1, "root": node})).err()
        })
        .unwrap()
        .join()
        .unwrap();
    let error = outcome.expect("a document 1,000 levels deep is refused");
    assert_eq!(error.code(), "WORKFLOW_INVALID");
    let Error::WorkflowInvalid { path, message } = &error else {
        unreachable!()
    };
    assert!(path.starts_with("/root/steps/0/steps/0/"), "{path}");
    assert!(message.contains("nested more than 128 levels"), "{message}");
}
