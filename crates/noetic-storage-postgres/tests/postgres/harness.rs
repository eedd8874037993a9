//! A durable harness on PostgreSQL: a thread's turn is recorded, and a second harness on the same
//! database (another host, after the first is gone) reads the thread back and continues it.

#![allow(clippy::unwrap_used)] // a test: a failure is a panic

use std::time::Duration;

use noetic_core::adapter::durable::DurableStore;
use noetic_core::{AgentHarness, ExecuteOptions, Item, Scope, call_model};
use noetic_storage_postgres::{LeaseClock, PostgresStorage};
use noetic_test_support::{ScriptedModel, ScriptedResponse, test_database_or_skip};

use crate::support::store;

fn harness(store: PostgresStorage) -> AgentHarness {
    let model = ScriptedModel::responding(|request| {
        ScriptedResponse::text(&format!("hello, {}", request.user_texts().join(" + ")))
    });
    AgentHarness::builder("postgres")
        .provider("scripted", model)
        .agent_graph(
            call_model("chat")
                .model("scripted-model")
                .instructions("Greet."),
        )
        .durable(store)
        .session_idle_ttl(Duration::from_secs(600))
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
async fn a_thread_recorded_on_postgres_is_read_back_and_continued_by_a_second_harness() {
    let db = test_database_or_skip!();
    // The database's clock decides the thread's lease (the default).
    let first = harness(store(&db, LeaseClock::Database).await);
    first
        .execute("ada", ExecuteOptions::new().thread_id("t"))
        .await
        .unwrap();
    let response = first.agent_response(Scope::thread("t")).await.unwrap();
    assert_eq!(response.text, "hello, ada");

    // The turn is in the database: the thread's message log, its history and its lease.
    let check = store(&db, LeaseClock::Database).await;
    let messages = check.read_log("thread/t/messages", 0).await.unwrap();
    assert_eq!(messages.len(), 1, "the accepted message is recorded");
    let lease = check
        .lease("thread/t")
        .await
        .unwrap()
        .expect("the thread's lease");
    assert!(lease.epoch >= 1);

    // The first host lets its threads go and stops.
    assert_eq!(first.release_idle_sessions().await, 1);
    drop(first);

    let second = harness(store(&db, LeaseClock::Database).await);
    second.load_thread("t").await.unwrap();
    assert_eq!(
        texts(&second.session_history(Scope::thread("t"))),
        ["ada", "hello, ada"],
        "the second harness reads the first's turn back"
    );
    second
        .execute("grace", ExecuteOptions::new().thread_id("t"))
        .await
        .unwrap();
    let response = second.agent_response(Scope::thread("t")).await.unwrap();
    assert_eq!(response.text, "hello, ada + grace");
    assert_eq!(
        texts(&response.items),
        ["ada", "hello, ada", "grace", "hello, ada + grace"]
    );
    assert_eq!(
        check.read_log("thread/t/messages", 0).await.unwrap().len(),
        2
    );
    let taken = check.lease("thread/t").await.unwrap().unwrap();
    assert!(
        taken.epoch > lease.epoch,
        "the second host took the lease over"
    );
}
