//! Content capture flips a process-wide switch, so its test has a binary of its own (the span tests
//! assert that no content is recorded by default).

use noetic_core::{AgentHarness, ContextOptions, call_model};
use noetic_test_support::{ScriptedModel, ScriptedResponse};
mod support;

use support::{attr, export, one};

#[tokio::test]
async fn content_is_recorded_only_when_capture_is_opted_in() {
    let run = |capture: bool| async move {
        noetic_core::telemetry::set_capture_content(capture);
        let model = ScriptedModel::with_responses([ScriptedResponse::text("the secret sauce")]);
        let harness = AgentHarness::builder("content")
            .provider("scripted", model)
            .build()
            .expect("harness");
        let agent = call_model("ask")
            .model("m-2")
            .instructions("Be terse.")
            .build();
        let spans = export(async {
            let ctx = harness.create_context(ContextOptions::new());
            harness
                .run(&agent, "what is in it".to_owned(), &ctx)
                .await
                .expect("runs");
        })
        .await;
        one(&spans, "chat m-2").clone()
    };
    // One test flips the process-wide switch, so both cases run here, in order.
    let off = run(false).await;
    for key in [
        "gen_ai.system_instructions",
        "gen_ai.input.messages",
        "gen_ai.output.messages",
    ] {
        assert_eq!(attr(&off, key), None, "{key} without opt-in");
    }
    let on = run(true).await;
    noetic_core::telemetry::set_capture_content(false);
    assert_eq!(
        attr(&on, "gen_ai.system_instructions").as_deref(),
        Some("Be terse.")
    );
    assert!(
        attr(&on, "gen_ai.input.messages").is_some_and(|input| input.contains("what is in it"))
    );
    assert!(
        attr(&on, "gen_ai.output.messages")
            .is_some_and(|output| output.contains("the secret sauce"))
    );
}
