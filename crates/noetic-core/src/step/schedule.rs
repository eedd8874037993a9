//! `schedule`: runs a step again and again, every `interval`, until the context is cancelled (or a
//! run limit is reached).
//!
//! Each run gets the schedule's own input and runs on the same context. Between runs the step waits for
//! `interval` (a cancellable wait). A failed run either ends the schedule with its error
//! ([`ScheduleOnError::Fail`]) or is logged and skipped ([`ScheduleOnError::Continue`], the default).
//! `CANCELLED` always ends the schedule, whatever the policy.
//!
//! Without [`ScheduleBuilder::max_runs`] a schedule only ends by cancellation or by a failing run under
//! `Fail`: cancellation surfaces as `CANCELLED`, like everywhere else, so an endless schedule never
//! "returns". With `max_runs(n)` it ends after `n` runs (failed runs under `Continue` count) with the
//! last successful output, or `null` when no run succeeded — hence the output type `Option<O>`.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::{Origin, Step, StepBody, StepNode, execute as execute_step};
use crate::context::Context;
use crate::{Error, Result};

/// What a [`schedule`] does when a run fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ScheduleOnError {
    /// Log the failure and run again at the next tick (default).
    #[default]
    Continue,
    /// End the schedule with the run's error.
    Fail,
}

pub(crate) struct ScheduleSpec {
    pub(crate) step: Arc<StepNode>,
    interval: Duration,
    on_error: ScheduleOnError,
    pub(crate) max_runs: Option<u32>,
}

/// Builds a `schedule` step; see [`schedule`].
#[must_use = "a builder does nothing until turned into a step"]
pub struct ScheduleBuilder<I, O> {
    id: String,
    spec: ScheduleSpec,
    _types: PhantomData<fn(I) -> O>,
}

/// A step that runs `step` every `interval` until the context is cancelled; see the module docs.
///
/// # Examples
/// ```
/// use std::time::Duration;
/// use noetic_core::{schedule, run_code, AgentHarness, Context, ContextOptions};
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let tick = run_code("tick", |n: u32, _: Context| async move { Ok::<_, std::convert::Infallible>(n + 1) });
/// let ticker = schedule("ticker", tick, Duration::from_millis(1)).max_runs(3).build();
/// let harness = AgentHarness::builder("ticks").build()?;
/// let ctx = harness.create_context(ContextOptions::default());
/// assert_eq!(harness.run(&ticker, 1, &ctx).await?, Some(2));
/// # Ok::<(), noetic_core::Error>(())
/// # }).unwrap();
/// ```
pub fn schedule<I, O>(
    id: impl Into<String>,
    step: impl Into<Step<I, O>>,
    interval: Duration,
) -> ScheduleBuilder<I, O> {
    ScheduleBuilder {
        id: id.into(),
        spec: ScheduleSpec {
            step: step.into().node,
            interval,
            on_error: ScheduleOnError::Continue,
            max_runs: None,
        },
        _types: PhantomData,
    }
}

impl<I, O> ScheduleBuilder<I, O> {
    /// What to do when a run fails (default [`ScheduleOnError::Continue`]).
    pub fn on_error(mut self, on_error: ScheduleOnError) -> Self {
        self.spec.on_error = on_error;
        self
    }

    /// Ends the schedule after `runs` runs, with the last successful output. 0 is rejected when the
    /// tree is validated.
    pub fn max_runs(mut self, runs: u32) -> Self {
        self.spec.max_runs = Some(runs);
        self
    }

    /// The finished step. Its output is the last successful run's output, `None` if none succeeded.
    pub fn build(self) -> Step<I, Option<O>> {
        Step::from_node(StepNode {
            id: self.id,
            body: StepBody::Schedule(self.spec),
        })
    }
}

impl<I, O> std::fmt::Debug for ScheduleBuilder<I, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScheduleBuilder")
            .field("id", &self.id)
            .field("step", &self.spec.step.id)
            .field("interval", &self.spec.interval)
            .field("on_error", &self.spec.on_error)
            .field("max_runs", &self.spec.max_runs)
            .finish()
    }
}

impl<I, O> From<ScheduleBuilder<I, O>> for Step<I, Option<O>> {
    fn from(builder: ScheduleBuilder<I, O>) -> Self {
        builder.build()
    }
}

pub(crate) async fn execute(
    step_id: &str,
    spec: &ScheduleSpec,
    input: Value,
    origin: Origin,
    ctx: &Context,
) -> Result<Value> {
    let mut last = Value::Null;
    let mut runs = 0u32;
    loop {
        ctx.check_aborted()?;
        match execute_step(&spec.step, input.clone(), origin.clone(), ctx).await {
            Ok(output) => last = output,
            Err(error) if error.is_cancelled() => return Err(error),
            Err(error) => match spec.on_error {
                ScheduleOnError::Fail => return Err(error),
                ScheduleOnError::Continue => {
                    tracing::warn!(step_id, run = runs + 1, error = %error, "scheduled run failed; continuing");
                }
            },
        }
        runs = runs.saturating_add(1);
        if spec.max_runs.is_some_and(|max| runs >= max) {
            return Ok(last);
        }
        if spec.interval.is_zero() {
            // Stay cooperative: a zero interval must not starve the runtime.
            tokio::task::yield_now().await;
        } else {
            tokio::select! {
                biased;
                () = ctx.cancelled() => return Err(Error::cancelled(ctx.abort_reason())),
                () = tokio::time::sleep(spec.interval) => {}
            }
        }
    }
}
