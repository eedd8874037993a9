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
    /// [`crate::acp_agent`].
    AcpAgent,
}

impl StepKind {
    /// The kind's name as events and spans spell it (`run_code`, `call_model`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            StepKind::RunCode => "run_code",
            StepKind::CallModel => "call_model",
            StepKind::InvokeTool => "invoke_tool",
            StepKind::Conditional => "conditional",
            StepKind::InParallel => "in_parallel",
            StepKind::Spawn => "spawn",
            StepKind::WithContext => "with_context",
            StepKind::Loop => "loop",
            StepKind::Sequence => "sequence",
            StepKind::Schedule => "schedule",
            StepKind::AcpAgent => "acp_agent",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::StepKind;

    #[test]
    fn as_str_is_the_serde_name() {
        for kind in [
            StepKind::RunCode,
            StepKind::CallModel,
            StepKind::InvokeTool,
            StepKind::Conditional,
            StepKind::InParallel,
            StepKind::Spawn,
            StepKind::WithContext,
            StepKind::Loop,
            StepKind::Sequence,
            StepKind::Schedule,
            StepKind::AcpAgent,
        ] {
            assert_eq!(
                serde_json::to_value(kind).expect("serializes"),
                serde_json::Value::from(kind.as_str())
            );
        }
    }
}
