//! Tool approval (in memory): gated calls wait while the round's other calls run, `approve` /
//! `reject` are single-use, every call gets an output, steers wait for the resumed turn, and an
//! abort answers the waiting calls.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use noetic_core::{
    AbortOptions, AgentHarness, ApprovalRequest, DeliveryMode, ExecuteOptions, FrameworkEvent,
    Scope, SessionStatus, StreamEvent, Tool, ToolContext, ToolError, call_model,
};
use noetic_test_support::{ScriptedModel, ScriptedResponse};
use serde_json::{Value, json};

use crate::support::{Events, guarded};

/// A tool counting its runs, answering `<name> done`.
#[derive(Clone)]
struct Counted {
    name: &'static str,
    runs: Arc<AtomicUsize>,
}

impl Counted {
    fn new(name: &'static str) -> Self {
        Counted {
            name,
            runs: Arc::new(AtomicUsize::new(0)),
        }
    }

    fn tool(&self) -> Tool {
        let runs = self.runs.clone();
        let name = self.name;
        Tool::dynamic(
            name,
            "Does something",
            json!({"type": "object", "properties": {"to": {"type": "string"}, "amount": {"type": "number"}}}),
            move |_args: Value, _ctx: ToolContext| {
                let runs = runs.clone();
                async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, ToolError>(json!(format!("{name} done")))
                }
            },
        )
        .unwrap()
    }

    fn runs(&self) -> usize {
        self.runs.load(Ordering::SeqCst)
    }
}

fn harness(model: &ScriptedModel, tools: Vec<Tool>) -> AgentHarness {
    AgentHarness::builder("agent")
        .provider("scripted", model.clone())
        .agent_graph(call_model("llm").model("m").tools(tools).build())
        .build()
        .unwrap()
}

/// Waits for the `approval_requested` events of `count` calls; returns their requests.
async fn requested(events: &mut Events, count: usize) -> Vec<(String, String)> {
    let mut seen = Vec::new();
    while seen.len() < count {
        if let StreamEvent::Framework(FrameworkEvent::ApprovalRequested {
            approval_id, tool, ..
        }) = &*events.next().await
        {
            seen.push((approval_id.clone(), tool.clone()));
        }
    }
    seen
}

fn thread(id: &str) -> ExecuteOptions {
    ExecuteOptions::new().thread_id(id)
}

#[tokio::test]
async fn gated_calls_wait_while_the_others_run_and_every_call_gets_an_output() {
    let email = Counted::new("send_email");
    let lookup = Counted::new("lookup");
    let model = ScriptedModel::with_responses([
        ScriptedResponse::tool_calls(&[
            ("c1", "send_email", json!({"to": "ana@example.com"})),
            ("c2", "lookup", json!({})),
        ]),
        ScriptedResponse::text("Sent."),
    ]);
    let harness = harness(
        &model,
        vec![email.tool().needs_approval(true), lookup.tool()],
    );
    let scope = Scope::thread("t1");
    let mut events = Events::subscribe(&harness, scope.clone());
    harness.execute("Email Ana", thread("t1")).await.unwrap();

    let asked = requested(&mut events, 1).await;
    // The ungated call of the same round runs without waiting for the decision.
    events
        .until(|event| {
            matches!(event, StreamEvent::Framework(FrameworkEvent::ToolCallCompleted { name, .. }) if name == "lookup")
        })
        .await;
    assert_eq!(lookup.runs(), 1);
    assert_eq!(email.runs(), 0);
    let pending = harness.pending_approvals(scope.clone()).await.unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].approval_id, asked[0].0);
    assert_eq!(pending[0].tool, "send_email");
    assert_eq!(pending[0].arguments, json!({"to": "ana@example.com"}));
    assert!(matches!(
        harness.status(scope.clone()),
        SessionStatus::AwaitingApproval { calls, .. } if calls == pending
    ));

    let approved = harness.approve("t1", &asked[0].0).await.unwrap();
    assert_eq!(approved.call_id, "c1");
    let response = guarded("the turn", harness.agent_response(scope.clone()))
        .await
        .unwrap();

    assert_eq!(response.text, "Sent.");
    assert_eq!(email.runs(), 1);
    assert_eq!(lookup.runs(), 1);
    let requests = model.requests();
    // Both calls answered in the next request (the ungated one first: it ran first).
    assert_eq!(
        requests[1].tool_outputs(),
        ["lookup done", "send_email done"]
    );
    assert_eq!(harness.status(scope.clone()), SessionStatus::Idle);
    // Single-use: the same id again, an unknown id, and the right id on another thread are refused.
    for (thread, id) in [
        ("t1", asked[0].0.as_str()),
        ("t1", "nope"),
        ("t2", asked[0].0.as_str()),
    ] {
        let error = harness.approve(thread, id).await.unwrap_err();
        assert_eq!(error.code(), "APPROVAL_NOT_FOUND");
    }
}

#[tokio::test]
async fn a_rejection_is_the_call_s_output_and_the_tool_never_runs() {
    let delete = Counted::new("delete_file");
    let model = ScriptedModel::with_responses([
        ScriptedResponse::tool_call("c1", "delete_file", json!({"to": "/etc"})),
        ScriptedResponse::text("Understood."),
    ]);
    let harness = harness(&model, vec![delete.tool().needs_approval(true)]);
    let mut events = Events::subscribe(&harness, Scope::default());
    harness
        .execute("Delete it", ExecuteOptions::new())
        .await
        .unwrap();
    let asked = requested(&mut events, 1).await;

    harness
        .reject("__default__", &asked[0].0, "not that directory")
        .await
        .unwrap();
    let turn = events.turn().await;

    assert_eq!(delete.runs(), 0);
    assert_eq!(
        model.requests()[1].tool_outputs(),
        ["Tool call rejected: not that directory"]
    );
    assert!(turn.iter().any(|event| matches!(&**event,
        StreamEvent::Framework(FrameworkEvent::ApprovalDecided { approved: false, reason: Some(reason), .. })
            if reason == "not that directory")));
    assert_eq!(
        harness
            .reject("__default__", &asked[0].0, "again")
            .await
            .unwrap_err()
            .code(),
        "APPROVAL_NOT_FOUND"
    );
}

#[tokio::test]
async fn a_rule_gates_only_the_calls_it_holds_for_and_always_approve_stops_asking() {
    let pay = Counted::new("pay");
    let model = ScriptedModel::with_responses([
        ScriptedResponse::tool_calls(&[
            ("c1", "pay", json!({"amount": 5})),
            ("c2", "pay", json!({"amount": 500})),
        ]),
        ScriptedResponse::text("Paid twice."),
        ScriptedResponse::tool_call("c3", "pay", json!({"amount": 900})),
        ScriptedResponse::text("Paid again."),
    ]);
    let gated = pay
        .tool()
        .needs_approval_when(|args: &Value, _: &ToolContext| args["amount"].as_f64() > Some(100.0));
    let harness = harness(&model, vec![gated]);
    let scope = Scope::thread("shop");
    let mut events = Events::subscribe(&harness, scope.clone());
    harness.execute("Pay", thread("shop")).await.unwrap();

    let asked = requested(&mut events, 1).await;
    let pending = harness.pending_approvals(scope.clone()).await.unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].arguments, json!({"amount": 500}));
    harness.approve_always("shop", &asked[0].0).await.unwrap();
    events.turn().await;
    assert_eq!(pay.runs(), 2);

    // A later turn: the big payment runs without asking.
    harness.execute("Pay more", thread("shop")).await.unwrap();
    let turn = events.turn().await;
    assert_eq!(pay.runs(), 3);
    assert!(!turn.iter().any(|event| matches!(
        &**event,
        StreamEvent::Framework(FrameworkEvent::ApprovalRequested { .. })
    )));
}

#[tokio::test]
async fn a_steer_sent_while_awaiting_approval_is_applied_after_the_round() {
    let email = Counted::new("send_email");
    let model = ScriptedModel::with_responses([
        ScriptedResponse::tool_call("c1", "send_email", json!({"to": "bo@example.com"})),
        ScriptedResponse::text("Done, and noted."),
    ]);
    let harness = harness(&model, vec![email.tool().needs_approval(true)]);
    let mut events = Events::subscribe(&harness, Scope::default());
    harness
        .execute("Email Bo", ExecuteOptions::new())
        .await
        .unwrap();
    let asked = requested(&mut events, 1).await;

    harness
        .execute(
            "Also cc Cy",
            ExecuteOptions::new().delivery_mode(DeliveryMode::BetweenRounds),
        )
        .await
        .unwrap();
    // Held: the waiting call is not skipped for it, and the session still awaits the decision.
    assert!(matches!(
        harness.status(Scope::default()),
        SessionStatus::AwaitingApproval { .. }
    ));
    harness.approve("__default__", &asked[0].0).await.unwrap();
    events.turn().await;

    assert_eq!(email.runs(), 1);
    let requests = model.requests();
    assert_eq!(requests.len(), 2, "the steer joined the running turn");
    assert_eq!(requests[1].tool_outputs(), ["send_email done"]);
    assert!(requests[1].user_texts().contains(&"Also cc Cy".to_owned()));
}

#[tokio::test]
async fn an_abort_answers_every_waiting_call_and_withdraws_its_requests() {
    let email = Counted::new("send_email");
    let model = ScriptedModel::with_responses([
        ScriptedResponse::tool_calls(&[
            ("c1", "send_email", json!({"to": "a@example.com"})),
            ("c2", "send_email", json!({"to": "b@example.com"})),
        ]),
        ScriptedResponse::text("next turn"),
    ]);
    let harness = harness(&model, vec![email.tool().needs_approval(true)]);
    let mut events = Events::subscribe(&harness, Scope::default());
    harness
        .execute("Email both", ExecuteOptions::new())
        .await
        .unwrap();
    let asked = requested(&mut events, 2).await;

    harness.abort(AbortOptions::new().reason("user left")).await;

    assert_eq!(email.runs(), 0);
    assert!(
        harness
            .pending_approvals(Scope::default())
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        harness
            .approve("__default__", &asked[0].0)
            .await
            .unwrap_err()
            .code(),
        "APPROVAL_NOT_FOUND"
    );
    // The history stays valid: both calls have outputs, so the next turn's request is well formed.
    harness
        .execute("Hello again", ExecuteOptions::new())
        .await
        .unwrap();
    guarded("the next turn", harness.agent_response(Scope::default()))
        .await
        .unwrap();
    let outputs = model.requests()[1].tool_outputs();
    assert_eq!(outputs.len(), 2, "{outputs:?}");
    assert!(
        outputs
            .iter()
            .all(|output| output.contains("awaited approval"))
    );
}

#[tokio::test]
async fn other_threads_run_while_one_awaits_approval() {
    let email = Counted::new("send_email");
    let model = ScriptedModel::responding(|request| {
        if request.user_texts().iter().any(|text| text == "Email")
            && request.tool_outputs().is_empty()
        {
            ScriptedResponse::tool_call("c1", "send_email", json!({}))
        } else {
            ScriptedResponse::text("ok")
        }
    });
    let harness = harness(&model, vec![email.tool().needs_approval(true)]);
    let mut waiting = Events::subscribe(&harness, Scope::thread("slow"));
    harness.execute("Email", thread("slow")).await.unwrap();
    let asked = requested(&mut waiting, 1).await;

    harness.execute("Hi", thread("fast")).await.unwrap();
    let fast = guarded(
        "the other thread",
        harness.agent_response(Scope::thread("fast")),
    )
    .await
    .unwrap();
    assert_eq!(fast.text, "ok");
    let pending: Vec<ApprovalRequest> = harness
        .pending_approvals(Scope::thread("slow"))
        .await
        .unwrap();
    assert_eq!(pending.len(), 1);

    harness.approve("slow", &asked[0].0).await.unwrap();
    let slow = guarded(
        "the approved thread",
        harness.agent_response(Scope::thread("slow")),
    )
    .await
    .unwrap();
    assert_eq!(slow.text, "ok");
    assert_eq!(email.runs(), 1);
}

/// A layer asking for approval of `pay` calls above 100.
struct SpendingPolicy;

impl noetic_core::ContextLayer for SpendingPolicy {
    fn id(&self) -> &str {
        "spending-policy"
    }

    fn requires_approval(
        &self,
        _ctx: noetic_core::layer::LayerCtx<'_>,
        call: noetic_core::layer::ToolCallView<'_>,
    ) -> bool {
        call.name == "pay" && call.arguments["amount"].as_f64() > Some(100.0)
    }
}

#[tokio::test]
async fn a_layer_can_ask_for_approval_of_a_tool_that_does_not() {
    let pay = Counted::new("pay");
    let model = ScriptedModel::with_responses([
        ScriptedResponse::tool_calls(&[
            ("c1", "pay", json!({"amount": 5})),
            ("c2", "pay", json!({"amount": 500})),
        ]),
        ScriptedResponse::text("Paid."),
    ]);
    let harness = AgentHarness::builder("agent")
        .provider("scripted", model.clone())
        .context_layers([Arc::new(SpendingPolicy) as Arc<dyn noetic_core::ContextLayer>])
        .agent_graph(call_model("llm").model("m").tool(pay.tool()))
        .build()
        .unwrap();
    let mut events = Events::subscribe(&harness, Scope::default());
    harness.execute("Pay", ExecuteOptions::new()).await.unwrap();

    let asked = requested(&mut events, 1).await;
    let pending = harness.pending_approvals(Scope::default()).await.unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].arguments, json!({"amount": 500}));
    harness.approve("__default__", &asked[0].0).await.unwrap();
    events.turn().await;
    assert_eq!(pay.runs(), 2);
}
