//! The decoder on crafted streams: what no recording has (errors mid-stream, unknown events and
//! deltas, every stop reason, a stream cut before `message_stop`).

use noetic_core::ResponseEvent;
use noetic_core::item::Item;
use noetic_core::model::{ResponseAccumulator, ResponseStatus};
use serde_json::{Value, json};

use super::AnthropicDecoder;
use super::events::{DeltaKind, Event, quick_delta};
use crate::decode::WireDecoder;

const START: &str = r#"{"type":"message_start","message":{"id":"msg_1","model":"claude-x","usage":{"input_tokens":10,"output_tokens":1}}}"#;

fn decode(events: &[Value]) -> Vec<ResponseEvent> {
    let mut decoder = AnthropicDecoder::new();
    let mut out = Vec::new();
    decoder.decode(START, &mut out).unwrap();
    for event in events {
        decoder.decode(&event.to_string(), &mut out).unwrap();
    }
    decoder.finish(&mut out).unwrap();
    out
}

fn text_block(index: u32, text: &str) -> Vec<Value> {
    vec![
        json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": text}}),
        json!({"type": "content_block_stop", "index": index}),
    ]
}

fn stop(reason: &str) -> Vec<Value> {
    vec![
        json!({"type": "message_delta", "delta": {"stop_reason": reason}, "usage": {"output_tokens": 7}}),
        json!({"type": "message_stop"}),
    ]
}

fn snapshot(events: &[ResponseEvent]) -> &noetic_core::model::ResponseSnapshot {
    match events.last() {
        Some(ResponseEvent::Finished(snapshot)) => snapshot,
        other => panic!("no terminal event: {other:?}"),
    }
}

#[test]
fn every_stop_reason_has_its_outcome() {
    for (reason, status, incomplete) in [
        ("end_turn", ResponseStatus::Completed, None),
        ("tool_use", ResponseStatus::Completed, None),
        ("stop_sequence", ResponseStatus::Completed, None),
        (
            "max_tokens",
            ResponseStatus::Incomplete,
            Some("max_output_tokens"),
        ),
        ("pause_turn", ResponseStatus::Incomplete, Some("pause_turn")),
        ("refusal", ResponseStatus::Incomplete, Some("refusal")),
        (
            "model_context_window_exceeded",
            ResponseStatus::Incomplete,
            Some("model_context_window_exceeded"),
        ),
        ("a_reason_from_the_future", ResponseStatus::Completed, None),
    ] {
        let mut events = text_block(0, "hi");
        events.extend(stop(reason));
        let out = decode(&events);
        let snapshot = snapshot(&out);
        assert_eq!(snapshot.status, Some(status), "{reason}");
        assert_eq!(
            snapshot.incomplete_reason.as_deref(),
            incomplete,
            "{reason}"
        );
    }
}

#[test]
fn an_error_event_fails_the_round_and_keeps_the_usage_reported() {
    let mut events = text_block(0, "partial");
    events.push(
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
    );
    // Anything after the error is ignored.
    events.extend(stop("end_turn"));
    let out = decode(&events);
    assert!(out.iter().any(|event| matches!(event,
        ResponseEvent::Error { code: Some(code), message } if code == "overloaded_error" && message == "Overloaded")));
    let snapshot = snapshot(&out);
    assert_eq!(snapshot.status, Some(ResponseStatus::Failed));
    assert_eq!(
        snapshot.error.as_deref(),
        Some("overloaded_error: Overloaded")
    );
    assert_eq!(
        snapshot.usage.unwrap().input_tokens,
        10,
        "charged as reported"
    );
    assert_eq!(
        out.iter()
            .filter(|e| matches!(e, ResponseEvent::Finished(_)))
            .count(),
        1
    );
}

#[test]
fn unknown_events_pass_through_and_unknown_deltas_are_skipped() {
    let mut events = vec![
        json!({"type": "ping"}),
        json!({"type": "compaction_progress", "value": 1}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "shiny_new_delta", "x": 1}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "ok"}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "content_block_start", "index": 1, "content_block": {"type": "mcp_tool_use", "id": "mcptoolu_1", "name": "x", "input": {}}}),
        json!({"type": "content_block_stop", "index": 1}),
    ];
    events.extend(stop("end_turn"));
    let out = decode(&events);
    assert!(out.iter().any(|event| matches!(event,
        ResponseEvent::Other { event_type, .. } if event_type == "compaction_progress")));
    let mut accumulator = ResponseAccumulator::new();
    for event in &out {
        accumulator.push(event);
    }
    let response = accumulator.finish("test", 0).unwrap();
    assert_eq!(response.text().as_deref(), Some("ok"));
    assert!(matches!(&response.items[1], Item::Other(block) if block["type"] == "mcp_tool_use"));
}

#[test]
fn a_stream_cut_before_message_stop_has_no_terminal_event() {
    let mut events = text_block(0, "half");
    events.push(json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 3}}));
    let out = decode(&events);
    assert!(!out.iter().any(|e| matches!(e, ResponseEvent::Finished(_))));
}

#[test]
fn a_tool_call_without_input_deltas_has_empty_object_arguments() {
    let mut events = vec![
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "now", "input": {}}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": ""}}),
        json!({"type": "content_block_stop", "index": 0}),
    ];
    events.extend(stop("tool_use"));
    let out = decode(&events);
    assert!(out.iter().any(|event| matches!(event,
        ResponseEvent::FunctionCallArgumentsDone { arguments, .. } if arguments == "{}")));
}

#[test]
fn usage_from_message_delta_replaces_field_by_field_never_sums() {
    let mut events = text_block(0, "x");
    events.push(json!({"type": "message_delta", "delta": {}, "usage": {"output_tokens": 5}}));
    events.push(json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"},
        "usage": {"input_tokens": 30, "output_tokens": 9, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 20}}));
    events.push(json!({"type": "message_stop"}));
    let usage = snapshot(&decode(&events)).usage.unwrap();
    assert_eq!(
        usage.input_tokens, 150,
        "uncached + cache reads + cache writes"
    );
    assert_eq!(usage.output_tokens, 9);
    assert_eq!(usage.cached_tokens, Some(100));
}

#[test]
fn a_2024_stream_without_cache_fields_reports_cached_as_absent() {
    let mut decoder = AnthropicDecoder::new();
    let mut out = Vec::new();
    for event in [
        json!({"type": "message_start", "message": {"id": "msg_old", "model": "claude-3-haiku", "usage": {"input_tokens": 12, "output_tokens": 1}}}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 4}}),
        json!({"type": "message_stop"}),
    ] {
        decoder.decode(&event.to_string(), &mut out).unwrap();
    }
    let usage = snapshot(&out).usage.unwrap();
    assert_eq!((usage.input_tokens, usage.output_tokens), (12, 4));
    assert_eq!(usage.cached_tokens, None, "absent is not zero");
}

#[test]
fn malformed_json_is_a_coded_event_error() {
    let mut decoder = AnthropicDecoder::new();
    let error = decoder
        .decode(r#"{"type":"content_block_delta","index":"#, &mut Vec::new())
        .unwrap_err();
    assert_eq!(error.code(), "EVENT_MALFORMED");
}

#[test]
fn an_openrouter_style_model_id_becomes_the_anthropic_one() {
    use super::request::model_id;
    assert_eq!(model_id("anthropic/claude-sonnet-4.5"), "claude-sonnet-4-5");
    assert_eq!(model_id("anthropic/claude-3.5-haiku"), "claude-3-5-haiku");
    assert_eq!(
        model_id("claude-sonnet-4-20250514"),
        "claude-sonnet-4-20250514"
    );
    assert_eq!(model_id("anthropic/claude-opus-4"), "claude-opus-4");
    assert_eq!(model_id("vendor.x/model"), "vendor.x/model");
}

#[test]
fn a_response_of_several_passes_is_billed_as_the_sum_of_its_iterations() {
    let mut events = text_block(0, "x");
    events.push(json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {
        "input_tokens": 40, "output_tokens": 9, "cache_read_input_tokens": 0,
        "iterations": [
            {"type": "compaction", "input_tokens": 1000, "output_tokens": 200, "cache_read_input_tokens": 50},
            {"type": "message", "input_tokens": 40, "output_tokens": 9, "cache_read_input_tokens": 0},
        ],
    }}));
    events.push(json!({"type": "message_stop"}));
    let usage = snapshot(&decode(&events)).usage.unwrap();
    assert_eq!(
        usage.input_tokens, 1090,
        "every pass's prompt, cached reads included"
    );
    assert_eq!(usage.output_tokens, 209);
    assert_eq!(usage.cached_tokens, Some(50));
    assert_eq!(
        usage.cache_write_tokens, None,
        "no pass reported cache writes"
    );
}

#[test]
fn only_anthropic_reasoning_with_a_signature_is_replayed() {
    use noetic_core::item::ReasoningItem;

    let reasoning = |extra: Value, encrypted: Option<&str>| {
        let Value::Object(extra) = extra else {
            unreachable!()
        };
        Item::Reasoning(ReasoningItem {
            id: None,
            summary: Vec::new(),
            content: Some(vec![json!({"type": "reasoning_text", "text": "hmm"})]),
            encrypted_content: encrypted.map(str::to_owned),
            extra,
        })
    };
    let input = [
        Item::user_text("q"),
        reasoning(json!({"anthropic": "thinking"}), Some("sig")),
        reasoning(json!({"anthropic": "redacted_thinking"}), Some("opaque")),
        // Another provider's encrypted reasoning, and an Anthropic block cut before its signature.
        reasoning(json!({}), Some("gAAAA-openai")),
        reasoning(json!({"anthropic": "thinking"}), None),
        Item::assistant_text("a"),
    ];
    let body = body_of(&input);
    assert_eq!(
        body["messages"][1]["content"],
        json!([
            {"type": "thinking", "thinking": "hmm", "signature": "sig"},
            {"type": "redacted_thinking", "data": "opaque"},
            {"type": "text", "text": "a"},
        ])
    );
}

#[test]
fn a_history_cut_by_a_steer_is_a_valid_conversation_every_tool_use_answered_first() {
    // What a round cut by a next-item steer leaves (core's `keep_cut_round`): the completed call and
    // message, the call answered as skipped, then the steer's message.
    let input = [
        Item::user_text("look at this"),
        Item::function_call("toolu_1", "wait", "{}"),
        Item::assistant_text("partial text"),
        Item::function_call_output(
            "toolu_1",
            "Tool call skipped: the user sent a new message before it ran.",
        ),
        Item::user_text("Use bullet points"),
    ];
    let body = body_of(&input);
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "look at this"}]},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "toolu_1", "name": "wait", "input": {}},
                {"type": "text", "text": "partial text"},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1",
                 "content": "Tool call skipped: the user sent a new message before it ran."},
                {"type": "text", "text": "Use bullet points"},
            ]},
        ])
    );
}

/// The body the wire builds for `input`, with default settings.
fn body_of(input: &[Item]) -> Value {
    let params = noetic_core::model::ModelParams::default();
    let request = noetic_core::model::ModelRequest::new("m", input, &params);
    let bytes = super::request::request_body(&request, &Default::default(), &Default::default());
    serde_json::from_slice(&bytes.unwrap()).unwrap()
}

/// What the full parse reads from a delta event: index, type and string piece.
fn full_delta(data: &str) -> Option<(u32, DeltaKind, String)> {
    let event: Event<'_> = serde_json::from_str(data).ok()?;
    let delta = event.delta?;
    Some((event.index?, delta.kind?, delta.text?.into_owned()))
}

#[test]
fn the_quick_path_reads_every_recorded_delta_as_the_full_parse_does() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/anthropic");
    let mut deltas = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|ext| ext != "sse") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for data in text.lines().filter_map(|line| line.strip_prefix("data: ")) {
            if !data.contains("\"content_block_delta\"") || data.contains("\"citations_delta\"") {
                continue;
            }
            let quick = quick_delta(data).unwrap_or_else(|| {
                panic!("{}: not read by the quick path: {data}", path.display())
            });
            let quick = (quick.0, quick.1, quick.2.into_owned());
            assert_eq!(Some(quick), full_delta(data), "{}: {data}", path.display());
            deltas += 1;
        }
    }
    assert!(deltas > 150, "only {deltas} recorded deltas");
}

#[test]
fn the_quick_path_leaves_what_it_cannot_read_exactly_to_the_full_parse() {
    let prefix = r#"{"type":"content_block_delta","index":3,"delta":{"type":"text_delta","text":"#;
    // Read by the quick path, the same as the full parse.
    for body in [
        r#""plain""#,
        r#""""#,
        r#""line\nbreak, \"quoted\", back\\slash, \u00e9, \ud83d\ude00""#,
        r#""ends in a backslash\\""#,
        r#""caf\u00e9 ü""#,
    ] {
        for padding in ["", "   "] {
            let data = format!("{prefix}{body}}}{padding}}}{padding}");
            let quick = quick_delta(&data).unwrap_or_else(|| panic!("not read: {data}"));
            let quick = (quick.0, quick.1, quick.2.into_owned());
            assert_eq!(Some(quick), full_delta(&data), "{data}");
        }
    }
    // Not read by the quick path: another field after the string, whether or not the string
    // looks like it ends at the delta's end; another key order; a type without one string field;
    // a raw control character; an index out of range; leading whitespace.
    for data in [
        format!(r#"{prefix}"a","extra":"b"}}}}"#),
        format!(r#"{prefix}"a\"","extra":"b\""}}}}"#),
        r#"{"index":0,"type":"content_block_delta","delta":{"type":"text_delta","text":"a"}}"#
            .to_owned(),
        r#"{"type":"content_block_delta","index":0,"delta":{"text":"a","type":"text_delta"}}"#
            .to_owned(),
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"citations_delta","citation":{}}}"#
            .to_owned(),
        format!("{prefix}\"a\u{1}b\"}}}}"),
        r#"{"type":"content_block_delta","index":99999999999,"delta":{"type":"text_delta","text":"a"}}"#
            .to_owned(),
        format!(" {prefix}\"a\"}}}}"),
        format!(r#"{prefix}"unterminated\"}}}}"#),
    ] {
        assert!(quick_delta(&data).is_none(), "read by the quick path: {data}");
    }
    // Those the full parse reads, it reads as the decoder expects: through the general path.
    let events = decode(&[
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        serde_json::from_str(&format!(r#"{prefix}"a","extra":"b"}}}}"#).replace(":3,", ":0,"))
            .unwrap(),
        json!({"type": "content_block_stop", "index": 0}),
    ]);
    assert!(events.iter().any(
        |event| matches!(event, ResponseEvent::OutputTextDelta { delta, .. } if delta == "a")
    ));
}
