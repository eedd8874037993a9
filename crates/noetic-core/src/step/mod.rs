//! Steps: typed, composable units of work, and the interpreter that runs them.
//!
//! A [`Step<I, O>`] takes an `I` and produces an `O`. Steps are built with the builders re-exported here
//! ([`run_code`], [`call_model`], [`invoke_tool`], [`conditional`], [`in_parallel`], [`spawn`],
//! [`loop_step`], [`sequence`], [`schedule`]) and composed into a tree that [`crate::AgentHarness::run`]
//! executes.
//!
//! Values crossing a step boundary are `Serialize + DeserializeOwned`: inside the tree they travel as
//! `serde_json::Value`, which is what lets steps of different types compose, lets JSON workflow documents
//! build the same trees, and lets the step ledger and checkpoints store outputs. The typed builders
//! convert at the edges, so user code only sees its own types.
//!
//! Every step runs through the interpreter, which at each step: refuses depth ≥ 64 (`STEP_FAILED`),
//! raises `CANCELLED` if the context is aborted, counts the step, calls `hooks.before_step`, emits
//! `step_started`, dispatches, emits `step_completed` and calls `hooks.after_step` with the result.

mod acp_agent;
pub(crate) mod call_model;
mod conditional;
mod interpreter;
mod invoke_tool;
mod loop_step;
mod parallel;
mod registry;
pub(crate) mod routed;
mod run_code;
mod schedule;
mod spawn;
pub mod until;
mod with_context;

pub use acp_agent::{AcpAgentBuilder, acp_agent};
pub use call_model::{CallModelBuilder, MAX_RECOVERIES, MAX_TOOL_ROUNDS, call_model};
pub use conditional::conditional;
pub use invoke_tool::{InvokeToolBuilder, invoke_tool};
pub use loop_step::{
    DEFAULT_MAX_ITERATIONS, LoopBuilder, LoopStart, SequenceBuilder, SequenceStart, loop_step,
    sequence,
};
pub use parallel::{ParallelBuilder, Settled, in_parallel};
pub use registry::StepRegistry;
pub use routed::{CANCEL_GRACE, STOP_GRACE};
pub use run_code::{Backoff, RetryPolicy, RunCodeBuilder, run_code};
pub use schedule::{ScheduleBuilder, ScheduleOnError, schedule};
pub use spawn::{SpawnBuilder, SteerMode, spawn};
pub use with_context::with_context;

pub(crate) use interpreter::{execute, execute_routed};

use std::marker::PhantomData;
use std::sync::Arc;

use serde::{Serialize, de::DeserializeOwned};
use serde_json::Value;

use crate::connection::Need;
use crate::error::StepFailure;
use crate::item::Item;
use crate::{Error, Result};

/// A typed step from `I` to `O`. Cheap to clone (an `Arc`).
pub struct Step<I, O> {
    pub(crate) node: Arc<StepNode>,
    _types: PhantomData<fn(I) -> O>,
}

impl<I, O> Clone for Step<I, O> {
    fn clone(&self) -> Self {
        Step {
            node: self.node.clone(),
            _types: PhantomData,
        }
    }
}

impl<I, O> std::fmt::Debug for Step<I, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Step")
            .field("id", &self.node.id)
            .field("kind", &self.node.kind())
            .finish()
    }
}

impl<I, O> Step<I, O> {
    pub(crate) fn from_node(node: StepNode) -> Self {
        Step {
            node: Arc::new(node),
            _types: PhantomData,
        }
    }

    pub(crate) fn from_arc(node: Arc<StepNode>) -> Self {
        Step {
            node,
            _types: PhantomData,
        }
    }

    /// The step's id.
    pub fn id(&self) -> &str {
        &self.node.id
    }

    /// The step's kind.
    pub fn kind(&self) -> StepKind {
        self.node.kind()
    }

    /// A handle to the step without its types (what hooks receive).
    pub fn as_ref(&self) -> StepRef {
        StepRef {
            node: self.node.clone(),
        }
    }

    /// Checks the tree: no blank ids, no blank models, no empty bodies, no retry policy of 0 attempts.
    ///
    /// # Errors
    /// [`Error::InvalidStep`] or [`Error::MissingModel`] naming the first offending step.
    pub fn validate(&self) -> Result<()> {
        self.node.validate()
    }
}

/// A step without its types, as hooks and events see it.
#[derive(Clone)]
pub struct StepRef {
    node: Arc<StepNode>,
}

impl StepRef {
    /// The step's id.
    pub fn id(&self) -> &str {
        &self.node.id
    }

    /// The step's kind.
    pub fn kind(&self) -> StepKind {
        self.node.kind()
    }
}

impl std::fmt::Debug for StepRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StepRef")
            .field("id", &self.node.id)
            .field("kind", &self.node.kind())
            .finish()
    }
}

pub use crate::step_kind::StepKind;

/// Where a step's input came from. It decides what a `call_model` does with a string input — only a
/// root input becomes a user message in the log: nothing else invents user messages — and what a
/// `spawn` seeds its child's log with. See `docs/model-calls.md` ("Input").
#[derive(Clone)]
pub(crate) enum Origin {
    /// The input of `run()`, a loop's `prepare_next` result, or what a spawned child (its own root) was
    /// handed: a non-empty string is appended to the log as a user message.
    Root,
    /// The messages that started a session turn, already in the turn's log as they were sent: never
    /// appended again; a `spawn` handed them seeds its child's log with them.
    Turn(Arc<[Item]>),
    /// The output of an earlier step of a sequence or loop body: input for this step, not a message
    /// from the user. A `call_model` sends it with its requests but never stores it, and does not send
    /// it at all when it is already the newest assistant message of the log (the previous answer).
    Forwarded,
    /// A loop's output fed back to its next iteration: nothing is sent or appended; the iteration
    /// continues from the log as it stands.
    FedBack,
}

/// A node of the step tree.
pub(crate) struct StepNode {
    pub(crate) id: String,
    pub(crate) body: StepBody,
}

pub(crate) enum StepBody {
    RunCode(run_code::RunCodeSpec),
    CallModel(Box<call_model::CallModelSpec>),
    InvokeTool(invoke_tool::InvokeToolSpec),
    Conditional(conditional::ConditionalSpec),
    InParallel(parallel::ParallelSpec),
    Spawn(spawn::SpawnSpec),
    WithContext(with_context::WithContextSpec),
    Loop(loop_step::LoopSpec),
    Sequence(Vec<Arc<StepNode>>),
    Schedule(schedule::ScheduleSpec),
    AcpAgent(Box<acp_agent::AcpAgentSpec>),
}

impl StepNode {
    pub(crate) fn kind(&self) -> StepKind {
        match &self.body {
            StepBody::RunCode(_) => StepKind::RunCode,
            StepBody::CallModel(_) => StepKind::CallModel,
            StepBody::InvokeTool(_) => StepKind::InvokeTool,
            StepBody::Conditional(_) => StepKind::Conditional,
            StepBody::InParallel(_) => StepKind::InParallel,
            StepBody::Spawn(_) => StepKind::Spawn,
            StepBody::WithContext(_) => StepKind::WithContext,
            StepBody::Loop(_) => StepKind::Loop,
            StepBody::Sequence(_) => StepKind::Sequence,
            StepBody::Schedule(_) => StepKind::Schedule,
            StepBody::AcpAgent(_) => StepKind::AcpAgent,
        }
    }

    pub(crate) fn validate(&self) -> Result<()> {
        if self.id.trim().is_empty() {
            return Err(Error::InvalidStep {
                step_id: self.id.clone(),
                problem: "step id is blank",
            });
        }
        match &self.body {
            StepBody::CallModel(spec) if spec.model.trim().is_empty() => Err(Error::MissingModel {
                step_id: self.id.clone(),
            }),
            StepBody::RunCode(spec) if spec.retry.is_some_and(|retry| retry.max_attempts == 0) => {
                Err(Error::InvalidStep {
                    step_id: self.id.clone(),
                    problem: "retry policy max_attempts is 0 (the first attempt counts: use 1 for no retries)",
                })
            }
            StepBody::Sequence(children) if children.is_empty() => Err(Error::InvalidStep {
                step_id: self.id.clone(),
                problem: "sequence has no steps",
            }),
            StepBody::Sequence(children) => children.iter().try_for_each(|child| child.validate()),
            StepBody::Loop(spec) => {
                if spec.until.is_none() {
                    return Err(Error::InvalidStep {
                        step_id: self.id.clone(),
                        problem: "loop has no until predicate",
                    });
                }
                if spec.body.is_empty() {
                    return Err(Error::InvalidStep {
                        step_id: self.id.clone(),
                        problem: "loop has no steps",
                    });
                }
                spec.body.iter().try_for_each(|child| child.validate())
            }
            StepBody::InParallel(spec) => spec.paths.iter().try_for_each(|child| child.validate()),
            StepBody::Spawn(spec) => spec.child.validate(),
            StepBody::WithContext(spec) => spec.child.validate(),
            StepBody::Schedule(spec) if spec.max_runs == Some(0) => Err(Error::InvalidStep {
                step_id: self.id.clone(),
                problem: "schedule max_runs is 0",
            }),
            StepBody::Schedule(spec) => spec.step.validate(),
            StepBody::AcpAgent(spec) => spec.validate(&self.id),
            _ => Ok(()),
        }
    }
}

impl StepNode {
    /// Calls `visit` with every connection need declared in this tree, depth first in tree order.
    ///
    /// Only the static tree is walked: a `conditional`'s route and dynamic parallel paths are chosen at
    /// run time, so their needs cannot be seen here. A new composite step kind must list its children
    /// below, or the needs beneath it go unchecked.
    pub(crate) fn try_for_each_need(
        &self,
        visit: &mut dyn FnMut(&Need) -> Result<()>,
    ) -> Result<()> {
        let own: &[Need] = match &self.body {
            StepBody::RunCode(spec) => &spec.needs,
            StepBody::CallModel(spec) => &spec.needs,
            _ => &[],
        };
        own.iter().try_for_each(&mut *visit)?;
        let children: &[Arc<StepNode>] = match &self.body {
            StepBody::Sequence(children) => children,
            StepBody::Loop(spec) => &spec.body,
            StepBody::InParallel(spec) => &spec.paths,
            StepBody::Spawn(spec) => std::slice::from_ref(&spec.child),
            StepBody::WithContext(spec) => std::slice::from_ref(&spec.child),
            StepBody::Schedule(spec) => std::slice::from_ref(&spec.step),
            _ => &[],
        };
        children
            .iter()
            .try_for_each(|child| child.try_for_each_need(visit))
    }
}

/// Converts a step's input from the tree's JSON value into its type.
pub(crate) fn decode<T: DeserializeOwned>(
    step_id: &str,
    direction: &'static str,
    value: Value,
) -> Result<T> {
    serde_json::from_value(value).map_err(|source| Error::StepFailed {
        step_id: step_id.to_owned(),
        cause: StepFailure::TypeMismatch {
            direction,
            message: source.to_string(),
        },
    })
}

/// Converts a step's typed output into the tree's JSON value.
pub(crate) fn encode<T: Serialize>(
    step_id: &str,
    direction: &'static str,
    value: T,
) -> Result<Value> {
    serde_json::to_value(value).map_err(|source| Error::StepFailed {
        step_id: step_id.to_owned(),
        cause: StepFailure::TypeMismatch {
            direction,
            message: source.to_string(),
        },
    })
}
