//! `loop_step` and `sequence`: steps that run a body of steps in order.
//!
//! A loop runs its body (a sequence: each step's output is the next one's input) until its [`Until`]
//! says stop, at most `max_iterations` times (default 1000; passing it is an error, not a quiet stop).
//! The next iteration's input is `prepare_next(output, verdict, ctx)` when given (a root input, like
//! `run()`'s: a `call_model` appends a non-empty string as a user message); otherwise the output is fed
//! back, marked so that a `call_model` neither appends nor sends it: a loop never invents user
//! messages, and the next iteration continues from the item log as it stands. Within the body (and a
//! sequence), only the first step sees where the loop's input came from; each later step gets the
//! previous one's output as forwarded input (see `Origin::Forwarded`).

use std::marker::PhantomData;
use std::sync::Arc;

use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;
use tokio::time::Instant;

use super::{Origin, Step, StepBody, StepNode, decode, encode, execute as execute_step};
use crate::context::Context;
use crate::error::StepFailure;
use crate::until::{LoopSnapshot, Until, Verdict};
use crate::{Error, Result};

/// The default cap on loop iterations.
pub const DEFAULT_MAX_ITERATIONS: u32 = 1000;

type PrepareNext = dyn Fn(Value, &Verdict, &Context) -> Result<Value> + Send + Sync;

pub(crate) struct LoopSpec {
    pub(crate) body: Vec<Arc<StepNode>>,
    pub(crate) until: Option<Until>,
    max_iterations: u32,
    prepare_next: Option<Box<PrepareNext>>,
}

/// Starts a loop; add its first step with [`LoopStart::step`].
#[must_use = "a builder does nothing until turned into a step"]
#[derive(Debug)]
pub struct LoopStart {
    id: String,
}

/// Builds a loop step; see [`loop_step`].
#[must_use = "a builder does nothing until turned into a step"]
pub struct LoopBuilder<I, O> {
    id: String,
    spec: LoopSpec,
    _types: PhantomData<fn(I) -> O>,
}

/// A loop: `loop_step(id).step(a).step(b).until(predicate)`.
///
/// # Examples
/// ```
/// use noetic_core::{loop_step, run_code, until, Context};
/// let count = loop_step("count")
///     .step(run_code("inc", |n: u32, _: Context| async move { Ok::<_, std::convert::Infallible>(n + 1) }))
///     .until(until::max_steps(3));
/// assert_eq!(count.build().id(), "count");
/// ```
pub fn loop_step(id: impl Into<String>) -> LoopStart {
    LoopStart { id: id.into() }
}

impl LoopStart {
    /// The loop body's first step.
    pub fn step<I, O>(self, step: impl Into<Step<I, O>>) -> LoopBuilder<I, O> {
        LoopBuilder {
            id: self.id,
            spec: LoopSpec {
                body: vec![step.into().node],
                until: None,
                max_iterations: DEFAULT_MAX_ITERATIONS,
                prepare_next: None,
            },
            _types: PhantomData,
        }
    }
}

impl<I, O> LoopBuilder<I, O> {
    /// Appends a step to the body; it gets the previous step's output.
    pub fn step<P>(mut self, step: impl Into<Step<O, P>>) -> LoopBuilder<I, P> {
        self.spec.body.push(step.into().node);
        LoopBuilder {
            id: self.id,
            spec: self.spec,
            _types: PhantomData,
        }
    }

    /// When to stop.
    pub fn until(mut self, until: Until) -> Self {
        self.spec.until = Some(until);
        self
    }

    /// The cap on iterations (default 1000). Running past it fails the step; 0 is rejected when the
    /// loop runs.
    pub fn max_iterations(mut self, max_iterations: u32) -> Self {
        self.spec.max_iterations = max_iterations;
        self
    }

    /// Computes the next iteration's input from the output and the verdict (whose `feedback` carries a
    /// verifier's notes).
    pub fn prepare_next<F>(mut self, prepare: F) -> Self
    where
        I: Serialize + 'static,
        O: DeserializeOwned + 'static,
        F: Fn(O, &Verdict, &Context) -> I + Send + Sync + 'static,
    {
        let step_id = self.id.clone();
        self.spec.prepare_next = Some(Box::new(
            move |output: Value, verdict: &Verdict, ctx: &Context| {
                let output: O = decode(&step_id, "output", output)?;
                encode(&step_id, "input", prepare(output, verdict, ctx))
            },
        ));
        self
    }

    /// The finished step.
    pub fn build(self) -> Step<I, O> {
        Step::from_node(StepNode {
            id: self.id,
            body: StepBody::Loop(self.spec),
        })
    }
}

impl<I, O> From<LoopBuilder<I, O>> for Step<I, O> {
    fn from(builder: LoopBuilder<I, O>) -> Self {
        builder.build()
    }
}

pub(crate) async fn execute_loop(
    step_id: &str,
    spec: &LoopSpec,
    input: Value,
    origin: Origin,
    ctx: &Context,
) -> Result<Value> {
    let fail = |cause| Error::StepFailed {
        step_id: step_id.to_owned(),
        cause,
    };
    if spec.max_iterations == 0 {
        return Err(fail(StepFailure::InvalidMaxIterations));
    }
    let Some(until) = &spec.until else {
        return Err(Error::InvalidStep {
            step_id: step_id.to_owned(),
            problem: "loop has no until predicate",
        });
    };
    let started = Instant::now();
    let mut successes = 0u64;
    let mut iterations = 0u32;
    let mut input = input;
    let mut origin = origin;
    loop {
        ctx.check_aborted()?;
        iterations += 1;
        if iterations > spec.max_iterations {
            return Err(fail(StepFailure::MaxIterations {
                max_iterations: spec.max_iterations,
            }));
        }
        let output = run_body(&spec.body, input, origin, ctx).await?;
        successes += 1;
        let spend = ctx.spend();
        let snapshot = LoopSnapshot {
            step_count: successes,
            tokens: spend.usage,
            cost: spend.cost,
            elapsed: started.elapsed(),
            last_output: &output,
            last_call_had_tool_calls: ctx
                .with_last_step_meta(|meta| meta.map(|meta| meta.ended_with_tool_calls)),
            ctx,
        };
        let verdict = until.check(&snapshot);
        if verdict.stop {
            tracing::debug!(
                step_id,
                reason = verdict.reason.as_deref().unwrap_or(""),
                "loop stopped"
            );
            return Ok(output);
        }
        match &spec.prepare_next {
            Some(prepare) => {
                input = prepare(output, &verdict, ctx)?;
                origin = Origin::Root;
            }
            None => {
                input = output;
                origin = Origin::FedBack;
            }
        }
    }
}

/// Runs steps in order, each getting the previous one's output. Only the first sees `origin`; the
/// others get forwarded input.
pub(crate) async fn run_body(
    body: &[Arc<StepNode>],
    input: Value,
    origin: Origin,
    ctx: &Context,
) -> Result<Value> {
    let mut value = input;
    let mut origin = origin;
    for node in body {
        value = execute_step(node, value, origin, ctx).await?;
        origin = Origin::Forwarded;
    }
    Ok(value)
}

/// Starts a sequence; add its first step with [`SequenceStart::step`].
#[must_use = "a builder does nothing until turned into a step"]
#[derive(Debug)]
pub struct SequenceStart {
    id: String,
}

/// Builds a sequence step; see [`sequence`].
#[must_use = "a builder does nothing until turned into a step"]
pub struct SequenceBuilder<I, O> {
    id: String,
    body: Vec<Arc<StepNode>>,
    _types: PhantomData<fn(I) -> O>,
}

/// Steps in order: `sequence(id).step(a).step(b)`; each gets the previous one's output.
pub fn sequence(id: impl Into<String>) -> SequenceStart {
    SequenceStart { id: id.into() }
}

impl SequenceStart {
    /// The first step.
    pub fn step<I, O>(self, step: impl Into<Step<I, O>>) -> SequenceBuilder<I, O> {
        SequenceBuilder {
            id: self.id,
            body: vec![step.into().node],
            _types: PhantomData,
        }
    }
}

impl<I, O> SequenceBuilder<I, O> {
    /// Appends a step; it gets the previous step's output.
    pub fn step<P>(mut self, step: impl Into<Step<O, P>>) -> SequenceBuilder<I, P> {
        self.body.push(step.into().node);
        SequenceBuilder {
            id: self.id,
            body: self.body,
            _types: PhantomData,
        }
    }

    /// The finished step.
    pub fn build(self) -> Step<I, O> {
        Step::from_node(StepNode {
            id: self.id,
            body: StepBody::Sequence(self.body),
        })
    }
}

impl<I, O> From<SequenceBuilder<I, O>> for Step<I, O> {
    fn from(builder: SequenceBuilder<I, O>) -> Self {
        builder.build()
    }
}
