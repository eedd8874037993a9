//! The corrupt-rows section of the conformance suite: garbage written through the store's public API
//! under the keys the harness reads, each refused with its stable code naming the row, while every
//! other row still reads.

use std::convert::Infallible;

use noetic_core::adapter::durable::{Commit, DurableStore};
use noetic_core::{
    AgentHarness, ContextOptions, Error, ExecuteOptions, RestoreOptions, Scope, Step, call_model,
    run_code,
};
use serde_json::json;

use super::{ConformanceStore, StoreOpener, within};
use crate::{ScriptedModel, ScriptedResponse};

/// Garbage under the rows a harness reads is refused with a stable code naming the row, and every
/// other row still reads:
///
/// - an execution's `header` or `state` record that does not parse, an entry of its item log or of
///   its ledger that does not parse: `CHECKPOINT_CORRUPT` from `restore`, naming the key (a log entry
///   as `<log>#<seq>`); a header of schema version 99: `CHECKPOINT_SCHEMA_MISMATCH` naming 99; an
///   unknown execution: `CHECKPOINT_NOT_FOUND`; the other executions restore and resume;
/// - a thread record that does not parse: `CHECKPOINT_CORRUPT` from `execute`, naming it (nothing is
///   recorded); of schema version 99: `CHECKPOINT_SCHEMA_MISMATCH`; an entry of a thread's message log
///   that does not parse: `CHECKPOINT_CORRUPT` from `load_thread`, naming `<log>#<seq>`; other
///   threads run;
/// - a paid-call row (`paid/…`) that does not parse: `CHECKPOINT_CORRUPT` from `pending_spend` and
///   `settle_spend`, naming it; of schema version 99: `CHECKPOINT_SCHEMA_MISMATCH`;
/// - an approval row (`approval/<thread>/…`) that does not parse: `CHECKPOINT_CORRUPT` from
///   `pending_approvals` of its thread, naming it; other threads' approvals still list.
///
/// # Panics
/// When the store breaks the contract or fails.
///
/// # Cancel safety
/// Not meant to be cancelled: a dropped run leaves test data behind.
#[allow(clippy::unwrap_used)] // a test helper: a failure is a panic with the store's error
pub async fn corrupt_rows<S: ConformanceStore>(opener: &StoreOpener<S>) {
    let store = opener.open().await;
    executions(opener, &store).await;
    threads(opener, &store).await;
    paid_and_approval_rows(opener, &store).await;
}

/// The graph whose executions the section corrupts: doubles a number.
fn double() -> Step<i64, i64> {
    run_code(
        "double",
        |n: i64, _| async move { Ok::<_, Infallible>(n * 2) },
    )
    .build()
}

/// A harness on `store` whose agent graph doubles a number and whose model answers `fine`.
#[allow(clippy::unwrap_used)]
fn harness<S: ConformanceStore>(store: S) -> AgentHarness {
    let model = ScriptedModel::responding(|_| ScriptedResponse::text("fine"));
    AgentHarness::builder("corrupt")
        .provider("scripted", model)
        .agent_graph(double())
        .durable(store)
        .build()
        .unwrap()
}

/// A harness on `store` that chats on threads.
#[allow(clippy::unwrap_used)]
fn chat<S: ConformanceStore>(store: S) -> AgentHarness {
    let model = ScriptedModel::responding(|_| ScriptedResponse::text("fine"));
    AgentHarness::builder("corrupt-chat")
        .provider("scripted", model)
        .agent_graph(call_model("chat").model("scripted-model"))
        .durable(store)
        .build()
        .unwrap()
}

/// `Ok` when `id` restores and resumes to its output, else the error's code (after checking the
/// error names the execution).
async fn restore_code(harness: &AgentHarness, id: &str) -> Result<i64, String> {
    let named = |error: Error| {
        let message = error.to_string();
        assert!(message.contains(id), "the error names {id}: {message}");
        error.code().to_owned()
    };
    harness
        .restore(id, RestoreOptions::new())
        .await
        .map_err(named)?;
    harness.resume::<i64>(id).await.map_err(named)
}

/// Puts `bytes` under `key` (replacing the row).
#[allow(clippy::unwrap_used)]
async fn put(store: &dyn DurableStore, key: &str, bytes: &[u8]) {
    store
        .commit(Commit::new().put(key, bytes.to_vec()))
        .await
        .unwrap();
}

/// Appends `bytes` at the end of `log`; returns the entry's `<log>#<seq>`.
#[allow(clippy::unwrap_used)]
async fn append(store: &dyn DurableStore, log: &str, bytes: &[u8]) -> String {
    let seq = store.next_seq(log).await.unwrap();
    store
        .commit(Commit::new().append(log, seq, vec![bytes.to_vec()]))
        .await
        .unwrap();
    format!("{log}#{seq}")
}

/// Asserts `error` is `code` and names `key`.
fn assert_names(error: &Error, code: &str, key: &str) {
    assert_eq!(error.code(), code, "{key}: {error}");
    assert!(error.to_string().contains(key), "names `{key}`: {error}");
}

#[allow(clippy::unwrap_used)]
async fn executions<S: ConformanceStore>(opener: &StoreOpener<S>, store: &S) {
    let harness = harness(opener.open().await);
    let graph = double();
    let mut ids = Vec::new();
    for n in 1..=4 {
        let ctx = harness.create_context(ContextOptions::new());
        let doubled: i64 = within("a durable run", harness.run(&graph, n, &ctx))
            .await
            .unwrap();
        assert_eq!(doubled, n * 2);
        ctx.close().await;
        ids.push(ctx.id().to_owned());
    }
    let (rows, items, ledger, healthy) = (&ids[0], &ids[1], &ids[2], &ids[3]);
    assert_eq!(restore_code(&harness, healthy).await, Ok(8));
    assert_eq!(
        restore_code(&harness, "no-such-execution").await,
        Err("CHECKPOINT_NOT_FOUND".to_owned())
    );

    let header = store
        .record(&format!("exec/{rows}/header"))
        .await
        .unwrap()
        .expect("a durable run has a header row");
    for (key, bytes) in [
        (
            format!("exec/{rows}/state"),
            &b"{\"schema_version\": 1, \"item_c"[..],
        ),
        (
            format!("exec/{rows}/state"),
            &b"{\"schema_version\": 1, \"item_count\": \"many\"}"[..],
        ),
        (format!("exec/{rows}/header"), &b"not json"[..]),
    ] {
        put(store, &key, bytes).await;
        let error = harness
            .restore(rows, RestoreOptions::new())
            .await
            .unwrap_err();
        assert_names(&error, "CHECKPOINT_CORRUPT", &key);
        assert_eq!(restore_code(&harness, healthy).await, Ok(8), "after {key}");
    }
    let mut newer: serde_json::Value = serde_json::from_slice(&header).unwrap();
    newer["schema_version"] = 99.into();
    put(
        store,
        &format!("exec/{rows}/header"),
        newer.to_string().as_bytes(),
    )
    .await;
    let error = harness
        .restore(rows, RestoreOptions::new())
        .await
        .unwrap_err();
    assert_eq!(error.code(), "CHECKPOINT_SCHEMA_MISMATCH", "{error}");
    assert!(error.to_string().contains("99"), "{error}");

    let entry = append(store, &format!("exec/{items}/items"), b"{\"type\": 7}").await;
    let error = harness
        .restore(items, RestoreOptions::new())
        .await
        .unwrap_err();
    assert_names(&error, "CHECKPOINT_CORRUPT", &entry);
    let entry = append(store, &format!("exec/{ledger}/ledger"), b"[1, 2").await;
    let error = harness
        .restore(ledger, RestoreOptions::new())
        .await
        .unwrap_err();
    assert_names(&error, "CHECKPOINT_CORRUPT", &entry);

    // A harness on a new handle: the healthy execution still restores.
    let again = self::harness(opener.open().await);
    assert_eq!(restore_code(&again, healthy).await, Ok(8));
}

#[allow(clippy::unwrap_used)]
async fn threads<S: ConformanceStore>(opener: &StoreOpener<S>, store: &S) {
    put(store, "thread/bad/record", b"{not json").await;
    put(
        store,
        "thread/newer/record",
        json!({"schema_version": 99}).to_string().as_bytes(),
    )
    .await;
    let harness = chat(opener.open().await);
    let on = |thread: &str| ExecuteOptions::new().thread_id(thread);
    let error = harness.execute("hi", on("bad")).await.unwrap_err();
    assert_names(&error, "CHECKPOINT_CORRUPT", "thread/bad/record");
    let error = harness.execute("hi", on("newer")).await.unwrap_err();
    assert_eq!(error.code(), "CHECKPOINT_SCHEMA_MISMATCH", "{error}");
    assert_eq!(
        store.record("thread/bad/record").await.unwrap().unwrap(),
        b"{not json",
        "nothing was recorded over the corrupt row"
    );
    assert_eq!(store.next_seq("thread/bad/messages").await.unwrap(), 0);

    // A thread whose message log has an entry that does not parse.
    harness.execute("hello", on("logged")).await.unwrap();
    let response = within(
        "the answer on a healthy thread",
        harness.agent_response(Scope::thread("logged")),
    )
    .await
    .unwrap();
    assert_eq!(response.text, "fine");
    within("the thread going idle", harness.wait_idle()).await;
    harness.evict_idle_sessions(std::time::Duration::ZERO).await;
    drop(harness);
    let entry = append(store, "thread/logged/messages", b"[\"not a message\"]").await;
    let harness = chat(opener.open().await);
    let error = harness.load_thread("logged").await.unwrap_err();
    assert_names(&error, "CHECKPOINT_CORRUPT", &entry);

    // Another thread is unaffected.
    harness.execute("hello", on("other")).await.unwrap();
    let response = within(
        "the answer on another thread",
        harness.agent_response(Scope::thread("other")),
    )
    .await
    .unwrap();
    assert_eq!(response.text, "fine");
}

#[allow(clippy::unwrap_used)]
async fn paid_and_approval_rows<S: ConformanceStore>(opener: &StoreOpener<S>, store: &S) {
    let harness = chat(opener.open().await);
    assert!(harness.pending_spend().await.unwrap().is_empty());
    put(store, "paid/garbage", b"not json").await;
    assert_names(
        &harness.pending_spend().await.unwrap_err(),
        "CHECKPOINT_CORRUPT",
        "paid/garbage",
    );
    assert_names(
        &harness.settle_spend("garbage", None).await.unwrap_err(),
        "CHECKPOINT_CORRUPT",
        "paid/garbage",
    );
    store
        .commit(Commit::new().delete("paid/garbage"))
        .await
        .unwrap();
    put(
        store,
        "paid/newer",
        json!({"schema_version": 99}).to_string().as_bytes(),
    )
    .await;
    let error = harness.pending_spend().await.unwrap_err();
    assert_eq!(error.code(), "CHECKPOINT_SCHEMA_MISMATCH", "{error}");
    store
        .commit(Commit::new().delete("paid/newer"))
        .await
        .unwrap();
    assert!(harness.pending_spend().await.unwrap().is_empty());

    put(store, "approval/gated/garbage", b"{\"v\": 1, \"request\"").await;
    assert_names(
        &harness
            .pending_approvals(Scope::thread("gated"))
            .await
            .unwrap_err(),
        "CHECKPOINT_CORRUPT",
        "approval/gated/garbage",
    );
    assert!(
        harness
            .pending_approvals(Scope::thread("other"))
            .await
            .unwrap()
            .is_empty(),
        "another thread's approvals still list"
    );
}
