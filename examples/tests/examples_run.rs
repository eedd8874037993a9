//! The session examples, run as the real binaries (cargo builds examples for the package's tests).

#![allow(clippy::unwrap_used)] // test helpers outside #[test] fns

fn example_command(name: &str) -> std::process::Command {
    let mut path = std::env::current_exe().unwrap();
    path.pop(); // deps/
    path.pop();
    path.push("examples");
    path.push(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    let mut command = std::process::Command::new(&path);
    command.env_remove("OPENROUTER_API_KEY");
    command.env_remove("ANTHROPIC_API_KEY");
    command
}

fn run_example(name: &str, args: &[&str]) -> (String, String) {
    let output = example_command(name)
        .args(args)
        .output()
        .unwrap_or_else(|error| panic!("run {name}: {error}"));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(output.status.success(), "{name} failed: {stderr}");
    (String::from_utf8(output.stdout).unwrap(), stderr)
}

#[test]
fn the_steering_example_applies_the_steer_inside_the_running_turn() {
    let (stdout, _) = run_example("steering", &[]);
    assert!(
        stdout.contains(r#"steer ["steer-1"] applied at BeforeRound in round 1"#),
        "{stdout}"
    );
    assert!(
        stdout.contains("(noted: Focus on the 2015 1.0 release.)"),
        "{stdout}"
    );
    // One turn only: the steer joined it rather than starting another.
    assert_eq!(
        stdout.matches("researcher:turn_started").count(),
        1,
        "{stdout}"
    );
}

#[test]
fn the_jsonl_example_continues_the_conversation_after_a_restart() {
    let dir = std::env::temp_dir().join(format!("noetic-jsonl-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("chat.jsonl");
    let _ = std::fs::remove_file(&file);
    let (stdout, _) = run_example("jsonl_history", &[file.to_str().unwrap()]);
    assert!(stdout.contains("run 2: (offline demo model) You said: What did I tell you? (earlier you said: My name is Ada.)"), "{stdout}");
    let lines: Vec<String> = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(
        lines.len(),
        4,
        "two user messages and two answers, each once"
    );
    // Running again appends, never rewrites.
    run_example("jsonl_history", &[file.to_str().unwrap()]);
    let again: Vec<String> = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(&again[..4], &lines[..]);
    assert_eq!(again.len(), 8);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_jsonl_example_names_the_line_of_a_corrupt_item_and_keeps_the_file() {
    let dir = std::env::temp_dir().join(format!("noetic-jsonl-corrupt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = r#"{"type":"message","role":"user","content":[{"type":"input_text","text":"Hi"}]}"#;
    // Line 2 is valid JSON but not an item; line 3 is not JSON at all.
    for (name, bad, line) in [
        ("not-an-item.jsonl", r#"{"type":"message","role":42}"#, 2),
        ("not-json.jsonl", r#"{"type":"mess"#, 2),
    ] {
        let file = dir.join(name);
        let contents = format!("{good}\n{bad}\n{good}\n");
        std::fs::write(&file, &contents).unwrap();
        let output = example_command("jsonl_history")
            .arg(&file)
            .output()
            .unwrap();
        let stderr = String::from_utf8(output.stderr).unwrap();
        assert!(!output.status.success(), "{name}: {stderr}");
        assert!(
            stderr.contains(&format!("{}:{line}: ", file.display())),
            "{name}: the error names the file and line: {stderr}"
        );
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            contents,
            "{name}: nothing stored is lost or rewritten"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_layers_example_recalls_the_stored_fact_into_the_second_request() {
    let (stdout, _) = run_example("layers", &[]);
    let requests: Vec<&str> = stdout.split("request sent to the model:").skip(1).collect();
    assert_eq!(requests.len(), 2, "{stdout}");
    assert!(!requests[0].contains("[developer]"), "{stdout}");
    assert!(
        requests[1].contains(
            "[developer] Facts the user asked you to remember:\n- my favourite colour is teal"
        ),
        "{stdout}"
    );
}

#[test]
fn the_durable_example_crashes_one_process_and_resumes_in_another_without_rerunning_research() {
    let (stdout, stderr) = run_example("durable", &[]);
    let all = format!("{stderr}{stdout}");
    // The first process aborted at the crash point, after the research step and its tool call.
    assert!(all.contains("first process (exit: signal: 6"), "{all}");
    assert!(all.contains("crash-point: aborting the process"), "{all}");
    // The second resumed the same execution: research replayed, the tool not run again, the answer.
    let second = all
        .split("--- second process")
        .nth(1)
        .unwrap_or_else(|| panic!("no second process in {all}"));
    assert!(
        second.contains("step research replayed from the ledger"),
        "{second}"
    );
    assert!(!second.contains("tool lookup runs"), "{second}");
    assert!(second.contains("crash-point: passing"), "{second}");
    assert!(second.contains("answer: "), "{second}");
}

#[test]
fn the_graceful_shutdown_example_drains_the_round_and_charges_it() {
    let (stdout, _) = run_example("graceful_shutdown", &[]);
    assert!(stdout.contains(r#""reason":"settled""#), "{stdout}");
    assert!(
        stdout.contains("1 call(s) finished and charged"),
        "{stdout}"
    );
    assert!(stdout.contains("0 cut off"), "{stdout}");
    assert!(stdout.contains("pending paid calls: 0"), "{stdout}");
}

#[test]
fn the_subprocess_example_runs_a_step_in_a_child_and_rejoins_a_detached_one_after_a_restart() {
    let (stdout, _) = run_example("subprocess", &[]);
    let host: u32 = stdout
        .split_once("host ")
        .and_then(|(_, rest)| rest.split_whitespace().next()?.parse().ok())
        .unwrap();
    // The sum came from another process, with its events and its spend.
    let line = stdout
        .lines()
        .find(|line| line.starts_with("crunch(100) = 5050 in child "))
        .unwrap();
    assert!(!line.contains(&format!("child {host};")), "{stdout}");
    assert!(line.contains("spent 100 input tokens, $0.001"), "{stdout}");
    assert!(
        stdout.contains("child event: worker:step_completed"),
        "{stdout}"
    );
    // The detached child outlived its first host and answered the restarted one.
    let started: &str = stdout
        .split_once("started detached child ")
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .unwrap();
    assert!(
        stdout.contains(&format!("finds live child {started} (step `report`")),
        "{stdout}"
    );
    assert!(
        stdout.contains("rejoined: report on subprocesses: done in child"),
        "{stdout}"
    );
}

#[test]
fn the_otel_example_exports_the_span_tree_to_its_receiver() {
    let output = example_command("otel")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .output()
        .unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let lines: Vec<&str> = stdout.lines().collect();
    let at = |prefix: &str| {
        lines
            .iter()
            .position(|line| line.starts_with(prefix))
            .unwrap_or_else(|| panic!("no `{prefix}` line in {stdout}"))
    };
    // The tree, indented by depth: the turn, the loop, the model step, its two rounds and the tool.
    let root = at("invoke_agent researcher");
    assert!(at("  step researcher-loop") > root);
    assert!(at("    step researcher-llm") > root);
    assert_eq!(
        lines
            .iter()
            .filter(|line| line.starts_with("      chat demo-model"))
            .count(),
        2,
        "{stdout}"
    );
    assert!(at("      execute_tool search gen_ai.tool.name=search") > root);
}

#[test]
fn the_mcp_example_offers_the_server_s_tool_and_the_model_s_call_reaches_it() {
    let (stdout, stderr) = run_example("mcp", &[]);
    assert!(stderr.contains("offline demo model"), "{stderr}");
    assert!(stdout.contains(r#"offered tools: ["echo"]"#), "{stdout}");
    assert!(
        stdout.contains(r#"add(19, 23) called directly: {"sum":42.0}"#),
        "{stdout}"
    );
    // The demo model called `demo__echo` with the user's text and answered from its output.
    assert!(
        stdout.contains("The MCP server heard: Hello, server"),
        "{stdout}"
    );
}

#[test]
fn the_acp_example_drives_the_scripted_agent_through_reads_an_approval_and_a_write() {
    // Installs the agent's venv when needed (the example would too), or says why it cannot.
    let _agent = noetic_test_support::scripted_agent_or_skip!();
    let mut command = example_command("acp");
    command.env_remove("NOETIC_ACP_AGENT");
    let output = command.output().unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(output.status.success(), "acp failed: {stderr}");
    assert!(stderr.contains("scripted ACP agent"), "{stderr}");
    for line in [
        "[tool] Read notes.txt",
        "read: - 1.0 shipped",
        "[approval] acp:coder:edit \"perm p1\": approved",
        "permission: selected allow-once",
        "write: ok",
        "[agent] done: end_turn",
        // Written by the agent through the confined fs, read back by the example.
        "summary.txt: Two release notes, both shipped.",
    ] {
        assert!(stdout.contains(line), "no `{line}` in:\n{stdout}");
    }
    assert!(
        stdout.contains("fs/write_text_file") && stdout.contains("summary.txt served=true"),
        "{stdout}"
    );
}

#[test]
fn the_serve_example_answers_over_http_beside_the_app_s_own_route() {
    let (stdout, stderr) = run_example("serve", &["--once"]);
    assert!(stderr.contains("offline demo model"), "{stderr}");
    assert!(
        stdout.contains("POST messages: HTTP/1.1 202 Accepted"),
        "{stdout}"
    );
    assert!(stdout.contains(r#""message_id":"m1""#), "{stdout}");
    assert!(stdout.contains("answer: (offline demo model)"), "{stdout}");
    assert!(stdout.contains("GET thread: HTTP/1.1 200 OK"), "{stdout}");
    assert!(
        stdout.contains("GET /: HTTP/1.1 200 OK my app: the agent is at /agent/"),
        "{stdout}"
    );
}

#[test]
fn the_approval_example_runs_the_approved_call_and_feeds_back_a_rejection() {
    let (approved, _) = run_example("approval", &[]);
    assert!(
        approved.contains("approval requested: send_email"),
        "{approved}"
    );
    assert!(
        approved.contains("status: awaiting approval of 1 call(s)"),
        "{approved}"
    );
    assert!(approved.contains("approved\n"), "{approved}");
    assert!(approved.contains("sent \""), "{approved}");

    let (rejected, _) = run_example("approval", &["reject"]);
    assert!(
        rejected.contains("Tool call rejected: the release is not announced yet"),
        "{rejected}"
    );
    assert!(!rejected.contains("sent \""), "{rejected}");
}

#[test]
fn the_anthropic_example_answers_offline_from_the_recorded_claude_replies() {
    let (stdout, stderr) = run_example("anthropic", &[]);
    assert!(stderr.contains("no ANTHROPIC_API_KEY set"), "{stderr}");
    // The second recorded reply, after the weather tool ran.
    assert!(stdout.contains("Florence"), "{stdout}");
    assert!(stderr.contains("input tokens"), "{stderr}");
}
