//! Request serialization: a two-turn tool loop through the harness, whose second request must carry the
//! replayed items the way the captured second requests did.

use noetic_core::{AgentHarness, ContextOptions, Tool, ToolContext, ToolError, call_model};
use noetic_providers::{OpenAI, RetryConfig};
use noetic_test_support::{MockReply, MockServer, fixtures_dir};
use serde_json::Value;

/// The fields that decide what a provider sees of an item; bookkeeping (`id`, `status`) may differ
/// between clients.
fn essence(item: &Value) -> Value {
    let is_message = item.get("role").is_some();
    let text = match item.get("content").filter(|_| is_message) {
        Some(Value::String(text)) => Some(text.clone()),
        Some(Value::Array(parts)) => Some(
            parts
                .iter()
                .filter_map(|part| part.get("text")?.as_str())
                .collect::<String>(),
        ),
        _ => None,
    };
    serde_json::json!({
        "type": item.get("type").and_then(Value::as_str).unwrap_or("message"),
        "role": item.get("role"),
        "text": text.map(|text| plain_quotes(&text)),
        "phase": item.get("phase"),
        "call_id": item.get("call_id"),
        "name": item.get("name"),
        "arguments": item.get("arguments"),
        "output": item.get("output"),
        "encrypted_content": item.get("encrypted_content"),
    })
}

/// The pydantic-ai capture's follow-up request spells the model's typographic quotes as ASCII ones (its
/// client re-wrote the text before sending it), so texts are compared with quotes folded.
fn plain_quotes(text: &str) -> String {
    text.replace(['\u{2018}', '\u{2019}'], "'")
        .replace(['\u{201C}', '\u{201D}'], "\"")
}

async fn second_request(
    turn1: &str,
    turn2: &str,
    tool: Tool,
    model: &str,
    instructions: Option<&str>,
    user: &str,
) -> (Value, String) {
    let server = MockServer::start().await;
    server.push(MockReply::fixture(turn1));
    server.push(MockReply::fixture(turn2));
    let provider = OpenAI::builder("sk-test")
        .base_url(server.base_url())
        .retry(RetryConfig::none())
        .build()
        .unwrap();
    let harness = AgentHarness::builder("replay")
        .provider("openai", provider)
        .build()
        .unwrap();
    let ctx = harness.create_context(ContextOptions::new());
    let mut step = call_model("llm").model(model).tool(tool);
    if let Some(instructions) = instructions {
        step = step.instructions(instructions);
    }
    let answer = harness
        .run(&step.build(), user.to_owned(), &ctx)
        .await
        .unwrap();
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[1].header("authorization"), Some("Bearer sk-test"));
    (requests[1].body.clone(), answer)
}

fn check_against(file: &str, ours: &Value) {
    let theirs: Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures_dir().join(file)).unwrap()).unwrap();
    let our_items: Vec<Value> = ours["input"]
        .as_array()
        .unwrap()
        .iter()
        .map(essence)
        .collect();
    let their_items: Vec<Value> = theirs["input"]
        .as_array()
        .unwrap()
        .iter()
        .map(essence)
        .collect();
    assert_eq!(our_items, their_items, "{file}: replayed items");
    assert_eq!(ours["model"], theirs["model"]);
    assert_eq!(ours["stream"], Value::Bool(true));
    assert_eq!(ours["include"], theirs["include"]);
    assert_eq!(ours.get("instructions"), theirs.get("instructions"));
    let tool = &ours["tools"][0];
    assert_eq!(tool["type"], "function");
    assert_eq!(tool["name"], theirs["tools"][0]["name"]);
    assert_eq!(tool["parameters"]["type"], "object");
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Coordinates {
    latitude: String,
    longitude: String,
}

#[tokio::test]
async fn a_tool_loop_replays_reasoning_calls_and_outputs_like_the_capture() {
    let weather = Tool::new(
        "weather",
        "Gets current weather for a location",
        |args: Coordinates, _ctx: ToolContext| async move {
            Ok::<_, ToolError>(format!(
                "Current weather at {}, {}: 15°C, Wind: 10 km/h",
                args.latitude, args.longitude
            ))
        },
    );
    let (body, answer) = second_request(
        "openai-responses.tool-loop.gpt-5-nano.turn1.sse",
        "openai-responses.tool-loop.gpt-5-nano.turn2.sse",
        weather,
        "gpt-5-nano",
        None,
        "What's the weather in Berlin? (52.5200, 13.4050)",
    )
    .await;
    assert_eq!(answer, "Berlin (52.5200, 13.4050): 15°C, wind 10 km/h.");
    check_against(
        "openai-responses.tool-loop.gpt-5-nano.turn2.request.json",
        &body,
    );
    assert_eq!(body["store"], Value::Bool(false));
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct Country {
    country: String,
}

#[tokio::test]
async fn a_commentary_message_is_replayed_with_its_phase() {
    let capital = Tool::new(
        "get_capital",
        "Looks up a capital",
        |args: Country, _ctx: ToolContext| async move {
            Ok::<_, ToolError>(if args.country == "PotatoLand" {
                "Potato City".to_owned()
            } else {
                "unknown".to_owned()
            })
        },
    );
    let (body, answer) = second_request(
        "openai-responses.phase-commentary-then-function-call.gpt-5.5.turn1.sse",
        "openai-responses.phase-final-answer.gpt-5.5.turn2.sse",
        capital,
        "gpt-5.5",
        Some("Briefly narrate what you are about to do before calling each tool."),
        "What is the capital of PotatoLand?",
    )
    .await;
    assert_eq!(answer, "The capital of PotatoLand is **Potato City**.");
    check_against(
        "openai-responses.phase-final-answer.gpt-5.5.turn2.request.json",
        &body,
    );
}

#[tokio::test]
async fn strict_tools_send_strict_schemas() {
    let server = MockServer::start().await;
    server.push(MockReply::fixture("openai-responses.text.gpt-4o-mini.sse"));
    let provider = noetic_providers::OpenResponses::builder(server.base_url())
        .strict_tools(true)
        .retry(RetryConfig::none())
        .build()
        .unwrap();
    let harness = AgentHarness::builder("strict")
        .provider("p", provider)
        .build()
        .unwrap();
    let ctx = harness.create_context(ContextOptions::new());
    let tool = Tool::new(
        "weather",
        "weather",
        |args: Coordinates, _ctx: ToolContext| async move {
            Ok::<_, ToolError>(args.latitude + &args.longitude)
        },
    );
    harness
        .run(
            &call_model("llm").model("m").tool(tool).build(),
            "hi".to_owned(),
            &ctx,
        )
        .await
        .unwrap();
    let tool = &server.requests()[0].body["tools"][0];
    assert_eq!(tool["strict"], true);
    assert_eq!(tool["parameters"]["additionalProperties"], false);
    assert_eq!(
        tool["parameters"]["required"],
        serde_json::json!(["latitude", "longitude"])
    );
}
