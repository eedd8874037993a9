//! The quick start end to end over loopback HTTP against the offline demo model.

use noetic_core::{AgentHarness, ContextOptions};
use noetic_examples::quickstart::agent;
use noetic_providers::DemoModel;

#[tokio::test]
async fn the_quick_start_runs_against_the_demo_model_over_http() {
    let demo = DemoModel::start().await.unwrap();
    let agent = agent("openai/gpt-4o");
    let harness = AgentHarness::builder("researcher")
        .provider("demo", demo.provider().unwrap())
        .agent_graph(agent.clone())
        .build()
        .unwrap();
    let ctx = harness.create_context(ContextOptions::new());

    let answer = harness
        .run(&agent, "Find recent AI news".to_owned(), &ctx)
        .await
        .unwrap();

    assert_eq!(
        answer,
        r#"(offline demo model) Here is what the tools returned: {"result":"Results for: Find recent AI news"}"#
    );
    let kinds: Vec<&str> = ctx
        .items()
        .iter()
        .map(|item| item.item_type())
        .map(|kind| match kind {
            "message" => "message",
            "function_call" => "function_call",
            "function_call_output" => "function_call_output",
            _ => "other",
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "message",
            "function_call",
            "function_call_output",
            "message"
        ],
        "two model requests: one tool call, one answer"
    );
    assert!(
        ctx.tokens().input_tokens > 0 && ctx.tokens().output_tokens > 0,
        "usage comes back over the wire"
    );
}

#[test]
fn the_quick_start_binary_prints_the_answer_offline() {
    // Cargo builds examples for integration tests of the same package; find the binary next to ours.
    let mut path = std::env::current_exe().unwrap();
    path.pop(); // deps/
    path.pop();
    path.push("examples");
    path.push(format!("quickstart{}", std::env::consts::EXE_SUFFIX));
    let output = std::process::Command::new(&path)
        .env_remove("OPENROUTER_API_KEY")
        .output()
        .unwrap_or_else(|error| panic!("run {}: {error}", path.display()));
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8(output.stdout).unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(
        stdout.contains("Results for: Find recent AI news"),
        "{stdout}"
    );
    assert!(
        stderr.contains("offline demo model"),
        "the demo model announces itself: {stderr}"
    );
}
