//! `in_parallel`: runs paths concurrently in child contexts, in `all`, `race` or `settle` mode.
//!
//! Each path runs in its own child context (fresh id, depth + 1, a copy of the parent's item log and
//! state), inside the calling task: no task is spawned, so dropping the step drops every path.
//! - `all`: every path must succeed; outputs are merged in path order. The first failure aborts the
//!   other paths and the step fails with `FORK_PARTIAL`, which lists the failed paths apart from the
//!   cancelled ones (stopped mid-way or never started because of the failure).
//! - `race`: the first success wins and its state replaces the parent's; the others are aborted. If
//!   every path fails: `FORK_PARTIAL`.
//! - `settle`: every outcome is collected, in path order; path failures never fail the step.
//!
//! If the parent itself is aborted, the step fails with `CANCELLED`, never `FORK_PARTIAL`.

use std::marker::PhantomData;
use std::sync::Arc;

use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use futures_util::stream::FuturesUnordered;
use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;

use super::{Origin, Step, StepBody, StepNode, decode, encode, execute as execute_step};
use crate::context::{ChildSpec, Context};
use crate::{Error, Result};

/// The outcome of one path in `settle` mode.
#[derive(Debug)]
#[non_exhaustive]
pub enum Settled<O> {
    /// The path succeeded.
    Fulfilled {
        /// The path's step id.
        step_id: String,
        /// Its output.
        value: O,
    },
    /// The path failed.
    Rejected {
        /// The path's step id.
        step_id: String,
        /// Its error.
        error: Error,
    },
}

type Merge = dyn Fn(Vec<Value>) -> Result<Value> + Send + Sync;
type SettleMerge = dyn Fn(Vec<Settled<Value>>) -> Result<Value> + Send + Sync;
type Paths = dyn Fn(&Value, &Context) -> Result<Vec<Arc<StepNode>>> + Send + Sync;

pub(crate) enum Mode {
    All(Box<Merge>),
    Race,
    Settle(Box<SettleMerge>),
}

pub(crate) struct ParallelSpec {
    pub(crate) paths: Vec<Arc<StepNode>>,
    dynamic: Option<Box<Paths>>,
    concurrency: Option<usize>,
    mode: Mode,
}

/// Builds an `in_parallel` step; see [`in_parallel`].
#[must_use = "a builder does nothing until a mode is chosen"]
pub struct ParallelBuilder<I, O> {
    id: String,
    paths: Vec<Arc<StepNode>>,
    dynamic: Option<Box<Paths>>,
    concurrency: Option<usize>,
    _types: PhantomData<fn(I) -> O>,
}

/// Starts an `in_parallel` step: add paths with [`ParallelBuilder::path`] (or [`ParallelBuilder::paths`]),
/// then pick a mode with [`ParallelBuilder::all`], [`ParallelBuilder::race`] or [`ParallelBuilder::settle`].
///
/// # Examples
/// ```
/// use noetic_core::{in_parallel, run_code, Context};
/// let double = run_code("double", |n: i64, _: Context| async move { Ok::<_, std::convert::Infallible>(n * 2) });
/// let square = run_code("square", |n: i64, _: Context| async move { Ok::<_, std::convert::Infallible>(n * n) });
/// let both = in_parallel("both").path(double).path(square).all(|outputs: Vec<i64>| outputs.iter().sum::<i64>());
/// assert_eq!(both.id(), "both");
/// ```
pub fn in_parallel<I, O>(id: impl Into<String>) -> ParallelBuilder<I, O> {
    ParallelBuilder {
        id: id.into(),
        paths: Vec::new(),
        dynamic: None,
        concurrency: None,
        _types: PhantomData,
    }
}

impl<I, O> ParallelBuilder<I, O>
where
    I: DeserializeOwned + 'static,
    O: DeserializeOwned + Send + 'static,
{
    /// Adds a path.
    pub fn path(mut self, step: impl Into<Step<I, O>>) -> Self {
        self.paths.push(step.into().node);
        self
    }

    /// Computes the paths from the input at run time (after any static paths).
    pub fn paths<F>(mut self, paths: F) -> Self
    where
        F: Fn(&I, &Context) -> Vec<Step<I, O>> + Send + Sync + 'static,
    {
        let step_id = self.id.clone();
        self.dynamic = Some(Box::new(move |input: &Value, ctx: &Context| {
            let typed: I = decode(&step_id, "input", input.clone())?;
            Ok(paths(&typed, ctx)
                .into_iter()
                .map(|step| step.node)
                .collect())
        }));
        self
    }

    /// Runs at most `limit` paths at once (default: all).
    pub fn concurrency(mut self, limit: usize) -> Self {
        self.concurrency = Some(limit.max(1));
        self
    }

    /// `all` mode: every path must succeed; `merge` gets the outputs in path order.
    pub fn all<M, F>(self, merge: F) -> Step<I, M>
    where
        M: Serialize + 'static,
        F: Fn(Vec<O>) -> M + Send + Sync + 'static,
    {
        let step_id = self.id.clone();
        let erased = move |values: Vec<Value>| -> Result<Value> {
            let typed = values
                .into_iter()
                .map(|value| decode(&step_id, "output", value))
                .collect::<Result<Vec<O>>>()?;
            encode(&step_id, "output", merge(typed))
        };
        self.finish(Mode::All(Box::new(erased)))
    }

    /// `race` mode: the first path to succeed wins.
    pub fn race(self) -> Step<I, O> {
        self.finish(Mode::Race)
    }

    /// `settle` mode: `merge` gets every path's outcome, in path order.
    pub fn settle<M, F>(self, merge: F) -> Step<I, M>
    where
        M: Serialize + 'static,
        F: Fn(Vec<Settled<O>>) -> M + Send + Sync + 'static,
    {
        let step_id = self.id.clone();
        let erased = move |outcomes: Vec<Settled<Value>>| -> Result<Value> {
            let mut typed = Vec::with_capacity(outcomes.len());
            for outcome in outcomes {
                typed.push(match outcome {
                    Settled::Fulfilled {
                        step_id: path,
                        value,
                    } => match decode::<O>(&step_id, "output", value) {
                        Ok(value) => Settled::Fulfilled {
                            step_id: path,
                            value,
                        },
                        Err(error) => Settled::Rejected {
                            step_id: path,
                            error,
                        },
                    },
                    Settled::Rejected { step_id, error } => Settled::Rejected { step_id, error },
                });
            }
            encode(&step_id, "output", merge(typed))
        };
        self.finish(Mode::Settle(Box::new(erased)))
    }

    fn finish<M>(self, mode: Mode) -> Step<I, M> {
        Step::from_node(StepNode {
            id: self.id,
            body: StepBody::InParallel(ParallelSpec {
                paths: self.paths,
                dynamic: self.dynamic,
                concurrency: self.concurrency,
                mode,
            }),
        })
    }
}

pub(crate) async fn execute(
    step_id: &str,
    spec: &ParallelSpec,
    input: Value,
    origin: Origin,
    ctx: &Context,
) -> Result<Value> {
    let mut paths = spec.paths.clone();
    if let Some(dynamic) = &spec.dynamic {
        let computed = dynamic(&input, ctx)?;
        // Computed paths were not part of the tree checked before the run: check them now.
        computed.iter().try_for_each(|node| node.validate())?;
        paths.extend(computed);
    }
    let count = paths.len();
    if count == 0 {
        return match &spec.mode {
            Mode::All(merge) => merge(Vec::new()),
            Mode::Settle(merge) => merge(Vec::new()),
            Mode::Race => Err(Error::ForkPartial {
                step_id: step_id.to_owned(),
                succeeded: Vec::new(),
                failed: Vec::new(),
                cancelled: Vec::new(),
            }),
        };
    }
    let limit = spec.concurrency.unwrap_or(count).max(1);
    let items = ctx.items();
    let children: Vec<Context> = (0..count)
        .map(|_| {
            // Paths never take the turn's steers: the parent applies them at its next point.
            ctx.child(ChildSpec {
                items: items.clone(),
                layers: None,
                forward_steers: false,
            })
        })
        .collect();
    drop(items);

    let mut running = FuturesUnordered::new();
    let mut next = 0;
    while next < limit.min(count) {
        running.push(run_path(
            next,
            paths[next].clone(),
            input.clone(),
            origin.clone(),
            children[next].clone(),
        ));
        next += 1;
    }
    let mut results: Vec<Option<Result<Value>>> = (0..count).map(|_| None).collect();
    while let Some((index, result)) = running.next().await {
        let failed = result.is_err();
        let succeeded = !failed;
        results[index] = Some(result);
        match spec.mode {
            Mode::All(_) if failed => break,
            Mode::Race if succeeded => break,
            _ => {}
        }
        if next < count {
            running.push(run_path(
                next,
                paths[next].clone(),
                input.clone(),
                origin.clone(),
                children[next].clone(),
            ));
            next += 1;
        }
    }
    // Whatever is still running lost (race) or is moot (all failed): abort and drop it.
    for child in &children {
        child.abort(Some("parallel sibling finished".to_owned()));
    }
    drop(running);
    // The paths are done: close those that initialized layers of their own (e.g. by `with_context`).
    for (child, result) in children.iter().zip(&results) {
        if crate::layer::lifecycle::is_open(child) {
            let outcome = match result {
                Some(result) => crate::layer::lifecycle::outcome_of(child, result),
                None => crate::layer::Outcome::Aborted,
            };
            crate::layer::lifecycle::close(child, outcome).await;
        }
    }
    ctx.check_aborted()?;

    match &spec.mode {
        Mode::All(merge) => {
            if results.iter().all(|result| matches!(result, Some(Ok(_)))) {
                let values = results
                    .into_iter()
                    .flatten()
                    .collect::<Result<Vec<Value>>>()?;
                merge(values)
            } else {
                Err(fork_partial(step_id, results, next))
            }
        }
        Mode::Race => {
            let winner = results
                .iter()
                .position(|result| matches!(result, Some(Ok(_))));
            match winner {
                Some(index) => {
                    ctx.set_state(children[index].state());
                    match results.swap_remove(index) {
                        Some(result) => result,
                        None => Err(Error::cancelled(None)),
                    }
                }
                None => Err(fork_partial(step_id, results, next)),
            }
        }
        Mode::Settle(merge) => {
            let outcomes = results
                .into_iter()
                .zip(&paths)
                .map(|(result, node)| match result {
                    Some(Ok(value)) => Settled::Fulfilled {
                        step_id: node.id.clone(),
                        value,
                    },
                    Some(Err(error)) => Settled::Rejected {
                        step_id: node.id.clone(),
                        error,
                    },
                    None => Settled::Rejected {
                        step_id: node.id.clone(),
                        error: Error::cancelled(None),
                    },
                })
                .collect();
            merge(outcomes)
        }
    }
}

/// `started` paths were started: those without a result were stopped mid-way, the others never ran.
/// A path that ended `CANCELLED` itself counts as cancelled, not failed.
fn fork_partial(step_id: &str, results: Vec<Option<Result<Value>>>, started: usize) -> Error {
    let mut succeeded = Vec::new();
    let mut failed = Vec::new();
    let mut cancelled = Vec::new();
    for (index, result) in results.into_iter().enumerate() {
        match result {
            Some(Ok(_)) => succeeded.push(index),
            Some(Err(error)) if error.is_cancelled() => cancelled.push((index, Box::new(error))),
            Some(Err(error)) => failed.push((index, Box::new(error))),
            None => {
                let reason = if index < started {
                    "stopped: a sibling path failed"
                } else {
                    "not run: a sibling path failed"
                };
                cancelled.push((index, Box::new(Error::cancelled(Some(reason.to_owned())))));
            }
        }
    }
    Error::ForkPartial {
        step_id: step_id.to_owned(),
        succeeded,
        failed,
        cancelled,
    }
}

/// One path, boxed so the set of running paths has a concrete, `Send` type.
fn run_path(
    index: usize,
    node: Arc<StepNode>,
    input: Value,
    origin: Origin,
    child: Context,
) -> BoxFuture<'static, (usize, Result<Value>)> {
    Box::pin(async move {
        let result = execute_step(&node, input, origin, &child).await;
        (index, result)
    })
}
