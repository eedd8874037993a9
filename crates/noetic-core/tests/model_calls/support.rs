//! Shared helpers for the model-call tests.

use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use noetic_core::model::{ModelRequest, ModelStream};
use noetic_core::{
    AgentHarness, Context, ContextOptions, ModelProvider, ResponseEvent, Result, Tool, ToolContext,
};
use noetic_test_support::{EventLog, ScriptedModel, harness_with};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

#[derive(Debug, Deserialize, JsonSchema)]
pub(crate) struct SearchArgs {
    pub(crate) query: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub(crate) struct SearchResult {
    pub(crate) result: String,
}

/// The quick example's search tool.
pub(crate) fn search_tool() -> Tool {
    Tool::new(
        "search",
        "Search the web for information",
        |args: SearchArgs, _ctx: ToolContext| async move {
            Ok(SearchResult {
                result: format!("Results for: {}", args.query),
            })
        },
    )
}

/// A harness over `model` and a root context whose events go to the returned log.
pub(crate) fn setup(model: &ScriptedModel) -> (AgentHarness, Context, EventLog) {
    let harness = harness_with("test", model).build().expect("harness builds");
    let log = EventLog::new();
    let ctx = harness.create_context(ContextOptions::new().event_sink(log.sink()));
    (harness, ctx, log)
}

/// A provider whose single response stream is fed by the test through a channel.
#[derive(Clone)]
pub(crate) struct ChannelModel {
    receiver: Arc<Mutex<Option<mpsc::UnboundedReceiver<Result<ResponseEvent>>>>>,
}

impl ChannelModel {
    pub(crate) fn new() -> (Self, mpsc::UnboundedSender<Result<ResponseEvent>>) {
        let (sender, receiver) = mpsc::unbounded_channel();
        (
            ChannelModel {
                receiver: Arc::new(Mutex::new(Some(receiver))),
            },
            sender,
        )
    }
}

impl ModelProvider for ChannelModel {
    fn stream<'a>(&'a self, _request: &'a ModelRequest<'a>) -> BoxFuture<'a, Result<ModelStream>> {
        let receiver = self
            .receiver
            .lock()
            .unwrap()
            .take()
            .expect("one request only");
        Box::pin(async move {
            let events = futures_util::stream::unfold(receiver, |mut receiver| async move {
                receiver.recv().await.map(|event| (event, receiver))
            })
            .boxed();
            Ok(ModelStream {
                generation_id: None,
                events,
            })
        })
    }
}
