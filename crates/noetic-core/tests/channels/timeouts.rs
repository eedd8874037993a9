//! Scenario 39: `CHANNEL_TIMEOUT` on expiry; a zero timeout waits forever on queue and value channels
//! and is capped on topics; an abort before the timer fires gives `CANCELLED`. Paused time throughout.

use std::time::Duration;

use noetic_core::Error;
use noetic_core::channel::{Channel, TOPIC_ZERO_TIMEOUT_CAP};
use tokio::time::{Instant, advance};

use crate::support::{assert_pending, child, harness, ready, root};

fn is_timeout(error: &Error, channel: &str, after: Duration) -> bool {
    matches!(error, Error::ChannelTimeout { channel: name, timeout } if name == channel && *timeout == after)
}

#[tokio::test(start_paused = true)]
async fn recv_times_out_in_every_mode() {
    let harness = harness();
    let ctx = root(&harness);
    let limit = Duration::from_millis(250);

    let started = Instant::now();
    let queue = ctx.recv(&Channel::<u32>::queue("q", 4), Some(limit)).await;
    assert!(is_timeout(&queue.unwrap_err(), "q", limit));
    assert_eq!(started.elapsed(), limit);

    let value = ctx.recv(&Channel::<u32>::value("v"), Some(limit)).await;
    assert!(is_timeout(&value.unwrap_err(), "v", limit));

    let topic = ctx.recv(&Channel::<u32>::topic("t"), Some(limit)).await;
    let error = topic.unwrap_err();
    assert!(is_timeout(&error, "t", limit));
    assert_eq!(error.code(), "CHANNEL_TIMEOUT");
}

#[tokio::test(start_paused = true)]
async fn a_value_arriving_before_the_deadline_wins() {
    let harness = harness();
    let ctx = root(&harness);
    let jobs = Channel::<u32>::queue("jobs", 4);

    let mut waiting = Box::pin(ctx.recv(&jobs, Some(Duration::from_secs(10))));
    assert_pending(&mut waiting, "receiver").await;
    advance(Duration::from_secs(9)).await;
    ctx.send(&jobs, 5).await.unwrap();
    assert_eq!(ready(&mut waiting, "receiver").await.unwrap(), 5);
}

#[tokio::test(start_paused = true)]
async fn zero_timeout_waits_forever_on_queue_and_value_channels() {
    let harness = harness();
    let ctx = root(&harness);
    let jobs = Channel::<u32>::queue("jobs", 4);
    let status = Channel::<u32>::value("status");

    let mut job = Box::pin(ctx.recv(&jobs, Some(Duration::ZERO)));
    let mut state = Box::pin(ctx.recv(&status, Some(Duration::ZERO)));
    let mut unbounded = Box::pin(ctx.recv(&jobs, None));
    assert_pending(&mut job, "queue receiver").await;
    assert_pending(&mut state, "value receiver").await;
    assert_pending(&mut unbounded, "receiver without timeout").await;

    advance(Duration::from_secs(24 * 60 * 60)).await;
    assert_pending(&mut job, "queue receiver after a day").await;
    assert_pending(&mut state, "value receiver after a day").await;
    assert_pending(&mut unbounded, "receiver without timeout after a day").await;

    ctx.send(&jobs, 1).await.unwrap();
    ctx.send(&jobs, 2).await.unwrap();
    ctx.send(&status, 3).await.unwrap();
    assert_eq!(ready(&mut job, "queue receiver").await.unwrap(), 1);
    assert_eq!(
        ready(&mut unbounded, "second queue receiver")
            .await
            .unwrap(),
        2
    );
    assert_eq!(ready(&mut state, "value receiver").await.unwrap(), 3);
}

#[tokio::test(start_paused = true)]
async fn zero_timeout_on_a_topic_is_capped() {
    let harness = harness();
    let ctx = root(&harness);
    let news = Channel::<u32>::topic("news");

    let mut waiting = Box::pin(ctx.recv(&news, Some(Duration::ZERO)));
    assert_pending(&mut waiting, "topic receiver").await;
    advance(TOPIC_ZERO_TIMEOUT_CAP - Duration::from_millis(1)).await;
    assert_pending(&mut waiting, "topic receiver just before the cap").await;
    advance(Duration::from_millis(1)).await;
    let error = ready(&mut waiting, "topic receiver at the cap")
        .await
        .unwrap_err();
    assert!(
        is_timeout(&error, "news", TOPIC_ZERO_TIMEOUT_CAP),
        "{error:?}"
    );
    assert_eq!(TOPIC_ZERO_TIMEOUT_CAP, Duration::from_secs(300));
}

#[tokio::test(start_paused = true)]
async fn abort_before_the_timer_fires_gives_cancelled() {
    let harness = harness();
    let ctx = root(&harness);
    let worker = child(&ctx);
    let jobs = Channel::<u32>::queue("jobs", 4);

    let started = Instant::now();
    let mut waiting = Box::pin(worker.recv(&jobs, Some(Duration::from_secs(10))));
    assert_pending(&mut waiting, "receiver").await;
    ctx.abort(Some("shutting down".to_owned()));
    let error = ready(&mut waiting, "receiver after the abort")
        .await
        .unwrap_err();
    assert!(
        matches!(&error, Error::Cancelled { reason: Some(reason) } if reason == "shutting down"),
        "{error:?}"
    );
    assert_eq!(started.elapsed(), Duration::ZERO, "no timer had to fire");
}

#[tokio::test(start_paused = true)]
async fn a_blocked_recv_on_an_aborted_context_rejects_at_once_even_with_zero_timeout() {
    let harness = harness();
    let ctx = root(&harness);
    ctx.abort(None);
    let jobs = Channel::<u32>::queue("jobs", 4);

    let mut waiting = Box::pin(ctx.recv(&jobs, Some(Duration::ZERO)));
    let error = ready(&mut waiting, "receiver").await.unwrap_err();
    assert!(error.is_cancelled(), "{error:?}");

    // Work that does not block still completes on an aborted context.
    ctx.send(&jobs, 1).await.unwrap();
    assert_eq!(ctx.recv(&jobs, None).await.unwrap(), 1);
}
