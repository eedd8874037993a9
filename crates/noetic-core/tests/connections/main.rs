//! Connections through the public API: a tree whose steps need an operation no registered connection
//! supports fails with `CONNECTION_UNSATISFIED` before anything runs; a satisfied tree runs.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use noetic_core::{
    AgentHarness, Connection, ConnectionSpec, Context, ContextOptions, Error, Step, call_model,
    in_parallel, loop_step, run_code, sequence, spawn, until,
};
use noetic_test_support::{EventLog, ScriptedModel, ScriptedResponse, harness_with};

/// A `run_code` step counting its runs, needing `db.insert`; then a `call_model` needing `db.query`.
fn tree(runs: &Arc<AtomicUsize>) -> Step<String, String> {
    let runs = runs.clone();
    sequence("root")
        .step(
            run_code("store", move |input: String, _ctx: Context| {
                let runs = runs.clone();
                async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, std::convert::Infallible>(input)
                }
            })
            .requires("db", "insert"),
        )
        .step(
            call_model("answer")
                .model("openai/gpt-4o")
                .requires("db", "query"),
        )
        .build()
}

fn is_unsatisfied(error: &Error, connection: &str, operation: &str) -> bool {
    matches!(error, Error::ConnectionUnsatisfied { connection: c, operation: o, .. } if c == connection && o == operation)
}

#[tokio::test]
async fn a_missing_operation_fails_the_run_before_any_step_starts() {
    let model = ScriptedModel::with_responses([ScriptedResponse::text("done")]);
    let harness = harness_with("connections", &model)
        .connection(ConnectionSpec::new("db", ["insert"]))
        .build()
        .unwrap();
    let log = EventLog::new();
    let ctx = harness.create_context(ContextOptions::new().event_sink(log.sink()));
    let runs = Arc::new(AtomicUsize::new(0));

    let error = harness
        .run(&tree(&runs), "hello".to_owned(), &ctx)
        .await
        .unwrap_err();

    assert!(is_unsatisfied(&error, "db", "query"), "{error:?}");
    assert_eq!(error.code(), "CONNECTION_UNSATISFIED");
    assert_eq!(runs.load(Ordering::SeqCst), 0, "no step body ran");
    assert!(
        !log.framework_types().contains(&"step_started"),
        "no step started: {:?}",
        log.framework_types()
    );
    assert_eq!(model.request_count(), 0, "no provider request");
    assert_eq!(ctx.step_count(), 0);
}

#[tokio::test]
async fn a_missing_connection_fails_the_run_too() {
    let model = ScriptedModel::new();
    let harness = harness_with("connections", &model).build().unwrap();
    let ctx = harness.create_context(ContextOptions::new());
    let runs = Arc::new(AtomicUsize::new(0));

    let error = harness
        .run(&tree(&runs), "hello".to_owned(), &ctx)
        .await
        .unwrap_err();

    assert!(
        is_unsatisfied(&error, "db", "insert"),
        "the first need in tree order: {error:?}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert_eq!(model.request_count(), 0);
}

#[tokio::test]
async fn satisfied_needs_run() {
    let model = ScriptedModel::with_responses([ScriptedResponse::text("done")]);
    let harness = harness_with("connections", &model)
        .connection(ConnectionSpec::new("db", ["query", "insert"]))
        .build()
        .unwrap();
    let log = EventLog::new();
    let ctx = harness.create_context(ContextOptions::new().event_sink(log.sink()));
    let runs = Arc::new(AtomicUsize::new(0));

    let answer = harness
        .run(&tree(&runs), "hello".to_owned(), &ctx)
        .await
        .unwrap();

    assert_eq!(answer, "done");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(model.request_count(), 1);
    assert!(log.framework_types().contains(&"step_started"));
}

#[tokio::test]
async fn needs_nested_in_loops_parallel_paths_and_spawned_children_are_checked() {
    let harness = AgentHarness::builder("connections")
        .connection(ConnectionSpec::new("search", ["lookup"]))
        .build()
        .unwrap();
    let leaf = |id: &str, operation: &str| -> Step<u32, u32> {
        run_code(id, |n: u32, _ctx: Context| async move {
            Ok::<_, std::convert::Infallible>(n)
        })
        .requires("search", operation)
        .build()
    };
    let cases: Vec<(&str, Step<u32, u32>)> = vec![
        (
            "loop body",
            loop_step("loop")
                .step(leaf("inner", "crawl"))
                .until(until::max_steps(1))
                .build(),
        ),
        (
            "parallel path",
            in_parallel("fan-out")
                .path(leaf("ok", "lookup"))
                .path(leaf("bad", "crawl"))
                .race(),
        ),
        (
            "spawned child",
            spawn("child", leaf("inner", "crawl")).build(),
        ),
    ];
    for (place, step) in cases {
        let ctx = harness.create_context(ContextOptions::new());
        let error = harness.run(&step, 1, &ctx).await.unwrap_err();
        assert!(
            is_unsatisfied(&error, "search", "crawl"),
            "{place}: {error:?}"
        );
        assert_eq!(ctx.step_count(), 0, "{place}: nothing ran");
    }
}

#[tokio::test]
async fn a_later_connection_with_the_same_name_replaces_the_earlier_one() {
    let harness = AgentHarness::builder("connections")
        .connection(ConnectionSpec::new("db", ["query"]))
        .connection(Arc::new(ConnectionSpec::new("db", ["insert"])))
        .build()
        .unwrap();

    let db = harness.connection("db").expect("registered");
    assert_eq!(db.name(), "db");
    assert!(db.supports("insert"));
    assert!(!db.supports("query"));
    assert!(harness.connection("cache").is_none());
}

#[tokio::test]
async fn a_session_turn_checks_needs_before_anything_runs() {
    let model = ScriptedModel::with_responses([ScriptedResponse::text("done")]);
    let runs = Arc::new(AtomicUsize::new(0));
    let harness = harness_with("connections", &model)
        .connection(ConnectionSpec::new("db", ["insert"]))
        .agent_graph(tree(&runs))
        .build()
        .unwrap();
    let types = harness.events(noetic_core::Scope::default());
    harness
        .execute("hello", noetic_core::ExecuteOptions::default())
        .await
        .unwrap();
    let error = harness
        .agent_response(noetic_core::Scope::default())
        .await
        .unwrap_err();
    assert_eq!(error.code(), "CONNECTION_UNSATISFIED");
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert_eq!(model.request_count(), 0);
    use futures_util::StreamExt;
    let seen: Vec<String> = types
        .take_while(|event| {
            let done = matches!(
                &**event,
                noetic_core::StreamEvent::Framework(
                    noetic_core::FrameworkEvent::TurnAborted { .. }
                )
            );
            async move { !done }
        })
        .map(|event| {
            event.to_json("h")["type"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect()
        .await;
    assert!(
        !seen.iter().any(|kind| kind == "h:step_started"),
        "{seen:?}"
    );
}

#[tokio::test]
async fn a_connection_that_is_not_registered_is_reported_as_missing() {
    let harness = AgentHarness::builder("connections")
        .connection(ConnectionSpec::new("db", ["query"]))
        .build()
        .unwrap();
    let step = run_code("lookup", |n: u32, _ctx: Context| async move {
        Ok::<_, std::convert::Infallible>(n)
    })
    .requires("crm", "lookup")
    .build();

    let error = harness
        .run(&step, 1, &harness.create_context(ContextOptions::new()))
        .await
        .unwrap_err();

    assert_eq!(error.code(), "CONNECTION_UNSATISFIED");
    assert_eq!(
        error.to_string(),
        "connection `crm` is not registered (step needs its operation `lookup`)"
    );
    assert!(
        matches!(&error, Error::ConnectionUnsatisfied { connection, operation, registered: false }
            if connection == "crm" && operation == "lookup"),
        "{error:?}"
    );
}

#[tokio::test]
async fn a_registered_connection_without_the_operation_says_it_lacks_it() {
    let harness = AgentHarness::builder("connections")
        .connection(ConnectionSpec::new("crm", ["create"]))
        .build()
        .unwrap();
    let step = run_code("lookup", |n: u32, _ctx: Context| async move {
        Ok::<_, std::convert::Infallible>(n)
    })
    .requires("crm", "lookup")
    .build();

    let error = harness
        .run(&step, 1, &harness.create_context(ContextOptions::new()))
        .await
        .unwrap_err();

    assert_eq!(
        error.to_string(),
        "connection `crm` lacks operation `lookup`"
    );
    assert!(
        matches!(
            &error,
            Error::ConnectionUnsatisfied {
                registered: true,
                ..
            }
        ),
        "{error:?}"
    );
}
