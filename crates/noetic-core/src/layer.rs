//! Context layers: hooks that shape what the model sees and gate what it does.
//!
//! This module holds the [`ContextLayer`] trait with the hooks the interpreter calls today
//! (`before_tool_call`, `on_steer`); every hook has a no-op default, so layers implement only what they need and new
//! hooks can be added without breaking them. Layers are ordered; a context inherits its parent's layers
//! unless a spawn replaces them.

use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde_json::Value;

use crate::context::Context;
use crate::session::{Steer, SteerDecision, SteerPoint};

/// A layer's verdict on a tool call.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum LayerDecision {
    /// Let it run.
    #[default]
    Allow,
    /// Refuse it; the model gets `Tool call denied: <guidance>`.
    Deny {
        /// Why, for the model.
        guidance: Option<String>,
    },
    /// Redirect it; the model gets `Tool call redirected: <guidance>`.
    Guide {
        /// What to do instead.
        guidance: String,
    },
}

/// A tool call as a layer sees it before it runs (arguments parsed, not yet validated).
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct ToolCallView<'a> {
    /// The tool's name.
    pub name: &'a str,
    /// The call id.
    pub call_id: &'a str,
    /// The parsed arguments.
    pub arguments: &'a Value,
}

/// A context layer. Every hook has a no-op default.
pub trait ContextLayer: Send + Sync + 'static {
    /// The layer's id, unique within a context.
    fn id(&self) -> &str;

    /// Called before each tool call of a model round, in layer order. The first `Deny` wins; `Guide`
    /// texts of several layers are joined.
    fn before_tool_call<'a>(
        &'a self,
        _call: ToolCallView<'a>,
        _ctx: &'a Context,
    ) -> BoxFuture<'a, LayerDecision> {
        Box::pin(async { LayerDecision::Allow })
    }

    /// Called for each queued steering message at each steer point of a model call (after the
    /// harness's own `on_steer`). `None` leaves the decision to the next layer, then to the defaults.
    fn on_steer(
        &self,
        _steer: &Steer,
        _point: SteerPoint,
        _ctx: &Context,
    ) -> Option<SteerDecision> {
        None
    }
}

impl<L: ContextLayer + ?Sized> ContextLayer for Arc<L> {
    fn id(&self) -> &str {
        (**self).id()
    }

    fn before_tool_call<'a>(
        &'a self,
        call: ToolCallView<'a>,
        ctx: &'a Context,
    ) -> BoxFuture<'a, LayerDecision> {
        (**self).before_tool_call(call, ctx)
    }

    fn on_steer(&self, steer: &Steer, point: SteerPoint, ctx: &Context) -> Option<SteerDecision> {
        (**self).on_steer(steer, point, ctx)
    }
}

/// Runs `before_tool_call` over the layers: the first `Deny` short-circuits, `Guide`s are joined.
pub(crate) async fn gate_tool_call(ctx: &Context, call: ToolCallView<'_>) -> LayerDecision {
    let mut guidance: Vec<String> = Vec::new();
    for layer in ctx.layers().iter() {
        match layer.before_tool_call(call, ctx).await {
            LayerDecision::Allow => {}
            deny @ LayerDecision::Deny { .. } => return deny,
            LayerDecision::Guide { guidance: text } => guidance.push(text),
        }
    }
    if guidance.is_empty() {
        LayerDecision::Allow
    } else {
        LayerDecision::Guide {
            guidance: guidance.join("\n"),
        }
    }
}
