//! The fleet part: three hosts sharing one PostgreSQL database (three harnesses with
//! `shared_threads` and their servers, in this process), one of them running the turns; 1,000
//! subscribers of one thread spread over the three. Events delivered per second across all of
//! them, and the latency from publish on the running host to a read on the others (through the
//! event log and their relays) and on itself. Skipped, saying so, without PostgreSQL.

use std::sync::Arc;
use std::time::{Duration, Instant};

use noetic_core::{AgentHarness, EventLogOptions, ServeOptions, call_model};
use noetic_storage_postgres::PostgresStorage;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::{
    PACE, PACED_DELTAS, PHASE_LIMIT, Run, Script, StampedModel, Tally, cpu, events_url, latency,
    post, post_all, read_turn, start, subscribe_all, thousands,
};

/// The thread every subscriber watches.
const THREAD: &str = "fleet";

/// One round's figures: every subscriber's, the other hosts' subscribers', the running host's.
struct FleetRun {
    all: Run,
    remote: Run,
    local: Run,
}

async fn host(url: &str, script: &Arc<Script>) -> AgentHarness {
    let store = PostgresStorage::connect(url).await.unwrap();
    AgentHarness::builder("agent")
        .provider(
            "stamped",
            StampedModel {
                script: script.clone(),
            },
        )
        .agent_graph(call_model("llm").model("m"))
        .durable(store)
        .shared_threads()
        .event_log(Some(EventLogOptions::new()))
        .build()
        .unwrap()
}

/// Subscribes everywhere, sends the message to the first accepting host, and reads every turn.
async fn round(client: &reqwest::Client, bases: &[String], subscribers: usize) -> FleetRun {
    let urls: Vec<String> = (0..subscribers)
        .map(|index| events_url(&bases[index % bases.len()], THREAD))
        .collect();
    let responses = subscribe_all(client, urls.clone()).await;
    // Which host each subscription is on: index 0 runs the turns.
    let readers: Vec<_> = responses
        .into_iter()
        .map(|response| {
            let on = bases
                .iter()
                .position(|base| response.url().as_str().starts_with(base.as_str()))
                .unwrap_or(0);
            (on, tokio::spawn(read_turn(response)))
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let cpu_before = cpu();
    let started = Instant::now();
    post(
        client,
        format!("{}/v1/threads/{THREAD}/messages", bases[1]),
        json!({"input": "talk"}),
    )
    .await;
    let mut local = Vec::new();
    let mut remote = Vec::new();
    let mut all = Vec::new();
    let joined = tokio::time::timeout(PHASE_LIMIT, async {
        for (on, reader) in readers {
            let tally: Tally = reader.await.expect("a reader");
            all.push(tally.clone());
            if on == 0 {
                local.push(tally);
            } else {
                remote.push(tally);
            }
        }
    })
    .await;
    joined.expect("every subscriber read its turn_completed in time");
    let wall = started.elapsed();
    let cpu_used = cpu().saturating_sub(cpu_before);
    FleetRun {
        all: Run::new(all, wall, cpu_used),
        remote: Run::new(remote, wall, cpu_used),
        local: Run::new(local, wall, cpu_used),
    }
}

/// Runs the fleet part and prints its table; a line saying why when there is no PostgreSQL.
pub(crate) async fn fleet(subscribers: usize, deltas: usize, rounds: usize) {
    let Some(database) = noetic_test_support::postgres::test_database().await else {
        println!();
        println!(
            "fleet: SKIPPED (no PostgreSQL: install it or set NOETIC_TEST_PG_URL; `.ci/run` \
             starts one)"
        );
        return;
    };
    let script = Arc::new(Script::default());
    let runner = host(database.url(), &script).await;
    let others = [
        host(database.url(), &script).await,
        host(database.url(), &script).await,
    ];
    let stop = CancellationToken::new();
    let serving = {
        let runner = runner.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            runner
                .serve(
                    stop.cancelled_owned(),
                    ServeOptions::default().poll_interval(Duration::from_millis(100)),
                )
                .await
        })
    };
    let mut bases = vec![start(runner, stop.clone()).await.1];
    for other in others {
        bases.push(start(other, stop.clone()).await.1);
    }
    let client = reqwest::Client::new();
    let creates = bases
        .iter()
        .map(|base| (format!("{base}/v1/threads"), json!({"thread_id": THREAD})))
        .collect();
    post_all(&client, creates).await;
    script.set(deltas, Duration::ZERO);
    round(&client, &bases, 3).await;
    let mut runs = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        runs.push(round(&client, &bases, subscribers).await);
    }
    script.set(PACED_DELTAS, PACE);
    let paced = round(&client, &bases, subscribers).await;
    stop.cancel();
    let _ = serving.await;
    runs.sort_by(|a, b| a.all.per_second().total_cmp(&b.all.per_second()));
    let slowest = runs[0].all.per_second();
    let fastest = runs[runs.len() - 1].all.per_second();
    let median = runs.swap_remove(runs.len() / 2);

    println!();
    println!(
        "fleet: 3 hosts on one PostgreSQL (one runs the turn), {subscribers} subscribers of one \
         thread spread over the three, {deltas} text deltas per turn, {rounds} rounds; relays are \
         woken by the log's NOTIFY, and read it every {} ms at worst",
        EventLogOptions::new().poll.as_millis()
    );
    println!();
    println!("| measure | value | target |");
    println!("|---|---:|---|");
    println!(
        "| events delivered per second, all subscribers: median of {rounds} rounds (slowest–fastest) | **{}** ({}–{}) | — (none for SSE) |",
        thousands(median.all.per_second() as u64),
        thousands(slowest as u64),
        thousands(fastest as u64)
    );
    println!(
        "| wall time of the median round: POST on another host → last `turn_completed` read | {:.0} ms | — |",
        median.all.wall.as_secs_f64() * 1e3
    );
    println!(
        "| CPU per event delivered (3 hosts + clients + relays: one process; the database apart) | {:.2} µs | — |",
        median.all.cpu_per_event_us()
    );
    println!(
        "| publish on the running host → read on another host, deltas all at once: median / p99 / max | {} | — |",
        latency(&median.remote)
    );
    println!(
        "| publish → read on the running host itself (after the event is written), all at once | {} | — |",
        latency(&median.local)
    );
    println!(
        "| publish on the running host → read on another host at a model's pace ({PACED_DELTAS} deltas, one per {} ms): median / p99 / max | {} | — |",
        PACE.as_millis(),
        latency(&paced.remote)
    );
    println!(
        "| publish → read on the running host itself, at a model's pace | {} | — |",
        latency(&paced.local)
    );
    println!(
        "| `lagged` events (median and paced rounds) | {} | 0 expected |",
        median.all.lagged + paced.all.lagged
    );
}
