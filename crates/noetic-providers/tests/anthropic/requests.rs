//! What the provider sends: headers, the body, and turn-2 requests rebuilt from decoded turn-1
//! histories, compared with the recorded ones.

use noetic_core::item::Item;
use noetic_core::model::{ModelParams, ModelRequest, ToolSpec};
use noetic_providers::{Anthropic, PromptCache, RetryConfig};
use noetic_test_support::{MockReply, MockServer, anthropic_fixtures_dir};
use serde_json::{Value, json};

use super::{ask, fixture_json, provider, respond};

fn tool(name: &str, parameters: Value) -> ToolSpec {
    ToolSpec {
        name: name.to_owned(),
        description: format!("The {name} tool"),
        parameters,
    }
}

fn reply(file: &str) -> MockReply {
    MockReply::fixture_file(&anthropic_fixtures_dir().join(file))
}

#[tokio::test]
async fn the_key_goes_in_x_api_key_with_the_version_header_and_never_in_debug() {
    let server = MockServer::start().await;
    let provider = Anthropic::builder("sk-ant-secret-123")
        .base_url(server.base_url())
        .beta("structured-outputs-2025-11-13")
        .retry(RetryConfig::none())
        .build()
        .unwrap();
    server.push(reply("anthropic.text.claude-haiku-4.5.sse"));
    ask(&provider).await.unwrap();
    let request = server.requests().remove(0);
    assert_eq!(request.path, "/v1/messages");
    assert_eq!(request.header("x-api-key"), Some("sk-ant-secret-123"));
    assert_eq!(request.header("authorization"), None);
    assert_eq!(request.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(
        request.header("anthropic-beta"),
        Some("structured-outputs-2025-11-13")
    );
    assert!(!format!("{provider:?}").contains("sk-ant-secret-123"));
}

#[tokio::test]
async fn a_request_carries_system_blocks_tools_and_a_max_tokens() {
    let server = MockServer::start().await;
    let provider = provider(&server);
    server.push(reply("anthropic.text.claude-haiku-4.5.sse"));
    let mut params = ModelParams::default();
    params.temperature = Some(0.5);
    params.stop = vec!["END".to_owned()];
    let input = [Item::user_text("hello"), Item::user_text("again")];
    let tools = [tool(
        "weather",
        json!({"type": "object", "properties": {"location": {"type": "string"}}}),
    )];
    let request = ModelRequest::new("claude-test", &input, &params)
        .with_instructions(Some("Be brief."))
        .with_tools(&tools);
    respond(&provider, &request).await.unwrap();
    let body = server.requests().remove(0).body;
    assert_eq!(body["model"], "claude-test");
    assert_eq!(body["max_tokens"], 4096, "the documented default");
    assert_eq!(
        body["system"],
        json!([{"type": "text", "text": "Be brief."}])
    );
    assert_eq!(
        body["messages"],
        json!([{"role": "user", "content": [
            {"type": "text", "text": "hello"},
            {"type": "text", "text": "again"},
        ]}]),
        "consecutive user items share one message"
    );
    assert_eq!(body["tools"][0]["name"], "weather");
    assert_eq!(body["tools"][0]["input_schema"]["type"], "object");
    assert_eq!(body["temperature"], 0.5);
    assert_eq!(body["stop_sequences"], json!(["END"]));
    assert_eq!(body["stream"], true);
    assert!(body.get("cache_control").is_none());
}

#[tokio::test]
async fn auto_caching_marks_the_system_prompt_the_last_tool_and_the_last_block() {
    let server = MockServer::start().await;
    let provider = Anthropic::builder("key")
        .base_url(server.base_url())
        .cache(PromptCache::Auto)
        .retry(RetryConfig::none())
        .build()
        .unwrap();
    server.push(reply("anthropic.cache-write.claude-3.5-sonnet.sse"));
    let params = ModelParams::default();
    let input = [Item::user_text("one"), Item::user_text("two")];
    let tools = [
        tool("a", json!({"type": "object"})),
        tool("b", json!({"type": "object"})),
    ];
    let request = ModelRequest::new("claude-test", &input, &params)
        .with_instructions(Some("System."))
        .with_tools(&tools);
    let response = respond(&provider, &request).await.unwrap();
    let body = server.requests().remove(0).body;
    let ephemeral = json!({"type": "ephemeral"});
    assert_eq!(body["system"][0]["cache_control"], ephemeral);
    assert!(body["tools"][0].get("cache_control").is_none());
    assert_eq!(body["tools"][1]["cache_control"], ephemeral);
    let content = body["messages"][0]["content"].as_array().unwrap();
    assert!(content[0].get("cache_control").is_none());
    assert_eq!(content[1]["cache_control"], ephemeral);
    // The capture wrote 1,167 tokens to the cache: part of the prompt, not cached (read) input.
    let usage = response.usage.unwrap();
    assert_eq!(usage.cached_tokens, Some(0));
    assert!(usage.input_tokens > 1_167, "{usage:?}");
}

/// The items of the user messages of a recorded request (their text blocks).
fn user_items(request: &Value) -> Vec<Item> {
    let mut items = Vec::new();
    for message in request["messages"].as_array().unwrap() {
        if message["role"] != "user" {
            break;
        }
        match &message["content"] {
            Value::String(text) => items.push(Item::user_text(text.clone())),
            Value::Array(blocks) => {
                for block in blocks {
                    items.push(Item::user_text(block["text"].as_str().unwrap().to_owned()));
                }
            }
            other => panic!("unexpected content {other}"),
        }
    }
    items
}

/// The messages without `cache_control` marks (the recorded client placed its own).
fn unmarked(mut value: Value) -> Value {
    match &mut value {
        Value::Object(map) => {
            map.remove("cache_control");
            for field in map.values_mut() {
                *field = unmarked(field.take());
            }
        }
        Value::Array(values) => {
            for field in values.iter_mut() {
                *field = unmarked(field.take());
            }
        }
        _ => {}
    }
    value
}

#[tokio::test]
async fn a_turn_2_request_rebuilt_from_the_decoded_turn_1_matches_the_recorded_one() {
    let server = MockServer::start().await;
    let provider = provider(&server);
    for (turn1, turn2) in [
        (
            "anthropic.text-then-tool.claude-sonnet-4.turn1",
            "anthropic.text-after-tool-result.claude-sonnet-4.turn2",
        ),
        (
            "anthropic.thinking-then-tool-use.claude-haiku-4.5.turn1",
            "anthropic.text-after-thinking-tool.claude-haiku-4.5.turn2",
        ),
    ] {
        let first = fixture_json(&format!("{turn1}.request.json"));
        let recorded = fixture_json(&format!("{turn2}.request.json"));
        let mut history = user_items(&first);
        let params = ModelParams::default();
        server.push(reply(&format!("{turn1}.sse")));
        let model = first["model"].as_str().unwrap();
        let response = respond(&provider, &ModelRequest::new(model, &history, &params))
            .await
            .unwrap();
        history.extend(response.items);
        // The tool results the recorded client sent, as our function call outputs.
        let last = recorded["messages"].as_array().unwrap().last().unwrap();
        for block in last["content"].as_array().unwrap() {
            history.push(Item::FunctionCallOutput(
                serde_json::from_value(json!({
                    "call_id": block["tool_use_id"],
                    "output": block["content"],
                }))
                .unwrap(),
            ));
        }
        server.push(reply(&format!("{turn2}.sse")));
        respond(&provider, &ModelRequest::new(model, &history, &params))
            .await
            .unwrap();
        let sent = server.requests().pop().unwrap().body;
        assert_eq!(
            unmarked(sent["messages"].clone()),
            unmarked(recorded["messages"].clone()),
            "{turn2}: messages (roles, block types, tool ids, signatures, results)"
        );
    }
}

#[tokio::test]
async fn a_steps_thinking_budget_and_cache_win_over_the_providers() {
    let server = MockServer::start().await;
    let provider = Anthropic::builder("key")
        .base_url(server.base_url())
        .thinking(1024)
        .retry(RetryConfig::none())
        .build()
        .unwrap();
    let input = [Item::user_text("think")];
    // The provider's budget, no caching.
    server.push(reply("anthropic.thinking-text.claude-haiku-4.5.sse"));
    let params = ModelParams::default();
    respond(
        &provider,
        &ModelRequest::new("claude-test", &input, &params),
    )
    .await
    .unwrap();
    // The step's budget and caching.
    server.push(reply("anthropic.thinking-text.claude-haiku-4.5.sse"));
    let mut params = ModelParams::default();
    params.thinking_budget = Some(4096);
    params.prompt_cache = Some(PromptCache::Auto);
    respond(
        &provider,
        &ModelRequest::new("claude-test", &input, &params),
    )
    .await
    .unwrap();
    let requests = server.requests();
    assert_eq!(
        requests[0].body["thinking"],
        json!({"type": "enabled", "budget_tokens": 1024})
    );
    assert!(
        requests[0].body["messages"][0]["content"][0]
            .get("cache_control")
            .is_none()
    );
    assert_eq!(
        requests[1].body["thinking"],
        json!({"type": "enabled", "budget_tokens": 4096})
    );
    assert_eq!(
        requests[1].body["messages"][0]["content"][0]["cache_control"],
        json!({"type": "ephemeral"})
    );
}

#[tokio::test]
async fn a_step_written_for_openrouter_runs_unchanged_on_anthropic() {
    let server = MockServer::start().await;
    let provider = provider(&server);
    server.push(reply("anthropic.text.claude-haiku-4.5.sse"));
    let params = ModelParams::default();
    let input = [Item::user_text("hi")];
    respond(
        &provider,
        &ModelRequest::new("anthropic/claude-haiku-4.5", &input, &params),
    )
    .await
    .unwrap();
    assert_eq!(server.requests()[0].body["model"], "claude-haiku-4-5");
}

#[tokio::test]
async fn images_and_pdfs_go_as_base64_or_url_sources_and_an_id_only_image_is_refused() {
    use noetic_core::item::{ContentPart, Role};
    let server = MockServer::start().await;
    let provider = provider(&server);
    server.push(reply("anthropic.text.claude-haiku-4.5.sse"));
    let params = ModelParams::default();
    let parts = |extra: Value| {
        let Value::Object(map) = extra else {
            unreachable!()
        };
        map
    };
    let input = [Item::message(
        Role::User,
        vec![
            ContentPart::InputText {
                text: "look".to_owned(),
            },
            ContentPart::InputImage(parts(
                json!({"image_url": "data:image/png;base64,iVBORw0KGgo="}),
            )),
            ContentPart::InputImage(parts(json!({"image_url": "https://example.com/cat.jpg"}))),
            ContentPart::InputFile(parts(
                json!({"file_data": "data:application/pdf;base64,JVBERi0=", "filename": "a.pdf"}),
            )),
        ],
    )];
    respond(
        &provider,
        &ModelRequest::new("claude-test", &input, &params),
    )
    .await
    .unwrap();
    let content = server.requests()[0].body["messages"][0]["content"].clone();
    assert_eq!(
        content,
        json!([
            {"type": "text", "text": "look"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
            {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
            {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="}},
        ])
    );
    let by_id = [Item::message(
        Role::User,
        vec![ContentPart::InputImage(parts(json!({"file_id": "file-1"})))],
    )];
    let error = respond(
        &provider,
        &ModelRequest::new("claude-test", &by_id, &params),
    )
    .await
    .unwrap_err();
    assert_eq!(error.code(), "PROVIDER_CONFIG_INVALID", "{error}");
    assert_eq!(
        server.request_count(),
        1,
        "nothing sent for a request it cannot express"
    );
}

#[tokio::test]
async fn explicit_caching_marks_the_last_block_of_each_marked_message_the_last_four_at_most() {
    let server = MockServer::start().await;
    let provider = provider(&server);
    server.push(reply("anthropic.text.claude-haiku-4.5.sse"));
    let mut params = ModelParams::default();
    params.prompt_cache = Some(PromptCache::Explicit);
    let mut input = vec![Item::user_text("a long document").with_cache_breakpoint()];
    for turn in 0..5 {
        input.push(Item::assistant_text(format!("answer {turn}")).with_cache_breakpoint());
        input.push(Item::user_text(format!("question {turn}")));
    }
    let tools = [tool("a", json!({"type": "object"}))];
    let request = ModelRequest::new("claude-test", &input, &params)
        .with_instructions(Some("System."))
        .with_tools(&tools);
    respond(&provider, &request).await.unwrap();
    let body = server.requests().remove(0).body;
    assert!(
        body["system"][0].get("cache_control").is_none(),
        "only marks"
    );
    assert!(
        body["tools"][0].get("cache_control").is_none(),
        "only marks"
    );
    let marked: Vec<String> = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|message| message["content"].as_array().unwrap().clone())
        .filter(|block| block.get("cache_control").is_some())
        .map(|block| block["text"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        marked,
        ["answer 1", "answer 2", "answer 3", "answer 4"],
        "six marks, the last four kept"
    );
}
