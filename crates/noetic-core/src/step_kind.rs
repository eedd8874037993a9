//! `StepKind`: the kind of a step, as events and hooks name it. A leaf: it imports nothing of the
//! crate.

use serde::{Deserialize, Serialize};

/// The kind of a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum StepKind {
    /// [`crate::run_code`].
    RunCode,
    /// [`crate::call_model`].
    CallModel,
    /// [`crate::invoke_tool`].
    InvokeTool,
    /// [`crate::conditional`].
    Conditional,
    /// [`crate::in_parallel`].
    InParallel,
    /// [`crate::spawn`].
    Spawn,
    /// [`crate::with_context`].
    WithContext,
    /// [`crate::loop_step`].
    Loop,
    /// [`crate::sequence`].
    Sequence,
    /// [`crate::schedule`].
    Schedule,
}
