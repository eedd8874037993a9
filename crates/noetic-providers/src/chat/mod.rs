//! Chat Completions (OpenAI-compatible servers: vLLM, llama.cpp, Ollama, OpenRouter's chat endpoint).

mod provider;
pub(crate) mod wire;

pub use provider::{ChatCompletions, ChatCompletionsBuilder};
