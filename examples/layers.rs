//! A tiny memory layer: it stores facts the user states ("remember: X") in the layer state store
//! (resource scope) and recalls them into later requests, before the history.
//!
//! ```text
//! cargo run --example layers
//! ```
//!
//! Runs offline against the demo model. The harness runs twice, each time on a fresh context for the
//! same resource; the second request carries the fact stored by the first run. A small provider
//! wrapper prints what the model was sent (recalled items go into the request, not the item log).

use std::sync::Arc;

use futures_util::future::BoxFuture;
use noetic_core::item::Item;
use noetic_core::model::{ModelRequest, ModelStream};
use noetic_core::{
    AgentHarness, ContextLayer, ContextOptions, LayerCtx, LayerScope, ModelProvider,
    RecallLayerOutput, Result, Role, call_model,
};
use noetic_providers::DemoModel;

/// Remembers facts per resource (user).
struct Memory;

const FACTS: &str = "facts";
const PREFIX: &str = "remember:";

impl ContextLayer for Memory {
    fn id(&self) -> &str {
        "memory"
    }

    fn recall<'a>(
        &'a self,
        ctx: LayerCtx<'a>,
        _query: &'a str,
    ) -> BoxFuture<'a, Result<Option<RecallLayerOutput>>> {
        Box::pin(async move {
            let facts: Vec<String> = ctx
                .state_get(LayerScope::Resource, FACTS)
                .await?
                .unwrap_or_default();
            if facts.is_empty() {
                return Ok(None);
            }
            let text = format!(
                "Facts the user asked you to remember:\n- {}",
                facts.join("\n- ")
            );
            Ok(Some(RecallLayerOutput::text(self.id(), text)))
        })
    }

    fn store<'a>(&'a self, ctx: LayerCtx<'a>, new_items: &'a [Item]) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let new_facts: Vec<String> = new_items
                .iter()
                .filter(|item| item.role() == Some(Role::User))
                .filter_map(Item::text)
                .filter_map(|text| {
                    text.trim()
                        .strip_prefix(PREFIX)
                        .map(|fact| fact.trim().to_owned())
                })
                .collect();
            if new_facts.is_empty() {
                return Ok(());
            }
            let mut facts: Vec<String> = ctx
                .state_get(LayerScope::Resource, FACTS)
                .await?
                .unwrap_or_default();
            facts.extend(new_facts);
            ctx.state_set(LayerScope::Resource, FACTS, &facts).await
        })
    }
}

/// Prints each request's input, then forwards it.
struct Printing<P>(P);

impl<P: ModelProvider> ModelProvider for Printing<P> {
    fn stream<'a>(&'a self, request: &'a ModelRequest<'a>) -> BoxFuture<'a, Result<ModelStream>> {
        println!("request sent to the model:");
        for item in request.input {
            let role = item
                .role()
                .map(|role| format!("{role:?}").to_lowercase())
                .unwrap_or_else(|| item.item_type().to_owned());
            println!("  [{role}] {}", item.text().unwrap_or_default());
        }
        self.0.stream(request)
    }
}

#[tokio::main]
async fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    let demo = DemoModel::start().await?;
    eprintln!("note: using the offline demo model at {}", demo.base_url());

    let memory: Arc<dyn ContextLayer> = Arc::new(Memory);
    let harness = AgentHarness::builder("remembering")
        .provider("demo", Printing(demo.provider()?))
        .context_layers([memory])
        .build()?;
    let assistant = call_model("assistant").model("demo").build();

    for message in [
        "remember: my favourite colour is teal",
        "What colour should my new bike be?",
    ] {
        // A fresh context per run: only the layer state (resource scope) carries over.
        let ctx = harness.create_context(ContextOptions::new().resource_id("alice"));
        println!("user: {message}");
        let answer = harness.run(&assistant, message.to_owned(), &ctx).await?;
        // Done with this context: its layers complete (on_complete, dispose).
        harness.close_context(&ctx).await;
        println!("assistant: {answer}\n");
    }
    Ok(())
}
