//! The layer lifecycle of a context: `init` once per (context, layer), `on_complete` + `dispose` once,
//! when the context is closed.
//!
//! Each context carries its own bookkeeping ([`LayerLife`]): the layers initialized on it and not yet
//! completed, the descendants that have layers of their own to complete, and how the last run on it
//! ended. `run()` initializes what is new and records the outcome; it completes nothing, so repeated
//! runs on one context never re-initialize. [`close`] completes a context: first its open descendants
//! (the latest first), then its own layers (`on_complete` in reverse slot order, then `dispose` in the
//! same order). It is the one teardown every ending goes through: `AgentHarness::close_context`, the end
//! of a session turn, the end of the `spawn` or parallel path that made a child context (and, later,
//! `cancel(&ctx, ..)`).
//!
//! Descendants are held weakly: a parent never keeps a child alive. A context dropped without being
//! closed never runs its layers' `on_complete` / `dispose` (async hooks cannot run in `Drop`); a
//! warning is logged.

use std::sync::{Arc, Mutex, MutexGuard};

use futures_util::future::BoxFuture;

use super::{ContextLayer, LayerCtx, Outcome, by_slot};
use crate::Result;
use crate::context::{Context, WeakContext};

/// The layer bookkeeping of one context.
#[derive(Default)]
pub(crate) struct LayerLife {
    state: Mutex<LifeState>,
}

#[derive(Default)]
struct LifeState {
    /// Layers initialized on this context and not completed yet, in init order.
    initialized: Vec<Arc<dyn ContextLayer>>,
    /// Children with layers (theirs or their descendants') to complete, in registration order.
    children: Vec<WeakContext>,
    /// Whether this context is listed in its parent's `children`.
    registered: bool,
    /// How the last run on this context ended.
    outcome: Option<Outcome>,
}

impl LayerLife {
    fn lock(&self) -> MutexGuard<'_, LifeState> {
        // Every critical section is a push, a take or an assignment, so a poisoned lock is consistent.
        crate::sync::lock(&self.state)
    }

    /// How many layers are initialized and not completed (what a drop without close loses).
    pub(crate) fn open_layers(&self) -> usize {
        self.lock().initialized.len()
    }
}

fn address(layer: &Arc<dyn ContextLayer>) -> *const () {
    Arc::as_ptr(layer) as *const ()
}

/// How a run that returned `result` on `ctx` ended, for `on_complete`.
pub(crate) fn outcome_of<T>(ctx: &Context, result: &Result<T>) -> Outcome {
    match result {
        Ok(_) => Outcome::Success,
        Err(error) if error.is_cancelled() || ctx.aborted() => Outcome::Aborted,
        Err(_) => Outcome::Failure,
    }
}

/// Records how a run on `ctx` ended; closing the context later reports it.
pub(crate) fn finished<T>(ctx: &Context, result: &Result<T>) {
    let outcome = outcome_of(ctx, result);
    ctx.layer_life().lock().outcome = Some(outcome);
}

/// The outcome `close_context` reports: `Aborted` for an aborted context, else the last run's, else
/// `Success`.
pub(crate) fn closing_outcome(ctx: &Context) -> Outcome {
    if ctx.aborted() {
        Outcome::Aborted
    } else {
        ctx.layer_life().lock().outcome.unwrap_or(Outcome::Success)
    }
}

/// Initializes the layers of `layers` not yet initialized on `ctx` (since it was last closed), in slot
/// order.
///
/// # Errors
/// The first `init` error. The layers marked here still complete when the context is closed.
pub(crate) async fn init(ctx: &Context, layers: &[Arc<dyn ContextLayer>]) -> Result<()> {
    if layers.is_empty() {
        return Ok(());
    }
    let fresh: Vec<Arc<dyn ContextLayer>> = {
        let mut state = ctx.layer_life().lock();
        let mut fresh = Vec::new();
        for layer in layers {
            let known = state
                .initialized
                .iter()
                .any(|known| address(known) == address(layer));
            if !known {
                state.initialized.push(layer.clone());
                fresh.push(layer.clone());
            }
        }
        fresh
    };
    if fresh.is_empty() {
        return Ok(());
    }
    register(ctx);
    for layer in by_slot(&fresh) {
        layer.init(LayerCtx::new(ctx, layer.id())).await?;
    }
    Ok(())
}

/// Lists `ctx` in its parent's children, and the parent in its own, up to the first ancestor already
/// listed: closing any ancestor then reaches it.
fn register(ctx: &Context) {
    let mut child = ctx;
    while let Some(parent) = child.parent() {
        {
            let mut state = child.layer_life().lock();
            if state.registered {
                return;
            }
            state.registered = true;
        }
        parent.layer_life().lock().children.push(child.downgrade());
        child = parent;
    }
}

/// Whether closing `ctx` has anything to do.
pub(crate) fn is_open(ctx: &Context) -> bool {
    let state = ctx.layer_life().lock();
    !state.initialized.is_empty() || !state.children.is_empty()
}

/// Closes `ctx`: its open descendants first (the latest registered first; each with its own outcome
/// when aborted or run, else `outcome`), then its own layers — `on_complete(outcome)` in reverse slot
/// order, then `dispose` in the same order. Hook errors are logged only. Closing again does nothing
/// until layers are initialized again.
pub(crate) fn close(ctx: &Context, outcome: Outcome) -> BoxFuture<'_, ()> {
    Box::pin(async move {
        let (layers, children) = {
            let mut state = ctx.layer_life().lock();
            (
                std::mem::take(&mut state.initialized),
                std::mem::take(&mut state.children),
            )
        };
        for child in children.iter().rev() {
            if let Some(child) = child.upgrade() {
                let child_outcome = if child.aborted() {
                    Outcome::Aborted
                } else {
                    child.layer_life().lock().outcome.unwrap_or(outcome)
                };
                close(&child, child_outcome).await;
            }
        }
        complete(ctx, layers, outcome).await;
        if let Some(parent) = ctx.parent() {
            parent
                .layer_life()
                .lock()
                .children
                .retain(|listed| !listed.is(ctx));
        }
        ctx.layer_life().lock().registered = false;
    })
}

async fn complete(ctx: &Context, layers: Vec<Arc<dyn ContextLayer>>, outcome: Outcome) {
    if layers.is_empty() {
        return;
    }
    let mut layers = by_slot(&layers);
    layers.reverse();
    for layer in &layers {
        if let Err(error) = layer
            .on_complete(LayerCtx::new(ctx, layer.id()), outcome)
            .await
        {
            tracing::warn!(layer = layer.id(), %error, "layer on_complete failed");
        }
    }
    for layer in &layers {
        layer.dispose(LayerCtx::new(ctx, layer.id())).await;
    }
}

/// Runs `on_spawn` of the parent's layers (slot order) for a new child.
pub(crate) async fn spawned(parent: &Context, child: &Context) -> Result<()> {
    for layer in by_slot(&parent.layers()) {
        layer
            .on_spawn(LayerCtx::new(parent, layer.id()), child)
            .await?;
    }
    Ok(())
}

/// Runs `on_return` of the parent's layers (slot order) for a child that returned.
pub(crate) async fn returned(parent: &Context, child: &Context) -> Result<()> {
    for layer in by_slot(&parent.layers()) {
        layer
            .on_return(LayerCtx::new(parent, layer.id()), child)
            .await?;
    }
    Ok(())
}
