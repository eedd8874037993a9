//! Property tests of the (private) wire decoders on bad data: arbitrary text and real captured events
//! mutated at the JSON level (values replaced, fields removed, events dropped, repeated or cut). The
//! public-API side (SSE framing and both providers over HTTP) is in `tests/bad_bytes/`.

use proptest::prelude::*;
use proptest::sample::Index;
use serde_json::{Value, json};

use crate::chat::ChatDecoder;
use crate::decode::WireDecoder;
use crate::grammar::grammar_violation;
use crate::responses::parse_event;
use crate::sse::SseDecoder;

/// The `data` payloads of the captures whose names satisfy `wanted` (`.sse` decoded, `.jsonl` by line).
fn payloads(wanted: impl Fn(&str) -> bool) -> Vec<String> {
    let dir = noetic_test_support::fixtures_dir();
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .filter(|name| wanted(name))
        .collect();
    names.sort();
    let mut out = Vec::new();
    for name in names {
        let bytes = std::fs::read(dir.join(&name)).unwrap();
        if bytes.len() > 64 * 1024 {
            continue;
        }
        if name.ends_with(".sse") {
            SseDecoder::default()
                .feed(&bytes, &mut |event| out.push(event.data))
                .unwrap();
        } else if name.ends_with(".jsonl") {
            let text = String::from_utf8(bytes).unwrap();
            out.extend(
                text.lines()
                    .filter(|line| !line.is_empty())
                    .map(str::to_owned),
            );
        }
    }
    assert!(out.len() > 20, "found the captures in {dir:?}");
    out
}

/// A JSON value to put where a real one was: every type, edge numbers, and shapes the wires use.
fn replacement() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        prop_oneof![Just(u64::from(u32::MAX)), Just(u64::from(u32::MAX) + 1)].prop_map(Value::from),
        any::<f64>()
            .prop_filter("JSON numbers are finite", |number| number.is_finite())
            .prop_map(Value::from),
        ".{0,12}".prop_map(Value::from),
        Just(json!([])),
        Just(json!({})),
        Just(json!([{"index": 0}])),
        Just(json!({"index": 1, "id": "call_x", "function": {"arguments": "{"}})),
        Just(json!("[DONE]")),
        Just(json!("response.completed")),
    ]
}

/// One JSON-level change: the `target`-th node (pre-order) replaced, or removed when `None`.
#[derive(Debug, Clone)]
struct Edit {
    target: Index,
    replacement: Option<Value>,
}

fn edit() -> impl Strategy<Value = Edit> {
    (any::<Index>(), prop::option::weighted(0.8, replacement())).prop_map(
        |(target, replacement)| Edit {
            target,
            replacement,
        },
    )
}

fn count_nodes(value: &Value) -> usize {
    1 + match value {
        Value::Array(items) => items.iter().map(count_nodes).sum(),
        Value::Object(fields) => fields.values().map(count_nodes).sum(),
        _ => 0,
    }
}

/// Applies `edit` to the `target`-th node below `value` (the root itself is never removed).
fn apply_at(value: &mut Value, target: &mut usize, edit: &Edit) {
    let children: Vec<String> = match value {
        Value::Object(fields) => fields.keys().cloned().collect(),
        Value::Array(items) => (0..items.len()).map(|index| index.to_string()).collect(),
        _ => return,
    };
    for key in children {
        if *target == 0 {
            match (&edit.replacement, &mut *value) {
                (Some(new), Value::Object(fields)) => {
                    fields.insert(key, new.clone());
                }
                (None, Value::Object(fields)) => {
                    fields.remove(&key);
                }
                (Some(new), Value::Array(items)) => {
                    if let Some(slot) = key.parse::<usize>().ok().and_then(|i| items.get_mut(i)) {
                        *slot = new.clone();
                    }
                }
                (None, Value::Array(items)) => {
                    if let Ok(index) = key.parse::<usize>() {
                        items.remove(index);
                    }
                }
                _ => {}
            }
            *target = usize::MAX;
            return;
        }
        *target -= 1;
        let child = match value {
            Value::Object(fields) => fields.get_mut(&key),
            Value::Array(items) => key.parse::<usize>().ok().and_then(|i| items.get_mut(i)),
            _ => None,
        };
        if let Some(child) = child {
            apply_at(child, target, edit);
        }
        if *target == usize::MAX {
            return;
        }
    }
}

/// `payload` with the edits applied when it is JSON (as is otherwise), and maybe cut short.
fn mutate(payload: &str, edits: &[Edit], cut: Option<Index>) -> String {
    let mut text = match serde_json::from_str::<Value>(payload) {
        Ok(mut value) => {
            for edit in edits {
                let nodes = count_nodes(&value).saturating_sub(1).max(1);
                let mut target = edit.target.index(nodes);
                apply_at(&mut value, &mut target, edit);
            }
            value.to_string()
        }
        Err(_) => payload.to_owned(),
    };
    if let Some(cut) = cut {
        let mut at = cut.index(text.len() + 1);
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        text.truncate(at);
    }
    text
}

/// One payload of a mutated stream: a real one (edited, maybe cut) or arbitrary text.
#[derive(Debug, Clone)]
enum Payload {
    Real {
        which: Index,
        edits: Vec<Edit>,
        cut: Option<Index>,
    },
    Text(String),
}

fn payload() -> impl Strategy<Value = Payload> {
    prop_oneof![
        // Mostly real payloads, most of them intact, so that streams get far enough to matter.
        19 => (
            any::<Index>(),
            prop::option::weighted(0.25, prop::collection::vec(edit(), 1..4))
                .prop_map(Option::unwrap_or_default),
            prop::option::weighted(0.03, any::<Index>()),
        )
            .prop_map(|(which, edits, cut)| Payload::Real { which, edits, cut }),
        1 => any::<String>().prop_map(Payload::Text),
    ]
}

fn render(payload: &Payload, real: &[String]) -> String {
    match payload {
        Payload::Real { which, edits, cut } => mutate(&real[which.index(real.len())], edits, *cut),
        Payload::Text(text) => text.clone(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn any_text_is_a_responses_event_or_event_malformed(text in any::<String>()) {
        if let Err(error) = parse_event(&text) {
            prop_assert_eq!(error.code(), "EVENT_MALFORMED");
        }
    }

    #[test]
    fn mutated_responses_events_decode_or_are_event_malformed(payload in payload()) {
        let real = responses_payloads();
        let data = render(&payload, real);
        if let Err(error) = parse_event(&data) {
            prop_assert_eq!(error.code(), "EVENT_MALFORMED", "{}", error);
        }
    }

    #[test]
    fn mutated_chat_streams_keep_the_event_grammar_or_fail_as_event_malformed(
        stream in prop::collection::vec(payload(), 0..40),
    ) {
        let real = chat_payloads();
        let mut decoder = ChatDecoder::new();
        let mut events = Vec::new();
        let mut failed = false;
        for payload in &stream {
            // The stream stops at the first error, as the provider's does.
            if let Err(error) = decoder.decode(&render(payload, real), &mut events) {
                prop_assert_eq!(error.code(), "EVENT_MALFORMED", "{}", error);
                failed = true;
                break;
            }
        }
        if !failed {
            prop_assert!(decoder.finish(&mut events).is_ok());
        }
        prop_assert_eq!(grammar_violation(&events), None);
    }
}

fn responses_payloads() -> &'static [String] {
    static PAYLOADS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    PAYLOADS.get_or_init(|| payloads(|name| !name.contains("-chat.")))
}

fn chat_payloads() -> &'static [String] {
    static PAYLOADS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    PAYLOADS.get_or_init(|| payloads(|name| name.contains("-chat.")))
}
