//! `--storage sqlite:PATH`, `noetic resume` and crash recovery, with real processes: the CLI runs as a
//! child against the mock provider, is SIGKILLed at a chosen point, and a second child resumes it.
//!
//! The kill points are chosen by the mock server, not by timing: the reply to request `k` stalls (the
//! stream stays open), so when the server has seen `k + 1` requests the child is waiting inside round
//! `k`, with every earlier round's response received — and, if the durability contract holds, recorded.

use std::process::Stdio;

use noetic_test_support::{MockReply, MockServer, RecordedHttpRequest};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

use super::{
    CHILD_TIMEOUT, Finished, TempDir, args, mock_options, noetic, run_noetic, text_reply, usage,
};

/// A two-step flow: `gather` calls `echo`, then `answer` writes the answer from what was gathered.
fn flow() -> Value {
    flow_with_tools(&[json!({"type": "echo"})])
}

/// The same flow with `gather`'s tools given.
fn flow_with_tools(tools: &[Value]) -> Value {
    json!({
        "version": 1,
        "root": {
            "kind": "sequence",
            "id": "durable-flow",
            "steps": [
                {"kind": "callModel", "id": "gather", "instructions": "Gather facts with the tools.",
                 "tools": tools},
                {"kind": "callModel", "id": "answer", "instructions": "Answer from the facts."}
            ]
        }
    })
}

/// A reply calling `name` with `arguments` as call `call_id` (10 input and 3 output tokens).
fn call(name: &str, call_id: &str, arguments: &Value) -> MockReply {
    let arguments = arguments.to_string();
    let item = |status: &str, arguments: &str| {
        json!({"id": format!("fc_{call_id}"), "type": "function_call", "status": status,
            "call_id": call_id, "name": name, "arguments": arguments})
    };
    MockReply::sse_events([
        json!({"type": "response.created", "response": {"id": "resp_c", "status": "in_progress", "output": []}}),
        json!({"type": "response.output_item.added", "output_index": 0, "item": item("in_progress", "")}),
        json!({"type": "response.function_call_arguments.delta", "item_id": format!("fc_{call_id}"),
            "output_index": 0, "delta": arguments}),
        json!({"type": "response.output_item.done", "output_index": 0, "item": item("completed", &arguments)}),
        json!({"type": "response.completed", "response": {
            "id": "resp_c", "status": "completed", "output": [item("completed", &arguments)],
            "usage": usage(10, 3, None)
        }}),
    ])
}

/// The replies of an uncrashed run, in request order: two echo rounds and the gathered text (step
/// `gather`), then the answer (step `answer`).
fn replies() -> Vec<MockReply> {
    vec![
        call("echo", "call_a", &json!({"text": "one"})),
        call("echo", "call_b", &json!({"text": "two"})),
        text_reply("gathered one and two"),
        text_reply("the answer is three"),
    ]
}

/// The replies up to request `k`, the one to request `k` stalling after `events` SSE events (the
/// process is killed there; the rest are pushed for the process that resumes).
fn replies_stalling_at(k: usize, events: usize) -> Vec<MockReply> {
    replies()
        .into_iter()
        .take(k + 1)
        .enumerate()
        .map(|(index, reply)| {
            if index == k {
                reply.stall_after_events(events)
            } else {
                reply
            }
        })
        .collect()
}

fn storage_args(db: &str) -> Vec<String> {
    vec!["--storage".to_owned(), format!("sqlite:{db}")]
}

/// The `input` of each request, the part that shows which round it is.
fn inputs(requests: &[RecordedHttpRequest]) -> Vec<Value> {
    requests
        .iter()
        .map(|request| request.body["input"].clone())
        .collect()
}

/// An uncrashed durable run: its `--output json` object and the inputs the mock received.
async fn uncrashed(dir: &TempDir) -> (Value, Vec<Value>) {
    let server = MockServer::start().await;
    for reply in replies() {
        server.push(reply);
    }
    let flow = dir.write("flow.json", &flow());
    let db = dir.path().join("uncrashed.db");
    let db = db.to_str().unwrap();
    let finished = run_noetic(
        args(
            &["run", &flow, "What is one plus two?", "--output", "json"],
            &[mock_options(&server), storage_args(db)].concat(),
        ),
        "",
    )
    .await;
    finished.assert_code(0);
    let output = finished.json_lines().pop().expect("one JSON object");
    (output, inputs(&server.requests()))
}

/// A durable run started as a child: its execution id (read from the `execution: <ID>` stderr line,
/// which comes before the first model request) and the child, still running.
async fn start_run(
    server: &MockServer,
    flow: &str,
    db: &str,
    extra: &[&str],
) -> (String, tokio::process::Child) {
    let mut command = noetic(args(
        &[&["run", flow, "What is one plus two?"], extra].concat(),
        &[mock_options(server), storage_args(db)].concat(),
    ));
    command.stdin(Stdio::null());
    let mut child = command.spawn().expect("the noetic binary starts");
    let stderr = child.stderr.take().expect("stderr is piped");
    let mut lines = BufReader::new(stderr).lines();
    let id = tokio::time::timeout(CHILD_TIMEOUT, async {
        while let Some(line) = lines.next_line().await.expect("read stderr") {
            if let Some(id) = line.strip_prefix("execution: ") {
                return id.to_owned();
            }
        }
        panic!("stderr ended without an `execution:` line");
    })
    .await
    .expect("the execution line in time");
    // Keep draining stderr so the child never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (id, child)
}

async fn sigkill(mut child: tokio::process::Child) {
    // `start_kill` sends SIGKILL on Unix: no destructor, no flush, no graceful anything.
    child.start_kill().expect("kill the child");
    let status = tokio::time::timeout(CHILD_TIMEOUT, child.wait())
        .await
        .expect("the killed child exits")
        .expect("wait for the child");
    assert!(!status.success(), "the child was killed, not finished");
}

/// The lease TTL of the runs the tests kill: a killed holder's lease blocks a resume until it expires.
const TTL: [&str; 2] = ["--lease-ttl-ms", "300"];

async fn resume(server: &MockServer, db: &str, id: &str) -> Finished {
    run_noetic(
        args(
            &["resume", id, "--output", "json"],
            &[mock_options(server), storage_args(db)].concat(),
        ),
        "",
    )
    .await
}

/// `resume` once the killed holder's lease has expired: a resume before that exits 1 with
/// `LEASE_HELD` and sends nothing, so it is tried again (bounded by [`CHILD_TIMEOUT`]).
async fn resume_after_the_lease(
    server: &MockServer,
    db: &str,
    id: &str,
    extra: &[&str],
) -> Finished {
    let deadline = tokio::time::Instant::now() + CHILD_TIMEOUT;
    loop {
        let requests = server.requests().len();
        let finished = run_noetic(
            args(
                &[&["resume", id, "--output", "json"][..], extra].concat(),
                &[mock_options(server), storage_args(db)].concat(),
            ),
            "",
        )
        .await;
        if finished.code == 1 && finished.stderr.contains("error[LEASE_HELD]") {
            assert_eq!(
                server.requests().len(),
                requests,
                "a refused resume sends nothing"
            );
            assert!(
                tokio::time::Instant::now() < deadline,
                "the lease never expired"
            );
            continue;
        }
        return finished;
    }
}

/// Kills a durable run while request `k` is in flight (after `events` SSE events of its reply), resumes
/// it in a new process, and checks the result against the uncrashed run.
async fn crash_at(k: usize, events: usize, expected: &Value, expected_inputs: &[Value]) {
    let dir = TempDir::new();
    let server = MockServer::start().await;
    for reply in replies_stalling_at(k, events) {
        server.push(reply);
    }
    let flow = dir.write("flow.json", &flow());
    let db = dir.path().join("run.db");
    let db = db.to_str().unwrap().to_owned();
    let (id, child) = start_run(
        &server,
        &flow,
        &db,
        &[&["--output", "json"][..], &TTL].concat(),
    )
    .await;
    tokio::time::timeout(CHILD_TIMEOUT, server.wait_for_requests(k + 1))
        .await
        .expect("the child reaches request k");
    sigkill(child).await;

    // The resumed process gets the rest of the uncrashed replies, from the one that was cut.
    for reply in replies().into_iter().skip(k) {
        server.push(reply);
    }
    let finished = resume_after_the_lease(&server, &db, &id, &[]).await;
    finished.assert_code(0);
    let output = finished.json_lines().pop().expect("one JSON object");
    assert_eq!(output["executionId"], json!(id), "kill at request {k}");
    assert_eq!(output["text"], expected["text"], "kill at request {k}");
    assert_eq!(output["items"], expected["items"], "kill at request {k}");
    // The cut round's reply stalled before reporting usage, so the whole execution's spend is the
    // uncrashed run's exactly: no completed round was paid twice.
    assert_eq!(output["usage"], expected["usage"], "kill at request {k}");
    // Every request of the uncrashed run, with only the one in flight at the kill sent twice.
    let mut with_repeat = expected_inputs.to_vec();
    with_repeat.insert(k, expected_inputs[k].clone());
    assert_eq!(
        inputs(&server.requests()),
        with_repeat,
        "kill at request {k}: no completed round requested again"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_killed_at_every_round_and_step_boundary_resumes_to_the_uncrashed_result() {
    let dir = TempDir::new();
    let (expected, expected_inputs) = uncrashed(&dir).await;
    assert_eq!(expected["text"], "the answer is three");
    assert_eq!(expected_inputs.len(), 4);
    // Request 0: the first round; 1 and 2: round boundaries inside `gather` (after a tool round);
    // 3: the step boundary (`gather` done, `answer`'s first request).
    for k in 0..4 {
        crash_at(k, 0, &expected, &expected_inputs).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_killed_mid_stream_resumes_and_requests_only_the_cut_round_again() {
    let dir = TempDir::new();
    let (expected, expected_inputs) = uncrashed(&dir).await;
    // Request 2 streams text: cut it after some of its deltas reached the client.
    crash_at(2, 4, &expected, &expected_inputs).await;
    // Request 3 (the second step) likewise.
    crash_at(3, 4, &expected, &expected_inputs).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn run_with_storage_prints_the_execution_id_before_the_first_request_and_in_json() {
    let dir = TempDir::new();
    let server = MockServer::start().await;
    for reply in replies_stalling_at(0, 0) {
        server.push(reply);
    }
    let flow = dir.write("flow.json", &flow());
    let db = dir.path().join("run.db");
    let (id, child) = start_run(&server, &flow, db.to_str().unwrap(), &[]).await;
    // The line came first: the request count is read after it.
    assert!(
        server.requests().len() <= 1,
        "the id is printed before the run goes on"
    );
    assert!(!id.is_empty());
    sigkill(child).await;

    let server = MockServer::start().await;
    for reply in replies() {
        server.push(reply);
    }
    let finished = run_noetic(
        args(
            &["run", &flow, "What is one plus two?", "--output", "json"],
            &[mock_options(&server), storage_args(db.to_str().unwrap())].concat(),
        ),
        "",
    )
    .await;
    finished.assert_code(0);
    let output = finished.json_lines().pop().unwrap();
    let printed = finished
        .stderr
        .lines()
        .find_map(|line| line.strip_prefix("execution: "))
        .expect("the execution line");
    assert_eq!(output["executionId"], json!(printed));
    assert_ne!(printed, id, "a new run is a new execution");
}

#[tokio::test(flavor = "multi_thread")]
async fn resuming_a_finished_execution_prints_its_result_again_without_a_request() {
    let dir = TempDir::new();
    let server = MockServer::start().await;
    for reply in replies() {
        server.push(reply);
    }
    let flow = dir.write("flow.json", &flow());
    let db = dir.path().join("run.db");
    let db = db.to_str().unwrap();
    let first = run_noetic(
        args(
            &["run", &flow, "What is one plus two?", "--output", "json"],
            &[mock_options(&server), storage_args(db)].concat(),
        ),
        "",
    )
    .await;
    first.assert_code(0);
    let first = first.json_lines().pop().unwrap();
    let id = first["executionId"].as_str().unwrap().to_owned();
    let requests = server.requests().len();

    let again = resume(&server, db, &id).await;
    again.assert_code(0);
    let again = again.json_lines().pop().unwrap();
    assert_eq!(again["text"], first["text"]);
    assert_eq!(again["usage"], first["usage"]);
    assert_eq!(again["executionId"], first["executionId"]);
    assert_eq!(server.requests().len(), requests, "nothing was requested");

    // Plain output prints the text too.
    let plain = run_noetic(
        args(
            &["resume", &id],
            &[mock_options(&server), storage_args(db)].concat(),
        ),
        "",
    )
    .await;
    plain.assert_code(0);
    assert!(plain.stdout.contains("the answer is three"), "{plain:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn resuming_an_unknown_execution_exits_1_with_checkpoint_not_found() {
    let dir = TempDir::new();
    let server = MockServer::start().await;
    let db = dir.path().join("empty.db");
    let finished = resume(&server, db.to_str().unwrap(), "no-such-execution").await;
    finished.assert_code(1);
    assert!(
        finished.stderr.contains("error[CHECKPOINT_NOT_FOUND]"),
        "{finished:?}"
    );
    assert!(
        finished.stderr.contains("no-such-execution"),
        "{finished:?}"
    );
    assert!(server.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_killed_mid_tool_runs_that_tool_call_again_on_resume_and_no_other() {
    let dir = TempDir::new();
    let server = MockServer::start().await;
    // The shell call writes a line to `started` (a FIFO the test reads, so the test knows the call is
    // running) and then blocks reading `release`, which no one writes: it is in flight when killed.
    let started = dir.path().join("started");
    let release = dir.path().join("release");
    let log = dir.path().join("calls.log");
    for fifo in [&started, &release] {
        let status = std::process::Command::new("mkfifo")
            .arg(fifo)
            .status()
            .expect("mkfifo runs");
        assert!(status.success());
    }
    let pid = dir.path().join("shell.pid");
    let command = format!(
        "echo run >> {log}; echo $$ > {pid}; echo go > {started}; read line < {release}; echo released",
        log = log.display(),
        pid = pid.display(),
        started = started.display(),
        release = release.display()
    );
    let shell = call("shell", "call_s", &json!({"command": command}));
    server.push(call("echo", "call_a", &json!({"text": "one"})));
    server.push(shell);
    let flow = dir.write(
        "flow.json",
        &flow_with_tools(&[json!({"type": "echo"}), json!({"type": "shell"})]),
    );
    let db = dir.path().join("run.db");
    let db = db.to_str().unwrap().to_owned();
    let fs_dir = dir.path().to_str().unwrap().to_owned();
    let (id, child) = start_run(
        &server,
        &flow,
        &db,
        &[&["--allow-fs", &fs_dir, "--allow-shell"][..], &TTL].concat(),
    )
    .await;
    // Block until the shell command has started (opening a FIFO for reading waits for its writer).
    let started_path = started.clone();
    let line = tokio::time::timeout(
        CHILD_TIMEOUT,
        tokio::task::spawn_blocking(move || std::fs::read_to_string(started_path)),
    )
    .await
    .expect("the tool starts in time")
    .unwrap()
    .unwrap();
    assert_eq!(line.trim(), "go");
    sigkill(child).await;
    // The killed process's shell child is orphaned, still blocked on `release`: kill it too, or it
    // could take the line meant for the re-run.
    let orphan = std::fs::read_to_string(&pid).unwrap();
    let status = std::process::Command::new("kill")
        .args(["-9", orphan.trim()])
        .status()
        .expect("kill runs");
    assert!(status.success());
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "run\n");

    // On resume the in-flight call runs again (at-least-once).
    server.push(text_reply("gathered"));
    server.push(text_reply("the answer"));
    // Unblock the re-run: write `release` once its reader (the re-run call) opens it.
    let (release_path, started_path) = (release.clone(), started.clone());
    let unblock = tokio::task::spawn_blocking(move || {
        let _ = std::fs::read_to_string(started_path);
        std::fs::write(release_path, "go\n")
    });
    let finished =
        resume_after_the_lease(&server, &db, &id, &["--allow-fs", &fs_dir, "--allow-shell"]).await;
    finished.assert_code(0);
    unblock.await.unwrap().unwrap();
    assert_eq!(finished.json_lines().pop().unwrap()["text"], "the answer");
    // The shell call ran twice (once cut, once again); the echo call, recorded before, not again.
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "run\nrun\n");
    let requests = server.requests();
    let echo_outputs = requests.last().unwrap().body["input"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|item| item["type"] == "function_call_output" && item["call_id"] == "call_a")
        .count();
    assert_eq!(echo_outputs, 1, "the recorded echo call was not run again");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_process_gets_lease_held_while_the_run_lives_and_takes_over_after_the_ttl() {
    let dir = TempDir::new();
    let server = MockServer::start().await;
    for reply in replies_stalling_at(1, 0) {
        server.push(reply);
    }
    let flow = dir.write("flow.json", &flow());
    let db = dir.path().join("run.db");
    let db = db.to_str().unwrap().to_owned();
    let ttl = TTL;
    let (id, child) = start_run(&server, &flow, &db, &ttl).await;
    tokio::time::timeout(CHILD_TIMEOUT, server.wait_for_requests(2))
        .await
        .expect("the child reaches request 1");

    // The holder is alive (waiting on its stalled round): a second process is refused.
    let refused = run_noetic(
        args(
            &[&["resume", id.as_str()][..], &ttl[..]].concat(),
            &[mock_options(&server), storage_args(&db)].concat(),
        ),
        "",
    )
    .await;
    refused.assert_code(1);
    assert!(refused.stderr.contains("error[LEASE_HELD]"), "{refused:?}");
    assert_eq!(
        server.requests().len(),
        2,
        "the refused process sent nothing"
    );

    // Kill the holder; once its lease expires (it can no longer renew it) a resume takes over.
    sigkill(child).await;
    for reply in replies().into_iter().skip(1) {
        server.push(reply);
    }
    let finished = resume_after_the_lease(&server, &db, &id, &ttl).await;
    finished.assert_code(0);
    assert_eq!(
        finished.json_lines().pop().unwrap()["text"],
        "the answer is three"
    );
}
