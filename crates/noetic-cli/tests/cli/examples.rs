//! The example workflows in `examples/workflows/`: each validates against the original's JSON Schema
//! and runs through the binary against the mock provider; the researcher runs offline on the demo
//! model.

use std::path::PathBuf;

use noetic_test_support::MockServer;
use serde_json::Value;

use crate::{MODEL, args, mock_options, run_noetic, text_reply, workspace_root};

/// Every `examples/workflows/*.json`, as paths relative to the workspace root, sorted.
fn example_workflows() -> Vec<String> {
    let dir = workspace_root().join("examples/workflows");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| {
            path.extension()
                .is_some_and(|extension| extension == "json")
        })
        .map(|path| {
            format!(
                "examples/workflows/{}",
                path.file_name().unwrap().to_str().unwrap()
            )
        })
        .collect();
    files.sort();
    assert!(
        files.len() >= 3,
        "the examples are missing from {}: {files:?}",
        dir.display()
    );
    files
}

fn read_json(relative: &str) -> Value {
    let path: PathBuf = workspace_root().join(relative);
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap())
        .unwrap_or_else(|error| panic!("{relative} is not JSON: {error}"))
}

/// A mock provider answering every request with a text naming the model it was asked for.
async fn answering_server() -> MockServer {
    let server = MockServer::start().await;
    server.set_responder(|request| {
        let model = request.body["model"].as_str().unwrap_or("no model");
        text_reply(&format!("answer from {model}"))
    });
    server
}

fn requested_models(server: &MockServer) -> Vec<String> {
    server
        .requests()
        .iter()
        .map(|request| {
            request.body["model"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn every_example_workflow_validates_against_the_original_schema() {
    let schema =
        read_json("crates/noetic-core/tests/workflow/fixtures/noetic-workflow.schema.json");
    let validator = jsonschema::validator_for(&schema).expect("the schema compiles");
    for file in example_workflows() {
        let mut document = read_json(&file);
        // The original's examples carry `$schema`, which its own schema (additionalProperties: false
        // at the top) does not list: set it aside, as docs/workflows.md says.
        document.as_object_mut().unwrap().remove("$schema");
        let errors: Vec<String> = validator
            .iter_errors(&document)
            .map(|error| format!("{error} at {}", error.instance_path()))
            .collect();
        assert!(errors.is_empty(), "{file}: {errors:#?}");

        let finished = run_noetic(["validate", file.as_str()], "").await;
        finished.assert_code(0);
        assert!(
            finished.stdout.ends_with(&format!("{file}: valid\n")),
            "{}",
            finished.stdout
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn every_example_workflow_runs_against_the_mock_provider() {
    for file in example_workflows() {
        let server = answering_server().await;
        let finished = run_noetic(
            args(
                &["run", &file, "Find recent AI news"],
                &mock_options(&server),
            ),
            "",
        )
        .await;
        finished.assert_code(0);
        let models = requested_models(&server);
        assert!(!models.is_empty(), "{file} made no model request");
        // The last model call gives the answer.
        let last = models.last().unwrap();
        assert!(
            finished.stdout.ends_with(&format!("answer from {last}\n")),
            "{file}: {}",
            finished.stdout
        );
        assert!(
            finished.stderr.contains("usage: "),
            "{file}: {}",
            finished.stderr
        );
        // The models asked for, and whether the calls run one after the other.
        let (expected, sequential): (&[&str], bool) = match file.rsplit('/').next().unwrap() {
            "researcher.json" => (&["openai/gpt-4o"], true),
            "plan-then-execute.json" => (&[MODEL, MODEL, MODEL], true),
            "multi-model-judge.json" => (
                &[
                    "anthropic/claude-opus-4.5",
                    "deepseek/deepseek-chat",
                    "google/gemini-2.5-pro",
                    "meta-llama/llama-3.3-70b-instruct",
                    "openai/gpt-4.1",
                ],
                false,
            ),
            // A new example: running it is enough.
            _ => continue,
        };
        let mut sorted = models.clone();
        sorted.sort();
        assert_eq!(sorted, expected, "{file}");
        if sequential {
            // Each model call's answer streams on its own line, in order.
            let lines: Vec<String> = models
                .iter()
                .map(|model| format!("answer from {model}\n"))
                .collect();
            assert_eq!(finished.stdout, lines.concat(), "{file}");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_judge_reads_every_candidate_and_answers_last() {
    let server = answering_server().await;
    let finished = run_noetic(
        args(
            &[
                "run",
                "examples/workflows/multi-model-judge.json",
                "Is P equal to NP?",
                "--output",
                "json",
            ],
            &mock_options(&server),
        ),
        "",
    )
    .await;
    finished.assert_code(0);
    let response = &finished.json_lines()[0];
    assert_eq!(response["text"], "answer from anthropic/claude-opus-4.5");
    // Five model calls' tokens add up.
    assert_eq!(response["usage"]["inputTokens"], 5 * 12);
    assert_eq!(response["usage"]["outputTokens"], 5 * 5);
    let requests = server.requests();
    assert_eq!(requests.len(), 5);
    let judge = requests.last().unwrap();
    assert_eq!(judge.body["model"], "anthropic/claude-opus-4.5");
    let input = judge.body["input"].to_string();
    for candidate in [
        "openai/gpt-4.1",
        "google/gemini-2.5-pro",
        "meta-llama/llama-3.3-70b-instruct",
        "deepseek/deepseek-chat",
    ] {
        assert!(
            input.contains(&format!("answer from {candidate}")),
            "the judge misses {candidate}: {input}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_researcher_runs_offline_on_the_demo_model_without_options_or_key() {
    // Exactly the command of the README: no provider option, no API key in the environment.
    let finished = run_noetic(
        [
            "run",
            "examples/workflows/researcher.json",
            "Find recent AI news",
        ],
        "",
    )
    .await;
    finished.assert_code(0);
    assert!(
        finished.stderr.contains("offline demo model"),
        "{}",
        finished.stderr
    );
    // The demo model calls `echo` with the prompt, then answers with what the tool returned.
    assert_eq!(
        finished.stdout,
        "(offline demo model) Here is what the tools returned: Find recent AI news\n"
    );
    assert!(finished.stderr.contains("usage: "), "{}", finished.stderr);
}
