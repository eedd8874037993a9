//! `LocalSubprocess` with real processes: this test binary re-executes itself as the child (the
//! `child_entry` probe) and, for the host-restart test, as a host that exits (the `host_entry`
//! probe).

use std::io::{BufRead, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use noetic_core::adapter::{SignalOutcome, StorageAdapter, SubprocessAdapter};
use noetic_core::{
    AgentHarness, Context, ContextOptions, DetachedHandle, DetachedOptions, Environment, Error,
    FrameworkEvent, Runtime, Spend, StepRegistry, StreamEvent, TokenUsage, run_code, sequence,
    spawn,
};
use noetic_platform_unix::{LocalSubprocess, MANIFEST_PREFIX, serve_if_child};
use noetic_storage_sqlite::SqliteStorage;
use serde_json::{Value, json};
use tokio::sync::mpsc;

/// The steps both this host and its re-executed children know.
fn registry() -> StepRegistry {
    StepRegistry::new()
        .register(child_work())
        .register(hold_group())
        .register(await_go())
}

/// Reports the process it runs in and charges the tokens it is given.
fn child_work() -> noetic_core::Step<u64, Value> {
    run_code("child_work", |tokens: u64, ctx: Context| async move {
        ctx.charge(Spend {
            usage: TokenUsage {
                input_tokens: tokens,
                output_tokens: 1,
                ..TokenUsage::default()
            },
            cost: Some(0.5),
        });
        Ok::<_, Error>(json!({"pid": std::process::id(), "doubled": tokens * 2}))
    })
    .build()
}

/// Starts a `sleep` in the child's process group, then waits until cancelled.
fn hold_group() -> noetic_core::Step<(), ()> {
    let start = run_code("start_sleeper", |_: (), _: Context| async move {
        let sleeper = std::process::Command::new("sleep").arg("1000").spawn()?;
        Ok::<_, std::io::Error>(sleeper.id())
    });
    let block = run_code("block", |_: u32, _: Context| async move {
        std::future::pending::<()>().await;
        Ok::<(), Error>(())
    });
    spawn(
        "hold_group",
        sequence("hold").step(start).step(block).build(),
    )
    .build()
}

/// Reads a line from the FIFO it is given: a child that waits until the test says go.
fn await_go() -> noetic_core::Step<String, String> {
    run_code("await_go", |fifo: String, _: Context| async move {
        let text = tokio::task::spawn_blocking(move || std::fs::read_to_string(fifo))
            .await
            .map_err(std::io::Error::other)??;
        Ok::<_, std::io::Error>(text.trim().to_owned())
    })
    .build()
}

const CHILD_PROBE: &str = "subprocess::child_entry";
const HOST_PROBE: &str = "subprocess::host_entry";
const HOST_ENV: &str = "NOETIC_TEST_SUBPROCESS_HOST";

/// The child program: not a test of its own. Run normally it returns at once; re-executed by a
/// `LocalSubprocess` of the tests below (`--exact subprocess::child_entry`), it serves the step
/// its host asked for and exits the process.
#[test]
fn child_entry() {
    serve_if_child(&registry(), || Runtime::builder("child").build());
}

/// A host that starts a detached child and exits abruptly: not a test of its own. Run normally it
/// returns at once; re-executed by `a_detached_child_survives_its_host_and_a_new_host_rejoins_it`
/// (with its settings in `NOETIC_TEST_SUBPROCESS_HOST`) it spawns the child, prints its handle id,
/// and exits once it has taken the child's first event.
#[test]
fn host_entry() {
    let Ok(settings) = std::env::var(HOST_ENV) else {
        return;
    };
    let settings: Value = serde_json::from_str(&settings).expect("host settings");
    let dir = PathBuf::from(settings["dir"].as_str().expect("dir"));
    let fifo = settings["fifo"].as_str().expect("fifo").to_owned();
    let executor = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    executor.block_on(async move {
        let manifests = SqliteStorage::open(dir.join("manifests.db"))
            .await
            .expect("sqlite");
        let harness = AgentHarness::builder("host-a")
            .environment(Environment::new().subprocess(adapter(&dir).manifests(manifests)))
            .build()
            .expect("harness");
        let (events, mut seen) = event_channel();
        let ctx = harness.create_context(ContextOptions::new().event_sink(events));
        let handle = harness
            .detached_spawn(&await_go(), fifo, &ctx, DetachedOptions::new())
            .await
            .expect("detached spawn");
        println!("handle {}", handle.handle_id());
        std::io::stdout().flush().expect("stdout");
        let waiting = tokio::spawn(handle.wait(None));
        let first = seen.recv().await.expect("the child's first event");
        assert!(
            first["type"]
                .as_str()
                .unwrap_or("")
                .ends_with("step_started")
        );
        // The host dies here, with its child still waiting on the FIFO.
        waiting.abort();
        std::process::exit(0);
    });
}

/// A `LocalSubprocess` over `registry()` whose children are this test binary's `child_entry`.
fn adapter(dir: &Path) -> LocalSubprocess {
    LocalSubprocess::new(&registry())
        .program(std::env::current_exe().expect("test binary"))
        .args(["--exact", CHILD_PROBE, "--nocapture", "--test-threads=1"])
        .socket_dir(dir)
}

/// An event sink passing on the child events (`subprocess_event`s) it sees.
fn event_channel() -> (
    Arc<dyn noetic_core::EventSink>,
    mpsc::UnboundedReceiver<Value>,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    let sink = move |event: StreamEvent| {
        if let StreamEvent::Framework(FrameworkEvent::SubprocessEvent { event, .. }) = event {
            let _ = tx.send(event);
        }
    };
    (Arc::new(sink), rx)
}

fn event_type(event: &Value) -> &str {
    event["type"].as_str().unwrap_or("")
}

fn names_step(event: &Value, step: &str) -> bool {
    event["data"].to_string().contains(&format!("\"{step}\""))
}

/// Kills a process group when dropped, so that a failing test leaves no child behind.
struct KillGroup(u32);

impl Drop for KillGroup {
    fn drop(&mut self) {
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(self.0 as i32),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// Whether a live (non-zombie) process is in process group `group`, by `/proc`.
fn group_alive(group: u32) -> bool {
    std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(proc_stat)
        .any(|(state, pgrp, _)| pgrp == group && state != "Z")
}

/// `(state, pgrp, start ticks)` of `pid`.
fn proc_stat(pid: u32) -> Option<(String, u32, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = text.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    Some((
        fields.first()?.to_string(),
        fields.get(2)?.parse().ok()?,
        fields.get(19)?.parse().ok()?,
    ))
}

fn make_fifo(dir: &Path) -> PathBuf {
    let fifo = dir.join("go.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
    fifo
}

/// Writes `go` to the FIFO the child waits on.
async fn say_go(fifo: PathBuf) {
    tokio::task::spawn_blocking(move || std::fs::write(fifo, "go\n"))
        .await
        .expect("join")
        .expect("write fifo");
}

#[tokio::test]
async fn a_step_runs_in_a_child_process_and_its_result_events_and_spend_come_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let harness = AgentHarness::builder("host")
        .environment(Environment::new().subprocess(adapter(dir.path())))
        .build()
        .expect("harness");
    let (events, mut seen) = event_channel();
    let ctx = harness.create_context(ContextOptions::new().event_sink(events));
    let output: Value = harness.run(&child_work(), 40, &ctx).await.expect("runs");
    assert_eq!(output["doubled"], 80);
    let child_pid = output["pid"].as_u64().expect("pid");
    assert_ne!(
        child_pid,
        u64::from(std::process::id()),
        "ran in another process"
    );
    // The child's own step events came back, tagged as the child's.
    let mut types = Vec::new();
    while let Ok(event) = seen.try_recv() {
        assert!(names_step(&event, "child_work"), "{event}");
        types.push(event_type(&event).to_owned());
    }
    assert_eq!(types, ["child:step_started", "child:step_completed"]);
    // What the child spent is charged to the caller's context.
    assert_eq!(ctx.tokens().input_tokens, 40);
    assert_eq!(ctx.tokens().output_tokens, 1);
    assert_eq!(ctx.cost(), Some(0.5));
    // A finished child leaves no manifest.
    assert!(
        harness
            .runtime()
            .subprocess()
            .list_live()
            .await
            .expect("list")
            .is_empty()
    );
}

#[tokio::test]
async fn cancelling_the_parent_stops_the_child_s_whole_process_group() {
    let dir = tempfile::tempdir().expect("tempdir");
    let harness = AgentHarness::builder("host")
        .environment(Environment::new().subprocess(adapter(dir.path())))
        .build()
        .expect("harness");
    let (events, mut seen) = event_channel();
    let ctx = harness.create_context(ContextOptions::new().event_sink(events));
    let running = {
        let (harness, ctx) = (harness.clone(), ctx.clone());
        tokio::spawn(async move { harness.run(&hold_group(), (), &ctx).await })
    };
    // The sleeper is started once `start_sleeper` completed in the child.
    loop {
        let event = seen.recv().await.expect("child events");
        if event_type(&event) == "child:step_completed" && names_step(&event, "start_sleeper") {
            break;
        }
    }
    let live = harness
        .runtime()
        .subprocess()
        .list_live()
        .await
        .expect("list");
    assert_eq!(live.len(), 1);
    let group = live[0].pid;
    assert!(!live[0].detached);
    let members = std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| proc_stat(*pid).is_some_and(|(state, pgrp, _)| pgrp == group && state != "Z"))
        .count();
    assert!(
        members >= 2,
        "the child and its sleeper share a group ({members})"
    );

    ctx.abort(Some("user pressed stop".to_owned()));
    let error = running.await.expect("join").expect_err("cancelled");
    assert_eq!(error.code(), "CANCELLED", "{error}");
    assert!(
        !group_alive(group),
        "no process of the child's group remains"
    );
    assert!(
        harness
            .runtime()
            .subprocess()
            .list_live()
            .await
            .expect("list")
            .is_empty()
    );
}

#[tokio::test]
async fn a_detached_child_survives_its_host_and_a_new_host_rejoins_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = make_fifo(dir.path());
    // Host A: another process, which starts the child and exits.
    let settings = json!({"dir": dir.path(), "fifo": fifo}).to_string();
    let mut host_a = std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", HOST_PROBE, "--nocapture", "--test-threads=1"])
        .env(HOST_ENV, settings)
        .stdout(Stdio::piped())
        .spawn()
        .expect("host A");
    let handle_id = std::io::BufReader::new(host_a.stdout.take().expect("stdout"))
        .lines()
        .map_while(Result::ok)
        // libtest prints `test subprocess::host_entry ... ` before the probe's own line.
        .find_map(|line| line.split_once("handle ").map(|(_, id)| id.to_owned()))
        .expect("host A printed the handle");
    assert!(host_a.wait().expect("host A exits").success());

    // Host B: this process, over the same manifests.
    let manifests = SqliteStorage::open(dir.path().join("manifests.db"))
        .await
        .expect("sqlite");
    let host_b = adapter(dir.path()).manifests(manifests.clone());
    let live = host_b.list_live().await.expect("list");
    assert_eq!(live.len(), 1, "{live:?}");
    assert_eq!(live[0].handle_id, handle_id);
    assert_eq!(live[0].step_id, "await_go");
    assert!(live[0].detached);
    let pid = live[0].pid;
    let _cleanup = KillGroup(pid);
    assert!(group_alive(pid), "the child outlived host A");

    let harness = AgentHarness::builder("host-b")
        .environment(Environment::new().subprocess(host_b.clone()))
        .build()
        .expect("harness");
    let (events, mut seen) = event_channel();
    let ctx = harness.create_context(ContextOptions::new().event_sink(events));
    let handle = harness
        .restore_detached::<String>(&handle_id)
        .await
        .expect("rejoined")
        .report_to(&ctx);
    assert_eq!(handle.pid(), Some(pid));
    say_go(fifo).await;
    let output = handle
        .wait(Some(Duration::from_secs(30)))
        .await
        .expect("output");
    assert_eq!(output, "go");
    // Host A took (and acknowledged) `step_started`; host B gets what followed, once.
    let mut types = Vec::new();
    while let Ok(event) = seen.try_recv() {
        types.push(event_type(&event).to_owned());
    }
    assert_eq!(types, ["child:step_completed"]);
    assert!(host_b.list_live().await.expect("list").is_empty());
    assert!(
        manifests
            .list(MANIFEST_PREFIX)
            .await
            .expect("keys")
            .is_empty()
    );
}

#[tokio::test]
async fn a_pid_reused_by_another_process_is_not_taken_for_the_child() {
    let dir = tempfile::tempdir().expect("tempdir");
    let storage = Arc::new(noetic_core::adapter::InMemoryStorage::new());
    let host = adapter(dir.path()).manifests(storage.clone());
    // In a group of its own, so that a failing test kills it (and it holds no pipe of cargo's).
    let mut unrelated = std::process::Command::new("sleep")
        .arg("1000")
        .process_group(0)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("sleep");
    let pid = unrelated.id();
    let _cleanup = KillGroup(pid);
    let (_, _, ticks) = proc_stat(pid).expect("stat");
    let manifest = |handle: &str, start_ticks: u64| {
        json!({
            "version": 1,
            "request": {
                "handleId": handle, "stepId": "await_go", "input": "x",
                "executionId": handle, "detached": true
            },
            "pid": pid, "startTicks": start_ticks, "startedAtMs": 1,
            "socket": dir.path().join(format!("{handle}.sock")),
            "log": dir.path().join(format!("{handle}.log")),
        })
        .to_string()
        .into_bytes()
    };
    // A child that ran as `pid` earlier (another start time) and the process holding `pid` now.
    storage
        .set(
            &format!("{MANIFEST_PREFIX}gone"),
            manifest("gone", ticks.saturating_sub(100)),
        )
        .await
        .expect("set");
    storage
        .set(&format!("{MANIFEST_PREFIX}same"), manifest("same", ticks))
        .await
        .expect("set");
    let live = host.list_live().await.expect("list");
    let handles: Vec<&str> = live.iter().map(|child| child.handle_id.as_str()).collect();
    assert_eq!(
        handles,
        ["same"],
        "only the manifest whose start time matches"
    );
    assert_eq!(
        storage.list(MANIFEST_PREFIX).await.expect("keys"),
        [format!("{MANIFEST_PREFIX}same")],
        "the stale manifest is cleared"
    );
    assert!(host.reattach("gone").await.expect("reattach").is_none());
    assert_eq!(
        host.pause("gone").await.expect("pause"),
        SignalOutcome::NotFound,
        "the unrelated process is not signalled"
    );
    assert_ne!(proc_stat(pid).expect("alive").0, "T", "not paused");
    unrelated.kill().expect("kill");
    unrelated.wait().expect("reaped");
}

/// A detached `await_go` child of `host`, waiting on `fifo`, and the guard that kills its group.
async fn waiting_child(host: &LocalSubprocess, fifo: &Path) -> (DetachedHandle<String>, KillGroup) {
    let harness = AgentHarness::builder("host")
        .environment(Environment::new().subprocess(host.clone()))
        .build()
        .expect("harness");
    let ctx = harness.create_context(ContextOptions::new());
    let handle = harness
        .detached_spawn(
            &await_go(),
            fifo.display().to_string(),
            &ctx,
            DetachedOptions::new(),
        )
        .await
        .expect("spawned");
    let pid = handle.pid().expect("pid");
    (handle, KillGroup(pid))
}

#[tokio::test]
async fn a_dead_child_s_manifest_is_cleared_and_its_handle_is_evicted() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = make_fifo(dir.path());
    let storage = Arc::new(noetic_core::adapter::InMemoryStorage::new());
    let host = adapter(dir.path()).manifests(storage.clone());
    // `child` kills the group when the test ends, passed or not.
    let (handle, child) = waiting_child(&host, &fifo).await;
    let (id, pid) = (handle.handle_id().to_owned(), child.0);
    assert_eq!(host.list_live().await.expect("list").len(), 1);
    // Killed from outside, before it finished.
    nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .expect("kill");
    let error = handle
        .wait(Some(Duration::from_secs(30)))
        .await
        .expect_err("evicted");
    assert_eq!(error.code(), "HANDLE_EVICTED", "{error}");
    assert!(host.list_live().await.expect("list").is_empty());
    assert!(
        storage
            .list(MANIFEST_PREFIX)
            .await
            .expect("keys")
            .is_empty()
    );
    let error = DetachedHandle::<String>::restore(&host, &id)
        .await
        .expect_err("nothing to rejoin");
    assert_eq!(error.code(), "HANDLE_EVICTED");
}

#[tokio::test]
async fn a_detached_child_is_paused_resumed_and_stopped_with_its_group() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fifo = make_fifo(dir.path());
    let host = adapter(dir.path());
    // `child` kills the group when the test ends, passed or not.
    let (handle, child) = waiting_child(&host, &fifo).await;
    let (id, pid) = (handle.handle_id().to_owned(), child.0);
    assert_eq!(host.pause(&id).await.expect("pause"), SignalOutcome::Done);
    assert_eq!(proc_stat(pid).expect("stat").0, "T", "stopped");
    assert_eq!(host.resume(&id).await.expect("resume"), SignalOutcome::Done);
    assert_ne!(proc_stat(pid).expect("stat").0, "T", "running again");
    assert_eq!(
        host.stop(&id, Duration::from_secs(1)).await.expect("stop"),
        SignalOutcome::Done
    );
    assert!(!group_alive(pid));
    assert!(host.list_live().await.expect("list").is_empty());
    assert_eq!(
        host.stop(&id, Duration::from_secs(1)).await.expect("stop"),
        SignalOutcome::NotFound
    );
    let error = handle.wait(None).await.expect_err("stopped");
    assert_eq!(error.code(), "HANDLE_EVICTED");
}

#[tokio::test]
async fn a_child_that_never_serves_fails_the_spawn_with_its_stderr() {
    let dir = tempfile::tempdir().expect("tempdir");
    // `sh -c` that writes to stderr and exits: not a noetic child.
    let host = LocalSubprocess::new(&registry())
        .program("sh")
        .args(["-c", "echo 'no serve_if_child here' >&2; exit 3"])
        .socket_dir(dir.path());
    let harness = AgentHarness::builder("host")
        .environment(Environment::new().subprocess(host.clone()))
        .build()
        .expect("harness");
    let ctx = harness.create_context(ContextOptions::new());
    let error = harness
        .run(&child_work(), 1, &ctx)
        .await
        .expect_err("fails");
    assert_eq!(error.code(), "SUBPROCESS_FAILED", "{error}");
    let message = error.to_string();
    assert!(message.contains("child_work"), "{message}");
    assert!(message.contains("no serve_if_child here"), "{message}");
    assert!(host.list_live().await.expect("list").is_empty());
    assert_eq!(
        std::fs::read_dir(dir.path()).expect("dir").count(),
        0,
        "no socket or log left"
    );
}

#[tokio::test]
async fn a_corrupt_manifest_is_a_clear_error_and_stays_in_place() {
    let dir = tempfile::tempdir().expect("tempdir");
    let storage = Arc::new(noetic_core::adapter::InMemoryStorage::new());
    let host = adapter(dir.path()).manifests(storage.clone());
    let key = format!("{MANIFEST_PREFIX}broken");
    storage.set(&key, b"{not json".to_vec()).await.expect("set");
    let error = host.list_live().await.expect_err("corrupt");
    assert_eq!(error.code(), "SUBPROCESS_MANIFEST_CORRUPT");
    assert!(error.to_string().contains(&key), "{error}");
    storage
        .set(&key, br#"{"version": 9}"#.to_vec())
        .await
        .expect("set");
    let error = host.list_live().await.expect_err("unknown version");
    assert!(
        error.to_string().contains("unknown manifest version 9"),
        "{error}"
    );
    assert!(
        storage.get(&key).await.expect("get").is_some(),
        "left in place"
    );
}

#[tokio::test]
async fn a_workflow_run_code_naming_a_subprocess_adapter_runs_in_a_child() {
    use noetic_core::workflow::{HydrateOptions, WorkflowDocument, WorkflowRegistry};
    let dir = tempfile::tempdir().expect("tempdir");
    // The node's id is the registered step's: the child runs its own `child_work`.
    let document = WorkflowDocument::from_json(
        &json!({
            "version": 1,
            "root": {"kind": "runCode", "id": "child_work", "execute": "work", "subprocess": "local"}
        })
        .to_string(),
    )
    .expect("document");
    let registry = WorkflowRegistry::new()
        .code("work", |n: u64, _: Context| async move {
            Ok::<_, Error>(json!({"pid": std::process::id(), "doubled": n * 2}))
        })
        .subprocess("local", adapter(dir.path()));
    let step = document
        .hydrate(&registry, &HydrateOptions::new())
        .expect("hydrates");
    let harness = AgentHarness::builder("host").build().expect("harness");
    let ctx = harness.create_context(ContextOptions::new());
    let output: Value = harness.run(&step, json!(21), &ctx).await.expect("runs");
    assert_eq!(output["doubled"], 42);
    assert_ne!(
        output["pid"].as_u64(),
        Some(u64::from(std::process::id())),
        "ran in a child, not through the local code body"
    );
    assert_eq!(
        ctx.tokens().input_tokens,
        21,
        "the child's charge came back"
    );
}
