//! What a `call_model` does with its input: a string becomes a user message in the log only at a root
//! (the input of `run()`, of a spawned child, or returned by `prepare_next`). An earlier step's output is
//! input for the step: sent with its requests, never stored, and not sent again when it is the answer
//! already in the log.

use noetic_core::item::Item;
use noetic_core::{Context, call_model, run_code, sequence, spawn};
use noetic_test_support::{ScriptedModel, ScriptedResponse};

use crate::support::setup;

/// `role: text` of each message item.
fn messages(items: &[Item]) -> Vec<String> {
    items
        .iter()
        .filter_map(|item| {
            let role = format!("{:?}", item.role()?).to_lowercase();
            Some(format!("{role}: {}", item.text()?))
        })
        .collect()
}

#[tokio::test]
async fn a_sequence_of_model_calls_does_not_turn_the_first_answer_into_a_user_message() {
    let model = ScriptedModel::with_responses([
        ScriptedResponse::text("a draft"),
        ScriptedResponse::text("the final answer"),
    ]);
    let (harness, ctx, _log) = setup(&model);
    let graph = sequence("draft-then-refine")
        .step(call_model("draft").model("m"))
        .step(call_model("refine").model("m"))
        .build();

    let answer = harness
        .run(&graph, "write a haiku".to_owned(), &ctx)
        .await
        .unwrap();

    assert_eq!(answer, "the final answer");
    let requests = model.requests();
    assert_eq!(
        messages(&requests[1].input),
        ["user: write a haiku", "assistant: a draft"],
        "the first answer reaches the second call as what the assistant said, not as a user message"
    );
    assert_eq!(
        messages(&ctx.items()),
        [
            "user: write a haiku",
            "assistant: a draft",
            "assistant: the final answer"
        ]
    );
}

#[tokio::test]
async fn a_code_step_output_reaches_the_next_model_call_but_never_the_log() {
    let model = ScriptedModel::with_responses([ScriptedResponse::text("ok")]);
    let (harness, ctx, _log) = setup(&model);
    let graph = sequence("prepare-then-ask")
        .step(run_code("prepare", |text: String, _: Context| async move {
            Ok::<_, std::convert::Infallible>(text.to_uppercase())
        }))
        .step(call_model("ask").model("m"))
        .build();

    harness.run(&graph, "hello".to_owned(), &ctx).await.unwrap();

    assert_eq!(
        model.requests()[0].input,
        [Item::user_text("HELLO")],
        "the model gets the step's input"
    );
    assert_eq!(
        messages(&ctx.items()),
        ["assistant: ok"],
        "`HELLO` was made by a step, not sent by the user: it is not stored as a user message"
    );
}

#[tokio::test]
async fn a_spawned_child_is_its_own_root_and_takes_a_forwarded_string_as_its_user_message() {
    let model = ScriptedModel::with_responses([ScriptedResponse::text("Bonjour")]);
    let (harness, ctx, _log) = setup(&model);
    let graph = sequence("delegate")
        .step(run_code("brief", |text: String, _: Context| async move {
            Ok::<_, std::convert::Infallible>(format!("Translate: {text}"))
        }))
        .step(spawn("translator", call_model("translate").model("m")))
        .build();

    let answer = harness.run(&graph, "Hello".to_owned(), &ctx).await.unwrap();

    assert_eq!(answer, "Bonjour");
    assert_eq!(model.requests()[0].user_texts(), ["Translate: Hello"]);
    assert!(
        ctx.items().is_empty(),
        "the child's messages stay in the child's log: {:?}",
        ctx.items()
    );
}

#[tokio::test]
async fn the_input_of_run_is_a_user_message() {
    let model = ScriptedModel::with_responses([ScriptedResponse::text("hi")]);
    let (harness, ctx, _log) = setup(&model);

    harness
        .run(
            &call_model("llm").model("m").build(),
            "hello".to_owned(),
            &ctx,
        )
        .await
        .unwrap();

    assert_eq!(messages(&ctx.items()), ["user: hello", "assistant: hi"]);
}

#[tokio::test]
async fn a_prepare_next_result_is_a_user_message_for_the_next_iteration() {
    let model = ScriptedModel::with_responses([
        ScriptedResponse::text("a long answer"),
        ScriptedResponse::text("short"),
    ]);
    let (harness, ctx, _log) = setup(&model);
    let graph = noetic_core::loop_step("retry")
        .step(call_model("llm").model("m"))
        .until(noetic_core::until::max_steps(2))
        .prepare_next(|_: String, _: &noetic_core::Verdict, _: &Context| {
            "Shorter, please.".to_owned()
        })
        .build();

    harness
        .run(&graph, "Answer.".to_owned(), &ctx)
        .await
        .unwrap();

    assert_eq!(
        messages(&ctx.items()),
        [
            "user: Answer.",
            "assistant: a long answer",
            "user: Shorter, please.",
            "assistant: short"
        ],
        "what prepare_next returns is the caller speaking, like run()'s input"
    );
}
