//! Many durable threads on one file (issue 11, scale; the 100,000-thread figures come from
//! `benches/threads.rs`): every idle thread leaves memory, and each one touched again resumes its own
//! history from the file.

#![allow(clippy::unwrap_used)] // a test: a failure is a panic

use std::time::Duration;

use noetic_core::{AgentHarness, ExecuteOptions, Item, Scope, call_model};
use noetic_storage_sqlite::SqliteStorage;
use noetic_test_support::{ScriptedModel, ScriptedResponse};

use crate::support::temp_db;

const THREADS: usize = 200;

fn harness(store: SqliteStorage, idle_ttl: Duration) -> AgentHarness {
    let model = ScriptedModel::responding(|request| {
        ScriptedResponse::text(&format!("hello, {}", request.user_texts().join(" + ")))
    });
    AgentHarness::builder("threads")
        .provider("scripted", model)
        .agent_graph(
            call_model("chat")
                .model("scripted-model")
                .instructions("Greet."),
        )
        .durable(store)
        .session_idle_ttl(idle_ttl)
        .build()
        .unwrap()
}

fn texts(items: &[Item]) -> Vec<String> {
    items
        .iter()
        .map(|item| item.text().unwrap_or_default())
        .collect()
}

#[tokio::test]
async fn many_idle_threads_leave_memory_and_each_touched_again_resumes_its_own_history() {
    let db = temp_db();
    // An idle TTL of zero: the harness's keeper evicts each thread as soon as its turn ends, while
    // the next threads run, as a long-running host would.
    let first = harness(SqliteStorage::open(&db.path).await.unwrap(), Duration::ZERO);
    for n in 0..THREADS {
        let thread = format!("thread-{n}");
        first
            .execute(
                format!("user {n}"),
                ExecuteOptions::new().thread_id(&thread),
            )
            .await
            .unwrap();
        let response = first.agent_response(Scope::thread(&thread)).await.unwrap();
        assert_eq!(response.text, format!("hello, user {n}"));
    }
    first.evict_idle_sessions(Duration::ZERO).await;
    assert_eq!(first.session_count(), 0, "every idle thread left memory");

    // Touching a tenth of them again reads each back from the file, with its own first turn.
    for n in (0..THREADS).step_by(10) {
        let thread = format!("thread-{n}");
        first
            .execute(
                format!("again {n}"),
                ExecuteOptions::new().thread_id(&thread),
            )
            .await
            .unwrap();
        let response = first.agent_response(Scope::thread(&thread)).await.unwrap();
        assert_eq!(response.text, format!("hello, user {n} + again {n}"));
        assert_eq!(
            texts(&response.items),
            [
                format!("user {n}"),
                format!("hello, user {n}"),
                format!("again {n}"),
                format!("hello, user {n} + again {n}"),
            ]
        );
    }
    first.evict_idle_sessions(Duration::ZERO).await;
    assert_eq!(first.session_count(), 0);
    drop(first);

    // Another harness on the file (the evicted threads' leases were released) sees the same threads.
    let second = harness(
        SqliteStorage::open(&db.path).await.unwrap(),
        Duration::from_secs(600),
    );
    for n in [0, 1, THREADS - 1] {
        let thread = format!("thread-{n}");
        second.load_thread(&thread).await.unwrap();
        let history = texts(&second.session_history(Scope::thread(&thread)));
        let expected_len = if n % 10 == 0 { 4 } else { 2 };
        assert_eq!(history.len(), expected_len, "{thread}: {history:?}");
        assert_eq!(history[1], format!("hello, user {n}"));
    }
    assert_eq!(second.session_count(), 3);
}
