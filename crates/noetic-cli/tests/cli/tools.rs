//! The built-in fs and shell tools behind `--allow-fs DIR` / `--allow-shell`: confined to DIR, a
//! refused path or a timed-out command is the model's tool output, and the shell never sees the
//! harness's API key.

use noetic_test_support::{MockServer, RecordedHttpRequest};
use serde_json::{Value, json};

use crate::{
    Finished, TempDir, args, call_reply, finished, mock_options, noetic, run_noetic, text_reply,
};

/// A one-node workflow offering `tools`.
fn flow(tools: &[&str]) -> Value {
    let tools: Vec<Value> = tools.iter().map(|name| json!({"type": name})).collect();
    json!({
        "version": 1,
        "root": {"kind": "callModel", "id": "worker", "instructions": "Use the tools.", "tools": tools}
    })
}

/// The output the model was given for its latest tool call, as the request carried it.
fn last_tool_output(request: &RecordedHttpRequest) -> String {
    let items = request.body["input"].as_array().expect("input items");
    let output = items
        .iter()
        .rev()
        .find(|item| item["type"] == "function_call_output")
        .unwrap_or_else(|| panic!("no tool output in {}", request.body));
    match &output["output"] {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn fs_tools_stay_inside_the_allowed_dir_and_a_refused_path_is_the_model_s_tool_output() {
    let dir = TempDir::new();
    let work = dir.path().join("work");
    std::fs::create_dir_all(work.join("notes")).unwrap();
    std::fs::write(work.join("notes/a.txt"), "inside").unwrap();
    std::fs::write(dir.path().join("secret.txt"), "top-secret-content").unwrap();
    std::os::unix::fs::symlink(dir.path().join("secret.txt"), work.join("link")).unwrap();
    let server = MockServer::start().await;
    let absolute_inside = work.join("notes/a.txt");
    for arguments in [
        ("read_file", json!({"path": "../secret.txt"})),
        ("read_file", json!({"path": dir.path().join("secret.txt")})),
        ("read_file", json!({"path": "link"})),
        ("read_file", json!({"path": absolute_inside})),
        (
            "write_file",
            json!({"path": "notes/made.txt", "content": "written"}),
        ),
        ("list_dir", json!({"path": "notes"})),
    ] {
        server.push(call_reply(arguments.0, &arguments.1));
    }
    server.push(text_reply("done"));
    let flow = dir.write("flow.json", &flow(&["read_file", "write_file", "list_dir"]));
    let work_arg = work.to_str().unwrap();

    let finished = run_noetic(
        args(
            &["run", &flow, "Look around", "--allow-fs", work_arg],
            &mock_options(&server),
        ),
        "",
    )
    .await;

    finished.assert_code(0);
    assert_eq!(finished.stdout, "done\n");
    let requests = server.requests();
    assert_eq!(requests.len(), 7);
    let outputs: Vec<String> = requests[1..].iter().map(last_tool_output).collect();
    for refused in &outputs[..3] {
        assert!(refused.contains("FS_PATH_REFUSED"), "{refused}");
        assert!(
            !refused.contains("top-secret-content"),
            "nothing outside was read: {refused}"
        );
    }
    assert!(outputs[3].contains("inside"), "{}", outputs[3]);
    assert!(outputs[4].contains("wrote 7 bytes"), "{}", outputs[4]);
    assert_eq!(
        std::fs::read_to_string(work.join("notes/made.txt")).unwrap(),
        "written"
    );
    assert!(
        outputs[5].contains("a.txt") && outputs[5].contains("made.txt"),
        "{}",
        outputs[5]
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("secret.txt")).unwrap(),
        "top-secret-content"
    );
}

/// Runs `noetic ARGS` with `env` added to its environment.
async fn run_with_env(arguments: Vec<String>, env: &[(&str, &str)]) -> Finished {
    let mut command = noetic(arguments);
    for (name, value) in env {
        command.env(name, value);
    }
    let mut child = command.spawn().expect("noetic starts");
    drop(child.stdin.take());
    finished(child).await
}

#[tokio::test(flavor = "multi_thread")]
async fn the_shell_runs_in_the_dir_without_the_api_key_and_a_timeout_is_the_tool_s_error() {
    let dir = TempDir::new();
    let server = MockServer::start().await;
    server.push(call_reply("shell", &json!({"command": "pwd; env"})));
    server.push(call_reply(
        "shell",
        &json!({"command": "echo started; sleep 30"}),
    ));
    server.push(text_reply("done"));
    let flow = dir.write("flow.json", &flow(&["shell"]));
    let root = std::fs::canonicalize(dir.path()).unwrap();

    let finished = run_with_env(
        args(
            &[
                "run",
                &flow,
                "Run things",
                "--allow-fs",
                dir.path().to_str().unwrap(),
                "--allow-shell",
                "--shell-timeout-ms",
                "300",
                "--shell-env",
                "NOETIC_TEST_VISIBLE",
            ],
            &mock_options(&server),
        ),
        &[
            ("OPENROUTER_API_KEY", "sk-or-test-secret-123"),
            ("OPENAI_API_KEY", "sk-test-secret-456"),
            ("NOETIC_TEST_VISIBLE", "passed-on"),
        ],
    )
    .await;

    finished.assert_code(0);
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    let env = last_tool_output(&requests[1]);
    assert!(env.contains("exit status 0"), "{env}");
    assert!(env.contains(root.to_str().unwrap()), "cwd is DIR: {env}");
    assert!(env.contains("NOETIC_TEST_VISIBLE=passed-on"), "{env}");
    for secret in [
        "OPENROUTER_API_KEY",
        "OPENAI_API_KEY",
        "sk-or-test-secret-123",
        "sk-test-secret-456",
    ] {
        assert!(!env.contains(secret), "{secret} reached the shell: {env}");
    }
    let timed_out = last_tool_output(&requests[2]);
    assert!(timed_out.contains("timed out after 300 ms"), "{timed_out}");
    assert!(
        timed_out.contains("started"),
        "what it printed first is kept: {timed_out}"
    );
    assert_eq!(finished.stdout, "done\n");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_shell_needs_an_allowed_dir_and_the_dir_must_exist() {
    let dir = TempDir::new();
    let flow = dir.write("flow.json", &flow(&["shell"]));
    let finished = run_noetic(["run", flow.as_str(), "hi", "--allow-shell"], "").await;
    finished.assert_code(2);
    assert!(
        finished
            .stderr
            .contains("--allow-shell needs --allow-fs DIR"),
        "{}",
        finished.stderr
    );

    let missing = dir.path().join("missing");
    let finished = run_noetic(
        [
            "run",
            flow.as_str(),
            "hi",
            "--allow-fs",
            missing.to_str().unwrap(),
            "--allow-shell",
        ],
        "",
    )
    .await;
    finished.assert_code(2);
    assert!(
        finished.stderr.contains("--allow-fs"),
        "{}",
        finished.stderr
    );
    assert!(finished.stderr.contains("missing"), "{}", finished.stderr);

    let finished = run_noetic(["run", flow.as_str(), "hi", "--shell-timeout-ms", "5"], "").await;
    finished.assert_code(2);
    assert!(
        finished.stderr.contains("need --allow-shell"),
        "{}",
        finished.stderr
    );
}
