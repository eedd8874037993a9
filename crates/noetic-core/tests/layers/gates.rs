//! `after_model_call`: deny fails the step with `STEERING_DENIED`; guide asks again with the guidance.

use noetic_core::item::Item;
use noetic_core::{ContextOptions, LayerDecision, Step, call_model};
use noetic_test_support::{ScriptedModel, ScriptedResponse, harness_with};

use crate::recall::texts;
use crate::support::{Probe, hook_log, layer};

fn llm() -> Step<String, String> {
    call_model("llm").model("m").into()
}

#[tokio::test]
async fn a_denied_response_fails_the_step_with_steering_denied() {
    let log = hook_log();
    let (_, gate) = layer(
        Probe::new("gate", 100, &log).deciding([LayerDecision::Deny {
            guidance: Some("no secrets".to_owned()),
        }]),
    );
    let model = ScriptedModel::with_responses([ScriptedResponse::text("the secret is 42")]);
    let harness = harness_with("deny", &model)
        .context_layers([gate])
        .build()
        .unwrap();
    let ctx = harness.create_context(ContextOptions::new());
    let error = harness
        .run(&llm(), "tell me".to_owned(), &ctx)
        .await
        .unwrap_err();
    assert_eq!(error.code(), "STEERING_DENIED");
    assert!(
        !texts(&ctx.items()).contains(&"the secret is 42".to_owned()),
        "a denied response is not stored"
    );
}

#[tokio::test]
async fn a_guided_response_is_asked_again_with_the_guidance() {
    let log = hook_log();
    let (_, gate) = layer(
        Probe::new("gate", 100, &log).deciding([LayerDecision::Guide {
            guidance: "answer in French".to_owned(),
        }]),
    );
    let model = ScriptedModel::with_responses([
        ScriptedResponse::text("hello"),
        ScriptedResponse::text("bonjour"),
    ]);
    let harness = harness_with("guide", &model)
        .context_layers([gate])
        .build()
        .unwrap();
    let ctx = harness.create_context(ContextOptions::new());
    let answer = harness.run(&llm(), "greet".to_owned(), &ctx).await.unwrap();

    assert_eq!(answer, "bonjour");
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(texts(&requests[1].input), ["greet", "answer in French"]);
    assert_eq!(
        requests[1].input[1],
        Item::developer_text("answer in French")
    );
    assert_eq!(texts(&ctx.items()), ["greet", "bonjour"]);
}

#[tokio::test]
async fn guidance_is_given_at_most_three_times_then_the_answer_is_accepted() {
    let log = hook_log();
    let guide = || LayerDecision::Guide {
        guidance: "again".to_owned(),
    };
    let (_, gate) =
        layer(Probe::new("gate", 100, &log).deciding([guide(), guide(), guide(), guide()]));
    let model =
        ScriptedModel::with_responses(["a", "b", "c", "d", "e"].map(ScriptedResponse::text));
    let harness = harness_with("guide-cap", &model)
        .context_layers([gate])
        .build()
        .unwrap();
    let ctx = harness.create_context(ContextOptions::new());
    let answer = harness.run(&llm(), "go".to_owned(), &ctx).await.unwrap();
    assert_eq!(answer, "d");
    assert_eq!(model.request_count(), 4);
}
