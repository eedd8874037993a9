//! Write cost: the bytes a checkpoint writes do not grow with the history behind it, and a harness
//! without a durable store writes nothing.

use std::sync::Arc;
use std::sync::Mutex;

use futures_util::future::BoxFuture;
use noetic_core::adapter::durable::{Commit, DurableStore, Lease, LeaseRequest, LogEntry, Records};
use noetic_core::{
    AgentHarness, Context, ContextOptions, InMemoryStorage, Item, KvDurableStore, Result,
    StorageAdapter, StorageOp, loop_step, run_code, until,
};

/// A durable store that records the bytes of every commit it forwards.
struct Counting {
    inner: KvDurableStore,
    commits: Mutex<Vec<usize>>,
}

fn size(commit: &Commit) -> usize {
    commit
        .puts
        .iter()
        .map(|(key, value)| key.len() + value.len())
        .chain(
            commit.appends.iter().map(|append| {
                append.log.len() + append.entries.iter().map(Vec::len).sum::<usize>()
            }),
        )
        .sum()
}

impl DurableStore for Counting {
    fn commit(&self, commit: Commit) -> BoxFuture<'_, Result<()>> {
        self.commits.lock().unwrap().push(size(&commit));
        self.inner.commit(commit)
    }
    fn record<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>>> {
        self.inner.record(key)
    }
    fn records<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Records>> {
        self.inner.records(prefix)
    }
    fn read_log<'a>(&'a self, log: &'a str, from: u64) -> BoxFuture<'a, Result<Vec<LogEntry>>> {
        self.inner.read_log(log, from)
    }
    fn next_seq<'a>(&'a self, log: &'a str) -> BoxFuture<'a, Result<u64>> {
        self.inner.next_seq(log)
    }
    fn acquire_lease<'a>(&'a self, request: LeaseRequest<'a>) -> BoxFuture<'a, Result<Lease>> {
        self.inner.acquire_lease(request)
    }
    fn release_lease<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<()>> {
        self.inner.release_lease(lease)
    }
    fn lease<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<Lease>>> {
        self.inner.lease(name)
    }
    fn runnable<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Vec<String>>> {
        self.inner.runnable(prefix)
    }
}

impl StorageAdapter for Counting {
    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>>> {
        self.inner.get(key)
    }
    fn set<'a>(&'a self, key: &'a str, value: Vec<u8>) -> BoxFuture<'a, Result<()>> {
        self.inner.set(key, value)
    }
    fn delete<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<()>> {
        self.inner.delete(key)
    }
    fn list<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Vec<String>>> {
        self.inner.list(prefix)
    }
    fn get_many<'a>(&'a self, keys: &'a [String]) -> BoxFuture<'a, Result<Vec<Option<Vec<u8>>>>> {
        self.inner.get_many(keys)
    }
    fn batch(&self, ops: Vec<StorageOp>) -> BoxFuture<'_, Result<()>> {
        self.inner.batch(ops)
    }
}

#[tokio::test]
async fn bytes_written_per_step_stay_flat_from_step_10_to_step_1000() {
    let store = Arc::new(Counting {
        inner: KvDurableStore::in_memory(),
        commits: Mutex::new(Vec::new()),
    });
    // Every step appends an item of the same size, so the history grows by one item per step.
    let step = run_code("grow", |n: i64, ctx: Context| async move {
        ctx.append_item(Item::user_text(format!("note {:06}", n % 1_000_000)));
        Ok::<_, std::convert::Infallible>(n + 1)
    });
    let graph = loop_step("grow-loop")
        .step(step)
        .until(until::max_steps(1000))
        .max_iterations(1000)
        .build();
    let harness = AgentHarness::builder("writes")
        .agent_graph(graph)
        .durable(store.clone())
        .build()
        .unwrap();
    let ctx = harness.create_context(ContextOptions::new());
    let graph = harness.agent_graph::<i64, i64>().unwrap();
    assert_eq!(harness.run(&graph, 0, &ctx).await.unwrap(), 1000);
    assert_eq!(ctx.item_count(), 1000);
    let commits = store.commits.lock().unwrap().clone();
    // One commit to begin, one per completed step (1000 inner + the loop), one to finish.
    assert!(commits.len() >= 1000, "{}", commits.len());
    let at_10 = commits[10] as f64;
    let at_1000 = commits[1000] as f64;
    let ratio = at_1000 / at_10;
    assert!(
        ratio < 1.5,
        "bytes per checkpoint grew {ratio:.2}× from step 10 ({at_10}) to step 1000 ({at_1000})"
    );
}

#[tokio::test]
async fn a_harness_without_a_durable_store_writes_nothing() {
    let storage = Arc::new(InMemoryStorage::new());
    let harness = AgentHarness::builder("plain")
        .agent_graph(run_code("double", |n: i64, _| async move {
            Ok::<_, std::convert::Infallible>(n * 2)
        }))
        .storage(storage.clone())
        .build()
        .unwrap();
    let ctx = harness.create_context(ContextOptions::new());
    let graph = harness.agent_graph::<i64, i64>().unwrap();
    assert_eq!(harness.run(&graph, 2, &ctx).await.unwrap(), 4);
    ctx.close().await;
    assert!(storage.is_empty());
    assert_eq!(
        harness.execution(ctx.id()).await.unwrap_err().code(),
        "INVALID_ARGUMENT"
    );
}

/// A durable store that records what each commit puts, deletes and appends to.
struct Recording {
    inner: KvDurableStore,
    commits: Mutex<Vec<Written>>,
}

#[derive(Debug, Clone)]
struct Written {
    puts: Vec<String>,
    deletes: Vec<String>,
    appends: Vec<String>,
    /// The paid rows put, with the execution their call belongs to.
    paid_owners: Vec<(String, String)>,
}

impl DurableStore for Recording {
    fn commit(&self, commit: Commit) -> BoxFuture<'_, Result<()>> {
        self.commits.lock().unwrap().push(Written {
            puts: commit.puts.iter().map(|(key, _)| key.clone()).collect(),
            deletes: commit.deletes.clone(),
            appends: commit
                .appends
                .iter()
                .map(|append| append.log.clone())
                .collect(),
            paid_owners: commit
                .puts
                .iter()
                .filter(|(key, _)| key.starts_with("paid/"))
                .map(|(key, value)| {
                    let row: serde_json::Value = serde_json::from_slice(value).unwrap();
                    let owner = row["call"]["executionId"].as_str().unwrap().to_owned();
                    (key.clone(), owner)
                })
                .collect(),
        });
        // A turn for any other run in flight between commits, so that overlapping runs interleave.
        Box::pin(async move {
            tokio::task::yield_now().await;
            self.inner.commit(commit).await
        })
    }
    fn record<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>>> {
        self.inner.record(key)
    }
    fn records<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Records>> {
        self.inner.records(prefix)
    }
    fn read_log<'a>(&'a self, log: &'a str, from: u64) -> BoxFuture<'a, Result<Vec<LogEntry>>> {
        self.inner.read_log(log, from)
    }
    fn next_seq<'a>(&'a self, log: &'a str) -> BoxFuture<'a, Result<u64>> {
        self.inner.next_seq(log)
    }
    fn acquire_lease<'a>(&'a self, request: LeaseRequest<'a>) -> BoxFuture<'a, Result<Lease>> {
        self.inner.acquire_lease(request)
    }
    fn release_lease<'a>(&'a self, lease: &'a Lease) -> BoxFuture<'a, Result<()>> {
        self.inner.release_lease(lease)
    }
    fn lease<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<Lease>>> {
        self.inner.lease(name)
    }
    fn runnable<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Vec<String>>> {
        self.inner.runnable(prefix)
    }
}

impl StorageAdapter for Recording {
    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>>> {
        self.inner.get(key)
    }
    fn set<'a>(&'a self, key: &'a str, value: Vec<u8>) -> BoxFuture<'a, Result<()>> {
        self.inner.set(key, value)
    }
    fn delete<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<()>> {
        self.inner.delete(key)
    }
    fn list<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Vec<String>>> {
        self.inner.list(prefix)
    }
    fn get_many<'a>(&'a self, keys: &'a [String]) -> BoxFuture<'a, Result<Vec<Option<Vec<u8>>>>> {
        self.inner.get_many(keys)
    }
    fn batch(&self, ops: Vec<StorageOp>) -> BoxFuture<'_, Result<()>> {
        self.inner.batch(ops)
    }
}

/// A priced round's paid-call row is deleted by the checkpoint that records the round (its items),
/// not by a commit of its own: one write less per round, and the row and the round's result land
/// together, so no crash point loses a paid call's accounting.
#[tokio::test]
async fn a_priced_rounds_paid_row_goes_with_the_checkpoint_that_records_the_round() {
    use crate::support::{Counts, agent, echo_tool, model};

    let store = Arc::new(Recording {
        inner: KvDurableStore::in_memory(),
        commits: Mutex::new(Vec::new()),
    });
    let counts = Arc::new(Counts::default());
    let harness = AgentHarness::builder("paid-rows")
        .provider("scripted", model(0, None, None))
        .agent_graph(agent(echo_tool(counts.clone(), None), counts))
        .durable(store.clone())
        .build()
        .unwrap();
    let ctx = harness.create_context(ContextOptions::new());
    let graph = harness.agent_graph::<String, String>().unwrap();
    harness
        .run(&graph, crate::support::INPUT.to_owned(), &ctx)
        .await
        .unwrap();

    let commits = store.commits.lock().unwrap().clone();
    let paid = |key: &String| key.starts_with("paid/");
    let dispatched: std::collections::BTreeSet<&String> = commits
        .iter()
        .flat_map(|c| c.puts.iter().filter(|k| paid(k)))
        .collect();
    assert_eq!(dispatched.len(), 4, "four model rounds: {commits:#?}");
    let mut deleted = Vec::new();
    for commit in &commits {
        if commit.deletes.iter().any(paid) {
            assert!(
                commit.appends.iter().any(|log| log.ends_with("/items")),
                "a paid row deleted by a commit that records no round: {commit:?}"
            );
            deleted.extend(commit.deletes.iter().filter(|k| paid(k)).cloned());
        }
    }
    deleted.sort();
    assert_eq!(
        deleted,
        dispatched.into_iter().cloned().collect::<Vec<_>>(),
        "every paid row deleted once"
    );
    assert!(store.records("paid/").await.unwrap().is_empty());
    assert!(harness.pending_spend().await.unwrap().is_empty());
}

/// Several durable runs at once: each priced round's paid row goes with a checkpoint of its own
/// execution, never with another execution's commit (which would carry every run's deletes, and
/// grow with the number of runs in flight).
#[tokio::test]
async fn a_paid_row_goes_with_a_checkpoint_of_its_own_execution_when_runs_overlap() {
    use crate::support::{Counts, agent, echo_tool, replies};

    let store = Arc::new(Recording {
        inner: KvDurableStore::in_memory(),
        commits: Mutex::new(Vec::new()),
    });
    let counts = Arc::new(Counts::default());
    // Each run's replies in its own order: the reply a request gets follows from its step and round.
    let model = noetic_test_support::ScriptedModel::responding(|request| {
        let index = match request.instructions.as_deref() {
            Some("Answer.") => 3,
            _ => request.round as usize,
        };
        replies().swap_remove(index)
    });
    let harness = AgentHarness::builder("paid-rows-overlapping")
        .provider("scripted", model)
        .agent_graph(agent(echo_tool(counts.clone(), None), counts))
        .durable(store.clone())
        .build()
        .unwrap();
    let graph = harness.agent_graph::<String, String>().unwrap();
    let runs = (0..4).map(|_| {
        let ctx = harness.create_context(ContextOptions::new());
        let (harness, graph) = (harness.clone(), graph.clone());
        async move {
            harness
                .run(&graph, crate::support::INPUT.to_owned(), &ctx)
                .await
        }
    });
    for outcome in futures_util::future::join_all(runs).await {
        outcome.unwrap();
    }

    let commits = store.commits.lock().unwrap().clone();
    let owners: std::collections::HashMap<String, String> = commits
        .iter()
        .flat_map(|commit| commit.paid_owners.iter().cloned())
        .collect();
    assert_eq!(owners.len(), 16, "four runs of four rounds: {commits:#?}");
    let mut deleted = 0;
    for commit in &commits {
        for row in commit.deletes.iter().filter(|key| key.starts_with("paid/")) {
            let items = format!("exec/{}/items", owners[row]);
            assert!(
                commit.appends.contains(&items),
                "{row} of {} deleted by a commit that does not record its execution: {commit:?}",
                owners[row]
            );
            deleted += 1;
        }
    }
    assert_eq!(deleted, 16, "every paid row deleted once");
    assert!(store.records("paid/").await.unwrap().is_empty());
}
