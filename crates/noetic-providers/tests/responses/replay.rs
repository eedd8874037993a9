//! Every Responses fixture, at 1-byte, 7-byte and whole-body chunking, checked against the captures.

use noetic_core::item::Item;
use noetic_core::model::{ModelResponse, ResponseStatus};
use noetic_test_support::{MockReply, MockServer, fixtures_dir};

use super::{events, provider, responses};

enum Text {
    None,
    Exact(&'static str),
    /// A prefix and the length in characters.
    Prefix(&'static str, usize),
}

struct Expect {
    status: ResponseStatus,
    item_types: &'static [&'static str],
    text: Text,
    calls: &'static [(&'static str, &'static str, &'static str)],
    /// input, output, cached, reasoning; `None` when the capture reports no usage.
    usage: Option<(u64, u64, Option<u64>, Option<u64>)>,
    cost: Option<f64>,
    error: Option<&'static str>,
    incomplete_reason: Option<&'static str>,
}

const COMPLETED: Expect = Expect {
    status: ResponseStatus::Completed,
    item_types: &[],
    text: Text::None,
    calls: &[],
    usage: None,
    cost: None,
    error: None,
    incomplete_reason: None,
};

fn expectations(file: &str) -> Vec<Expect> {
    match file {
        "lmstudio-openresponses.tool-call.glm-4.7-flash.jsonl" => vec![Expect {
            item_types: &["reasoning", "message", "function_call"],
            text: Text::Exact(
                "I'll get the current weather information for San Francisco for you.",
            ),
            calls: &[(
                "weather",
                "call_2025306790300011",
                r#"{"location":"San Francisco"}"#,
            )],
            usage: Some((182, 61, Some(2), Some(48))),
            ..COMPLETED
        }],
        "openai-responses.error-then-failed.gpt-5-nano.jsonl" => vec![Expect {
            status: ResponseStatus::Failed,
            error: Some("You exceeded your current quota"),
            ..COMPLETED
        }],
        "openai-responses.function-call.gpt-4o-mini.sse" => vec![Expect {
            item_types: &["function_call"],
            calls: &[(
                "get_weather_at_location",
                "call_0UFGPwrziw5rbinYp7rthrTb",
                r#"{"location":"San Francisco, CA"}"#,
            )],
            usage: Some((74, 20, Some(0), Some(0))),
            ..COMPLETED
        }],
        "openai-responses.multi-step-reasoning-summary-tool-calls.gpt-5.1-codex-max.jsonl" => vec![
            Expect {
                item_types: &["reasoning", "function_call"],
                calls: &[(
                    "calculator",
                    "call_AB6AaRZ1FYZB2RwS6A5vbdqn",
                    r#"{"a":12,"b":7,"op":"add"}"#,
                )],
                usage: Some((134, 28, Some(0), Some(0))),
                ..COMPLETED
            },
            Expect {
                item_types: &["function_call"],
                calls: &[(
                    "calculator",
                    "call_Q6pW65MUgW9vF59BmItYGos3",
                    r#"{"a":19,"b":3,"op":"multiply"}"#,
                )],
                usage: Some((221, 26, Some(0), Some(0))),
                ..COMPLETED
            },
            Expect {
                item_types: &["function_call"],
                calls: &[(
                    "calculator",
                    "call_Zl5vIMnD7dVAjgU6FkhmiCZh",
                    r#"{"a":57,"b":10,"op":"multiply"}"#,
                )],
                usage: Some((260, 26, Some(0), Some(0))),
                ..COMPLETED
            },
            Expect {
                item_types: &["message"],
                text: Text::Exact("The final result is **570**."),
                usage: Some((299, 12, Some(0), Some(0))),
                ..COMPLETED
            },
        ],
        "openai-responses.phase-commentary-then-function-call.gpt-5.5.turn1.sse" => vec![Expect {
            item_types: &["reasoning", "message", "function_call"],
            text: Text::Exact("I’ll check the capital lookup tool for “PotatoLand.”"),
            calls: &[(
                "get_capital",
                "call_LabG58Uhrq9kZvR52BYKjToD",
                r#"{"country":"PotatoLand"}"#,
            )],
            usage: Some((63, 69, Some(0), Some(26))),
            ..COMPLETED
        }],
        "openai-responses.phase-final-answer.gpt-5.5.turn2.sse" => vec![Expect {
            item_types: &["message"],
            text: Text::Exact("The capital of PotatoLand is **Potato City**."),
            usage: Some((147, 16, Some(0), Some(0))),
            ..COMPLETED
        }],
        "openai-responses.reasoning-summary-long.o3-mini.sse" => vec![Expect {
            item_types: &["reasoning", "message"],
            text: Text::Prefix(
                "New York City offers an incredible blend of art and food",
                6290,
            ),
            usage: Some((45, 3506, Some(0), Some(2240))),
            ..COMPLETED
        }],
        "openai-responses.reasoning-then-function-call.gpt-5.sse" => vec![Expect {
            item_types: &["reasoning", "function_call"],
            calls: &[(
                "final_result",
                "call_CWXgs68YprAjp6t0371hiPOI",
                r#"{"result":6666}"#,
            )],
            usage: Some((53, 469, Some(0), Some(448))),
            ..COMPLETED
        }],
        "openai-responses.text.gpt-4o-mini.sse" => vec![Expect {
            item_types: &["message"],
            text: Text::Exact("Hello! How can I assist you today?"),
            usage: Some((11, 10, Some(0), Some(0))),
            ..COMPLETED
        }],
        "openai-responses.tool-loop.gpt-5-nano.turn1.sse" => vec![Expect {
            item_types: &["reasoning", "function_call"],
            calls: &[(
                "weather",
                "call_E9m0fralKLjUmND1MuTXjnqm",
                r#"{"latitude":"52.5200","longitude":"13.4050"}"#,
            )],
            usage: Some((87, 339, Some(0), Some(256))),
            ..COMPLETED
        }],
        "openai-responses.tool-loop.gpt-5-nano.turn2.sse" => vec![Expect {
            item_types: &["reasoning", "message"],
            text: Text::Exact("Berlin (52.5200, 13.4050): 15°C, wind 10 km/h."),
            usage: Some((458, 306, Some(0), Some(256))),
            ..COMPLETED
        }],
        "openai-responses.web-search-cached-tokens.gpt-5.sse" => vec![Expect {
            item_types: &["reasoning", "web_search_call", "reasoning", "message"],
            text: Text::Prefix(
                "San Francisco weather today (Tuesday, September 16, 2025): Mostly sunn",
                212,
            ),
            usage: Some((9463, 582, Some(8320), Some(512))),
            ..COMPLETED
        }],
        "openrouter-responses.reasoning-text.gpt-oss-20b.sse" => vec![Expect {
            item_types: &["reasoning", "message"],
            text: Text::Exact("4"),
            usage: Some((78, 37, Some(0), Some(22))),
            cost: Some(1.13e-05),
            ..COMPLETED
        }],
        "xai-responses.incomplete-max-output-tokens.grok-3-mini.jsonl" => vec![Expect {
            status: ResponseStatus::Incomplete,
            item_types: &["reasoning", "message"],
            text: Text::Prefix(
                "The sky appears blue during the day primarily due to a scientific phenomenon called Rayleigh scattering.",
                1515,
            ),
            usage: Some((24, 678, Some(12), Some(378))),
            incomplete_reason: Some("REASON_MAX_LEN"),
            ..COMPLETED
        }],
        other => panic!("no expectations written for fixture {other}: add them from the capture"),
    }
}

fn check(file: &str, chunk: usize, got: &[ModelResponse], expected: &[Expect]) {
    let label = format!("{file} at chunk size {chunk}");
    assert_eq!(got.len(), expected.len(), "{label}: number of responses");
    for (response, expect) in got.iter().zip(expected) {
        assert_eq!(response.status, expect.status, "{label}");
        let types: Vec<&str> = response.items.iter().map(Item::item_type).collect();
        assert_eq!(types, expect.item_types, "{label}: items");
        match expect.text {
            Text::None => assert_eq!(response.text(), None, "{label}: no text"),
            Text::Exact(text) => assert_eq!(response.text().as_deref(), Some(text), "{label}"),
            Text::Prefix(prefix, chars) => {
                let text = response.text().unwrap_or_default();
                assert!(text.starts_with(prefix), "{label}: {text:.80}");
                assert_eq!(text.chars().count(), chars, "{label}: text length");
            }
        }
        let calls: Vec<(&str, &str, serde_json::Value)> = response
            .function_calls()
            .map(|call| {
                (
                    call.name.as_str(),
                    call.call_id.as_str(),
                    serde_json::from_str(&call.arguments).expect("complete JSON arguments"),
                )
            })
            .collect();
        let expected_calls: Vec<(&str, &str, serde_json::Value)> = expect
            .calls
            .iter()
            .map(|(name, id, args)| (*name, *id, serde_json::from_str(args).unwrap()))
            .collect();
        assert_eq!(calls, expected_calls, "{label}: function calls");
        let usage = response.usage.map(|usage| {
            (
                usage.input_tokens,
                usage.output_tokens,
                usage.cached_tokens,
                usage.reasoning_tokens,
            )
        });
        assert_eq!(usage, expect.usage, "{label}: usage");
        assert_eq!(response.cost, expect.cost, "{label}: cost");
        match expect.error {
            Some(needle) => assert!(
                response
                    .error
                    .as_deref()
                    .unwrap_or_default()
                    .contains(needle),
                "{label}: {:?}",
                response.error
            ),
            None => assert_eq!(response.error, None, "{label}"),
        }
        assert_eq!(
            response.incomplete_reason.as_deref(),
            expect.incomplete_reason,
            "{label}"
        );
    }
}

/// The streamed Responses fixtures: every `.sse` and `.jsonl` that is not a Chat Completions capture.
fn streamed_fixtures() -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(fixtures_dir())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| {
            (name.ends_with(".sse") || name.ends_with(".jsonl")) && !name.contains("-chat.")
        })
        .collect();
    files.sort();
    files
}

#[tokio::test]
async fn every_streamed_responses_fixture_decodes_at_every_chunk_size() {
    let files = streamed_fixtures();
    assert_eq!(files.len(), 14, "the Responses captures: {files:?}");
    let server = MockServer::start().await;
    let provider = provider(&server);
    for file in &files {
        let expected = expectations(file);
        let size = std::fs::metadata(fixtures_dir().join(file)).unwrap().len() as usize;
        // One byte at a time over HTTP for every capture but the 500 KB one, which runs at 7 bytes
        // and whole here and byte by byte through the decoder in the crate's unit tests.
        let sizes: &[usize] = if size > 100_000 { &[7, 0] } else { &[1, 7, 0] };
        for &chunk in sizes {
            server.push(MockReply::fixture(file).chunk_size(chunk));
            let events = events(&provider)
                .await
                .unwrap_or_else(|error| panic!("{file} at {chunk}: {error}"));
            check(file, chunk, &responses(&events), &expected);
        }
    }
}

#[tokio::test]
async fn the_phase_of_assistant_messages_is_kept_for_replay() {
    let server = MockServer::start().await;
    let provider = provider(&server);
    for (file, phase) in [
        (
            "openai-responses.phase-commentary-then-function-call.gpt-5.5.turn1.sse",
            "commentary",
        ),
        (
            "openai-responses.phase-final-answer.gpt-5.5.turn2.sse",
            "final_answer",
        ),
    ] {
        server.push(MockReply::fixture(file));
        let response = responses(&events(&provider).await.unwrap()).remove(0);
        let message = response.items.iter().find_map(|item| match item {
            Item::Message(message) => Some(message),
            _ => None,
        });
        assert_eq!(
            message.unwrap().extra.get("phase").and_then(|v| v.as_str()),
            Some(phase),
            "{file}"
        );
    }
}

#[tokio::test]
async fn reasoning_is_kept_encrypted_summarised_or_as_text() {
    let server = MockServer::start().await;
    let provider = provider(&server);
    let reasoning = |file: &str| {
        let server = &server;
        let provider = &provider;
        let file = file.to_owned();
        async move {
            server.push(MockReply::fixture(&file));
            let response = responses(&events(provider).await.unwrap()).remove(0);
            response.items.into_iter().find_map(|item| match item {
                Item::Reasoning(reasoning) => Some(reasoning),
                _ => None,
            })
        }
    };
    let encrypted = reasoning("openai-responses.tool-loop.gpt-5-nano.turn1.sse")
        .await
        .unwrap();
    assert!(
        encrypted
            .encrypted_content
            .as_deref()
            .unwrap()
            .starts_with("gAAAAAB")
    );
    let summarised = reasoning("openai-responses.reasoning-summary-long.o3-mini.sse")
        .await
        .unwrap();
    assert_eq!(summarised.summary.len(), 4);
    let text = reasoning("openrouter-responses.reasoning-text.gpt-oss-20b.sse")
        .await
        .unwrap();
    let content = text.content.unwrap();
    assert!(
        content[0]["text"]
            .as_str()
            .unwrap()
            .starts_with("The user asks"),
        "{content:?}"
    );
}

#[tokio::test]
async fn a_whole_json_response_is_accepted_from_a_server_that_does_not_stream() {
    let file = "openrouter-responses.nonstream.cache-write-then-read.gpt-5.6-sol.json";
    let bodies: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(fixtures_dir().join(file)).unwrap()).unwrap();
    assert_eq!(bodies.len(), 2, "a cache write, then a cache read");
    let server = MockServer::start().await;
    let provider = provider(&server);
    let expected = [
        ((4020, 5, Some(0), Some(0)), 0.025265),
        ((4020, 5, Some(4012), Some(0)), 0.002196),
    ];
    for (body, (usage, cost)) in bodies.into_iter().zip(expected) {
        server.push(MockReply::json(200, body));
        let response = responses(&events(&provider).await.unwrap()).remove(0);
        assert_eq!(response.text().as_deref(), Some("OK"));
        let got = response.usage.map(|u| {
            (
                u.input_tokens,
                u.output_tokens,
                u.cached_tokens,
                u.reasoning_tokens,
            )
        });
        assert_eq!(got, Some(usage));
        assert_eq!(response.cost, Some(cost));
    }
}

#[tokio::test]
async fn the_generation_id_is_known_before_any_event() {
    let server = MockServer::start().await;
    let provider = provider(&server);
    server.push(
        MockReply::fixture("openai-responses.text.gpt-4o-mini.sse")
            .header("x-generation-id", "gen-1764265411-abc"),
    );
    let params = noetic_core::model::ModelParams::default();
    let input = [Item::user_text("hi")];
    let request = noetic_core::ModelRequest::new("m", &input, &params);
    let stream = noetic_core::ModelProvider::stream(&provider, &request)
        .await
        .unwrap();
    assert_eq!(stream.generation_id.as_deref(), Some("gen-1764265411-abc"));
}
