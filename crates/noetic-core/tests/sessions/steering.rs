//! Steering: the three steer points, `on_steer` decisions and spawned children (acceptance point 1,
//! steering part).

use std::sync::{Arc, Mutex};

use noetic_core::item::{ContentPart, Item};
use noetic_core::{
    AgentHarness, ContextLayer, DeliveryMode, ExecuteOptions, FrameworkEvent, Input, ResponseEvent,
    Role, Scope, Steer, SteerDecision, SteerMode, SteerPoint, StreamEvent, call_model, sequence,
    spawn,
};
use noetic_test_support::PacedModel;
use serde_json::{Map, json};

use crate::support::{
    Events, Gate, framework, guarded, llm_with, paced_builder, paced_harness, text_events,
    tool_call_events, turn_message_ids, with_id,
};

fn steer(mode: DeliveryMode, id: &str) -> ExecuteOptions {
    ExecuteOptions::default().delivery_mode(mode).message_id(id)
}

/// `(message_ids, point, round)` of every `steer_applied`.
fn applied(events: &[Arc<StreamEvent>]) -> Vec<(Vec<String>, SteerPoint, u32)> {
    framework(events)
        .into_iter()
        .filter_map(|event| match event {
            FrameworkEvent::SteerApplied {
                message_ids,
                point,
                round,
            } => Some((message_ids, point, round)),
            _ => None,
        })
        .collect()
}

/// Whether `event` is the provider event `wanted`.
fn is_sdk(wanted: &ResponseEvent) -> impl Fn(&StreamEvent) -> bool + '_ {
    move |event| matches!(event, StreamEvent::Sdk(sdk) if *sdk == *wanted)
}

#[tokio::test]
async fn a_next_item_steer_cuts_the_round_at_the_next_item_done() {
    let model = PacedModel::new();
    let harness = paced_harness(&model);
    let mut events = Events::subscribe(&harness, Scope::default());
    harness
        .execute("write two paragraphs", ExecuteOptions::default())
        .await
        .unwrap();
    let first = model.next_call().await;
    // The model streams a reasoning item, then starts a message.
    let mut stream = text_events("first paragraph");
    let completed = stream.pop().unwrap();
    let done = stream.pop().unwrap();
    first.send_all(stream); // created, added, deltas: the message is still open
    harness
        .execute(
            Item::user_text("use bullet points"),
            ExecuteOptions::default()
                .delivery_mode(DeliveryMode::NextItem)
                .message_id("steer-1"),
        )
        .await
        .unwrap();
    first.send(done); // item_done: the steer applies here and the stream is cut
    first.dropped().await;
    drop(completed);
    let second = model.next_call().await;
    let texts: Vec<String> = second.request.input.iter().filter_map(Item::text).collect();
    assert_eq!(
        texts,
        [
            "write two paragraphs",
            "first paragraph",
            "use bullet points"
        ]
    );
    second.send_all(text_events("- done"));
    let response = harness.agent_response(Scope::default()).await.unwrap();
    assert_eq!(response.text, "- done");
    let mut applied = None;
    loop {
        let event = events.next().await;
        if let StreamEvent::Framework(FrameworkEvent::SteerApplied {
            message_ids,
            point,
            round,
        }) = &*event
        {
            applied = Some((message_ids.clone(), *point, *round));
        }
        if let StreamEvent::Framework(FrameworkEvent::TurnCompleted { .. }) = &*event {
            break;
        }
    }
    assert_eq!(
        applied,
        Some((
            vec!["steer-1".to_owned()],
            noetic_core::SteerPoint::ItemDone,
            0
        ))
    );
}

/// A steer of two items: a developer note and a user message with an image and a file.
fn rich_steer() -> Vec<Item> {
    let mut image = Map::new();
    image.insert("image_url".into(), json!("https://example.com/cat.png"));
    image.insert("detail".into(), json!("low"));
    let mut file = Map::new();
    file.insert("file_id".into(), json!("file-123"));
    vec![
        Item::developer_text("answer in bullet points"),
        Item::message(
            Role::User,
            vec![
                ContentPart::InputText {
                    text: "and describe this".into(),
                },
                ContentPart::InputImage(image),
                ContentPart::InputFile(file),
            ],
        ),
    ]
}

#[tokio::test]
async fn a_next_item_steer_applies_at_item_done_cuts_the_stream_and_keeps_role_and_parts() {
    let model = PacedModel::new();
    let gate = Gate::new();
    let harness = paced_builder(&model)
        .agent_graph(llm_with(vec![gate.tool()]))
        .build()
        .unwrap();
    let mut events = Events::subscribe(&harness, Scope::default());
    harness
        .execute("look at this", ExecuteOptions::default())
        .await
        .unwrap();
    let first = guarded("the first request", model.next_call()).await;

    // Item 0, a function call, completes; item 1, a message, is still streaming when the steer comes.
    let call = Item::function_call("c1", "wait", "{}");
    let message = with_id(Item::assistant_text("partial text"), "msg_1");
    let second_delta = ResponseEvent::OutputTextDelta {
        output_index: 1,
        content_index: 0,
        delta: "text".into(),
    };
    first.send_all([
        ResponseEvent::Created {
            response_id: Some("resp_1".into()),
            model: None,
        },
        ResponseEvent::OutputItemAdded {
            output_index: 0,
            item: Item::function_call("c1", "wait", ""),
        },
        ResponseEvent::OutputItemDone {
            output_index: 0,
            item: call.clone(),
        },
        ResponseEvent::OutputItemAdded {
            output_index: 1,
            item: Item::message(Role::Assistant, Vec::new()),
        },
        ResponseEvent::OutputTextDelta {
            output_index: 1,
            content_index: 0,
            delta: "partial ".into(),
        },
    ]);
    // Wait until the harness has streamed past item 0's `item_done`, so the steer meets item 1.
    let first_delta = ResponseEvent::OutputTextDelta {
        output_index: 1,
        content_index: 0,
        delta: "partial ".into(),
    };
    events.until(is_sdk(&first_delta)).await;
    harness
        .execute(
            Input::Items(rich_steer()),
            steer(DeliveryMode::NextItem, "s1"),
        )
        .await
        .unwrap();
    first.send(second_delta.clone());
    first.send(ResponseEvent::OutputItemDone {
        output_index: 1,
        item: message.clone(),
    });
    // The stream is cut at that `item_done`: what the model would have sent next is never read.
    guarded("the first stream to be dropped", first.dropped()).await;
    first.send(ResponseEvent::OutputItemAdded {
        output_index: 2,
        item: Item::message(Role::Assistant, Vec::new()),
    });

    let second = guarded("the second request", model.next_call()).await;
    let mut expected = vec![
        Item::user_text("look at this"),
        call,
        message,
        Item::function_call_output(
            "c1",
            "Tool call skipped: the user sent a new message before it ran.",
        ),
    ];
    expected.extend(rich_steer());
    assert_eq!(second.request.input, expected);
    assert_eq!(gate.runs(), 0, "a call of a cut round never runs");
    second.send_all(text_events("- bullet"));
    let response = harness.agent_response(Scope::default()).await.unwrap();
    assert_eq!(response.text, "- bullet");

    let seen = events.turn().await;
    assert_eq!(
        applied(&seen),
        [(vec!["s1".to_owned()], SteerPoint::ItemDone, 0)]
    );
    // The steer's items were appended to the log (and so announced) as sent.
    let appended: Vec<Item> = framework(&seen)
        .into_iter()
        .filter_map(|event| match event {
            FrameworkEvent::ItemAppended { item } => Some(item),
            _ => None,
        })
        .collect();
    assert!(
        appended.windows(2).any(|pair| pair == rich_steer()),
        "the steer's items were appended together, as sent: {appended:?}"
    );
}

#[tokio::test]
async fn a_between_rounds_steer_waits_for_before_round() {
    let model = PacedModel::new();
    let gate = Gate::new();
    let harness = paced_builder(&model)
        .agent_graph(llm_with(vec![gate.tool()]))
        .build()
        .unwrap();
    let mut events = Events::subscribe(&harness, Scope::default());
    harness
        .execute("go", ExecuteOptions::default())
        .await
        .unwrap();
    let first = guarded("the first request", model.next_call()).await;
    let mut round0 = tool_call_events(&[("c1", "wait")]);
    let rest = round0.split_off(2); // created, call added | arguments, call done, completed
    first.send_all(round0);
    harness
        .execute(
            "also check the logs",
            steer(DeliveryMode::BetweenRounds, "br"),
        )
        .await
        .unwrap();
    // `item_done` and `before_tool_call` pass without applying it: the stream is read to its end and
    // the tool runs.
    first.send_all(rest);
    assert_eq!(gate.started().await, "c1");
    gate.release();

    let second = guarded("the second request", model.next_call()).await;
    assert_eq!(
        second.request.input,
        [
            Item::user_text("go"),
            Item::function_call("c1", "wait", "{}"),
            Item::function_call_output("c1", "released c1"),
            Item::user_text("also check the logs"),
        ]
    );
    second.send_all(text_events("checked"));
    harness.agent_response(Scope::default()).await.unwrap();
    let seen = events.turn().await;
    assert_eq!(
        applied(&seen),
        [(vec!["br".to_owned()], SteerPoint::BeforeRound, 1)]
    );
    let completed_round0 = framework(&seen).contains(&FrameworkEvent::ModelCallCompleted {
        round: 0,
        item_count: 1,
    });
    assert!(completed_round0, "round 0 was read to its end");
    assert_eq!(gate.runs(), 1);
}

#[tokio::test]
async fn a_steer_applied_at_before_tool_call_skips_the_remaining_calls_with_valid_outputs() {
    let model = PacedModel::new();
    let gate = Gate::new();
    let harness = paced_builder(&model)
        .agent_graph(llm_with(vec![gate.tool()]))
        .on_steer(|_steer, point, _ctx| {
            (point == SteerPoint::BeforeToolCall).then_some(SteerDecision::Apply)
        })
        .build()
        .unwrap();
    let mut events = Events::subscribe(&harness, Scope::default());
    harness
        .execute("run three", ExecuteOptions::default())
        .await
        .unwrap();
    let first = guarded("the first request", model.next_call()).await;
    first.send_all(tool_call_events(&[
        ("c1", "wait"),
        ("c2", "wait"),
        ("c3", "wait"),
    ]));
    // The steer comes while the first call runs.
    assert_eq!(gate.started().await, "c1");
    harness
        .execute(
            "stop after this one",
            steer(DeliveryMode::BetweenRounds, "s"),
        )
        .await
        .unwrap();
    gate.release();

    let second = guarded("the second request", model.next_call()).await;
    let skipped = "Tool call skipped: the user sent a new message before it ran.";
    assert_eq!(
        second.request.input,
        [
            Item::user_text("run three"),
            Item::function_call("c1", "wait", "{}"),
            Item::function_call("c2", "wait", "{}"),
            Item::function_call("c3", "wait", "{}"),
            Item::function_call_output("c1", "released c1"),
            Item::function_call_output("c2", skipped),
            Item::function_call_output("c3", skipped),
            Item::user_text("stop after this one"),
        ]
    );
    assert_eq!(gate.runs(), 1, "the remaining calls never ran");
    second.send_all(text_events("stopped"));
    harness.agent_response(Scope::default()).await.unwrap();

    let seen = events.turn().await;
    assert_eq!(
        applied(&seen),
        [(vec!["s".to_owned()], SteerPoint::BeforeToolCall, 0)]
    );
    let completions: Vec<(String, bool)> = framework(&seen)
        .into_iter()
        .filter_map(|event| match event {
            FrameworkEvent::ToolCallCompleted { call_id, error, .. } => Some((call_id, error)),
            _ => None,
        })
        .collect();
    assert_eq!(
        completions,
        [
            ("c1".to_owned(), false),
            ("c2".to_owned(), true),
            ("c3".to_owned(), true)
        ]
    );
}

#[tokio::test]
async fn hold_carries_to_the_next_point_and_at_turn_end_into_the_next_turn() {
    let model = PacedModel::new();
    let gate = Gate::new();
    let offered: Arc<Mutex<Vec<SteerPoint>>> = Arc::default();
    let harness = {
        let offered = offered.clone();
        paced_builder(&model)
            .agent_graph(llm_with(vec![gate.tool()]))
            .on_steer(move |steer, point, _ctx| {
                assert_eq!(steer.message_id, "held");
                offered.lock().unwrap().push(point);
                Some(SteerDecision::Hold)
            })
            .build()
            .unwrap()
    };
    let mut events = Events::subscribe(&harness, Scope::default());
    harness
        .execute("first", ExecuteOptions::default().message_id("m1"))
        .await
        .unwrap();
    let first = guarded("the first request", model.next_call()).await;
    let mut round0 = tool_call_events(&[("c1", "wait")]);
    let rest = round0.split_off(2);
    first.send_all(round0);
    harness
        .execute("later, please", steer(DeliveryMode::NextItem, "held"))
        .await
        .unwrap();
    first.send_all(rest);
    assert_eq!(gate.started().await, "c1");
    gate.release();
    let second = guarded("the second request", model.next_call()).await;
    assert!(
        !second
            .request
            .user_texts()
            .contains(&"later, please".to_owned())
    );
    second.send_all(text_events("answer one"));

    // The turn ends with the steer still held: it starts the next turn.
    let third = guarded("the next turn's request", model.next_call()).await;
    assert_eq!(
        third.request.user_texts(),
        ["first", "later, please"],
        "the held steer is the next turn's input"
    );
    third.send_all(text_events("answer two"));
    let response = harness.agent_response(Scope::default()).await.unwrap();
    assert_eq!(response.text, "answer two");

    assert_eq!(
        *offered.lock().unwrap(),
        [
            SteerPoint::ItemDone,       // the function call finished streaming
            SteerPoint::BeforeToolCall, // before c1
            SteerPoint::BeforeRound,    // before round 1
            SteerPoint::ItemDone,       // round 1's message
        ]
    );
    let seen = events.turns(2).await;
    assert_eq!(turn_message_ids(&seen), [vec!["m1"], vec!["held"]]);
    assert!(applied(&seen).is_empty());
}

/// A layer deciding every steer the same way.
struct Deciding(SteerDecision);

impl ContextLayer for Deciding {
    fn id(&self) -> &str {
        "deciding"
    }

    fn on_steer(
        &self,
        _ctx: noetic_core::LayerCtx<'_>,
        _steer: &Steer,
        _point: SteerPoint,
    ) -> Option<SteerDecision> {
        Some(self.0.clone())
    }
}

fn layered(model: &PacedModel, decision: SteerDecision) -> AgentHarness {
    paced_builder(model)
        .agent_graph(crate::support::llm())
        .context_layers([Arc::new(Deciding(decision)) as Arc<dyn ContextLayer>])
        .build()
        .unwrap()
}

#[tokio::test]
async fn drop_emits_steer_dropped_and_the_turn_goes_on() {
    let model = PacedModel::new();
    let harness = layered(&model, SteerDecision::Drop);
    let mut events = Events::subscribe(&harness, Scope::default());
    harness
        .execute("hello", ExecuteOptions::default())
        .await
        .unwrap();
    let first = guarded("the request", model.next_call()).await;
    let mut answer = text_events("full answer");
    let rest = answer.split_off(3);
    first.send_all(answer);
    harness
        .execute("never mind", steer(DeliveryMode::NextItem, "dropped"))
        .await
        .unwrap();
    first.send_all(rest);
    let response = harness.agent_response(Scope::default()).await.unwrap();
    assert_eq!(response.text, "full answer", "the stream was not cut");
    assert_eq!(model.call_count(), 1, "a dropped steer starts nothing");

    let seen = events.turn().await;
    let dropped: Vec<FrameworkEvent> = framework(&seen)
        .into_iter()
        .filter(|event| matches!(event, FrameworkEvent::SteerDropped { .. }))
        .collect();
    assert_eq!(
        dropped,
        [FrameworkEvent::SteerDropped {
            message_id: "dropped".into(),
            point: SteerPoint::ItemDone,
        }]
    );
    assert!(applied(&seen).is_empty());
    let history = harness.session_history(Scope::default());
    assert!(!history.contains(&Item::user_text("never mind")));
}

#[tokio::test]
async fn a_layer_can_rewrite_a_steer() {
    let model = PacedModel::new();
    let rewritten = Item::developer_text("The user asked for brevity.");
    let harness = layered(&model, SteerDecision::Rewrite(vec![rewritten.clone()]));
    let mut events = Events::subscribe(&harness, Scope::default());
    harness
        .execute("explain", ExecuteOptions::default())
        .await
        .unwrap();
    let first = guarded("the first request", model.next_call()).await;
    let mut answer = text_events("a long explanation");
    answer.truncate(3);
    first.send_all(answer);
    harness
        .execute("shorter!!", steer(DeliveryMode::NextItem, "s"))
        .await
        .unwrap();
    first.send(ResponseEvent::OutputItemDone {
        output_index: 0,
        item: Item::assistant_text("a long"),
    });
    let second = guarded("the second request", model.next_call()).await;
    assert_eq!(second.request.input.last(), Some(&rewritten));
    assert!(
        !second
            .request
            .user_texts()
            .contains(&"shorter!!".to_owned())
    );
    second.send_all(text_events("brief"));
    harness.agent_response(Scope::default()).await.unwrap();
    assert_eq!(
        applied(&events.turn().await),
        [(vec!["s".to_owned()], SteerPoint::ItemDone, 0)]
    );
}

#[tokio::test]
async fn a_spawned_child_takes_steers_with_forward() {
    let model = PacedModel::new();
    let child = call_model("child-llm").model("m").instructions("child");
    let harness = paced_builder(&model)
        .agent_graph(spawn("delegate", child).steers(SteerMode::Forward))
        .build()
        .unwrap();
    let mut events = Events::subscribe(&harness, Scope::default());
    harness
        .execute("delegate this", ExecuteOptions::default())
        .await
        .unwrap();
    let first = guarded("the child's request", model.next_call()).await;
    assert_eq!(first.request.instructions.as_deref(), Some("child"));
    let mut answer = text_events("child draft");
    let done = answer.split_off(answer.len() - 2);
    first.send_all(answer);
    harness
        .execute("in French", steer(DeliveryMode::NextItem, "s"))
        .await
        .unwrap();
    first.send_all(done);
    guarded("the child's stream to be cut", first.dropped()).await;

    let second = guarded("the child's second request", model.next_call()).await;
    assert_eq!(second.request.instructions.as_deref(), Some("child"));
    assert_eq!(
        second.request.input.last(),
        Some(&Item::user_text("in French"))
    );
    second.send_all(text_events("brouillon"));
    let response = harness.agent_response(Scope::default()).await.unwrap();
    assert_eq!(response.text, "brouillon");
    assert_eq!(
        applied(&events.turn().await),
        [(vec!["s".to_owned()], SteerPoint::ItemDone, 0)]
    );
}

#[tokio::test]
async fn an_isolated_spawned_child_leaves_steers_to_the_parent() {
    let model = PacedModel::new();
    let child = call_model("child-llm").model("m").instructions("child");
    let parent = call_model("parent-llm").model("m").instructions("parent");
    let graph = sequence("root").step(spawn("delegate", child)).step(parent);
    let harness = paced_builder(&model).agent_graph(graph).build().unwrap();
    let mut events = Events::subscribe(&harness, Scope::default());
    harness
        .execute("delegate this", ExecuteOptions::default())
        .await
        .unwrap();
    let child_call = guarded("the child's request", model.next_call()).await;
    assert_eq!(child_call.request.instructions.as_deref(), Some("child"));
    let mut answer = text_events("child draft");
    let done = answer.split_off(answer.len() - 2);
    child_call.send_all(answer);
    harness
        .execute("in French", steer(DeliveryMode::NextItem, "s"))
        .await
        .unwrap();
    // The child's `item_done` does not take the steer: its answer completes.
    child_call.send_all(done);

    let parent_call = guarded("the parent's request", model.next_call()).await;
    assert_eq!(parent_call.request.instructions.as_deref(), Some("parent"));
    assert_eq!(
        parent_call.request.user_texts(),
        ["delegate this", "child draft"],
        "the child finished its answer unsteered"
    );
    // The parent's first `item_done` applies it.
    parent_call.send_all(text_events("parent answer"));
    let parent_again = guarded("the parent's second request", model.next_call()).await;
    assert_eq!(parent_again.request.instructions.as_deref(), Some("parent"));
    assert_eq!(
        parent_again.request.input.last(),
        Some(&Item::user_text("in French"))
    );
    parent_again.send_all(text_events("réponse"));
    let response = harness.agent_response(Scope::default()).await.unwrap();
    assert_eq!(response.text, "réponse");
    assert_eq!(model.call_count(), 3);
    assert_eq!(
        applied(&events.turn().await),
        [(vec!["s".to_owned()], SteerPoint::ItemDone, 0)]
    );
}
