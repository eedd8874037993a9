//! Over stdio: the test server as a real child process.

use noetic_core::{Error, call_model};
use noetic_mcp::{McpCommand, McpServer};
use noetic_test_support::{MockReply, MockServer};
use serde_json::json;

use crate::{
    a_model_call_reaches_the_next_request, abort_mid_call, agent, calc, harness, offered, outputs,
    run, server_saw, test_server, wait_gone,
};

#[tokio::test]
async fn every_page_of_tools_is_listed_with_its_schema_and_prefixed_name() {
    let server = calc().await;

    // The server pages two at a time: nine tools take five pages.
    assert_eq!(
        server.tool_names(),
        [
            "add",
            "fail",
            "slow",
            "toggle",
            "env",
            "grandchild",
            "die",
            "echo",
            "wait_for"
        ]
    );
    let tools = server.tools();
    let names: Vec<&str> = tools.iter().map(|tool| tool.name()).collect();
    assert_eq!(names[0], "calc__add");
    assert_eq!(tools[0].input_schema()["required"], json!(["a"]));
    server.shutdown().await;
}

#[tokio::test]
async fn a_model_calls_a_tool_and_its_result_reaches_the_next_request() {
    let server = calc().await;
    a_model_call_reaches_the_next_request(&server).await;
    server.shutdown().await;
}

#[tokio::test]
async fn invalid_arguments_a_server_error_an_error_result_a_timeout_and_a_dead_server_are_outputs()
{
    let server = McpServer::stdio("calc", test_server())
        .call_timeout(std::time::Duration::from_millis(300))
        .connect()
        .await
        .unwrap();
    let provider = MockServer::start().await;
    for (id, tool, arguments) in [
        ("c1", "calc__add", json!({"a": "two"})), // fails our schema check
        ("c2", "calc__add", json!({"a": 1})),     // the server's own check: an MCP error
        ("c3", "calc__fail", json!({})),          // an isError result
        ("c4", "calc__slow", json!({"ms": 60_000})), // past the call timeout
        ("c5", "calc__die", json!({})),           // the server exits mid-call
        ("c6", "calc__add", json!({"a": 1, "b": 2})), // after it died
    ] {
        provider.push(MockReply::function_call(id, tool, &arguments));
    }
    provider.push(MockReply::answer("Done anyway."));
    let harness = harness(&provider, &server);

    let answer = run(&harness, &agent(&server))
        .await
        .expect("the run goes on");

    assert_eq!(answer, "Done anyway.");
    let last = provider.requests().pop().unwrap();
    let outputs = outputs(&last);
    assert_eq!(outputs.len(), 6, "{outputs:?}");
    assert!(
        outputs[0].contains("invalid arguments") || outputs[0].contains("\"two\""),
        "{}",
        outputs[0]
    );
    assert!(
        outputs[1].contains("refused `add`") && outputs[1].contains("`b` must be a number"),
        "{}",
        outputs[1]
    );
    assert_eq!(outputs[2], "Error: this tool always fails");
    assert!(
        outputs[3].contains("timed out after 300 ms"),
        "{}",
        outputs[3]
    );
    assert!(outputs[4].contains("not reachable"), "{}", outputs[4]);
    assert!(outputs[5].contains("not reachable"), "{}", outputs[5]);
    assert!(!server.is_connected());
    server.shutdown().await;
}

#[tokio::test]
async fn list_changed_refreshes_the_offered_tools() {
    let server = calc().await;
    let mut changes = server.list_changes();
    let seen = *changes.borrow_and_update();
    let provider = MockServer::start().await;
    provider.push(MockReply::function_call("c1", "calc__toggle", &json!({})));
    provider.push(MockReply::answer("Toggled."));
    let harness = harness(&provider, &server);
    let agent = agent(&server);
    run(&harness, &agent).await.unwrap();
    assert!(!offered(&provider.requests()[0]).contains(&"calc__extra".to_owned()));

    // The server announced the change; the list is read again.
    changes.wait_for(|count| *count > seen).await.unwrap();
    assert!(server.tool_names().contains(&"extra".to_owned()));
    provider.push(MockReply::function_call("c2", "calc__extra", &json!({})));
    provider.push(MockReply::answer("Ran it."));
    run(&harness, &agent).await.unwrap();
    let requests = provider.requests();
    assert!(offered(&requests[2]).contains(&"calc__extra".to_owned()));
    assert_eq!(outputs(&requests[3]), ["extra ran"]);
    server.shutdown().await;
}

#[tokio::test]
async fn a_step_requiring_a_tool_the_server_lacks_fails_before_any_request() {
    let server = calc().await;
    let provider = MockServer::start().await;
    let harness = harness(&provider, &server);
    let needs_multiply = call_model("assistant")
        .model("gpt-test")
        .tools_from(server.clone())
        .requires("calc", "multiply")
        .build();

    let error = run(&harness, &needs_multiply).await.unwrap_err();

    assert_eq!(error.code(), "CONNECTION_UNSATISFIED");
    assert!(
        matches!(&error, Error::ConnectionUnsatisfied { connection, operation, .. }
            if connection == "calc" && operation == "multiply"),
        "{error:?}"
    );
    assert_eq!(provider.request_count(), 0);

    // A tool it has passes the same check.
    provider.push(MockReply::answer("ok"));
    let needs_add = call_model("assistant")
        .model("gpt-test")
        .tools_from(server.clone())
        .requires("calc", "add")
        .build();
    assert_eq!(run(&harness, &needs_add).await.unwrap(), "ok");
    server.shutdown().await;
}

#[tokio::test]
async fn the_server_s_environment_is_an_allow_list() {
    // Some variable of this process that is not on the allow-list (cargo sets several).
    let (hidden, _) = std::env::vars()
        .find(|(name, _)| !noetic_mcp::DEFAULT_ENV.contains(&name.as_str()))
        .expect("the test process has some variable outside the allow-list");
    let server = McpServer::stdio(
        "calc",
        test_server()
            .env("GIVEN", "given-value")
            .pass_env("NOETIC_NOT_SET_ANYWHERE"),
    )
    .connect()
    .await
    .unwrap();

    let read = |name: &str| server.call_tool("env", json!({"name": name}));
    assert_eq!(read(&hidden).await.unwrap(), json!("<unset>"));
    assert_eq!(read("GIVEN").await.unwrap(), json!("given-value"));
    assert_ne!(read("PATH").await.unwrap(), json!("<unset>"));
    server.shutdown().await;
}

#[tokio::test]
async fn a_command_that_cannot_start_or_initialize_is_a_clear_error() {
    let missing = McpServer::stdio("ghost", McpCommand::new("/nonexistent/mcp-server"))
        .connect()
        .await
        .unwrap_err();
    assert_eq!(missing.code(), "MCP_SPAWN_FAILED");
    assert!(missing.to_string().contains("`ghost`"), "{missing}");

    // Speaks no MCP: prints to stderr and exits.
    let mute = McpServer::stdio(
        "mute",
        McpCommand::parse("mute", "sh -c 'echo broken config >&2; exit 4'").unwrap(),
    )
    .connect()
    .await
    .unwrap_err();
    assert_eq!(mute.code(), "MCP_INIT_FAILED");
    let message = mute.to_string();
    assert!(message.contains("`mute`"), "{message}");
    assert!(message.contains("broken config"), "{message}");

    let empty = McpCommand::parse("empty", "  ").unwrap_err();
    assert_eq!(empty.code(), "MCP_CONFIG_INVALID");
    let unclosed = McpCommand::parse("q", "server 'unclosed").unwrap_err();
    assert_eq!(unclosed.code(), "MCP_CONFIG_INVALID");
}

#[tokio::test]
async fn cancelling_a_run_mid_call_cancels_the_call_and_shutdown_leaves_no_process() {
    let server = calc().await;
    let server_pid = server.pid().expect("a stdio server has a pid");
    // A process the server started: it must not outlive the shutdown either.
    let grandchild: u32 = server
        .call_tool("grandchild", json!({}))
        .await
        .unwrap()
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let provider = MockServer::start().await;
    provider.push(MockReply::function_call(
        "c1",
        "calc__slow",
        &json!({"ms": 60_000}),
    ));
    let harness = harness(&provider, &server);
    abort_mid_call(&harness, &agent(&server), async {
        server_saw(&server, "call slow").await;
    })
    .await;
    // The server heard the cancellation and stopped the tool.
    server_saw(&server, "notification cancelled").await;
    server_saw(&server, "cancelled slow").await;

    server.shutdown().await;
    wait_gone(server_pid).await;
    wait_gone(grandchild).await;
}
