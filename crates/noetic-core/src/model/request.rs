//! What one model round sends.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::item::Item;

/// One round's request, borrowed from the `call_model` step that assembles it.
///
/// Borrowing keeps a round free of copies of the history: the provider serializes straight from the
/// step's working conversation.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct ModelRequest<'a> {
    /// The model id (`vendor/model` for OpenRouter, the bare id for OpenAI).
    pub model: &'a str,
    /// System instructions (the step's, then the texts of system items).
    pub instructions: Option<&'a str>,
    /// The conversation (system items removed).
    pub input: &'a [Item],
    /// The function tools offered this round.
    pub tools: &'a [ToolSpec],
    /// Sampling parameters.
    pub params: &'a ModelParams,
    /// Structured output format, when the step asks for typed output.
    pub output: Option<&'a OutputFormat>,
    /// The 0-based round within the step.
    pub round: u32,
    /// The session thread, when the call runs in one.
    pub thread_id: Option<&'a str>,
    /// The resource (user, tenant) the call runs for, when set.
    pub resource_id: Option<&'a str>,
}

impl<'a> ModelRequest<'a> {
    /// A request for `model` with `input` and defaults for everything else.
    pub fn new(model: &'a str, input: &'a [Item], params: &'a ModelParams) -> Self {
        ModelRequest {
            model,
            instructions: None,
            input,
            tools: &[],
            params,
            output: None,
            round: 0,
            thread_id: None,
            resource_id: None,
        }
    }

    /// Sets the instructions.
    pub fn with_instructions(mut self, instructions: Option<&'a str>) -> Self {
        self.instructions = instructions;
        self
    }

    /// Sets the tools.
    pub fn with_tools(mut self, tools: &'a [ToolSpec]) -> Self {
        self.tools = tools;
        self
    }

    /// Sets the structured output format.
    pub fn with_output(mut self, output: Option<&'a OutputFormat>) -> Self {
        self.output = output;
        self
    }
}

/// Sampling parameters of a model call.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ModelParams {
    /// Sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Nucleus sampling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    /// Cap on output tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u64>,
    /// Stop sequences.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stop: Vec<String>,
    /// Extended thinking: the tokens a provider that supports a budget may spend on reasoning
    /// (Anthropic's `thinking.budget_tokens`); providers without one ignore it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking_budget: Option<u64>,
    /// Prompt-cache breakpoints, for providers that place them (Anthropic); `None` leaves it to the
    /// provider's own setting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_cache: Option<PromptCache>,
    /// Whether and which tool the model must call, in every round of the step (`None`: the
    /// provider's default, which lets the model choose).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
}

/// Whether and which of the offered tools the model must call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ToolChoice {
    /// The model chooses.
    Auto,
    /// No tool: text only.
    None,
    /// At least one tool, any of them.
    Required,
    /// This tool (its wire name).
    Tool(String),
}

/// Where a provider that caches prompts by breakpoints places them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum PromptCache {
    /// No breakpoints.
    #[default]
    Off,
    /// On the system prompt, the last tool and the last block of the last message (Anthropic: three
    /// of its four breakpoints), what users otherwise place by hand.
    Auto,
    /// After the messages marked with [`Item::with_cache_breakpoint`](crate::Item::with_cache_breakpoint)
    /// (the last four, Anthropic's limit).
    Explicit,
}

/// A JSON Schema response format for structured output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OutputFormat {
    /// The format's name on the wire (`output`).
    pub name: String,
    /// The JSON Schema of the expected output.
    pub schema: Value,
}

/// A function tool as offered to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// The wire name (sanitized to `[A-Za-z0-9_-]{1,64}`).
    pub name: String,
    /// What the tool does.
    pub description: String,
    /// The JSON Schema of the arguments.
    pub parameters: Value,
}
