//! [`SteeringLayer`]: rule-based gating of tool calls and model responses.

use futures_util::future::BoxFuture;

use crate::item::Item;
use crate::layer::{ContextLayer, LayerCtx, LayerDecision, ToolCallView};
use crate::tool::wire_name;

/// Whether a rule refuses or redirects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Deny,
    Guide,
}

/// One rule: what it matches and what it says.
#[derive(Debug, Clone)]
struct Rule {
    pattern: String,
    verdict: Verdict,
    guidance: String,
}

/// Rule-based gating (slot 90): denies or guides tool calls by tool name (`before_tool_call`) and
/// model responses whose text contains a string (`after_model_call`).
///
/// - A denied tool call does not run; the model gets `Tool call denied: <guidance>` as its output. A
///   guided one gets `Tool call redirected: <guidance>`.
/// - A denied response fails the step with `STEERING_DENIED`. A guided one is discarded and the model
///   is asked again with the guidance as a developer message (at most 3 times per step).
///
/// The first matching deny wins; otherwise the guidances of all matching guide rules are joined, one
/// per line. Text matching is case-sensitive, over the text of every response item.
///
/// # Examples
/// ```
/// use noetic_core::layer::builtin::SteeringLayer;
/// let steering = SteeringLayer::new()
///     .deny_tool("delete_file", "never delete files")
///     .guide_output_containing("As an AI", "answer plainly");
/// assert_eq!(steering.rule_count(), 2);
/// ```
#[derive(Debug, Clone, Default)]
pub struct SteeringLayer {
    tool_rules: Vec<Rule>,
    output_rules: Vec<Rule>,
}

impl SteeringLayer {
    /// A layer with no rules (id `steering`, slot 90).
    pub fn new() -> Self {
        Self::default()
    }

    /// Denies every call of `tool_name`, telling the model `guidance`.
    pub fn deny_tool(mut self, tool_name: impl Into<String>, guidance: impl Into<String>) -> Self {
        self.tool_rules
            .push(rule(tool_name, Verdict::Deny, guidance));
        self
    }

    /// Redirects every call of `tool_name` with `guidance` (the call does not run).
    pub fn guide_tool(mut self, tool_name: impl Into<String>, guidance: impl Into<String>) -> Self {
        self.tool_rules
            .push(rule(tool_name, Verdict::Guide, guidance));
        self
    }

    /// Denies a response whose text contains `text`, failing the step with `guidance`.
    pub fn deny_output_containing(
        mut self,
        text: impl Into<String>,
        guidance: impl Into<String>,
    ) -> Self {
        self.output_rules.push(rule(text, Verdict::Deny, guidance));
        self
    }

    /// Asks again, with `guidance`, when a response's text contains `text`.
    pub fn guide_output_containing(
        mut self,
        text: impl Into<String>,
        guidance: impl Into<String>,
    ) -> Self {
        self.output_rules.push(rule(text, Verdict::Guide, guidance));
        self
    }

    /// How many rules the layer has.
    pub fn rule_count(&self) -> usize {
        self.tool_rules.len() + self.output_rules.len()
    }
}

fn rule(pattern: impl Into<String>, verdict: Verdict, guidance: impl Into<String>) -> Rule {
    Rule {
        pattern: pattern.into(),
        verdict,
        guidance: guidance.into(),
    }
}

/// The decision of the rules that match: the first deny, else the guides joined, else allow.
fn decide<'r>(matching: impl Iterator<Item = &'r Rule>) -> LayerDecision {
    let mut guidance: Vec<&str> = Vec::new();
    for rule in matching {
        match rule.verdict {
            Verdict::Deny => {
                return LayerDecision::Deny {
                    guidance: Some(rule.guidance.clone()),
                };
            }
            Verdict::Guide => guidance.push(&rule.guidance),
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

impl ContextLayer for SteeringLayer {
    fn id(&self) -> &str {
        "steering"
    }

    fn slot(&self) -> i32 {
        90
    }

    fn before_tool_call<'a>(
        &'a self,
        _ctx: LayerCtx<'a>,
        call: ToolCallView<'a>,
    ) -> BoxFuture<'a, LayerDecision> {
        let decision = decide(
            self.tool_rules
                .iter()
                .filter(|rule| rule.pattern == call.name || wire_name(&rule.pattern) == call.name),
        );
        Box::pin(async move { decision })
    }

    fn after_model_call<'a>(
        &'a self,
        _ctx: LayerCtx<'a>,
        response_items: &'a [Item],
    ) -> BoxFuture<'a, LayerDecision> {
        let text: Vec<String> = response_items.iter().filter_map(Item::text).collect();
        let text = text.join("\n");
        let decision = decide(
            self.output_rules
                .iter()
                .filter(|rule| text.contains(rule.pattern.as_str())),
        );
        Box::pin(async move { decision })
    }
}
