//! `noetic run`: streamed text, `--events jsonl`, `--output json`, the usage line, the prompt from
//! stdin, provider errors, and the Chat Completions and Anthropic providers.

use noetic_test_support::{MockReply, MockServer};
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;

use crate::{
    CHILD_TIMEOUT, MODEL, TempDir, args, call_reply, echo_flow, event_types, has_tool_output,
    mock_options, noetic, position, run_noetic, text_events, text_reply, usage,
};

/// The texts of the user messages of a request's `input`.
fn user_texts(body: &Value) -> Vec<String> {
    body["input"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|item| item["role"] == "user")
        .flat_map(|item| match &item["content"] {
            Value::String(text) => vec![text.clone()],
            Value::Array(parts) => parts
                .iter()
                .filter_map(|part| part["text"].as_str().map(str::to_owned))
                .collect(),
            _ => Vec::new(),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn run_prints_the_answer_text_and_the_usage_line() {
    let server = MockServer::start().await;
    server.push(text_reply("Hello from the mock provider"));
    let dir = TempDir::new();
    let flow = dir.write("flow.json", &echo_flow());

    let finished = run_noetic(
        args(&["run", &flow, "Say hello"], &mock_options(&server)),
        "",
    )
    .await;

    finished.assert_code(0);
    assert_eq!(finished.stdout, "Hello from the mock provider\n");
    assert!(
        finished
            .stderr
            .lines()
            .any(|line| line == "usage: 12 input tokens, 5 output tokens"),
        "{}",
        finished.stderr
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].path, "/v1/responses");
    assert_eq!(requests[0].body["model"], MODEL);
    assert_eq!(
        requests[0].body["instructions"],
        "You are a helpful assistant."
    );
    assert_eq!(user_texts(&requests[0].body), ["Say hello"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn run_streams_text_before_the_response_ends() {
    // The stream stalls for good after its first two deltas: their text can only reach stdout if the
    // CLI writes deltas as they arrive.
    let server = MockServer::start().await;
    let events = text_events(&["Streaming ", "before ", "the end"], usage(1, 1, None));
    server.push(MockReply::sse_events(events).stall_after_events(5));
    let dir = TempDir::new();
    let flow = dir.write("flow.json", &echo_flow());
    let mut child = noetic(args(&["run", &flow, "Stream"], &mock_options(&server)))
        .spawn()
        .unwrap();
    drop(child.stdin.take());
    let mut stdout = child.stdout.take().unwrap();

    let mut seen = Vec::new();
    // Bounded: guards against a hang if the text never comes.
    tokio::time::timeout(CHILD_TIMEOUT, async {
        let mut buffer = [0_u8; 1024];
        while !String::from_utf8_lossy(&seen).contains("Streaming before ") {
            let read = stdout.read(&mut buffer).await.unwrap();
            assert!(
                read > 0,
                "stdout closed early: {:?}",
                String::from_utf8_lossy(&seen)
            );
            seen.extend_from_slice(&buffer[..read]);
        }
    })
    .await
    .expect("the first deltas reached stdout while the stream was stalled");

    assert_eq!(
        child.try_wait().unwrap(),
        None,
        "still running: the stream has not ended"
    );
    assert!(!String::from_utf8_lossy(&seen).contains("the end"));
    child.start_kill().unwrap();
    tokio::time::timeout(CHILD_TIMEOUT, child.wait())
        .await
        .expect("the killed child exits")
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn events_jsonl_lines_parse_and_show_the_turn_and_the_tool_call_in_order() {
    let server = MockServer::start().await;
    server.set_responder(|request| {
        if has_tool_output(request) {
            text_reply("The echo said hi")
        } else {
            call_reply("echo", &json!({"text": "hi"}))
        }
    });
    let dir = TempDir::new();
    let flow = dir.write("flow.json", &echo_flow());

    let finished = run_noetic(
        args(
            &["run", &flow, "Echo hi", "--events", "jsonl"],
            &mock_options(&server),
        ),
        "",
    )
    .await;

    finished.assert_code(0);
    let lines = finished.json_lines();
    let types = event_types(&lines);
    let started = position(&types, "noetic:turn_started");
    let tool = position(&types, "noetic:tool_call_completed");
    let completed = position(&types, "noetic:turn_completed");
    assert!(started < tool && tool < completed, "{types:#?}");
    assert_eq!(
        completed,
        types.len() - 1,
        "turn_completed is the last line"
    );
    assert_eq!(
        lines[tool]["data"],
        json!({"call_id": "call_1", "name": "echo", "output": "hi", "error": false})
    );
    assert_eq!(lines[tool]["source"], "framework");
    // The provider's own events are passed through too, with their wire type.
    let delta = position(&types, "response.output_text.delta");
    assert!(tool < delta && delta < completed, "{types:#?}");
    assert_eq!(lines[delta]["source"], "sdk");
    // The tool's output went back to the model.
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let output = requests[1].body["input"]
        .as_array()
        .unwrap()
        .iter()
        .find(|item| item["type"] == "function_call_output")
        .cloned()
        .expect("the second request carries the tool output");
    assert_eq!(output["call_id"], "call_1");
    assert_eq!(output["output"], "hi");
}

#[tokio::test(flavor = "multi_thread")]
async fn output_json_prints_one_object_with_text_wire_items_and_usage() {
    let server = MockServer::start().await;
    server.push(text_reply("A JSON answer"));
    let dir = TempDir::new();
    let flow = dir.write("flow.json", &echo_flow());

    let finished = run_noetic(
        args(
            &["run", &flow, "Answer in JSON", "--output", "json"],
            &mock_options(&server),
        ),
        "",
    )
    .await;

    finished.assert_code(0);
    let lines = finished.json_lines();
    assert_eq!(
        lines.len(),
        1,
        "one JSON object and nothing else: {lines:#?}"
    );
    let response = &lines[0];
    assert_eq!(response["text"], "A JSON answer");
    // No cached tokens were reported, so there is no `cachedTokens`; no cost either.
    assert_eq!(
        response["usage"],
        json!({"inputTokens": 12, "outputTokens": 5})
    );
    assert!(response.get("cost").is_none(), "{response}");
    let items = response["items"].as_array().unwrap();
    assert_eq!(items.len(), 2, "{items:#?}");
    assert_eq!(
        items[0],
        json!({"type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "Answer in JSON"}]})
    );
    assert_eq!(items[1]["type"], "message");
    assert_eq!(items[1]["role"], "assistant");
    assert_eq!(items[1]["content"][0]["type"], "output_text");
    assert_eq!(items[1]["content"][0]["text"], "A JSON answer");
}

#[tokio::test(flavor = "multi_thread")]
async fn cached_tokens_show_in_the_usage_line_and_the_json_when_reported() {
    let server = MockServer::start().await;
    let reply = || MockReply::sse_events(text_events(&["Cached"], usage(40, 7, Some(30))));
    server.push(reply());
    server.push(reply());
    let dir = TempDir::new();
    let flow = dir.write("flow.json", &echo_flow());

    let plain = run_noetic(args(&["run", &flow, "Hi"], &mock_options(&server)), "").await;
    plain.assert_code(0);
    assert!(
        plain
            .stderr
            .lines()
            .any(|line| line == "usage: 40 input tokens (30 cached), 7 output tokens"),
        "{}",
        plain.stderr
    );

    let json = run_noetic(
        args(
            &["run", &flow, "Hi", "--output", "json"],
            &mock_options(&server),
        ),
        "",
    )
    .await;
    json.assert_code(0);
    assert_eq!(
        json.json_lines()[0]["usage"],
        json!({"inputTokens": 40, "outputTokens": 7, "cachedTokens": 30})
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_prompt_comes_from_stdin_without_a_prompt_argument() {
    let server = MockServer::start().await;
    server.push(text_reply("Read it"));
    let dir = TempDir::new();
    let flow = dir.write("flow.json", &echo_flow());

    let finished = run_noetic(
        args(&["run", &flow], &mock_options(&server)),
        "What is on stdin?\n",
    )
    .await;

    finished.assert_code(0);
    assert_eq!(finished.stdout, "Read it\n");
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    // The trailing newline is trimmed.
    assert_eq!(user_texts(&requests[0].body), ["What is on stdin?"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_provider_401_exits_1_with_a_provider_error() {
    let server = MockServer::start().await;
    server.set_fallback(MockReply::json(
        401,
        json!({"error": {"message": "invalid api key", "type": "invalid_request_error", "code": "invalid_api_key"}}),
    ));
    let dir = TempDir::new();
    let flow = dir.write("flow.json", &echo_flow());

    let finished = run_noetic(args(&["run", &flow, "Hi"], &mock_options(&server)), "").await;

    finished.assert_code(1);
    let error = finished
        .stderr
        .lines()
        .find(|line| line.starts_with("error[PROVIDER_ERROR]: "))
        .unwrap_or_else(|| panic!("no error[PROVIDER_ERROR] line: {}", finished.stderr));
    assert!(error.contains("401"), "{error}");
    assert!(!finished.stderr.contains("usage:"), "{}", finished.stderr);
    assert!(server.request_count() >= 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_chat_completions_provider_streams_text_and_reports_cost() {
    let server = MockServer::start().await;
    server.push(MockReply::fixture(
        "openrouter-chat.text-usage-cost.claude-haiku-4.5.sse",
    ));
    let dir = TempDir::new();
    let flow = dir.write("flow.json", &echo_flow());

    let finished = run_noetic(
        [
            "run",
            &flow,
            "Count to three",
            "--provider",
            "chat",
            "--base-url",
            &server.base_url(),
            "--model",
            MODEL,
        ],
        "",
    )
    .await;

    finished.assert_code(0);
    assert_eq!(finished.stdout, "1\n2\n3\n");
    assert!(
        finished
            .stderr
            .lines()
            .any(|line| line == "usage: 15 input tokens (0 cached), 9 output tokens, $0.000060"),
        "{}",
        finished.stderr
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].path, "/v1/chat/completions");
    assert_eq!(requests[0].body["model"], MODEL);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_api_key_exits_1_naming_the_variable_once() {
    for (provider, variable) in [
        ("openai", "OPENAI_API_KEY"),
        ("openrouter", "OPENROUTER_API_KEY"),
    ] {
        let finished = run_noetic(
            [
                "run",
                "examples/workflows/researcher.json",
                "Hi",
                "--provider",
                provider,
            ],
            "",
        )
        .await;
        finished.assert_code(1);
        // The code is printed once, in the brackets.
        assert!(
            finished
                .stderr
                .starts_with(&format!("error[MISSING_API_KEY]: {variable} is not set")),
            "{}",
            finished.stderr
        );
        assert_eq!(finished.stdout, "");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_anthropic_provider_streams_text_with_its_key_in_x_api_key() {
    let server = MockServer::start().await;
    server.push(MockReply::fixture_file(
        &noetic_test_support::anthropic_fixtures_dir().join("anthropic.text.claude-haiku-4.5.sse"),
    ));
    let dir = TempDir::new();
    let flow = dir.write("flow.json", &echo_flow());
    let child = crate::noetic([
        "run",
        &flow,
        "Count to three",
        "--provider",
        "anthropic",
        "--base-url",
        &server.base_url(),
        "--model",
        "claude-haiku-4-5",
    ])
    .env("ANTHROPIC_API_KEY", "sk-ant-cli-test")
    .spawn()
    .expect("the noetic binary starts");
    let finished = crate::finished(child).await;

    finished.assert_code(0);
    assert_eq!(finished.stdout, "1\n2\n3\n");
    assert!(
        finished
            .stderr
            .lines()
            .any(|line| line.starts_with("usage: 15 input tokens (0 cached), 9 output tokens")),
        "{}",
        finished.stderr
    );
    assert!(!finished.stderr.contains("sk-ant-cli-test"));
    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].path, "/v1/messages");
    assert_eq!(requests[0].header("x-api-key"), Some("sk-ant-cli-test"));
    assert_eq!(requests[0].body["model"], "claude-haiku-4-5");
}
