//! [`ContextLayer`] for `Arc<L>` (forwarding), `Option<L>` (off when `None`) and `Vec<L>` (a stack).

use std::sync::Arc;

use futures_util::future::BoxFuture;

use super::{
    Band, ContextLayer, DEFAULT_SLOT, LayerCtx, LayerDecision, Outcome, RecallLayerOutput,
    ToolCallView,
};
use crate::Result;
use crate::context::Context;
use crate::item::Item;
use crate::steer::{Steer, SteerDecision, SteerPoint};

/// The id of a `None` layer and of an empty stack.
const NO_LAYER: &str = "none";

impl<L: ContextLayer + ?Sized> ContextLayer for Arc<L> {
    fn id(&self) -> &str {
        (**self).id()
    }

    fn slot(&self) -> i32 {
        (**self).slot()
    }

    fn band(&self) -> Band {
        (**self).band()
    }

    fn min_tokens(&self) -> usize {
        (**self).min_tokens()
    }

    fn project_history(&self, items: &[Item]) -> Option<Vec<Item>> {
        (**self).project_history(items)
    }

    fn init<'a>(&'a self, ctx: LayerCtx<'a>) -> BoxFuture<'a, Result<()>> {
        (**self).init(ctx)
    }

    fn recall<'a>(
        &'a self,
        ctx: LayerCtx<'a>,
        query: &'a str,
    ) -> BoxFuture<'a, Result<Option<RecallLayerOutput>>> {
        (**self).recall(ctx, query)
    }

    fn store<'a>(&'a self, ctx: LayerCtx<'a>, new_items: &'a [Item]) -> BoxFuture<'a, Result<()>> {
        (**self).store(ctx, new_items)
    }

    fn on_item_append(&self, ctx: LayerCtx<'_>, item: &Item) {
        (**self).on_item_append(ctx, item)
    }

    fn after_model_call<'a>(
        &'a self,
        ctx: LayerCtx<'a>,
        response_items: &'a [Item],
    ) -> BoxFuture<'a, LayerDecision> {
        (**self).after_model_call(ctx, response_items)
    }

    fn before_tool_call<'a>(
        &'a self,
        ctx: LayerCtx<'a>,
        call: ToolCallView<'a>,
    ) -> BoxFuture<'a, LayerDecision> {
        (**self).before_tool_call(ctx, call)
    }

    fn on_steer(
        &self,
        ctx: LayerCtx<'_>,
        steer: &Steer,
        point: SteerPoint,
    ) -> Option<SteerDecision> {
        (**self).on_steer(ctx, steer, point)
    }

    fn on_spawn<'a>(&'a self, ctx: LayerCtx<'a>, child: &'a Context) -> BoxFuture<'a, Result<()>> {
        (**self).on_spawn(ctx, child)
    }

    fn on_return<'a>(&'a self, ctx: LayerCtx<'a>, child: &'a Context) -> BoxFuture<'a, Result<()>> {
        (**self).on_return(ctx, child)
    }

    fn on_complete<'a>(&'a self, ctx: LayerCtx<'a>, outcome: Outcome) -> BoxFuture<'a, Result<()>> {
        (**self).on_complete(ctx, outcome)
    }

    fn dispose<'a>(&'a self, ctx: LayerCtx<'a>) -> BoxFuture<'a, ()> {
        (**self).dispose(ctx)
    }
}

/// `Some(layer)` is the layer; `None` is a layer whose every hook is a no-op (id `none`).
impl<L: ContextLayer> ContextLayer for Option<L> {
    fn id(&self) -> &str {
        self.as_ref().map_or(NO_LAYER, ContextLayer::id)
    }

    fn slot(&self) -> i32 {
        self.as_ref().map_or(DEFAULT_SLOT, ContextLayer::slot)
    }

    fn band(&self) -> Band {
        self.as_ref()
            .map_or(Band::BeforeHistory, ContextLayer::band)
    }

    fn min_tokens(&self) -> usize {
        self.as_ref().map_or(0, ContextLayer::min_tokens)
    }

    fn project_history(&self, items: &[Item]) -> Option<Vec<Item>> {
        self.as_ref().and_then(|layer| layer.project_history(items))
    }

    fn init<'a>(&'a self, ctx: LayerCtx<'a>) -> BoxFuture<'a, Result<()>> {
        match self {
            Some(layer) => layer.init(ctx),
            None => Box::pin(async { Ok(()) }),
        }
    }

    fn recall<'a>(
        &'a self,
        ctx: LayerCtx<'a>,
        query: &'a str,
    ) -> BoxFuture<'a, Result<Option<RecallLayerOutput>>> {
        match self {
            Some(layer) => layer.recall(ctx, query),
            None => Box::pin(async { Ok(None) }),
        }
    }

    fn store<'a>(&'a self, ctx: LayerCtx<'a>, new_items: &'a [Item]) -> BoxFuture<'a, Result<()>> {
        match self {
            Some(layer) => layer.store(ctx, new_items),
            None => Box::pin(async { Ok(()) }),
        }
    }

    fn on_item_append(&self, ctx: LayerCtx<'_>, item: &Item) {
        if let Some(layer) = self {
            layer.on_item_append(ctx, item);
        }
    }

    fn after_model_call<'a>(
        &'a self,
        ctx: LayerCtx<'a>,
        response_items: &'a [Item],
    ) -> BoxFuture<'a, LayerDecision> {
        match self {
            Some(layer) => layer.after_model_call(ctx, response_items),
            None => Box::pin(async { LayerDecision::Allow }),
        }
    }

    fn before_tool_call<'a>(
        &'a self,
        ctx: LayerCtx<'a>,
        call: ToolCallView<'a>,
    ) -> BoxFuture<'a, LayerDecision> {
        match self {
            Some(layer) => layer.before_tool_call(ctx, call),
            None => Box::pin(async { LayerDecision::Allow }),
        }
    }

    fn on_steer(
        &self,
        ctx: LayerCtx<'_>,
        steer: &Steer,
        point: SteerPoint,
    ) -> Option<SteerDecision> {
        self.as_ref()
            .and_then(|layer| layer.on_steer(ctx, steer, point))
    }

    fn on_spawn<'a>(&'a self, ctx: LayerCtx<'a>, child: &'a Context) -> BoxFuture<'a, Result<()>> {
        match self {
            Some(layer) => layer.on_spawn(ctx, child),
            None => Box::pin(async { Ok(()) }),
        }
    }

    fn on_return<'a>(&'a self, ctx: LayerCtx<'a>, child: &'a Context) -> BoxFuture<'a, Result<()>> {
        match self {
            Some(layer) => layer.on_return(ctx, child),
            None => Box::pin(async { Ok(()) }),
        }
    }

    fn on_complete<'a>(&'a self, ctx: LayerCtx<'a>, outcome: Outcome) -> BoxFuture<'a, Result<()>> {
        match self {
            Some(layer) => layer.on_complete(ctx, outcome),
            None => Box::pin(async { Ok(()) }),
        }
    }

    fn dispose<'a>(&'a self, ctx: LayerCtx<'a>) -> BoxFuture<'a, ()> {
        match self {
            Some(layer) => layer.dispose(ctx),
            None => Box::pin(async {}),
        }
    }
}

/// A stack: every hook forwards to each member in order (`dispose` in reverse), each member with its
/// own id (so its own state namespace). The stack's id, slot and band are its first member's (`id`
/// returns a borrowed `&str`, so it cannot be a joined name); `min_tokens` is the members' sum; `recall`
/// concatenates the members' outputs; `project_history` chains the members in order; gates combine as
/// across layers (first deny wins, guides joined).
impl<L: ContextLayer> ContextLayer for Vec<L> {
    fn id(&self) -> &str {
        self.first().map_or(NO_LAYER, ContextLayer::id)
    }

    fn slot(&self) -> i32 {
        self.first().map_or(DEFAULT_SLOT, ContextLayer::slot)
    }

    fn band(&self) -> Band {
        self.first().map_or(Band::BeforeHistory, ContextLayer::band)
    }

    fn min_tokens(&self) -> usize {
        self.iter().map(ContextLayer::min_tokens).sum()
    }

    fn project_history(&self, items: &[Item]) -> Option<Vec<Item>> {
        let mut projected: Option<Vec<Item>> = None;
        for layer in self {
            let current = projected.as_deref().unwrap_or(items);
            if let Some(next) = layer.project_history(current) {
                projected = Some(next);
            }
        }
        projected
    }

    fn init<'a>(&'a self, ctx: LayerCtx<'a>) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            for layer in self {
                layer.init(LayerCtx::new(ctx.context(), layer.id())).await?;
            }
            Ok(())
        })
    }

    fn recall<'a>(
        &'a self,
        ctx: LayerCtx<'a>,
        query: &'a str,
    ) -> BoxFuture<'a, Result<Option<RecallLayerOutput>>> {
        Box::pin(async move {
            let mut items = Vec::new();
            let mut token_count = 0;
            let mut any = false;
            for layer in self {
                if let Some(output) = layer
                    .recall(LayerCtx::new(ctx.context(), layer.id()), query)
                    .await?
                {
                    any = true;
                    token_count += output.token_count;
                    items.extend(output.items);
                }
            }
            Ok(any.then(|| RecallLayerOutput {
                layer_id: self.id().to_owned(),
                items,
                token_count,
            }))
        })
    }

    fn store<'a>(&'a self, ctx: LayerCtx<'a>, new_items: &'a [Item]) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            for layer in self {
                layer
                    .store(LayerCtx::new(ctx.context(), layer.id()), new_items)
                    .await?;
            }
            Ok(())
        })
    }

    fn on_item_append(&self, ctx: LayerCtx<'_>, item: &Item) {
        for layer in self {
            layer.on_item_append(LayerCtx::new(ctx.context(), layer.id()), item);
        }
    }

    fn after_model_call<'a>(
        &'a self,
        ctx: LayerCtx<'a>,
        response_items: &'a [Item],
    ) -> BoxFuture<'a, LayerDecision> {
        Box::pin(async move {
            let mut guidance = Vec::new();
            for layer in self {
                match layer
                    .after_model_call(LayerCtx::new(ctx.context(), layer.id()), response_items)
                    .await
                {
                    LayerDecision::Allow => {}
                    deny @ LayerDecision::Deny { .. } => return deny,
                    LayerDecision::Guide { guidance: text } => guidance.push(text),
                }
            }
            super::join_guidance(guidance)
        })
    }

    fn before_tool_call<'a>(
        &'a self,
        ctx: LayerCtx<'a>,
        call: ToolCallView<'a>,
    ) -> BoxFuture<'a, LayerDecision> {
        Box::pin(async move {
            let mut guidance = Vec::new();
            for layer in self {
                match layer
                    .before_tool_call(LayerCtx::new(ctx.context(), layer.id()), call)
                    .await
                {
                    LayerDecision::Allow => {}
                    deny @ LayerDecision::Deny { .. } => return deny,
                    LayerDecision::Guide { guidance: text } => guidance.push(text),
                }
            }
            super::join_guidance(guidance)
        })
    }

    fn on_steer(
        &self,
        ctx: LayerCtx<'_>,
        steer: &Steer,
        point: SteerPoint,
    ) -> Option<SteerDecision> {
        self.iter().find_map(|layer| {
            layer.on_steer(LayerCtx::new(ctx.context(), layer.id()), steer, point)
        })
    }

    fn on_spawn<'a>(&'a self, ctx: LayerCtx<'a>, child: &'a Context) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            for layer in self {
                layer
                    .on_spawn(LayerCtx::new(ctx.context(), layer.id()), child)
                    .await?;
            }
            Ok(())
        })
    }

    fn on_return<'a>(&'a self, ctx: LayerCtx<'a>, child: &'a Context) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            for layer in self {
                layer
                    .on_return(LayerCtx::new(ctx.context(), layer.id()), child)
                    .await?;
            }
            Ok(())
        })
    }

    fn on_complete<'a>(&'a self, ctx: LayerCtx<'a>, outcome: Outcome) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            for layer in self {
                layer
                    .on_complete(LayerCtx::new(ctx.context(), layer.id()), outcome)
                    .await?;
            }
            Ok(())
        })
    }

    fn dispose<'a>(&'a self, ctx: LayerCtx<'a>) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            for layer in self.iter().rev() {
                layer
                    .dispose(LayerCtx::new(ctx.context(), layer.id()))
                    .await;
            }
        })
    }
}
