//! Write ownership with real processes: worker processes (this binary, re-executed) serving one
//! PostgreSQL database, a mock provider on loopback, and the test process accepting messages as
//! further hosts. Workers are killed (SIGKILL) and paused (SIGSTOP/SIGCONT) for real.
//!
//! `harness = false`: the binary is the test runner (no env var) and the worker
//! (`NOETIC_FLEET_WORKER`). It answers `--list` and a name filter as libtest does.
//!
//! Every wait is bounded and fails naming what it waited for: each database call and each read of
//! the workers' lines has its own limit, and each test as a whole has [`TEST_LIMIT`].
//! `cargo xtask soak-fleet [RUNS]` runs this binary in a loop (200 runs by default) to find a rare
//! hang.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use noetic_core::{AgentHarness, ExecuteOptions, Item, Role};
use noetic_test_support::MockServer;
use noetic_test_support::postgres::{TestDatabase, print_skip, test_database};
use support::{
    Worker, WorkerConfig, claimed, front, let_go, respond, thread_of, until_event, within,
};
use tokio::sync::mpsc;

type Test = fn(TestDatabase) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>;

/// How long one test may take in all (one takes 4–7 s on the 2-core machine).
const TEST_LIMIT: Duration = Duration::from_secs(180);

/// How long one database call (connect, a commit, a read) may take.
const DB_LIMIT: Duration = Duration::from_secs(30);

/// How long the threads of the first test may take to settle once every message is accepted.
const SETTLE_LIMIT: Duration = Duration::from_secs(120);

const TESTS: &[(&str, Test)] = &[
    (
        "messages_accepted_through_any_host_run_once_in_order_and_one_thread_never_runs_two_turns_at_once",
        |db| Box::pin(once_in_order(db)),
    ),
    (
        "a_worker_killed_mid_turn_is_taken_over_after_its_ttl_and_resumes_from_the_last_recorded_round",
        |db| Box::pin(killed_mid_turn(db)),
    ),
    (
        "a_worker_paused_past_its_ttl_fails_its_next_write_with_lease_lost_and_appends_nothing",
        |db| Box::pin(paused_past_ttl(db)),
    ),
];

fn main() {
    if let Ok(name) = std::env::var(support::WORKER) {
        support::worker_main(&name);
        return;
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|arg| arg == "--list") {
        for (name, _) in TESTS {
            println!("{name}: test");
        }
        return;
    }
    let filter = args.iter().find(|arg| !arg.starts_with('-'));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (mut passed, mut filtered) = (0, 0);
    for (name, test) in TESTS {
        if filter.is_some_and(|filter| !name.contains(filter.as_str())) {
            filtered += 1;
            continue;
        }
        runtime.block_on(async {
            match within("a test database", DB_LIMIT, test_database()).await {
                Some(db) => {
                    within(
                        &format!("the test `{name}` to finish"),
                        TEST_LIMIT,
                        test(db),
                    )
                    .await
                }
                None => print_skip(name),
            }
        });
        println!("test {name} ... ok");
        passed += 1;
    }
    println!("test result: ok. {passed} passed; 0 failed; {filtered} filtered out");
}

fn on(thread: &str) -> ExecuteOptions {
    ExecuteOptions::new().thread_id(thread)
}

fn texts_of(items: &[Item], role: Role) -> Vec<String> {
    items
        .iter()
        .filter(|item| item.role() == Some(role))
        .filter_map(Item::text)
        .collect()
}

/// A thread as `host` reads it from the store.
async fn stored(host: &AgentHarness, thread: &str) -> Option<noetic_core::StoredThread> {
    within(
        &format!("reading thread {thread}"),
        DB_LIMIT,
        host.stored_thread(thread),
    )
    .await
    .unwrap()
}

/// Whether every thread in `threads` has settled all `expected` messages.
async fn all_settled(host: &AgentHarness, threads: &BTreeMap<String, Vec<String>>) -> bool {
    for (thread, sent) in threads {
        let Some(stored) = stored(host, thread).await else {
            return false;
        };
        if stored.accepted != sent.len() as u64
            || stored.pending != 0
            || stored.turn_in_flight.is_some()
        {
            return false;
        }
    }
    true
}

async fn once_in_order(db: TestDatabase) {
    let mock = MockServer::start().await;
    mock.set_responder(respond);
    let (events, mut seen) = mpsc::unbounded_channel();
    let mut config = WorkerConfig::new(db.url(), &mock.base_url());
    // Nobody dies or pauses here, so no lease should lapse: with the 1 s of the other tests, a
    // worker starved of CPU for half a second (a loaded 2-core machine) lost a thread mid-turn, and
    // the taker re-sent the turn's round, as it must after a takeover (the loser was fenced and
    // recorded nothing), which the request chains below would read as two turns at once.
    config.lease_ttl = Duration::from_secs(10);
    let _workers: Vec<Worker> = ["w1", "w2", "w3"]
        .iter()
        .map(|name| Worker::start(name, &config, &events))
        .collect();
    // Three accepting hosts besides the workers.
    let fronts = [
        within("a front host connecting", DB_LIMIT, front(db.url())).await,
        within("a front host connecting", DB_LIMIT, front(db.url())).await,
        within("a front host connecting", DB_LIMIT, front(db.url())).await,
    ];
    let mut threads: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for round in 0..6 {
        for thread in 0..8 {
            let thread = format!("T{thread}");
            let text = format!("{thread} m{round}");
            within(
                &format!("accepting `{text}`"),
                DB_LIMIT,
                fronts[(round + thread.len()) % 3].execute(text.as_str(), on(&thread)),
            )
            .await
            .unwrap();
            threads.entry(thread).or_default().push(text);
        }
    }
    // Every let-go is a moment a thread may have settled: look then. Bounded twice: 60 s from one
    // let-go to the next, and SETTLE_LIMIT in all (threads let go over and over without settling
    // would otherwise loop for ever).
    let mut log = Vec::new();
    let deadline = tokio::time::Instant::now() + SETTLE_LIMIT;
    while !all_settled(&fronts[0], &threads).await {
        let next = tokio::time::timeout_at(
            deadline.min(tokio::time::Instant::now() + Duration::from_secs(60)),
            async {
                loop {
                    let event = seen
                        .recv()
                        .await
                        .expect("the workers' lines end with the test");
                    let done = event.1.contains("thread let go");
                    log.push(event);
                    if done {
                        return;
                    }
                }
            },
        )
        .await;
        if next.is_err() {
            let mut state = Vec::new();
            for thread in threads.keys() {
                state.push(format!("{:?}", stored(&fronts[0], thread).await));
            }
            let marks = within("the runnable marks", DB_LIMIT, async {
                let store = support::store(db.url()).await;
                noetic_core::DurableStore::runnable(&store, "").await
            })
            .await
            .unwrap();
            panic!(
                "not every thread settled (60 s without a let-go, or {SETTLE_LIMIT:?} in all)\n\
                 threads: {state:#?}\nmarks: {marks:?}\nworker lines: {log:#?}"
            );
        }
    }

    // The lines the workers wrote after the last let-go the loop read.
    while let Ok(event) = seen.try_recv() {
        log.push(event);
    }
    let requests = mock.requests();
    let mut chains: BTreeMap<String, usize> = BTreeMap::new();
    for request in &requests {
        let thread = thread_of(request);
        let turn = chains.entry(thread.clone()).or_default();
        // One request per turn (text answers), so a thread's n-th request must carry n answers:
        // two turns of one thread at once would send two requests with the same history.
        let carried = support::answers_in(&request.body);
        if carried != *turn {
            let sent: Vec<usize> = requests
                .iter()
                .filter(|other| thread_of(other) == thread)
                .map(|other| support::answers_in(&other.body))
                .collect();
            let lines: Vec<&(String, String)> = log
                .iter()
                .filter(|(_, line)| {
                    line.contains(&format!("thread_id={thread} ")) || line.contains("LEASE")
                })
                .collect();
            panic!(
                "thread {thread}: request {turn} carried {carried} earlier answers, not {turn}\n\
                 answers carried by each of its requests, in order: {sent:?}\n\
                 worker lines about it (and every lease error): {lines:#?}"
            );
        }
        *turn += 1;
    }
    for (thread, sent) in &threads {
        let stored = stored(&fronts[1], thread).await.unwrap();
        assert_eq!(
            &texts_of(&stored.history, Role::User),
            sent,
            "{thread}: once each, in order"
        );
        let answers = texts_of(&stored.history, Role::Assistant);
        assert_eq!(
            answers.len(),
            chains[thread],
            "{thread}: one answer per turn"
        );
        assert!(
            answers.last().unwrap().ends_with(&format!("{thread} m5")),
            "{answers:?}"
        );
    }
}

async fn killed_mid_turn(db: TestDatabase) {
    let mock = MockServer::start().await;
    mock.set_responder(respond);
    let (events, mut seen) = mpsc::unbounded_channel();
    let mut config = WorkerConfig::new(db.url(), &mock.base_url());
    config.hang = Some(("doomed".to_owned(), "forever".to_owned()));
    let doomed = Worker::start("doomed", &config, &events);
    let host = within("the front host connecting", DB_LIMIT, front(db.url())).await;
    within(
        "accepting `K hang on`",
        DB_LIMIT,
        host.execute("K hang on", on("K")),
    )
    .await
    .unwrap();
    // Round 1 (the tool call) is recorded; the call is in flight in the doomed worker.
    until_event(
        &mut seen,
        Duration::from_secs(30),
        "the tool running",
        |worker, line| worker == "doomed" && line == "tool started",
    )
    .await;
    let _others = [
        Worker::start("w2", &config, &events),
        Worker::start("w3", &config, &events),
    ];
    doomed.signal("KILL");
    let lines = until_event(
        &mut seen,
        Duration::from_secs(30),
        "the takeover",
        |worker, line| worker != "doomed" && let_go(line, "K", Some("Released")),
    )
    .await;
    let taker = lines.last().unwrap().0.clone();
    assert!(
        lines
            .iter()
            .any(|(worker, line)| *worker == taker && claimed(line, "K")),
        "{lines:#?}"
    );

    let requests: Vec<_> = mock
        .requests()
        .into_iter()
        .filter(|r| thread_of(r) == "K")
        .collect();
    assert_eq!(
        requests.len(),
        2,
        "round 1 once (by the dead worker), round 2 once (by the taker)"
    );
    assert!(support::tool_outputs(&requests[0].body).is_empty());
    assert_eq!(
        support::tool_outputs(&requests[1].body),
        ["looked up K hang on"]
    );
    let stored = stored(&host, "K").await.unwrap();
    assert_eq!(stored.pending, 0);
    assert_eq!(
        texts_of(&stored.history, Role::Assistant),
        ["found: looked up K hang on"]
    );
}

/// Every row of the store's tables, by a digest of its value: what "nothing appended" compares.
async fn dump(db: &TestDatabase) -> Vec<String> {
    within("a dump of every row", DB_LIMIT, dump_rows(db)).await
}

async fn dump_rows(db: &TestDatabase) -> Vec<String> {
    let pool = sqlx::PgPool::connect(db.url()).await.unwrap();
    let rows: Vec<(String,)> = sqlx::query_as(
        "SELECT 'r ' || key || ' ' || md5(value) FROM records \
         UNION ALL SELECT 'l ' || log || '#' || seq || ' ' || md5(value) FROM logs \
         UNION ALL SELECT 'h ' || log || ' ' || next_seq FROM log_heads \
         UNION ALL SELECT 'e ' || name || ' ' || holder || ' ' || epoch || ' ' || expires_at_ms \
                   FROM leases \
         UNION ALL SELECT 'k ' || key || ' ' || md5(value) FROM kv \
         ORDER BY 1",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    pool.close().await;
    rows.into_iter().map(|(row,)| row).collect()
}

async fn paused_past_ttl(db: TestDatabase) {
    let mock = MockServer::start().await;
    mock.set_responder(respond);
    let (events, mut seen) = mpsc::unbounded_channel();
    let mut config = WorkerConfig::new(db.url(), &mock.base_url());
    // The paused worker's tool sleeps 2.5 s: longer than its 1 s lease, so when it wakes its next
    // write comes after another worker has taken over.
    config.hang = Some(("sleeper".to_owned(), "2500".to_owned()));
    let sleeper = Worker::start("sleeper", &config, &events);
    let host = within("the front host connecting", DB_LIMIT, front(db.url())).await;
    within(
        "accepting `P hang on`",
        DB_LIMIT,
        host.execute("P hang on", on("P")),
    )
    .await
    .unwrap();
    until_event(
        &mut seen,
        Duration::from_secs(30),
        "the tool running",
        |worker, line| worker == "sleeper" && line == "tool started",
    )
    .await;
    sleeper.signal("STOP");
    let _other = Worker::start("w2", &config, &events);
    until_event(
        &mut seen,
        Duration::from_secs(30),
        "the takeover",
        |worker, line| worker == "w2" && let_go(line, "P", Some("Released")),
    )
    .await;
    let before = dump(&db).await;

    sleeper.signal("CONT");
    let lines = until_event(
        &mut seen,
        Duration::from_secs(30),
        "the sleeper fenced out",
        |worker, line| worker == "sleeper" && let_go(line, "P", None),
    )
    .await;
    let (_, last) = lines.last().unwrap();
    assert!(last.contains("outcome=Lost"), "{lines:#?}");
    assert!(
        lines.iter().any(|(worker, line)| worker == "sleeper"
            && (line.contains("LEASE_LOST") || line.contains("lost: another holder took it over"))),
        "the sleeper's write was refused with LEASE_LOST: {lines:#?}"
    );
    sleeper.signal("TERM");
    let lines = until_event(
        &mut seen,
        Duration::from_secs(30),
        "the sleeper's report",
        |worker, line| worker == "sleeper" && line.starts_with("report "),
    )
    .await;
    let report = &lines.last().unwrap().1;
    assert!(report.contains("claimed=1 released=0 lost=1"), "{report}");
    assert_eq!(
        dump(&db).await,
        before,
        "the fenced worker appended nothing"
    );

    let requests: Vec<_> = mock
        .requests()
        .into_iter()
        .filter(|r| thread_of(r) == "P")
        .collect();
    assert_eq!(requests.len(), 2, "the sleeper never asked for round 2");
    let stored = stored(&host, "P").await.unwrap();
    assert_eq!(
        texts_of(&stored.history, Role::Assistant),
        ["found: looked up P hang on"]
    );
}
