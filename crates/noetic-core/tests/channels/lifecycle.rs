//! Scenario 41: external handles and streams live as long as the root execution's outermost `run()`:
//! streams end when it ends, the handle flips closed and late sends fail with `CHANNEL_CLOSED`; nested
//! runs on the root don't close early; a sequential re-run reopens; runs on child contexts close nothing.

use futures_util::StreamExt;
use noetic_core::channel::{Channel, ChannelHandle};
use noetic_core::{Context, Error, Step, run_code};

use crate::support::{Never, assert_pending, child, harness, poll_once, root};

/// A step that sends `values` on `channel` from inside the execution.
fn producer(channel: &Channel<u32>, values: Vec<u32>) -> Step<(), ()> {
    let channel = channel.clone();
    run_code("produce", move |(): (), ctx: Context| {
        let (channel, values) = (channel.clone(), values.clone());
        async move {
            for value in values {
                ctx.send(&channel, value).await?;
            }
            Ok::<_, Error>(())
        }
    })
    .build()
}

/// A step that reports whether `handle` is closed while it runs.
fn probe(handle: &ChannelHandle<u32>) -> Step<(), bool> {
    let handle = handle.clone();
    run_code("probe", move |(): (), _ctx: Context| {
        let handle = handle.clone();
        async move { Ok::<_, Never>(handle.is_closed()) }
    })
    .build()
}

fn is_closed_error(error: &Error, channel: &str) -> bool {
    matches!(error, Error::ChannelClosed { channel: name } if name == channel)
}

#[tokio::test]
async fn a_queue_stream_gets_the_runs_values_and_ends_with_the_run() {
    let harness = harness();
    let ctx = root(&harness);
    let results = Channel::<u32>::queue("results", 8);
    let stream = ctx.channel_handle(&results).unwrap().stream();
    let step = producer(&results, vec![1, 2, 3]);

    let (outcome, received) =
        tokio::join!(harness.run(&step, (), &ctx), stream.collect::<Vec<_>>());
    outcome.unwrap();
    assert_eq!(received, [1, 2, 3]);
}

#[tokio::test]
async fn a_queue_stream_drains_what_is_buffered_when_the_run_ends() {
    let harness = harness();
    let ctx = root(&harness);
    let results = Channel::<u32>::queue("results", 8);
    let handle = ctx.channel_handle(&results).unwrap();

    harness
        .run(&producer(&results, vec![4, 5]), (), &ctx)
        .await
        .unwrap();

    assert!(handle.is_closed());
    let drained: Vec<u32> = handle.stream().collect().await;
    assert_eq!(drained, [4, 5]);
}

#[tokio::test]
async fn a_topic_stream_gets_what_was_published_while_it_was_open() {
    let harness = harness();
    let ctx = root(&harness);
    let news = Channel::<u32>::topic("news");
    let stream = ctx.channel_handle(&news).unwrap().stream();

    // Nobody polls the stream during the run: its private buffer keeps the values.
    harness
        .run(&producer(&news, vec![1, 2]), (), &ctx)
        .await
        .unwrap();

    assert_eq!(stream.collect::<Vec<_>>().await, [1, 2]);
}

#[tokio::test]
async fn a_value_stream_yields_the_current_value_then_the_latest() {
    let harness = harness();
    let ctx = root(&harness);
    let status = Channel::<u32>::value("status");
    let handle = ctx.channel_handle(&status).unwrap();
    handle.send(1).unwrap();
    let mut stream = handle.stream();

    assert_eq!(stream.next().await, Some(1));
    // Two writes before the next read: the stream skips to the latest.
    harness
        .run(&producer(&status, vec![2, 3]), (), &ctx)
        .await
        .unwrap();
    assert_eq!(stream.next().await, Some(3));
    assert_eq!(stream.next().await, None, "the run ended");
}

#[tokio::test]
async fn a_pending_next_completes_with_none_when_the_run_ends() {
    let harness = harness();
    let ctx = root(&harness);
    let news = Channel::<u32>::topic("news");
    let mut stream = ctx.channel_handle(&news).unwrap().stream();

    let mut next = Box::pin(stream.next());
    assert_pending(&mut next, "next() before the run").await;
    harness
        .run(&producer(&news, Vec::new()), (), &ctx)
        .await
        .unwrap();
    assert_eq!(poll_once(&mut next).await, std::task::Poll::Ready(None));
}

#[tokio::test]
async fn after_the_run_the_handle_is_closed_and_sends_fail() {
    let harness = harness();
    let ctx = root(&harness);
    let jobs = Channel::<u32>::queue("jobs", 8);
    let handle = ctx.channel_handle(&jobs).unwrap();
    assert!(!handle.is_closed(), "open before the first run");

    assert!(
        !harness.run(&probe(&handle), (), &ctx).await.unwrap(),
        "open while running"
    );

    assert!(handle.is_closed());
    assert!(is_closed_error(&handle.send(1).unwrap_err(), "jobs"));
    // A handle taken after the end is closed too, and its stream ends at once.
    let late = ctx.channel_handle(&jobs).unwrap();
    assert!(late.is_closed());
    assert_eq!(late.stream().next().await, None);
}

#[tokio::test]
async fn a_failed_run_closes_the_handles_too() {
    let harness = harness();
    let ctx = root(&harness);
    let handle = ctx
        .channel_handle(&Channel::<u32>::queue("jobs", 8))
        .unwrap();
    let failing = run_code("fail", |(): (), _ctx: Context| async move {
        Err::<(), _>("boom".to_owned())
    })
    .build();

    harness.run(&failing, (), &ctx).await.unwrap_err();
    assert!(handle.is_closed());
}

#[tokio::test]
async fn a_nested_run_on_the_root_does_not_close_early() {
    let harness = harness();
    let ctx = root(&harness);
    let jobs = Channel::<u32>::queue("jobs", 8);
    let handle = ctx.channel_handle(&jobs).unwrap();

    let outer = run_code("outer", {
        let handle = handle.clone();
        move |(): (), ctx: Context| {
            let handle = handle.clone();
            async move {
                let inner = run_code("inner", |(): (), _ctx: Context| async move {
                    Ok::<_, Never>(())
                })
                .build();
                ctx.run(&inner, ()).await?;
                // Still inside the outer run: the handle stays open and accepts sends.
                let open_after_inner = !handle.is_closed();
                handle.send(7)?;
                Ok::<_, Error>(open_after_inner)
            }
        }
    })
    .build();

    assert!(harness.run(&outer, (), &ctx).await.unwrap());
    assert!(handle.is_closed(), "closed once the outermost run ended");
    assert_eq!(ctx.try_recv(&jobs).unwrap(), Some(7));
}

#[tokio::test]
async fn a_sequential_rerun_reopens_the_channels() {
    let harness = harness();
    let ctx = root(&harness);
    let jobs = Channel::<u32>::queue("jobs", 8);
    let handle = ctx.channel_handle(&jobs).unwrap();

    harness.run(&probe(&handle), (), &ctx).await.unwrap();
    assert!(handle.is_closed());
    let stale_stream = handle.stream();

    assert!(
        !harness.run(&probe(&handle), (), &ctx).await.unwrap(),
        "open again while re-running"
    );
    assert!(handle.is_closed(), "closed again after the re-run");
    assert_eq!(
        stale_stream.collect::<Vec<_>>().await,
        Vec::<u32>::new(),
        "a stream taken while closed ended"
    );

    // A stream taken during a re-run is live: it gets that run's values.
    let relay = run_code("relay", {
        let (handle, jobs) = (handle.clone(), jobs.clone());
        move |(): (), ctx: Context| {
            let (handle, jobs) = (handle.clone(), jobs.clone());
            async move {
                let mut stream = handle.stream();
                ctx.send(&jobs, 8).await?;
                Ok::<_, Error>(stream.next().await)
            }
        }
    })
    .build();
    assert_eq!(harness.run(&relay, (), &ctx).await.unwrap(), Some(8));
}

#[tokio::test]
async fn runs_on_child_contexts_do_not_close_the_roots_channels() {
    let harness = harness();
    let ctx = root(&harness);
    let worker = child(&ctx);
    let jobs = Channel::<u32>::queue("jobs", 8);
    let handle = ctx.channel_handle(&jobs).unwrap();
    let mut stream = handle.stream();

    harness
        .run(&producer(&jobs, vec![1]), (), &worker)
        .await
        .unwrap();

    assert!(
        !handle.is_closed(),
        "a child's run does not end the root execution"
    );
    handle.send(2).unwrap();
    assert_eq!(stream.next().await, Some(1));
    assert_eq!(stream.next().await, Some(2));
    let mut next = Box::pin(stream.next());
    assert_pending(&mut next, "the stream outlives the child's run").await;

    // A handle taken from the child reaches the same root channel.
    worker.channel_handle(&jobs).unwrap().send(3).unwrap();
    assert_eq!(poll_once(&mut next).await, std::task::Poll::Ready(Some(3)));
}

#[tokio::test]
async fn aborting_the_root_ends_its_streams_once_the_run_returns() {
    let harness = harness();
    let ctx = root(&harness);
    let jobs = Channel::<u32>::queue("jobs", 8);
    let mut stream = ctx.channel_handle(&jobs).unwrap().stream();
    let blocked = run_code("blocked", |(): (), ctx: Context| async move {
        ctx.recv(&Channel::<u32>::topic("never"), None).await
    })
    .build();

    let host = async {
        let mut next = Box::pin(stream.next());
        assert_pending(&mut next, "next() while the run waits").await;
        ctx.abort(Some("cancel".to_owned()));
        next.await
    };
    let (outcome, next) = tokio::join!(harness.run(&blocked, (), &ctx), host);
    assert!(outcome.unwrap_err().is_cancelled());
    assert_eq!(
        next, None,
        "the pending next() completed with the end of the stream"
    );
}

#[tokio::test]
async fn channels_first_used_after_the_run_ended_are_closed() {
    let harness = harness();
    let ctx = root(&harness);
    let noop = run_code(
        "noop",
        |(): (), _ctx: Context| async move { Ok::<_, Never>(()) },
    )
    .build();
    harness.run(&noop, (), &ctx).await.unwrap();

    let handle = ctx.channel_handle(&Channel::<u32>::topic("late")).unwrap();
    assert!(handle.is_closed());
    assert!(is_closed_error(&handle.send(1).unwrap_err(), "late"));
}
