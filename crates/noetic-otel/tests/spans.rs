//! noetic's spans as OpenTelemetry exports them (through `tracing-opentelemetry`, to the SDK's
//! in-memory exporter): the tree, the GenAI attributes, errors, and no secret anywhere.

use std::sync::Arc;

use noetic_core::workflow::WorkflowRegistry;
use noetic_core::{
    AgentHarness, CallModelDefaults, Context, ContextOptions, Error, TokenUsage, Tool, ToolContext,
    ToolError, call_model, create_span, run_code, sequence, spawn,
};
use noetic_providers::{OpenResponses, RetryConfig};
use noetic_test_support::{MockReply, MockServer, ScriptedModel, ScriptedResponse};
use opentelemetry::trace::{SpanId, Status};
use opentelemetry_sdk::trace::SpanData;
use serde_json::{Value, json};

mod support;

use support::{attr, export, export_and_log, named, one};

fn parent_of<'a>(spans: &'a [SpanData], span: &SpanData) -> Option<&'a SpanData> {
    (span.parent_span_id != SpanId::INVALID)
        .then(|| {
            spans
                .iter()
                .find(|candidate| candidate.span_context.span_id() == span.parent_span_id)
        })
        .flatten()
}

fn search_tool() -> Tool {
    Tool::new(
        "search",
        "Searches",
        |args: Value, _ctx: ToolContext| async move {
            let _user = create_span("rank results").entered();
            Ok::<_, ToolError>(json!({"found": args["q"]}))
        },
    )
}

#[tokio::test]
async fn a_two_round_tool_turn_exports_the_span_tree_with_gen_ai_attributes() {
    let model = ScriptedModel::with_responses([
        ScriptedResponse::tool_call("call_1", "search", json!({"q": "rust"})).with_usage(
            TokenUsage {
                input_tokens: 100,
                output_tokens: 7,
                cached_tokens: Some(60),
                ..TokenUsage::default()
            },
            Some(0.002),
        ),
        ScriptedResponse::text("Rust is a language.").with_usage(
            TokenUsage {
                input_tokens: 130,
                output_tokens: 9,
                ..TokenUsage::default()
            },
            None,
        ),
    ]);
    let agent = call_model("researcher")
        .model("gpt-test")
        .tool(search_tool())
        .build();
    let harness = AgentHarness::builder("research-bot")
        .provider("scripted", model)
        .build()
        .expect("harness");
    let spans = export(async {
        let mut options = ContextOptions::new();
        options.thread_id = Some("thread-7".to_owned());
        let ctx = harness.create_context(options);
        let answer = harness
            .run(&agent, "Tell me about Rust".to_owned(), &ctx)
            .await
            .expect("runs");
        assert_eq!(answer, "Rust is a language.");
    })
    .await;

    let root = one(&spans, "invoke_agent research-bot");
    assert_eq!(parent_of(&spans, root).map(|span| span.name.clone()), None);
    assert_eq!(
        attr(root, "gen_ai.operation.name").as_deref(),
        Some("invoke_agent")
    );
    assert_eq!(
        attr(root, "gen_ai.agent.name").as_deref(),
        Some("research-bot")
    );
    assert_eq!(
        attr(root, "gen_ai.conversation.id").as_deref(),
        Some("thread-7")
    );
    assert!(attr(root, "noetic.execution.id").is_some());

    let step = one(&spans, "step researcher");
    assert_eq!(
        parent_of(&spans, step).map(|span| &span.name),
        Some(&root.name)
    );
    assert_eq!(
        attr(step, "noetic.step.kind").as_deref(),
        Some("call_model")
    );

    let rounds = named(&spans, "chat gpt-test");
    assert_eq!(rounds.len(), 2);
    for round in &rounds {
        assert_eq!(
            parent_of(&spans, round).map(|span| &span.name),
            Some(&step.name)
        );
        assert_eq!(round.span_kind, opentelemetry::trace::SpanKind::Client);
        assert_eq!(
            attr(round, "gen_ai.operation.name").as_deref(),
            Some("chat")
        );
        assert_eq!(
            attr(round, "gen_ai.provider.name").as_deref(),
            Some("scripted")
        );
        assert_eq!(
            attr(round, "gen_ai.request.model").as_deref(),
            Some("gpt-test")
        );
        assert_eq!(round.status, Status::Unset);
    }
    let mut rounds = rounds;
    rounds.sort_by_key(|span| span.start_time);
    let (first, second) = (rounds[0], rounds[1]);
    let number = |span: &SpanData| attr(span, "noetic.round").and_then(|n| n.parse::<u32>().ok());
    assert_eq!(
        number(second),
        number(first).map(|n| n + 1),
        "rounds are numbered"
    );
    assert_eq!(
        attr(first, "gen_ai.usage.input_tokens").as_deref(),
        Some("100")
    );
    assert_eq!(
        attr(first, "gen_ai.usage.output_tokens").as_deref(),
        Some("7")
    );
    assert_eq!(
        attr(first, "gen_ai.usage.cache_read.input_tokens").as_deref(),
        Some("60")
    );
    assert_eq!(
        attr(first, "gen_ai.response.finish_reasons").as_deref(),
        Some("tool_calls")
    );
    assert_eq!(attr(first, "noetic.cost").as_deref(), Some("0.002"));
    assert_eq!(
        attr(second, "gen_ai.usage.input_tokens").as_deref(),
        Some("130")
    );
    assert_eq!(
        attr(second, "gen_ai.usage.cache_read.input_tokens"),
        None,
        "cached tokens only when reported"
    );
    assert_eq!(
        attr(second, "gen_ai.response.finish_reasons").as_deref(),
        Some("stop")
    );

    let tool = one(&spans, "execute_tool search");
    assert_eq!(
        parent_of(&spans, tool).map(|span| &span.name),
        Some(&step.name)
    );
    assert_eq!(attr(tool, "gen_ai.tool.name").as_deref(), Some("search"));
    assert_eq!(attr(tool, "gen_ai.tool.call.id").as_deref(), Some("call_1"));
    let user = one(&spans, "rank results");
    assert_eq!(
        parent_of(&spans, user).map(|span| &span.name),
        Some(&tool.name)
    );
    // No content is captured: neither the prompt nor the answer nor the tool's arguments.
    for span in &spans {
        for kv in &span.attributes {
            let value = kv.value.as_str();
            assert!(
                !value.contains("Tell me about Rust") && !value.contains("Rust is a language"),
                "{}: {} = {value}",
                span.name,
                kv.key
            );
        }
    }
}

const KEY: &str = "sk-otel-test-7d1e9b2f4a6c8e0";

#[tokio::test]
async fn a_401_round_ends_its_span_with_provider_error_and_no_secret_is_exported() {
    let server = MockServer::start().await;
    server.push(MockReply::json(
        401,
        json!({"error": {"message": format!("Incorrect API key provided: {KEY}."), "type": "invalid_request_error"}}),
    ));
    let provider = OpenResponses::builder(server.base_url())
        .api_key(KEY)
        .retry(RetryConfig::none())
        .build()
        .expect("provider");
    let harness = AgentHarness::builder("keyed")
        .provider("responses", provider)
        .call_model_defaults(CallModelDefaults::default().provider("responses"))
        .build()
        .expect("harness");
    let agent = call_model("ask").model("m-1").build();
    let (spans, log) = export_and_log(async {
        let ctx = harness.create_context(ContextOptions::new());
        let error = harness
            .run(&agent, "hi".to_owned(), &ctx)
            .await
            .expect_err("401");
        assert_eq!(error.code(), "PROVIDER_ERROR");
    })
    .await;
    let round = one(&spans, "chat m-1");
    assert!(
        matches!(round.status, Status::Error { .. }),
        "{:?}",
        round.status
    );
    assert_eq!(attr(round, "error.type").as_deref(), Some("PROVIDER_ERROR"));
    assert_eq!(
        attr(round, "gen_ai.provider.name").as_deref(),
        Some("responses")
    );
    for name in ["step ask", "invoke_agent keyed"] {
        let span = one(&spans, name);
        assert!(matches!(span.status, Status::Error { .. }), "{name}");
        assert_eq!(attr(span, "error.type").as_deref(), Some("PROVIDER_ERROR"));
    }
    // The key is nowhere: names, attributes, events, statuses, and the log output.
    assert!(log.contains("chat"), "the fmt layer saw the spans: {log}");
    assert!(!log.contains(KEY) && !log.contains("sk-otel"), "{log}");
    for span in &spans {
        let everything = format!(
            "{} {:?} {:?} {:?}",
            span.name, span.attributes, span.events.events, span.status
        );
        assert!(!everything.contains(KEY), "{everything}");
        assert!(!everything.contains("sk-otel"), "{everything}");
    }
}

#[tokio::test]
async fn a_spawn_child_s_spans_nest_under_the_spawn_and_a_workflow_has_its_span() {
    let child = sequence("child-body")
        .step(run_code("first", |n: u64, _: Context| async move {
            Ok::<_, Error>(n + 1)
        }))
        .step(run_code("second", |n: u64, _: Context| async move {
            Ok::<_, Error>(n * 2)
        }))
        .build();
    let parent = spawn("delegate", child).build();
    let harness = AgentHarness::builder("nest")
        .workflow_registry(
            WorkflowRegistry::new().code("upper", |text: String, _: Context| async move {
                Ok::<_, Error>(text.to_uppercase())
            }),
        )
        .build()
        .expect("harness");
    let harness = Arc::new(harness);
    let spans = export({
        let harness = harness.clone();
        async move {
            let ctx = harness.create_context(ContextOptions::new());
            assert_eq!(harness.run(&parent, 4, &ctx).await.expect("runs"), 10);
            let document = json!({"version": 1, "root": {"kind": "runCode", "id": "shout", "execute": "upper"}});
            let ctx = harness.create_context(ContextOptions::new());
            let output = harness
                .parse_and_run_workflow(document.to_string().as_str(), json!("hi"), &ctx)
                .await
                .expect("workflow runs");
            assert_eq!(output, json!("HI"));
        }
    })
    .await;
    let spawn_span = one(&spans, "step delegate");
    assert_eq!(
        attr(spawn_span, "noetic.step.kind").as_deref(),
        Some("spawn")
    );
    let body = one(&spans, "step child-body");
    assert_eq!(
        parent_of(&spans, body).map(|span| &span.name),
        Some(&spawn_span.name)
    );
    for leaf in ["step first", "step second"] {
        let span = one(&spans, leaf);
        assert_eq!(
            parent_of(&spans, span).map(|span| &span.name),
            Some(&body.name)
        );
    }
    let workflow = one(&spans, "workflow shout");
    assert_eq!(
        parent_of(&spans, workflow).map(|span| span.name.clone()),
        None
    );
    let agents = named(&spans, "invoke_agent nest");
    assert_eq!(agents.len(), 2);
    assert!(
        agents
            .iter()
            .any(|agent| parent_of(&spans, agent).map(|span| &span.name) == Some(&workflow.name)),
        "the workflow's run is under its span"
    );
    let shout = one(&spans, "step shout");
    assert_eq!(attr(shout, "noetic.step.kind").as_deref(), Some("run_code"));
}
