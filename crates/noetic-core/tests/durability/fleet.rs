//! Threads shared by hosts on one store (`shared_threads` + `serve`), in one process: each "host" is
//! a harness of its own on one `KvDurableStore`. A host's crash is its runtime dropped (nothing more
//! is written). The same with real processes on PostgreSQL is in `noetic-storage-postgres`'s tests.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use noetic_core::adapter::durable::{Commit, DurableStore, Lease, LeaseRequest, LogEntry, Records};
use noetic_core::{
    AgentHarness, DeliveryMode, Error, ExecuteOptions, Item, KvDurableStore, ServeOptions,
    StorageAdapter, StorageOp, StoredThread, Tool, ToolContext, ToolError, call_model,
};
use noetic_test_support::{RecordedRequest, ScriptedModel, ScriptedResponse};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;
use tokio::sync::{Notify, mpsc, oneshot, watch};

use crate::support::{Counts, echo_tool, serve};

/// The shared store, announcing every commit (so a test can wait for the state it expects) and
/// counting the thread messages read back (so it knows when a host has read one).
struct Watched {
    inner: KvDurableStore,
    commits: watch::Sender<u64>,
    messages_read: watch::Sender<u64>,
    /// Fails the next commit that ends a session turn (it drops the turn's execution lease).
    fail_next_turn_end: std::sync::atomic::AtomicBool,
    /// Makes a commit that ends a turn wait (100 ms, at most) for a `turn_completed` to reach the
    /// event log first, which it must not.
    slow_turn_end: std::sync::atomic::AtomicBool,
    /// Turn ends recorded and `turn_completed`s logged, in the order the store applied them.
    turn_ends: std::sync::Mutex<Vec<&'static str>>,
    end_logged: Notify,
}

impl Watched {
    fn new() -> Arc<Self> {
        Arc::new(Watched {
            inner: KvDurableStore::in_memory(),
            commits: watch::Sender::new(0),
            messages_read: watch::Sender::new(0),
            fail_next_turn_end: std::sync::atomic::AtomicBool::new(false),
            slow_turn_end: std::sync::atomic::AtomicBool::new(false),
            turn_ends: std::sync::Mutex::new(Vec::new()),
            end_logged: Notify::new(),
        })
    }

    /// Waits (at most 20 s) until `check` holds of the store, looking again after every commit.
    async fn until<F>(&self, what: &str, mut check: F)
    where
        F: AsyncFnMut() -> bool,
    {
        let mut commits = self.commits.subscribe();
        let waited = tokio::time::timeout(Duration::from_secs(20), async {
            loop {
                commits.borrow_and_update();
                if check().await {
                    return;
                }
                commits.changed().await.unwrap();
            }
        })
        .await;
        assert!(waited.is_ok(), "timed out waiting until {what}");
    }
}

impl DurableStore for Watched {
    fn commit(&self, commit: Commit) -> BoxFuture<'_, noetic_core::Result<()>> {
        Box::pin(async move {
            let ends_turn = !commit.drop_leases.is_empty();
            let logs_end = commit.appends.iter().any(|append| {
                append.log.ends_with("/events")
                    && append
                        .entries
                        .iter()
                        .any(|entry| String::from_utf8_lossy(entry).contains("turn_completed"))
            });
            if ends_turn && self.slow_turn_end.load(std::sync::atomic::Ordering::SeqCst) {
                let _ =
                    tokio::time::timeout(Duration::from_millis(100), self.end_logged.notified())
                        .await;
            }
            let result = if ends_turn
                && self
                    .fail_next_turn_end
                    .swap(false, std::sync::atomic::Ordering::SeqCst)
            {
                Err(Error::StorageBusy {
                    operation: "commit",
                    key: commit.drop_leases[0].clone(),
                    source: "injected: the database was busy".into(),
                })
            } else {
                self.inner.commit(commit).await
            };
            if result.is_ok() && (ends_turn || logs_end) {
                let what = if ends_turn { "recorded" } else { "logged" };
                self.turn_ends.lock().unwrap().push(what);
            }
            if result.is_ok() && logs_end {
                self.end_logged.notify_one();
            }
            self.commits.send_modify(|n| *n += 1);
            result
        })
    }
    fn record<'a>(&'a self, key: &'a str) -> BoxFuture<'a, noetic_core::Result<Option<Vec<u8>>>> {
        self.inner.record(key)
    }
    fn records<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, noetic_core::Result<Records>> {
        self.inner.records(prefix)
    }
    fn read_log<'a>(
        &'a self,
        log: &'a str,
        from: u64,
    ) -> BoxFuture<'a, noetic_core::Result<Vec<LogEntry>>> {
        Box::pin(async move {
            let entries = self.inner.read_log(log, from).await?;
            if log.ends_with("/messages") && !entries.is_empty() {
                self.messages_read
                    .send_modify(|n| *n += entries.len() as u64);
            }
            Ok(entries)
        })
    }
    fn next_seq<'a>(&'a self, log: &'a str) -> BoxFuture<'a, noetic_core::Result<u64>> {
        self.inner.next_seq(log)
    }
    fn acquire_lease<'a>(
        &'a self,
        request: LeaseRequest<'a>,
    ) -> BoxFuture<'a, noetic_core::Result<Lease>> {
        self.inner.acquire_lease(request)
    }
    fn release_lease<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, noetic_core::Result<()>> {
        Box::pin(async move {
            let result = self.inner.release_lease(lease).await;
            self.commits.send_modify(|n| *n += 1);
            result
        })
    }
    fn lease<'a>(&'a self, name: &'a str) -> BoxFuture<'a, noetic_core::Result<Option<Lease>>> {
        self.inner.lease(name)
    }
    fn runnable<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, noetic_core::Result<Vec<String>>> {
        self.inner.runnable(prefix)
    }
    fn wait_runnable(&self, timeout: Duration) -> BoxFuture<'_, noetic_core::Result<Vec<String>>> {
        self.inner.wait_runnable(timeout)
    }
}

impl StorageAdapter for Watched {
    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, noetic_core::Result<Option<Vec<u8>>>> {
        self.inner.get(key)
    }
    fn set<'a>(&'a self, key: &'a str, value: Vec<u8>) -> BoxFuture<'a, noetic_core::Result<()>> {
        self.inner.set(key, value)
    }
    fn delete<'a>(&'a self, key: &'a str) -> BoxFuture<'a, noetic_core::Result<()>> {
        self.inner.delete(key)
    }
    fn list<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, noetic_core::Result<Vec<String>>> {
        self.inner.list(prefix)
    }
    fn get_many<'a>(
        &'a self,
        keys: &'a [String],
    ) -> BoxFuture<'a, noetic_core::Result<Vec<Option<Vec<u8>>>>> {
        self.inner.get_many(keys)
    }
    fn batch(&self, ops: Vec<StorageOp>) -> BoxFuture<'_, noetic_core::Result<()>> {
        self.inner.batch(ops)
    }
}

fn host(store: &Arc<Watched>, model: &ScriptedModel, tool: Tool) -> AgentHarness {
    AgentHarness::builder("fleet")
        .provider("scripted", model.clone())
        .agent_graph(
            call_model("chat")
                .model("scripted-model")
                .instructions("Chat.")
                .tool(tool),
        )
        .durable(store.clone())
        .shared_threads()
        .lease_ttl(Duration::from_millis(300))
        .build()
        .unwrap()
}

/// Answers every request with the user texts it carries.
fn answering() -> ScriptedModel {
    ScriptedModel::responding(|request: &RecordedRequest| {
        ScriptedResponse::text(&format!("re: {}", request.user_texts().join(" + ")))
    })
}

fn on(thread: &str) -> ExecuteOptions {
    ExecuteOptions::new().thread_id(thread)
}

/// Serves `harness` on a task until the returned sender is used (or dropped).
async fn stored(harness: &AgentHarness, thread: &str) -> Option<StoredThread> {
    harness.stored_thread(thread).await.unwrap()
}

/// Whether the thread has settled every message and its history ends with an answer.
async fn settled(harness: &AgentHarness, thread: &str, answers: usize) -> bool {
    stored(harness, thread).await.is_some_and(|thread| {
        thread.pending == 0
            && thread.turn_in_flight.is_none()
            && thread
                .history
                .iter()
                .filter(|item| item.role() == Some(noetic_core::Role::Assistant))
                .count()
                >= answers
    })
}

fn texts(items: &[Item]) -> Vec<String> {
    items
        .iter()
        .filter_map(|item| Some(format!("{:?}: {}", item.role()?, item.text()?)))
        .collect()
}

#[tokio::test]
async fn messages_accepted_on_a_host_that_does_not_serve_run_once_on_one_that_does() {
    let store = Watched::new();
    let counts = Arc::new(Counts::default());
    let model = answering();
    let front = host(&store, &model, echo_tool(counts.clone(), None));
    let worker = host(&store, &model, echo_tool(counts, None));
    let (stop, serving) = serve(&worker);

    front.execute("one", on("a")).await.unwrap();
    front.execute("two", on("b")).await.unwrap();
    store
        .until("both threads answered", async || {
            settled(&front, "a", 1).await && settled(&front, "b", 1).await
        })
        .await;
    front.execute("three", on("a")).await.unwrap();
    store
        .until("the second message answered", async || {
            settled(&front, "a", 2).await
        })
        .await;

    let a = stored(&front, "a").await.unwrap();
    assert_eq!(
        texts(&a.history),
        [
            "User: one",
            "Assistant: re: one",
            "User: three",
            "Assistant: re: one + three"
        ]
    );
    assert_eq!((a.accepted, a.pending), (2, 0));
    assert_eq!(a.last_output, Some(json!("re: one + three")));
    assert_eq!(model.request_count(), 3, "one request per turn, none twice");
    assert!(
        store.runnable("thread/").await.unwrap().is_empty(),
        "a thread with no work left is not runnable"
    );
    let _ = stop.send(());
    let report = serving.await.unwrap();
    assert_eq!((report.claimed, report.released, report.lost), (3, 3, 0));
    assert!(
        front.stored_thread("never").await.unwrap().is_none(),
        "an unknown thread reads as none"
    );
}

#[derive(Deserialize, JsonSchema)]
struct LookArgs {
    /// What to look up.
    text: String,
}

/// A tool that signals `started` and waits for `release` before answering.
fn gated_tool(started: mpsc::UnboundedSender<()>, release: Arc<Notify>) -> Tool {
    Tool::new(
        "echo",
        "Echoes the text",
        move |args: LookArgs, _: ToolContext| {
            let (started, release) = (started.clone(), release.clone());
            async move {
                let _ = started.send(());
                release.notified().await;
                Ok::<_, ToolError>(args.text)
            }
        },
    )
}

#[tokio::test]
async fn a_steer_accepted_on_one_host_reaches_the_turn_running_on_another_at_its_next_round() {
    let store = Watched::new();
    let model = ScriptedModel::with_responses([
        ScriptedResponse::tool_call("call_1", "echo", json!({"text": "looked up"})),
        ScriptedResponse::text("brief: looked up"),
    ]);
    let (started, mut running) = mpsc::unbounded_channel();
    let release = Arc::new(Notify::new());
    let worker = host(&store, &model, gated_tool(started, release.clone()));
    let front = host(&store, &model, echo_tool(Arc::new(Counts::default()), None));
    let (stop, serving) = serve(&worker);

    front.execute("look it up", on("t")).await.unwrap();
    running.recv().await.unwrap();
    front
        .execute(
            "and be brief",
            on("t").delivery_mode(DeliveryMode::BetweenRounds),
        )
        .await
        .unwrap();
    // The worker read the first message when it claimed the thread; on its wake-up it reads the
    // steer and (before its next await) hands it to the running turn.
    let mut read = store.messages_read.subscribe();
    tokio::time::timeout(Duration::from_secs(20), read.wait_for(|n| *n >= 2))
        .await
        .expect("the worker read the steer")
        .unwrap();
    release.notify_one();
    store
        .until("the turn ended", async || settled(&front, "t", 1).await)
        .await;

    let requests = model.requests();
    assert_eq!(requests.len(), 2, "one turn, two rounds: {requests:?}");
    assert_eq!(requests[1].user_texts(), ["look it up", "and be brief"]);
    assert_eq!(requests[1].tool_outputs(), ["looked up"]);
    let _ = stop.send(());
    assert_eq!(
        serving.await.unwrap().claimed,
        1,
        "the steer started no turn of its own"
    );
}

#[tokio::test]
async fn two_serving_hosts_run_one_thread_s_messages_once_each_in_order_never_two_turns_at_once() {
    let store = Watched::new();
    let counts = Arc::new(Counts::default());
    let model = answering();
    let one = host(&store, &model, echo_tool(counts.clone(), None));
    let two = host(&store, &model, echo_tool(counts, None));
    let servers = [serve(&one), serve(&two)];
    let sent: Vec<String> = (0..12).map(|n| format!("m{n:02}")).collect();
    for (n, text) in sent.iter().enumerate() {
        // Alternate the accepting host; some messages meet a running turn, some an idle thread.
        let via = if n % 2 == 0 { &one } else { &two };
        via.execute(text.as_str(), on("shared")).await.unwrap();
        if n % 3 == 2 {
            tokio::task::yield_now().await;
        }
    }
    store
        .until("every message answered", async || {
            stored(&one, "shared")
                .await
                .is_some_and(|t| t.accepted == 12 && t.pending == 0 && t.turn_in_flight.is_none())
        })
        .await;

    let thread = stored(&one, "shared").await.unwrap();
    let users: Vec<String> = thread
        .history
        .iter()
        .filter(|item| item.role() == Some(noetic_core::Role::User))
        .filter_map(Item::text)
        .collect();
    assert_eq!(users, sent, "every message once, in order");
    // Turns ran one after another: each request carries every answer given before it.
    let requests = model.requests();
    for (n, request) in requests.iter().enumerate() {
        let answers = request
            .input
            .iter()
            .filter(|item| item.role() == Some(noetic_core::Role::Assistant))
            .count();
        assert_eq!(answers, n, "request {n} saw every earlier turn's answer");
    }
    let mut reports = Vec::new();
    for (stop, serving) in servers {
        let _ = stop.send(());
        reports.push(serving.await.unwrap());
    }
    assert_eq!(reports.iter().map(|r| r.lost).sum::<u64>(), 0);
}

#[tokio::test]
async fn a_host_that_dies_mid_turn_is_taken_over_after_its_lease_and_no_recorded_round_runs_again()
{
    let store = Watched::new();
    {
        let store = store.clone();
        crate::sessions::crash_after(move || async move {
            let counts = Arc::new(Counts::default());
            let (started, mut running) = mpsc::unbounded_channel();
            let model = ScriptedModel::with_responses([ScriptedResponse::tool_call(
                "call_1",
                "echo",
                json!({"text": "looked up"}),
            )]);
            let dying = host(&store, &model, echo_tool(counts, Some(("call_1", started))));
            dying.execute("look it up", on("t")).await.unwrap();
            let (_stop, _serving) = serve(&dying);
            // Round 1 is recorded and its tool call in flight when the host dies.
            running.recv().await.unwrap();
        });
    }
    let counts = Arc::new(Counts::default());
    let model = ScriptedModel::with_responses([ScriptedResponse::text("found: looked up")]);
    let survivor = host(&store, &model, echo_tool(counts.clone(), None));
    let (stop, serving) = serve(&survivor);
    // No commit announces the lease's expiry: the survivor's poll finds the thread once it lapses.
    tokio::time::timeout(Duration::from_secs(20), async {
        while !settled(&survivor, "t", 1).await {
            store.commits.subscribe().changed().await.unwrap();
        }
    })
    .await
    .expect("the thread was taken over and finished");

    let requests = model.requests();
    assert_eq!(requests.len(), 1, "only the round after the recorded one");
    assert_eq!(requests[0].tool_outputs(), ["looked up"]);
    assert_eq!(
        counts.call_runs().get("call_1"),
        Some(&1),
        "the call in flight ran again"
    );
    let _ = stop.send(());
    assert_eq!(serving.await.unwrap().claimed, 1);
}

#[tokio::test]
async fn serving_needs_shared_threads_and_a_shared_host_leaves_threads_to_its_servers() {
    let store = Watched::new();
    let model = answering();
    let plain = AgentHarness::builder("plain")
        .provider("scripted", model.clone())
        .agent_graph(call_model("chat").model("scripted-model"))
        .durable(store.clone())
        .build()
        .unwrap();
    let error = plain
        .serve(async {}, ServeOptions::default())
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            Error::InvalidArgument {
                argument: "shared_threads",
                ..
            }
        ),
        "{error}"
    );
    let memory = AgentHarness::builder("memory")
        .provider("scripted", model.clone())
        .agent_graph(call_model("chat").model("scripted-model"))
        .shared_threads()
        .build()
        .unwrap();
    let error = memory
        .serve(async {}, ServeOptions::default())
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            Error::InvalidArgument {
                argument: "durable",
                ..
            }
        ),
        "{error}"
    );

    let shared = host(&store, &model, echo_tool(Arc::new(Counts::default()), None));
    for error in [
        shared.load_thread("t").await.unwrap_err(),
        shared.recover().await.unwrap_err(),
    ] {
        assert!(error.to_string().contains("stored_thread"), "{error}");
    }
    // Accepted without a server: recorded and runnable, nothing run.
    shared.execute("hello", on("t")).await.unwrap();
    let thread = stored(&shared, "t").await.unwrap();
    assert_eq!((thread.accepted, thread.pending), (1, 1));
    assert_eq!(store.runnable("thread/").await.unwrap(), ["thread/t"]);
    assert_eq!(model.request_count(), 0);
    // Shut down at once (on this one-thread runtime, before the claimed thread's driver first runs):
    // no turn starts, and the thread is let go with its work still marked for another host.
    let report = shared
        .serve(async {}, ServeOptions::default())
        .await
        .unwrap();
    assert_eq!(
        (report.claimed, report.released, report.abandoned),
        (1, 1, 0)
    );
    assert_eq!(model.request_count(), 0);
    assert_eq!(store.runnable("thread/").await.unwrap(), ["thread/t"]);
    assert_eq!(
        store
            .lease("thread/t")
            .await
            .unwrap()
            .unwrap()
            .expires_at_ms,
        0,
        "released"
    );
    // A host serving on finds it and runs it.
    let (stop, serving) = serve(&shared);
    store
        .until("the thread is answered", async || {
            settled(&shared, "t", 1).await
        })
        .await;
    let _ = stop.send(());
    assert_eq!(serving.await.unwrap().claimed, 1);
}

/// Every key and value of the store, to show that nothing was written.
async fn dump(store: &Watched) -> Vec<(String, Option<Vec<u8>>)> {
    let storage = store.inner.storage();
    let keys = storage.list("").await.unwrap();
    let values = storage.get_many(&keys).await.unwrap();
    keys.into_iter().zip(values).collect()
}

#[tokio::test]
async fn a_host_paused_past_its_lease_is_fenced_out_and_writes_nothing_when_it_wakes() {
    let store = Watched::new();
    let (started, started_rx) = std::sync::mpsc::channel::<()>();
    let (wake, woken) = std::sync::mpsc::channel::<()>();
    let (stop_paused, stop) = oneshot::channel::<()>();
    // The paused host: its own one-thread runtime, frozen whole (no heartbeat, no renewal) while its
    // tool blocks the thread — as SIGSTOP freezes a process.
    let paused = {
        let store = store.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let woken = std::sync::Mutex::new(woken);
                let tool = Tool::new(
                    "echo",
                    "Echoes the text",
                    move |args: LookArgs, _: ToolContext| {
                        let _ = started.send(());
                        // Blocks the runtime's only thread until the test wakes it.
                        let _ = woken.lock().unwrap().recv();
                        async move { Ok::<_, ToolError>(args.text) }
                    },
                );
                let model = ScriptedModel::with_responses([ScriptedResponse::tool_call(
                    "call_1",
                    "echo",
                    json!({"text": "looked up"}),
                )]);
                let host = host(&store, &model, tool);
                host.execute("look it up", on("t")).await.unwrap();
                host.serve(
                    async {
                        let _ = stop.await;
                    },
                    ServeOptions::default()
                        .poll_interval(Duration::from_millis(50))
                        .drain(Duration::from_secs(10)),
                )
                .await
                .unwrap()
            })
        })
    };
    tokio::task::spawn_blocking(move || started_rx.recv().unwrap())
        .await
        .unwrap();

    let model = ScriptedModel::with_responses([ScriptedResponse::text("found: looked up")]);
    let survivor = host(&store, &model, echo_tool(Arc::new(Counts::default()), None));
    let (stop_survivor, serving) = serve(&survivor);
    tokio::time::timeout(Duration::from_secs(20), async {
        while !settled(&survivor, "t", 1).await {
            store.commits.subscribe().changed().await.unwrap();
        }
    })
    .await
    .expect("the survivor took the thread over and finished its turn");
    let _ = stop_survivor.send(());
    assert_eq!(serving.await.unwrap().claimed, 1);

    let before = dump(&store).await;
    wake.send(()).unwrap();
    let _ = stop_paused.send(());
    let report = tokio::task::spawn_blocking(move || paused.join().unwrap())
        .await
        .unwrap();
    assert_eq!(
        (report.claimed, report.lost, report.released),
        (1, 1, 0),
        "the woken host found the thread taken: {report:?}"
    );
    let after = dump(&store).await;
    let changed: Vec<&String> = after
        .iter()
        .filter(|entry| !before.contains(entry))
        .chain(before.iter().filter(|entry| !after.contains(entry)))
        .map(|(key, _)| key)
        .collect();
    assert!(changed.is_empty(), "the woken host wrote {changed:?}");
    let thread = stored(&survivor, "t").await.unwrap();
    assert_eq!(
        texts(&thread.history),
        ["User: look it up", "Assistant: found: looked up"]
    );
}

#[tokio::test]
async fn a_turn_whose_end_was_not_recorded_stays_runnable_and_is_finished_from_the_store() {
    let store = Watched::new();
    store
        .fail_next_turn_end
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let model = answering();
    let worker = host(&store, &model, echo_tool(Arc::new(Counts::default()), None));
    let (stop, serving) = serve(&worker);
    worker.execute("one", on("t")).await.unwrap();
    store
        .until("the turn's end is recorded", async || {
            settled(&worker, "t", 1).await
        })
        .await;
    let _ = stop.send(());
    let report = serving.await.unwrap();
    // Let go once as failed (its end unrecorded, the mark kept), claimed again, and finished from
    // the store: the recorded round was not asked again.
    assert_eq!(
        (report.claimed, report.failed, report.released),
        (2, 1, 1),
        "{report:?}"
    );
    assert_eq!(model.request_count(), 1);
    let thread = stored(&worker, "t").await.unwrap();
    assert_eq!(texts(&thread.history), ["User: one", "Assistant: re: one"]);
    assert!(store.runnable("thread/").await.unwrap().is_empty());
}

/// A host following a turn another host runs reads `turn_completed` from the event log only once the
/// store has the turn's end: the history it reads then has the answer (a web client reloads the
/// thread's items on `turn_completed`).
#[tokio::test(start_paused = true)]
async fn a_turn_s_end_reaches_the_event_log_after_the_store_records_it() {
    let store = Watched::new();
    store
        .slow_turn_end
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let model = answering();
    let front = host(&store, &model, echo_tool(Arc::new(Counts::default()), None));
    let worker = host(&store, &model, echo_tool(Arc::new(Counts::default()), None));
    let (stop, serving) = serve(&worker);
    let mut events =
        front.sequenced_events(noetic_core::Scope::thread("t"), noetic_core::Replay::None);
    front.execute("one", on("t")).await.unwrap();
    tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(event) = futures_util::StreamExt::next(&mut events).await {
            if matches!(
                *event.event,
                noetic_core::StreamEvent::Framework(
                    noetic_core::FrameworkEvent::TurnCompleted { .. }
                )
            ) {
                return;
            }
        }
    })
    .await
    .expect("the front sees the turn end");
    let history = front
        .thread_history(noetic_core::Scope::thread("t"))
        .await
        .unwrap();
    assert_eq!(texts(&history), ["User: one", "Assistant: re: one"]);
    assert_eq!(*store.turn_ends.lock().unwrap(), ["recorded", "logged"]);
    let _ = stop.send(());
    serving.await.unwrap();
}
