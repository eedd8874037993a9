//! # noetic-providers
//!
//! Streaming model providers for noetic, implementing [`noetic_core::ModelProvider`] over HTTP:
//!
//! - [`OpenResponses`]: `POST {base}/responses` with `stream: true`, for [`OpenRouter`]
//!   (`OPENROUTER_API_KEY`), [`OpenAI`] (`OPENAI_API_KEY`) and any compatible server.
//! - [`Anthropic`]: `POST {base}/messages`, the Anthropic Messages API natively (`ANTHROPIC_API_KEY`):
//!   extended thinking with signatures, prompt-cache breakpoints and their accounting, server tools.
//! - [`ChatCompletions`]: `POST {base}/chat/completions` for OpenAI-compatible servers (vLLM,
//!   llama.cpp, Ollama, OpenRouter's chat endpoint), translated into the same OpenResponses events.
//! - [`DemoModel`]: the offline demo model, a deterministic OpenResponses server on 127.0.0.1 inside the
//!   process, so examples and the CLI run with no key through the same HTTP path as a real provider.
//!
//! Requests that fail before their response starts (429, 5xx, connection failures) are retried with
//! backoff honouring `Retry-After`; a stream that has started is never re-sent. API keys never appear in
//! `Debug` output, errors or logs.
//!
//! ```no_run
//! use noetic_core::AgentHarness;
//! use noetic_providers::OpenRouter;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let harness = AgentHarness::builder("agent").provider("openrouter", OpenRouter::from_env()?).build()?;
//! # Ok(()) }
//! ```
#![warn(missing_docs)]

mod anthropic;
#[cfg(test)]
mod bad_bytes;
mod body;
mod chat;
mod decode;
mod demo;
mod error;
#[cfg(test)]
mod grammar;
mod http;
mod provider;
mod responses;
mod secret;
mod sse;
mod stream;
mod strict;

pub use anthropic::{
    ANTHROPIC_BASE_URL, ANTHROPIC_VERSION, Anthropic, AnthropicBuilder, DEFAULT_MAX_TOKENS,
};
pub use chat::{ChatCompletions, ChatCompletionsBuilder};
pub use demo::{DEMO_MODEL_ID, DemoModel};
pub use error::{CODES, ProviderError};
pub use http::RetryConfig;
/// Prompt-cache breakpoints ([`Anthropic`]): a provider setting, or per step with
/// `call_model(..).prompt_cache(..)`.
pub use noetic_core::model::PromptCache;
pub use responses::{
    OPENAI_BASE_URL, OPENROUTER_BASE_URL, OpenAI, OpenResponses, OpenResponsesBuilder, OpenRouter,
};
pub use sse::{DEFAULT_MAX_EVENT_BYTES, SseDecoder, SseEvent};

/// A wire of one's own on this crate's HTTP plumbing: implement [`Wire`](wire::Wire) (the path, the
/// key's header, the request body, a [`WireDecoder`](wire::WireDecoder) for the events) and
/// [`HttpProvider::builder`](wire::HttpProvider::builder) gives a provider with the retries, the
/// redaction of secrets, the SSE framing, the size cap and the stream's errors the built-in wires
/// have. [`Anthropic`] is built exactly so. `docs/providers.md` ("Writing a provider crate") has the
/// rest, and the provider conformance kit to hold it to.
pub mod wire {
    pub use crate::decode::WireDecoder;
    pub use crate::provider::{HttpProvider, HttpProviderBuilder, WholeResponse, Wire};
}
pub use strict::strict_schema;
