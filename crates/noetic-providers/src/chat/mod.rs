//! Chat Completions (OpenAI-compatible servers: vLLM, llama.cpp, Ollama, OpenRouter's chat endpoint),
//! translated to and from the OpenResponses model so the rest of the system sees one format.
//!
//! Out ([`request`], [`messages`]): a round's items become chat `messages`. Function calls join the
//! assistant message right before them as `tool_calls`, their outputs become `tool` messages, and
//! reasoning items are dropped, except OpenRouter's `reasoning_details`, which ride on the next
//! assistant message (Anthropic models need their signed reasoning replayed).
//!
//! In ([`chunk`], [`decoder`], [`items`]): [`ChatDecoder`] assembles output items from the chunks'
//! deltas and emits the OpenResponses events a Responses server would have sent:
//! `output_item.added`, text/reasoning/argument deltas, `output_item.done` with the complete item, and
//! one terminal event carrying status, usage and cost.

mod chunk;
mod decoder;
mod items;
mod messages;
mod provider;
mod request;
#[cfg(test)]
mod tests;

#[cfg(test)]
pub(crate) use decoder::ChatDecoder;
pub use provider::{ChatCompletions, ChatCompletionsBuilder};
