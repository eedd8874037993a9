//! The built-in layers: history window, instructions, scratchpad, tool calls and steering.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use noetic_core::item::Item;
use noetic_core::layer::builtin::{
    HistoryLayer, InstructionsLayer, ScratchpadLayer, SteeringLayer, ToolCallsLayer,
    scratchpad_tool,
};
use noetic_core::{ContextLayer, ContextOptions, Scope, Step, Tool, ToolContext, call_model};
use noetic_test_support::{ScriptedModel, ScriptedResponse, harness_with};
use serde_json::json;

use crate::recall::texts;

fn llm() -> Step<String, String> {
    call_model("llm").model("m").into()
}

fn arc(layer: impl ContextLayer) -> Arc<dyn ContextLayer> {
    Arc::new(layer)
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct QueryArgs {
    query: String,
}

fn search_tool() -> Tool {
    Tool::new(
        "search",
        "Search",
        |args: QueryArgs, _ctx: ToolContext| async move { Ok(format!("Results for: {}", args.query)) },
    )
}

/// A log with a tool call in the middle: `u1 a1 call(c1) output(c1) a2`.
fn log_with_a_call() -> Vec<Item> {
    vec![
        Item::user_text("u1"),
        Item::assistant_text("a1"),
        Item::function_call("c1", "search", r#"{"query":"x"}"#),
        Item::function_call_output("c1", "found"),
        Item::assistant_text("a2"),
    ]
}

#[tokio::test]
async fn history_window_sends_the_newest_items_and_never_an_orphaned_output() {
    for (window, expected) in [
        (
            4,
            vec!["function_call", "function_call_output", "a2", "now"],
        ),
        // The window starts at the output: its call was cut, so the output goes too.
        (3, vec!["a2", "now"]),
        (
            10,
            vec![
                "u1",
                "a1",
                "function_call",
                "function_call_output",
                "a2",
                "now",
            ],
        ),
    ] {
        let model = ScriptedModel::with_responses([ScriptedResponse::text("answer")]);
        let harness = harness_with("history", &model)
            .context_layers([arc(HistoryLayer::window(window))])
            .build()
            .unwrap();
        let ctx = harness.create_context(ContextOptions::new().items(log_with_a_call()));
        harness.run(&llm(), "now".to_owned(), &ctx).await.unwrap();

        assert_eq!(
            texts(&model.requests()[0].input),
            expected,
            "window {window}"
        );
        assert_eq!(ctx.items().len(), 7, "the item log is never cut");
    }
}

#[tokio::test]
async fn project_history_chains_a_stack_in_order() {
    let model = ScriptedModel::with_responses([ScriptedResponse::text("answer")]);
    let stack = vec![HistoryLayer::window(4), HistoryLayer::window(2)];
    let harness = harness_with("history-stack", &model)
        .context_layers([arc(stack), arc(None::<HistoryLayer>)])
        .build()
        .unwrap();
    let ctx = harness.create_context(ContextOptions::new().items(log_with_a_call()));
    harness.run(&llm(), "now".to_owned(), &ctx).await.unwrap();
    assert_eq!(texts(&model.requests()[0].input), ["a2", "now"]);
}

#[tokio::test]
async fn instructions_are_recalled_before_the_history_as_developer_or_system() {
    for (layer, expected) in [
        (
            InstructionsLayer::new("Be brief."),
            Item::developer_text("Be brief."),
        ),
        (
            InstructionsLayer::new("Be brief.").system(),
            Item::system_text("Be brief."),
        ),
    ] {
        let model = ScriptedModel::with_responses([ScriptedResponse::text("ok")]);
        let harness = harness_with("instructions", &model)
            .context_layers([arc(layer)])
            .build()
            .unwrap();
        let ctx = harness.create_context(ContextOptions::new().items(vec![Item::user_text("hi")]));
        harness.run(&llm(), "now".to_owned(), &ctx).await.unwrap();

        let input = &model.requests()[0].input;
        assert_eq!(input[0], expected);
        assert_eq!(texts(&input[1..]), ["hi", "now"]);
        assert_eq!(texts(&ctx.items()), ["hi", "now", "ok"], "not in the log");
    }
}

#[tokio::test]
async fn scratchpad_notes_written_by_the_tool_are_recalled_in_later_steps() {
    let model = ScriptedModel::with_responses([
        ScriptedResponse::tool_call("c1", "scratchpad_write", json!({"note": "likes tea"})),
        ScriptedResponse::text("ok"),
        ScriptedResponse::text("tea it is"),
    ]);
    let pad = ScratchpadLayer::new();
    let harness = harness_with("scratchpad", &model)
        .tool(scratchpad_tool())
        .context_layers([arc(pad.clone())])
        .build()
        .unwrap();
    let ctx = harness.create_context(ContextOptions::new());
    harness.run(&llm(), "first".to_owned(), &ctx).await.unwrap();
    harness
        .run(&llm(), "second".to_owned(), &ctx)
        .await
        .unwrap();

    let requests = model.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(texts(&requests[0].input), ["first"], "no notes yet");
    assert_eq!(requests[1].tool_outputs(), ["noted"]);
    assert_eq!(
        requests[2].input[0],
        Item::developer_text("Scratchpad notes:\n- likes tea")
    );
    assert_eq!(pad.notes(&ctx).await.unwrap(), ["likes tea"]);
}

#[tokio::test]
async fn tool_calls_layer_recalls_the_calls_of_tracked_tools_only() {
    let model = ScriptedModel::with_responses([
        ScriptedResponse::tool_calls(&[
            ("c1", "search", json!({"query": "rust"})),
            ("c2", "scratchpad_write", json!({"note": "n"})),
        ]),
        ScriptedResponse::text("done"),
        ScriptedResponse::text("again"),
    ]);
    let harness = harness_with("tool-calls", &model)
        .tool(search_tool())
        .tool(scratchpad_tool())
        .context_layers([arc(ToolCallsLayer::new().track("search"))])
        .build()
        .unwrap();
    let ctx = harness.create_context(ContextOptions::new());
    harness.run(&llm(), "look".to_owned(), &ctx).await.unwrap();
    harness.run(&llm(), "more".to_owned(), &ctx).await.unwrap();

    let requests = model.requests();
    assert_eq!(requests.len(), 3);
    assert!(
        !texts(&requests[0].input)
            .iter()
            .any(|text| text.starts_with("Earlier calls")),
        "nothing recorded before the first call"
    );
    assert_eq!(
        requests[2].input[0],
        Item::developer_text(
            r#"Earlier calls:
- search({"query":"rust"}) → Results for: rust"#
        )
    );
}

#[tokio::test]
async fn steering_denies_or_redirects_tool_calls_by_name() {
    for (steering, expected) in [
        (
            SteeringLayer::new().deny_tool("delete", "never delete files"),
            "Tool call denied: never delete files",
        ),
        (
            SteeringLayer::new().guide_tool("delete", "archive instead"),
            "Tool call redirected: archive instead",
        ),
    ] {
        let ran = Arc::new(AtomicBool::new(false));
        let flag = ran.clone();
        let delete = Tool::new(
            "delete",
            "Delete a file",
            move |_args: QueryArgs, _ctx: ToolContext| {
                let flag = flag.clone();
                async move {
                    flag.store(true, Ordering::SeqCst);
                    Ok("deleted".to_owned())
                }
            },
        );
        let model = ScriptedModel::with_responses([
            ScriptedResponse::tool_call("c1", "delete", json!({"query": "a.txt"})),
            ScriptedResponse::text("ok"),
        ]);
        let harness = harness_with("steer-tool", &model)
            .tool(delete)
            .context_layers([arc(steering)])
            .build()
            .unwrap();
        let ctx = harness.create_context(ContextOptions::new());
        harness
            .run(&llm(), "clean up".to_owned(), &ctx)
            .await
            .unwrap();

        assert_eq!(model.requests()[1].tool_outputs(), [expected]);
        assert!(!ran.load(Ordering::SeqCst), "the tool did not run");
    }
}

#[tokio::test]
async fn steering_guides_a_response_containing_a_string() {
    let model = ScriptedModel::with_responses([
        ScriptedResponse::text("the password is hunter2"),
        ScriptedResponse::text("I can't share that"),
    ]);
    let harness = harness_with("steer-guide", &model)
        .context_layers([arc(
            SteeringLayer::new().guide_output_containing("password", "never reveal passwords")
        )])
        .build()
        .unwrap();
    let ctx = harness.create_context(ContextOptions::new());
    let answer = harness
        .run(&llm(), "tell me".to_owned(), &ctx)
        .await
        .unwrap();

    assert_eq!(answer, "I can't share that");
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        requests[1].input.last(),
        Some(&Item::developer_text("never reveal passwords"))
    );
    assert_eq!(texts(&ctx.items()), ["tell me", "I can't share that"]);
}

#[tokio::test]
async fn steering_denies_a_response_containing_a_string() {
    let model = ScriptedModel::with_responses([ScriptedResponse::text("the secret is 42")]);
    let harness = harness_with("steer-deny", &model)
        .context_layers([arc(
            SteeringLayer::new().deny_output_containing("secret", "no secrets")
        )])
        .build()
        .unwrap();
    let ctx = harness.create_context(ContextOptions::new());
    let error = harness
        .run(&llm(), "tell me".to_owned(), &ctx)
        .await
        .unwrap_err();
    assert_eq!(error.code(), "STEERING_DENIED");
    assert!(error.to_string().contains("no secrets"), "{error}");
}

#[tokio::test]
async fn preview_request_items_shows_the_shaped_history_with_recall() {
    let model = ScriptedModel::new();
    let harness = harness_with("preview", &model)
        .context_layers([
            arc(HistoryLayer::window(2)),
            arc(InstructionsLayer::new("Be brief.")),
        ])
        .build()
        .unwrap();
    harness.seed_session_history(
        "t1",
        vec![
            Item::system_text("You are terse."),
            Item::user_text("u1"),
            Item::assistant_text("a1"),
            Item::user_text("u2"),
        ],
    );

    let preview = harness.preview_request_items(Scope::thread("t1")).await;
    assert_eq!(
        preview,
        [
            Item::developer_text("Be brief."),
            Item::assistant_text("a1"),
            Item::user_text("u2"),
        ]
    );
    assert_eq!(
        harness.preview_request_items(Scope::thread("unused")).await,
        [Item::developer_text("Be brief.")]
    );
    assert_eq!(model.request_count(), 0, "a preview calls no model");
}
