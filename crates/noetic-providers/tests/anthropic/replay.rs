//! Every recorded Messages stream, checked against its manifest facts.

use noetic_core::item::Item;
use noetic_core::model::{ModelResponse, ResponseStatus};
use noetic_test_support::{MockReply, MockServer, anthropic_fixtures_dir};
use serde_json::{Value, json};

use super::{ask, manifest, provider};

/// The item type a block decodes to.
fn item_type(block: &str) -> &str {
    match block {
        "text" => "message",
        "thinking" | "redacted_thinking" => "reasoning",
        "tool_use" => "function_call",
        // Server tools and their results stay as received.
        other => other,
    }
}

fn count(facts: &Value, key: &str) -> u64 {
    facts[key].as_u64().unwrap_or(0)
}

fn text_chars(response: &ModelResponse) -> usize {
    response
        .items
        .iter()
        .filter_map(|item| match item {
            Item::Message(message) => Some(message),
            _ => None,
        })
        .flat_map(|message| &message.content)
        .map(|part| match part {
            noetic_core::item::ContentPart::OutputText { text, .. } => text.chars().count(),
            _ => 0,
        })
        .sum()
}

fn thinking_chars(response: &ModelResponse) -> usize {
    response
        .items
        .iter()
        .filter_map(|item| match item {
            Item::Reasoning(reasoning) => reasoning.content.as_ref(),
            _ => None,
        })
        .flatten()
        .filter_map(|part| part["text"].as_str())
        .map(|text| text.chars().count())
        .sum()
}

fn check(file: &str, chunk: usize, facts: &Value, response: &ModelResponse) {
    let label = format!("{file} at chunk size {chunk}");
    let status = match facts["stop_reason"].as_str() {
        Some("max_tokens") => ResponseStatus::Incomplete,
        _ => ResponseStatus::Completed,
    };
    assert_eq!(response.status, status, "{label}");
    if status == ResponseStatus::Incomplete {
        assert_eq!(
            response.incomplete_reason.as_deref(),
            Some("max_output_tokens"),
            "{label}"
        );
    }
    let blocks: Vec<&str> = facts["blocks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|block| item_type(block.as_str().unwrap()))
        .collect();
    let types: Vec<&str> = response.items.iter().map(Item::item_type).collect();
    assert_eq!(types, blocks, "{label}: items in block order");
    assert_eq!(
        text_chars(response) as u64,
        count(facts, "text_chars"),
        "{label}: text"
    );
    assert_eq!(
        thinking_chars(response) as u64,
        count(facts, "thinking_chars"),
        "{label}: thinking"
    );
    // Every thinking block with a signature delta keeps its signature.
    let signatures = response
        .items
        .iter()
        .filter(|item| {
            matches!(item, Item::Reasoning(reasoning)
                if reasoning.encrypted_content.as_deref().is_some_and(|s| !s.is_empty())
                    && reasoning.content.is_some())
        })
        .count();
    assert_eq!(
        signatures as u64,
        count(facts, "signature_deltas"),
        "{label}: signatures"
    );
    let mut calls = Vec::new();
    for item in &response.items {
        match item {
            Item::FunctionCall(call) => {
                assert!(call.call_id.starts_with("toolu_"), "{label}: {call:?}");
                let input: Value = serde_json::from_str(&call.arguments)
                    .unwrap_or_else(|error| panic!("{label}: {:?}: {error}", call.arguments));
                calls.push(json!({"type": "tool_use", "name": call.name, "input": input}));
            }
            Item::Other(block) if block["type"] == "server_tool_use" => {
                calls.push(
                    json!({"type": "server_tool_use", "name": block["name"], "input": block["input"]}),
                );
            }
            _ => {}
        }
    }
    let expected: Vec<Value> = facts["tool_uses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|call| json!({"type": call["type"], "name": call["name"], "input": call["input"]}))
        .collect();
    assert_eq!(calls, expected, "{label}: tool calls");
    let wire = &facts["usage_final"];
    let field = |name: &str| wire[name].as_u64();
    let usage = response.usage.expect("usage reported");
    assert_eq!(
        usage.input_tokens,
        field("input_tokens").unwrap_or(0)
            + field("cache_creation_input_tokens").unwrap_or(0)
            + field("cache_read_input_tokens").unwrap_or(0),
        "{label}: input is the whole prompt"
    );
    assert_eq!(
        Some(usage.output_tokens),
        field("output_tokens"),
        "{label}: output from the last message_delta, not a sum"
    );
    assert_eq!(
        usage.cached_tokens,
        field("cache_read_input_tokens"),
        "{label}: cached = cache reads (absent stays absent)"
    );
    assert_eq!(
        usage.cache_write_tokens,
        field("cache_creation_input_tokens"),
        "{label}: cache writes kept as their own count"
    );
    assert_eq!(
        response.model.as_deref(),
        facts["model"].as_str(),
        "{label}"
    );
}

#[tokio::test]
async fn every_streamed_anthropic_fixture_decodes_to_its_manifest_facts_at_every_chunk_size() {
    let entries: Vec<Value> = manifest()
        .into_iter()
        .filter(|entry| {
            entry["status"] == 200 && !entry["file"].as_str().unwrap().ends_with(".json")
        })
        .collect();
    assert_eq!(entries.len(), 12, "the streamed captures");
    let server = MockServer::start().await;
    let provider = provider(&server);
    for entry in &entries {
        let file = entry["file"].as_str().unwrap();
        for chunk in [1, 0] {
            server.push(
                MockReply::fixture_file(&anthropic_fixtures_dir().join(file)).chunk_size(chunk),
            );
            let response = ask(&provider)
                .await
                .unwrap_or_else(|error| panic!("{file} at {chunk}: {error}"));
            check(file, chunk, &entry["facts"], &response);
        }
    }
}

#[tokio::test]
async fn citations_are_kept_as_annotations_of_the_text() {
    let server = MockServer::start().await;
    let provider = provider(&server);
    server.push(MockReply::fixture_file(
        &anthropic_fixtures_dir().join("anthropic.web-search-citations.claude-haiku-4.5.sse"),
    ));
    let response = ask(&provider).await.unwrap();
    let annotations: Vec<&Value> = response
        .items
        .iter()
        .filter_map(|item| match item {
            Item::Message(message) => Some(message),
            _ => None,
        })
        .flat_map(|message| &message.content)
        .filter_map(|part| match part {
            noetic_core::item::ContentPart::OutputText { extra, .. } => extra.get("annotations"),
            _ => None,
        })
        .flat_map(|annotations| annotations.as_array().unwrap())
        .collect();
    assert!(!annotations.is_empty(), "{:#?}", response.items);
    for citation in annotations {
        assert_eq!(citation["type"], "web_search_result_location");
        assert!(
            citation["url"]
                .as_str()
                .is_some_and(|url| url.starts_with("http"))
        );
    }
    // The search result block is carried whole, for the history.
    let result = response
        .items
        .iter()
        .find_map(|item| match item {
            Item::Other(block) if block["type"] == "web_search_tool_result" => Some(block),
            _ => None,
        })
        .expect("the search result block");
    assert!(
        result["tool_use_id"]
            .as_str()
            .unwrap()
            .starts_with("srvtoolu_")
    );
    assert!(result["content"].is_array());
}

#[tokio::test]
async fn a_whole_json_message_decodes_like_a_stream_redacted_thinking_kept_opaque() {
    let server = MockServer::start().await;
    let provider = provider(&server);
    let file = "anthropic.nonstream.redacted-thinking.claude-sonnet-4.5.json";
    let recorded = super::fixture_json(file);
    server.push(MockReply::fixture_file(
        &anthropic_fixtures_dir().join(file),
    ));
    let response = ask(&provider).await.unwrap();
    assert_eq!(response.status, ResponseStatus::Completed);
    let types: Vec<&str> = response.items.iter().map(Item::item_type).collect();
    assert_eq!(types, ["reasoning", "message"]);
    let Item::Reasoning(reasoning) = &response.items[0] else {
        unreachable!()
    };
    assert_eq!(
        reasoning.encrypted_content.as_deref(),
        recorded["content"][0]["data"].as_str(),
        "the redacted data byte for byte"
    );
    assert_eq!(
        response.text().as_deref(),
        recorded["content"][1]["text"].as_str()
    );
    let usage = response.usage.unwrap();
    assert_eq!((usage.input_tokens, usage.output_tokens), (92, 196));
}

#[tokio::test]
async fn an_http_error_is_a_provider_error_with_its_status_type_and_message() {
    let server = MockServer::start().await;
    let provider = provider(&server);
    for (file, status, kind) in [
        (
            "anthropic.http-401.authentication-error.json",
            401,
            "authentication_error",
        ),
        (
            "anthropic.http-400.invalid-request.json",
            400,
            "invalid_request_error",
        ),
    ] {
        let recorded = super::fixture_json(file);
        server.push(MockReply::fixture_file(&anthropic_fixtures_dir().join(file)).status(status));
        let error = ask(&provider).await.unwrap_err();
        let text = error.to_string();
        assert_eq!(error.code(), "PROVIDER_ERROR", "{file}: {text}");
        assert!(text.contains(&status.to_string()), "{file}: {text}");
        assert!(text.contains(kind), "{file}: {text}");
        let message = recorded["error"]["message"].as_str().unwrap();
        assert!(text.contains(message), "{file}: {text}");
        assert!(!text.contains("sk-ant-test-key"), "{file}: {text}");
    }
}
