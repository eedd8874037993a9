//! The original's P0 session scenarios (`reference/runtime-behaviour.md` §10, 1–24), one test each,
//! named after the scenario. Where DESIGN.md overrides the original, the test checks DESIGN's behaviour
//! and says so.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{FutureExt, StreamExt};
use noetic_core::item::{ContentPart, Item};
use noetic_core::{
    AbortOptions, AgentHarness, Context, DeliveryMode, Error, ExecuteOptions, FrameworkEvent,
    ItemSnapshot, Replay, Role, Scope, SessionChunk, SessionStatus, Spend, SteerPoint, StepKind,
    StreamEvent, TokenUsage, call_model, run_code, sequence,
};
use noetic_test_support::{PacedModel, ScriptedModel, ScriptedResponse};
use serde_json::{Map, json};
use tokio::sync::mpsc;

use crate::support::{
    Events, Gate, NoArgs, echo_model, framework, framework_types, guarded, llm_with, paced_builder,
    paced_harness, scripted_harness, text_events, texts, tool_call_events, turn_aborts,
    turn_message_ids, with_id,
};

fn tokens(input: u64, output: u64, cached: Option<u64>) -> TokenUsage {
    TokenUsage {
        input_tokens: input,
        output_tokens: output,
        cached_tokens: cached,
        ..TokenUsage::default()
    }
}

fn on(thread: &str) -> ExecuteOptions {
    ExecuteOptions::default().thread_id(thread)
}

/// A tool (`note`) that answers at once.
fn note_tool() -> noetic_core::Tool {
    noetic_core::Tool::new(
        "note",
        "Takes a note",
        |_: NoArgs, _ctx: noetic_core::ToolContext| async move { Ok("noted".to_owned()) },
    )
}

fn scripted_with_tools(model: &ScriptedModel, tools: Vec<noetic_core::Tool>) -> AgentHarness {
    AgentHarness::builder("agent")
        .provider("scripted", model.clone())
        .agent_graph(llm_with(tools))
        .build()
        .unwrap()
}

#[tokio::test]
async fn scenario_01_execute_without_an_agent_graph_fails_with_no_step_configured() {
    let harness = AgentHarness::builder("agent").build().unwrap();
    let error = harness
        .execute("x", ExecuteOptions::default())
        .await
        .unwrap_err();
    assert_eq!(error.code(), "NO_STEP_CONFIGURED");
    assert_eq!(harness.session_count(), 0, "nothing was queued");
}

#[tokio::test]
async fn scenario_02_a_scripted_answer_gives_text_items_and_usage() {
    let model = echo_model();
    let harness = scripted_harness(&model);
    harness
        .execute("hello", ExecuteOptions::default())
        .await
        .unwrap();
    let response = harness.agent_response(Scope::default()).await.unwrap();
    assert_eq!(response.text, "echo: hello");
    assert_eq!(texts(&response.items), ["hello", "echo: hello"]);
    assert_eq!(response.usage, tokens(10, 5, None));
    assert_eq!(response.cost, None);
}

#[tokio::test]
async fn scenario_03_items_are_the_turn_input_verbatim() {
    let model = echo_model();
    let harness = scripted_harness(&model);
    let mut image = Map::new();
    image.insert("image_url".into(), json!("https://example.com/a.png"));
    let one = with_id(
        Item::message(
            Role::User,
            vec![
                ContentPart::InputText {
                    text: "what is this?".into(),
                },
                ContentPart::InputImage(image),
            ],
        ),
        "item-1",
    );
    let a = Item::developer_text("be terse");
    let b = with_id(Item::user_text("second"), "item-b");
    harness
        .execute(one.clone(), ExecuteOptions::default())
        .await
        .unwrap();
    let first = harness.agent_response(Scope::default()).await.unwrap();
    harness
        .execute(vec![a.clone(), b.clone()], ExecuteOptions::default())
        .await
        .unwrap();
    harness.agent_response(Scope::default()).await.unwrap();
    let requests = model.requests();
    assert_eq!(requests[0].input, std::slice::from_ref(&one));
    let mut expected = first.items;
    expected.extend([a, b]);
    assert_eq!(requests[1].input, expected);
    assert_eq!(requests[1].input[0], one);
}

#[tokio::test]
async fn scenario_04_each_thread_gets_its_own_answer() {
    let model = echo_model();
    let harness = scripted_harness(&model);
    harness.execute("from a", on("a")).await.unwrap();
    harness.execute("from b", on("b")).await.unwrap();
    let a = harness.agent_response(Scope::thread("a")).await.unwrap();
    let b = harness.agent_response(Scope::thread("b")).await.unwrap();
    assert_eq!(a.text, "echo: from a");
    assert_eq!(b.text, "echo: from b");
    assert_eq!(texts(&a.items), ["from a", "echo: from a"]);
}

#[tokio::test]
async fn scenario_05_a_next_turn_message_behind_a_blocked_turn_runs_next() {
    let model = PacedModel::new();
    let harness = paced_harness(&model);
    harness
        .execute("one", ExecuteOptions::default())
        .await
        .unwrap();
    let first = guarded("turn 1's request", model.next_call()).await;
    harness
        .execute("two", ExecuteOptions::default())
        .await
        .unwrap();
    assert_eq!(model.call_count(), 1, "turn 2 waits for turn 1");
    first.send_all(text_events("answer one"));
    let second = guarded("turn 2's request", model.next_call()).await;
    assert_eq!(second.request.user_texts(), ["one", "two"]);
    second.send_all(text_events("answer two"));
    let response = harness.agent_response(Scope::default()).await.unwrap();
    assert_eq!(response.text, "answer two");
    assert_eq!(model.call_count(), 2);
}

#[tokio::test]
async fn scenario_06_turn_started_carries_the_custom_message_id() {
    let model = echo_model();
    let harness = scripted_harness(&model);
    let mut events = Events::subscribe(&harness, Scope::default());
    harness
        .execute(
            "hello",
            ExecuteOptions::default().message_id("custom-abc-123"),
        )
        .await
        .unwrap();
    assert_eq!(
        turn_message_ids(&events.turn().await),
        [vec!["custom-abc-123"]]
    );
}

#[tokio::test]
async fn scenario_07_each_model_call_sees_its_turns_resource_id() {
    let model = echo_model();
    let harness = scripted_harness(&model);
    for resource in ["tenant-1", "tenant-2"] {
        harness
            .execute("hi", ExecuteOptions::default().resource_id(resource))
            .await
            .unwrap();
        harness.agent_response(Scope::default()).await.unwrap();
    }
    let seen: Vec<Option<String>> = model
        .requests()
        .into_iter()
        .map(|request| request.resource_id)
        .collect();
    assert_eq!(
        seen,
        [Some("tenant-1".to_owned()), Some("tenant-2".to_owned())]
    );
}

#[tokio::test]
async fn scenario_08_after_a_failed_turn_a_queued_message_gives_the_next_turns_answer() {
    let model = ScriptedModel::with_responses([
        ScriptedResponse::provider_error(Some(400), "bad request"),
        ScriptedResponse::text("second answer"),
    ]);
    let harness = scripted_harness(&model);
    let mut events = Events::subscribe(&harness, Scope::default());
    harness
        .execute("one", ExecuteOptions::default())
        .await
        .unwrap();
    assert_eq!(turn_aborts(&events.turn().await).len(), 1, "turn 1 failed");
    harness
        .execute("two", ExecuteOptions::default())
        .await
        .unwrap();
    let response = harness.agent_response(Scope::default()).await.unwrap();
    assert_eq!(response.text, "second answer");
}

#[tokio::test]
async fn scenario_09_agent_response_fails_with_the_last_turns_error() {
    let model =
        ScriptedModel::with_responses([ScriptedResponse::provider_error(Some(400), "bad request")]);
    let harness = scripted_harness(&model);
    harness
        .execute("one", ExecuteOptions::default())
        .await
        .unwrap();
    for _ in 0..2 {
        let error = harness.agent_response(Scope::default()).await.unwrap_err();
        let Error::TurnFailed { source } = &error else {
            panic!("expected TurnFailed, got {error:?}");
        };
        assert_eq!(error.code(), "PROVIDER_ERROR", "the turn's own code");
        assert!(matches!(
            **source,
            Error::Provider {
                status: Some(400),
                ..
            }
        ));
        assert!(
            error.to_string().contains("bad request") || source.to_string().contains("bad request")
        );
    }
}

#[tokio::test]
async fn scenario_10_events_include_turn_started_step_started_and_turn_completed_in_order() {
    let echo = run_code("echo", |input: String, _ctx: Context| async move {
        Ok::<_, std::convert::Infallible>(input)
    });
    let harness = AgentHarness::builder("agent")
        .agent_graph(echo)
        .build()
        .unwrap();
    let mut events = Events::subscribe(&harness, Scope::default());
    harness
        .execute("hi", ExecuteOptions::default())
        .await
        .unwrap();
    let seen = framework(&events.turn().await);
    let FrameworkEvent::TurnStarted { turn_id, .. } = &seen[0] else {
        panic!("turn_started first: {seen:?}");
    };
    let step_started = seen
        .iter()
        .position(|event| {
            *event
                == FrameworkEvent::StepStarted {
                    step_id: "echo".into(),
                    kind: StepKind::RunCode,
                }
        })
        .expect("step_started{echo}");
    let FrameworkEvent::TurnCompleted {
        turn_id: completed,
        duration_ms,
    } = seen.last().unwrap()
    else {
        panic!("turn_completed last: {seen:?}");
    };
    assert!(step_started > 0);
    assert_eq!(completed, turn_id);
    assert!(*duration_ms < 10_000);
}

#[tokio::test]
async fn scenario_11_a_run_code_root_failing_with_another_error_reports_step_failed() {
    // DESIGN: `turn_aborted.error_kind` is the stable code (`STEP_FAILED`), not the original's
    // lower-case kind.
    let failing = run_code("root", |_: String, _ctx: Context| async move {
        Err::<String, _>(Error::InvalidArgument {
            argument: "input",
            message: "boom".into(),
        })
    });
    let harness = AgentHarness::builder("agent")
        .agent_graph(failing)
        .build()
        .unwrap();
    let mut events = Events::subscribe(&harness, Scope::default());
    harness
        .execute("go", ExecuteOptions::default())
        .await
        .unwrap();
    let aborts = turn_aborts(&events.turn().await);
    assert_eq!(aborts.len(), 1);
    let (reason, kind) = &aborts[0];
    assert_eq!(*kind, "STEP_FAILED");
    assert!(
        reason.contains("root") && reason.contains("boom"),
        "{reason}"
    );
}

#[tokio::test]
async fn scenario_12_abort_of_a_step_blocked_in_recv_cancels_the_turn() {
    let (started_tx, mut started) = mpsc::unbounded_channel::<()>();
    // The step waits up to 60 s for a message nobody sends.
    let (_never_sent, inbox) = mpsc::unbounded_channel::<String>();
    let inbox = Arc::new(tokio::sync::Mutex::new(inbox));
    let blocked = run_code("blocked", move |_: String, ctx: Context| {
        let started = started_tx.clone();
        let inbox = inbox.clone();
        async move {
            let _ = started.send(());
            let mut inbox = inbox.lock().await;
            tokio::select! {
                received = tokio::time::timeout(Duration::from_secs(60), inbox.recv()) => {
                    Ok(format!("{received:?}"))
                }
                () = ctx.cancelled() => Err(Error::cancelled(ctx.abort_reason())),
            }
        }
    });
    let harness = AgentHarness::builder("agent")
        .agent_graph(blocked)
        .build()
        .unwrap();
    let mut events = Events::subscribe(&harness, Scope::default());
    harness
        .execute("wait", ExecuteOptions::default())
        .await
        .unwrap();
    guarded("the step to start", started.recv()).await;
    guarded(
        "abort to resolve",
        harness.abort(AbortOptions::new().reason("user stop")),
    )
    .await;
    let aborts = turn_aborts(&events.turn().await);
    assert_eq!(aborts.len(), 1);
    assert_eq!(aborts[0].1, "CANCELLED");
    assert!(aborts[0].0.contains("user stop"), "{}", aborts[0].0);
    assert_eq!(harness.status(Scope::default()), SessionStatus::Idle);
}

#[tokio::test]
async fn scenario_13_abort_lets_a_queued_follow_up_run() {
    // DESIGN: `abort` returns once the aborted turn has ended; it does not wait for the queue (the
    // original awaited the whole drain loop). The follow-up still runs.
    let model = PacedModel::new();
    let harness = paced_harness(&model);
    harness
        .execute("one", ExecuteOptions::default())
        .await
        .unwrap();
    let first = guarded("turn 1's request", model.next_call()).await;
    harness
        .execute("follow-up", ExecuteOptions::default())
        .await
        .unwrap();
    guarded("abort", harness.abort(AbortOptions::default())).await;
    assert!(first.is_dropped());
    // abort returned while the follow-up is still unanswered.
    let second = guarded("the follow-up's request", model.next_call()).await;
    assert!(
        second
            .request
            .user_texts()
            .ends_with(&["follow-up".to_owned()])
    );
    second.send_all(text_events("follow-up answer"));
    let response = harness.agent_response(Scope::default()).await.unwrap();
    assert_eq!(response.text, "follow-up answer");
}

#[tokio::test]
async fn scenario_14_interrupt_aborts_and_a_turn_starting_with_the_message_runs() {
    let model = PacedModel::new();
    let harness = paced_harness(&model);
    let mut events = Events::subscribe(&harness, Scope::default());
    harness
        .execute("one", ExecuteOptions::default().message_id("m1"))
        .await
        .unwrap();
    let first = guarded("turn 1's request", model.next_call()).await;
    harness
        .execute(
            "urgent",
            ExecuteOptions::default()
                .message_id("urgent")
                .delivery_mode(DeliveryMode::Interrupt),
        )
        .await
        .unwrap();
    guarded("turn 1's stream to be cut", first.dropped()).await;
    let second = guarded("the new turn's request", model.next_call()).await;
    second.send_all(text_events("on it"));
    assert_eq!(
        harness.agent_response(Scope::default()).await.unwrap().text,
        "on it"
    );
    let seen = events.turns(2).await;
    let aborts = turn_aborts(&seen);
    assert_eq!(aborts.len(), 1);
    assert_eq!(aborts[0].1, "CANCELLED");
    assert!(aborts[0].0.contains("interrupt"));
    assert_eq!(turn_message_ids(&seen)[1], ["urgent"]);
    assert_eq!(harness.status(Scope::default()), SessionStatus::Idle);
}

#[tokio::test]
async fn scenario_15_two_between_rounds_messages_on_an_idle_session_both_reach_the_model() {
    // DESIGN §6: the first, sent while idle, starts a turn like `next-turn`; the second joins that
    // turn as a steer, which a one-round turn never reaches `before_round` for, so it is held and
    // starts the next turn. Both reach the model, in two calls.
    let model = PacedModel::new();
    let harness = paced_harness(&model);
    let mut events = Events::subscribe(&harness, Scope::default());
    let between = |id: &str| {
        ExecuteOptions::default()
            .delivery_mode(DeliveryMode::BetweenRounds)
            .message_id(id)
    };
    harness.execute("first", between("b1")).await.unwrap();
    let first = guarded("the first request", model.next_call()).await;
    harness.execute("second", between("b2")).await.unwrap();
    first.send_all(text_events("one"));
    let second = guarded("the second request", model.next_call()).await;
    second.send_all(text_events("two"));
    harness.agent_response(Scope::default()).await.unwrap();
    assert_eq!(first.request.user_texts(), ["first"]);
    assert_eq!(second.request.user_texts(), ["first", "second"]);
    assert_eq!(model.call_count(), 2);
    assert_eq!(
        turn_message_ids(&events.turns(2).await),
        [vec!["b1"], vec!["b2"]]
    );
}

#[tokio::test]
async fn scenario_16_a_between_rounds_message_joins_before_round_1_and_next_turn_messages_keep_order()
 {
    // DESIGN: a between-rounds message is a steer applied at `before_round`; the event is
    // `steer_applied { point: before_round }` instead of the original's `inbox_injected`.
    let model = PacedModel::new();
    let gate = Gate::new();
    let harness = paced_builder(&model)
        .agent_graph(llm_with(vec![gate.tool()]))
        .build()
        .unwrap();
    let mut events = Events::subscribe(&harness, Scope::default());
    harness
        .execute("go", ExecuteOptions::default().message_id("go"))
        .await
        .unwrap();
    let round0 = guarded("round 0", model.next_call()).await;
    round0.send_all(tool_call_events(&[("c1", "wait")]));
    gate.started().await;
    harness
        .execute("n1", ExecuteOptions::default().message_id("n1"))
        .await
        .unwrap();
    harness
        .execute(
            "steer",
            ExecuteOptions::default()
                .message_id("br")
                .delivery_mode(DeliveryMode::BetweenRounds),
        )
        .await
        .unwrap();
    harness
        .execute("n2", ExecuteOptions::default().message_id("n2"))
        .await
        .unwrap();
    gate.release();
    let round1 = guarded("round 1", model.next_call()).await;
    assert_eq!(round1.request.round, 1);
    assert_eq!(round1.request.input.last(), Some(&Item::user_text("steer")));
    assert_eq!(round1.request.user_texts(), ["go", "steer"]);
    round1.send_all(text_events("steered answer"));
    let next_turn = guarded("the next turn's request", model.next_call()).await;
    assert_eq!(
        next_turn.request.user_texts(),
        ["go", "steer", "n1", "n2"],
        "queued next-turn messages keep their order"
    );
    next_turn.send_all(text_events("done"));
    harness.agent_response(Scope::default()).await.unwrap();

    let seen = framework(&events.turns(2).await);
    let applied_at = seen
        .iter()
        .position(|event| {
            *event
                == FrameworkEvent::SteerApplied {
                    message_ids: vec!["br".into()],
                    point: SteerPoint::BeforeRound,
                    round: 1,
                }
        })
        .expect("steer_applied before round 1");
    assert_eq!(
        seen[applied_at - 1],
        FrameworkEvent::ItemAppended {
            item: Item::user_text("steer")
        },
        "item_appended, then steer_applied"
    );
    let ids: Vec<Vec<String>> = seen
        .iter()
        .filter_map(|event| match event {
            FrameworkEvent::TurnStarted { message_ids, .. } => Some(message_ids.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(ids, [vec!["go"], vec!["n1", "n2"]]);
}

#[tokio::test]
async fn scenario_17_emit_false_hides_the_steps_events_but_not_turn_events() {
    let model = ScriptedModel::with_responses([
        ScriptedResponse::tool_call("c1", "note", json!({})),
        ScriptedResponse::text("done"),
    ]);
    let quiet = call_model("llm")
        .model("m")
        .tool(note_tool())
        .emit(false)
        .build();
    let harness = AgentHarness::builder("agent")
        .provider("scripted", model.clone())
        .agent_graph(quiet)
        .build()
        .unwrap();
    let mut events = Events::subscribe(&harness, Scope::default());
    harness
        .execute("hi", ExecuteOptions::default())
        .await
        .unwrap();
    let seen = events.turn().await;
    let types = framework_types(&seen);
    assert_eq!(types.first(), Some(&"turn_started"));
    assert_eq!(types.last(), Some(&"turn_completed"));
    let hidden: Vec<&str> = types
        .iter()
        .copied()
        .filter(|kind| {
            kind.starts_with("step_")
                || kind.starts_with("model_call_")
                || kind.starts_with("tool_")
        })
        .collect();
    assert!(hidden.is_empty(), "emit(false) leaked {hidden:?}");
    // Items and provider events still flow.
    assert!(types.contains(&"item_appended"));
    assert!(
        seen.iter()
            .any(|event| matches!(&**event, StreamEvent::Sdk(_)))
    );
    assert_eq!(
        harness.agent_response(Scope::default()).await.unwrap().text,
        "done"
    );
}

#[tokio::test]
async fn scenario_18_usage_is_zero_until_turns_run_and_then_sums_them_per_thread() {
    let model = echo_model();
    let harness = scripted_harness(&model);
    assert_eq!(harness.usage(Scope::default()), Spend::default());
    assert_eq!(harness.usage(Scope::thread("unknown")), Spend::default());
    assert_eq!(harness.session_count(), 0, "usage creates no session");
    for message in ["one", "two"] {
        harness
            .execute(message, ExecuteOptions::default())
            .await
            .unwrap();
        harness.agent_response(Scope::default()).await.unwrap();
    }
    let spend = harness.usage(Scope::default());
    assert_eq!(spend.usage, tokens(20, 10, None));
    assert_eq!(spend.cost, None);
    assert_eq!(harness.usage(Scope::thread("other")), Spend::default());
}

#[tokio::test]
async fn scenario_19_cached_tokens_absent_stay_absent_zero_stays_zero_and_reports_sum() {
    let cached =
        |value: Option<u64>| ScriptedResponse::text("ok").with_usage(tokens(10, 5, value), None);
    let model = ScriptedModel::with_responses([
        cached(None),
        cached(Some(0)),
        cached(Some(4)),
        cached(Some(6)),
    ]);
    let harness = scripted_harness(&model);
    let turn = async |thread: &str| {
        harness.execute("hi", on(thread)).await.unwrap();
        harness.agent_response(Scope::thread(thread)).await.unwrap()
    };
    assert_eq!(turn("absent").await.usage.cached_tokens, None);
    assert_eq!(turn("zero").await.usage.cached_tokens, Some(0));
    assert_eq!(turn("sum").await.usage.cached_tokens, Some(4));
    assert_eq!(turn("sum").await.usage.cached_tokens, Some(6), "per turn");
    assert_eq!(
        harness.usage(Scope::thread("absent")).usage.cached_tokens,
        None
    );
    assert_eq!(
        harness.usage(Scope::thread("zero")).usage.cached_tokens,
        Some(0)
    );
    assert_eq!(
        harness.usage(Scope::thread("sum")).usage,
        tokens(20, 10, Some(10))
    );
}

#[tokio::test]
async fn scenario_20_a_root_that_bills_a_model_call_then_throws_keeps_the_billed_usage() {
    let model = ScriptedModel::with_responses([ScriptedResponse::text("billed")]);
    let fail = run_code("fail", |_: String, _ctx: Context| async move {
        Err::<String, _>("after the model call".to_owned())
    });
    let graph = sequence("root")
        .step(call_model("llm").model("m"))
        .step(fail);
    let harness = AgentHarness::builder("agent")
        .provider("scripted", model.clone())
        .agent_graph(graph)
        .build()
        .unwrap();
    harness
        .execute("hi", ExecuteOptions::default())
        .await
        .unwrap();
    let error = harness.agent_response(Scope::default()).await.unwrap_err();
    assert_eq!(error.code(), "STEP_FAILED");
    assert_eq!(harness.usage(Scope::default()).usage, tokens(10, 5, None));
}

#[tokio::test]
async fn scenario_21_seeded_history_reaches_the_model_reseeding_replaces_and_seeds_are_per_thread()
{
    let model = echo_model();
    let harness = scripted_harness(&model);
    let seeded_user = with_id(Item::user_text("earlier question"), "seed-u");
    let seeded_answer = with_id(Item::assistant_text("earlier answer"), "seed-a");
    harness.seed_session_history("t", vec![seeded_user.clone(), seeded_answer.clone()]);
    harness.seed_session_history("t2", vec![with_id(Item::user_text("stale"), "stale")]);
    let replacement = with_id(Item::user_text("fresh"), "fresh");
    harness.seed_session_history("t2", vec![replacement.clone()]);

    harness.execute("new", on("t")).await.unwrap();
    harness.agent_response(Scope::thread("t")).await.unwrap();
    harness.execute("new", on("t2")).await.unwrap();
    harness.agent_response(Scope::thread("t2")).await.unwrap();

    let ids = |input: &[Item]| -> Vec<String> {
        input
            .iter()
            .filter_map(|item| item.id().map(str::to_owned))
            .collect()
    };
    let requests = model.requests();
    assert_eq!(requests[0].thread_id.as_deref(), Some("t"));
    assert_eq!(ids(&requests[0].input), ["seed-u", "seed-a"]);
    assert_eq!(
        requests[0].input,
        [seeded_user, seeded_answer, Item::user_text("new")]
    );
    assert_eq!(requests[1].thread_id.as_deref(), Some("t2"));
    assert_eq!(requests[1].input, [replacement, Item::user_text("new")]);
}

/// Replaces snapshots by key; returns the final snapshot of each key, in order of first appearance.
fn latest(snapshots: &[ItemSnapshot]) -> Vec<ItemSnapshot> {
    let mut order: Vec<String> = Vec::new();
    let mut by_key: HashMap<String, ItemSnapshot> = HashMap::new();
    for snapshot in snapshots {
        if !by_key.contains_key(&snapshot.key) {
            order.push(snapshot.key.clone());
        }
        by_key.insert(snapshot.key.clone(), snapshot.clone());
    }
    order
        .into_iter()
        .map(|key| by_key.remove(&key).unwrap())
        .collect()
}

/// The snapshots available right now (the stream's turn boundaries left out; a lag fails the test).
fn drain_snapshots(
    stream: &mut futures_util::stream::BoxStream<'static, SessionChunk<ItemSnapshot>>,
) -> Vec<ItemSnapshot> {
    let mut seen = Vec::new();
    while let Some(Some(chunk)) = stream.next().now_or_never() {
        match chunk {
            SessionChunk::Data(snapshot) => seen.push(snapshot),
            SessionChunk::Lagged { skipped } => panic!("lagged by {skipped}"),
            _ => {}
        }
    }
    seen
}

#[tokio::test]
async fn scenario_22_the_item_stream_yields_the_user_input_and_the_tool_output_complete() {
    let model = ScriptedModel::with_responses([
        ScriptedResponse::tool_call("c1", "note", json!({})),
        ScriptedResponse::text("done"),
    ]);
    let harness = scripted_with_tools(&model, vec![note_tool()]);
    let mut items = harness.item_stream(Scope::default());
    harness
        .execute("take a note", ExecuteOptions::default())
        .await
        .unwrap();
    harness.agent_response(Scope::default()).await.unwrap();
    let snapshots = drain_snapshots(&mut items);
    assert!(snapshots.iter().any(|snapshot| snapshot.is_complete
        && snapshot.item == Item::user_text("take a note")));
    assert!(snapshots.iter().any(|snapshot| snapshot.is_complete
        && snapshot.item == Item::function_call_output("c1", "noted")));
}

#[tokio::test]
async fn scenario_23_item_snapshots_of_two_tool_rounds_do_not_collide_and_replay_on_request() {
    let model = ScriptedModel::with_responses([
        ScriptedResponse::tool_call("c1", "note", json!({"n": 1})),
        ScriptedResponse::tool_call("c2", "note", json!({"n": 2})),
        ScriptedResponse::text("done"),
    ]);
    let lenient_note = noetic_core::Tool::dynamic(
        "note",
        "Takes a note",
        json!({"type": "object"}),
        |_, _| async move { Ok(json!("noted")) },
    )
    .unwrap();
    let harness = scripted_with_tools(&model, vec![lenient_note]);
    let mut early = harness.item_stream(Scope::default());
    harness
        .execute("two notes", ExecuteOptions::default())
        .await
        .unwrap();
    harness.agent_response(Scope::default()).await.unwrap();
    let snapshots = drain_snapshots(&mut early);

    // Each streamed call goes incomplete → complete under its own key.
    for (call_id, arguments) in [("c1", r#"{"n":1}"#), ("c2", r#"{"n":2}"#)] {
        let of_call: Vec<&ItemSnapshot> = snapshots
            .iter()
            .filter(|snapshot| {
                snapshot
                    .item
                    .as_function_call()
                    .map(|call| call.call_id.as_str())
                    == Some(call_id)
            })
            .collect();
        assert!(of_call.len() >= 2, "{call_id}: {of_call:?}");
        assert!(!of_call[0].is_complete, "{call_id} starts incomplete");
        let last = of_call.last().unwrap();
        assert!(last.is_complete);
        assert_eq!(last.item, Item::function_call(call_id, "note", arguments));
        let keys: Vec<&str> = of_call
            .iter()
            .map(|snapshot| snapshot.key.as_str())
            .collect();
        assert!(
            keys.iter().all(|key| *key == keys[0]),
            "{call_id}: one key, got {keys:?}"
        );
    }
    let key_of = |call_id: &str| {
        snapshots
            .iter()
            .find(|snapshot| {
                snapshot
                    .item
                    .as_function_call()
                    .map(|call| call.call_id.as_str())
                    == Some(call_id)
            })
            .unwrap()
            .key
            .clone()
    };
    assert_ne!(
        key_of("c1"),
        key_of("c2"),
        "the rounds' accumulators do not collide"
    );
    // Replacing by key leaves each item of the conversation exactly once, complete.
    let finals = latest(&snapshots);
    assert!(finals.iter().all(|snapshot| snapshot.is_complete));
    let final_items: Vec<Item> = finals.into_iter().map(|snapshot| snapshot.item).collect();
    assert_eq!(final_items, harness.session_history(Scope::default()));

    // A late subscriber asking for replay gets the ended turn's items, complete (its provider events
    // are not kept once it ended); one made without replay gets nothing of it.
    let mut replayed = harness.item_stream_with(Scope::default(), Replay::Retained);
    let mut late = harness.item_stream(Scope::default());
    let mut replay = Vec::new();
    while let Some(Some(chunk)) = replayed.next().now_or_never() {
        match chunk {
            SessionChunk::Data(snapshot) => replay.push(snapshot),
            SessionChunk::Lagged { skipped } => assert!(skipped > 0),
            _ => {}
        }
    }
    assert!(replay.iter().all(|snapshot| snapshot.is_complete));
    let replayed_items: Vec<Item> = latest(&replay)
        .into_iter()
        .map(|snapshot| snapshot.item)
        .collect();
    assert_eq!(replayed_items, harness.session_history(Scope::default()));
    assert!(drain_snapshots(&mut late).is_empty());
}

#[tokio::test]
async fn scenario_24_a_failed_turns_input_is_kept_in_the_history() {
    // DESIGN §6 overrides the original: a failed or aborted turn keeps what the user sent in the
    // session history (the original dropped it).
    let model = ScriptedModel::with_responses([
        ScriptedResponse::provider_error(Some(400), "bad request"),
        ScriptedResponse::text("ok"),
    ]);
    let harness = scripted_harness(&model);
    harness
        .execute("lost?", ExecuteOptions::default())
        .await
        .unwrap();
    assert!(harness.agent_response(Scope::default()).await.is_err());
    assert_eq!(
        harness.session_history(Scope::default()),
        [Item::user_text("lost?")]
    );
    harness
        .execute("next", ExecuteOptions::default())
        .await
        .unwrap();
    harness.agent_response(Scope::default()).await.unwrap();
    assert_eq!(
        model.requests()[1].user_texts(),
        ["lost?", "next"],
        "the failed turn's input reached the next turn"
    );
}
