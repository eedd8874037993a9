//! Loop stop predicates.
//!
//! An [`Until`] looks at a [`LoopSnapshot`] after each iteration and returns a [`Verdict`]: stop or go
//! on, with an optional reason (when stopping) and feedback (for `prepare_next`). Combine predicates with
//! [`any`] and [`all`]. Predicates may keep state through interior mutability; each instance is
//! independent.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::context::Context;
use crate::usage::TokenUsage;

/// What a loop looks like after an iteration.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct LoopSnapshot<'a> {
    /// Iterations that succeeded so far in this loop.
    pub step_count: u64,
    /// Tokens used by the context so far.
    pub tokens: TokenUsage,
    /// Cost incurred by the context so far.
    pub cost: Option<f64>,
    /// Time since the loop started.
    pub elapsed: Duration,
    /// The last iteration's output.
    pub last_output: &'a Value,
    /// Whether the last `call_model` on the context ended with function calls still unanswered
    /// (`None` when no `call_model` ran).
    pub last_call_had_tool_calls: Option<bool>,
    /// The context.
    pub ctx: &'a Context,
}

impl LoopSnapshot<'_> {
    /// The last output as text: a string as is, else its `text` field, else its JSON.
    pub fn last_text(&self) -> Cow<'_, str> {
        match self.last_output {
            Value::String(text) => Cow::Borrowed(text),
            Value::Null => Cow::Borrowed(""),
            Value::Object(map) => match map.get("text") {
                Some(Value::String(text)) => Cow::Borrowed(text),
                _ => Cow::Owned(self.last_output.to_string()),
            },
            other => Cow::Owned(other.to_string()),
        }
    }
}

/// A predicate's answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Verdict {
    /// Whether the loop stops.
    pub stop: bool,
    /// Why it stops.
    pub reason: Option<String>,
    /// Feedback for the next iteration (`prepare_next` gets it).
    pub feedback: Option<String>,
}

impl Verdict {
    /// Go on.
    pub fn go_on() -> Self {
        Verdict::default()
    }

    /// Stop, for `reason`.
    pub fn stop(reason: impl Into<String>) -> Self {
        Verdict {
            stop: true,
            reason: Some(reason.into()),
            feedback: None,
        }
    }

    /// Adds feedback.
    pub fn with_feedback(mut self, feedback: Option<String>) -> Self {
        self.feedback = feedback;
        self
    }
}

/// A verifier's answer for [`verified`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verification {
    /// Whether the output passes.
    pub pass: bool,
    /// What to fix (or why it passed).
    pub feedback: Option<String>,
}

/// A loop stop predicate. Cheap to clone.
#[derive(Clone)]
pub struct Until {
    check: Arc<dyn Fn(&LoopSnapshot<'_>) -> Verdict + Send + Sync>,
}

impl Until {
    /// Evaluates the predicate.
    pub fn check(&self, snapshot: &LoopSnapshot<'_>) -> Verdict {
        (self.check)(snapshot)
    }
}

impl std::fmt::Debug for Until {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Until")
    }
}

/// A custom predicate.
pub fn custom(check: impl Fn(&LoopSnapshot<'_>) -> Verdict + Send + Sync + 'static) -> Until {
    Until {
        check: Arc::new(check),
    }
}

/// Stops after `n` successful iterations.
pub fn max_steps(n: u64) -> Until {
    custom(move |snapshot| {
        if snapshot.step_count >= n {
            Verdict::stop(format!("Reached max steps ({n})"))
        } else {
            Verdict::go_on()
        }
    })
}

/// Stops once the context's cost reaches `usd`.
pub fn max_cost(usd: f64) -> Until {
    custom(move |snapshot| match snapshot.cost {
        Some(cost) if cost >= usd => Verdict::stop(format!("Reached max cost ({usd})")),
        _ => Verdict::go_on(),
    })
}

/// Stops once the context's tokens (input + output) reach `n`.
pub fn max_tokens(n: u64) -> Until {
    custom(move |snapshot| {
        if snapshot.tokens.total() >= n {
            Verdict::stop(format!("Reached max tokens ({n})"))
        } else {
            Verdict::go_on()
        }
    })
}

/// Stops once the loop has run for `duration`.
pub fn max_duration(duration: Duration) -> Until {
    custom(move |snapshot| {
        if snapshot.elapsed >= duration {
            Verdict::stop(format!("Reached max duration ({duration:?})"))
        } else {
            Verdict::go_on()
        }
    })
}

/// Stops when the last `call_model` ended with a response without function calls — which is how every
/// `call_model` ends unless it hit a limit, since it runs its own tool rounds. Also stops when the body
/// has no `call_model`.
pub fn no_tool_calls() -> Until {
    custom(|snapshot| {
        if snapshot.step_count >= 1 && snapshot.last_call_had_tool_calls != Some(true) {
            Verdict::stop("No tool calls")
        } else {
            Verdict::go_on()
        }
    })
}

/// Stops when the last output's text contains `needle` (an empty needle always stops).
pub fn output_contains(needle: impl Into<String>) -> Until {
    let needle = needle.into();
    custom(move |snapshot| {
        if snapshot.last_text().contains(needle.as_str()) {
            Verdict::stop(format!("Output contains {needle:?}"))
        } else {
            Verdict::go_on()
        }
    })
}

/// Stops when `verify` passes the last output; its feedback is returned either way, so a failing
/// verification's feedback reaches `prepare_next`.
pub fn verified<O, F>(verify: F) -> Until
where
    O: DeserializeOwned,
    F: Fn(&O) -> Verification + Send + Sync + 'static,
{
    custom(move |snapshot| match O::deserialize(snapshot.last_output) {
        Ok(output) => {
            let verification = verify(&output);
            let verdict = if verification.pass {
                Verdict::stop("Verification passed")
            } else {
                Verdict::go_on()
            };
            verdict.with_feedback(verification.feedback)
        }
        Err(error) => Verdict::go_on().with_feedback(Some(format!(
            "output did not match the verifier's type: {error}"
        ))),
    })
}

/// Never stops (the loop ends at `max_iterations`, with an error).
pub fn never() -> Until {
    custom(|_| Verdict::go_on())
}

/// Stops when any predicate stops (the first stopping verdict, as is). When none stops, carries the first
/// non-empty feedback, so a verifier inside `any` still reaches `prepare_next`. No predicates: never stops.
pub fn any(predicates: impl IntoIterator<Item = Until>) -> Until {
    let predicates: Vec<Until> = predicates.into_iter().collect();
    custom(move |snapshot| {
        let mut feedback = None;
        for predicate in &predicates {
            let verdict = predicate.check(snapshot);
            if verdict.stop {
                return verdict;
            }
            if feedback.is_none()
                && verdict
                    .feedback
                    .as_deref()
                    .is_some_and(|text| !text.is_empty())
            {
                feedback = verdict.feedback;
            }
        }
        Verdict::go_on().with_feedback(feedback)
    })
}

/// Stops when every predicate stops (reasons joined with `; `). When one does not, its feedback is kept.
/// No predicates: stops.
pub fn all(predicates: impl IntoIterator<Item = Until>) -> Until {
    let predicates: Vec<Until> = predicates.into_iter().collect();
    custom(move |snapshot| {
        let mut reasons = Vec::new();
        for predicate in &predicates {
            let verdict = predicate.check(snapshot);
            if !verdict.stop {
                return Verdict::go_on().with_feedback(verdict.feedback);
            }
            reasons.extend(verdict.reason);
        }
        if reasons.is_empty() {
            Verdict::stop("All predicates satisfied")
        } else {
            Verdict::stop(reasons.join("; "))
        }
    })
}
