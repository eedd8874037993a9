//! `noetic chat --storage sqlite:PATH --thread T`: the thread survives a SIGKILLed chat, with real
//! processes against the mock provider. A chat's `/status` line is printed only after every line
//! before it was handled, and a message is queued only once it is recorded: a status showing a
//! message queued (or a steer sent) means it is durable.

use std::process::Stdio;

use noetic_test_support::{MockServer, RecordedHttpRequest};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStderr, ChildStdin};

use super::{CHILD_TIMEOUT, Finished, TempDir, args, mock_options, noetic, run_noetic, text_reply};

const TTL: [&str; 2] = ["--lease-ttl-ms", "300"];

fn chat_flow(tools: &[Value]) -> Value {
    json!({
        "version": 1,
        "root": {"kind": "callModel", "id": "assistant", "instructions": "Chat.", "tools": tools}
    })
}

fn chat_args(flow: &str, db: &str, server: &MockServer, extra: &[&str]) -> Vec<String> {
    let storage = format!("sqlite:{db}");
    args(
        &[
            &["chat", flow, "--storage", &storage, "--thread", "t"][..],
            &TTL,
            extra,
        ]
        .concat(),
        &mock_options(server),
    )
}

/// A live chat: its stdin, its stderr lines, and the child.
struct LiveChat {
    child: Child,
    stdin: ChildStdin,
    stderr: Lines<BufReader<ChildStderr>>,
}

impl LiveChat {
    fn start(args: Vec<String>) -> Self {
        let mut command = noetic(args);
        command.stdout(Stdio::null());
        let mut child = command.spawn().expect("the noetic binary starts");
        let stdin = child.stdin.take().expect("stdin is piped");
        let stderr = BufReader::new(child.stderr.take().expect("stderr is piped")).lines();
        LiveChat {
            child,
            stdin,
            stderr,
        }
    }

    async fn send(&mut self, line: &str) {
        self.stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .expect("write to the chat");
    }

    /// Sends `/status` and returns the status line it prints.
    async fn status(&mut self) -> Value {
        self.send("/status").await;
        tokio::time::timeout(CHILD_TIMEOUT, async {
            while let Some(line) = self.stderr.next_line().await.expect("read stderr") {
                if let Ok(status @ Value::Object(_)) = serde_json::from_str::<Value>(&line) {
                    return status;
                }
            }
            panic!("stderr ended without a status line");
        })
        .await
        .expect("a status line in time")
    }

    async fn sigkill(mut self) {
        self.child.start_kill().expect("kill the chat");
        let status = tokio::time::timeout(CHILD_TIMEOUT, self.child.wait())
            .await
            .expect("the killed chat exits")
            .expect("wait for the chat");
        assert!(!status.success());
    }
}

/// A chat on the thread once the killed holder's lease has expired (before that it exits 1 with
/// `LEASE_HELD` having sent nothing, and is tried again), reading `stdin`.
async fn chat_after_the_lease(server: &MockServer, args: Vec<String>, stdin: &str) -> Finished {
    let deadline = tokio::time::Instant::now() + CHILD_TIMEOUT;
    loop {
        let requests = server.requests().len();
        let finished = run_noetic(args.clone(), stdin).await;
        if finished.code == 1 && finished.stderr.contains("error[LEASE_HELD]") {
            assert_eq!(
                server.requests().len(),
                requests,
                "a refused chat sends nothing"
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

/// The role and text of each message item of a request's input.
fn messages(request: &RecordedHttpRequest) -> Vec<String> {
    request.body["input"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|item| item["type"] == "message")
        .map(|item| {
            let text = match &item["content"] {
                Value::String(text) => text.clone(),
                Value::Array(parts) => parts
                    .iter()
                    .filter_map(|part| part["text"].as_str())
                    .collect::<String>(),
                _ => String::new(),
            };
            format!("{}: {text}", item["role"].as_str().unwrap_or("?"))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_queued_chat_message_survives_sigkill_and_the_next_chat_on_the_thread_runs_it() {
    let dir = TempDir::new();
    let server = MockServer::start().await;
    server.push(text_reply("never sent").stall_after_events(0));
    let flow = dir.write("flow.json", &chat_flow(&[]));
    let db = dir.path().join("chat.db");
    let db = db.to_str().unwrap().to_owned();

    let mut chat = LiveChat::start(chat_args(&flow, &db, &server, &[]));
    chat.send("first").await;
    tokio::time::timeout(CHILD_TIMEOUT, server.wait_for_requests(1))
        .await
        .expect("the first turn's request");
    chat.send("second").await;
    let status = chat.status().await;
    assert_eq!(status["status"], "running", "{status}");
    assert_eq!(status["queued"], 1, "{status}");

    // While it lives, a second chat on the thread is refused.
    let refused = run_noetic(chat_args(&flow, &db, &server, &[]), "").await;
    refused.assert_code(1);
    assert!(refused.stderr.contains("error[LEASE_HELD]"), "{refused:?}");
    assert!(refused.stderr.contains("thread/t"), "{refused:?}");

    chat.sigkill().await;
    server.push(text_reply("answer one"));
    server.push(text_reply("answer two"));
    let finished = chat_after_the_lease(&server, chat_args(&flow, &db, &server, &[]), "").await;
    finished.assert_code(0);
    assert!(finished.stdout.contains("answer one"), "{finished:?}");
    assert!(finished.stdout.contains("answer two"), "{finished:?}");
    let requests = server.requests();
    assert_eq!(requests.len(), 3, "the cut request, then one per turn");
    assert_eq!(messages(&requests[1]), ["user: first"]);
    assert_eq!(
        messages(&requests[2]),
        ["user: first", "assistant: answer one", "user: second"]
    );

    // A third chat continues the same conversation.
    server.push(text_reply("answer three"));
    let finished = run_noetic(chat_args(&flow, &db, &server, &[]), "third\n").await;
    finished.assert_code(0);
    let requests = server.requests();
    assert_eq!(
        messages(requests.last().unwrap()),
        [
            "user: first",
            "assistant: answer one",
            "user: second",
            "assistant: answer two",
            "user: third"
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_steer_sent_mid_tool_survives_sigkill_and_the_resumed_turn_applies_it() {
    let dir = TempDir::new();
    let server = MockServer::start().await;
    // The shell call signals `started` (a FIFO the test reads) and blocks reading `release`, which
    // nobody writes: the turn is inside its tool call when the chat is killed.
    let started = dir.path().join("started");
    let release = dir.path().join("release");
    for fifo in [&started, &release] {
        let status = std::process::Command::new("mkfifo")
            .arg(fifo)
            .status()
            .expect("mkfifo runs");
        assert!(status.success());
    }
    let pid = dir.path().join("shell.pid");
    let command = format!(
        "echo $$ > {pid}; echo go > {started}; read line < {release}; echo looked up",
        pid = pid.display(),
        started = started.display(),
        release = release.display()
    );
    server.push(super::call_reply("shell", &json!({"command": command})));
    let flow = dir.write("flow.json", &chat_flow(&[json!({"type": "shell"})]));
    let db = dir.path().join("chat.db");
    let db = db.to_str().unwrap().to_owned();

    let fs_dir = dir.path().to_str().unwrap().to_owned();
    let shell_flags = ["--allow-fs", fs_dir.as_str(), "--allow-shell"];
    let mut chat = LiveChat::start(chat_args(&flow, &db, &server, &shell_flags));
    chat.send("look it up").await;
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
    chat.send("/between and be brief").await;
    let status = chat.status().await;
    assert_eq!(status["status"], "running", "{status}");
    chat.sigkill().await;
    // The killed chat's shell is orphaned, still blocked: kill it too.
    let orphan = std::fs::read_to_string(&pid).unwrap();
    let status = std::process::Command::new("kill")
        .args(["-9", orphan.trim()])
        .status()
        .expect("kill runs");
    assert!(status.success());

    // The resumed turn runs the call again (at-least-once); unblock it once it has started.
    let (release_path, started_path) = (release.clone(), started.clone());
    let unblock = tokio::task::spawn_blocking(move || {
        let _ = std::fs::read_to_string(started_path);
        std::fs::write(release_path, "go\n")
    });
    server.push(text_reply("brief: looked up"));
    let finished =
        chat_after_the_lease(&server, chat_args(&flow, &db, &server, &shell_flags), "").await;
    finished.assert_code(0);
    assert!(finished.stdout.contains("brief: looked up"), "{finished:?}");
    tokio::time::timeout(CHILD_TIMEOUT, unblock)
        .await
        .expect("the call ran again")
        .unwrap()
        .unwrap();
    let requests = server.requests();
    assert_eq!(
        requests.len(),
        2,
        "the recorded round was not requested again"
    );
    // The steer joined the resumed turn's next round, after the call's output.
    assert_eq!(
        messages(&requests[1]),
        ["user: look it up", "user: and be brief"]
    );
    let input = requests[1].body["input"].as_array().unwrap();
    let output_at = input
        .iter()
        .position(|item| item["type"] == "function_call_output")
        .expect("the call's output");
    let steer_at = input
        .iter()
        .rposition(|item| item["type"] == "message")
        .unwrap();
    assert!(output_at < steer_at, "{input:?}");
}

/// Reads `chat`'s stderr until a line starting with `approval needed:`; returns its approval id, or
/// `None` when the chat ended first (refused with `LEASE_HELD` while the killed chat's lease lives).
async fn approval_prompt(chat: &mut LiveChat) -> Option<String> {
    tokio::time::timeout(CHILD_TIMEOUT, async {
        while let Some(line) = chat.stderr.next_line().await.expect("read stderr") {
            if let Some(prompt) = line.strip_prefix("approval needed:") {
                let id = prompt.split("/approve ").nth(1)?.split(' ').next()?;
                return Some(id.to_owned());
            }
            if line.contains("error[LEASE_HELD]") {
                return None;
            }
        }
        None
    })
    .await
    .expect("a prompt or the end of the chat in time")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_awaiting_approval_survives_sigkill_and_runs_once_when_approved_after_the_restart() {
    let dir = TempDir::new();
    let server = MockServer::start().await;
    // Each run of the shell call appends a line: the count is how often the tool ran.
    server.set_responder(|request| {
        let answered = request.body["input"].as_array().is_some_and(|items| {
            items
                .iter()
                .any(|item| item["type"] == "function_call_output")
        });
        if answered {
            text_reply("appended")
        } else {
            crate::call_reply("shell", &json!({"command": "echo ran >> runs.txt"}))
        }
    });
    let fs_dir = dir.path().join("work");
    std::fs::create_dir_all(&fs_dir).unwrap();
    let fs_dir = fs_dir.to_str().unwrap().to_owned();
    let gated = [
        "--allow-fs",
        fs_dir.as_str(),
        "--allow-shell",
        "--needs-approval",
        "shell",
    ];
    let flow = dir.write("flow.json", &chat_flow(&[json!({"type": "shell"})]));
    let db = dir.path().join("chat.db");
    let db = db.to_str().unwrap().to_owned();

    let mut chat = LiveChat::start(chat_args(&flow, &db, &server, &gated));
    chat.send("append a line").await;
    let asked = approval_prompt(&mut chat)
        .await
        .expect("asked before the kill");
    chat.sigkill().await;
    let runs = std::path::Path::new(&fs_dir).join("runs.txt");
    assert!(!runs.exists(), "nothing ran before the decision");

    // The next chat on the thread resumes the turn, which asks again under the same id.
    let deadline = tokio::time::Instant::now() + CHILD_TIMEOUT;
    let mut chat = loop {
        let mut chat = LiveChat::start(chat_args(&flow, &db, &server, &gated));
        match approval_prompt(&mut chat).await {
            Some(again) => {
                assert_eq!(again, asked, "the same call asks under the same id");
                break chat;
            }
            None => assert!(
                tokio::time::Instant::now() < deadline,
                "the killed chat's lease never expired"
            ),
        }
    };
    chat.send(&format!("/approve {asked}")).await;
    let status = chat.status().await;
    assert_ne!(status["status"], "awaiting_approval", "{status}");
    drop(chat.stdin);
    let exited = tokio::time::timeout(CHILD_TIMEOUT, chat.child.wait())
        .await
        .expect("the chat finishes the turn and exits")
        .unwrap();
    assert!(exited.success());
    assert_eq!(
        std::fs::read_to_string(&runs).unwrap(),
        "ran\n",
        "ran exactly once"
    );
    let last = server.requests().pop().unwrap();
    assert!(
        last.body["input"]
            .as_array()
            .unwrap()
            .iter()
            .any(|item| item["type"] == "function_call_output"),
        "the turn went on with the call's output"
    );
}
