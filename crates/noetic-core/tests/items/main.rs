//! Every item in the recorded provider streams (`fixtures/openresponses/`) parses into an [`Item`], and
//! every item a provider sent serializes back to exactly the JSON it was parsed from.
//!
//! Formats (see `fixtures/openresponses/SOURCES.md`): `.sse` raw SSE bodies, `.jsonl` one event per
//! line, `.json` non-streaming bodies (one object or an array of them), `.request.json` request bodies
//! whose `input` replays items (possibly in the "easy input" form: no `type`, string `content`).

use std::collections::BTreeMap;
use std::fs;
use std::path::PathBuf;

use noetic_core::{Item, Role};
use noetic_test_support::fixtures_dir;
use serde_json::Value;

/// Chat Completions streams carry no Responses items: skipped by name.
const CHAT_COMPLETIONS: &[&str] = &["openai-chat.", "openrouter-chat."];

/// Responses fixtures that truly hold no item: the response fails before any output.
const WITHOUT_ITEMS: &[&str] = &["openai-responses.error-then-failed.gpt-5-nano.jsonl"];

/// The JSON payloads of an SSE body: `data:` lines joined per event, comments and `[DONE]` skipped.
fn sse_payloads(body: &str) -> Vec<Value> {
    let mut payloads = Vec::new();
    let mut data: Vec<&str> = Vec::new();
    let mut dispatch = |data: &mut Vec<&str>| {
        if !data.is_empty() {
            let joined = data.join("\n");
            data.clear();
            if joined != "[DONE]" {
                payloads.push(serde_json::from_str(&joined).expect("SSE data is JSON"));
            }
        }
    };
    for line in body.lines() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.is_empty() {
            dispatch(&mut data);
        } else if let Some(value) = line.strip_prefix("data:") {
            data.push(value.strip_prefix(' ').unwrap_or(value));
        }
        // `event:`, `id:`, `retry:` and `:` comment lines carry no payload.
    }
    dispatch(&mut data);
    payloads
}

/// One JSON event per non-empty line.
fn jsonl_payloads(body: &str) -> Vec<Value> {
    body.lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| serde_json::from_str(line).expect("JSON-lines event"))
        .collect()
}

/// The items of a stream: `output_item.added`/`.done` items and the output of terminal responses.
fn stream_items(events: &[Value]) -> Vec<Value> {
    let mut items = Vec::new();
    for event in events {
        match event["type"].as_str() {
            Some("response.output_item.added" | "response.output_item.done") => {
                items.push(event["item"].clone());
            }
            Some("response.completed" | "response.incomplete" | "response.failed") => {
                items.extend(output_of(&event["response"]));
            }
            _ => {}
        }
    }
    items
}

/// The `output` items of a response body.
fn output_of(response: &Value) -> Vec<Value> {
    response["output"].as_array().cloned().unwrap_or_default()
}

fn fixture_files() -> Vec<(String, PathBuf)> {
    let mut files: Vec<(String, PathBuf)> = fs::read_dir(fixtures_dir())
        .expect("fixtures directory")
        .map(|entry| {
            let path = entry.expect("directory entry").path();
            let name = path
                .file_name()
                .expect("a file name")
                .to_string_lossy()
                .into_owned();
            (name, path)
        })
        .filter(|(name, _)| {
            [".sse", ".jsonl", ".json"]
                .iter()
                .any(|ext| name.ends_with(ext))
        })
        .collect();
    files.sort();
    files
}

/// What one fixture file holds.
enum Fixture {
    /// Items a provider sent (stream events or a response body).
    Response(Vec<Value>),
    /// Items a client sent (`input` of a request body).
    Request(Vec<Value>),
}

fn read_fixture(name: &str, path: &PathBuf) -> Fixture {
    let body = fs::read_to_string(path).expect("fixture is UTF-8");
    if name.ends_with(".request.json") {
        let request: Value = serde_json::from_str(&body).expect("request body is JSON");
        let input = request["input"]
            .as_array()
            .cloned()
            .expect("request has input items");
        Fixture::Request(input)
    } else if name.ends_with(".json") {
        let value: Value = serde_json::from_str(&body).expect("response body is JSON");
        let bodies = match value {
            Value::Array(bodies) => bodies,
            body => vec![body],
        };
        Fixture::Response(bodies.iter().flat_map(output_of).collect())
    } else if name.ends_with(".sse") {
        Fixture::Response(stream_items(&sse_payloads(&body)))
    } else {
        Fixture::Response(stream_items(&jsonl_payloads(&body)))
    }
}

/// Checks that `value` parses and serializes back to itself exactly.
fn check_round_trip(value: &Value) -> Result<Item, String> {
    let item: Item =
        serde_json::from_value(value.clone()).map_err(|error| format!("parse: {error}"))?;
    let back = serde_json::to_value(&item).map_err(|error| format!("serialize: {error}"))?;
    if back != *value {
        return Err(format!(
            "round trip changed the item:\n  sent: {value}\n  back: {back}"
        ));
    }
    let expected_type = value["type"].as_str().unwrap_or("message");
    if item.item_type() != expected_type {
        return Err(format!(
            "item_type() is {:?}, expected {expected_type:?}",
            item.item_type()
        ));
    }
    Ok(item)
}

/// The text of a message's content on the wire: a string, or its text and refusal parts joined.
fn wire_text(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|part| match part["type"].as_str() {
                Some("input_text" | "output_text") => part["text"].as_str(),
                Some("refusal") => part["refusal"].as_str(),
                _ => None,
            })
            .collect(),
        _ => String::new(),
    }
}

/// Checks a request input item: it parses, with the expected type, role and text; an item in the full
/// form (explicit `type`, content as parts) also round-trips exactly.
fn check_request_item(value: &Value) -> Result<Item, String> {
    let full_form = value.get("type").is_some() && !value["content"].is_string();
    if full_form {
        check_round_trip(value)?;
    }
    let item: Item =
        serde_json::from_value(value.clone()).map_err(|error| format!("parse: {error}"))?;
    let expected_type = value["type"].as_str().unwrap_or("message");
    if item.item_type() != expected_type {
        return Err(format!(
            "item_type() is {:?}, expected {expected_type:?}",
            item.item_type()
        ));
    }
    if expected_type == "message" {
        let role: Role = serde_json::from_value(value["role"].clone())
            .map_err(|error| format!("role: {error}"))?;
        if item.role() != Some(role) {
            return Err(format!("role is {:?}, expected {role:?}", item.role()));
        }
        let text = wire_text(&value["content"]);
        if text.is_empty() || item.text().as_deref() != Some(text.as_str()) {
            return Err(format!("text is {:?}, expected {text:?}", item.text()));
        }
    }
    Ok(item)
}

#[test]
fn every_recorded_item_parses_and_round_trips() {
    let mut failures = Vec::new();
    let mut per_file = BTreeMap::new();
    let mut types: BTreeMap<String, usize> = BTreeMap::new();
    let mut response_items = 0;
    let mut request_items = 0;
    let mut easy_inputs = 0;
    let mut unmodelled = 0;

    let files = fixture_files();
    assert!(files.len() >= 20, "found only {} fixtures", files.len());
    for (name, path) in &files {
        if CHAT_COMPLETIONS
            .iter()
            .any(|prefix| name.starts_with(prefix))
        {
            continue;
        }
        let (items, is_request) = match read_fixture(name, path) {
            Fixture::Response(items) => (items, false),
            Fixture::Request(items) => (items, true),
        };
        per_file.insert(name.clone(), items.len());
        for (index, value) in items.iter().enumerate() {
            let checked = if is_request {
                request_items += 1;
                if value.get("type").is_none() || value["content"].is_string() {
                    easy_inputs += 1;
                }
                check_request_item(value)
            } else {
                response_items += 1;
                check_round_trip(value)
            };
            match checked {
                Ok(item) => {
                    *types.entry(item.item_type().to_owned()).or_default() += 1;
                    if matches!(item, Item::Other(_)) {
                        unmodelled += 1;
                    }
                }
                Err(message) => failures.push(format!("{name} item {index}: {message}")),
            }
        }
    }

    assert!(
        failures.is_empty(),
        "{} item(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );

    let empty: Vec<&String> = per_file
        .iter()
        .filter(|(name, count)| **count == 0 && !WITHOUT_ITEMS.contains(&name.as_str()))
        .map(|(name, _)| name)
        .collect();
    assert!(
        empty.is_empty(),
        "fixtures that contributed no item: {empty:?}"
    );
    for name in WITHOUT_ITEMS {
        assert_eq!(
            per_file.get(*name),
            Some(&0),
            "{name} is expected to hold no item"
        );
    }
    assert!(
        per_file.len() >= 15,
        "only {} Responses fixtures were read",
        per_file.len()
    );
    assert!(response_items >= 90, "only {response_items} response items");
    assert!(request_items >= 9, "only {request_items} request items");
    assert!(easy_inputs >= 2, "only {easy_inputs} easy-form input items");
    assert!(
        unmodelled >= 3,
        "only {unmodelled} items of unmodelled types"
    );
    for kind in [
        "message",
        "function_call",
        "function_call_output",
        "reasoning",
        "web_search_call",
    ] {
        assert!(types.contains_key(kind), "no `{kind}` item among {types:?}");
    }
}

#[test]
fn the_failed_stream_has_a_failed_response_and_no_items() {
    let path = fixtures_dir().join(WITHOUT_ITEMS[0]);
    let events = jsonl_payloads(&fs::read_to_string(path).unwrap());
    let failed: Vec<&Value> = events
        .iter()
        .filter(|event| event["type"] == "response.failed")
        .collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0]["response"]["output"], Value::Array(Vec::new()));
    assert!(stream_items(&events).is_empty());
}

#[test]
fn sse_extraction_skips_comments_done_and_event_lines() {
    let body = ": OPENROUTER PROCESSING\r\n\r\nevent: response.created\r\ndata: {\"type\":\"a\"}\r\n\r\ndata: {\"type\":\r\ndata: \"b\"}\n\ndata: [DONE]\n\n";
    let payloads = sse_payloads(body);
    assert_eq!(
        payloads,
        [
            serde_json::json!({"type": "a"}),
            serde_json::json!({"type": "b"})
        ]
    );
}

#[test]
fn easy_input_messages_become_messages_with_input_text() {
    let item: Item =
        serde_json::from_value(serde_json::json!({"role": "user", "content": "hello"})).unwrap();
    assert_eq!(item, Item::user_text("hello"));
    assert_eq!(
        serde_json::to_value(&item).unwrap(),
        serde_json::json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hello"}]})
    );
}
