//! The layer lifecycle of one execution: `init` once per (context, layer), `on_complete` + `dispose`
//! when the outermost run or session turn ends.
//!
//! The bookkeeping lives on the root context ([`LayerRuns`]): a count of runs in progress on the tree
//! (nested `run()` calls included), the (context id, layer) pairs already initialized, and the entries to
//! complete and dispose. The outermost run's [`Execution`] guard completes them; if the run's future is
//! dropped instead, the guard only forgets them (async hooks cannot run in `Drop`).

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard};

use super::{ContextLayer, LayerCtx, Outcome, by_slot};
use crate::Result;
use crate::context::Context;

/// The layer bookkeeping a root context carries (children use their root's).
#[derive(Default)]
pub(crate) struct LayerRuns {
    state: Mutex<RunsState>,
}

#[derive(Default)]
struct RunsState {
    /// Runs in progress on the tree.
    depth: usize,
    /// (context id, layer address) pairs initialized in the current execution.
    seen: HashSet<(String, usize)>,
    /// What to complete and dispose, in registration order.
    entries: Vec<Entry>,
}

struct Entry {
    ctx: Context,
    layer: Arc<dyn ContextLayer>,
}

fn lock(runs: &LayerRuns) -> MutexGuard<'_, RunsState> {
    // Every critical section is a counter update or a push/take, so a poisoned lock is still consistent.
    runs.state
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn address(layer: &Arc<dyn ContextLayer>) -> usize {
    Arc::as_ptr(layer) as *const () as usize
}

/// One `run()` (or session turn) in progress on a context tree.
pub(crate) struct Execution {
    root: Context,
    finished: bool,
}

impl Execution {
    /// Counts a run on `ctx`'s tree.
    pub(crate) fn enter(ctx: &Context) -> Self {
        let root = ctx.root().clone();
        lock(root.layer_runs()).depth += 1;
        Execution {
            root,
            finished: false,
        }
    }

    /// Ends the run: when it is the outermost one, runs `on_complete` with the outcome of `result` and
    /// then `dispose` on every layer initialized during the execution (children first, reverse slot
    /// order). Hook errors are logged only.
    pub(crate) async fn finish<T>(mut self, ctx: &Context, result: &Result<T>) {
        self.finished = true;
        let entries = leave(&self.root);
        if entries.is_empty() {
            return;
        }
        let outcome = match result {
            Ok(_) => Outcome::Success,
            Err(error) if error.is_cancelled() || ctx.aborted() => Outcome::Aborted,
            Err(_) => Outcome::Failure,
        };
        for (context, layers) in completion_order(entries) {
            for layer in &layers {
                if let Err(error) = layer
                    .on_complete(LayerCtx::new(&context, layer.id()), outcome)
                    .await
                {
                    tracing::warn!(layer = layer.id(), %error, "layer on_complete failed");
                }
            }
            for layer in &layers {
                layer.dispose(LayerCtx::new(&context, layer.id())).await;
            }
        }
    }
}

impl Drop for Execution {
    fn drop(&mut self) {
        if !self.finished {
            // Dropped mid-run: the hooks cannot run here; forget the entries so the contexts they hold
            // (which hold the root) are freed.
            drop(leave(&self.root));
        }
    }
}

/// Counts a run out; returns the entries to complete when it was the outermost one.
fn leave(root: &Context) -> Vec<Entry> {
    let mut state = lock(root.layer_runs());
    state.depth = state.depth.saturating_sub(1);
    if state.depth > 0 {
        return Vec::new();
    }
    state.seen.clear();
    std::mem::take(&mut state.entries)
}

/// Groups entries by context, children (deeper, later) first, each group in reverse slot order.
fn completion_order(entries: Vec<Entry>) -> Vec<(Context, Vec<Arc<dyn ContextLayer>>)> {
    let mut groups: Vec<(Context, Vec<Arc<dyn ContextLayer>>)> = Vec::new();
    for entry in entries {
        match groups
            .iter_mut()
            .find(|(context, _)| context.id() == entry.ctx.id())
        {
            Some((_, layers)) => layers.push(entry.layer),
            None => groups.push((entry.ctx, vec![entry.layer])),
        }
    }
    groups.reverse();
    groups.sort_by_key(|(context, _)| std::cmp::Reverse(context.depth()));
    for (_, layers) in &mut groups {
        *layers = by_slot(layers);
        layers.reverse();
    }
    groups
}

/// Initializes the layers of `layers` not yet initialized on `ctx` in this execution, in slot order.
///
/// # Errors
/// The first `init` error.
pub(crate) async fn init(ctx: &Context, layers: &[Arc<dyn ContextLayer>]) -> Result<()> {
    if layers.is_empty() {
        return Ok(());
    }
    let fresh: Vec<Arc<dyn ContextLayer>> = {
        let mut state = lock(ctx.root().layer_runs());
        let mut fresh = Vec::new();
        for layer in layers {
            if state.seen.insert((ctx.id().to_owned(), address(layer))) {
                state.entries.push(Entry {
                    ctx: ctx.clone(),
                    layer: layer.clone(),
                });
                fresh.push(layer.clone());
            }
        }
        fresh
    };
    for layer in by_slot(&fresh) {
        layer.init(LayerCtx::new(ctx, layer.id())).await?;
    }
    Ok(())
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
