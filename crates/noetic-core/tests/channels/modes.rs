//! Scenario 38: value is last-write-wins, wakes every waiter and is not consumed; queue is FIFO with one
//! waiter per send; topic reaches only the receivers waiting at the time and `try_recv` is `None`.

use noetic_core::channel::{Channel, ChannelMode};
use noetic_core::{Error, run_code, spawn};
use serde::{Deserialize, Serialize};

use crate::support::{assert_pending, child, harness, ready, root};

#[tokio::test]
async fn value_last_write_wins_and_recv_does_not_consume() {
    let harness = harness();
    let ctx = root(&harness);
    let status = Channel::<String>::value("status");

    assert_eq!(ctx.try_recv(&status).unwrap(), None, "nothing written yet");
    ctx.send(&status, "starting".to_owned()).await.unwrap();
    ctx.send(&status, "running".to_owned()).await.unwrap();

    assert_eq!(ctx.recv(&status, None).await.unwrap(), "running");
    assert_eq!(ctx.recv(&status, None).await.unwrap(), "running");
    assert_eq!(ctx.try_recv(&status).unwrap().as_deref(), Some("running"));
}

#[tokio::test]
async fn value_send_wakes_every_waiter() {
    let harness = harness();
    let ctx = root(&harness);
    let (first_ctx, second_ctx) = (child(&ctx), child(&ctx));
    let status = Channel::<u32>::value("status");

    let mut first = Box::pin(first_ctx.recv(&status, None));
    let mut second = Box::pin(second_ctx.recv(&status, None));
    assert_pending(&mut first, "first waiter").await;
    assert_pending(&mut second, "second waiter").await;

    ctx.send(&status, 7).await.unwrap();

    assert_eq!(ready(&mut first, "first waiter").await.unwrap(), 7);
    assert_eq!(ready(&mut second, "second waiter").await.unwrap(), 7);
    assert_eq!(ctx.try_recv(&status).unwrap(), Some(7), "still there");
}

#[tokio::test]
async fn queue_is_fifo() {
    let harness = harness();
    let ctx = root(&harness);
    let jobs = Channel::<u32>::queue("jobs", 10);

    for job in 1..=5 {
        ctx.send(&jobs, job).await.unwrap();
    }
    let mut received = vec![ctx.recv(&jobs, None).await.unwrap()];
    while let Some(job) = ctx.try_recv(&jobs).unwrap() {
        received.push(job);
    }
    assert_eq!(received, [1, 2, 3, 4, 5]);
}

#[tokio::test]
async fn queue_wakes_one_waiter_per_send_in_arrival_order() {
    let harness = harness();
    let ctx = root(&harness);
    let (first_ctx, second_ctx) = (child(&ctx), child(&ctx));
    let jobs = Channel::<u32>::queue("jobs", 10);

    let mut first = Box::pin(first_ctx.recv(&jobs, None));
    let mut second = Box::pin(second_ctx.recv(&jobs, None));
    assert_pending(&mut first, "first waiter").await;
    assert_pending(&mut second, "second waiter").await;

    ctx.send(&jobs, 1).await.unwrap();
    assert_eq!(ready(&mut first, "first waiter").await.unwrap(), 1);
    assert_pending(&mut second, "the second waiter (one waiter per send)").await;
    assert_eq!(
        ctx.try_recv(&jobs).unwrap(),
        None,
        "the value went to the waiter"
    );

    ctx.send(&jobs, 2).await.unwrap();
    assert_eq!(ready(&mut second, "second waiter").await.unwrap(), 2);
}

#[tokio::test]
async fn topic_reaches_only_the_receivers_waiting_at_the_time() {
    let harness = harness();
    let ctx = root(&harness);
    let (first_ctx, second_ctx) = (child(&ctx), child(&ctx));
    let news = Channel::<String>::topic("news");

    // Nobody waits: the value is dropped.
    ctx.send(&news, "unheard".to_owned()).await.unwrap();
    assert_eq!(ctx.try_recv(&news).unwrap(), None);

    let mut first = Box::pin(first_ctx.recv(&news, None));
    let mut second = Box::pin(second_ctx.recv(&news, None));
    assert_pending(&mut first, "first subscriber").await;
    assert_pending(&mut second, "second subscriber").await;

    ctx.send(&news, "hello".to_owned()).await.unwrap();
    assert_eq!(ready(&mut first, "first").await.unwrap(), "hello");
    assert_eq!(ready(&mut second, "second").await.unwrap(), "hello");

    // Published and delivered; nothing is kept for later receivers.
    assert_eq!(ctx.try_recv(&news).unwrap(), None);
    let mut late = Box::pin(ctx.recv(&news, None));
    assert_pending(&mut late, "a receiver that came after the send").await;
}

#[tokio::test]
async fn a_spawned_child_shares_its_roots_channels() {
    let harness = harness();
    let ctx = root(&harness);
    let results = Channel::<u32>::queue("results", 4);

    let producer = spawn(
        "producer",
        run_code("produce", {
            let results = results.clone();
            move |n: u32, ctx: noetic_core::Context| {
                let results = results.clone();
                async move {
                    ctx.send(&results, n * 10).await?;
                    Ok::<_, Error>(())
                }
            }
        }),
    )
    .build();
    harness.run(&producer, 4, &ctx).await.unwrap();

    assert_eq!(ctx.try_recv(&results).unwrap(), Some(40));
}

#[tokio::test]
async fn separate_roots_do_not_share_channels() {
    let harness = harness();
    let (first, second) = (root(&harness), root(&harness));
    let jobs = Channel::<u32>::queue("jobs", 4);

    first.send(&jobs, 1).await.unwrap();
    assert_eq!(second.try_recv(&jobs).unwrap(), None);
    assert_eq!(first.try_recv(&jobs).unwrap(), Some(1));
}

#[tokio::test]
async fn one_name_with_two_modes_is_an_invalid_argument() {
    let harness = harness();
    let ctx = root(&harness);
    ctx.send(&Channel::<u32>::queue("jobs", 4), 1)
        .await
        .unwrap();

    let error = ctx.try_recv(&Channel::<u32>::topic("jobs")).unwrap_err();
    assert_eq!(error.code(), "INVALID_ARGUMENT");
    let error = ctx.try_recv(&Channel::<u32>::queue("jobs", 8)).unwrap_err();
    assert_eq!(
        error.code(),
        "INVALID_ARGUMENT",
        "capacity is part of the mode"
    );
    assert_eq!(
        Channel::<u32>::queue("jobs", 0).mode(),
        ChannelMode::Queue { capacity: 1 },
        "a zero capacity is taken as 1"
    );
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Job {
    id: u32,
}

#[tokio::test]
async fn a_value_of_the_wrong_type_fails_the_recv_and_stays_in_the_queue() {
    let harness = harness();
    let ctx = root(&harness);
    let as_text = Channel::<String>::queue("jobs", 4);
    let as_job = Channel::<Job>::queue("jobs", 4);

    ctx.send(&as_job, Job { id: 1 }).await.unwrap();
    assert_eq!(
        ctx.try_recv(&as_text).unwrap_err().code(),
        "INVALID_ARGUMENT"
    );
    assert_eq!(
        ctx.recv(&as_text, None).await.unwrap_err().code(),
        "INVALID_ARGUMENT"
    );
    assert_eq!(ctx.recv(&as_job, None).await.unwrap(), Job { id: 1 });

    // A value handed to a waiting receiver that cannot read it goes back to the head too.
    let mut waiting = Box::pin(ctx.recv(&as_text, None));
    assert_pending(&mut waiting, "text receiver").await;
    ctx.send(&as_job, Job { id: 2 }).await.unwrap();
    assert_eq!(
        ready(&mut waiting, "text receiver")
            .await
            .unwrap_err()
            .code(),
        "INVALID_ARGUMENT"
    );
    assert_eq!(ctx.try_recv(&as_job).unwrap(), Some(Job { id: 2 }));
}

#[tokio::test]
async fn channel_futures_are_send() {
    fn assert_send<T: Send>(_: &T) {}
    let harness = harness();
    let ctx = root(&harness);
    let jobs = Channel::<u32>::queue("jobs", 1);
    assert_send(&ctx.send(&jobs, 1));
    assert_send(&ctx.recv(&jobs, None));
    let handle = ctx.channel_handle(&jobs).unwrap();
    assert_send(&handle.stream());
}
