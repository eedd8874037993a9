//! Token budgets: the allocation numbers, history cutting, and a budgeted request.

use noetic_core::item::Item;
use noetic_core::layer::{BudgetPlan, allocate_budget, estimate_tokens, fit_history, fit_items};
use noetic_core::{Band, ContextOptions, Step, call_model};
use noetic_test_support::{ScriptedModel, ScriptedResponse, harness_with};
use serde_json::json;

use crate::recall::texts;
use crate::support::{Probe, hook_log, layer};

fn check(total: usize, layers: &[(usize, usize)], history: usize, expect: (&[usize], usize)) {
    let plan: BudgetPlan = allocate_budget(total, layers, history);
    assert_eq!(
        (plan.layer_tokens.as_slice(), plan.history_tokens),
        expect,
        "allocate_budget({total}, {layers:?}, {history})"
    );
}

#[test]
fn budget_numbers() {
    // Minimums first, then half the rest for the layers' extra wants, the history the remainder.
    check(1000, &[(100, 300), (0, 1000)], 900, (&[300, 250], 450));
    // A history that wants little leaves more to the layers.
    check(1000, &[(100, 300), (0, 1000)], 400, (&[300, 300], 400));
    // Layers that want little leave the rest to the history.
    check(1000, &[(50, 60)], 5000, (&[60], 940));
    // A minimum is never more than the layer wants.
    check(100, &[(80, 10)], 0, (&[10], 90));
    // Minimums above the total are scaled down and the history gets nothing.
    check(100, &[(100, 100), (100, 100)], 50, (&[50, 50], 0));
    check(0, &[(10, 10)], 10, (&[0], 0));
    check(500, &[], 1000, (&[], 500));
}

#[test]
fn history_keeps_the_newest_items_and_no_orphaned_output() {
    let history = vec![
        Item::user_text("first question"),
        Item::function_call("call_1", "search", json!({"q": "x"}).to_string()),
        Item::function_call_output("call_1", "result"),
        Item::user_text("second"),
    ];
    let cost: Vec<usize> = history.iter().map(estimate_tokens).collect();
    // Room for everything.
    assert_eq!(fit_history(&history, cost.iter().sum()), history);
    // Room for the output and the last message but not the call: the output goes too.
    let kept = fit_history(&history, cost[2] + cost[3]);
    assert_eq!(kept, vec![history[3].clone()]);
    // Room for the call, its output and the last message.
    let kept = fit_history(&history, cost[1] + cost[2] + cost[3]);
    assert_eq!(kept, history[1..].to_vec());
    assert!(fit_history(&history, 0).is_empty());
}

#[test]
fn layer_items_that_do_not_fit_are_skipped_one_by_one() {
    let big = Item::developer_text("x".repeat(400));
    let small = Item::developer_text("y");
    let items = vec![small.clone(), big, small.clone()];
    let kept = fit_items(&items, estimate_tokens(&small) * 2);
    assert_eq!(kept, vec![small.clone(), small]);
}

#[tokio::test]
async fn a_budgeted_request_keeps_the_layer_minimum_and_the_newest_history() {
    let log = hook_log();
    let fact = Item::developer_text("FACT");
    let (_, facts) = layer(
        Probe::new("facts", 100, &log)
            .recalling(Band::BeforeHistory, vec![fact.clone()])
            .min_tokens(estimate_tokens(&fact)),
    );
    let model = ScriptedModel::with_responses([ScriptedResponse::text("ok")]);
    let harness = harness_with("budget", &model)
        .context_layers([facts])
        .build()
        .unwrap();
    let old = Item::user_text("an old message that no longer fits in the budget at all");
    let ctx = harness.create_context(ContextOptions::new().items(vec![old]));
    let now = Item::user_text("now");
    let budget = estimate_tokens(&fact) + estimate_tokens(&now);
    let step: Step<String, String> = call_model("llm").model("m").token_budget(budget).into();
    harness.run(&step, "now".to_owned(), &ctx).await.unwrap();

    assert_eq!(texts(&model.requests()[0].input), ["FACT", "now"]);
    assert_eq!(ctx.item_count(), 3, "the log keeps everything");
}
