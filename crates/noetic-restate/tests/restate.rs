//! Threads on a real Restate server (the pinned `restate-server`, started per test on loopback by
//! noetic-test-support): a react-2 turn end to end with its rounds and call journaled, an idempotent
//! execute, and a crash of the Restate server mid-round after which only the round in flight is
//! paid again and the recorded call does not run again.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use noetic_core::{AgentHarness, Item, Tool, ToolContext, ToolError, call_model};
use noetic_restate::{RestateClient, RestateHost, SteerOutcome};
use noetic_test_support::restate::RestateServer;
use noetic_test_support::{RecordedRequest, ScriptedModel, ScriptedResponse, restate_or_skip};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use tokio::sync::{mpsc, oneshot};

const WAIT: Duration = Duration::from_secs(60);

#[derive(Deserialize, JsonSchema)]
struct EchoArgs {
    /// What to echo.
    text: String,
}

fn echo_tool(runs: Arc<AtomicUsize>) -> Tool {
    Tool::new(
        "echo",
        "Echoes the text",
        move |args: EchoArgs, _: ToolContext| {
            let runs = runs.clone();
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok::<_, ToolError>(args.text)
            }
        },
    )
}

/// One `call_model` step offering `tool`, on `model`.
fn harness_with(model: impl noetic_core::ModelProvider, tool: Tool) -> AgentHarness {
    AgentHarness::builder("restate")
        .provider("scripted", model)
        .agent_graph(
            call_model("chat")
                .model("scripted-model")
                .instructions("Use echo, then answer.")
                .tool(tool),
        )
        .build()
        .unwrap()
}

fn harness(model: &ScriptedModel, runs: &Arc<AtomicUsize>) -> AgentHarness {
    harness_with(model.clone(), echo_tool(runs.clone()))
}

/// A react-2 model: round 1 calls `echo`, round 2 answers with what the tool said. The request
/// numbered `stall_at` signals `stalled` and never ends.
fn react_model(
    stall_at: Option<usize>,
    stalled: Option<mpsc::UnboundedSender<()>>,
) -> ScriptedModel {
    let served = AtomicUsize::new(0);
    ScriptedModel::responding(move |request: &RecordedRequest| {
        let index = served.fetch_add(1, Ordering::SeqCst);
        if Some(index) == stall_at {
            if let Some(stalled) = &stalled {
                let _ = stalled.send(());
            }
            return ScriptedResponse::stall_after(Vec::new());
        }
        match request.tool_outputs().last() {
            None => ScriptedResponse::tool_call("call_1", "echo", json!({"text": "journaled"})),
            Some(output) => ScriptedResponse::text(&format!("the tool said {output}")),
        }
    })
}

/// The server, the service endpoint registered with it, and a client.
struct Deployed {
    server: RestateServer,
    client: RestateClient,
    _stop: oneshot::Sender<()>,
}

async fn deploy(server: RestateServer, harness: AgentHarness) -> Deployed {
    deploy_host(server, RestateHost::new(harness)).await
}

async fn deploy_host(server: RestateServer, host: RestateHost) -> Deployed {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(host.serve(listener, stopped));
    let client = RestateClient::new(server.ingress_url(), server.admin_url());
    client
        .register(&format!("http://127.0.0.1:{port}"))
        .await
        .unwrap_or_else(|error| panic!("{error}\n{}", server.log_tail()));
    Deployed {
        server,
        client,
        _stop: stop,
    }
}

/// A SQLite store in a temporary directory (kept while the directory lives).
async fn sqlite_store() -> (tempfile::TempDir, noetic_storage_sqlite::SqliteStorage) {
    let dir = tempfile::tempdir().unwrap();
    let store = noetic_storage_sqlite::SqliteStorage::open(dir.path().join("threads.db"))
        .await
        .unwrap();
    (dir, store)
}

/// A harness on `store`, as `noetic serve` runs: it reads the threads and follows their event
/// logs, and runs no turn of its own.
fn reader(store: &noetic_storage_sqlite::SqliteStorage) -> AgentHarness {
    AgentHarness::builder("reader")
        .provider("scripted", ScriptedModel::new())
        .agent_graph(call_model("chat").model("scripted-model"))
        .durable(store.clone())
        .shared_threads()
        .build()
        .unwrap()
}

/// Deploys a harness on a paced model (its rounds answered by the test) offering `echo`, whose
/// runs are counted.
async fn deploy_paced(
    server: RestateServer,
) -> (Deployed, noetic_test_support::PacedModel, Arc<AtomicUsize>) {
    let runs = Arc::new(AtomicUsize::new(0));
    let model = noetic_test_support::PacedModel::new();
    let deployed = deploy(server, harness_with(model.clone(), echo_tool(runs.clone()))).await;
    (deployed, model, runs)
}

/// The model's next round, asked within `WAIT` (`what` names it when it is not).
async fn asked(
    model: &noetic_test_support::PacedModel,
    what: &str,
) -> noetic_test_support::PacedCall {
    tokio::time::timeout(WAIT, model.next_call())
        .await
        .unwrap_or_else(|_| panic!("{what}: no round asked within {WAIT:?}"))
}

fn texts(items: &[Item]) -> Vec<String> {
    items
        .iter()
        .map(|item| serde_json::to_value(item).unwrap())
        .map(|value| {
            let kind = value["type"].as_str().unwrap_or_default().to_owned();
            match kind.as_str() {
                "function_call" => format!("call {}", value["name"].as_str().unwrap()),
                "function_call_output" => format!("output {}", value["output"]),
                _ => format!(
                    "{}: {}",
                    value["role"].as_str().unwrap_or_default(),
                    value["content"][0]["text"].as_str().unwrap_or_default()
                ),
            }
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_react_turn_runs_on_restate_once_per_message_id_with_its_history_kept() {
    let server = restate_or_skip!();
    let runs = Arc::new(AtomicUsize::new(0));
    let model = react_model(None, None);
    let deployed = deploy(server, harness(&model, &runs)).await;
    let client = &deployed.client;

    let turn = client.execute("t1", "echo it", "m-1").await.unwrap();
    assert!(!turn.duplicate);
    let output = client
        .output(&turn, WAIT)
        .await
        .unwrap_or_else(|error| panic!("{error}\n{}", deployed.server.log_tail()));
    assert_eq!(output.text, "the tool said journaled");
    assert_eq!(model.request_count(), 2);
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    // The same message again is the same turn: deduplicated, nothing run.
    let again = client.execute("t1", "echo it", "m-1").await.unwrap();
    assert!(again.duplicate);
    assert_eq!(again.invocation_id, turn.invocation_id);
    assert_eq!(client.output(&again, WAIT).await.unwrap(), output);
    assert_eq!(model.request_count(), 2);

    let history = client.history("t1").await.unwrap();
    assert_eq!(
        texts(&history),
        [
            "user: echo it",
            "call echo",
            "output \"journaled\"",
            "assistant: the tool said journaled"
        ]
    );
    assert!(client.history("never-used").await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restate_server_killed_mid_round_replays_the_recorded_round_and_call_and_pays_only_the_one_in_flight()
 {
    let server = restate_or_skip!();
    let runs = Arc::new(AtomicUsize::new(0));
    let (stalled_tx, mut stalled) = mpsc::unbounded_channel();
    // Round 2's first request never ends: the server dies while it streams.
    let model = react_model(Some(1), Some(stalled_tx));
    // The threads' record in a SQLite store: complete after the crash, each event in it once.
    let (_dir, store) = sqlite_store().await;
    let host = RestateHost::new(harness(&model, &runs)).store(Arc::new(store.clone()));
    let mut deployed = deploy_host(server, host).await;
    let turn = deployed
        .client
        .execute("t1", "echo it", "m-1")
        .await
        .unwrap();
    tokio::time::timeout(WAIT, stalled.recv())
        .await
        .expect("round 2 started");
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the call ran before the crash"
    );

    deployed.server.kill();
    deployed
        .server
        .restart()
        .unwrap_or_else(|error| panic!("{error}"));
    let output = deployed
        .client
        .output(&turn, WAIT)
        .await
        .unwrap_or_else(|error| panic!("{error}\n{}", deployed.server.log_tail()));
    assert_eq!(output.text, "the tool said journaled");
    assert_eq!(
        model.request_count(),
        3,
        "round 1 replayed from the journal; round 2 paid once more"
    );
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the recorded call did not run again"
    );
    assert_eq!(
        texts(&deployed.client.history("t1").await.unwrap()),
        [
            "user: echo it",
            "call echo",
            "output \"journaled\"",
            "assistant: the tool said journaled"
        ]
    );
    let logged = logged_types(&store, "t1").await;
    let count = |kind: &str| logged.iter().filter(|seen| *seen == kind).count();
    assert_eq!(
        (
            count("turn_started"),
            count("model_call_started"),
            count("tool_call_started"),
            count("turn_completed")
        ),
        (1, 2, 1, 1),
        "the crashed round's events are written by the attempt that journaled it: {logged:?}"
    );
}

/// The framework events' types in `thread`'s event log, in order.
async fn logged_types(store: &noetic_storage_sqlite::SqliteStorage, thread: &str) -> Vec<String> {
    use noetic_core::adapter::durable::DurableStore as _;
    store
        .read_log(&format!("thread/{thread}/events"), 0)
        .await
        .unwrap()
        .iter()
        .filter_map(|entry| {
            let value: serde_json::Value = serde_json::from_slice(&entry.value).unwrap();
            value["framework"]["type"].as_str().map(str::to_owned)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_always_replay_mode_every_step_is_replayed_and_nothing_runs_twice() {
    // Restate suspends the invocation at every journal await and replays it from the top: a
    // turn whose code between steps were not deterministic would fail here.
    let server = restate_or_skip!(noetic_test_support::restate::RestateOptions {
        always_replay: true
    });
    let runs = Arc::new(AtomicUsize::new(0));
    let model = react_model(None, None);
    let deployed = deploy(server, harness(&model, &runs)).await;
    let turn = deployed
        .client
        .execute("t1", "echo it", "m-1")
        .await
        .unwrap();
    let output = deployed
        .client
        .output(&turn, WAIT)
        .await
        .unwrap_or_else(|error| panic!("{error}\n{}", deployed.server.log_tail()));
    assert_eq!(output.text, "the tool said journaled");
    assert_eq!((model.request_count(), runs.load(Ordering::SeqCst)), (2, 1));
    assert_eq!(deployed.client.history("t1").await.unwrap().len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_s_turns_run_one_at_a_time_its_messages_sent_meanwhile_coalesced_and_threads_side_by_side()
 {
    let server = restate_or_skip!();
    let (deployed, model, _) = deploy_paced(server).await;
    let client = &deployed.client;
    let a1 = client.execute("a", "one", "a-1").await.unwrap();
    let round_a1 = asked(&model, "a's first turn").await;
    assert_eq!(round_a1.request.user_texts(), ["one"]);
    // Another thread's turn runs beside it.
    let b1 = client.execute("b", "three", "b-1").await.unwrap();
    let round_b1 = asked(&model, "b's turn, beside a's").await;
    assert_eq!(round_b1.request.user_texts(), ["three"]);
    // Sent while a's turn runs: both wait for a's next turn, one turn, in the order sent.
    let a2 = client.execute("a", "two", "a-2").await.unwrap();
    let a3 = client.execute("a", "four", "a-3").await.unwrap();
    assert_ne!(a2.invocation_id, a1.invocation_id);
    assert_eq!(
        a3.invocation_id, a2.invocation_id,
        "coalesced into one turn"
    );
    let status = client.status("a").await.unwrap();
    assert_eq!(status.running.as_deref(), Some(a1.invocation_id.as_str()));
    assert_eq!(status.next.as_deref(), Some(a2.invocation_id.as_str()));
    let queued: Vec<&str> = status
        .queued_messages
        .iter()
        .map(|message| message.message_id.as_str())
        .collect();
    assert_eq!(queued, ["a-2", "a-3"]);
    // The same message again is the same one, taken once.
    let again = client.execute("a", "two", "a-2").await.unwrap();
    assert!(again.duplicate);
    assert_eq!(again.invocation_id, a2.invocation_id);

    round_b1.send_all(ScriptedResponse::text("b done").into_events());
    drop(round_b1);
    round_a1.send_all(ScriptedResponse::text("a first").into_events());
    drop(round_a1);
    assert_eq!(client.output(&b1, WAIT).await.unwrap().text, "b done");
    assert_eq!(client.output(&a1, WAIT).await.unwrap().text, "a first");
    let round_a2 = asked(&model, "a's next turn").await;
    assert_eq!(
        round_a2.request.user_texts(),
        ["one", "two", "four"],
        "the next turn carries both messages, after the first turn's"
    );
    round_a2.send_all(ScriptedResponse::text("a second").into_events());
    drop(round_a2);
    assert_eq!(client.output(&a2, WAIT).await.unwrap().text, "a second");
    assert_eq!(client.output(&a3, WAIT).await.unwrap().text, "a second");
    assert_eq!(
        texts(&client.history("a").await.unwrap()),
        [
            "user: one",
            "assistant: a first",
            "user: two",
            "user: four",
            "assistant: a second"
        ]
    );
    let status = client.status("a").await.unwrap();
    assert_eq!((status.running, status.next, status.turns), (None, None, 2));
    assert_eq!(model.call_count(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abort_cuts_the_round_in_flight_at_once_and_nothing_after_it_runs() {
    let server = restate_or_skip!();
    let (deployed, model, runs) = deploy_paced(server).await;
    let client = &deployed.client;
    let turn = client.execute("t1", "echo it", "m-1").await.unwrap();
    let round = asked(&model, "round 1 asked").await;
    // A message sent now waits for the next turn; aborting that turn before it begins drops it
    // with its message.
    let queued = client.execute("t1", "then this", "m-q").await.unwrap();
    assert_ne!(queued.invocation_id, turn.invocation_id);
    client.abort(&queued).await.unwrap();
    // Cancelled before it began: it has no outcome but its failure (Restate keeps none for an
    // invocation that never started, so the attach finds none).
    let dropped = client.output(&queued, WAIT).await.unwrap_err();
    assert_eq!(dropped.code(), "RESTATE_TURN_FAILED", "{dropped}");
    let status = status_until(client, "t1", |status| status.next.is_none()).await;
    assert!(status.queued_messages.is_empty(), "{status:?}");
    let last = status.last.as_ref().unwrap();
    assert_eq!(last.invocation_id, queued.invocation_id);
    assert!(
        last.error.as_deref().unwrap().starts_with("CANCELLED"),
        "{last:?}"
    );
    client.abort(&turn).await.unwrap();
    // The turn runs in this process: the round streaming is cut now, not run to its end.
    tokio::time::timeout(WAIT, round.dropped())
        .await
        .expect("the round's stream was dropped");
    let failed = client.output(&turn, WAIT).await.unwrap_err();
    assert_eq!(failed.code(), "RESTATE_TURN_FAILED", "{failed}");
    assert!(failed.to_string().contains("(409)"), "{failed}");
    assert!(failed.to_string().contains("CANCELLED"), "{failed}");
    assert_eq!(runs.load(Ordering::SeqCst), 0, "no call ran");
    assert_eq!(model.call_count(), 1, "no round after the abort");
    assert!(
        client.history("t1").await.unwrap().is_empty(),
        "an aborted turn records nothing in this version"
    );
    let status = client.status("t1").await.unwrap();
    assert_eq!((status.running, status.next, status.turns), (None, None, 2));
    let last = status.last.unwrap();
    assert_eq!(last.invocation_id, turn.invocation_id);
    assert!(
        last.error.as_deref().unwrap().starts_with("CANCELLED"),
        "{last:?}"
    );
    // The thread goes on: its next turn runs.
    let next = client.execute("t1", "again", "m-2").await.unwrap();
    let round = asked(&model, "the next turn asked").await;
    round.send_all(ScriptedResponse::text("done").into_events());
    drop(round);
    assert_eq!(client.output(&next, WAIT).await.unwrap().text, "done");
    assert_eq!(
        texts(&client.history("t1").await.unwrap()),
        ["user: again", "assistant: done"],
        "the dropped message never ran"
    );
}

fn gated_harness(model: &ScriptedModel, runs: &Arc<AtomicUsize>) -> AgentHarness {
    harness_with(model.clone(), echo_tool(runs.clone()).needs_approval(true))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gated_call_waits_for_its_decision_as_a_restate_signal_and_runs_once_approved() {
    let server = restate_or_skip!();
    let runs = Arc::new(AtomicUsize::new(0));
    let model = react_model(None, None);
    let deployed = deploy(server, gated_harness(&model, &runs)).await;
    let client = &deployed.client;
    let turn = client.execute("t1", "echo it", "m-1").await.unwrap();
    // The approval id is the invocation's and the call's: known to whoever holds the turn. A
    // decision sent before the turn waits is kept until it does.
    let approval_id = format!("{}:call_1", turn.invocation_id);
    client.approve("t1", &approval_id).await.unwrap();
    let output = client
        .output(&turn, WAIT)
        .await
        .unwrap_or_else(|error| panic!("{error}\n{}", deployed.server.log_tail()));
    assert_eq!(output.text, "the tool said journaled");
    assert_eq!((model.request_count(), runs.load(Ordering::SeqCst)), (2, 1));

    // A rejection: the call does not run, the model reads why.
    let rejected = client.execute("t2", "echo it", "m-2").await.unwrap();
    client
        .reject(
            "t2",
            &format!("{}:call_1", rejected.invocation_id),
            "not today",
        )
        .await
        .unwrap();
    let output = client.output(&rejected, WAIT).await.unwrap();
    assert_eq!(output.text, "the tool said Tool call rejected: not today");
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    let malformed = client.approve("t1", "no-colon").await.unwrap_err();
    assert_eq!(malformed.code(), "RESTATE_REFUSED", "{malformed}");
    assert!(
        malformed.to_string().contains("not an approval id"),
        "{malformed}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_approval_requested_event_names_the_id_to_decide_while_the_turn_waits() {
    let server = restate_or_skip!();
    let runs = Arc::new(AtomicUsize::new(0));
    let model = react_model(None, None);
    let (events_tx, mut events) = mpsc::unbounded_channel();
    let sink = move |event: noetic_core::StreamEvent| {
        if let noetic_core::StreamEvent::Framework(
            noetic_core::FrameworkEvent::ApprovalRequested { approval_id, .. },
        ) = event
        {
            let _ = events_tx.send(approval_id);
        }
    };
    let host = RestateHost::new(gated_harness(&model, &runs)).event_sink(Arc::new(sink));
    let deployed = deploy_host(server, host).await;
    let client = &deployed.client;
    let turn = client.execute("t1", "echo it", "m-1").await.unwrap();
    let approval_id = tokio::time::timeout(WAIT, events.recv())
        .await
        .expect("the call waits")
        .unwrap();
    assert_eq!(approval_id, format!("{}:call_1", turn.invocation_id));
    assert_eq!(runs.load(Ordering::SeqCst), 0, "not before the decision");
    // The status lists the call once the turn waits (right after the event).
    let waiting = status_until(client, "t1", |status| !status.pending_approvals.is_empty()).await;
    assert_eq!(
        waiting.running.as_deref(),
        Some(turn.invocation_id.as_str())
    );
    let pending = &waiting.pending_approvals;
    assert_eq!(
        (
            pending.len(),
            pending[0].approval_id.as_str(),
            pending[0].tool.as_str()
        ),
        (1, approval_id.as_str(), "echo")
    );
    assert_eq!(pending[0].arguments, json!({"text": "journaled"}));
    client.approve("t1", &approval_id).await.unwrap();
    let output = client.output(&turn, WAIT).await.unwrap();
    assert_eq!(output.text, "the tool said journaled");
    assert_eq!((model.request_count(), runs.load(Ordering::SeqCst)), (2, 1));
    let done = client.status("t1").await.unwrap();
    assert_eq!(done.running, None);
    assert!(done.pending_approvals.is_empty());
    assert_eq!(done.turns, 1);
    assert_eq!(
        done.last,
        Some(noetic_restate::LastTurn {
            invocation_id: turn.invocation_id.clone(),
            text: Some("the tool said journaled".to_owned()),
            error: None,
        })
    );
}

/// The thread's status once `until` holds of it (within `WAIT`): for what the turn records on its
/// own time, with no event to wait for.
async fn status_until(
    client: &RestateClient,
    thread: &str,
    until: impl Fn(&noetic_restate::ThreadStatus) -> bool,
) -> noetic_restate::ThreadStatus {
    tokio::time::timeout(WAIT, async {
        loop {
            let status = client.status(thread).await.unwrap();
            if until(&status) {
                return status;
            }
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the status came to hold")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steer_joins_the_running_turn_between_rounds_and_one_after_its_last_round_is_the_next_turn()
 {
    let server = restate_or_skip!();
    let (deployed, model, runs) = deploy_paced(server).await;
    let client = &deployed.client;
    let turn = client.execute("t1", "echo it", "m-1").await.unwrap();
    let round = asked(&model, "round 1 asked").await;
    // Sent while round 1 streams: it waits in the inbox (a round is never cut under Restate).
    let steered = client.steer("t1", "say hello too", "s-1").await.unwrap();
    assert_eq!(steered, SteerOutcome::Queued);
    let status = client.status("t1").await.unwrap();
    assert_eq!(status.running.as_deref(), Some(turn.invocation_id.as_str()));
    assert_eq!(status.queued_steers.len(), 1);
    assert_eq!(status.queued_steers[0].message_id, "s-1");
    round.send_all(
        ScriptedResponse::tool_call("call_1", "echo", json!({"text": "journaled"})).into_events(),
    );
    drop(round);
    let round = asked(&model, "round 2 asked").await;
    assert_eq!(
        round.request.user_texts(),
        ["echo it", "say hello too"],
        "the steer joined before round 2"
    );
    // Sent during the last round: no steer point is left, so it becomes the thread's next turn.
    let late = client.steer("t1", "and goodbye", "s-2").await.unwrap();
    assert_eq!(late, SteerOutcome::Queued);
    round.send_all(ScriptedResponse::text("hello; the tool said journaled").into_events());
    drop(round);
    let output = client
        .output(&turn, WAIT)
        .await
        .unwrap_or_else(|error| panic!("{error}\n{}", deployed.server.log_tail()));
    assert_eq!(output.text, "hello; the tool said journaled");
    let round = asked(&model, "the late steer's turn asked").await;
    assert_eq!(round.request.user_texts().last().unwrap(), "and goodbye");
    round.send_all(ScriptedResponse::text("goodbye").into_events());
    drop(round);
    // Its message id is its turn's idempotency key: executing it again finds that turn.
    let late_turn = client.execute("t1", "and goodbye", "s-2").await.unwrap();
    assert!(late_turn.duplicate);
    assert_eq!(
        client.output(&late_turn, WAIT).await.unwrap().text,
        "goodbye"
    );
    assert_eq!(
        texts(&client.history("t1").await.unwrap()),
        [
            "user: echo it",
            "call echo",
            "output \"journaled\"",
            "user: say hello too",
            "assistant: hello; the tool said journaled",
            "user: and goodbye",
            "assistant: goodbye"
        ]
    );

    // With no turn running, a steer is a turn of its own.
    let SteerOutcome::Started { invocation_id } = client.steer("t2", "hi", "s-3").await.unwrap()
    else {
        panic!("no turn of t2 runs")
    };
    let round = asked(&model, "the idle steer's turn asked").await;
    assert_eq!(round.request.user_texts(), ["hi"]);
    round.send_all(ScriptedResponse::text("hello").into_events());
    drop(round);
    let idle = noetic_restate::TurnHandle {
        thread: "t2".to_owned(),
        invocation_id,
        duplicate: false,
    };
    assert_eq!(client.output(&idle, WAIT).await.unwrap().text, "hello");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

/// The framework events' types of `events` (`turn_started`, …), with `text` for each text delta.
fn event_types(events: &[noetic_core::StreamEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|event| match event {
            noetic_core::StreamEvent::Framework(event) => Some(
                serde_json::to_value(event).unwrap()["type"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
            ),
            noetic_core::StreamEvent::Sdk(noetic_core::ResponseEvent::OutputTextDelta {
                ..
            }) => Some("text".to_owned()),
            _ => None,
        })
        .collect()
}

/// Reads `events` until a turn ends (`turn_completed` or `turn_aborted`), within `WAIT`.
async fn one_turn(
    events: &mut futures_util::stream::BoxStream<'static, noetic_core::SequencedEvent>,
) -> Vec<noetic_core::StreamEvent> {
    use futures_util::StreamExt as _;
    let mut seen = Vec::new();
    tokio::time::timeout(WAIT, async {
        while let Some(event) = events.next().await {
            let event = (*event.event).clone();
            let ended = matches!(
                &event,
                noetic_core::StreamEvent::Framework(
                    noetic_core::FrameworkEvent::TurnCompleted { .. }
                        | noetic_core::FrameworkEvent::TurnAborted { .. }
                )
            );
            seen.push(event);
            if ended {
                return;
            }
        }
    })
    .await
    .expect("the turn's events are in the store's event log");
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_store_the_thread_s_history_last_turn_and_events_are_there_for_a_harness_on_it() {
    use noetic_core::adapter::durable::DurableStore as _;
    let server = restate_or_skip!();
    let (_dir, store) = sqlite_store().await;
    let runs = Arc::new(AtomicUsize::new(0));
    let model = react_model(None, None);
    let host = RestateHost::new(harness(&model, &runs)).store(Arc::new(store.clone()));
    let deployed = deploy_host(server, host).await;
    let client = &deployed.client;
    let reader = reader(&store);

    let turn = client.execute("t1", "echo it", "m-1").await.unwrap();
    let output = client
        .output(&turn, WAIT)
        .await
        .unwrap_or_else(|error| panic!("{error}\n{}", deployed.server.log_tail()));
    assert_eq!(output.text, "the tool said journaled");
    let stored = reader.stored_thread("t1").await.unwrap().unwrap();
    let expected = [
        "user: echo it",
        "call echo",
        "output \"journaled\"",
        "assistant: the tool said journaled",
    ];
    assert_eq!(texts(&stored.history), expected);
    assert_eq!(stored.last_output, Some(json!("the tool said journaled")));
    assert_eq!((stored.accepted, stored.pending), (1, 0));
    assert_eq!(texts(&client.history("t1").await.unwrap()), expected);

    // The next turn starts from the store's history; its events are read back from the log by
    // the harness on the store (after the last one before it: the log's numbers are its own).
    let before = store.next_seq("thread/t1/events").await.unwrap();
    let again = client.execute("t1", "again", "m-2").await.unwrap();
    client.output(&again, WAIT).await.unwrap();
    assert_eq!(
        model.requests().last().unwrap().user_texts(),
        ["echo it", "again"]
    );
    let mut events = reader.sequenced_events(
        noetic_core::Scope::thread("t1"),
        noetic_core::Replay::After(before - 1),
    );
    let seen = one_turn(&mut events).await;
    let types = event_types(&seen);
    assert_eq!(
        types.first().map(String::as_str),
        Some("turn_started"),
        "{types:?}"
    );
    assert_eq!(types.last().map(String::as_str), Some("turn_completed"));
    let count = |kind: &str| types.iter().filter(|seen| *seen == kind).count();
    // Once each, however often Restate replayed the turn (CI runs this in "always replay" too).
    assert_eq!(
        (
            count("turn_started"),
            count("model_call_started"),
            count("model_call_completed"),
            count("turn_completed")
        ),
        (1, 1, 1, 1),
        "{types:?}"
    );
    // A round's deltas are written by the attempt that ran it, before its result is journaled:
    // there in "always replay" mode too, where that attempt always ends right after.
    assert!(count("text") > 0, "the round's text deltas: {types:?}");
    let noetic_core::StreamEvent::Framework(noetic_core::FrameworkEvent::TurnStarted {
        turn_id,
        message_ids,
    }) = &seen[0]
    else {
        unreachable!("checked above")
    };
    assert_eq!(turn_id, &again.invocation_id);
    assert_eq!(message_ids, &["m-2".to_owned()]);
    let stored = reader.stored_thread("t1").await.unwrap().unwrap();
    assert_eq!((stored.history.len(), stored.accepted), (6, 2));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_the_graph_runs_twice_has_both_runs_events_in_the_store() {
    let server = restate_or_skip!();
    let (_dir, store) = sqlite_store().await;
    let model = ScriptedModel::responding(|_: &RecordedRequest| ScriptedResponse::text("again"));
    // The same `call_model` step twice: its rounds have the same names both times.
    let harness = AgentHarness::builder("restate")
        .provider("scripted", model.clone())
        .agent_graph(
            noetic_core::loop_step("twice")
                .step(
                    call_model("chat")
                        .model("scripted-model")
                        .instructions("Answer."),
                )
                .until(noetic_core::until::max_steps(2)),
        )
        .build()
        .unwrap();
    let host = RestateHost::new(harness).store(Arc::new(store.clone()));
    let deployed = deploy_host(server, host).await;
    let turn = deployed.client.execute("t1", "go", "m-1").await.unwrap();
    deployed
        .client
        .output(&turn, WAIT)
        .await
        .unwrap_or_else(|error| panic!("{error}\n{}", deployed.server.log_tail()));
    assert_eq!(model.request_count(), 2);
    let logged = logged_types(&store, "t1").await;
    let count = |kind: &str| logged.iter().filter(|seen| *seen == kind).count();
    assert_eq!(
        (count("model_call_started"), count("model_call_completed")),
        (2, 2),
        "{logged:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_store_followers_see_a_round_s_text_as_it_streams_not_once_it_is_journaled() {
    use futures_util::StreamExt as _;
    let server = restate_or_skip!();
    let (_dir, store) = sqlite_store().await;
    let runs = Arc::new(AtomicUsize::new(0));
    let model = noetic_test_support::PacedModel::new();
    let host = RestateHost::new(harness_with(model.clone(), echo_tool(runs.clone())))
        .store(Arc::new(store.clone()));
    let deployed = deploy_host(server, host).await;
    let reader = reader(&store);
    let mut events = reader.sequenced_events(
        noetic_core::Scope::thread("t1"),
        noetic_core::Replay::Retained,
    );
    let turn = deployed.client.execute("t1", "greet", "m-1").await.unwrap();
    let round = asked(&model, "round 1 asked").await;
    let mut answer = ScriptedResponse::text("Hello there").into_events();
    let last = answer.pop().expect("a terminal event");
    // Everything but the terminal event: the round is still streaming, nothing is journaled.
    round.send_all(answer);
    let first_text = tokio::time::timeout(WAIT, async {
        loop {
            let event = events.next().await.expect("the stream goes on").event;
            if let noetic_core::StreamEvent::Sdk(noetic_core::ResponseEvent::OutputTextDelta {
                delta,
                ..
            }) = &*event
            {
                return delta.clone();
            }
        }
    })
    .await
    .expect("a follower sees the round's text while it streams");
    assert!("Hello there".starts_with(&first_text), "{first_text}");
    assert!(!round.is_dropped(), "the round is still streaming");
    round.send(last);
    drop(round);
    let output = deployed
        .client
        .output(&turn, WAIT)
        .await
        .unwrap_or_else(|error| panic!("{error}\n{}", deployed.server.log_tail()));
    assert_eq!(output.text, "Hello there");
    let rest = one_turn(&mut events).await;
    let text: String = std::iter::once(first_text)
        .chain(rest.iter().filter_map(|event| match event {
            noetic_core::StreamEvent::Sdk(noetic_core::ResponseEvent::OutputTextDelta {
                delta,
                ..
            }) => Some(delta.clone()),
            _ => None,
        }))
        .collect();
    assert_eq!(text, "Hello there", "each delta once, in order");
}
