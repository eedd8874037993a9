//! Request bodies: items to chat messages, parts, extra fields.

use super::*;

fn body(request: &ModelRequest<'_>, extra: Map<String, Value>) -> Value {
    let bytes = request_body(request, &extra).unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

fn weather_tool() -> ToolSpec {
    ToolSpec {
        name: "get_weather".to_owned(),
        description: "Current weather for a city".to_owned(),
        parameters: json!({"type": "object", "properties": {"city": {"type": "string"}}}),
    }
}

fn reasoning_with_details(details: Value) -> Item {
    let mut extra = Map::new();
    extra.insert("reasoning_details".to_owned(), details);
    Item::Reasoning(ReasoningItem {
        id: Some("rs_1".to_owned()),
        summary: Vec::new(),
        content: Some(vec![
            json!({"type": "reasoning_text", "text": "Two cities."}),
        ]),
        encrypted_content: None,
        extra,
    })
}

#[test]
fn request_body_translates_a_tool_conversation() {
    let details = json!([{
        "type": "reasoning.text", "text": "Two cities.", "signature": "c2ln",
        "format": "anthropic-claude-v1", "index": 0
    }]);
    let input = [
        Item::user_text("Weather in Paris and Rome?"),
        reasoning_with_details(details.clone()),
        Item::assistant_text("Checking both."),
        Item::function_call("call_1", "get_weather", "{\"city\":\"Paris\"}"),
        Item::function_call("call_2", "get_weather", "{\"city\":\"Rome\"}"),
        Item::function_call_output("call_1", "18°C"),
        Item::function_call_output("call_2", "21°C"),
        Item::Other(json!({"type": "web_search_call", "id": "ws_1", "status": "completed"})),
        Item::user_text("Answer as JSON."),
    ];
    let tools = [weather_tool()];
    let mut params = ModelParams::default();
    params.temperature = Some(0.2);
    params.top_p = Some(0.9);
    params.max_output_tokens = Some(256);
    params.stop = vec!["END".to_owned()];
    let output = OutputFormat {
        name: "output".to_owned(),
        schema: json!({"type": "object", "properties": {"paris": {"type": "string"}}}),
    };
    let request = ModelRequest::new("anthropic/claude-haiku-4.5", &input, &params)
        .with_instructions(Some("Be brief."))
        .with_tools(&tools)
        .with_output(Some(&output));
    assert_eq!(
        body(&request, Map::new()),
        json!({
            "model": "anthropic/claude-haiku-4.5",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Weather in Paris and Rome?"},
                {
                    "role": "assistant",
                    "content": "Checking both.",
                    "tool_calls": [
                        {"id": "call_1", "type": "function",
                         "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}},
                        {"id": "call_2", "type": "function",
                         "function": {"name": "get_weather", "arguments": "{\"city\":\"Rome\"}"}}
                    ],
                    "reasoning_details": details
                },
                {"role": "tool", "content": "18°C", "tool_call_id": "call_1"},
                {"role": "tool", "content": "21°C", "tool_call_id": "call_2"},
                {"role": "user", "content": "Answer as JSON."}
            ],
            "tools": [{"type": "function", "function": {
                "name": "get_weather",
                "description": "Current weather for a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}
            }}],
            "stream": true,
            "stream_options": {"include_usage": true},
            "temperature": 0.2,
            "top_p": 0.9,
            "max_tokens": 256,
            "stop": ["END"],
            "response_format": {"type": "json_schema", "json_schema": {
                "name": "output",
                "schema": {"type": "object", "properties": {"paris": {"type": "string"}}},
                "strict": false
            }}
        })
    );
}

#[test]
fn request_body_sends_images_as_parts_and_calls_without_text_as_null_content() {
    let mut image = Map::new();
    image.insert("image_url".to_owned(), json!("https://example.com/cat.png"));
    image.insert("detail".to_owned(), json!("low"));
    let input = [
        Item::message(
            Role::User,
            vec![
                ContentPart::InputText {
                    text: "What is this?".to_owned(),
                },
                ContentPart::InputImage(image),
            ],
        ),
        Item::developer_text("Use the tool."),
        Item::function_call("call_1", "describe", ""),
        Item::FunctionCallOutput(noetic_core::item::FunctionCallOutputItem {
            is_error: false,
            id: None,
            call_id: "call_1".to_owned(),
            output: json!([
                {"type": "input_text", "text": "A cat"},
                {"type": "input_text", "text": " on a mat."}
            ]),
            extra: Map::new(),
        }),
    ];
    let params = ModelParams::default();
    let request = ModelRequest::new("gpt-4o", &input, &params);
    let mut extra = Map::new();
    extra.insert("max_tokens".to_owned(), json!(64));
    extra.insert("provider".to_owned(), json!({"order": ["openai"]}));
    assert_eq!(
        body(&request, extra),
        json!({
            "model": "gpt-4o",
            "messages": [
                {"role": "user", "content": [
                    {"type": "text", "text": "What is this?"},
                    {"type": "image_url", "image_url": {"url": "https://example.com/cat.png", "detail": "low"}}
                ]},
                {"role": "developer", "content": "Use the tool."},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "describe", "arguments": "{}"}}
                ]},
                {"role": "tool", "content": "A cat on a mat.", "tool_call_id": "call_1"}
            ],
            "stream": true,
            "stream_options": {"include_usage": true},
            "max_tokens": 64,
            "provider": {"order": ["openai"]}
        })
    );
}

#[test]
fn extra_fields_replace_ours_without_duplicate_keys() {
    let params = ModelParams::default();
    let request = ModelRequest::new("m", &[], &params);
    let mut extra = Map::new();
    extra.insert("stream_options".to_owned(), json!({"include_usage": false}));
    let bytes = request_body(&request, &extra).unwrap();
    let text = String::from_utf8(bytes).unwrap();
    assert_eq!(text.matches("stream_options").count(), 1);
    assert!(text.contains("\"stream_options\":{\"include_usage\":false}"));
}

#[test]
fn an_image_by_file_id_has_no_chat_form() {
    let mut image = Map::new();
    image.insert("file_id".to_owned(), json!("file-1"));
    let input = [Item::message(
        Role::User,
        vec![ContentPart::InputImage(image)],
    )];
    let params = ModelParams::default();
    let request = ModelRequest::new("m", &input, &params);
    let error = request_body(&request, &Map::new()).unwrap_err();
    assert_eq!(error.code(), "PROVIDER_CONFIG_INVALID");
}

#[test]
fn decoded_openrouter_reasoning_replays_with_its_signature() {
    let (_, response) =
        replay("openrouter-chat.reasoning-details-then-tool-call.claude-haiku-4.5.sse");
    let mut input = vec![Item::user_text("Weather in Berlin? Use reasoning_weather.")];
    input.extend(response.items.iter().cloned());
    input.push(Item::function_call_output(
        "toolu_bdrk_01L9pX1Wp4FAEq9TT2Z6UAe7",
        "{\"temp_c\": 21}",
    ));
    let params = ModelParams::default();
    let request = ModelRequest::new("anthropic/claude-haiku-4.5", &input, &params);
    let body = body(&request, Map::new());
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3);
    let assistant = &messages[1];
    assert_eq!(assistant["role"], "assistant");
    assert_eq!(assistant["content"], Value::Null);
    assert_eq!(
        assistant["tool_calls"],
        json!([{"id": "toolu_bdrk_01L9pX1Wp4FAEq9TT2Z6UAe7", "type": "function",
                "function": {"name": "reasoning_weather", "arguments": "{\"city\": \"Berlin\"}"}}])
    );
    assert_eq!(
        assistant["reasoning_details"],
        reasoning(&response.items[0]).extra["reasoning_details"]
    );
    assert!(assistant["reasoning_details"][0]["signature"].is_string());
    assert_eq!(
        messages[2],
        json!({"role": "tool", "tool_call_id": "toolu_bdrk_01L9pX1Wp4FAEq9TT2Z6UAe7", "content": "{\"temp_c\": 21}"})
    );
}
