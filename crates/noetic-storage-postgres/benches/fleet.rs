//! The fleet under load: worker processes (this binary, re-executed) serving one PostgreSQL
//! database, a mock provider answering at once, and accepting hosts in this process sending every
//! message as fast as they can. Prints turns per second and the time from a message's accept (its
//! `execute` returning) to its turn's start (the first model request carrying it), and checks that
//! every message was answered exactly once, in order.
//!
//! `cargo bench -p noetic-storage-postgres --bench fleet`; sizes from `NOETIC_BENCH_FLEET_WORKERS`
//! (3), `NOETIC_BENCH_FLEET_THREADS` (1,000) and `NOETIC_BENCH_FLEET_MESSAGES` (5,000).

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/fleet/support.rs"]
mod support;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use noetic_core::{ExecuteOptions, Item, Role};
use noetic_test_support::MockServer;
use noetic_test_support::postgres::{print_skip, test_database};
use support::{Worker, WorkerConfig};
use tokio::sync::mpsc;

/// When a request arrived, and the user texts it carried.
type Arrival = (Instant, Vec<String>);

fn size(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

fn main() {
    if let Ok(name) = std::env::var(support::WORKER) {
        support::worker_main(&name);
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(bench());
}

/// Percentile `p` (0..=100) of sorted `values`.
fn percentile(sorted: &[Duration], p: usize) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) * p).div_ceil(100)]
}

fn ms(duration: Duration) -> String {
    format!("{:.1} ms", duration.as_secs_f64() * 1000.0)
}

async fn bench() {
    let workers = size("NOETIC_BENCH_FLEET_WORKERS", 3);
    let threads = size("NOETIC_BENCH_FLEET_THREADS", 1_000);
    let messages = size("NOETIC_BENCH_FLEET_MESSAGES", 5_000);
    let Some(db) = test_database().await else {
        print_skip("fleet bench");
        return;
    };

    // The mock provider notes when each request arrives and which user texts it carries.
    let mock = MockServer::start().await;
    mock.forget_requests();
    let arrivals: Arc<Mutex<Vec<Arrival>>> = Arc::default();
    {
        let arrivals = arrivals.clone();
        mock.set_responder(move |request| {
            let texts = support::user_texts(&request.body);
            arrivals.lock().unwrap().push((Instant::now(), texts));
            support::respond(request)
        });
    }

    let (events, mut seen) = mpsc::unbounded_channel();
    let mut config = WorkerConfig::new(db.url(), &mock.base_url());
    config.lease_ttl = Duration::from_secs(10);
    config.poll = Duration::from_millis(500);
    let _fleet: Vec<Worker> = (0..workers)
        .map(|n| Worker::start(&format!("w{n}"), &config, &events))
        .collect();
    let mut ready = 0;
    while ready < workers {
        let (_, line) = seen.recv().await.unwrap();
        ready += usize::from(line == "ready");
    }
    let fronts: Vec<_> = {
        let mut fronts = Vec::new();
        for _ in 0..3 {
            fronts.push(support::front(db.url()).await);
        }
        fronts
    };

    // 24 senders, each owning a share of the threads and sending their messages in turn, so each
    // thread's order is its sender's.
    let senders = 24;
    let started = Instant::now();
    let mut sending = Vec::new();
    for sender in 0..senders {
        let front = fronts[sender % fronts.len()].clone();
        let mine: Vec<usize> = (0..threads).filter(|t| t % senders == sender).collect();
        let per_thread = messages / threads + 1;
        sending.push(tokio::spawn(async move {
            let mut accepted = Vec::new();
            let mut sent: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for round in 0..per_thread {
                for &thread in &mine {
                    // Message n of thread t exists when n * threads + t < messages.
                    if round * threads + thread >= messages {
                        continue;
                    }
                    let thread = format!("T{thread:04}");
                    let text = format!("{thread} m{round}");
                    let at = Instant::now();
                    front
                        .execute(text.as_str(), ExecuteOptions::new().thread_id(&thread))
                        .await
                        .unwrap();
                    accepted.push((text.clone(), at, Instant::now()));
                    sent.entry(thread).or_default().push(text);
                }
            }
            (accepted, sent)
        }));
    }
    let mut accepted: HashMap<String, (Instant, Instant)> = HashMap::new();
    let mut sent: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for sending in sending {
        let (times, threads) = sending.await.unwrap();
        for (text, asked, at) in times {
            accepted.insert(text, (asked, at));
        }
        sent.extend(threads);
    }
    let accepted_in = started.elapsed();
    assert_eq!(accepted.len(), messages);

    // Done when every thread has settled: looked at after each let-go once every message was seen
    // by the model.
    let check = support::store(db.url()).await;
    loop {
        let seen_all = {
            let arrivals = arrivals.lock().unwrap();
            let mut texts = std::collections::HashSet::new();
            for (_, carried) in arrivals.iter() {
                texts.extend(carried.iter().cloned());
            }
            texts.len() >= messages
        };
        if seen_all
            && noetic_core::DurableStore::runnable(&check, "thread/")
                .await
                .unwrap()
                .is_empty()
        {
            break;
        }
        tokio::time::timeout(Duration::from_secs(120), async {
            while let Some((_, line)) = seen.recv().await {
                if line.contains("thread let go") {
                    return;
                }
            }
        })
        .await
        .expect("the fleet stopped letting threads go");
    }
    let elapsed = started.elapsed();

    // Exactly once, in order; one answer per request.
    let arrivals = std::mem::take(&mut *arrivals.lock().unwrap());
    let mut requests_per_thread: HashMap<String, usize> = HashMap::new();
    let mut turn_start: HashMap<String, Instant> = HashMap::new();
    for (at, texts) in &arrivals {
        if let Some(first) = texts.first() {
            let thread = first.split(' ').next().unwrap_or_default().to_owned();
            *requests_per_thread.entry(thread).or_default() += 1;
        }
        for text in texts {
            turn_start.entry(text.clone()).or_insert(*at);
        }
    }
    for (thread, texts) in &sent {
        let stored = fronts[0].stored_thread(thread).await.unwrap().unwrap();
        let users: Vec<String> = stored
            .history
            .iter()
            .filter(|item| item.role() == Some(Role::User))
            .filter_map(Item::text)
            .collect();
        assert_eq!(&users, texts, "{thread}: every message once, in order");
        let answers = stored
            .history
            .iter()
            .filter(|item| item.role() == Some(Role::Assistant))
            .count();
        assert_eq!(
            answers, requests_per_thread[thread],
            "{thread}: one answer per turn"
        );
        assert_eq!(stored.pending, 0);
    }

    let mut execute: Vec<Duration> = accepted.values().map(|(asked, at)| *at - *asked).collect();
    let mut to_start: Vec<Duration> = accepted
        .iter()
        .map(|(text, (_, at))| turn_start[text].saturating_duration_since(*at))
        .collect();
    execute.sort_unstable();
    to_start.sort_unstable();
    let turns = arrivals.len();
    println!("fleet: {workers} worker processes, {threads} threads, {messages} messages");
    println!("| figure | value |");
    println!("|---|---|");
    println!("| messages accepted | {messages} in {} |", ms(accepted_in));
    println!(
        "| accept (`execute`) p50 / p99 | {} / {} |",
        ms(percentile(&execute, 50)),
        ms(percentile(&execute, 99))
    );
    println!("| turns run | {turns} (every message answered exactly once) |");
    println!(
        "| all settled after | {} ({:.0} turns/s, {:.0} messages/s) |",
        ms(elapsed),
        turns as f64 / elapsed.as_secs_f64(),
        messages as f64 / elapsed.as_secs_f64()
    );
    println!(
        "| accept → turn start p50 / p99 | {} / {} |",
        ms(percentile(&to_start, 50)),
        ms(percentile(&to_start, 99))
    );
}
