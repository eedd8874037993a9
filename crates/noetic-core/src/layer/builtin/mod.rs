//! Built-in layers: small, configurable [`ContextLayer`](super::ContextLayer)s for common needs.
//!
//! | Layer | id · slot · band | What it does |
//! |---|---|---|
//! | [`HistoryLayer`] | `history` · 275 · — | Windows the history the model sees to the newest `n` items. |
//! | [`InstructionsLayer`] | `instructions` · 105 · before history | Recalls fixed instructions. |
//! | [`ScratchpadLayer`] | `scratchpad` · 100 · before history | Recalls notes written by [`scratchpad_tool`]. |
//! | [`ToolCallsLayer`] | `tool_calls` · 110 · before history | Remembers calls of tracked tools. |
//! | [`SteeringLayer`] | `steering` · 90 · — | Denies or guides tool calls and responses by rule. |
//!
//! None of them is special-cased by the engine: each uses only the public hooks.

mod history;
mod instructions;
mod scratchpad;
mod steering;
mod tool_calls;

pub use history::HistoryLayer;
pub use instructions::InstructionsLayer;
pub use scratchpad::{SCRATCHPAD_TOOL, ScratchpadLayer, scratchpad_tool};
pub use steering::SteeringLayer;
pub use tool_calls::ToolCallsLayer;
