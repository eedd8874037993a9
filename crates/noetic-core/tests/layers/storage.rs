//! The storage adapter: the conformance suite on the in-memory default and through forwarding impls;
//! the durable-store conformance suite on the in-memory `KvDurableStore`.

use std::sync::Arc;

use noetic_core::{AgentHarness, InMemoryStorage, StorageAdapter};
use noetic_test_support::storage_conformance;

#[tokio::test]
async fn in_memory_storage_passes_the_conformance_suite() {
    storage_conformance(&InMemoryStorage::new()).await;
}

#[tokio::test]
async fn arc_and_box_forward_to_the_adapter() {
    let shared = Arc::new(InMemoryStorage::new());
    storage_conformance(&shared.clone()).await;
    assert!(!shared.is_empty(), "the suite wrote through the Arc");
    let boxed: Box<dyn StorageAdapter> = Box::new(InMemoryStorage::new());
    storage_conformance(&boxed).await;
}

#[tokio::test]
async fn the_harness_defaults_to_in_memory_storage_and_takes_a_shared_one() {
    let harness = AgentHarness::builder("storage").build().unwrap();
    harness.storage().set("k", b"v".to_vec()).await.unwrap();
    assert_eq!(
        harness.storage().get("k").await.unwrap(),
        Some(b"v".to_vec())
    );

    let shared = Arc::new(InMemoryStorage::new());
    let first = AgentHarness::builder("a")
        .storage(shared.clone())
        .build()
        .unwrap();
    let second = AgentHarness::builder("b")
        .storage(shared.clone())
        .build()
        .unwrap();
    first.storage().set("shared", b"1".to_vec()).await.unwrap();
    assert_eq!(
        second.storage().get("shared").await.unwrap(),
        Some(b"1".to_vec())
    );
}

/// The durable-store suite, one test per section, each on a fresh in-memory store; every handle a
/// section opens (a "restarted" harness's) is the same store.
mod kv_durable {
    use std::sync::Arc;

    use noetic_core::KvDurableStore;
    use noetic_test_support::conformance::StoreOpener;

    noetic_test_support::durable_store_conformance!({
        (
            StoreOpener::shared(Arc::new(KvDurableStore::in_memory())),
            (),
        )
    });
}

#[tokio::test]
async fn the_kv_durable_store_passes_the_store_sections_one_after_another_and_through_a_box() {
    noetic_test_support::durable_conformance(&noetic_core::KvDurableStore::in_memory()).await;
    let boxed: Box<dyn noetic_core::adapter::DurableStore> =
        Box::new(noetic_core::KvDurableStore::in_memory());
    noetic_test_support::durable_conformance(&boxed).await;
}

#[tokio::test]
async fn the_kv_durable_store_over_a_shared_adapter_passes_both_suites() {
    let shared = Arc::new(InMemoryStorage::new());
    let store = noetic_core::KvDurableStore::new(shared.clone());
    noetic_test_support::durable_conformance(&store).await;
    // Its own keys live under `durable/`, so the key-value suite sees a store it can share.
    storage_conformance(&store).await;
}
