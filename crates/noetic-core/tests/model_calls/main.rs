//! `call_model` through the public API with a scripted model: the ReAct loop, tool failures, round
//! limits, recovery rounds, the idle watchdog, usage, structured output and events.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

mod cancellation;
mod drain;
mod inputs;
mod sources;
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::future::BoxFuture;
use noetic_core::item::Item;
use noetic_core::layer::ToolCallView;
use noetic_core::{
    ContextLayer, ContextOptions, Error, FrameworkEvent, FrameworkEventKind, LayerDecision,
    ResponseEvent, Role, TokenUsage, Tool, ToolContext, ToolError, any, call_model, loop_step,
    until,
};
use noetic_test_support::{ScriptedModel, ScriptedResponse, harness_with};
use serde_json::json;
use support::{ChannelModel, search_tool, setup};

fn agent() -> noetic_core::Step<String, String> {
    loop_step("researcher-loop")
        .step(
            call_model("researcher-llm")
                .model("openai/gpt-4o")
                .instructions("You are a research assistant.")
                .tool(search_tool()),
        )
        .until(any([until::no_tool_calls(), until::max_steps(10)]))
        .build()
}

#[tokio::test]
async fn quick_example_graph_makes_exactly_two_requests_for_one_tool_call() {
    let model = ScriptedModel::with_responses([
        ScriptedResponse::tool_call("call_1", "search", json!({"query": "AI news"})),
        ScriptedResponse::text("Here is the news."),
    ]);
    let (harness, ctx, _log) = setup(&model);

    let answer = harness
        .run(&agent(), "Find recent AI news".to_owned(), &ctx)
        .await
        .unwrap();

    assert_eq!(answer, "Here is the news.");
    let requests = model.requests();
    assert_eq!(requests.len(), 2, "one tool round and one answer round");
    // No user message was invented between the two requests.
    assert_eq!(requests[0].user_texts(), ["Find recent AI news"]);
    assert_eq!(requests[1].user_texts(), ["Find recent AI news"]);
    assert_eq!(
        requests[1].tool_outputs(),
        [r#"{"result":"Results for: AI news"}"#]
    );
    assert_eq!(
        requests[0].instructions.as_deref(),
        Some("You are a research assistant.")
    );
    assert_eq!(requests[0].tools, ["search"]);
}

#[tokio::test]
async fn react_loop_runs_two_tool_rounds_then_answers() {
    let model = ScriptedModel::with_responses([
        ScriptedResponse::tool_call("call_1", "search", json!({"query": "one"})),
        ScriptedResponse::tool_call("call_2", "search", json!({"query": "two"})),
        ScriptedResponse::text("done"),
    ]);
    let (harness, ctx, _log) = setup(&model);

    let answer = harness.run(&agent(), "go".to_owned(), &ctx).await.unwrap();

    assert_eq!(answer, "done");
    assert_eq!(model.request_count(), 3);
    let kinds: Vec<String> = ctx
        .items()
        .iter()
        .map(|item| item.item_type().to_owned())
        .collect();
    assert_eq!(
        kinds,
        [
            "message",
            "function_call",
            "function_call_output",
            "function_call",
            "function_call_output",
            "message"
        ]
    );
    let meta = ctx.last_step_meta().unwrap();
    assert_eq!(meta.tool_calls.len(), 2);
    assert!(!meta.ended_with_tool_calls);
    assert_eq!(
        meta.response_items.len(),
        5,
        "everything after the user message"
    );
    assert_eq!(model.requests()[2].tool_outputs().len(), 2);
}

struct Gate {
    decision: LayerDecision,
}

impl ContextLayer for Gate {
    fn id(&self) -> &str {
        "gate"
    }

    fn before_tool_call<'a>(
        &'a self,
        _ctx: noetic_core::LayerCtx<'a>,
        call: ToolCallView<'a>,
    ) -> BoxFuture<'a, LayerDecision> {
        let decision = if call.name == "gated" {
            self.decision.clone()
        } else {
            LayerDecision::Allow
        };
        Box::pin(async move { decision })
    }
}

async fn tool_outputs_for(
    call: (&str, &str, serde_json::Value),
    layer: Option<LayerDecision>,
) -> (String, bool, String) {
    let failing = Tool::new(
        "failing",
        "fails",
        |_args: support::SearchArgs, _ctx: ToolContext| async move {
            Err::<String, _>(ToolError::new("the index is offline"))
        },
    );
    let panicking = Tool::new(
        "panicking",
        "panics",
        |_args: support::SearchArgs, _ctx: ToolContext| async move {
            if true {
                panic!("tool bug");
            }
            Ok::<String, ToolError>(String::new())
        },
    );
    let gated = Tool::new(
        "gated",
        "gated",
        |_args: support::SearchArgs, _ctx: ToolContext| async move {
            Ok::<_, ToolError>("ran".to_owned())
        },
    );
    let model = ScriptedModel::with_responses([
        ScriptedResponse::tool_call(call.0, call.1, call.2),
        ScriptedResponse::text("recovered"),
    ]);
    let mut builder = harness_with("test", &model);
    if let Some(decision) = layer {
        builder = builder.context_layers([Arc::new(Gate { decision }) as Arc<dyn ContextLayer>]);
    }
    let harness = builder.build().unwrap();
    let log = noetic_test_support::EventLog::new();
    let ctx = harness.create_context(ContextOptions::new().event_sink(log.sink()));
    let step = call_model("llm")
        .model("m")
        .tool(search_tool())
        .tool(failing)
        .tool(panicking)
        .tool(gated)
        .build();

    let answer = harness
        .run(&step, "go".to_owned(), &ctx)
        .await
        .expect("a tool failure never fails the step");

    let sent = model.requests()[1].tool_outputs();
    assert_eq!(sent.len(), 1);
    let completed = log
        .framework()
        .into_iter()
        .find_map(|event| match event {
            FrameworkEvent::ToolCallCompleted { error, output, .. } => Some((error, output)),
            _ => None,
        })
        .expect("tool_call_completed emitted");
    assert_eq!(completed.1, sent[0], "the event carries what the model saw");
    (sent[0].clone(), completed.0, answer)
}

#[tokio::test]
async fn every_tool_failure_goes_back_to_the_model_as_output() {
    let cases = [
        (
            ("c", "search", json!("{not json")),
            None,
            "Error: malformed JSON in tool arguments: {not json",
        ),
        (("c", "nope", json!({})), None, "Error: unknown tool 'nope'"),
        (
            ("c", "search", json!({"q": 1})),
            None,
            "Error: invalid arguments for tool 'search': ",
        ),
        (
            ("c", "failing", json!({"query": "x"})),
            None,
            "Error: the index is offline",
        ),
        (
            ("c", "panicking", json!({"query": "x"})),
            None,
            "Error: tool 'panicking' panicked: tool bug",
        ),
        (
            ("c", "gated", json!({"query": "x"})),
            Some(LayerDecision::Deny {
                guidance: Some("not on weekends".to_owned()),
            }),
            "Tool call denied: not on weekends",
        ),
        (
            ("c", "gated", json!({"query": "x"})),
            Some(LayerDecision::Deny { guidance: None }),
            "Tool call denied: steering rule violation",
        ),
        (
            ("c", "gated", json!({"query": "x"})),
            Some(LayerDecision::Guide {
                guidance: "use search instead".to_owned(),
            }),
            "Tool call redirected: use search instead",
        ),
    ];
    for (call, layer, expected) in cases {
        let (output, error, answer) = tool_outputs_for(call, layer).await;
        assert!(
            output.starts_with(expected),
            "{output:?} should start with {expected:?}"
        );
        assert!(error, "{expected}: tool_call_completed.error must be true");
        assert_eq!(answer, "recovered");
    }
    let (output, error, _) = tool_outputs_for(("c", "gated", json!({"query": "x"})), None).await;
    assert_eq!(output, "ran");
    assert!(!error);
}

#[tokio::test]
async fn invalid_arguments_name_the_violation() {
    let (output, _, _) = tool_outputs_for(("c", "search", json!({"query": 7})), None).await;
    assert!(
        output.contains("7") && output.contains("string"),
        "{output}"
    );
}

#[tokio::test]
async fn thirty_two_tool_rounds_then_three_recovery_rounds_then_tool_round_limit() {
    let model = ScriptedModel::responding(|request| {
        ScriptedResponse::tool_call(
            &format!("call_{}", request.round),
            "search",
            json!({"query": "again"}),
        )
    });
    let (harness, ctx, log) = setup(&model);
    let step = call_model("llm").model("m").tool(search_tool()).build();

    let error = harness
        .run(&step, "loop forever".to_owned(), &ctx)
        .await
        .unwrap_err();

    assert_eq!(error.code(), "TOOL_ROUND_LIMIT");
    assert!(matches!(
        error,
        Error::ToolRoundLimit { max_rounds: 32, .. }
    ));
    let requests = model.requests();
    assert_eq!(
        requests.len(),
        32 + 3,
        "32 tool rounds and 3 recovery rounds"
    );
    for (index, request) in requests.iter().enumerate() {
        let carries_continue = request.user_texts().last().map(String::as_str) == Some("continue");
        assert_eq!(carries_continue, index >= 32, "request {index}");
        assert_eq!(
            request
                .user_texts()
                .iter()
                .filter(|text| *text == "continue")
                .count(),
            usize::from(index >= 32)
        );
    }
    assert!(
        ctx.items()
            .iter()
            .all(|item| item.text().as_deref() != Some("continue")),
        "continue is never stored"
    );
    let calls_run = ctx
        .items()
        .iter()
        .filter(|item| item.item_type() == "function_call_output")
        .count();
    assert_eq!(calls_run, 32, "calls past the cap never run");
    let attempts: Vec<u32> = log
        .framework()
        .into_iter()
        .filter_map(|event| match event {
            FrameworkEvent::ToolRoundLimitExceeded { attempt, .. } => Some(attempt),
            _ => None,
        })
        .collect();
    assert_eq!(attempts, [1, 2, 3]);
    assert_eq!(ctx.tokens().input_tokens, 35 * 10, "every round is charged");
}

#[tokio::test]
async fn a_model_that_stops_calling_tools_in_a_recovery_round_finishes() {
    let model = ScriptedModel::responding(|request| {
        if request.round < 32 {
            ScriptedResponse::tool_call(
                &format!("call_{}", request.round),
                "search",
                json!({"query": "x"}),
            )
        } else {
            ScriptedResponse::text("finally")
        }
    });
    let (harness, ctx, _log) = setup(&model);
    let step = call_model("llm").model("m").tool(search_tool()).build();

    assert_eq!(
        harness.run(&step, "go".to_owned(), &ctx).await.unwrap(),
        "finally"
    );
    assert_eq!(model.request_count(), 33);
}

#[tokio::test]
async fn an_incomplete_response_is_recovered_with_an_ephemeral_continue() {
    let model = ScriptedModel::with_responses([
        ScriptedResponse::incomplete("max_output_tokens"),
        ScriptedResponse::text("complete answer"),
    ]);
    let (harness, ctx, log) = setup(&model);
    let step = call_model("llm").model("m").build();

    let answer = harness
        .run(&step, "question".to_owned(), &ctx)
        .await
        .unwrap();

    assert_eq!(answer, "complete answer");
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].user_texts(), ["question"]);
    assert_eq!(requests[1].user_texts(), ["question", "continue"]);
    let texts: Vec<String> = ctx.items().iter().filter_map(Item::text).collect();
    assert_eq!(
        texts,
        ["question", "complete answer"],
        "neither the partial answer nor continue is stored"
    );
    assert_eq!(
        ctx.tokens().input_tokens,
        20,
        "the discarded round is still charged"
    );
    let types = log.framework_types();
    assert!(types.contains(&"model_call_failed"));
    assert!(types.contains(&"model_call_recovery_continue"));
}

#[tokio::test]
async fn an_empty_completed_response_gets_exactly_one_recovery_round() {
    let model =
        ScriptedModel::with_responses([ScriptedResponse::empty(), ScriptedResponse::text("ok")]);
    let (harness, ctx, _log) = setup(&model);
    let step = call_model("llm").model("m").build();

    assert_eq!(
        harness.run(&step, "q".to_owned(), &ctx).await.unwrap(),
        "ok"
    );
    assert_eq!(model.request_count(), 2);
}

#[tokio::test]
async fn three_failed_recoveries_fail_the_step_with_model_call_failed() {
    let model = ScriptedModel::responding(|_| ScriptedResponse::incomplete("content_filter"));
    let (harness, ctx, _log) = setup(&model);
    let step = call_model("llm").model("m").build();

    let error = harness.run(&step, "q".to_owned(), &ctx).await.unwrap_err();

    assert_eq!(error.code(), "MODEL_CALL_FAILED");
    assert!(error.to_string().contains("content_filter"), "{error}");
    assert_eq!(
        model.request_count(),
        4,
        "the first round and three recoveries"
    );
}

#[tokio::test]
async fn a_refusal_fails_the_step_at_once_without_recovery_rounds() {
    let model = ScriptedModel::responding(|_| ScriptedResponse::incomplete("refusal"));
    let (harness, ctx, _log) = setup(&model);
    let step = call_model("llm").model("m").build();

    let error = harness.run(&step, "q".to_owned(), &ctx).await.unwrap_err();

    assert_eq!(error.code(), "MODEL_CALL_FAILED");
    assert!(error.to_string().contains("refusal"), "{error}");
    assert_eq!(
        model.request_count(),
        1,
        "asking to continue cannot change a refusal"
    );
}

#[tokio::test]
async fn a_paused_round_is_kept_and_the_request_repeated_without_continue() {
    let paused = ScriptedResponse::events(vec![
        ResponseEvent::OutputItemDone {
            output_index: 0,
            item: Item::Other(
                json!({"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "x"}}),
            ),
        },
        ResponseEvent::Finished(Box::new(noetic_core::model::ResponseSnapshot {
            status: Some(noetic_core::model::ResponseStatus::Incomplete),
            incomplete_reason: Some("pause_turn".to_owned()),
            ..Default::default()
        })),
    ]);
    let model = ScriptedModel::with_responses([paused, ScriptedResponse::text("found it")]);
    let (harness, ctx, _log) = setup(&model);
    let step = call_model("llm").model("m").build();

    let answer = harness.run(&step, "q".to_owned(), &ctx).await.unwrap();

    assert_eq!(answer, "found it");
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[1].user_texts(), ["q"], "no continue message");
    assert!(
        matches!(requests[1].input.last(), Some(Item::Other(block)) if block["type"] == "server_tool_use"),
        "the paused output is sent back as it is: {:?}",
        requests[1].input
    );
    assert!(
        ctx.items()
            .iter()
            .any(|item| matches!(item, Item::Other(_))),
        "and kept in the log"
    );
}

fn stalled_model() -> ScriptedModel {
    ScriptedModel::with_responses([ScriptedResponse::stall_after(vec![
        ResponseEvent::Created {
            response_id: None,
            model: None,
        },
    ])])
}

#[tokio::test(start_paused = true)]
async fn the_idle_watchdog_fails_a_silent_stream_with_the_documented_reason() {
    let model = stalled_model();
    let (harness, ctx, log) = setup(&model);
    let step = call_model("llm").model("m").build();
    let started = tokio::time::Instant::now();

    let error = harness.run(&step, "q".to_owned(), &ctx).await.unwrap_err();

    assert_eq!(error.code(), "MODEL_STREAM_STALLED");
    assert_eq!(
        error.to_string(),
        "model stream idle timeout after 120000ms"
    );
    assert_eq!(started.elapsed(), Duration::from_secs(120));
    let stalled = log
        .framework()
        .into_iter()
        .find(|event| matches!(event, FrameworkEvent::ModelCallStalled { .. }));
    assert_eq!(
        stalled,
        Some(FrameworkEvent::ModelCallStalled {
            round: 0,
            idle_timeout_ms: 120_000
        })
    );
}

#[tokio::test(start_paused = true)]
async fn the_idle_timeout_is_configurable_per_harness_and_per_step() {
    let model = stalled_model();
    let harness = harness_with("test", &model)
        .idle_timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let ctx = harness.create_context(ContextOptions::new());
    let error = harness
        .run(&call_model("llm").model("m").build(), "q".to_owned(), &ctx)
        .await
        .unwrap_err();
    assert_eq!(error.to_string(), "model stream idle timeout after 30000ms");

    let model = stalled_model();
    let (harness, ctx, _) = setup(&model);
    let step = call_model("llm")
        .model("m")
        .idle_timeout(Duration::from_millis(1500))
        .build();
    let error = harness.run(&step, "q".to_owned(), &ctx).await.unwrap_err();
    assert_eq!(error.to_string(), "model stream idle timeout after 1500ms");
}

#[tokio::test(start_paused = true)]
async fn the_watchdog_re_arms_on_every_event() {
    let (model, events) = ChannelModel::new();
    let harness = noetic_core::AgentHarness::builder("test")
        .provider("channel", model)
        .build()
        .unwrap();
    let ctx = harness.create_context(ContextOptions::new());
    let step = call_model("llm").model("m").build();
    let run = tokio::spawn({
        let harness = harness.clone();
        let ctx = ctx.clone();
        async move { harness.run(&step, "q".to_owned(), &ctx).await }
    });
    // Events 100 s apart: slow but alive, 300 s in all, never 120 s of silence.
    for delta in ["a", "b", "c"] {
        tokio::time::sleep(Duration::from_secs(100)).await;
        events
            .send(Ok(ResponseEvent::OutputTextDelta {
                output_index: 0,
                content_index: 0,
                delta: delta.to_owned(),
            }))
            .unwrap();
    }
    tokio::time::sleep(Duration::from_secs(100)).await;
    for event in ScriptedResponse::text("abc").into_events() {
        events.send(Ok(event)).unwrap();
    }
    assert_eq!(run.await.unwrap().unwrap(), "abc");
}

#[tokio::test(start_paused = true)]
async fn aborting_the_context_cuts_a_running_stream() {
    let model = stalled_model();
    let (harness, ctx, _log) = setup(&model);
    let step = call_model("llm").model("m").build();
    let run = tokio::spawn({
        let harness = harness.clone();
        let ctx = ctx.clone();
        async move { harness.run(&step, "q".to_owned(), &ctx).await }
    });
    tokio::time::sleep(Duration::from_secs(5)).await;
    ctx.abort(Some("user pressed stop".to_owned()));
    let error = run.await.unwrap().unwrap_err();
    assert_eq!(error.code(), "CANCELLED");
    assert_eq!(error.to_string(), "cancelled: user pressed stop");
}

#[tokio::test]
async fn usage_sums_across_rounds_and_cached_stays_absent_when_never_reported() {
    let model = ScriptedModel::with_responses([
        ScriptedResponse::tool_call("c1", "search", json!({"query": "x"})),
        ScriptedResponse::text("done"),
    ]);
    let (harness, ctx, _log) = setup(&model);
    harness.run(&agent(), "q".to_owned(), &ctx).await.unwrap();
    let tokens = ctx.tokens();
    assert_eq!((tokens.input_tokens, tokens.output_tokens), (20, 10));
    assert_eq!(tokens.cached_tokens, None);
    assert_eq!(ctx.cost(), None);
    assert_eq!(ctx.last_step_meta().unwrap().usage, tokens);
}

#[tokio::test]
async fn cached_tokens_and_cost_add_up_when_reported() {
    let reported = |cached| TokenUsage {
        input_tokens: 100,
        output_tokens: 10,
        cached_tokens: cached,
        cache_write_tokens: None,
        reasoning_tokens: None,
    };
    let model = ScriptedModel::with_responses([
        ScriptedResponse::tool_call("c1", "search", json!({"query": "x"}))
            .with_usage(reported(Some(4)), Some(0.25)),
        ScriptedResponse::tool_call("c2", "search", json!({"query": "y"}))
            .with_usage(reported(None), None),
        ScriptedResponse::text("done").with_usage(reported(Some(6)), Some(0.5)),
    ]);
    let (harness, ctx, _log) = setup(&model);
    let child = harness.create_context(ContextOptions::new().parent(&ctx));
    let step = call_model("llm").model("m").tool(search_tool()).build();
    harness.run(&step, "q".to_owned(), &child).await.unwrap();
    for context in [&child, &ctx] {
        let tokens = context.tokens();
        assert_eq!(
            (
                tokens.input_tokens,
                tokens.output_tokens,
                tokens.cached_tokens
            ),
            (300, 30, Some(10))
        );
        assert_eq!(context.cost(), Some(0.75));
    }
}

#[tokio::test]
async fn a_reported_zero_cached_count_stays_zero() {
    let usage = TokenUsage {
        input_tokens: 5,
        output_tokens: 1,
        cached_tokens: Some(0),
        cache_write_tokens: None,
        reasoning_tokens: None,
    };
    let model =
        ScriptedModel::with_responses([ScriptedResponse::text("ok").with_usage(usage, None)]);
    let (harness, ctx, _log) = setup(&model);
    harness
        .run(&call_model("llm").model("m").build(), "q".to_owned(), &ctx)
        .await
        .unwrap();
    assert_eq!(ctx.tokens().cached_tokens, Some(0));
}

#[derive(Debug, serde::Deserialize, serde::Serialize, schemars::JsonSchema, PartialEq)]
struct Verdict {
    approved: bool,
    reason: String,
}

#[tokio::test]
async fn structured_output_is_parsed_into_the_requested_type() {
    let model = ScriptedModel::with_responses([ScriptedResponse::text(
        r#"{"approved":true,"reason":"fine"}"#,
    )]);
    let (harness, ctx, _log) = setup(&model);
    let step = call_model("judge").model("m").output::<Verdict>().build();
    let verdict = harness
        .run(&step, "judge this".to_owned(), &ctx)
        .await
        .unwrap();
    assert_eq!(
        verdict,
        Verdict {
            approved: true,
            reason: "fine".to_owned()
        }
    );
    assert!(model.requests()[0].has_output_format);
}

#[tokio::test]
async fn unparseable_structured_output_is_a_model_parse_error_with_the_raw_text() {
    let model = ScriptedModel::with_responses([ScriptedResponse::text("yes, approved")]);
    let (harness, ctx, _log) = setup(&model);
    let step = call_model("judge").model("m").output::<Verdict>().build();
    let error = harness
        .run(&step, "judge this".to_owned(), &ctx)
        .await
        .unwrap_err();
    assert_eq!(error.code(), "MODEL_PARSE_ERROR");
    match error {
        Error::ModelParseError { step_id, raw, .. } => {
            assert_eq!(step_id, "judge");
            assert_eq!(raw, "yes, approved");
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn tool_concurrency_runs_calls_together_and_records_them_in_call_order() {
    let running = Arc::new(AtomicUsize::new(0));
    let barrier = Arc::new(tokio::sync::Barrier::new(2));
    let tool = {
        let running = running.clone();
        Tool::new(
            "slow",
            "waits for its sibling",
            move |args: support::SearchArgs, _ctx: ToolContext| {
                let running = running.clone();
                let barrier = barrier.clone();
                async move {
                    running.fetch_add(1, Ordering::SeqCst);
                    // Both calls must be in flight at once to get past the barrier.
                    barrier.wait().await;
                    Ok::<_, ToolError>(args.query)
                }
            },
        )
    };
    let model = ScriptedModel::with_responses([
        ScriptedResponse::tool_calls(&[
            ("c1", "slow", json!({"query": "first"})),
            ("c2", "slow", json!({"query": "second"})),
        ]),
        ScriptedResponse::text("both done"),
    ]);
    let (harness, ctx, _log) = setup(&model);
    let step = call_model("llm")
        .model("m")
        .tool(tool)
        .tool_concurrency(2)
        .build();
    assert_eq!(
        harness.run(&step, "go".to_owned(), &ctx).await.unwrap(),
        "both done"
    );
    assert_eq!(running.load(Ordering::SeqCst), 2);
    assert_eq!(model.requests()[1].tool_outputs(), ["first", "second"]);
}

#[tokio::test]
async fn tool_calls_run_in_emitted_order_by_default() {
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let tool = {
        let order = order.clone();
        Tool::new(
            "record",
            "records",
            move |args: support::SearchArgs, _ctx: ToolContext| {
                let order = order.clone();
                async move {
                    order.lock().unwrap().push(args.query.clone());
                    Ok::<_, ToolError>(args.query)
                }
            },
        )
    };
    let model = ScriptedModel::with_responses([
        ScriptedResponse::tool_calls(&[
            ("c1", "record", json!({"query": "a"})),
            ("c2", "record", json!({"query": "b"})),
            ("c3", "record", json!({"query": "c"})),
        ]),
        ScriptedResponse::text("ok"),
    ]);
    let (harness, ctx, _log) = setup(&model);
    harness
        .run(
            &call_model("llm").model("m").tool(tool).build(),
            "go".to_owned(),
            &ctx,
        )
        .await
        .unwrap();
    assert_eq!(*order.lock().unwrap(), ["a", "b", "c"]);
}

#[tokio::test]
async fn no_provider_is_no_llm_provider_with_a_hint_naming_the_env_var() {
    let harness = noetic_core::AgentHarness::builder("bare").build().unwrap();
    let ctx = harness.create_context(ContextOptions::new());
    let error = harness
        .run(
            &call_model("llm").model("openai/gpt-4o").build(),
            "q".to_owned(),
            &ctx,
        )
        .await
        .unwrap_err();
    assert_eq!(error.code(), "NO_LLM_PROVIDER");
    assert!(error.to_string().contains("OPENROUTER_API_KEY"), "{error}");
}

#[tokio::test]
async fn a_provider_error_fails_the_step_with_its_status_and_round() {
    let model = ScriptedModel::with_responses([ScriptedResponse::provider_error(
        Some(401),
        "invalid api key",
    )]);
    let (harness, ctx, _log) = setup(&model);
    let error = harness
        .run(&call_model("llm").model("m").build(), "q".to_owned(), &ctx)
        .await
        .unwrap_err();
    assert_eq!(error.code(), "PROVIDER_ERROR");
    assert!(
        matches!(
            error,
            Error::Provider {
                status: Some(401),
                round: Some(0),
                ..
            }
        ),
        "{error:?}"
    );
}

#[tokio::test]
async fn a_stream_without_a_terminal_event_is_an_error() {
    let mut events = ScriptedResponse::text("cut short").into_events();
    events.pop();
    let model = ScriptedModel::with_responses([ScriptedResponse::events(events)]);
    let (harness, ctx, _log) = setup(&model);
    let error = harness
        .run(&call_model("llm").model("m").build(), "q".to_owned(), &ctx)
        .await
        .unwrap_err();
    assert_eq!(error.code(), "PROVIDER_ERROR");
    assert!(
        error.to_string().contains("without a terminal event"),
        "{error}"
    );
}

#[tokio::test]
async fn system_items_join_the_instructions_and_leave_the_input() {
    let model = ScriptedModel::with_responses([ScriptedResponse::text("ok")]);
    let harness = harness_with("test", &model).build().unwrap();
    let ctx = harness
        .create_context(ContextOptions::new().items(vec![Item::system_text("Answer in French.")]));
    let step = call_model("llm")
        .model("m")
        .instructions("Be brief.")
        .build();
    harness.run(&step, "hello".to_owned(), &ctx).await.unwrap();
    let request = &model.requests()[0];
    assert_eq!(
        request.instructions.as_deref(),
        Some("Be brief.\n\nAnswer in French.")
    );
    assert!(
        request
            .input
            .iter()
            .all(|item| item.role() != Some(Role::System))
    );
}

#[tokio::test]
async fn an_empty_input_appends_no_user_message() {
    let model = ScriptedModel::with_responses([ScriptedResponse::text("ok")]);
    let harness = harness_with("test", &model).build().unwrap();
    let ctx = harness.create_context(ContextOptions::new().items(vec![Item::user_text("seeded")]));
    harness
        .run(&call_model("llm").model("m").build(), String::new(), &ctx)
        .await
        .unwrap();
    assert_eq!(model.requests()[0].user_texts(), ["seeded"]);
}

#[tokio::test]
async fn events_of_a_tool_round_come_in_order_and_provider_events_pass_through() {
    let model = ScriptedModel::with_responses([
        ScriptedResponse::tool_call("c1", "search", json!({"query": "x"})),
        ScriptedResponse::text("done"),
    ]);
    let (harness, ctx, log) = setup(&model);
    harness
        .run(
            &call_model("llm").model("m").tool(search_tool()).build(),
            "q".to_owned(),
            &ctx,
        )
        .await
        .unwrap();
    let types = log.framework_types();
    assert_eq!(
        types,
        [
            "step_started",
            "item_appended",
            "model_call_started",
            "model_call_first_event",
            "model_call_completed",
            "item_appended",
            "tool_round_started",
            "tool_call_started",
            "item_appended",
            "tool_call_completed",
            "tool_round_completed",
            "model_call_started",
            "model_call_first_event",
            "model_call_completed",
            "item_appended",
            "step_completed",
        ]
    );
    let sdk = log.sdk_types();
    assert!(
        sdk.iter()
            .any(|t| t == "response.function_call_arguments.delta")
    );
    assert!(sdk.iter().any(|t| t == "response.output_text.delta"));
    assert_eq!(sdk.iter().filter(|t| *t == "response.completed").count(), 2);
}

#[tokio::test]
async fn emit_false_silences_step_and_model_events_but_not_items() {
    let model = ScriptedModel::with_responses([ScriptedResponse::text("ok")]);
    let (harness, ctx, log) = setup(&model);
    harness
        .run(
            &call_model("llm").model("m").emit(false).build(),
            "q".to_owned(),
            &ctx,
        )
        .await
        .unwrap();
    assert_eq!(log.framework_types(), ["item_appended", "item_appended"]);
    assert!(!log.sdk_types().is_empty());
}

#[tokio::test]
async fn emit_filter_passes_only_the_event_kinds_it_accepts_and_always_items() {
    let model = ScriptedModel::with_responses([
        ScriptedResponse::tool_call("c1", "search", json!({"query": "x"})),
        ScriptedResponse::text("done"),
    ]);
    let (harness, ctx, log) = setup(&model);
    let keep = [
        FrameworkEventKind::StepStarted,
        FrameworkEventKind::ToolCallCompleted,
    ];
    harness
        .run(
            &call_model("llm")
                .model("m")
                .tool(search_tool())
                .emit_filter(move |kind| keep.contains(&kind))
                .build(),
            "q".to_owned(),
            &ctx,
        )
        .await
        .unwrap();
    assert_eq!(
        log.framework_types(),
        [
            "step_started",
            "item_appended",
            "item_appended",
            "item_appended",
            "tool_call_completed",
            "item_appended",
        ]
    );
    // Every kind names itself as its events' JSON type does, and parses back from that name.
    for kind in FrameworkEventKind::ALL {
        assert_eq!(FrameworkEventKind::from_name(kind.as_str()), Some(*kind));
    }
    assert_eq!(FrameworkEventKind::from_name("no_such_event"), None);
}

/// A stream naming an absurd output or content index fails its round with `PROVIDER_ERROR` naming
/// the index, instead of allocating a slot per index (which aborted the process).
#[tokio::test]
async fn an_absurd_output_or_content_index_fails_the_round_without_allocating_by_it() {
    for (what, output_index, content_index) in [
        ("output_index", u32::MAX, 0),
        ("content_index", 0, u32::MAX),
    ] {
        let mut events = ScriptedResponse::text("hello").into_events();
        let at = events
            .iter()
            .position(|event| matches!(event, ResponseEvent::Finished(_)))
            .unwrap();
        events.insert(
            at,
            ResponseEvent::OutputTextDelta {
                output_index,
                content_index,
                delta: "x".to_owned(),
            },
        );
        let model = ScriptedModel::with_responses([ScriptedResponse::events(events)]);
        let (harness, ctx, _log) = setup(&model);
        let step = call_model("answer").model("scripted/model").build();
        let error = harness.run(&step, "Hi".to_owned(), &ctx).await.unwrap_err();
        assert_eq!(error.code(), "PROVIDER_ERROR", "{what}: {error}");
        assert!(
            error.to_string().contains(&format!("{what} {}", u32::MAX)),
            "{what}: {error}"
        );
        assert_eq!(
            model.requests().len(),
            1,
            "{what}: a malformed stream is not retried"
        );
    }
}

#[tokio::test]
async fn one_step_run_on_two_harnesses_offers_each_its_own_runtime_tools() {
    // The step keeps its tool specs between runs; a runtime with other tools must not see them.
    let named = |name: &'static str| {
        Tool::new(
            name,
            "A runtime tool",
            |args: serde_json::Value, _ctx: ToolContext| async move { Ok(args) },
        )
    };
    let step = call_model("answer")
        .model("openai/gpt-4o")
        .tool(search_tool())
        .build();
    let model = ScriptedModel::responding(|_| ScriptedResponse::text("done"));
    let first = harness_with("first", &model)
        .tool(named("alpha"))
        .build()
        .unwrap();
    let second = harness_with("second", &model)
        .tool(named("beta"))
        .build()
        .unwrap();
    for harness in [&first, &second, &first] {
        let ctx = harness.create_context(ContextOptions::new());
        harness.run(&step, "hi".to_owned(), &ctx).await.unwrap();
    }
    let offered: Vec<Vec<String>> = model.requests().into_iter().map(|r| r.tools).collect();
    assert_eq!(
        offered,
        [
            vec!["search".to_owned(), "alpha".to_owned()],
            vec!["search".to_owned(), "beta".to_owned()],
            vec!["search".to_owned(), "alpha".to_owned()],
        ]
    );
}
