//! The vocabulary of a graceful stop: [`CancelOptions`], the [`DrainReport`] a drain resolves with,
//! and the [`PaidCall`]s it lists. A leaf: the mechanism is in `context/drain.rs`, the records of
//! paid calls in `paid.rs`.
//!
//! A plain cancel cuts every provider stream at once, and the provider still bills a cut round. With
//! a drain, nothing new starts beneath the cancelled context (steps, model rounds and tool calls wait),
//! the model rounds already in flight get up to the drain's window to finish and be charged, and then
//! the cancel proceeds as without a drain: the waiting work fails `CANCELLED`, and rounds still running
//! at the deadline are cut off (their paid-call records stay pending, see
//! [`AgentHarness::pending_spend`](crate::AgentHarness::pending_spend)).

use std::time::Duration;

use serde::{Deserialize, Serialize, Serializer};

use crate::usage::TokenUsage;

/// How [`AgentHarness::cancel`](crate::AgentHarness::cancel) stops a context.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CancelOptions {
    /// Why (becomes the `CANCELLED` reason of the work it stops).
    pub reason: Option<String>,
    /// How long model rounds in flight may take to finish before they are cut off; `None` cuts at
    /// once.
    pub drain: Option<Duration>,
}

impl CancelOptions {
    /// A cancel that cuts at once, without a reason.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the reason.
    pub fn reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }

    /// Drains in-flight model rounds for up to `window` first.
    pub fn drain(mut self, window: Duration) -> Self {
        self.drain = Some(window);
        self
    }
}

/// Why a drain ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum DrainReason {
    /// Nothing was left in flight (at once when nothing was).
    Settled,
    /// The window passed with calls still in flight: they were cut off.
    Deadline,
    /// A second cancel (or abort) during the drain stopped it at once.
    Stopped,
}

impl DrainReason {
    /// The name in the report's JSON (`settled`, `deadline`, `stopped`).
    pub fn as_str(self) -> &'static str {
        match self {
            DrainReason::Settled => "settled",
            DrainReason::Deadline => "deadline",
            DrainReason::Stopped => "stopped",
        }
    }
}

/// What a paid call was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CallKind {
    /// One provider request of a `call_model` step and its streamed response.
    ModelRound,
    /// A decision call (a layer's or a step's own model query).
    Decide,
    /// One prompt turn of an `acp_agent` step: the agent's own model calls, paid by it, priced when
    /// it reports usage.
    AgentTurn,
}

/// One call a drain accounts for. A finished call the provider billed carries its usage and cost
/// exactly as charged to its context; one the provider refused, or whose stream was cut before its
/// response, carries neither. Serialized with the original's camelCase names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct PaidCall {
    /// What it was.
    pub kind: CallKind,
    /// The model id.
    pub model: String,
    /// The execution (root context) it ran in.
    pub execution_id: String,
    /// The 0-based round within its step.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub round: Option<u32>,
    /// Its paid-call record (see [`AgentHarness::pending_spend`](crate::AgentHarness::pending_spend)).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dispatch_id: Option<String>,
    /// The provider's generation (or response) id, once the response headers arrived.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation_id: Option<String>,
    /// What it cost, when the provider reported it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
    /// Its token usage, once the response was in (`inputTokens`, `outputTokens`, … in JSON).
    #[serde(default, skip_serializing_if = "Option::is_none", with = "camel_usage")]
    pub usage: Option<TokenUsage>,
}

/// What a drain did: [`AgentHarness::cancel`](crate::AgentHarness::cancel) and
/// [`AgentHarness::abort`](crate::AgentHarness::abort) resolve with it, and `drain_finished` carries
/// it. Serialized with the original's camelCase names (`durationMs`, `cutOff`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct DrainReport {
    /// The execution (root context) drained.
    pub execution_id: String,
    /// Why it ended.
    pub reason: DrainReason,
    /// How long it took.
    #[serde(
        rename = "durationMs",
        serialize_with = "millis",
        deserialize_with = "from_millis"
    )]
    pub duration: Duration,
    /// The calls that ended during the drain, in the order they ended.
    pub finished: Vec<PaidCall>,
    /// The calls still running when it ended, which the cancel then cut.
    pub cut_off: Vec<PaidCall>,
}

/// [`TokenUsage`] with the original's camelCase names, as the report's calls carry it.
mod camel_usage {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use crate::usage::TokenUsage;

    #[derive(Serialize, Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Camel {
        input_tokens: u64,
        output_tokens: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cached_tokens: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reasoning_tokens: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cache_write_tokens: Option<u64>,
    }

    pub(super) fn serialize<S: Serializer>(
        usage: &Option<TokenUsage>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        usage
            .map(|usage| Camel {
                input_tokens: usage.input_tokens,
                output_tokens: usage.output_tokens,
                cached_tokens: usage.cached_tokens,
                reasoning_tokens: usage.reasoning_tokens,
                cache_write_tokens: usage.cache_write_tokens,
            })
            .serialize(serializer)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<TokenUsage>, D::Error> {
        Ok(
            Option::<Camel>::deserialize(deserializer)?.map(|camel| TokenUsage {
                input_tokens: camel.input_tokens,
                output_tokens: camel.output_tokens,
                cached_tokens: camel.cached_tokens,
                cache_write_tokens: camel.cache_write_tokens,
                reasoning_tokens: camel.reasoning_tokens,
            }),
        )
    }
}

fn from_millis<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    u64::deserialize(deserializer).map(Duration::from_millis)
}

fn millis<S: Serializer>(duration: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_u64(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_serializes_with_the_original_field_names() {
        let report = DrainReport {
            execution_id: "e".into(),
            reason: DrainReason::Deadline,
            duration: Duration::from_millis(1500),
            finished: Vec::new(),
            cut_off: vec![PaidCall {
                kind: CallKind::ModelRound,
                model: "m".into(),
                execution_id: "e".into(),
                round: Some(2),
                dispatch_id: Some("d".into()),
                generation_id: None,
                cost: Some(0.5),
                usage: Some(TokenUsage {
                    input_tokens: 3,
                    output_tokens: 1,
                    ..TokenUsage::default()
                }),
            }],
        };
        let json = serde_json::to_value(&report).unwrap_or_default();
        assert_eq!(
            json,
            serde_json::json!({
                "executionId": "e", "reason": "deadline", "durationMs": 1500, "finished": [],
                "cutOff": [{"kind": "model_round", "model": "m", "executionId": "e", "round": 2,
                            "dispatchId": "d", "cost": 0.5,
                            "usage": {"inputTokens": 3, "outputTokens": 1}}]
            })
        );
        // A call reads back as it was written (paid-call rows are stored this way).
        let call: PaidCall =
            serde_json::from_value(json["cutOff"][0].clone()).unwrap_or_else(|_| unreachable!());
        assert_eq!(call, report.cut_off[0]);
    }
}
