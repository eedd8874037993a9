//! Tool sources: tools whose list changes while a step runs (an MCP server's) reach the next round's
//! request; a harness-wide source is offered to every model call.

use std::sync::{Arc, Mutex};

use noetic_core::{ContextOptions, Tool, ToolContext, ToolError, ToolSource, call_model};
use noetic_test_support::{ScriptedModel, ScriptedResponse, harness_with};
use serde_json::{Value, json};

/// A source whose list a test (or a tool) replaces.
#[derive(Clone, Default)]
struct Swappable {
    tools: Arc<Mutex<Arc<[Tool]>>>,
}

impl Swappable {
    fn set(&self, tools: Vec<Tool>) {
        *self.tools.lock().unwrap() = tools.into();
    }
}

impl ToolSource for Swappable {
    fn name(&self) -> &str {
        "swappable"
    }

    fn tools(&self) -> Arc<[Tool]> {
        self.tools.lock().unwrap().clone()
    }
}

fn echo(name: &'static str) -> Tool {
    Tool::dynamic(
        name,
        "Echoes",
        json!({"type": "object", "properties": {"text": {"type": "string"}}}),
        move |args: Value, _ctx: ToolContext| async move {
            Ok::<_, ToolError>(json!(format!("{name}: {}", args["text"])))
        },
    )
    .unwrap()
}

#[tokio::test]
async fn a_source_s_changed_list_reaches_the_next_round_and_its_new_tool_runs() {
    let source = Swappable::default();
    let growing = source.clone();
    // `first` adds `second` to the source when it runs: the next round must offer it.
    let first = Tool::dynamic(
        "first",
        "Adds a tool",
        json!({"type": "object"}),
        move |_args: Value, _ctx: ToolContext| {
            let growing = growing.clone();
            async move {
                growing.set(vec![echo("second")]);
                Ok::<_, ToolError>(json!("added"))
            }
        },
    )
    .unwrap();
    let model = ScriptedModel::with_responses([
        ScriptedResponse::tool_call("call_1", "first", json!({})),
        ScriptedResponse::tool_call("call_2", "second", json!({"text": "hi"})),
        ScriptedResponse::text("done"),
    ]);
    let harness = harness_with("sources", &model).build().unwrap();
    let agent = call_model("assistant")
        .model("gpt-test")
        .tool(first)
        .tools_from(source.clone())
        .build();
    let ctx = harness.create_context(ContextOptions::new());

    let answer = harness.run(&agent, "go".to_owned(), &ctx).await.unwrap();

    assert_eq!(answer, "done");
    let requests = model.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(requests[0].tools, ["first"]);
    assert_eq!(requests[1].tools, ["first", "second"]);
    assert_eq!(requests[2].tools, ["first", "second"]);
    assert_eq!(requests[2].tool_outputs(), ["added", "second: \"hi\""]);
}

#[tokio::test]
async fn a_harness_wide_source_is_offered_to_every_model_call_after_the_step_s_tools() {
    let source = Swappable::default();
    source.set(vec![echo("shared"), echo("mine")]);
    let model = ScriptedModel::with_responses([
        ScriptedResponse::tool_call("call_1", "mine", json!({"text": "x"})),
        ScriptedResponse::text("ok"),
    ]);
    let harness = harness_with("sources", &model)
        .tools_from(source.clone())
        .build()
        .unwrap();
    // The step's own `mine` wins over the source's tool of the same name.
    let own = Tool::dynamic(
        "mine",
        "The step's own",
        json!({"type": "object"}),
        |_args: Value, _ctx: ToolContext| async move { Ok::<_, ToolError>(json!("own")) },
    )
    .unwrap();
    let agent = call_model("assistant").model("gpt-test").tool(own).build();
    let ctx = harness.create_context(ContextOptions::new());

    harness.run(&agent, "go".to_owned(), &ctx).await.unwrap();

    let requests = model.requests();
    assert_eq!(requests[0].tools, ["mine", "shared"]);
    assert_eq!(requests[1].tool_outputs(), ["own"]);
    // Emptied: the next run offers the step's tool alone.
    source.set(Vec::new());
    model.push(ScriptedResponse::text("again"));
    harness.run(&agent, "go".to_owned(), &ctx).await.unwrap();
    assert_eq!(model.requests()[2].tools, ["mine"]);
}
