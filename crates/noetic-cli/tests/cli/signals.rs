//! `noetic run` under SIGTERM and SIGINT: with `--drain-ms` the round in flight finishes (the mock
//! sent its whole stream) and the `drain:` line says `settled`; a short drain says `deadline` with a
//! `cutOff` entry; without a drain the run is cut at once. Exit 128 + the signal's number. And the
//! paid calls a SIGKILL mid-stream leaves are what `noetic spend` lists.

use std::process::Stdio;
use std::time::Duration;

use noetic_test_support::{MockReply, MockServer};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use crate::{CHILD_TIMEOUT, Finished, TempDir, args, mock_options, noetic, run_noetic, text_reply};

/// A one-step flow.
fn flow() -> Value {
    json!({"version": 1, "root": {"kind": "callModel", "id": "answer", "instructions": "Answer."}})
}

/// A reply streaming 40 words in 48-byte chunks 20 ms apart: about a second and a half of stream.
fn slow_reply() -> MockReply {
    let text: String = (0..40).map(|n| format!("word{n} ")).collect();
    text_reply(&text)
        .chunk_size(48)
        .delay_between_chunks(Duration::from_millis(20))
}

/// Reads `lines` (a child's `--events jsonl` stdout) until the round streams a text delta.
async fn until_streaming(lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>) {
    tokio::time::timeout(CHILD_TIMEOUT, async {
        while let Some(line) = lines.next_line().await.expect("read stdout") {
            if line.contains("response.output_text.delta") {
                return;
            }
        }
        panic!("stdout ended before the round streamed");
    })
    .await
    .expect("the round streams in time");
}

/// Sends `signal` (`-TERM`, `-INT`) to `child`.
fn send(signal: &str, child: &tokio::process::Child) {
    let pid = child.id().expect("the child runs").to_string();
    let status = std::process::Command::new("kill")
        .args([signal, &pid])
        .status()
        .expect("run kill");
    assert!(status.success());
}

/// The JSON of the `drain:` line in `stderr`.
fn drain_in(stderr: &str) -> Value {
    let line = stderr
        .lines()
        .find_map(|line| line.strip_prefix("drain: "))
        .unwrap_or_else(|| panic!("no drain line:\n{stderr}"));
    serde_json::from_str(line).expect("the drain line is JSON")
}

/// Starts `noetic run` with `--events jsonl` and `extra`, waits until its stdout shows the round
/// streaming (a text delta), sends `signal`, and returns what it printed and how it exited.
async fn signalled_run(
    server: &MockServer,
    dir: &TempDir,
    extra: &[String],
    signal: &str,
) -> Finished {
    let flow = dir.write("flow.json", &flow());
    let mut command = noetic(args(
        &["run", &flow, "Tell me a story", "--events", "jsonl"],
        &[mock_options(server), extra.to_vec()].concat(),
    ));
    command.stdin(Stdio::null());
    let mut child = command.spawn().expect("the noetic binary starts");
    let stdout = child.stdout.take().expect("stdout is piped");
    let mut stderr = child.stderr.take().expect("stderr is piped");
    let mut lines = BufReader::new(stdout).lines();
    until_streaming(&mut lines).await;
    send(signal, &child);
    let mut printed = String::new();
    let rest = async {
        while let Ok(Some(line)) = lines.next_line().await {
            printed.push_str(&line);
            printed.push('\n');
        }
    };
    let mut err = String::new();
    let (status, (), _) = tokio::time::timeout(CHILD_TIMEOUT, async {
        tokio::join!(child.wait(), rest, stderr.read_to_string(&mut err))
    })
    .await
    .expect("the signalled child exits in time");
    Finished {
        code: status.expect("wait for the child").code().unwrap_or(-1),
        stdout: printed,
        stderr: err,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_a_drain_lets_the_round_finish_and_exits_143_settled() {
    let server = MockServer::start().await;
    server.push(slow_reply());
    let dir = TempDir::new();
    let finished = signalled_run(
        &server,
        &dir,
        &["--drain-ms".to_owned(), "30000".to_owned()],
        "-TERM",
    )
    .await;
    finished.assert_code(143);
    let drain = drain_in(&finished.stderr);
    assert_eq!(drain["reason"], "settled", "{drain}");
    assert_eq!(drain["cutOff"], json!([]));
    let call = &drain["finished"][0];
    assert_eq!(call["kind"], "model_round");
    assert_eq!(call["round"], 0);
    assert_eq!(call["usage"]["inputTokens"], 12, "{call}");
    assert!(call["dispatchId"].is_string(), "{call}");
    assert!(drain["durationMs"].is_u64());
    assert_eq!(
        server.completed_replies(),
        1,
        "the mock sent its whole stream"
    );
    assert_eq!(server.request_count(), 1, "no new round after the signal");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_drain_ends_at_its_deadline_with_the_round_cut_off() {
    let server = MockServer::start().await;
    server.push(slow_reply().stall_after_events(6));
    let dir = TempDir::new();
    let finished = signalled_run(
        &server,
        &dir,
        &[
            "--drain-ms".to_owned(),
            "200".to_owned(),
            "--output".to_owned(),
            "json".to_owned(),
        ],
        "-TERM",
    )
    .await;
    finished.assert_code(143);
    let drain = drain_in(&finished.stderr);
    assert_eq!(drain["reason"], "deadline", "{drain}");
    assert_eq!(drain["finished"], json!([]));
    let cut = &drain["cutOff"][0];
    assert!(cut["dispatchId"].is_string(), "{drain}");
    assert_eq!(
        cut["generationId"], "resp_1",
        "the response's id, once it started"
    );
    assert!(cut.get("usage").is_none());
    // `--output json` prints the final object even on a signal, with the report.
    let last = finished.stdout.lines().last().unwrap_or_default();
    let output: Value = serde_json::from_str(last).expect("a final JSON object");
    assert_eq!(output["drain"], drain);
    assert_eq!(server.completed_replies(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_without_a_drain_cuts_at_once_and_exits_130() {
    let server = MockServer::start().await;
    server.push(slow_reply().stall_after_events(6));
    let dir = TempDir::new();
    let finished = signalled_run(&server, &dir, &[], "-INT").await;
    finished.assert_code(130);
    assert!(
        !finished.stderr.contains("drain:"),
        "no drain, no report: {}",
        finished.stderr
    );
    assert_eq!(server.completed_replies(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_durable_run_killed_mid_stream_leaves_a_paid_call_that_spend_lists() {
    let server = MockServer::start().await;
    server.push(
        slow_reply()
            .stall_after_events(6)
            .header("x-generation-id", "gen-killed"),
    );
    let dir = TempDir::new();
    let db = dir.path().join("paid.db");
    let db = db.to_str().unwrap().to_owned();
    let storage = vec!["--storage".to_owned(), format!("sqlite:{db}")];
    let finished = run_noetic(args(&["spend"], &storage), "").await;
    finished.assert_code(0);
    assert_eq!(
        finished.stdout.trim(),
        "[]",
        "nothing pending in a new file"
    );

    let flow = dir.write("flow.json", &flow());
    let mut command = noetic(args(
        &["run", &flow, "Tell me a story", "--events", "jsonl"],
        &[mock_options(&server), storage.clone()].concat(),
    ));
    command.stdin(Stdio::null());
    let mut child = command.spawn().expect("the noetic binary starts");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout is piped")).lines();
    until_streaming(&mut lines).await;
    child.start_kill().expect("SIGKILL the child");
    let status = tokio::time::timeout(CHILD_TIMEOUT, child.wait())
        .await
        .expect("the killed child exits")
        .expect("wait for the child");
    assert!(!status.success());

    let finished = run_noetic(args(&["spend"], &storage), "").await;
    finished.assert_code(0);
    let pending: Value = serde_json::from_str(finished.stdout.trim()).expect("a JSON array");
    let pending = pending.as_array().expect("an array");
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(pending[0]["generationId"], "gen-killed");
    assert_eq!(pending[0]["model"], crate::MODEL);
    assert!(pending[0]["dispatchId"].is_string());
    assert!(pending[0]["executionId"].is_string());
}

/// Starts `noetic chat --jsonl --events jsonl` with `extra`, sends one message, and waits until the
/// turn streams; returns the child (its stdin still open) and its stdout lines.
async fn streaming_chat(
    server: &MockServer,
    dir: &TempDir,
    extra: &[String],
) -> (
    tokio::process::Child,
    tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
) {
    let flow = dir.write("flow.json", &flow());
    let mut child = noetic(args(
        &["chat", &flow, "--jsonl", "--events", "jsonl"],
        &[mock_options(server), extra.to_vec()].concat(),
    ))
    .spawn()
    .expect("the noetic binary starts");
    let stdin = child.stdin.as_mut().expect("stdin is piped");
    stdin
        .write_all(b"{\"input\": \"Tell me a story\"}\n")
        .await
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().expect("stdout is piped")).lines();
    until_streaming(&mut lines).await;
    (child, lines)
}

/// Waits for `child` to exit, draining its stdout, and returns its exit code and stderr.
async fn exit_of(
    mut child: tokio::process::Child,
    mut lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
) -> (i32, String) {
    let mut stderr = child.stderr.take().expect("stderr is piped");
    let mut err = String::new();
    let rest = async { while let Ok(Some(_)) = lines.next_line().await {} };
    let (status, (), _) = tokio::time::timeout(CHILD_TIMEOUT, async {
        tokio::join!(child.wait(), rest, stderr.read_to_string(&mut err))
    })
    .await
    .expect("the child exits in time");
    (
        status.expect("wait for the child").code().unwrap_or(-1),
        err,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_abort_command_with_drain_ms_lets_the_round_finish() {
    let server = MockServer::start().await;
    server.push(slow_reply());
    let dir = TempDir::new();
    let (mut child, lines) = streaming_chat(&server, &dir, &[]).await;
    let stdin = child.stdin.as_mut().expect("stdin is piped");
    stdin
        .write_all(b"{\"command\": \"abort\", \"drainMs\": 30000}\n{\"command\": \"quit\"}\n")
        .await
        .unwrap();
    drop(child.stdin.take());
    let (code, stderr) = exit_of(child, lines).await;
    assert_eq!(code, 0, "{stderr}");
    let drain = drain_in(&stderr);
    assert_eq!(drain["reason"], "settled", "{drain}");
    assert_eq!(drain["finished"][0]["usage"]["outputTokens"], 5, "{drain}");
    assert_eq!(server.completed_replies(), 1);
    assert_eq!(server.request_count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_to_a_chat_with_a_drain_exits_143_with_its_report() {
    let server = MockServer::start().await;
    server.push(slow_reply());
    let dir = TempDir::new();
    let (child, lines) = streaming_chat(
        &server,
        &dir,
        &["--drain-ms".to_owned(), "30000".to_owned()],
    )
    .await;
    send("-TERM", &child);
    let (code, stderr) = exit_of(child, lines).await;
    assert_eq!(code, 143, "{stderr}");
    let drain = drain_in(&stderr);
    assert_eq!(drain["reason"], "settled", "{drain}");
    assert_eq!(server.completed_replies(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_chat_stopped_by_sigterm_exits_143_while_its_stdin_is_still_open() {
    let server = MockServer::start().await;
    server.push(text_reply("hello back"));
    let dir = TempDir::new();
    let flow = dir.write("flow.json", &flow());
    let mut child = noetic(args(&["chat", &flow], &mock_options(&server)))
        .spawn()
        .expect("the noetic binary starts");
    // Held open (and never closed) for the whole test: the chat's stdin reader stays blocked in a
    // read that cannot be cancelled.
    let mut stdin = child.stdin.take().expect("stdin is piped");
    stdin.write_all(b"hi\n").await.expect("write");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    tokio::time::timeout(CHILD_TIMEOUT, async {
        while let Some(line) = lines.next_line().await.expect("read stdout") {
            if line.contains("hello back") {
                return;
            }
        }
        panic!("stdout ended before the answer");
    })
    .await
    .expect("the turn answers");
    send("-TERM", &child);
    let status = tokio::time::timeout(Duration::from_secs(20), child.wait())
        .await
        .expect("the chat exits without waiting for a stdin line")
        .expect("wait");
    assert_eq!(status.code(), Some(143));
    drop(stdin);
}

/// A reply streaming 40 words in 48-byte chunks 200 ms apart: many seconds of stream, so a stop
/// that waited for it to end would take far longer than the 2 s a second stop may take.
fn very_slow_reply() -> MockReply {
    slow_reply().delay_between_chunks(Duration::from_millis(200))
}

/// Reads `lines` until the drain started (its `drain_started` event), collecting what it read.
async fn until_draining(
    lines: &mut tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    printed: &mut String,
) {
    tokio::time::timeout(CHILD_TIMEOUT, async {
        while let Some(line) = lines.next_line().await.expect("read stdout") {
            printed.push_str(&line);
            printed.push('\n');
            if line.contains("drain_started") {
                return;
            }
        }
        panic!("stdout ended before the drain started:\n{printed}");
    })
    .await
    .expect("the drain starts in time");
}

/// Waits (at most 2 s from now) for `child` to exit, collecting the rest of its stdout and its
/// stderr.
async fn exits_within_2s(
    mut child: tokio::process::Child,
    mut lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
    mut printed: String,
) -> Finished {
    let mut stderr = child.stderr.take().expect("stderr is piped");
    let mut err = String::new();
    let rest = async {
        while let Ok(Some(line)) = lines.next_line().await {
            printed.push_str(&line);
            printed.push('\n');
        }
    };
    let waited = tokio::time::timeout(Duration::from_secs(2), async {
        tokio::join!(child.wait(), rest, stderr.read_to_string(&mut err))
    })
    .await;
    let Ok((status, (), _)) = waited else {
        let _ = child.start_kill();
        panic!("the child did not exit within 2 s of the second stop");
    };
    Finished {
        code: status.expect("wait for the child").code().unwrap_or(-1),
        stdout: printed,
        stderr: err,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_sigterm_during_a_drain_stops_it_and_run_exits_143_at_once_with_its_report() {
    let server = MockServer::start().await;
    server.push(very_slow_reply());
    let dir = TempDir::new();
    let flow = dir.write("flow.json", &flow());
    let mut command = noetic(args(
        &["run", &flow, "Tell me a story", "--events", "jsonl"],
        &[
            mock_options(&server),
            vec![
                "--drain-ms".to_owned(),
                "10000".to_owned(),
                "--output".to_owned(),
                "json".to_owned(),
            ],
        ]
        .concat(),
    ));
    command.stdin(Stdio::null());
    let mut child = command.spawn().expect("the noetic binary starts");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout is piped")).lines();
    until_streaming(&mut lines).await;
    send("-TERM", &child);
    let mut printed = String::new();
    until_draining(&mut lines, &mut printed).await;
    send("-TERM", &child);
    let finished = exits_within_2s(child, lines, printed).await;
    finished.assert_code(143);
    let drain = drain_in(&finished.stderr);
    assert_eq!(drain["reason"], "stopped", "{drain}");
    assert!(drain["cutOff"][0]["dispatchId"].is_string(), "{drain}");
    let last = finished.stdout.lines().last().unwrap_or_default();
    let output: Value = serde_json::from_str(last).expect("a final JSON object");
    assert_eq!(output["drain"], drain);
    assert_eq!(
        server.completed_replies(),
        0,
        "the round was cut, not read to its end"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_sigterm_during_a_drain_stops_it_and_chat_exits_143_at_once_with_its_report() {
    let server = MockServer::start().await;
    server.push(very_slow_reply());
    let dir = TempDir::new();
    let (child, mut lines) = streaming_chat(
        &server,
        &dir,
        &["--drain-ms".to_owned(), "10000".to_owned()],
    )
    .await;
    send("-TERM", &child);
    let mut printed = String::new();
    until_draining(&mut lines, &mut printed).await;
    send("-TERM", &child);
    let finished = exits_within_2s(child, lines, printed).await;
    finished.assert_code(143);
    let drain = drain_in(&finished.stderr);
    assert_eq!(drain["reason"], "stopped", "{drain}");
    assert_eq!(server.completed_replies(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_abort_command_during_a_drain_stops_it_at_once_with_one_report() {
    let server = MockServer::start().await;
    server.push(very_slow_reply());
    let dir = TempDir::new();
    let (mut child, mut lines) = streaming_chat(&server, &dir, &[]).await;
    let abort = b"{\"command\": \"abort\", \"drainMs\": 10000}\n";
    let stdin = child.stdin.as_mut().expect("stdin is piped");
    stdin.write_all(abort).await.unwrap();
    let mut printed = String::new();
    until_draining(&mut lines, &mut printed).await;
    let stdin = child.stdin.as_mut().expect("stdin is piped");
    stdin.write_all(abort).await.unwrap();
    // Both aborts report before the chat reads on: the quit ends it once the turn has ended.
    stdin.write_all(b"{\"command\": \"quit\"}\n").await.unwrap();
    drop(child.stdin.take());
    let finished = exits_within_2s(child, lines, printed).await;
    finished.assert_code(0);
    let drains: Vec<Value> = finished
        .stderr
        .lines()
        .filter_map(|line| line.strip_prefix("drain: "))
        .map(|line| serde_json::from_str(line).expect("the drain line is JSON"))
        .collect();
    assert_eq!(
        drains.len(),
        2,
        "one report per abort:\n{}",
        finished.stderr
    );
    assert_eq!(drains[0], drains[1], "the same report");
    assert_eq!(drains[0]["reason"], "stopped", "{}", drains[0]);
    assert_eq!(server.completed_replies(), 0);
}
