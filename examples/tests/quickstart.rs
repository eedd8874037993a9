//! The quick start's agent graph, run with a scripted model.

use noetic_core::{AgentHarness, ContextOptions};
use noetic_examples::quickstart::agent;
use noetic_test_support::{ScriptedModel, ScriptedResponse};

#[tokio::test]
async fn the_quick_start_makes_two_requests_and_invents_no_user_message() {
    let model = ScriptedModel::with_responses([
        ScriptedResponse::tool_call("call_1", "search", serde_json::json!({"query": "AI news"})),
        ScriptedResponse::text("AI news: models got faster."),
    ]);
    let agent = agent("openai/gpt-4o");
    let harness = AgentHarness::builder("researcher")
        .agent_graph(agent.clone())
        .provider("scripted", model.clone())
        .build()
        .unwrap();
    let ctx = harness.create_context(ContextOptions::new());

    let answer = harness
        .run(&agent, "Find recent AI news".to_owned(), &ctx)
        .await
        .unwrap();

    assert_eq!(answer, "AI news: models got faster.");
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        requests[1].user_texts(),
        ["Find recent AI news"],
        "no invented user message"
    );
    assert_eq!(
        requests[1].tool_outputs(),
        [r#"{"result":"Results for: AI news"}"#]
    );
}
