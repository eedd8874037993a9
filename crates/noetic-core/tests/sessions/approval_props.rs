//! Approvals under random interleavings (acceptance point 2, in memory): `execute` in every delivery
//! mode, approve, reject (of pending ids and of stale ones), abort and turn progress. Then: no
//! function call lacks an output, no gated call ran unless approved and none ran twice, and no
//! message was lost.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use noetic_core::item::Item;
use noetic_core::model::ModelRequest;
use noetic_core::{
    AbortOptions, AgentHarness, DeliveryMode, ExecuteOptions, Role, Scope, Tool, ToolContext,
    ToolError,
};
use noetic_test_support::{ScriptedResponse, YieldingModel};
use proptest::prelude::*;
use serde_json::{Value, json};

use crate::support::{guarded, llm_with};

#[derive(Debug, Clone)]
enum Op {
    Execute {
        mode: DeliveryMode,
    },
    /// Approves the `pick`-th pending request (modulo their count), or a stale id when none waits.
    Approve {
        pick: usize,
    },
    /// Rejects the `pick`-th pending request, likewise.
    Reject {
        pick: usize,
    },
    Abort,
    Progress {
        yields: u8,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let mode = prop_oneof![
        Just(DeliveryMode::NextTurn),
        Just(DeliveryMode::BetweenRounds),
        Just(DeliveryMode::NextItem),
        Just(DeliveryMode::Interrupt),
    ];
    prop_oneof![
        4 => mode.prop_map(|mode| Op::Execute { mode }),
        3 => (0..4usize).prop_map(|pick| Op::Approve { pick }),
        2 => (0..4usize).prop_map(|pick| Op::Reject { pick }),
        1 => Just(Op::Abort),
        4 => (1..24u8).prop_map(|yields| Op::Progress { yields }),
    ]
}

/// Answers a user message with a round calling `gated` and `free`, anything else with text;
/// yields before every event so the test's operations land between them.
fn gating_model() -> YieldingModel {
    YieldingModel::new(gating_answer)
}

fn gating_answer(request: &ModelRequest<'_>, call: usize) -> ScriptedResponse {
    if matches!(request.input.last(), Some(Item::FunctionCallOutput(_))) {
        ScriptedResponse::text("ok")
    } else {
        ScriptedResponse::tool_calls(&[
            (&format!("g-{call}"), "gated", json!({"n": call})),
            (&format!("f-{call}"), "free", json!({})),
        ])
    }
}

/// Every run of the gated tool, by idempotency key (the approval id).
type Runs = Arc<Mutex<HashMap<String, usize>>>;

fn tools(runs: &Runs) -> Vec<Tool> {
    let runs = runs.clone();
    let gated = Tool::dynamic(
        "gated",
        "Needs approval",
        json!({"type": "object"}),
        move |_args: Value, ctx: ToolContext| {
            let runs = runs.clone();
            async move {
                tokio::task::yield_now().await;
                *runs
                    .lock()
                    .unwrap()
                    .entry(ctx.idempotency_key())
                    .or_default() += 1;
                Ok::<_, ToolError>(json!("gated ran"))
            }
        },
    )
    .unwrap()
    .needs_approval(true);
    let free = Tool::dynamic(
        "free",
        "Runs at once",
        json!({"type": "object"}),
        |_args: Value, _ctx: ToolContext| async move {
            tokio::task::yield_now().await;
            Ok::<_, ToolError>(json!("free ran"))
        },
    )
    .unwrap();
    vec![gated, free]
}

async fn run(ops: Vec<Op>) -> std::result::Result<(), TestCaseError> {
    let runs: Runs = Arc::default();
    let harness = AgentHarness::builder("agent")
        .provider("gating", gating_model())
        .agent_graph(llm_with(tools(&runs)))
        .build()
        .unwrap();
    let thread = "t";
    let scope = Scope::thread(thread);
    let mut sent = Vec::new();
    let mut approved: HashSet<String> = HashSet::new();
    let mut decided: HashSet<String> = HashSet::new();
    for op in ops {
        match op {
            Op::Execute { mode } => {
                let id = format!("m{}", sent.len());
                let options = ExecuteOptions::default()
                    .thread_id(thread)
                    .message_id(id.as_str())
                    .delivery_mode(mode);
                harness.execute(id.as_str(), options).await.unwrap();
                sent.push(id);
            }
            Op::Approve { pick } | Op::Reject { pick } => {
                let pending = harness.pending_approvals(scope.clone()).await.unwrap();
                let id = match pending.get(pick % pending.len().max(1)) {
                    Some(request) => request.approval_id.clone(),
                    // A stale id: one decided before, or none at all.
                    None => decided
                        .iter()
                        .next()
                        .cloned()
                        .unwrap_or_else(|| "none".to_owned()),
                };
                let outcome = if matches!(op, Op::Approve { .. }) {
                    harness.approve(thread, &id).await
                } else {
                    harness.reject(thread, &id, "no").await
                };
                match outcome {
                    Ok(_) => {
                        // Decided once: never again.
                        prop_assert!(decided.insert(id.clone()), "{} decided twice", id);
                        if matches!(op, Op::Approve { .. }) {
                            approved.insert(id);
                        }
                    }
                    Err(error) => prop_assert_eq!(error.code(), "APPROVAL_NOT_FOUND"),
                }
            }
            Op::Abort => {
                let options = AbortOptions::new().thread_id(thread).reason("test");
                guarded("abort", harness.abort(options)).await;
            }
            Op::Progress { yields } => {
                for _ in 0..yields {
                    tokio::task::yield_now().await;
                }
            }
        }
    }
    // Drain: approve whatever still waits until the thread is done.
    guarded("the thread to finish", async {
        loop {
            for request in harness.pending_approvals(scope.clone()).await.unwrap() {
                if harness.approve(thread, &request.approval_id).await.is_ok() {
                    approved.insert(request.approval_id);
                }
            }
            if harness
                .pending_approvals(scope.clone())
                .await
                .unwrap()
                .is_empty()
                && harness.status(scope.clone()) == noetic_core::SessionStatus::Idle
                && harness.queue_len(scope.clone()) == 0
            {
                break;
            }
            tokio::task::yield_now().await;
        }
    })
    .await;
    guarded("every runner to stop", harness.wait_idle()).await;

    let history = harness.session_history(scope.clone());
    // Every call has exactly one output.
    let calls: Vec<&str> = history
        .iter()
        .filter_map(|item| match item {
            Item::FunctionCall(call) => Some(call.call_id.as_str()),
            _ => None,
        })
        .collect();
    let mut outputs: HashMap<&str, usize> = HashMap::new();
    for item in &history {
        if let Item::FunctionCallOutput(output) = item {
            *outputs.entry(output.call_id.as_str()).or_default() += 1;
        }
    }
    for call in &calls {
        prop_assert_eq!(outputs.get(call).copied(), Some(1), "call {} outputs", call);
    }
    // The gated tool ran only for approved ids, once each.
    for (key, count) in runs.lock().unwrap().iter() {
        prop_assert_eq!(*count, 1, "{} ran {} times", key, count);
        prop_assert!(approved.contains(key), "{} ran without approval", key);
    }
    // No message lost: each exactly once in the history.
    let mut arrived: Vec<String> = history
        .iter()
        .filter(|item| item.role() == Some(Role::User))
        .filter_map(Item::text)
        .collect();
    arrived.sort();
    let mut expected = sent.clone();
    expected.sort();
    prop_assert_eq!(arrived, expected);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn approvals_keep_every_call_answered_and_run_only_what_was_approved_once(
        ops in prop::collection::vec(op(), 1..30)
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        runtime.block_on(run(ops))?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 32, ..ProptestConfig::default() })]

    #[test]
    fn the_same_on_a_multi_thread_runtime(ops in prop::collection::vec(op(), 1..30)) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(3)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(run(ops))?;
    }
}
