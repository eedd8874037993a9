//! Malformed step trees are refused before anything runs.

use noetic_core::{
    AgentHarness, Context, call_model, conditional, in_parallel, loop_step, sequence, until,
};

use crate::support::{count, counter, counting_inc, harness, root};

#[tokio::test]
async fn a_blank_step_id_is_an_invalid_step() {
    let harness = harness();
    let calls = counter();
    let blank = counting_inc("  ", &calls);

    let error = harness.run(&blank, 0, &root(&harness)).await.unwrap_err();

    assert_eq!(error.code(), "INVALID_STEP");
    assert_eq!(count(&calls), 0);
}

#[tokio::test]
async fn a_blank_step_id_deep_in_the_tree_is_found_before_running() {
    let harness = harness();
    let calls = counter();
    let step = sequence("outer")
        .step(counting_inc("first", &calls))
        .step(counting_inc("", &calls))
        .build();

    let error = harness.run(&step, 0, &root(&harness)).await.unwrap_err();

    assert_eq!(error.code(), "INVALID_STEP");
    assert_eq!(count(&calls), 0, "not even the valid first step ran");
}

#[test]
fn a_blank_model_is_refused_when_the_harness_is_built() {
    let error = AgentHarness::builder("blank-model")
        .agent_graph(call_model("llm").model("   "))
        .build()
        .unwrap_err();
    assert_eq!(error.code(), "MISSING_MODEL");

    let unset = loop_step("agent")
        .step(call_model("llm"))
        .until(until::no_tool_calls());
    let error = AgentHarness::builder("no-model")
        .agent_graph(unset)
        .build()
        .unwrap_err();
    assert_eq!(error.code(), "MISSING_MODEL");
}

#[tokio::test]
async fn a_blank_step_id_returned_by_a_route_is_refused_before_it_runs() {
    let harness = harness();
    let calls = counter();
    let blank = counting_inc(" ", &calls);
    let route = conditional("route", move |_: &i64, _ctx: &Context| Some(blank.clone()));

    let error = harness.run(&route, 0, &root(&harness)).await.unwrap_err();

    assert_eq!(error.code(), "INVALID_STEP");
    assert_eq!(count(&calls), 0);
}

#[tokio::test]
async fn a_blank_step_id_among_computed_paths_is_refused_before_any_path_runs() {
    let harness = harness();
    let calls = counter();
    let step = {
        let calls = calls.clone();
        in_parallel("fan-out")
            .paths(move |_: &i64, _ctx: &Context| {
                vec![counting_inc("fine", &calls), counting_inc("", &calls)]
            })
            .all(|outputs: Vec<i64>| outputs)
    };

    let error = harness.run(&step, 0, &root(&harness)).await.unwrap_err();

    assert_eq!(error.code(), "INVALID_STEP");
    assert_eq!(count(&calls), 0);
}
