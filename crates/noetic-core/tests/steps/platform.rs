//! The platform adapters' defaults (in-memory fs, no shell, steps in process), routing through a
//! subprocess adapter, and detached children.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::future::BoxFuture;
use noetic_core::adapter::{
    ChildError, ChildMessage, ChildProcess, InMemoryFs, InProcess, LiveChild, NoShell,
    SignalOutcome, StepRequest, SubprocessAdapter,
};
use noetic_core::{
    AgentHarness, Context, ContextOptions, DetachedOptions, Environment, Error, FrameworkEvent,
    Spend, StreamEvent, TokenUsage, run_code, spawn,
};
use noetic_test_support::{fs_conformance, shell_conformance};
use serde_json::{Value, json};

use crate::support::Never;

#[tokio::test]
async fn the_in_memory_fs_passes_the_fs_conformance_suite() {
    fs_conformance(&InMemoryFs::new(), "/").await;
}

#[tokio::test]
async fn no_shell_answers_127_for_every_command_and_runs_nothing() {
    shell_conformance(&NoShell).await;
    let harness = AgentHarness::builder("sandbox").build().expect("builds");
    let output = harness
        .runtime()
        .shell()
        .run(noetic_core::adapter::ShellCommand::new(
            "touch /tmp/x && echo hi",
        ))
        .await
        .expect("no shell answers");
    assert_eq!(output.status.to_string(), "exit status 127");
    assert_eq!(output.stderr, b"no shell in this environment\n");
    assert!(output.stdout.is_empty());
}

#[tokio::test]
async fn a_tool_reaches_the_environment_s_fs_through_its_context() {
    let fs = Arc::new(InMemoryFs::new());
    let harness = AgentHarness::builder("files")
        .environment(Environment::new().fs(fs.clone()))
        .build()
        .expect("builds");
    let write = run_code("write", |text: String, ctx: Context| async move {
        ctx.runtime()
            .fs()
            .write("note.txt", text.as_bytes())
            .await?;
        let read = ctx.runtime().fs().read("note.txt", 100).await?;
        Ok::<_, Error>(String::from_utf8_lossy(&read.bytes).into_owned())
    })
    .build();
    let ctx = harness.create_context(ContextOptions::default());
    assert_eq!(
        harness
            .run(&write, "kept".to_owned(), &ctx)
            .await
            .expect("runs"),
        "kept"
    );
    use noetic_core::prelude::FsAdapter;
    assert_eq!(
        fs.read("note.txt", 10).await.expect("written").bytes,
        b"kept"
    );
    // A refused path is the step's error, with the fs's code.
    let escape = run_code("escape", |_: (), ctx: Context| async move {
        ctx.runtime().fs().read("../etc/passwd", 10).await?;
        Ok::<_, Error>(())
    })
    .build();
    let error = harness.run(&escape, (), &ctx).await.expect_err("refused");
    assert!(
        error.to_string().contains("outside the sandbox root"),
        "{error}"
    );
}

/// A child that plays back scripted messages, recording what it was asked.
struct ScriptedChild {
    handle_id: String,
    messages: VecDeque<ChildMessage>,
    /// Held until a cancel arrives, when set.
    hold_until_cancel: Option<tokio::sync::watch::Receiver<bool>>,
    log: Arc<Mutex<Vec<String>>>,
}

impl ChildProcess for ScriptedChild {
    fn handle_id(&self) -> &str {
        &self.handle_id
    }

    fn pid(&self) -> Option<u32> {
        None
    }

    fn next(&mut self) -> BoxFuture<'_, Option<ChildMessage>> {
        Box::pin(async move {
            if let Some(cancelled) = &mut self.hold_until_cancel {
                let _ = cancelled.wait_for(|cancelled| *cancelled).await;
                self.hold_until_cancel = None;
                return Some(ChildMessage::Finished {
                    result: Err(ChildError::new("CANCELLED", "asked to")),
                });
            }
            self.messages.pop_front()
        })
    }

    fn cancel(&self, reason: Option<String>) -> BoxFuture<'_, ()> {
        self.log
            .lock()
            .expect("log")
            .push(format!("cancel {reason:?}"));
        Box::pin(async {})
    }

    fn stop(&self, _grace: Duration) -> BoxFuture<'_, ()> {
        self.log.lock().expect("log").push("stop".to_owned());
        Box::pin(async {})
    }
}

/// Runs the steps named in `ids` "out of process" with scripted children.
#[derive(Clone)]
struct ScriptedAdapter {
    name: &'static str,
    ids: Vec<&'static str>,
    log: Arc<Mutex<Vec<String>>>,
    cancel: Option<tokio::sync::watch::Receiver<bool>>,
}

impl ScriptedAdapter {
    fn new(name: &'static str, ids: Vec<&'static str>) -> Self {
        ScriptedAdapter {
            name,
            ids,
            log: Arc::default(),
            cancel: None,
        }
    }

    fn log(&self) -> Vec<String> {
        self.log.lock().expect("log").clone()
    }
}

impl SubprocessAdapter for ScriptedAdapter {
    fn runs_out_of_process(&self, step_id: &str) -> bool {
        self.ids.contains(&step_id)
    }

    fn spawn(
        &self,
        request: StepRequest,
    ) -> BoxFuture<'_, noetic_core::Result<Box<dyn ChildProcess>>> {
        self.log.lock().expect("log").push(format!(
            "{} spawn {} {} detached={}",
            self.name, request.step_id, request.input, request.detached
        ));
        let spend = Spend {
            usage: TokenUsage {
                input_tokens: 7,
                output_tokens: 3,
                ..TokenUsage::default()
            },
            cost: Some(0.5),
        };
        let messages = VecDeque::from([
            ChildMessage::Event {
                event: json!({"source": "framework", "type": "child:step_started"}),
            },
            ChildMessage::Spend { spend },
            ChildMessage::Finished {
                result: Ok(json!({"from": self.name, "input": request.input})),
            },
        ]);
        let child = ScriptedChild {
            handle_id: request.handle_id,
            messages,
            hold_until_cancel: self.cancel.clone(),
            log: self.log.clone(),
        };
        Box::pin(async move { Ok(Box::new(child) as Box<dyn ChildProcess>) })
    }

    fn list_live(&self) -> BoxFuture<'_, noetic_core::Result<Vec<LiveChild>>> {
        Box::pin(async { Ok(Vec::new()) })
    }

    fn reattach<'a>(
        &'a self,
        _handle_id: &'a str,
    ) -> BoxFuture<'a, noetic_core::Result<Option<Box<dyn ChildProcess>>>> {
        Box::pin(async { Ok(None) })
    }

    fn stop<'a>(
        &'a self,
        _: &'a str,
        _: Duration,
    ) -> BoxFuture<'a, noetic_core::Result<SignalOutcome>> {
        Box::pin(async { Ok(SignalOutcome::NotFound) })
    }

    fn pause<'a>(&'a self, _: &'a str) -> BoxFuture<'a, noetic_core::Result<SignalOutcome>> {
        Box::pin(async { Ok(SignalOutcome::NotFound) })
    }

    fn resume<'a>(&'a self, _: &'a str) -> BoxFuture<'a, noetic_core::Result<SignalOutcome>> {
        Box::pin(async { Ok(SignalOutcome::NotFound) })
    }
}

fn events_into(log: &Arc<Mutex<Vec<StreamEvent>>>) -> Arc<dyn noetic_core::EventSink> {
    let log = log.clone();
    Arc::new(move |event: StreamEvent| log.lock().expect("events").push(event))
}

#[tokio::test]
async fn a_routed_step_s_output_events_and_spend_come_back_from_its_child() {
    let adapter = ScriptedAdapter::new("harness", vec!["remote"]);
    let harness = AgentHarness::builder("router")
        .subprocess(adapter.clone())
        .build()
        .expect("builds");
    let remote = run_code("remote", |_: Value, _: Context| async move {
        Err::<Value, _>(Error::cancelled(Some("never runs here".into())))
    })
    .build();
    let local = run_code("local", |n: i64, _: Context| async move {
        Ok::<_, Never>(n + 1)
    })
    .build();
    let events = Arc::new(Mutex::new(Vec::new()));
    let ctx = harness.create_context(ContextOptions::new().event_sink(events_into(&events)));
    let output = harness
        .run(&remote, json!(5), &ctx)
        .await
        .expect("child answered");
    assert_eq!(output, json!({"from": "harness", "input": 5}));
    assert_eq!(ctx.spend().usage.total(), 10);
    assert_eq!(ctx.spend().cost, Some(0.5));
    let forwarded: Vec<_> = events
        .lock()
        .expect("events")
        .iter()
        .filter_map(|event| match event {
            StreamEvent::Framework(FrameworkEvent::SubprocessEvent { step_id, event, .. }) => {
                Some((step_id.clone(), event["type"].clone()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        forwarded,
        [("remote".to_owned(), json!("child:step_started"))]
    );
    // A step the adapter does not run out of process runs here.
    assert_eq!(harness.run(&local, 1, &ctx).await.expect("in process"), 2);
    assert_eq!(adapter.log(), ["harness spawn remote 5 detached=false"]);
}

#[tokio::test]
async fn routing_order_is_the_detached_override_then_the_step_s_adapter_then_the_runtime_s() {
    let runtime_adapter = ScriptedAdapter::new("runtime", vec!["work"]);
    let step_adapter = ScriptedAdapter::new("step", vec!["work"]);
    let override_adapter = ScriptedAdapter::new("override", vec!["work"]);
    let harness = AgentHarness::builder("order")
        .subprocess(runtime_adapter.clone())
        .build()
        .expect("builds");
    let body = |n: i64, _: Context| async move { Ok::<_, Never>(json!(n)) };
    let plain = run_code("work", body).build();
    let own = run_code("work", body)
        .subprocess(step_adapter.clone())
        .build();
    let ctx = harness.create_context(ContextOptions::default());
    let from = |value: Value| value["from"].as_str().map(str::to_owned);
    assert_eq!(
        from(harness.run(&plain, 1, &ctx).await.expect("runs")).as_deref(),
        Some("runtime")
    );
    assert_eq!(
        from(harness.run(&own, 1, &ctx).await.expect("runs")).as_deref(),
        Some("step")
    );
    let detached = ctx
        .detached_spawn(
            &own,
            2,
            DetachedOptions::new().subprocess(override_adapter.clone()),
        )
        .await
        .expect("spawned");
    assert_eq!(
        from(detached.wait(None).await.expect("waited")).as_deref(),
        Some("override")
    );
    assert_eq!(
        override_adapter.log(),
        ["override spawn work 2 detached=true"]
    );
    // The step's in-process adapter keeps it here even when the runtime's would not.
    let here = run_code("work", body).subprocess(InProcess).build();
    assert_eq!(harness.run(&here, 3, &ctx).await.expect("runs"), json!(3));
    // A spawn is routed by its own id.
    let spawned = spawn("work", run_code("inner", body)).build();
    assert_eq!(
        from(harness.run(&spawned, 4, &ctx).await.expect("runs")).as_deref(),
        Some("runtime")
    );
    assert_eq!(
        runtime_adapter.log(),
        [
            "runtime spawn work 1 detached=false",
            "runtime spawn work 4 detached=false"
        ]
    );
}

#[tokio::test]
async fn cancelling_the_caller_asks_the_child_to_cancel_then_stops_its_group() {
    let (cancelled_tx, cancelled_rx) = tokio::sync::watch::channel(false);
    let mut adapter = ScriptedAdapter::new("slow", vec!["slow"]);
    adapter.cancel = Some(cancelled_rx);
    let harness = AgentHarness::builder("cancel")
        .subprocess(adapter.clone())
        .build()
        .expect("builds");
    let slow = run_code(
        "slow",
        |_: (), _: Context| async move { Ok::<_, Never>(()) },
    )
    .build();
    let ctx = harness.create_context(ContextOptions::default());
    let run = {
        let harness = harness.clone();
        let ctx = ctx.clone();
        tokio::spawn(async move { harness.run(&slow, (), &ctx).await })
    };
    // Wait until the child exists, then cancel the caller.
    loop {
        if !adapter.log().is_empty() {
            break;
        }
        tokio::task::yield_now().await;
    }
    ctx.abort(Some("user stop".into()));
    // The child learns of the cancel (the adapter's hook), answers, and its group is stopped.
    loop {
        if adapter.log().iter().any(|line| line.starts_with("cancel")) {
            break;
        }
        tokio::task::yield_now().await;
    }
    cancelled_tx.send(true).expect("child listens");
    let error = run.await.expect("joins").expect_err("cancelled");
    assert!(error.is_cancelled(), "{error}");
    assert_eq!(
        adapter.log(),
        [
            "slow spawn slow null detached=false",
            "cancel Some(\"user stop\")",
            "stop"
        ]
    );
}

#[tokio::test]
async fn an_in_process_detached_child_outlives_its_caller_s_cancel_and_can_be_cancelled_itself() {
    let harness = AgentHarness::builder("detached").build().expect("builds");
    let (release_tx, release_rx) = tokio::sync::oneshot::channel::<()>();
    let release_rx = Arc::new(Mutex::new(Some(release_rx)));
    let wait_for_release = run_code("waits", move |n: i64, ctx: Context| {
        let release = release_rx.lock().expect("release").take();
        async move {
            if let Some(release) = release {
                tokio::select! {
                    _ = release => {}
                    () = ctx.cancelled() => return Err(Error::cancelled(ctx.abort_reason())),
                }
            }
            Ok::<_, Error>(n * 10)
        }
    })
    .build();
    let parent = harness.create_context(ContextOptions::new().thread_id("t"));
    let handle = parent
        .detached_spawn(&wait_for_release, 4, DetachedOptions::new())
        .await
        .expect("spawned");
    assert_ne!(handle.handle_id(), parent.id());
    parent.abort(Some("parent gone".into()));
    release_tx.send(()).expect("child waits");
    assert_eq!(
        handle
            .wait(Some(Duration::from_secs(10)))
            .await
            .expect("finished"),
        40
    );

    // A second one, cancelled through its handle.
    let blocked = run_code("blocked", |_: (), ctx: Context| async move {
        ctx.cancelled().await;
        Err::<(), _>(Error::cancelled(ctx.abort_reason()))
    })
    .build();
    let parent = harness.create_context(ContextOptions::default());
    let handle = parent
        .detached_spawn(&blocked, (), DetachedOptions::new())
        .await
        .expect("spawned");
    handle.cancel(Some("enough".into()));
    let error = handle.wait(None).await.expect_err("cancelled");
    assert!(error.is_cancelled(), "{error}");
}

#[tokio::test(start_paused = true)]
async fn a_detached_wait_past_its_timeout_is_step_failed_and_an_unknown_execution_is_evicted() {
    let harness = AgentHarness::builder("timeouts").build().expect("builds");
    let forever = run_code("forever", |_: (), ctx: Context| async move {
        ctx.cancelled().await;
        Ok::<_, Never>(())
    })
    .build();
    let ctx = harness.create_context(ContextOptions::default());
    let handle = ctx
        .detached_spawn(&forever, (), DetachedOptions::new())
        .await
        .expect("spawned");
    let error = handle
        .wait(Some(Duration::from_millis(250)))
        .await
        .expect_err("timed out");
    assert_eq!(error.code(), "STEP_FAILED");
    assert!(error.to_string().contains("timed out"), "{error}");
    let error = harness
        .restore_detached::<Value>("no-such-execution")
        .await
        .expect_err("nothing to rejoin");
    assert_eq!(error.code(), "HANDLE_EVICTED");
}
