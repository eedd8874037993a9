//! An ACP permission request is never answered on a dead connection: a durable thread whose ACP
//! turn waits for a person, then a crash (the harness's runtime dropped), then a new harness on the
//! same store. The old approval id is refused (`APPROVAL_NOT_FOUND`); the resumed turn runs the
//! agent again, which asks again under a new id; approving that one finishes the turn. The first
//! agent's process is gone.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt as _;
use noetic_acp::AcpClient;
use noetic_core::acp::AcpAgentCommand;
use noetic_core::{
    AgentHarness, Error, ExecuteOptions, FrameworkEvent, KvDurableStore, ResponseEvent, Scope,
    StreamEvent, acp_agent,
};
use noetic_platform_unix::LocalFs;
use serde_json::Value;

const THREAD: &str = "t";

fn harness(store: &Arc<KvDurableStore>, root: &Path, command: &AcpAgentCommand) -> AgentHarness {
    AgentHarness::builder("acp-restart")
        .fs(LocalFs::rooted(root).expect("fs"))
        .acp_runtime(AcpClient::new())
        .acp_agent("scripted", command.clone())
        .agent_graph(
            acp_agent::<Value, Value>("agent")
                .agent("scripted")
                .ask()
                .cancel_grace(Duration::from_secs(1)),
        )
        .durable(store.clone())
        .lease_ttl(Duration::from_millis(200))
        .build()
        .expect("harness")
}

/// Waits (at most 30 s) on the thread's events for an approval request; returns its id and the pid
/// the agent said before asking.
async fn wait_for_approval(
    mut events: futures_util::stream::BoxStream<'static, Arc<StreamEvent>>,
) -> (String, u32) {
    let mut text = String::new();
    tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(event) = events.next().await {
            match event.as_ref() {
                StreamEvent::Sdk(ResponseEvent::OutputTextDelta { delta, .. }) => {
                    text.push_str(delta);
                }
                StreamEvent::Framework(FrameworkEvent::ApprovalRequested {
                    approval_id, ..
                }) => {
                    let pid = text
                        .rsplit("pid: ")
                        .next()
                        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
                        .and_then(|digits| digits.parse().ok())
                        .expect("the agent said its pid first");
                    return (approval_id.clone(), pid);
                }
                _ => {}
            }
        }
        panic!("the event stream ended");
    })
    .await
    .expect("an approval request within 30 s")
}

/// Not running: gone, or a zombie (killed when its harness's runtime was dropped; with that runtime
/// gone, reaping it is left to the next one's orphan reaper).
fn dead(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(") ")
            .next()
            .is_some_and(|rest| rest.starts_with('Z')),
    }
}

/// Whether `pid` is [`dead`] within `limit`. The first agent was sent SIGKILL when its runtime was
/// dropped; the kernel ends it when it is next scheduled, an event nothing here can wait on, so this
/// looks at `/proc` every 10 ms, for `limit` at most.
fn dies_within(pid: u32, limit: Duration) -> bool {
    let deadline = std::time::Instant::now() + limit;
    loop {
        if dead(pid) {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn an_approval_after_a_restart_is_refused_and_the_turn_reruns_and_asks_again() {
    let agent = noetic_test_support::scripted_agent_or_skip!();
    let (program, args) = agent.command();
    let command = AcpAgentCommand::new(program, args);
    let dir = tempfile::tempdir().expect("dir");
    let root = dir.path().canonicalize().expect("root");
    let store = Arc::new(KvDurableStore::in_memory());

    // Before the crash: the turn waits for a person.
    let (old_id, old_pid) = {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("runtime");
        let found = runtime.block_on(async {
            let harness = harness(&store, &root, &command);
            harness
                .execute(
                    "pid\nperm p1 execute",
                    ExecuteOptions::new().thread_id(THREAD).message_id("m1"),
                )
                .await
                .expect("accepted");
            // The running turn's events from its start (`events` replays what the session keeps).
            let found = wait_for_approval(harness.events(Scope::thread(THREAD))).await;
            // The harness is not shut down: the crash is the runtime going away with it.
            std::mem::forget(harness);
            found
        });
        // Dropping the runtime drops every task of the turn, the agent's connection with them.
        runtime.shutdown_timeout(Duration::from_secs(5));
        found
    };

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        assert!(
            dies_within(old_pid, Duration::from_secs(2)),
            "the first agent ({old_pid}) outlived its harness: {:?}",
            std::fs::read_to_string(format!("/proc/{old_pid}/stat"))
        );
        let harness = harness(&store, &root, &command);
        // The crashed harness's thread lease lives out its TTL; then this harness reads the thread
        // back and resumes its turn: the agent runs again and asks again.
        match harness.load_thread(THREAD).await {
            Ok(()) => {}
            Err(Error::LeaseHeld { expires_at_ms, .. }) => {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .expect("clock")
                    .as_millis() as u64;
                tokio::time::sleep(Duration::from_millis(
                    expires_at_ms.saturating_sub(now) + 20,
                ))
                .await;
                harness
                    .load_thread(THREAD)
                    .await
                    .expect("read back once the lease expired");
            }
            Err(error) => panic!("{error}"),
        }
        let (new_id, new_pid) = wait_for_approval(harness.events(Scope::thread(THREAD))).await;
        assert_ne!(new_id, old_id);
        assert_ne!(new_pid, old_pid);
        let error = harness
            .approve(THREAD, &old_id)
            .await
            .expect_err("the old request has no connection to answer on");
        assert_eq!(error.code(), "APPROVAL_NOT_FOUND", "{error}");
        assert_eq!(
            harness
                .pending_approvals(Scope::thread(THREAD))
                .await
                .expect("listed")
                .iter()
                .map(|request| request.approval_id.clone())
                .collect::<Vec<_>>(),
            std::slice::from_ref(&new_id),
            "only the live request is listed"
        );
        harness.approve(THREAD, &new_id).await.expect("approved");
        let response = tokio::time::timeout(
            Duration::from_secs(30),
            harness.agent_response(Scope::thread(THREAD)),
        )
        .await
        .expect("the turn ends within 30 s")
        .expect("the turn ends well");
        let prompts = response
            .items
            .iter()
            .filter(|item| item.role() == Some(noetic_core::Role::User))
            .count();
        assert_eq!(
            prompts, 1,
            "the turn's message is in the history once: {:?}",
            response.items
        );
        let text = response.text;
        assert!(text.ends_with("permission: selected allow-once"), "{text}");
        assert!(dead(new_pid));
    });
}
