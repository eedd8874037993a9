//! Usage errors and invalid documents exit 2 with the problem named; `validate` prints the tree.

use noetic_test_support::MockServer;
use serde_json::{Value, json};

use crate::{TempDir, args, mock_options, run_noetic};

/// One invalid document: its name, the document, the pointer and the start of the message.
struct Case {
    name: &'static str,
    document: Value,
    pointer: &'static str,
    message: &'static str,
}

fn cases() -> Vec<Case> {
    let model = |id: &str| json!({"kind": "callModel", "id": id, "instructions": "Answer."});
    vec![
        Case {
            name: "wrong-version",
            document: json!({"version": 2, "root": model("a")}),
            pointer: "/version",
            message: "unsupported version 2; expected 1",
        },
        Case {
            name: "unknown-kind",
            document: json!({"version": 1, "root": {"kind": "sequence", "id": "s", "steps": [
                model("a"), {"kind": "teleport", "id": "b"}
            ]}}),
            pointer: "/root/steps/1/kind",
            message: "unknown node kind `teleport`",
        },
        Case {
            name: "missing-required-field",
            document: json!({"version": 1, "root": {"kind": "sequence", "id": "s", "steps": [
                {"kind": "invokeTool", "id": "t"}
            ]}}),
            pointer: "/root/steps/0",
            message: "missing required field `toolName`",
        },
        Case {
            name: "bad-until-predicate",
            document: json!({"version": 1, "root": {
                "kind": "loop", "id": "l", "body": model("a"), "until": {"kind": "untilDone"}
            }}),
            pointer: "/root/until/kind",
            message: "unknown until predicate `untilDone`",
        },
        Case {
            name: "unknown-tool",
            document: json!({"version": 1, "root": {
                "kind": "callModel", "id": "a", "instructions": "Answer.",
                "tools": [{"type": "echo"}, {"type": "search"}]
            }}),
            pointer: "/root/tools/1/type",
            message: "unknown tool `search`",
        },
    ]
}

#[tokio::test(flavor = "multi_thread")]
async fn invalid_documents_exit_2_naming_the_file_and_the_pointer() {
    let server = MockServer::start().await;
    let dir = TempDir::new();
    for case in cases() {
        let flow = dir.write(&format!("{}.json", case.name), &case.document);
        let expected = format!(
            "{flow}: error[WORKFLOW_INVALID]: workflow invalid at `{}`: {}",
            case.pointer, case.message
        );
        for command in [
            args(&["run", &flow, "Hi"], &mock_options(&server)),
            args(&["chat", &flow], &mock_options(&server)),
            args(&["validate", &flow], &[]),
        ] {
            let finished = run_noetic(&command, "").await;
            assert_eq!(
                finished.code, 2,
                "{} with {command:?}: {finished:?}",
                case.name
            );
            assert!(
                finished.stderr.starts_with(&format!("error: {expected}")),
                "{} with {command:?}: {}",
                case.name,
                finished.stderr
            );
            assert_eq!(finished.stdout, "", "{}", case.name);
        }
    }
    assert_eq!(
        server.request_count(),
        0,
        "nothing runs for an invalid document"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_file_that_is_not_json_or_missing_exits_2() {
    let dir = TempDir::new();
    let path = dir.write("broken.json", &json!("placeholder"));
    std::fs::write(&path, "{ not json").unwrap();
    let broken = run_noetic(["validate", path.as_str()], "").await;
    broken.assert_code(2);
    assert!(
        broken
            .stderr
            .contains("error[WORKFLOW_INVALID]: workflow invalid at ``: not valid JSON"),
        "{}",
        broken.stderr
    );

    let missing = run_noetic(["validate", "no/such/flow.json"], "").await;
    missing.assert_code(2);
    assert!(
        missing
            .stderr
            .starts_with("error: no/such/flow.json: cannot read"),
        "{}",
        missing.stderr
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_option_exits_2_with_the_usage() {
    let finished = run_noetic(
        ["run", "examples/workflows/researcher.json", "Hi", "--bogus"],
        "",
    )
    .await;
    finished.assert_code(2);
    assert!(
        finished
            .stderr
            .starts_with("error: unknown option `--bogus`"),
        "{}",
        finished.stderr
    );
    assert!(finished.stderr.contains("usage:\n  noetic run FLOW.json"));
    assert!(finished.stderr.contains("--events jsonl"));
    assert_eq!(finished.stdout, "");

    for bad in [
        vec!["frobnicate"],
        vec!["run"],
        vec!["run", "flow.json", "--events", "xml"],
        vec!["run", "flow.json", "--idle-timeout-ms", "0"],
        vec!["run", "flow.json", "--provider", "nope"],
        vec!["run", "flow.json", "hi", "extra"],
        vec!["run", "flow.json", "--provider", "responses"],
        vec!["chat", "flow.json", "--provider", "chat"],
    ] {
        let finished = run_noetic(&bad, "").await;
        assert_eq!(finished.code, 2, "{bad:?}: {finished:?}");
        assert!(
            finished.stderr.contains("usage:"),
            "{bad:?}: {}",
            finished.stderr
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn help_prints_the_usage_on_stdout() {
    for help in [vec!["--help"], vec![], vec!["run", "-h"]] {
        let finished = run_noetic(&help, "").await;
        finished.assert_code(0);
        assert!(
            finished.stdout.starts_with("usage:\n"),
            "{help:?}: {}",
            finished.stdout
        );
        assert!(finished.stdout.contains("noetic validate FLOW.json"));
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn validate_prints_the_step_tree() {
    let finished = run_noetic(
        ["validate", "examples/workflows/multi-model-judge.json"],
        "",
    )
    .await;
    finished.assert_code(0);
    assert_eq!(
        finished.stdout,
        "sequence multi-model-judge\n\
         \x20 inParallel panel (settle)\n\
         \x20   callModel answer-gpt (openai/gpt-4.1)\n\
         \x20   callModel answer-gemini (google/gemini-2.5-pro)\n\
         \x20   callModel answer-llama (meta-llama/llama-3.3-70b-instruct)\n\
         \x20   callModel answer-deepseek (deepseek/deepseek-chat)\n\
         \x20 callModel judge (anthropic/claude-opus-4.5)\n\
         examples/workflows/multi-model-judge.json: valid\n"
    );

    let finished = run_noetic(
        ["validate", "examples/workflows/plan-then-execute.json"],
        "",
    )
    .await;
    finished.assert_code(0);
    assert_eq!(
        finished.stdout,
        "sequence plan-then-execute\n\
         \x20 callModel planner\n\
         \x20 loop executor-loop\n\
         \x20   callModel executor\n\
         \x20 callModel summarizer\n\
         examples/workflows/plan-then-execute.json: valid\n"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn version_prints_the_crate_version() {
    for flag in ["--version", "-V"] {
        let finished = run_noetic([flag], "").await;
        finished.assert_code(0);
        assert_eq!(
            finished.stdout,
            format!("noetic {}\n", env!("CARGO_PKG_VERSION")),
            "{flag}"
        );
        assert_eq!(finished.stderr, "", "{flag}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_workflow_naming_a_disabled_tool_is_rejected_before_any_provider_starts() {
    let dir = TempDir::new();
    let flow = dir.write(
        "shell.json",
        &json!({"version": 1, "root": {
            "kind": "callModel", "id": "a", "instructions": "Answer.",
            "tools": [{"type": "shell"}]
        }}),
    );
    for command in [vec!["run", &flow, "Hi"], vec!["chat", &flow]] {
        let finished = run_noetic(&command, "").await;
        assert_eq!(finished.code, 2, "{command:?}: {finished:?}");
        assert!(
            finished
                .stderr
                .starts_with(&format!("error: {flow}: error[WORKFLOW_INVALID]")),
            "{command:?}: {}",
            finished.stderr
        );
        assert!(
            finished.stderr.contains("shell"),
            "the message names the tool: {}",
            finished.stderr
        );
        assert!(
            !finished.stderr.contains("demo model"),
            "no provider is started for an invalid workflow: {}",
            finished.stderr
        );
    }
}
