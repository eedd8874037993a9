//! Context layers: hooks that shape what the model sees and gate what it does.
//!
//! A [`ContextLayer`] is a set of hooks, every one with a no-op default (the shape of tracing's `Layer`),
//! so a layer implements only what it needs and new hooks never break it. `Option<L>` is a layer (off
//! when `None`), and so is `Vec<L>` (its members in order), so layers can be switched off and stacked.
//!
//! The lifecycle, per context (an execution is a context's life, from its first run to its close):
//! - `init` once per context, before its first `run()` or its session turn (and for the layers a
//!   `spawn(..).layers(..)` or `with_context` attaches, on the context they run on); repeated runs
//!   never re-initialize;
//! - per `call_model` step: `recall` (slot order; the output goes into the request, before or after the
//!   history by [`Band`], never into the item log), `after_model_call` on each response (allow / deny /
//!   guide), `store` with the step's new items once its response is accepted;
//! - `on_item_append` for every item appended to the log; `before_tool_call` and `on_steer` at their
//!   points; `on_spawn` / `on_return` around a spawned child;
//! - `on_complete` then `dispose` when the context is closed: by
//!   [`AgentHarness::close_context`](crate::AgentHarness::close_context), at the end of its session turn,
//!   or at the end of the `spawn` / parallel path that made it (open descendants first, reverse slot
//!   order). A context dropped without being closed never completes its layers (async hooks cannot run
//!   on drop).
//!
//! Layer state lives in the harness's [`crate::adapter::StorageAdapter`] through [`LayerCtx::state_get`]
//! and [`LayerCtx::state_set`], keyed by [`LayerScope`].

mod budget;
pub mod builtin;
mod combinators;
pub(crate) mod lifecycle;
mod state;

pub use budget::{BudgetPlan, allocate_budget, estimate_tokens, fit_history, fit_items};
pub use state::{LayerCtx, LayerScope};

use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde_json::Value;

use crate::Result;
use crate::context::Context;
use crate::item::Item;
use crate::steer::{Steer, SteerDecision, SteerPoint};

/// The slot of a layer that does not choose one.
pub const DEFAULT_SLOT: i32 = 100;

/// A layer's verdict on a tool call or a model response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum LayerDecision {
    /// Let it run.
    #[default]
    Allow,
    /// Refuse it; for a tool call the model gets `Tool call denied: <guidance>`, for a model response
    /// the step fails with `STEERING_DENIED`.
    Deny {
        /// Why, for the model.
        guidance: Option<String>,
    },
    /// Redirect it; for a tool call the model gets `Tool call redirected: <guidance>`, for a model
    /// response the guidance is sent as a developer message and the model is asked again.
    Guide {
        /// What to do instead.
        guidance: String,
    },
}

/// Where a layer's recalled items go in the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Band {
    /// Before the history (stable context, cache friendly).
    #[default]
    BeforeHistory,
    /// After the history, closest to the model's next answer.
    AfterHistory,
}

/// How an execution ended, for [`ContextLayer::on_complete`]: the last run on the context (or the
/// session turn, or the spawned child's step), `Aborted` for an aborted context.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// The step tree returned an output.
    Success,
    /// It failed with an error other than cancellation.
    Failure,
    /// It was aborted (`CANCELLED`).
    Aborted,
}

/// What a layer's `recall` adds to a model request.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RecallLayerOutput {
    /// The layer's id.
    pub layer_id: String,
    /// The items to place in the request.
    pub items: Vec<Item>,
    /// Their estimated size in tokens.
    pub token_count: usize,
}

impl RecallLayerOutput {
    /// An output of `items`, with the token count estimated (JSON characters / 4, rounded up).
    pub fn new(layer_id: impl Into<String>, items: Vec<Item>) -> Self {
        let token_count = items.iter().map(estimate_tokens).sum();
        RecallLayerOutput {
            layer_id: layer_id.into(),
            items,
            token_count,
        }
    }

    /// An output of one developer message holding `text`.
    pub fn text(layer_id: impl Into<String>, text: impl Into<String>) -> Self {
        Self::new(layer_id, vec![Item::developer_text(text)])
    }
}

/// Tokens one layer contributed to the last model request.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LayerUsage {
    /// The layer's id.
    pub layer_id: String,
    /// The estimated tokens of the items it contributed (after any budget trimming).
    pub token_count: usize,
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

/// A context layer. Every hook has a no-op default. See the [module docs](self) for the lifecycle.
///
/// # Cancel safety
/// Hooks returning futures are awaited by the interpreter, which holds no lock across them. When a run
/// is dropped mid-hook, the rest of that hook never runs, and a context dropped without being closed
/// never gets `on_complete` / `dispose`: write state so that a half-run hook leaves it consistent.
pub trait ContextLayer: Send + Sync + 'static {
    /// The layer's id, unique within a context (and the namespace of its state).
    fn id(&self) -> &str;

    /// The layer's order: lower runs (and is placed) earlier; ties keep list order. Default 100.
    fn slot(&self) -> i32 {
        DEFAULT_SLOT
    }

    /// Where its recalled items go. Default [`Band::BeforeHistory`].
    fn band(&self) -> Band {
        Band::BeforeHistory
    }

    /// The tokens a budget reserves for it before sharing the rest. Default 0.
    fn min_tokens(&self) -> usize {
        0
    }

    /// Called once per context before the layer's first use on it (load state here); repeated runs on
    /// the context do not call it again until the context is closed.
    ///
    /// # Errors
    /// An error fails the run (or the `spawn` / `with_context` step that attached the layer) before
    /// its steps run.
    fn init<'a>(&'a self, _ctx: LayerCtx<'a>) -> BoxFuture<'a, Result<()>> {
        Box::pin(async { Ok(()) })
    }

    /// Shapes the conversation history a `call_model` step sends (the item log minus its system
    /// items, the step's input message included), before recall and any token budget. Called once per
    /// step, in slot order, each layer getting the previous one's result. `None` (the default) keeps
    /// the history as it is. The item log itself is never changed.
    fn project_history(&self, _items: &[Item]) -> Option<Vec<Item>> {
        None
    }

    /// Called once per `call_model` step with the step's input text; what it returns is placed in the
    /// request (not the item log).
    ///
    /// # Errors
    /// An error is logged and the layer is skipped for that step.
    fn recall<'a>(
        &'a self,
        _ctx: LayerCtx<'a>,
        _query: &'a str,
    ) -> BoxFuture<'a, Result<Option<RecallLayerOutput>>> {
        Box::pin(async { Ok(None) })
    }

    /// Called after a `call_model` step's response is accepted, with the items the step appended
    /// (its input message included).
    ///
    /// # Errors
    /// An error is logged only.
    fn store<'a>(
        &'a self,
        _ctx: LayerCtx<'a>,
        _new_items: &'a [Item],
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async { Ok(()) })
    }

    /// Called synchronously for every item appended to the context's log. Observe only.
    fn on_item_append(&self, _ctx: LayerCtx<'_>, _item: &Item) {}

    /// Called for each completed model response, before its items are stored. `Deny` fails the step
    /// with `STEERING_DENIED`; `Guide` sends the guidance and asks again (at most 3 times per step).
    fn after_model_call<'a>(
        &'a self,
        _ctx: LayerCtx<'a>,
        _response_items: &'a [Item],
    ) -> BoxFuture<'a, LayerDecision> {
        Box::pin(async { LayerDecision::Allow })
    }

    /// Whether this tool call must wait for a person's approval before it runs (see
    /// [`crate::AgentHarness::approve`]): asked for every call of a round, before any runs, so the
    /// round's other calls can run while it waits. Any layer saying `true` is enough. A cheap,
    /// side-effect-free check of the call itself (the layer's state is in `ctx`); `false` by default.
    /// `before_tool_call` still runs for an approved call, just before it runs.
    fn requires_approval(&self, _ctx: LayerCtx<'_>, _call: ToolCallView<'_>) -> bool {
        false
    }

    /// Called before each tool call of a model round, in layer order. The first `Deny` wins; `Guide`
    /// texts of several layers are joined.
    fn before_tool_call<'a>(
        &'a self,
        _ctx: LayerCtx<'a>,
        _call: ToolCallView<'a>,
    ) -> BoxFuture<'a, LayerDecision> {
        Box::pin(async { LayerDecision::Allow })
    }

    /// Called for each queued steering message at each steer point of a model call (after the
    /// harness's own `on_steer`). `None` leaves the decision to the next layer, then to the defaults.
    fn on_steer(
        &self,
        _ctx: LayerCtx<'_>,
        _steer: &Steer,
        _point: SteerPoint,
    ) -> Option<SteerDecision> {
        None
    }

    /// Called on the parent's layers when a `spawn` has created its child context.
    ///
    /// # Errors
    /// An error fails the spawn step.
    fn on_spawn<'a>(
        &'a self,
        _ctx: LayerCtx<'a>,
        _child: &'a Context,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async { Ok(()) })
    }

    /// Called on the parent's layers when a spawned child returned successfully.
    ///
    /// # Errors
    /// An error fails the spawn step.
    fn on_return<'a>(
        &'a self,
        _ctx: LayerCtx<'a>,
        _child: &'a Context,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async { Ok(()) })
    }

    /// Called once when the context is closed (`AgentHarness::close_context`, the end of a session
    /// turn, the end of the `spawn` that made the child), with how its execution ended.
    ///
    /// # Errors
    /// An error is logged only.
    fn on_complete<'a>(
        &'a self,
        _ctx: LayerCtx<'a>,
        _outcome: Outcome,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async { Ok(()) })
    }

    /// Called after `on_complete`, last: release what `init` acquired.
    fn dispose<'a>(&'a self, _ctx: LayerCtx<'a>) -> BoxFuture<'a, ()> {
        Box::pin(async {})
    }
}

/// The layers in slot order (stable: ties keep list order).
pub(crate) fn by_slot(layers: &[Arc<dyn ContextLayer>]) -> Vec<Arc<dyn ContextLayer>> {
    let mut sorted = layers.to_vec();
    sorted.sort_by_key(|layer| layer.slot());
    sorted
}

/// Runs `project_history` over the layers (in the order given), each on the previous one's result.
pub(crate) fn project_history(layers: &[Arc<dyn ContextLayer>], history: Vec<Item>) -> Vec<Item> {
    layers.iter().fold(history, |items, layer| {
        layer.project_history(&items).unwrap_or(items)
    })
}

/// Runs `before_tool_call` over the layers: the first `Deny` short-circuits, `Guide`s are joined.
pub(crate) async fn gate_tool_call(ctx: &Context, call: ToolCallView<'_>) -> LayerDecision {
    let mut guidance: Vec<String> = Vec::new();
    for layer in ctx.layers().iter() {
        match layer
            .before_tool_call(LayerCtx::new(ctx, layer.id()), call)
            .await
        {
            LayerDecision::Allow => {}
            deny @ LayerDecision::Deny { .. } => return deny,
            LayerDecision::Guide { guidance: text } => guidance.push(text),
        }
    }
    join_guidance(guidance)
}

/// Runs `after_model_call` over the layers in slot order: the first `Deny` short-circuits, `Guide`s
/// are joined.
pub(crate) async fn gate_response(
    ctx: &Context,
    layers: &[Arc<dyn ContextLayer>],
    items: &[Item],
) -> LayerDecision {
    let mut guidance: Vec<String> = Vec::new();
    for layer in layers {
        match layer
            .after_model_call(LayerCtx::new(ctx, layer.id()), items)
            .await
        {
            LayerDecision::Allow => {}
            deny @ LayerDecision::Deny { .. } => return deny,
            LayerDecision::Guide { guidance: text } => guidance.push(text),
        }
    }
    join_guidance(guidance)
}

fn join_guidance(guidance: Vec<String>) -> LayerDecision {
    if guidance.is_empty() {
        LayerDecision::Allow
    } else {
        LayerDecision::Guide {
            guidance: guidance.join("\n"),
        }
    }
}
