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

#[tokio::test]
async fn a_retry_policy_of_zero_attempts_is_rejected_before_anything_runs() {
    let harness = harness();
    let calls = counter();
    let zero = {
        let calls = calls.clone();
        noetic_core::run_code("never-tried", move |n: i64, _ctx: Context| {
            calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async move { Ok::<_, std::convert::Infallible>(n) }
        })
        .retry(noetic_core::RetryPolicy::new(
            0,
            noetic_core::Backoff::Fixed,
            std::time::Duration::ZERO,
        ))
        .build()
    };

    let error = harness.run(&zero, 1, &root(&harness)).await.unwrap_err();

    assert_eq!(error.code(), "INVALID_STEP");
    assert!(
        error.to_string().contains("never-tried") && error.to_string().contains("max_attempts"),
        "{error}"
    );
    assert_eq!(count(&calls), 0, "the body never ran");
    let error = AgentHarness::builder("zero-attempts")
        .agent_graph(zero)
        .build()
        .unwrap_err();
    assert_eq!(error.code(), "INVALID_STEP");
}

#[test]
fn asking_for_the_agent_graph_with_other_types_is_an_invalid_argument() {
    let harness = AgentHarness::builder("typed")
        .agent_graph(call_model("llm").model("m"))
        .build()
        .unwrap();

    let error = harness.agent_graph::<u32, u32>().unwrap_err();

    assert_eq!(error.code(), "INVALID_ARGUMENT");
    let message = error.to_string();
    assert!(
        message.contains("u32") && message.contains("String"),
        "names the requested and the graph's types: {message}"
    );
    assert!(harness.agent_graph::<String, String>().is_ok());
    assert!(
        harness.agent_graph::<String, u32>().is_err(),
        "the output type is checked too"
    );
}

#[test]
fn a_json_value_graph_matches_any_types_and_any_graph_matches_json_values() {
    use serde_json::Value;
    let untyped = noetic_core::run_code("echo", |value: Value, _ctx: Context| async move {
        Ok::<_, std::convert::Infallible>(value)
    });
    let harness = AgentHarness::builder("untyped")
        .agent_graph(untyped)
        .build()
        .unwrap();
    assert!(harness.agent_graph::<u32, String>().is_ok());

    let typed = AgentHarness::builder("typed")
        .agent_graph(call_model("llm").model("m"))
        .build()
        .unwrap();
    assert!(typed.agent_graph::<Value, Value>().is_ok());
    assert!(typed.agent_graph::<String, Value>().is_ok());
}
