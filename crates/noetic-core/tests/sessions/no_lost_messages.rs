//! No message is ever lost (acceptance point 5): random interleavings of `execute` in every delivery
//! mode, `abort` and turn progress over several threads. Every message id then appears exactly once in
//! the session events (a turn's input or an applied/dropped steer) and exactly once in the history, and
//! no message overtakes one sent before it on its thread unless it is a steer or an interrupt (which
//! exist to jump the queue) of another mode.

use std::collections::HashMap;
use std::sync::Arc;

use noetic_core::item::Item;
use noetic_core::{
    AbortOptions, AgentHarness, DeliveryMode, ExecuteOptions, FrameworkEvent, Role, Scope,
    StreamEvent, Tool, ToolContext,
};
use noetic_test_support::{ScriptedResponse, YieldingModel};
use proptest::prelude::*;
use serde_json::json;

use crate::support::{Events, NoArgs, guarded, llm_with};

const THREADS: [&str; 3] = ["t0", "t1", "t2"];

#[derive(Debug, Clone)]
enum Op {
    /// `execute` on a thread with a mode (the message id and text are `m<n>`, in send order).
    Execute { thread: usize, mode: DeliveryMode },
    /// `abort` on a thread (waits for its running turn, if any, to end).
    Abort { thread: usize },
    /// Lets the runners make progress: each model event and each tool call yields once.
    Progress { yields: u8 },
}

fn mode() -> impl Strategy<Value = DeliveryMode> {
    prop_oneof![
        Just(DeliveryMode::NextTurn),
        Just(DeliveryMode::BetweenRounds),
        Just(DeliveryMode::NextItem),
        Just(DeliveryMode::Interrupt),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => (0..THREADS.len(), mode()).prop_map(|(thread, mode)| Op::Execute { thread, mode }),
        1 => (0..THREADS.len()).prop_map(|thread| Op::Abort { thread }),
        4 => (1..8u8).prop_map(|yields| Op::Progress { yields }),
    ]
}

/// Answers at once, yielding before every event so the test's operations land between them: a
/// request ending with a user message gets a tool call every other time, anything else text.
fn yielding_model() -> YieldingModel {
    YieldingModel::new(|request, call| {
        let after_tool = matches!(request.input.last(), Some(Item::FunctionCallOutput(_)));
        if !after_tool && call.is_multiple_of(2) {
            ScriptedResponse::tool_call(&format!("call-{call}"), "noop", json!({}))
        } else {
            ScriptedResponse::text("ok")
        }
    })
}

fn noop_tool() -> Tool {
    Tool::new(
        "noop",
        "Does nothing",
        |_: NoArgs, _ctx: ToolContext| async move {
            tokio::task::yield_now().await;
            Ok("done".to_owned())
        },
    )
}

/// The message ids the thread's events account for: turn inputs, applied and dropped steers.
fn accounted_ids(events: &[Arc<StreamEvent>]) -> Vec<String> {
    let mut ids = Vec::new();
    for event in events {
        match &**event {
            StreamEvent::Framework(
                FrameworkEvent::TurnStarted { message_ids, .. }
                | FrameworkEvent::SteerApplied { message_ids, .. },
            ) => ids.extend(message_ids.iter().cloned()),
            StreamEvent::Framework(FrameworkEvent::SteerDropped { message_id, .. }) => {
                ids.push(message_id.clone());
            }
            StreamEvent::Lagged { skipped } => panic!("the test subscriber lagged by {skipped}"),
            _ => {}
        }
    }
    ids
}

async fn run(ops: Vec<Op>) -> std::result::Result<(), TestCaseError> {
    let harness = AgentHarness::builder("agent")
        .provider("yielding", yielding_model())
        .agent_graph(llm_with(vec![noop_tool()]))
        .build()
        .unwrap();
    let mut streams: Vec<Events> = THREADS
        .iter()
        .map(|thread| Events::subscribe(&harness, Scope::thread(*thread)))
        .collect();
    let mut sent: Vec<Vec<(String, DeliveryMode)>> = vec![Vec::new(); THREADS.len()];
    let mut next = 0;
    for op in ops {
        match op {
            Op::Execute { thread, mode } => {
                let id = format!("m{next}");
                next += 1;
                let options = ExecuteOptions::default()
                    .thread_id(THREADS[thread])
                    .message_id(id.as_str())
                    .delivery_mode(mode);
                harness.execute(id.as_str(), options).await.unwrap();
                sent[thread].push((id, mode));
            }
            Op::Abort { thread } => {
                let options = AbortOptions::new()
                    .thread_id(THREADS[thread])
                    .reason("test");
                guarded("abort", harness.abort(options)).await;
            }
            Op::Progress { yields } => {
                for _ in 0..yields {
                    tokio::task::yield_now().await;
                }
            }
        }
    }
    for (thread, messages) in THREADS.iter().zip(&sent) {
        if !messages.is_empty() {
            // The last turn may have been aborted: only the waiting matters here.
            let _ = guarded(
                "the thread to finish",
                harness.agent_response(Scope::thread(*thread)),
            )
            .await;
        }
    }
    guarded("every runner to stop", harness.wait_idle()).await;

    for (index, thread) in THREADS.iter().enumerate() {
        let sent = &sent[index];
        let mut expected: Vec<String> = sent.iter().map(|(id, _)| id.clone()).collect();
        expected.sort();

        let mut accounted = accounted_ids(&streams[index].ready());
        accounted.sort();
        prop_assert_eq!(
            &accounted,
            &expected,
            "thread {}: ids in the events",
            thread
        );

        // The history holds every message exactly once (user messages are the test's only ones).
        let arrived: Vec<String> = harness
            .session_history(Scope::thread(*thread))
            .iter()
            .filter(|item| item.role() == Some(Role::User))
            .filter_map(Item::text)
            .collect();
        let mut in_history = arrived.clone();
        in_history.sort();
        prop_assert_eq!(
            &in_history,
            &expected,
            "thread {}: ids in the history",
            thread
        );

        // Send order: a message only overtakes an earlier one when it is a steer or an interrupt of
        // another mode.
        let position: HashMap<&str, usize> = arrived
            .iter()
            .enumerate()
            .map(|(at, id)| (id.as_str(), at))
            .collect();
        for (earlier_index, (earlier, earlier_mode)) in sent.iter().enumerate() {
            for (later, later_mode) in &sent[earlier_index + 1..] {
                if position[later.as_str()] < position[earlier.as_str()] {
                    prop_assert!(
                        *later_mode != DeliveryMode::NextTurn && later_mode != earlier_mode,
                        "thread {}: {} ({:?}) overtook {} ({:?}); arrival order {:?}",
                        thread,
                        later,
                        later_mode,
                        earlier,
                        earlier_mode,
                        arrived
                    );
                }
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Deterministic interleavings: one thread, paused time.
    #[test]
    fn no_message_is_lost_across_random_interleavings(ops in prop::collection::vec(op(), 1..30)) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap();
        runtime.block_on(run(ops))?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// The same on worker threads, where a message can race a turn's end for real.
    #[test]
    fn no_message_is_lost_on_a_multi_thread_runtime(ops in prop::collection::vec(op(), 1..30)) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(3)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(run(ops))?;
    }
}
