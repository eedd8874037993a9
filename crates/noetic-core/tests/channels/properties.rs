//! Property tests of the queue: it behaves like a bounded FIFO with a FIFO of parked senders, and under
//! concurrent senders and receivers (timing out, or dropped mid-wait) no value is lost or duplicated and
//! each receiver sees each sender's values in order.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use futures_util::future::join_all;
use noetic_core::Result;
use noetic_core::channel::Channel;
use proptest::prelude::*;

use crate::support::{child, harness, poll_once, root};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
}

#[derive(Debug, Clone)]
enum Op {
    /// `ctx.send` (parks when full).
    Send(u32),
    /// An external handle's send (drops the oldest when full).
    External(u32),
    /// `ctx.try_recv`.
    TryRecv,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => any::<u32>().prop_map(Op::Send),
        1 => any::<u32>().prop_map(Op::External),
        3 => Just(Op::TryRecv),
    ]
}

type PendingSend<'a> = Pin<Box<dyn Future<Output = Result<()>> + 'a>>;

/// Runs `ops` against the channel and against a model: a buffer of `capacity` plus a FIFO of parked
/// sends, promoted oldest first whenever a slot frees.
async fn check_against_model(capacity: usize, ops: Vec<Op>) {
    let harness = harness();
    let ctx = root(&harness);
    let jobs = Channel::<u32>::queue("jobs", capacity);
    let handle = ctx.channel_handle(&jobs).unwrap();

    let mut buffer: VecDeque<u32> = VecDeque::new();
    let mut parked: VecDeque<(usize, u32)> = VecDeque::new();
    let mut sends: Vec<Option<PendingSend<'_>>> = Vec::new();

    for op in ops {
        let mut promoted = Vec::new();
        match op {
            Op::Send(value) => {
                let mut send: PendingSend<'_> = Box::pin(ctx.send_timeout(&jobs, value, None));
                let fits = parked.is_empty() && buffer.len() < capacity;
                match poll_once(&mut send).await {
                    Poll::Ready(outcome) => {
                        outcome.unwrap();
                        assert!(fits, "send {value} completed on a full queue");
                        buffer.push_back(value);
                        sends.push(None);
                    }
                    Poll::Pending => {
                        assert!(!fits, "send {value} parked with room in the queue");
                        parked.push_back((sends.len(), value));
                        sends.push(Some(send));
                    }
                }
            }
            Op::External(value) => {
                handle.send(value).unwrap();
                if buffer.len() >= capacity {
                    buffer.pop_front();
                }
                buffer.push_back(value);
            }
            Op::TryRecv => {
                let expected = buffer.pop_front().or_else(|| {
                    parked.pop_front().map(|(index, value)| {
                        promoted.push(index);
                        value
                    })
                });
                while buffer.len() < capacity {
                    let Some((index, value)) = parked.pop_front() else {
                        break;
                    };
                    promoted.push(index);
                    buffer.push_back(value);
                }
                assert_eq!(ctx.try_recv(&jobs).unwrap(), expected);
            }
        }
        // Exactly the promoted sends have completed, successfully.
        for (index, slot) in sends.iter_mut().enumerate() {
            let Some(send) = slot else { continue };
            match poll_once(send).await {
                Poll::Ready(outcome) => {
                    outcome.unwrap();
                    assert!(
                        promoted.contains(&index),
                        "send #{index} completed out of turn"
                    );
                    *slot = None;
                }
                Poll::Pending => {
                    assert!(!promoted.contains(&index), "send #{index} was not promoted");
                }
            }
        }
    }
    // What is left comes out in model order.
    let mut expected: Vec<u32> = buffer.into_iter().collect();
    expected.extend(parked.into_iter().map(|(_, value)| value));
    let mut rest = Vec::new();
    while let Some(value) = ctx.try_recv(&jobs).unwrap() {
        rest.push(value);
    }
    assert_eq!(rest, expected);
}

/// `(receiver, (sender, seq))`: who received which value.
type Delivery = (usize, (usize, usize));

/// How a receiver waits.
#[derive(Debug, Clone, Copy)]
enum Patience {
    /// `recv(None)`.
    Forever,
    /// `recv(Some(ms))`, retrying after `CHANNEL_TIMEOUT`.
    Timeout(u64),
    /// `recv(None)` raced against a timer that wins ties: the recv future is dropped mid-wait, sometimes
    /// just after a value was handed to it.
    Dropped(u64),
}

fn patience() -> impl Strategy<Value = Patience> {
    prop_oneof![
        Just(Patience::Forever),
        (1u64..4).prop_map(Patience::Timeout),
        (1u64..4).prop_map(Patience::Dropped),
    ]
}

/// Senders (each a child context) send `(sender, seq)` for each of their delays, sleeping that many
/// milliseconds first (paused time, so timers often coincide); receivers take values until all have
/// arrived, then the root is aborted to release the ones still waiting. Returns what each receiver got.
async fn exchange(
    capacity: usize,
    senders: Vec<Vec<u64>>,
    receivers: Vec<Patience>,
) -> Vec<Delivery> {
    let harness = harness();
    let ctx = root(&harness);
    let jobs = Channel::<(usize, usize)>::queue("jobs", capacity);
    let total: usize = senders.iter().map(Vec::len).sum();
    let received: Arc<Mutex<Vec<Delivery>>> = Arc::default();
    if total == 0 {
        ctx.abort(None);
    }

    let sending = senders.iter().enumerate().map(|(sender, delays)| {
        let (ctx, jobs, delays) = (child(&ctx), jobs.clone(), delays.clone());
        async move {
            for (seq, delay) in delays.into_iter().enumerate() {
                tokio::time::sleep(Duration::from_millis(delay)).await;
                ctx.send_timeout(&jobs, (sender, seq), None).await.unwrap();
            }
        }
    });
    let receiving = receivers.iter().enumerate().map(|(receiver, &patience)| {
        let (root, ctx, jobs, received) =
            (ctx.clone(), child(&ctx), jobs.clone(), received.clone());
        async move {
            loop {
                let outcome = match patience {
                    Patience::Forever => ctx.recv(&jobs, None).await,
                    Patience::Timeout(ms) => ctx.recv(&jobs, Some(Duration::from_millis(ms))).await,
                    Patience::Dropped(ms) => tokio::select! {
                        biased;
                        () = tokio::time::sleep(Duration::from_millis(ms)) => continue,
                        outcome = ctx.recv(&jobs, None) => outcome,
                    },
                };
                match outcome {
                    Ok(value) => {
                        let mut received = received.lock().unwrap();
                        received.push((receiver, value));
                        if received.len() == total {
                            root.abort(None);
                        }
                    }
                    Err(error) if error.code() == "CHANNEL_TIMEOUT" => {}
                    Err(error) => {
                        assert!(error.is_cancelled(), "{error:?}");
                        break;
                    }
                }
            }
        }
    });
    // A lost value would leave receivers waiting forever; give up after 10 s of (paused) time, far more
    // than the exchange needs, so that shows as a failed property rather than a hang.
    tokio::select! {
        _ = futures_util::future::join(join_all(sending), join_all(receiving)) => {}
        () = tokio::time::sleep(Duration::from_secs(10)) => {}
    }

    let received = received.lock().unwrap().clone();
    // Nothing lost, nothing duplicated.
    let mut values: Vec<(usize, usize)> = received.iter().map(|(_, value)| *value).collect();
    values.sort_unstable();
    let mut sent: Vec<(usize, usize)> = senders
        .iter()
        .enumerate()
        .flat_map(|(sender, delays)| (0..delays.len()).map(move |seq| (sender, seq)))
        .collect();
    sent.sort_unstable();
    assert_eq!(values, sent);
    received
}

/// Each receiver saw each sender's values in order.
fn in_order_per_receiver(received: &[Delivery]) -> bool {
    let mut last: HashMap<(usize, usize), usize> = HashMap::new();
    received.iter().all(|&(receiver, (sender, seq))| {
        let previous = last.insert((receiver, sender), seq);
        previous.is_none_or(|previous| previous < seq)
    })
}

fn senders() -> impl Strategy<Value = Vec<Vec<u64>>> {
    prop::collection::vec(prop::collection::vec(0u64..3, 0..15), 1..5)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn queue_matches_a_bounded_fifo_with_fifo_parked_senders(
        capacity in 1usize..5,
        ops in prop::collection::vec(op(), 0..60),
    ) {
        runtime().block_on(check_against_model(capacity, ops));
    }

    #[test]
    fn concurrent_senders_and_receivers_lose_and_duplicate_nothing(
        capacity in 1usize..5,
        senders in senders(),
        receivers in prop::collection::vec(patience(), 1..5),
    ) {
        runtime().block_on(exchange(capacity, senders, receivers));
    }

    /// Without receivers dropping a recv mid-wait (which puts a handed value back at the head for
    /// someone else), each receiver sees each sender's values in order: the queue is FIFO and each
    /// sender's sends complete in order.
    #[test]
    fn each_receiver_sees_each_senders_values_in_order(
        capacity in 1usize..5,
        senders in senders(),
        receivers in prop::collection::vec(
            prop_oneof![Just(Patience::Forever), (1u64..4).prop_map(Patience::Timeout)],
            1..5,
        ),
    ) {
        let received = runtime().block_on(exchange(capacity, senders, receivers));
        prop_assert!(in_order_per_receiver(&received), "{:?}", received);
    }
}
