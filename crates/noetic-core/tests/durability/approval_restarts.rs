//! Approvals across restarts (acceptance point 2 of the approvals issue): random sequences of
//! execute, approve, reject, steer, abort and *restart* (the harness's runtime dropped mid-flight, as
//! a crash; a new harness on the same store reads the thread back). Then: every function call has
//! exactly one output, the gated tool never ran more often for an approval id than that id was
//! approved, and every accepted message is in the history once.

use std::collections::HashMap;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use noetic_core::item::Item;
use noetic_core::{
    AbortOptions, AgentHarness, DeliveryMode, Error, ExecuteOptions, KvDurableStore, Role, Scope,
    Tool, ToolContext, ToolError, call_model,
};
use noetic_test_support::{ScriptedResponse, YieldingModel};
use proptest::prelude::*;
use serde_json::{Value, json};

const THREAD: &str = "t";

#[derive(Debug, Clone)]
enum Op {
    Execute { mode: DeliveryMode },
    Approve { pick: usize },
    Reject { pick: usize },
    Abort,
    Progress { yields: u8 },
    Restart,
}

fn op() -> impl Strategy<Value = Op> {
    let mode = prop_oneof![
        Just(DeliveryMode::NextTurn),
        Just(DeliveryMode::BetweenRounds),
        Just(DeliveryMode::NextItem),
    ];
    prop_oneof![
        4 => mode.prop_map(|mode| Op::Execute { mode }),
        3 => (0..3usize).prop_map(|pick| Op::Approve { pick }),
        2 => (0..3usize).prop_map(|pick| Op::Reject { pick }),
        1 => Just(Op::Abort),
        4 => (1..24u8).prop_map(|yields| Op::Progress { yields }),
        1 => Just(Op::Restart),
    ]
}

/// Answers a user message with a round calling `gated` and `free`, anything else with text,
/// yielding before every event. Call ids come from a counter shared by every harness of the case, so
/// no two rounds share one.
fn gating_model(calls: Arc<AtomicUsize>) -> YieldingModel {
    YieldingModel::numbered(calls, |request, call| {
        if matches!(request.input.last(), Some(Item::FunctionCallOutput(_))) {
            ScriptedResponse::text("ok")
        } else {
            ScriptedResponse::tool_calls(&[
                (&format!("g-{call}"), "gated", json!({})),
                (&format!("f-{call}"), "free", json!({})),
            ])
        }
    })
}

/// What every harness of one case shares: the store, the model's counter, and the counts.
#[derive(Clone)]
struct Shared {
    store: Arc<KvDurableStore>,
    calls: Arc<AtomicUsize>,
    /// Runs of the gated tool, per approval id (its idempotency key).
    runs: Arc<Mutex<HashMap<String, usize>>>,
    /// Successful approvals, per approval id.
    approvals: Arc<Mutex<HashMap<String, usize>>>,
    /// The messages accepted, in order.
    sent: Arc<Mutex<Vec<String>>>,
}

impl Shared {
    fn harness(&self) -> AgentHarness {
        let runs = self.runs.clone();
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
            |_args: Value, _ctx: ToolContext| async move { Ok::<_, ToolError>(json!("free ran")) },
        )
        .unwrap();
        AgentHarness::builder("approvals")
            .provider("gating", gating_model(self.calls.clone()))
            .agent_graph(call_model("llm").model("m").tool(gated).tool(free))
            .durable(self.store.clone())
            .lease_ttl(Duration::from_millis(150))
            .build()
            .unwrap()
    }

    async fn approve(&self, harness: &AgentHarness, id: &str) -> bool {
        let approved = harness.approve(THREAD, id).await.is_ok();
        if approved {
            *self
                .approvals
                .lock()
                .unwrap()
                .entry(id.to_owned())
                .or_default() += 1;
        }
        approved
    }
}

/// Reads the thread back once a crashed holder's lease has expired.
async fn load(harness: &AgentHarness) {
    for _ in 0..500 {
        match harness.load_thread(THREAD).await {
            Ok(()) => return,
            Err(Error::LeaseHeld { .. }) => tokio::time::sleep(Duration::from_millis(10)).await,
            Err(error) => panic!("{error}"),
        }
    }
    panic!("the lease never expired");
}

/// Runs `ops` on a fresh harness on its own runtime, which is dropped at the end: a crash.
fn epoch(shared: &Shared, ops: Vec<Op>) {
    let shared = shared.clone();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let harness = shared.harness();
            load(&harness).await;
            let scope = Scope::thread(THREAD);
            for op in ops {
                match op {
                    Op::Execute { mode } => {
                        let id = format!("m{}", shared.sent.lock().unwrap().len());
                        let options = ExecuteOptions::new()
                            .thread_id(THREAD)
                            .message_id(id.as_str())
                            .delivery_mode(mode);
                        // Accepted only once `execute` returns: a harness that lost its lease to
                        // a slow renewal refuses it, and then it is not expected anywhere.
                        if harness.execute(id.as_str(), options).await.is_ok() {
                            shared.sent.lock().unwrap().push(id);
                        }
                    }
                    Op::Approve { pick } | Op::Reject { pick } => {
                        let pending = harness.pending_approvals(scope.clone()).await.unwrap();
                        let Some(request) = pending.get(pick % pending.len().max(1)) else {
                            continue;
                        };
                        if matches!(op, Op::Approve { .. }) {
                            shared.approve(&harness, &request.approval_id).await;
                        } else {
                            let _ = harness.reject(THREAD, &request.approval_id, "no").await;
                        }
                    }
                    Op::Abort => {
                        let options = AbortOptions::new().thread_id(THREAD).reason("test");
                        harness.abort(options).await;
                    }
                    Op::Progress { yields } => {
                        for _ in 0..yields {
                            tokio::task::yield_now().await;
                        }
                    }
                    Op::Restart => unreachable!("epochs are split at restarts"),
                }
            }
        });
        drop(runtime);
    })
    .join()
    .unwrap();
}

fn check(ops: Vec<Op>) -> std::result::Result<(), TestCaseError> {
    let shared = Shared {
        store: Arc::new(KvDurableStore::in_memory()),
        calls: Arc::default(),
        runs: Arc::default(),
        approvals: Arc::default(),
        sent: Arc::default(),
    };
    for ops in ops.split(|op| matches!(op, Op::Restart)) {
        epoch(&shared, ops.to_vec());
    }
    // The last harness approves whatever still waits until the thread is done.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let history = runtime.block_on(async {
        let harness = shared.harness();
        load(&harness).await;
        let scope = Scope::thread(THREAD);
        tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                for request in harness.pending_approvals(scope.clone()).await.unwrap() {
                    shared.approve(&harness, &request.approval_id).await;
                }
                if harness.status(scope.clone()) == noetic_core::SessionStatus::Idle
                    && harness.queue_len(scope.clone()) == 0
                    && harness
                        .pending_approvals(scope.clone())
                        .await
                        .unwrap()
                        .is_empty()
                {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
        .await
        .expect("the thread settles");
        harness.wait_idle().await;
        harness.session_history(scope)
    });

    let mut outputs: HashMap<&str, usize> = HashMap::new();
    for item in &history {
        if let Item::FunctionCallOutput(output) = item {
            *outputs.entry(output.call_id.as_str()).or_default() += 1;
        }
    }
    for item in &history {
        if let Item::FunctionCall(call) = item {
            prop_assert_eq!(
                outputs.get(call.call_id.as_str()).copied(),
                Some(1),
                "call {} outputs",
                &call.call_id
            );
        }
    }
    let approvals = shared.approvals.lock().unwrap();
    for (id, runs) in shared.runs.lock().unwrap().iter() {
        let approved = approvals.get(id).copied().unwrap_or(0);
        prop_assert!(
            *runs <= approved,
            "{} ran {} times on {} approvals",
            id,
            runs,
            approved
        );
    }
    let mut arrived: Vec<String> = history
        .iter()
        .filter(|item| item.role() == Some(Role::User))
        .filter_map(Item::text)
        .collect();
    arrived.sort();
    let mut sent = shared.sent.lock().unwrap().clone();
    sent.sort();
    prop_assert_eq!(arrived, sent);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn approvals_survive_random_restarts_with_every_call_answered_and_none_run_unapproved(
        ops in prop::collection::vec(op(), 1..24)
    ) {
        check(ops)?;
    }
}
