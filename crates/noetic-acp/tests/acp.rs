//! `acp_agent` steps against a real ACP peer: the scripted agent of `noetic-test-support` (on the
//! official ACP Python SDK), run through a harness with a real `LocalFs` and `LocalShell`. One test per
//! row of the test matrix in the ACP reference (§6); the rows that cancel or kill also check that the
//! agent's process is gone (by pid) when the step returns.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use noetic_acp::AcpClient;
use noetic_core::acp::{AcpAgentCommand, AcpClientCapabilities, PermissionRule};
use noetic_core::session::Scope;
use noetic_core::{
    AcpAgentBuilder, AgentHarness, Context, ContextOptions, Error, EventSink, FrameworkEvent, Item,
    ResponseEvent, StreamEvent, acp_agent,
};
use noetic_platform_unix::{LocalFs, LocalShell};
use noetic_test_support::acp::ScriptedAgent;
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// Every event, kept and also sent on a channel (to wait for one without sleeping).
#[derive(Clone)]
struct Events {
    all: Arc<std::sync::Mutex<Vec<StreamEvent>>>,
    sender: mpsc::UnboundedSender<StreamEvent>,
}

impl EventSink for Events {
    fn emit(&self, event: StreamEvent) {
        self.all
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(event.clone());
        let _ = self.sender.send(event);
    }
}

struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
    client: AcpClient,
    harness: AgentHarness,
    events: Events,
    receiver: mpsc::UnboundedReceiver<StreamEvent>,
    ctx: Context,
}

fn agent_command(agent: &ScriptedAgent) -> AcpAgentCommand {
    let (program, args) = agent.command();
    AcpAgentCommand::new(program, args)
}

fn fixture_with(agent: &ScriptedAgent, env: &[(&str, &str)]) -> Fixture {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path().canonicalize().expect("canonical root");
    std::fs::write(root.join("hello.txt"), "hello from the root\nsecond line\n").expect("write");
    let fs = LocalFs::rooted(&root).expect("fs");
    let shell = LocalShell::new(&fs);
    let mut command = agent_command(agent);
    for (name, value) in env {
        command = command.env(*name, *value);
    }
    let client = AcpClient::new();
    let harness = AgentHarness::builder("acp-test")
        .fs(fs)
        .shell(shell)
        .acp_runtime(client.clone())
        .acp_agent("scripted", command)
        .build()
        .expect("harness");
    let (sender, receiver) = mpsc::unbounded_channel();
    let events = Events {
        all: Arc::default(),
        sender,
    };
    let ctx = harness.create_context(ContextOptions::new().event_sink(Arc::new(events.clone())));
    Fixture {
        _dir: dir,
        root,
        client,
        harness,
        events,
        receiver,
        ctx,
    }
}

macro_rules! fixture {
    () => {
        fixture!(&[])
    };
    ($env:expr) => {{
        let agent = noetic_test_support::scripted_agent_or_skip!();
        fixture_with(&agent, $env)
    }};
}

fn step(prompt: &str) -> AcpAgentBuilder<Value, Value> {
    acp_agent::<Value, Value>("agent")
        .agent("scripted")
        .prompt(prompt)
        .cancel_grace(Duration::from_secs(1))
}

impl Fixture {
    async fn run(&self, step: AcpAgentBuilder<Value, Value>) -> noetic_core::Result<Value> {
        self.ctx.run(&step.build(), Value::Null).await
    }

    /// The text of every text delta so far.
    fn text(&self) -> String {
        self.all()
            .iter()
            .filter_map(|event| match event {
                StreamEvent::Sdk(ResponseEvent::OutputTextDelta { delta, .. }) => {
                    Some(delta.as_str())
                }
                _ => None,
            })
            .collect::<Vec<_>>()
            .concat()
    }

    fn all(&self) -> Vec<StreamEvent> {
        self.events
            .all
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn framework(&self) -> Vec<FrameworkEvent> {
        self.all()
            .into_iter()
            .filter_map(|event| match event {
                StreamEvent::Framework(event) => Some(event),
                _ => None,
            })
            .collect()
    }

    /// Waits (at most 20 s) for an event `wanted` accepts; returns it.
    async fn wait_for(&mut self, wanted: impl Fn(&StreamEvent) -> bool) -> StreamEvent {
        tokio::time::timeout(Duration::from_secs(20), async {
            loop {
                let event = self.receiver.recv().await.expect("events flow");
                if wanted(&event) {
                    return event;
                }
            }
        })
        .await
        .expect("the event came within 20 s")
    }

    /// Waits for the agent's `pid: N` line and returns N.
    async fn wait_for_pid(&mut self) -> u32 {
        let mut seen = String::new();
        loop {
            let event = self
                .wait_for(|event| {
                    matches!(
                        event,
                        StreamEvent::Sdk(ResponseEvent::OutputTextDelta { .. })
                    )
                })
                .await;
            if let StreamEvent::Sdk(ResponseEvent::OutputTextDelta { delta, .. }) = event {
                seen.push_str(&delta);
            }
            if let Some(pid) = seen
                .split("pid: ")
                .nth(1)
                .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
                .and_then(|digits| digits.parse().ok())
            {
                return pid;
            }
        }
    }
}

fn error_code(result: &noetic_core::Result<Value>) -> &'static str {
    match result {
        Err(error) => error.code(),
        Ok(value) => panic!("expected an error, got {value}"),
    }
}

fn gone(pid: u32) -> bool {
    !Path::new(&format!("/proc/{pid}")).exists()
}

fn pid_of(text: &str) -> u32 {
    text.split("pid: ")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|digits| digits.parse().ok())
        .unwrap_or_else(|| panic!("no pid in {text:?}"))
}

// Row 1.
#[tokio::test]
async fn said_text_is_the_result_streamed_in_order_and_in_the_log() {
    let fx = fixture!();
    let output = fx.run(step("say Hello\nsay  world")).await.expect("ok");
    assert_eq!(output, json!("Hello world"));
    assert_eq!(fx.text(), "Hello world");
    let items = fx.ctx.items();
    assert_eq!(items.len(), 2, "{items:?}");
    assert_eq!(items[0], Item::user_text("say Hello\nsay  world"));
    assert_eq!(items[1], Item::assistant_text("Hello world"));
    let kinds: Vec<&str> = fx
        .framework()
        .iter()
        .map(FrameworkEvent::event_type)
        .filter(|kind| kind.starts_with("acp_turn"))
        .collect();
    assert_eq!(kinds, ["acp_turn_started", "acp_turn_finished"]);
    assert!(
        fx.framework().iter().any(|event| matches!(event,
        FrameworkEvent::AcpTurnFinished { stop_reason: Some(reason), .. } if reason == "end_turn"))
    );
}

// Row 2.
#[tokio::test]
async fn thoughts_are_reasoning_and_plans_are_events() {
    let fx = fixture!();
    let output = fx
        .run(step("think pondering\nplan a;b\nsay y"))
        .await
        .expect("ok");
    assert_eq!(output, json!("y"));
    let reasoning: String = fx
        .all()
        .iter()
        .filter_map(|event| match event {
            StreamEvent::Sdk(ResponseEvent::ReasoningDelta { delta, .. }) => Some(delta.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(reasoning, "pondering");
    let plan = fx.framework().into_iter().find_map(|event| match event {
        FrameworkEvent::AcpUpdate { update, .. } if update["sessionUpdate"] == "plan" => {
            Some(update)
        }
        _ => None,
    });
    let entries: Vec<Value> = plan.expect("a plan event")["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .map(|entry| entry["content"].clone())
        .collect();
    assert_eq!(entries, [json!("a"), json!("b")]);
}

// Row 3.
#[tokio::test]
async fn a_tool_call_becomes_a_call_and_its_output() {
    let fx = fixture!();
    fx.run(step("tool c1 read Read foo\ntoolfail c2 execute Run it"))
        .await
        .expect("ok");
    let items = fx.ctx.items();
    let call = items[1].as_function_call().expect("a function call");
    assert_eq!(
        (call.call_id.as_str(), call.name.as_str()),
        ("c1", "acp_read")
    );
    assert_eq!(
        serde_json::from_str::<Value>(&call.arguments).expect("json"),
        json!({"id": "c1"})
    );
    assert_eq!(items[2], Item::function_call_output("c1", "c1 done"));
    assert_eq!(items[4], Item::function_call_error("c2", "c2 failed"));
    let tool_events: Vec<(String, bool)> = fx
        .framework()
        .into_iter()
        .filter_map(|event| match event {
            FrameworkEvent::ToolCallStarted { call_id, .. } => Some((call_id, false)),
            FrameworkEvent::ToolCallCompleted { call_id, error, .. } => Some((call_id, error)),
            _ => None,
        })
        .collect();
    assert_eq!(
        tool_events,
        [
            ("c1".into(), false),
            ("c1".into(), false),
            ("c2".into(), false),
            ("c2".into(), true)
        ]
    );
    let statuses: Vec<Value> = fx
        .framework()
        .into_iter()
        .filter_map(|event| match event {
            FrameworkEvent::AcpUpdate { update, .. } if update["toolCallId"] == "c1" => {
                Some(update["status"].clone())
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        statuses,
        [json!("pending"), json!("in_progress"), json!("completed")]
    );
}

// Row 4.
#[tokio::test]
async fn a_diff_is_rendered_in_the_output() {
    let fx = fixture!();
    fx.run(step("diff d1 /abs/f new text")).await.expect("ok");
    let outputs: Vec<Item> = fx
        .ctx
        .items()
        .into_iter()
        .filter(|item| item.item_type() == "function_call_output")
        .collect();
    assert_eq!(
        outputs,
        [Item::function_call_output("d1", "[diff /abs/f]\nnew text")]
    );
}

// Row 5: usage, both kinds; never an invented zero.
#[tokio::test]
async fn usage_is_charged_when_reported_and_unknown_otherwise() {
    let fx = fixture!();
    fx.run(step("say nothing to report")).await.expect("ok");
    assert_eq!(fx.ctx.tokens().total(), 0);
    assert_eq!(fx.ctx.cost(), None, "no cost reported: unknown, not 0");
    fx.run(step(
        "usage 1000 200000 0.25\nusage_response 120 30\nsay ok",
    ))
    .await
    .expect("ok");
    let meta = fx.ctx.last_step_meta().expect("meta");
    assert_eq!(
        (meta.usage.input_tokens, meta.usage.output_tokens),
        (120, 30)
    );
    assert_eq!(meta.cost, Some(0.25));
    assert_eq!(fx.ctx.cost(), Some(0.25));
    assert_eq!(fx.ctx.tokens().total(), 150);
}

// Row 6.
#[tokio::test]
async fn max_tokens_and_max_turn_requests_end_ok_with_their_reason() {
    let fx = fixture!();
    for reason in ["max_tokens", "max_turn_requests"] {
        let output = fx
            .run(step(&format!("say part\nstop {reason}")))
            .await
            .expect("ok");
        assert_eq!(output, json!("part"));
        assert!(fx.framework().iter().any(|event| matches!(event,
            FrameworkEvent::AcpTurnFinished { stop_reason: Some(r), .. } if r == reason)));
    }
}

// Row 7.
#[tokio::test]
async fn a_refusal_fails_with_acp_refused_and_its_text() {
    let fx = fixture!();
    let result = fx.run(step("say no\nstop refusal")).await;
    assert_eq!(error_code(&result), "ACP_REFUSED");
    assert!(result.unwrap_err().to_string().contains("no"));
}

// Row 8.
#[tokio::test]
async fn an_agent_error_keeps_its_code_and_data() {
    let fx = fixture!();
    let result = fx.run(step("error boom")).await;
    assert_eq!(error_code(&result), "ACP_AGENT_ERROR");
    let message = result.unwrap_err().to_string();
    assert!(
        message.contains("-32603") && message.contains("boom"),
        "{message}"
    );
}

// Rows 9 and 10.
#[tokio::test]
async fn permission_rules_answer_without_asking_and_deny_is_the_default() {
    let fx = fixture!();
    let output = fx
        .run(step("perm p1 execute").allow(PermissionRule::kind("execute")))
        .await
        .expect("ok");
    assert_eq!(output, json!("permission: selected allow-once"));
    let output = fx.run(step("perm p2 execute")).await.expect("ok");
    assert_eq!(output, json!("permission: selected reject-once"));
    let output = fx
        .run(
            step("perm p3 execute")
                .allow(PermissionRule::kind("execute"))
                .deny(PermissionRule::title("p3")),
        )
        .await
        .expect("ok");
    assert_eq!(
        output,
        json!("permission: selected reject-once"),
        "deny rules come first"
    );
    assert!(
        fx.harness
            .pending_approvals(Scope::thread("default"))
            .await
            .expect("list")
            .is_empty()
    );
    // Allowed but only reject options offered: an error, never `cancelled`.
    let output = fx
        .run(step("perm_reject_only p4").allow(PermissionRule::kind("execute")))
        .await
        .expect("ok");
    assert_eq!(output, json!("permission: error -32602"));
}

// Row 11.
#[tokio::test]
async fn asked_permissions_wait_for_a_person_and_map_the_decision() {
    let mut fx = fixture!();
    for (always, expected) in [(false, "allow-once"), (true, "allow-always")] {
        let ctx = fx.ctx.clone();
        let running = tokio::spawn(async move {
            ctx.run(&step("perm p1 execute").ask().build(), Value::Null)
                .await
        });
        let event = fx
            .wait_for(|event| {
                matches!(
                    event,
                    StreamEvent::Framework(FrameworkEvent::ApprovalRequested { .. })
                )
            })
            .await;
        let StreamEvent::Framework(FrameworkEvent::ApprovalRequested {
            approval_id,
            tool,
            arguments,
            ..
        }) = event
        else {
            unreachable!()
        };
        assert_eq!(tool, "acp:scripted:execute");
        assert_eq!(arguments["title"], "perm p1");
        let pending = fx
            .harness
            .pending_approvals(Scope::thread("default"))
            .await
            .expect("list");
        assert_eq!(pending.len(), 1);
        if always {
            fx.harness
                .approve_always("default", &approval_id)
                .await
                .expect("decided");
        } else {
            fx.harness
                .approve("default", &approval_id)
                .await
                .expect("decided");
        }
        let output = running.await.expect("joined").expect("ok");
        assert_eq!(output, json!(format!("permission: selected {expected}")));
        assert!(
            fx.harness
                .pending_approvals(Scope::thread("default"))
                .await
                .expect("list")
                .is_empty()
        );
    }
}

// Row 12.
#[tokio::test]
async fn a_cancel_while_a_permission_waits_answers_it_cancelled_and_ends_the_turn() {
    let mut fx = fixture!();
    let ctx = fx.ctx.clone();
    let running = tokio::spawn(async move {
        ctx.run(&step("pid\nperm p1 execute").ask().build(), Value::Null)
            .await
    });
    let pid = fx.wait_for_pid().await;
    fx.wait_for(|event| {
        matches!(
            event,
            StreamEvent::Framework(FrameworkEvent::ApprovalRequested { .. })
        )
    })
    .await;
    let started = Instant::now();
    fx.ctx.abort(Some("user stop".into()));
    let result = running.await.expect("joined");
    assert!(
        matches!(&result, Err(Error::Cancelled { reason: Some(reason) }) if reason == "user stop"),
        "{result:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert!(gone(pid), "agent {pid} outlived the step");
    // The agent saw its permission answered `cancelled` (and said so before answering `cancelled`).
    assert!(fx.text().contains("permission: cancelled"), "{}", fx.text());
    assert!(
        fx.harness
            .pending_approvals(Scope::thread("default"))
            .await
            .expect("list")
            .is_empty()
    );
}

// Row 13.
#[tokio::test]
async fn a_cancel_mid_stream_ends_within_the_grace_keeping_what_streamed() {
    let mut fx = fixture!();
    let ctx = fx.ctx.clone();
    let running =
        tokio::spawn(async move { ctx.run(&step("pid\nslow 50").build(), Value::Null).await });
    let pid = fx.wait_for_pid().await;
    fx.wait_for(|event| matches!(event, StreamEvent::Sdk(ResponseEvent::OutputTextDelta { delta, .. }) if delta.contains("chunk 0")))
        .await;
    let started = Instant::now();
    fx.ctx.abort(None);
    let result = running.await.expect("joined");
    assert_eq!(error_code(&result), "CANCELLED");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert!(gone(pid));
    let after = fx.all().len();
    assert!(fx.text().contains("chunk 0"));
    assert!(!fx.text().contains("chunk 49"));
    // Nothing arrives after the step ended.
    assert_eq!(fx.all().len(), after);
}

// Row 14.
#[tokio::test]
async fn a_kept_session_survives_a_cancelled_turn_and_answers_the_next() {
    let mut fx = fixture!();
    let ctx = fx.ctx.clone();
    let running = tokio::spawn(async move {
        ctx.run(&step("pid\nslow 50").reuse("main").build(), Value::Null)
            .await
    });
    let pid = fx.wait_for_pid().await;
    fx.wait_for(|event| matches!(event, StreamEvent::Sdk(ResponseEvent::OutputTextDelta { delta, .. }) if delta.contains("chunk 0")))
        .await;
    fx.ctx.abort(None);
    assert_eq!(error_code(&running.await.expect("joined")), "CANCELLED");
    assert_eq!(fx.client.kept_pid("main").await, Some(pid));
    let ctx = fx.harness.create_context(ContextOptions::new());
    let output: Value = ctx
        .run(&step("say ok\npid").reuse("main").build(), Value::Null)
        .await
        .expect("ok");
    assert_eq!(
        pid_of(output.as_str().expect("text")),
        pid,
        "the same process answered"
    );
    fx.client.close_sessions().await;
    assert!(gone(pid));
}

// Row 15.
#[tokio::test]
async fn an_agent_that_ignores_the_cancel_is_killed_after_the_grace() {
    let mut fx = fixture!();
    let ctx = fx.ctx.clone();
    let running = tokio::spawn(async move {
        ctx.run(&step("pid\nsay x\nhang").build(), Value::Null)
            .await
    });
    let pid = fx.wait_for_pid().await;
    let started = Instant::now();
    fx.ctx.abort(None);
    let result = running.await.expect("joined");
    let elapsed = started.elapsed();
    assert_eq!(error_code(&result), "CANCELLED");
    assert!(
        elapsed >= Duration::from_secs(1),
        "waited the grace: {elapsed:?}"
    );
    assert!(
        elapsed < Duration::from_secs(2),
        "grace + 1 s at most: {elapsed:?}"
    );
    assert!(gone(pid));
}

// Row 16.
#[tokio::test]
async fn a_silent_agent_times_out_and_is_killed() {
    let fx = fixture!();
    let result = fx
        .run(
            step("pid\nhang")
                .idle_timeout(Duration::from_millis(500))
                .cancel_grace(Duration::from_millis(300)),
        )
        .await;
    assert_eq!(error_code(&result), "ACP_TIMEOUT");
    assert!(gone(pid_of(&fx.text())));
}

// Row 17.
#[tokio::test]
async fn an_agent_that_exits_mid_turn_fails_with_its_exit_code_and_partial_text_only_in_events() {
    let fx = fixture!();
    let result = fx.run(step("pid\nsay partial\ncrash 3")).await;
    assert_eq!(error_code(&result), "ACP_AGENT_EXITED");
    let message = result.unwrap_err().to_string();
    assert!(message.contains("exit code 3"), "{message}");
    assert!(fx.text().contains("partial"));
    assert_eq!(fx.ctx.items().len(), 1, "only the prompt is in the log");
    assert!(gone(pid_of(&fx.text())));
}

// Row 18.
#[tokio::test]
async fn a_garbage_line_fails_strict_turns_and_is_skipped_by_lenient_ones() {
    let fx = fixture!();
    let result = fx.run(step("garbage\nsay after")).await;
    assert_eq!(error_code(&result), "ACP_PROTOCOL_VIOLATION");
    assert!(result.unwrap_err().to_string().contains("this is not json"));
    let output = fx
        .run(step("garbage\nsay after").lenient())
        .await
        .expect("ok");
    assert_eq!(output, json!("after"));
}

// Row 19.
#[tokio::test]
async fn a_missing_program_is_a_spawn_error() {
    let fx = fixture!();
    let result = fx
        .run(
            acp_agent::<Value, Value>("agent")
                .command(AcpAgentCommand::new(
                    "/nonexistent/agent",
                    Vec::<String>::new(),
                ))
                .prompt("say hi"),
        )
        .await;
    assert_eq!(error_code(&result), "ACP_SPAWN_FAILED");
    assert!(
        result
            .unwrap_err()
            .to_string()
            .contains("/nonexistent/agent")
    );
}

// Row 20.
#[tokio::test]
async fn another_protocol_version_is_refused() {
    let fx = fixture!(&[("SCRIPTED_VERSION", "2")]);
    let result = fx.run(step("say hi")).await;
    assert_eq!(error_code(&result), "ACP_VERSION_UNSUPPORTED");
}

// Row 21.
#[tokio::test]
async fn a_file_under_the_root_is_read_and_the_read_reported() {
    let fx = fixture!();
    let path = fx.root.join("hello.txt");
    let output = fx
        .run(step(&format!("read {}", path.display())))
        .await
        .expect("ok");
    assert_eq!(output, json!("read: hello from the root\nsecond line\n"));
    let output = fx
        .run(step(&format!("read {} 2 1", path.display())))
        .await
        .expect("ok");
    assert_eq!(output, json!("read: second line\n"));
    assert!(fx.framework().iter().any(|event| matches!(event,
        FrameworkEvent::AcpClientActivity { method, served: true, .. } if method == "fs/read_text_file")));
}

// Row 22.
#[tokio::test]
async fn paths_outside_the_root_are_refused_and_nothing_is_read() {
    let fx = fixture!();
    let root = fx.root.display().to_string();
    std::fs::create_dir_all(format!("{root}-secrets")).expect("sibling");
    std::fs::write(format!("{root}-secrets/x"), "TOPSECRET").expect("write");
    for path in [
        "/etc/passwd".to_owned(),
        format!("{root}/../x"),
        "rel/path".to_owned(),
        format!("{root}-secrets/x"),
    ] {
        let output = fx.run(step(&format!("read {path}"))).await.expect("ok");
        let text = output.as_str().expect("text");
        assert!(text.starts_with("read error -32602"), "{path}: {text}");
        assert!(
            !text.contains("TOPSECRET") && !text.contains("root:"),
            "{text}"
        );
    }
    let refused = fx
        .framework()
        .into_iter()
        .filter(|event| {
            matches!(
                event,
                FrameworkEvent::AcpClientActivity { served: false, .. }
            )
        })
        .count();
    assert_eq!(refused, 4);
    let _ = std::fs::remove_dir_all(format!("{root}-secrets"));
}

// Row 23.
#[tokio::test]
async fn a_missing_file_is_resource_not_found() {
    let fx = fixture!();
    let output = fx
        .run(step(&format!("read {}/missing", fx.root.display())))
        .await
        .expect("ok");
    assert!(
        output
            .as_str()
            .expect("text")
            .starts_with("read error -32002"),
        "{output}"
    );
}

// Row 24.
#[tokio::test]
async fn writes_land_under_the_root_and_nowhere_else() {
    let fx = fixture!();
    let output = fx
        .run(step(&format!(
            "write {}/sub/out.txt hi there",
            fx.root.display()
        )))
        .await
        .expect("ok");
    assert_eq!(output, json!("write: ok"));
    assert_eq!(
        std::fs::read_to_string(fx.root.join("sub/out.txt")).expect("written"),
        "hi there"
    );
    let outside = tempfile::tempdir().expect("dir");
    let target = outside.path().join("x");
    let output = fx
        .run(step(&format!("write {} nope", target.display())))
        .await
        .expect("ok");
    assert!(
        output
            .as_str()
            .expect("text")
            .starts_with("write error -32602"),
        "{output}"
    );
    assert!(!target.exists());
}

// Row 25.
#[tokio::test]
async fn a_withdrawn_capability_is_not_advertised_and_not_served() {
    let fx = fixture!();
    let mut caps = AcpClientCapabilities::default();
    caps.write_text_file = false;
    let output = fx
        .run(step(&format!("caps\nwrite {}/x.txt hi", fx.root.display())).client_capabilities(caps))
        .await
        .expect("ok");
    let text = output.as_str().expect("text");
    assert!(text.contains(r#""writeTextFile":false"#), "{text}");
    assert!(text.contains(r#""readTextFile":true"#), "{text}");
    assert!(text.contains("write error -32601"), "{text}");
    assert!(!fx.root.join("x.txt").exists());
}

// Row 26.
#[tokio::test]
async fn terminals_run_on_the_shell_only_when_enabled() {
    let fx = fixture!();
    let output = fx.run(step("term echo hi")).await.expect("ok");
    assert!(
        output
            .as_str()
            .expect("text")
            .starts_with("term error -32601"),
        "{output}"
    );
    let mut caps = AcpClientCapabilities::default();
    caps.terminal = true;
    let output = fx
        .run(step("term echo hi").client_capabilities(caps))
        .await
        .expect("ok");
    assert_eq!(output, json!("term exit=0 out='hi\\n'"));
}

// Row 27.
#[tokio::test]
async fn content_the_agent_does_not_take_is_refused_before_sending() {
    let fx = fixture!();
    let image = json!({"type": "image", "mimeType": "image/png", "data": "iVBORw0KGgo="});
    let result = fx.run(step("say hi").content(image.clone())).await;
    assert_eq!(error_code(&result), "ACP_CAPABILITY_UNSUPPORTED");
    assert!(fx.text().is_empty(), "nothing was prompted");
    let fx = fixture!(&[("SCRIPTED_IMAGE", "1")]);
    let output = fx.run(step("say hi").content(image)).await.expect("ok");
    assert_eq!(output, json!("hi"));
}

// Row 28.
#[tokio::test]
async fn no_prompt_and_no_string_input_is_a_configuration_error() {
    let fx = fixture!();
    let step = acp_agent::<Value, Value>("agent").agent("scripted").build();
    let result = fx.ctx.run(&step, json!({"not": "a string"})).await;
    assert_eq!(error_code(&result), "ACP_CONFIG_INVALID");
    assert!(result.unwrap_err().to_string().contains("no prompt"));
    // A string input is the prompt.
    let output = fx
        .ctx
        .run(&step, json!("say from input"))
        .await
        .expect("ok");
    assert_eq!(output, json!("from input"));
}

// Row 30.
#[tokio::test]
async fn the_agents_request_ids_and_ours_are_kept_apart() {
    let fx = fixture!();
    let path = fx.root.join("hello.txt");
    std::fs::write(fx.root.join("b.txt"), "bee").expect("write");
    let output = fx
        .run(step(&format!(
            "read2 {} {}",
            path.display(),
            fx.root.join("b.txt").display()
        )))
        .await
        .expect("ok");
    assert_eq!(
        output,
        json!("read2: hello from the root\nsecond line\n|bee")
    );
}

// Row 31.
#[tokio::test]
async fn a_cancel_of_the_parent_reaches_an_acp_turn_inside_a_spawn() {
    let mut fx = fixture!();
    let inner = step("pid\nsay x\nhang").build();
    let outer = noetic_core::spawn::<Value, Value>("child", inner).build();
    let ctx = fx.ctx.clone();
    let running = tokio::spawn(async move { ctx.run(&outer, Value::Null).await });
    let pid = fx.wait_for_pid().await;
    fx.ctx.abort(None);
    let result = running.await.expect("joined");
    assert_eq!(error_code(&result), "CANCELLED");
    assert!(gone(pid));
}

// A drain waits for a running ACP turn as for a model round, and accounts for it.
#[tokio::test]
async fn a_drain_waits_for_a_running_turn_and_reports_it() {
    let mut fx = fixture!();
    let ctx = fx.ctx.clone();
    let running = tokio::spawn(async move {
        ctx.run(&step("slow 3\nsay done").build(), Value::Null)
            .await
    });
    fx.wait_for(|event| {
        matches!(
            event,
            StreamEvent::Sdk(ResponseEvent::OutputTextDelta { .. })
        )
    })
    .await;
    let report = fx
        .harness
        .cancel(
            &fx.ctx,
            noetic_core::CancelOptions::new().drain(Duration::from_secs(10)),
        )
        .await
        .expect("drained");
    assert_eq!(report.finished.len(), 1, "{report:?}");
    assert!(report.cut_off.is_empty(), "{report:?}");
    assert_eq!(report.finished[0].kind, noetic_core::CallKind::AgentTurn);
    let result = running.await.expect("joined");
    // The turn finished inside the window; the cancel then stops what follows.
    assert!(fx.text().contains("done"), "{}", fx.text());
    let _ = result;
}
