//! A recording probe layer and harness helpers.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;
use noetic_core::item::Item;
use noetic_core::{
    Band, Context, ContextLayer, LayerCtx, LayerDecision, Outcome, RecallLayerOutput, Result,
};

/// A shared, ordered log of hook calls: `"{layer}:{hook}@{depth}"`.
pub(crate) type HookLog = Arc<Mutex<Vec<String>>>;

pub(crate) fn hook_log() -> HookLog {
    Arc::new(Mutex::new(Vec::new()))
}

/// The log's entries whose hook is one of `hooks`.
pub(crate) fn entries(log: &HookLog, hooks: &[&str]) -> Vec<String> {
    log.lock()
        .unwrap()
        .iter()
        .filter(|entry| {
            let hook = entry.split(':').nth(1).unwrap_or("");
            let hook = hook.split('@').next().unwrap_or("");
            hooks.contains(&hook)
        })
        .cloned()
        .collect()
}

/// A layer that records every hook call and can be told what to recall and decide.
pub(crate) struct Probe {
    pub(crate) id: String,
    pub(crate) slot: i32,
    pub(crate) band: Band,
    pub(crate) min_tokens: usize,
    pub(crate) log: HookLog,
    pub(crate) recall: Option<Vec<Item>>,
    pub(crate) decisions: Mutex<VecDeque<LayerDecision>>,
    pub(crate) stored: Mutex<Vec<Vec<Item>>>,
    pub(crate) outcomes: Mutex<Vec<Outcome>>,
}

impl Probe {
    pub(crate) fn new(id: &str, slot: i32, log: &HookLog) -> Self {
        Probe {
            id: id.to_owned(),
            slot,
            band: Band::BeforeHistory,
            min_tokens: 0,
            log: log.clone(),
            recall: None,
            decisions: Mutex::new(VecDeque::new()),
            stored: Mutex::new(Vec::new()),
            outcomes: Mutex::new(Vec::new()),
        }
    }

    pub(crate) fn recalling(mut self, band: Band, items: Vec<Item>) -> Self {
        self.band = band;
        self.recall = Some(items);
        self
    }

    pub(crate) fn deciding(self, decisions: impl IntoIterator<Item = LayerDecision>) -> Self {
        self.decisions.lock().unwrap().extend(decisions);
        self
    }

    pub(crate) fn min_tokens(mut self, tokens: usize) -> Self {
        self.min_tokens = tokens;
        self
    }

    fn record(&self, hook: &str, ctx: &Context) {
        self.log
            .lock()
            .unwrap()
            .push(format!("{}:{hook}@{}", self.id, ctx.depth()));
    }
}

impl ContextLayer for Probe {
    fn id(&self) -> &str {
        &self.id
    }

    fn slot(&self) -> i32 {
        self.slot
    }

    fn band(&self) -> Band {
        self.band
    }

    fn min_tokens(&self) -> usize {
        self.min_tokens
    }

    fn init<'a>(&'a self, ctx: LayerCtx<'a>) -> BoxFuture<'a, Result<()>> {
        self.record("init", ctx.context());
        Box::pin(async { Ok(()) })
    }

    fn recall<'a>(
        &'a self,
        ctx: LayerCtx<'a>,
        _query: &'a str,
    ) -> BoxFuture<'a, Result<Option<RecallLayerOutput>>> {
        self.record("recall", ctx.context());
        let output = self
            .recall
            .clone()
            .map(|items| RecallLayerOutput::new(self.id.clone(), items));
        Box::pin(async move { Ok(output) })
    }

    fn store<'a>(&'a self, ctx: LayerCtx<'a>, new_items: &'a [Item]) -> BoxFuture<'a, Result<()>> {
        self.record("store", ctx.context());
        self.stored.lock().unwrap().push(new_items.to_vec());
        Box::pin(async { Ok(()) })
    }

    fn on_item_append(&self, ctx: LayerCtx<'_>, _item: &Item) {
        self.record("append", ctx.context());
    }

    fn after_model_call<'a>(
        &'a self,
        ctx: LayerCtx<'a>,
        _response_items: &'a [Item],
    ) -> BoxFuture<'a, LayerDecision> {
        self.record("after_model_call", ctx.context());
        let decision = self
            .decisions
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or_default();
        Box::pin(async move { decision })
    }

    fn on_spawn<'a>(&'a self, ctx: LayerCtx<'a>, _child: &'a Context) -> BoxFuture<'a, Result<()>> {
        self.record("on_spawn", ctx.context());
        Box::pin(async { Ok(()) })
    }

    fn on_return<'a>(
        &'a self,
        ctx: LayerCtx<'a>,
        _child: &'a Context,
    ) -> BoxFuture<'a, Result<()>> {
        self.record("on_return", ctx.context());
        Box::pin(async { Ok(()) })
    }

    fn on_complete<'a>(&'a self, ctx: LayerCtx<'a>, outcome: Outcome) -> BoxFuture<'a, Result<()>> {
        self.record("on_complete", ctx.context());
        self.outcomes.lock().unwrap().push(outcome);
        Box::pin(async { Ok(()) })
    }

    fn dispose<'a>(&'a self, ctx: LayerCtx<'a>) -> BoxFuture<'a, ()> {
        self.record("dispose", ctx.context());
        Box::pin(async {})
    }
}

/// The layer as the harness takes it.
pub(crate) fn layer(probe: Probe) -> (Arc<Probe>, Arc<dyn ContextLayer>) {
    let probe = Arc::new(probe);
    let layer: Arc<dyn ContextLayer> = probe.clone();
    (probe, layer)
}
