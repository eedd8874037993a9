//! Layer state: scoped keys over the storage adapter, persisted by one harness and read by another.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;
use noetic_core::{
    AgentHarness, Context, ContextLayer, ContextOptions, InMemoryStorage, LayerCtx, LayerScope,
    Outcome, Result, StorageAdapter, run_code,
};

/// Counts executions per resource: loads the count in `init`, saves count + 1 in `on_complete`.
#[derive(Default)]
struct Visits {
    seen: Mutex<Vec<u64>>,
}

impl ContextLayer for Visits {
    fn id(&self) -> &str {
        "visits"
    }

    fn init<'a>(&'a self, ctx: LayerCtx<'a>) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let count: u64 = ctx
                .state_get(LayerScope::Resource, "count")
                .await?
                .unwrap_or(0);
            self.seen.lock().unwrap().push(count);
            Ok(())
        })
    }

    fn on_complete<'a>(
        &'a self,
        ctx: LayerCtx<'a>,
        _outcome: Outcome,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let count = self.seen.lock().unwrap().last().copied().unwrap_or(0);
            ctx.state_set(LayerScope::Resource, "count", &(count + 1))
                .await
        })
    }
}

fn harness(storage: &Arc<InMemoryStorage>, layer: &Arc<Visits>) -> AgentHarness {
    let layer: Arc<dyn ContextLayer> = layer.clone();
    AgentHarness::builder("state")
        .storage(storage.clone())
        .context_layers([layer])
        .build()
        .unwrap()
}

async fn run_once(harness: &AgentHarness) {
    let step = run_code("noop", |n: u32, _: Context| async move {
        Ok::<_, Infallible>(n)
    })
    .build();
    let ctx = harness.create_context(ContextOptions::new().resource_id("user-1"));
    harness.run(&step, 0, &ctx).await.unwrap();
    harness.close_context(&ctx).await;
}

#[tokio::test]
async fn state_written_by_one_harness_is_read_by_another_on_the_same_storage() {
    let storage = Arc::new(InMemoryStorage::new());
    let first = Arc::new(Visits::default());
    run_once(&harness(&storage, &first)).await;
    assert_eq!(*first.seen.lock().unwrap(), [0]);
    assert_eq!(
        storage.list("layer/visits/").await.unwrap(),
        ["layer/visits/user-1/count"]
    );

    let second = Arc::new(Visits::default());
    let other = harness(&storage, &second);
    run_once(&other).await;
    run_once(&other).await;
    assert_eq!(*second.seen.lock().unwrap(), [1, 2]);
    assert_eq!(
        storage.get("layer/visits/user-1/count").await.unwrap(),
        Some(b"3".to_vec())
    );
}

#[tokio::test]
async fn scope_keys_follow_the_context() {
    let harness = AgentHarness::builder("keys").build().unwrap();
    let ctx = harness.create_context(ContextOptions::new().thread_id("t-1").resource_id("r-1"));
    let layer = LayerCtx::new(&ctx, "memo");
    assert_eq!(
        layer.state_key(LayerScope::Execution, "k"),
        format!("layer/memo/{}/k", ctx.id())
    );
    assert_eq!(layer.state_key(LayerScope::Thread, "k"), "layer/memo/t-1/k");
    assert_eq!(
        layer.state_key(LayerScope::Resource, "k"),
        "layer/memo/r-1/k"
    );
    assert_eq!(
        layer.state_key(LayerScope::Global, "k"),
        "layer/memo/global/k"
    );

    layer
        .state_set(LayerScope::Thread, "k", &vec!["a", "b"])
        .await
        .unwrap();
    let read: Option<Vec<String>> = layer.state_get(LayerScope::Thread, "k").await.unwrap();
    assert_eq!(read.unwrap(), ["a", "b"]);
    layer.state_delete(LayerScope::Thread, "k").await.unwrap();
    let gone: Option<Vec<String>> = layer.state_get(LayerScope::Thread, "k").await.unwrap();
    assert!(gone.is_none());
    // The resource scope falls back to the thread when the context has no resource.
    let bare = harness.create_context(ContextOptions::new().thread_id("t-2"));
    assert_eq!(
        LayerCtx::new(&bare, "memo").state_key(LayerScope::Resource, "k"),
        "layer/memo/t-2/k"
    );
}
