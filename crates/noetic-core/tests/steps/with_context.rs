//! `with_context`: the same context with extra or replaced layers for the child's duration.

use std::sync::Arc;

use noetic_core::{Context, ContextLayer, ContextOptions, Error, run_code, with_context};

use crate::support::harness;

struct Named(&'static str);

impl ContextLayer for Named {
    fn id(&self) -> &str {
        self.0
    }
}

fn layer(id: &'static str) -> Arc<dyn ContextLayer> {
    Arc::new(Named(id))
}

fn layer_ids(ctx: &Context) -> Vec<String> {
    ctx.layers()
        .iter()
        .map(|layer| layer.id().to_owned())
        .collect()
}

#[tokio::test]
async fn the_child_sees_the_merged_layers_on_the_same_context_and_they_are_restored() {
    let harness = harness();
    let ctx =
        harness.create_context(ContextOptions::new().layers(vec![layer("memory"), layer("audit")]));
    let probe = run_code("probe", |_: (), ctx: Context| async move {
        ctx.append_item(noetic_core::Item::user_text("written inside"));
        Ok::<_, std::convert::Infallible>((ctx.id().to_owned(), layer_ids(&ctx)))
    });
    let step = with_context("scoped", probe, vec![layer("memory"), layer("notes")]);
    let (id, ids) = harness.run(&step, (), &ctx).await.unwrap();
    assert_eq!(id, ctx.id(), "the same context, not a child");
    assert_eq!(
        ids,
        ["audit", "memory", "notes"],
        "same-id layers are replaced, given ones appended"
    );
    assert_eq!(layer_ids(&ctx), ["memory", "audit"], "restored afterwards");
    assert_eq!(ctx.item_count(), 1, "the child wrote to the same item log");
}

#[tokio::test]
async fn layers_are_restored_when_the_child_fails() {
    let harness = harness();
    let ctx = harness.create_context(ContextOptions::new().layers(vec![layer("memory")]));
    let failing = run_code("fail", |_: (), _ctx: Context| async move {
        Err::<(), _>(std::io::Error::other("boom"))
    });
    let error = harness
        .run(
            &with_context("scoped", failing, vec![layer("extra")]),
            (),
            &ctx,
        )
        .await
        .unwrap_err();
    assert!(matches!(error, Error::StepFailed { .. }));
    assert_eq!(layer_ids(&ctx), ["memory"]);
}
