//! Recall: placed before or after the history in the request, never in the item log; usage reported;
//! `store` and `on_item_append` see the step's items.

use noetic_core::item::Item;
use noetic_core::{
    Band, ContextOptions, ExecuteOptions, LayerUsage, Scope, Step, call_model,
    layer::estimate_tokens,
};
use noetic_test_support::{ScriptedModel, ScriptedResponse, harness_with};

use crate::support::{Probe, entries, hook_log, layer};

pub(crate) fn texts(items: &[Item]) -> Vec<String> {
    items
        .iter()
        .map(|item| item.text().unwrap_or_else(|| item.item_type().to_owned()))
        .collect()
}

fn llm() -> Step<String, String> {
    call_model("llm").model("m").into()
}

#[tokio::test]
async fn recall_goes_before_or_after_the_history_and_not_into_the_log() {
    let log = hook_log();
    let (_, after) = layer(
        Probe::new("after", 20, &log)
            .recalling(Band::AfterHistory, vec![Item::developer_text("AFTER")]),
    );
    let (_, before) = layer(
        Probe::new("before", 10, &log)
            .recalling(Band::BeforeHistory, vec![Item::developer_text("BEFORE")]),
    );
    let (_, silent) = layer(Probe::new("silent", 5, &log));
    let model = ScriptedModel::with_responses([ScriptedResponse::text("answer")]);
    let harness = harness_with("recall", &model)
        .context_layers([after, before, silent])
        .build()
        .unwrap();
    let ctx = harness.create_context(ContextOptions::new().items(vec![
        Item::user_text("earlier"),
        Item::assistant_text("reply"),
    ]));
    harness.run(&llm(), "now".to_owned(), &ctx).await.unwrap();

    let request = &model.requests()[0];
    assert_eq!(
        texts(&request.input),
        ["BEFORE", "earlier", "reply", "now", "AFTER"]
    );
    assert_eq!(texts(&ctx.items()), ["earlier", "reply", "now", "answer"]);
    assert_eq!(
        entries(&log, &["recall"]),
        ["silent:recall@0", "before:recall@0", "after:recall@0"],
        "slot order"
    );
    let usage = ctx.last_step_meta().unwrap().last_layer_usage;
    let ids: Vec<&str> = usage.iter().map(|entry| entry.layer_id.as_str()).collect();
    assert_eq!(ids, ["before", "after"]);
    assert_eq!(
        usage[0].token_count,
        estimate_tokens(&Item::developer_text("BEFORE"))
    );
}

#[tokio::test]
async fn store_gets_the_steps_new_items_and_appends_are_observed() {
    let log = hook_log();
    let (probe, probe_layer) = layer(Probe::new("memo", 100, &log));
    let model = ScriptedModel::with_responses([ScriptedResponse::text("answer")]);
    let harness = harness_with("store", &model)
        .context_layers([probe_layer])
        .build()
        .unwrap();
    let ctx = harness.create_context(ContextOptions::new().items(vec![Item::user_text("old")]));
    harness.run(&llm(), "new".to_owned(), &ctx).await.unwrap();

    let stored = probe.stored.lock().unwrap().clone();
    assert_eq!(stored.len(), 1);
    assert_eq!(texts(&stored[0]), ["new", "answer"]);
    assert_eq!(
        entries(&log, &["append"]),
        ["memo:append@0", "memo:append@0"],
        "one call per appended item"
    );
}

#[tokio::test]
async fn the_turn_response_reports_last_layer_usage() {
    let log = hook_log();
    let (_, probe_layer) = layer(
        Probe::new("facts", 100, &log)
            .recalling(Band::BeforeHistory, vec![Item::developer_text("FACT")]),
    );
    let model = ScriptedModel::with_responses([ScriptedResponse::text("ok")]);
    let harness = harness_with("usage", &model)
        .context_layers([probe_layer])
        .agent_graph(llm())
        .build()
        .unwrap();
    harness
        .execute("hello", ExecuteOptions::default())
        .await
        .unwrap();
    let response = harness.agent_response(Scope::default()).await.unwrap();
    assert_eq!(response.last_layer_usage.len(), 1);
    let LayerUsage {
        layer_id,
        token_count,
        ..
    } = &response.last_layer_usage[0];
    assert_eq!(layer_id, "facts");
    assert_eq!(*token_count, estimate_tokens(&Item::developer_text("FACT")));
    assert_eq!(texts(&model.requests()[0].input), ["FACT", "hello"]);
    assert!(!texts(&response.items).contains(&"FACT".to_owned()));
}
