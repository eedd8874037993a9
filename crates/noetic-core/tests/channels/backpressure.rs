//! Scenario 40: a full queue parks its senders, which resolve in FIFO order as `recv`/`try_recv` free
//! slots; a parked send times out with `CHANNEL_TIMEOUT` (its value discarded) or rejects with
//! `CANCELLED` on abort; an external handle never parks and drops the oldest value synchronously.

use std::time::Duration;

use noetic_core::Error;
use noetic_core::channel::{Channel, DEFAULT_SEND_TIMEOUT};

use crate::support::{assert_pending, child, harness, ready, root};

fn drain(ctx: &noetic_core::Context, channel: &Channel<u32>) -> Vec<u32> {
    let mut values = Vec::new();
    while let Some(value) = ctx.try_recv(channel).unwrap() {
        values.push(value);
    }
    values
}

#[tokio::test]
async fn parked_sends_resolve_fifo_as_slots_free() {
    let harness = harness();
    let ctx = root(&harness);
    let (third_ctx, fourth_ctx) = (child(&ctx), child(&ctx));
    let jobs = Channel::<u32>::queue("jobs", 2);

    ctx.send(&jobs, 1).await.unwrap();
    ctx.send(&jobs, 2).await.unwrap();
    let mut third = Box::pin(third_ctx.send(&jobs, 3));
    let mut fourth = Box::pin(fourth_ctx.send(&jobs, 4));
    assert_pending(&mut third, "third send (queue full)").await;
    assert_pending(&mut fourth, "fourth send (queue full)").await;

    assert_eq!(ctx.recv(&jobs, None).await.unwrap(), 1);
    ready(&mut third, "the oldest parked send").await.unwrap();
    assert_pending(&mut fourth, "the younger parked send").await;

    assert_eq!(ctx.try_recv(&jobs).unwrap(), Some(2));
    ready(&mut fourth, "the younger parked send").await.unwrap();

    assert_eq!(drain(&ctx, &jobs), [3, 4]);
}

#[tokio::test(start_paused = true)]
async fn a_parked_send_times_out_and_its_value_is_discarded() {
    let harness = harness();
    let ctx = root(&harness);
    let jobs = Channel::<u32>::queue("jobs", 1);
    ctx.send(&jobs, 1).await.unwrap();

    let limit = Duration::from_secs(1);
    let error = ctx.send_timeout(&jobs, 2, Some(limit)).await.unwrap_err();
    assert!(
        matches!(&error, Error::ChannelTimeout { channel, timeout } if channel == "jobs" && *timeout == limit),
        "{error:?}"
    );
    assert_eq!(
        drain(&ctx, &jobs),
        [1],
        "the timed-out value never entered the queue"
    );
}

#[tokio::test(start_paused = true)]
async fn send_parks_for_the_default_timeout() {
    let harness = harness();
    let ctx = root(&harness);
    let jobs = Channel::<u32>::queue("jobs", 1);
    ctx.send(&jobs, 1).await.unwrap();

    let started = tokio::time::Instant::now();
    let error = ctx.send(&jobs, 2).await.unwrap_err();
    assert_eq!(error.code(), "CHANNEL_TIMEOUT");
    assert_eq!(started.elapsed(), DEFAULT_SEND_TIMEOUT);
    assert_eq!(DEFAULT_SEND_TIMEOUT, Duration::from_secs(30));
}

#[tokio::test(start_paused = true)]
async fn a_parked_send_rejects_with_cancelled_when_an_ancestor_aborts() {
    let harness = harness();
    let ctx = root(&harness);
    let worker = child(&ctx);
    let jobs = Channel::<u32>::queue("jobs", 1);
    ctx.send(&jobs, 1).await.unwrap();

    let mut parked = Box::pin(worker.send_timeout(&jobs, 2, None));
    assert_pending(&mut parked, "parked send").await;
    ctx.abort(Some("stop".to_owned()));
    let error = ready(&mut parked, "parked send after abort")
        .await
        .unwrap_err();
    assert!(
        matches!(&error, Error::Cancelled { reason: Some(reason) } if reason == "stop"),
        "{error:?}"
    );
    assert_eq!(drain(&ctx, &jobs), [1], "the cancelled value was discarded");
}

#[tokio::test]
async fn dropping_a_parked_send_discards_its_value() {
    let harness = harness();
    let ctx = root(&harness);
    let jobs = Channel::<u32>::queue("jobs", 1);
    ctx.send(&jobs, 1).await.unwrap();

    let mut parked = Box::pin(ctx.send(&jobs, 2));
    assert_pending(&mut parked, "parked send").await;
    drop(parked);

    assert_eq!(
        drain(&ctx, &jobs),
        [1],
        "the dropped send's value never entered the queue"
    );
}

#[tokio::test]
async fn dropping_a_receiver_after_a_value_was_handed_to_it_puts_the_value_back() {
    let harness = harness();
    let ctx = root(&harness);
    let jobs = Channel::<u32>::queue("jobs", 4);

    let mut waiting = Box::pin(ctx.recv(&jobs, None));
    assert_pending(&mut waiting, "receiver").await;
    ctx.send(&jobs, 1).await.unwrap(); // handed to the waiting receiver
    ctx.send(&jobs, 2).await.unwrap(); // buffered
    drop(waiting); // the receiver gives up without reading

    assert_eq!(drain(&ctx, &jobs), [1, 2], "nothing lost or reordered");
}

#[tokio::test]
async fn an_external_handle_drops_the_oldest_value_synchronously() {
    let harness = harness();
    let ctx = root(&harness);
    let jobs = Channel::<u32>::queue("jobs", 2);
    let handle = ctx.channel_handle(&jobs).unwrap();

    handle.send(1).unwrap();
    handle.send(2).unwrap();
    handle.send(3).unwrap(); // full: 1 is dropped, nothing parks

    assert_eq!(drain(&ctx, &jobs), [2, 3]);
}

#[tokio::test]
async fn an_external_send_goes_straight_to_a_waiting_receiver() {
    let harness = harness();
    let ctx = root(&harness);
    let jobs = Channel::<u32>::queue("jobs", 1);
    let handle = harness.channel_handle(&ctx, &jobs).unwrap();

    let mut waiting = Box::pin(ctx.recv(&jobs, None));
    assert_pending(&mut waiting, "receiver").await;
    handle.send(9).unwrap();
    assert_eq!(ready(&mut waiting, "receiver").await.unwrap(), 9);
}
