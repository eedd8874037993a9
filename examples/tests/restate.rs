//! The Restate example as real processes: its one-command run, and the service process killed
//! (SIGKILL) mid-round and started again — Restate retries the turn, the recorded round and tool call
//! come from the journal, only the round in flight is sent to the model again, and followers of the
//! thread's event log see the round's text as it streams, then `round_restarted` and the text again.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use noetic_restate::RestateClient;
use noetic_test_support::{MockReply, MockServer, RecordedHttpRequest, restate_or_skip};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(60);

fn example() -> Command {
    let mut path = std::env::current_exe().unwrap();
    path.pop(); // deps/
    path.pop();
    path.push("examples");
    path.push(format!("restate{}", std::env::consts::EXE_SUFFIX));
    let mut command = Command::new(path);
    command.env_remove("OPENROUTER_API_KEY");
    command
}

/// The service process (killed when dropped) and its output's lines (read on a thread of their own).
struct Service {
    child: Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Service {
    /// The next line the process prints (at most `WAIT`).
    fn line(&mut self) -> String {
        self.lines
            .recv_timeout(WAIT)
            .unwrap_or_else(|_| panic!("the service printed nothing for {WAIT:?}"))
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `restate --serve ADDRESS --provider-url URL [extra]` and waits for its "serving" line.
fn serve(address: &str, provider_url: &str, extra: &[&str]) -> Service {
    let mut child = example()
        .args(["--serve", address, "--provider-url", provider_url])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let (send, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stdout.lines() {
            let Ok(line) = line else { return };
            if send.send(line).is_err() {
                return;
            }
        }
    });
    let mut service = Service { child, lines };
    let line = service.line();
    assert!(line.starts_with("serving NoeticThread on"), "{line:?}");
    service
}

/// Starts the service on a free loopback address with `extra` flags and registers it with `server`;
/// returns the service and the address (to start it again there).
async fn deploy(
    server: &noetic_test_support::restate::RestateServer,
    client: &RestateClient,
    provider_url: &str,
    extra: &[&str],
) -> (Service, String) {
    let address = free_address();
    let service = serve(&address, provider_url, extra);
    client
        .register(&format!("http://{address}"))
        .await
        .unwrap_or_else(|error| panic!("{error}\n{}", server.log_tail()));
    (service, address)
}

fn free_address() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    format!("127.0.0.1:{port}")
}

fn tool_output(request: &RecordedHttpRequest) -> Option<String> {
    request.body["input"].as_array().and_then(|items| {
        items
            .iter()
            .rev()
            .find(|item| item["type"] == "function_call_output")
            .map(|item| item["output"].as_str().unwrap_or_default().to_owned())
    })
}

#[test]
fn the_restate_example_runs_a_turn_on_a_server_of_its_own() {
    if let Err(why) = noetic_test_support::restate::RestateServer::binary() {
        noetic_test_support::restate::print_skip(
            "the_restate_example_runs_a_turn_on_a_server_of_its_own",
            &why,
        );
        return;
    }
    // With the threads' record in a SQLite file: the history read back comes from it.
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("threads.db").display());
    let output = example().args(["--store", &store]).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("Here is what the tools returned"),
        "{stdout}"
    );
    assert!(
        stdout.contains("4 items in the thread's history (in the store)"),
        "{stdout}"
    );
    assert!(stdout.contains("1 turn(s) ended on the thread"), "{stdout}");
}

/// The text a client shows for `events`: the text deltas, where a `round_restarted` voids those
/// before it (the round in flight streams again).
fn shown_text(events: &[noetic_core::StreamEvent]) -> String {
    let mut text = String::new();
    for event in events {
        match event {
            noetic_core::StreamEvent::Sdk(noetic_core::ResponseEvent::OutputTextDelta {
                delta,
                ..
            }) => text.push_str(delta),
            noetic_core::StreamEvent::Framework(noetic_core::FrameworkEvent::RoundRestarted {
                ..
            }) => text.clear(),
            _ => {}
        }
    }
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_process_killed_mid_round_is_retried_by_restate_and_pays_only_the_round_in_flight()
 {
    use futures_util::StreamExt as _;
    let server = restate_or_skip!();
    let mock = MockServer::start().await;
    let answers = Arc::new(AtomicUsize::new(0));
    mock.set_responder({
        let answers = answers.clone();
        move |request| match tool_output(request) {
            None => MockReply::function_call("call_1", "search", &json!({"query": "rust"})),
            // The first answering round stalls mid-stream, after its text: the process dies in it.
            Some(output) => {
                let reply = MockReply::answer(&format!("The tool said {output}"));
                if answers.fetch_add(1, Ordering::SeqCst) == 0 {
                    reply.stall_after_events(3)
                } else {
                    reply
                }
            }
        }
    });
    let provider_url = mock.base_url();
    // The threads' record in a SQLite file, followed by a harness on it as `noetic serve` does.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("threads.db");
    let store_flag = format!("sqlite:{}", path.display());
    let extra = ["--store", store_flag.as_str()];
    let client = RestateClient::new(server.ingress_url(), server.admin_url());
    let (service, address) = deploy(&server, &client, &provider_url, &extra).await;
    let store = noetic_storage_sqlite::SqliteStorage::open(&path)
        .await
        .unwrap();
    let reader = noetic_core::AgentHarness::builder("reader")
        .provider("scripted", noetic_test_support::ScriptedModel::new())
        .agent_graph(noetic_core::call_model("chat").model("scripted-model"))
        .durable(Arc::new(store))
        .shared_threads()
        .build()
        .unwrap();
    let mut events = reader.sequenced_events(
        noetic_core::Scope::thread("t1"),
        noetic_core::Replay::Retained,
    );

    let turn = client.execute("t1", "search rust", "m-1").await.unwrap();
    let mut seen = Vec::new();
    // The stalled round's text reaches followers while it streams: then the process dies.
    tokio::time::timeout(WAIT, async {
        loop {
            let event = events.next().await.expect("the stream goes on").event;
            let text = matches!(
                &*event,
                noetic_core::StreamEvent::Sdk(noetic_core::ResponseEvent::OutputTextDelta { .. })
            );
            seen.push((*event).clone());
            if text {
                return;
            }
        }
    })
    .await
    .expect("the answering round's text is in the log while it streams");
    assert_eq!(mock.request_count(), 2, "the answering round is in flight");
    drop(service); // SIGKILL, mid-round
    let _service = serve(&address, &provider_url, &extra);

    let output = client
        .output(&turn, WAIT)
        .await
        .unwrap_or_else(|error| panic!("{error}\n{}", server.log_tail()));
    let answer = r#"The tool said {"result":"Results for: rust"}"#;
    assert_eq!(output.text, answer);
    let requests = mock.requests();
    assert_eq!(
        requests.len(),
        3,
        "the tool round replayed from the journal; the answering round sent once more"
    );
    assert!(tool_output(&requests[0]).is_none());
    assert_eq!(
        tool_output(&requests[2]),
        tool_output(&requests[1]),
        "the retried round carries the journaled call's output"
    );
    assert_eq!(client.history("t1").await.unwrap().len(), 4);
    // Followers saw the round restart, then its text again: once, as a client shows it.
    tokio::time::timeout(WAIT, async {
        loop {
            let event = events.next().await.expect("the stream goes on").event;
            let ended = matches!(
                &*event,
                noetic_core::StreamEvent::Framework(
                    noetic_core::FrameworkEvent::TurnCompleted { .. }
                )
            );
            seen.push((*event).clone());
            if ended {
                return;
            }
        }
    })
    .await
    .expect("the turn's end is in the log");
    assert!(
        seen.iter().any(|event| matches!(
            event,
            noetic_core::StreamEvent::Framework(noetic_core::FrameworkEvent::RoundRestarted { .. })
        )),
        "{seen:#?}"
    );
    assert_eq!(shown_text(&seen), answer);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_waiting_for_approval_outlives_its_service_process_and_runs_the_call_once_approved()
{
    let server = restate_or_skip!();
    let mock = MockServer::start().await;
    mock.set_responder(|request| match tool_output(request) {
        None => MockReply::function_call("call_1", "search", &json!({"query": "rust"})),
        Some(output) => MockReply::answer(&format!("The tool said {output}")),
    });
    let provider_url = mock.base_url();
    let gated = ["--needs-approval"];
    let client = RestateClient::new(server.ingress_url(), server.admin_url());
    let (mut service, address) = deploy(&server, &client, &provider_url, &gated).await;

    let turn = client.execute("t1", "search rust", "m-1").await.unwrap();
    // Printed once round 1 is journaled and the call waits for its decision.
    let line = tokio::task::spawn_blocking(move || (service.line(), service))
        .await
        .unwrap_or_else(|_| {
            let outputs: Vec<_> = mock.requests().iter().map(tool_output).collect();
            panic!("no approval_requested; the model was asked with tool outputs {outputs:?}")
        });
    let (line, service) = line;
    let approval_id = line
        .trim()
        .strip_prefix("approval_requested ")
        .unwrap_or_else(|| panic!("{line:?}"))
        .to_owned();
    assert_eq!(approval_id, format!("{}:call_1", turn.invocation_id));
    drop(service); // SIGKILL while the turn waits for a person
    let _service = serve(&address, &provider_url, &gated);
    client.approve("t1", &approval_id).await.unwrap();

    let output = client
        .output(&turn, WAIT)
        .await
        .unwrap_or_else(|error| panic!("{error}\n{}", server.log_tail()));
    assert_eq!(
        output.text,
        r#"The tool said {"result":"Results for: rust"}"#
    );
    assert_eq!(
        mock.request_count(),
        2,
        "round 1 was journaled before the wait: not sent again after the restart"
    );
}
