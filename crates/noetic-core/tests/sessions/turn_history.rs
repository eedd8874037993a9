//! What a turn's children see and what reaches the session history: a spawned child starts with the
//! turn's messages, and every item appended in any context of the turn (root, spawned children,
//! parallel paths) lands in the history once, in order.

use std::sync::Arc;

use noetic_core::item::{ContentPart, Item};
use noetic_core::{
    AgentHarness, Context, DeliveryMode, ExecuteOptions, Role, Scope, SteerMode, Tool, ToolContext,
    call_model, in_parallel, run_code, sequence, spawn,
};
use noetic_test_support::{PacedModel, ScriptedModel, ScriptedResponse};
use serde_json::{Map, Value, json};
use tokio::sync::Notify;

use crate::support::{guarded, paced_builder, text_events};

/// `role: text` of each message item, `call <id>` / `output <id>: <text>` of the others.
fn transcript(items: &[Item]) -> Vec<String> {
    items
        .iter()
        .map(|item| match item {
            Item::FunctionCall(call) => format!("call {}", call.call_id),
            Item::FunctionCallOutput(output) => {
                let text = output.output.as_str().unwrap_or_default();
                format!("output {}: {text}", output.call_id)
            }
            other => format!(
                "{}: {}",
                other
                    .role()
                    .map(|role| format!("{role:?}").to_lowercase())
                    .unwrap_or_default(),
                other.text().unwrap_or_default()
            ),
        })
        .collect()
}

fn scripted(model: &ScriptedModel, graph: noetic_core::Step<String, String>) -> AgentHarness {
    AgentHarness::builder("agent")
        .provider("scripted", model.clone())
        .agent_graph(graph)
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_spawned_child_starts_with_the_turn_messages_roles_and_parts_intact() {
    let model = ScriptedModel::with_responses([ScriptedResponse::text("a cat")]);
    let harness = scripted(
        &model,
        spawn("delegate", call_model("child").model("m")).build(),
    );
    let mut image = Map::new();
    image.insert("image_url".to_owned(), json!("https://example.com/cat.png"));
    let photo = Item::message(
        Role::User,
        vec![
            ContentPart::InputText {
                text: "What is this?".to_owned(),
            },
            ContentPart::InputImage(image),
        ],
    );

    harness
        .execute(photo.clone(), ExecuteOptions::default())
        .await
        .unwrap();
    let response = harness.agent_response(Scope::default()).await.unwrap();

    assert_eq!(response.text, "a cat");
    assert_eq!(
        model.requests()[0].input,
        [photo],
        "the child sees the message that started the turn, once, parts and all"
    );
}

#[tokio::test]
async fn what_a_spawned_child_said_reaches_the_session_history() {
    let model = ScriptedModel::with_responses([
        ScriptedResponse::text("child answer"),
        ScriptedResponse::text("second answer"),
    ]);
    let harness = scripted(
        &model,
        spawn("delegate", call_model("child").model("m")).build(),
    );

    harness
        .execute("first task", ExecuteOptions::default())
        .await
        .unwrap();
    let first = harness.agent_response(Scope::default()).await.unwrap();
    assert_eq!(
        transcript(&first.items),
        ["user: first task", "assistant: child answer"]
    );

    harness
        .execute("second task", ExecuteOptions::default())
        .await
        .unwrap();
    let second = harness.agent_response(Scope::default()).await.unwrap();
    assert_eq!(
        transcript(&model.requests()[1].input),
        ["user: second task"],
        "a spawned child has its own log: it starts with the turn's messages only"
    );
    assert_eq!(
        transcript(&second.items),
        [
            "user: first task",
            "assistant: child answer",
            "user: second task",
            "assistant: second answer"
        ],
        "the history keeps what every turn's child said"
    );
}

#[tokio::test]
async fn a_steer_applied_in_a_forwarded_child_and_its_answer_reach_the_history() {
    let model = PacedModel::new();
    let child = call_model("child-llm").model("m");
    let harness = paced_builder(&model)
        .agent_graph(spawn("delegate", child).steers(SteerMode::Forward))
        .build()
        .unwrap();
    harness
        .execute("task", ExecuteOptions::default().message_id("m1"))
        .await
        .unwrap();
    let first = guarded("the child's request", model.next_call()).await;
    assert_eq!(
        transcript(&first.request.input),
        ["user: task"],
        "the child sees the turn's message"
    );
    let mut answer = text_events("draft");
    let done = answer.split_off(answer.len() - 2);
    first.send_all(answer);
    harness
        .execute(
            "in French",
            ExecuteOptions::default()
                .delivery_mode(DeliveryMode::NextItem)
                .message_id("s"),
        )
        .await
        .unwrap();
    first.send_all(done);
    let second = guarded("the child's second request", model.next_call()).await;
    second.send_all(text_events("brouillon"));

    let response = harness.agent_response(Scope::default()).await.unwrap();

    assert_eq!(response.text, "brouillon");
    assert_eq!(
        transcript(&response.items),
        [
            "user: task",
            "assistant: draft",
            "user: in French",
            "assistant: brouillon"
        ]
    );
}

#[tokio::test]
async fn items_of_parallel_paths_reach_the_history_once_each_after_the_turn_messages() {
    let model = ScriptedModel::responding(|request| {
        let answer = if request.instructions.as_deref() == Some("left") {
            "from the left"
        } else {
            "from the right"
        };
        ScriptedResponse::text(answer)
    });
    let left = call_model("left").model("m").instructions("left");
    let right = call_model("right").model("m").instructions("right");
    let graph = sequence("fan-out")
        .step(
            in_parallel("both")
                .path(left)
                .path(right)
                .all(|answers: Vec<String>| answers.join(" + ")),
        )
        .build();
    let harness = scripted(&model, graph);

    harness
        .execute("question", ExecuteOptions::default())
        .await
        .unwrap();
    let response = harness.agent_response(Scope::default()).await.unwrap();

    assert_eq!(response.text, "from the left + from the right");
    for request in model.requests() {
        assert_eq!(
            request.user_texts(),
            ["question"],
            "each path sees the turn's message once"
        );
    }
    let mut history = transcript(&response.items);
    assert_eq!(history.remove(0), "user: question");
    history.sort();
    assert_eq!(
        history,
        ["assistant: from the left", "assistant: from the right"],
        "no user message duplicated, no path's answer lost"
    );
}

#[tokio::test]
async fn a_childs_answer_handed_to_the_parent_is_sent_to_it_but_not_stored_as_a_user_message() {
    let model = ScriptedModel::responding(|request| {
        let answer = if request.instructions.as_deref() == Some("child") {
            "child finding"
        } else {
            "parent summary"
        };
        ScriptedResponse::text(answer)
    });
    let graph = sequence("delegate-then-summarize")
        .step(spawn(
            "delegate",
            call_model("child").model("m").instructions("child"),
        ))
        .step(call_model("parent").model("m").instructions("parent"))
        .build();
    let harness = scripted(&model, graph);

    harness
        .execute("look into it", ExecuteOptions::default())
        .await
        .unwrap();
    let response = harness.agent_response(Scope::default()).await.unwrap();

    assert_eq!(
        transcript(&model.requests()[1].input),
        ["user: look into it", "user: child finding"],
        "the parent gets the child's answer as its step input"
    );
    assert_eq!(
        transcript(&response.items),
        [
            "user: look into it",
            "assistant: child finding",
            "assistant: parent summary"
        ],
        "the history holds what each model said, once; no user message was invented"
    );
}

#[tokio::test]
async fn a_root_code_step_gets_the_text_of_the_turn_messages() {
    let echo = run_code("echo", |input: String, _: Context| async move {
        Ok::<_, std::convert::Infallible>(format!("got: {input}"))
    });
    let harness = AgentHarness::builder("agent")
        .agent_graph(echo)
        .build()
        .unwrap();

    harness
        .execute("hello there", ExecuteOptions::default())
        .await
        .unwrap();
    let response = harness.agent_response(Scope::default()).await.unwrap();

    assert_eq!(response.text, "got: hello there");
    assert_eq!(
        transcript(&response.items),
        ["user: hello there"],
        "the input is not appended a second time"
    );
}

#[tokio::test]
async fn a_losing_race_paths_calls_keep_an_output_in_the_history() {
    let started = Arc::new(Notify::new());
    let slow = {
        let started = started.clone();
        Tool::dynamic(
            "slow",
            "Never returns",
            json!({"type": "object"}),
            move |_: Value, _ctx: ToolContext| {
                let started = started.clone();
                async move {
                    started.notify_one();
                    std::future::pending::<()>().await;
                    Ok(Value::Null)
                }
            },
        )
        .unwrap()
    };
    let model = ScriptedModel::with_responses([ScriptedResponse::tool_calls(&[
        ("c1", "slow", json!({})),
        ("c2", "slow", json!({})),
    ])]);
    let loser = call_model("loser").model("m").tool(slow);
    let winner = run_code("winner", move |_: String, _: Context| {
        let started = started.clone();
        async move {
            started.notified().await;
            Ok::<_, std::convert::Infallible>("the winner".to_owned())
        }
    });
    let harness = scripted(&model, in_parallel("race").path(loser).path(winner).race());

    harness
        .execute("go", ExecuteOptions::default())
        .await
        .unwrap();
    let response = harness.agent_response(Scope::default()).await.unwrap();

    assert_eq!(response.text, "the winner");
    assert_eq!(
        transcript(&response.items),
        [
            "user: go",
            "call c1",
            "call c2",
            "output c1: Tool call cancelled before it finished: its part of the turn was stopped.",
            "output c2: Tool call cancelled before it finished: its part of the turn was stopped.",
        ],
        "what the losing path did is kept, and every call has an output"
    );
}
