//! Steering: messages that join a running turn at the next steer point of its model calls. The
//! turn's [`SteerInbox`] rides on its context (the session pushes, the model calls take), so it lives
//! with the context, not with the sessions.
//!
//! A model call offers queued steers at three points: `item_done` (the stream finished an output item),
//! `before_tool_call` (before each tool call of a round, when calls run one at a time) and
//! `before_round` (before each model request after the turn's first). By default a `next-item` steer
//! applies at `item_done` or `before_round`, whichever comes first, and a `between-rounds` steer at
//! `before_round`. An `on_steer` hook (the harness's, then each context layer's) may decide otherwise:
//! apply now, hold for a later point, rewrite the items, or drop the steer.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::context::Context;
use crate::event::FrameworkEvent;
use crate::item::Item;
use crate::steer::{Steer, SteerDecision, SteerPoint, default_decision};

/// A hook deciding what happens to a steer; `None` leaves the decision to the next hook, then to the
/// defaults.
pub type OnSteer = dyn Fn(&Steer, SteerPoint, &Context) -> Option<SteerDecision> + Send + Sync;

/// Steers applied at a point: their ids and the items to append, in order.
#[derive(Debug, Default)]
pub(crate) struct Applied {
    pub(crate) message_ids: Vec<String>,
    pub(crate) items: Vec<Item>,
}

impl Applied {
    pub(crate) fn is_empty(&self) -> bool {
        self.message_ids.is_empty()
    }
}

/// The running turn's queue of steers, shared by the session (which pushes) and the turn's model
/// calls (which take).
pub(crate) struct SteerInbox {
    pending: Mutex<VecDeque<Steer>>,
    /// `pending.len()`, readable without the lock: every stream item checks it.
    count: AtomicUsize,
    /// Whether the turn has sent a model request yet (`before_round` is offered after the first).
    requested: AtomicBool,
    hook: Option<Arc<OnSteer>>,
    /// The message ids of the steers applied or dropped so far, in order (a durable turn records them
    /// with its checkpoints, so a resumed turn does not apply one twice).
    taken: Mutex<Vec<String>>,
}

impl SteerInbox {
    pub(crate) fn new(hook: Option<Arc<OnSteer>>, initial: Vec<Steer>) -> Self {
        let count = initial.len();
        SteerInbox {
            pending: Mutex::new(initial.into()),
            count: AtomicUsize::new(count),
            requested: AtomicBool::new(false),
            hook,
            taken: Mutex::new(Vec::new()),
        }
    }

    /// An inbox for a turn resumed after a crash: it had taken `taken` already, and `requested`
    /// says whether it had sent a model request.
    pub(crate) fn resumed(
        hook: Option<Arc<OnSteer>>,
        pending: Vec<Steer>,
        taken: Vec<String>,
        requested: bool,
    ) -> Self {
        let inbox = SteerInbox::new(hook, pending);
        *crate::sync::lock(&inbox.taken) = taken;
        inbox.requested.store(requested, Ordering::Release);
        inbox
    }

    /// The message ids of the steers applied or dropped so far.
    pub(crate) fn taken(&self) -> Vec<String> {
        crate::sync::lock(&self.taken).clone()
    }

    fn pending(&self) -> MutexGuard<'_, VecDeque<Steer>> {
        crate::sync::lock(&self.pending)
    }

    pub(crate) fn push(&self, steer: Steer) {
        let mut pending = self.pending();
        pending.push_back(steer);
        self.count.store(pending.len(), Ordering::Release);
    }

    pub(crate) fn has_pending(&self) -> bool {
        self.count.load(Ordering::Acquire) > 0
    }

    /// Records a model request; returns whether one had been sent before in this turn.
    pub(crate) fn mark_request(&self) -> bool {
        self.requested.swap(true, Ordering::AcqRel)
    }

    /// Decides every pending steer at `point`; returns those to apply now. Held steers stay queued in
    /// order, dropped ones emit `steer_dropped`.
    pub(crate) fn take(&self, point: SteerPoint, ctx: &Context) -> Applied {
        let mut applied = Applied::default();
        if !self.has_pending() {
            return applied;
        }
        // Decide outside the lock: hooks may be slow or look at the context.
        let candidates: Vec<Steer> = {
            let mut pending = self.pending();
            self.count.store(0, Ordering::Release);
            pending.drain(..).collect()
        };
        let mut held = Vec::new();
        let mut taken = Vec::new();
        for steer in candidates {
            let decision = self.decide(&steer, point, ctx);
            if !matches!(decision, SteerDecision::Hold) {
                // Applied or dropped: taken either way.
                taken.push(steer.message_id.clone());
            }
            match decision {
                SteerDecision::Apply => {
                    applied.message_ids.push(steer.message_id);
                    applied.items.extend(steer.items);
                }
                SteerDecision::Rewrite(items) => {
                    applied.message_ids.push(steer.message_id);
                    applied.items.extend(items);
                }
                SteerDecision::Drop => ctx.emit(FrameworkEvent::SteerDropped {
                    message_id: steer.message_id,
                    point,
                }),
                SteerDecision::Hold => held.push(steer),
            }
        }
        if !taken.is_empty() {
            crate::sync::lock(&self.taken).append(&mut taken);
        }
        if !held.is_empty() {
            let mut pending = self.pending();
            for steer in held.into_iter().rev() {
                pending.push_front(steer);
            }
            self.count.store(pending.len(), Ordering::Release);
        }
        applied
    }

    fn decide(&self, steer: &Steer, point: SteerPoint, ctx: &Context) -> SteerDecision {
        if let Some(decision) = self.hook.as_ref().and_then(|hook| hook(steer, point, ctx)) {
            return decision;
        }
        for layer in ctx.layers().iter() {
            let layer_ctx = crate::layer::LayerCtx::new(ctx, layer.id());
            if let Some(decision) = layer.on_steer(layer_ctx, steer, point) {
                return decision;
            }
        }
        default_decision(steer.mode, point)
    }

    /// The steers still queued (held) when the turn ends.
    pub(crate) fn drain(&self) -> Vec<Steer> {
        let mut pending = self.pending();
        self.count.store(0, Ordering::Release);
        pending.drain(..).collect()
    }
}
