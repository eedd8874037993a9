//! ACP: a coding agent driven over the Agent Client Protocol, then a model reviewing what it did.
//!
//! ```text
//! cargo run -p noetic-examples --example acp
//! NOETIC_ACP_AGENT='npx -y @zed-industries/claude-code-acp' ANTHROPIC_API_KEY=… \
//!   cargo run -p noetic-examples --example acp -- "Add a short README to this directory"
//! ```
//!
//! With `NOETIC_ACP_AGENT` unset, the agent is the scripted ACP agent of `noetic-test-support` (a
//! real ACP peer on the official Python SDK, installed into a venv from PyPI on first use, with no
//! model and no network after that); its prompt is a small script of what to do: plan, read a file,
//! ask to edit one, write it, answer. With `NOETIC_ACP_AGENT` set, that command is started instead
//! (split like a shell's words; `ANTHROPIC_API_KEY`, `OPENAI_API_KEY` and `GEMINI_API_KEY` are passed
//! on when set, since the agent otherwise gets a minimal environment) and the prompt is the first
//! argument. Either way the agent works in a fresh temporary directory: its file requests are
//! served inside it only, reads are allowed, anything else is asked here (and approved, as printed),
//! and the offline demo model reviews the agent's final answer.

use std::path::Path;

use futures_util::StreamExt;
use noetic_acp::AcpClient;
use noetic_core::acp::{AcpAgentCommand, PermissionRule};
use noetic_core::{
    AgentHarness, ExecuteOptions, FrameworkEvent, ResponseEvent, Scope, StreamEvent, acp_agent,
    call_model, sequence,
};
use noetic_platform_unix::LocalFs;
use noetic_providers::DemoModel;

/// The keys a real agent may need, passed on when set (the agent's environment is minimal).
const AGENT_KEYS: [&str; 3] = ["ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY"];

/// The scripted agent's prompt: one directive per line (see `noetic_test_support::acp`).
fn script(root: &Path) -> String {
    let notes = root.join("notes.txt");
    let summary = root.join("summary.txt");
    [
        "plan read the notes;summarise them".to_owned(),
        "tool t1 read Read notes.txt".to_owned(),
        format!("read {}", notes.display()),
        "perm p1 edit".to_owned(),
        format!(
            "write {} Two release notes, both shipped.",
            summary.display()
        ),
        "say Summary written to summary.txt.".to_owned(),
    ]
    .join("\n")
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let work = std::env::temp_dir().join(format!("noetic-acp-example-{}", std::process::id()));
    std::fs::create_dir_all(&work)?;
    std::fs::write(work.join("notes.txt"), "- 1.0 shipped\n- 1.1 shipped\n")?;
    let fs = LocalFs::rooted(&work)?;
    let root = fs.root().to_owned();

    let (command, prompt) = match std::env::var("NOETIC_ACP_AGENT") {
        Ok(line) => {
            let words = line.split_whitespace().collect::<Vec<_>>();
            let (program, args) = words.split_first().ok_or("NOETIC_ACP_AGENT is empty")?;
            let mut command = AcpAgentCommand::new(*program, args.iter().copied());
            for key in AGENT_KEYS {
                if let Ok(value) = std::env::var(key) {
                    command = command.env(key, value);
                }
            }
            let prompt = std::env::args()
                .nth(1)
                .unwrap_or_else(|| "Summarise notes.txt into summary.txt.".to_owned());
            (command, prompt)
        }
        Err(_) => {
            eprintln!(
                "note: NOETIC_ACP_AGENT is not set: using the scripted ACP agent (no model, no key; \
                 its venv is installed from PyPI on first use)"
            );
            let agent = noetic_test_support::acp::scripted_agent()?;
            let (program, args) = agent.command();
            (AcpAgentCommand::new(program, args), script(&root))
        }
    };

    let demo = DemoModel::start().await?;
    let graph = sequence("code-then-review")
        .step(
            acp_agent::<String, String>("code")
                .agent("coder")
                .prompt(prompt)
                .allow(PermissionRule::kind("read"))
                .ask(),
        )
        .step(
            call_model("review")
                .model("demo")
                .instructions("Review what the coding agent reports."),
        )
        .build();
    let harness = AgentHarness::builder("acp-demo")
        .provider("demo", demo.provider()?)
        .acp_runtime(AcpClient::new())
        .acp_agent("coder", command)
        .fs(fs)
        .agent_graph(graph)
        .build()?;

    let thread = "work";
    let scope = Scope::thread(thread);
    let mut events = harness.events(scope.clone());
    harness
        .execute("go", ExecuteOptions::new().thread_id(thread))
        .await?;
    // The agent's text streams inline; the review's is printed whole at the end.
    let mut agent_done = false;
    let mut mid_line = false;
    while let Some(event) = events.next().await {
        if mid_line && matches!(&*event, StreamEvent::Framework(_)) {
            println!();
            mid_line = false;
        }
        match &*event {
            StreamEvent::Sdk(ResponseEvent::OutputTextDelta { delta, .. }) if !agent_done => {
                print!("{delta}");
                mid_line = true;
            }
            StreamEvent::Framework(FrameworkEvent::AcpUpdate { update, .. })
                if update["sessionUpdate"] == "plan" =>
            {
                println!("[plan] {}", update["entries"]);
            }
            StreamEvent::Framework(FrameworkEvent::ToolCallStarted { name, .. }) => {
                println!("[tool] {name}");
            }
            StreamEvent::Framework(FrameworkEvent::AcpClientActivity {
                method,
                target,
                served,
                ..
            }) => println!(
                "[client] {method} {} served={served}",
                target.as_deref().unwrap_or("")
            ),
            StreamEvent::Framework(FrameworkEvent::ApprovalRequested {
                approval_id,
                tool,
                arguments,
                ..
            }) => {
                println!("[approval] {tool} {}: approved", arguments["title"]);
                harness.approve(thread, approval_id).await?;
            }
            StreamEvent::Framework(FrameworkEvent::AcpTurnFinished { stop_reason, .. }) => {
                agent_done = true;
                println!(
                    "[agent] done: {}",
                    stop_reason.as_deref().unwrap_or("no stop reason")
                );
            }
            StreamEvent::Framework(
                FrameworkEvent::TurnCompleted { .. } | FrameworkEvent::TurnAborted { .. },
            ) => break,
            _ => {}
        }
    }
    let response = harness.agent_response(scope).await?;
    println!("review: {}", response.text);
    println!(
        "summary.txt: {}",
        std::fs::read_to_string(work.join("summary.txt")).unwrap_or_default()
    );
    std::fs::remove_dir_all(&work)?;
    Ok(())
}
