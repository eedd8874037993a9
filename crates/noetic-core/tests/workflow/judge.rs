//! The original's multi-model judge example hydrates and runs with a scripted model.

use noetic_core::workflow::{HydrateOptions, WorkflowDocument, WorkflowRegistry};
use noetic_core::{ContextOptions, StepKind};
use noetic_test_support::{ScriptedModel, ScriptedResponse, harness_with};
use serde_json::json;

use crate::support::fixture;

const PANEL: [&str; 4] = [
    "openai/gpt-4.1",
    "google/gemini-2.5-pro",
    "meta-llama/llama-3.3-70b-instruct",
    "deepseek/deepseek-chat",
];
const JUDGE: &str = "anthropic/claude-opus-4.5";

fn model() -> ScriptedModel {
    ScriptedModel::responding(|request| {
        if request.model == JUDGE {
            ScriptedResponse::text("Paris is the capital of France.")
        } else {
            ScriptedResponse::text(&format!("## Candidate ({})\nParis.", request.model))
        }
    })
}

#[tokio::test]
async fn the_judge_example_runs_the_panel_then_the_judge() {
    let model = model();
    let harness = harness_with("judge", &model).build().unwrap();
    let ctx = harness.create_context(ContextOptions::default());
    let document =
        std::fs::read_to_string(crate::support::fixtures().join("multi-model-judge.workflow.json"))
            .unwrap();
    let output = harness
        .parse_and_run_workflow(
            document.as_str(),
            json!("What is the capital of France?"),
            &ctx,
        )
        .await
        .unwrap();
    assert_eq!(output, json!("Paris is the capital of France."));

    let requests = model.requests();
    assert_eq!(requests.len(), 5);
    let mut panel: Vec<&str> = requests[..4]
        .iter()
        .map(|request| request.model.as_str())
        .collect();
    panel.sort_unstable();
    let mut expected = PANEL.to_vec();
    expected.sort_unstable();
    assert_eq!(panel, expected);
    for request in &requests[..4] {
        assert_eq!(
            request.user_texts(),
            vec!["What is the capital of France?".to_owned()]
        );
        assert!(
            request
                .instructions
                .as_deref()
                .unwrap()
                .contains(&format!("## Candidate ({})", request.model))
        );
    }

    // The judge gets the settled candidates, concatenated in path order with blank lines between.
    let judge = &requests[4];
    assert_eq!(judge.model, JUDGE);
    let candidates: Vec<String> = PANEL
        .iter()
        .map(|model| format!("## Candidate ({model})\nParis."))
        .collect();
    assert_eq!(judge.user_texts(), vec![candidates.join("\n\n")]);
}

#[tokio::test]
async fn the_judge_example_still_answers_when_a_panellist_fails() {
    // `settle` drops failed paths from the merge.
    let model = ScriptedModel::responding(|request| {
        if request.model == "google/gemini-2.5-pro" {
            ScriptedResponse::provider_error(Some(400), "bad request")
        } else if request.model == JUDGE {
            ScriptedResponse::text("judged")
        } else {
            ScriptedResponse::text(&format!("## Candidate ({})", request.model))
        }
    });
    let harness = harness_with("judge", &model).build().unwrap();
    let ctx = harness.create_context(ContextOptions::default());
    let output = harness
        .parse_and_run_workflow(
            fixture("multi-model-judge.workflow.json"),
            json!("Q?"),
            &ctx,
        )
        .await
        .unwrap();
    assert_eq!(output, json!("judged"));
    let judge = model
        .requests()
        .into_iter()
        .find(|request| request.model == JUDGE)
        .unwrap();
    let text = judge.user_texts().join("");
    assert!(!text.contains("gemini"), "{text}");
    assert!(
        text.contains("## Candidate (openai/gpt-4.1)\n\n## Candidate (meta-llama"),
        "{text}"
    );
}

#[test]
fn the_judge_example_hydrates_to_a_sequence() {
    let document =
        WorkflowDocument::from_value(fixture("multi-model-judge.workflow.json")).unwrap();
    let step = document
        .hydrate(&WorkflowRegistry::new(), &HydrateOptions::new())
        .unwrap();
    assert_eq!(step.id(), "multi-model-judge");
    assert_eq!(step.kind(), StepKind::Sequence);
}
