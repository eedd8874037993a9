//! The Chat Completions provider: `POST {base}/chat/completions` with `stream: true`.

use futures_util::future::BoxFuture;
use noetic_core::ModelProvider;
use noetic_core::model::{ModelRequest, ModelStream};
use serde_json::{Map, Value};

use super::decoder::ChatDecoder;
use super::request::request_body;
use crate::error::ProviderError;
use crate::provider::{HttpProvider, Settings, Wire, shared_setters};

/// A provider speaking Chat Completions (vLLM, llama.cpp, Ollama, OpenRouter's chat endpoint…),
/// translated into OpenResponses events and items.
#[derive(Clone, Debug)]
pub struct ChatCompletions {
    provider: HttpProvider<ChatWire>,
}

/// Builds a [`ChatCompletions`] provider.
#[derive(Clone, Debug)]
#[must_use = "call .build() to get the provider"]
pub struct ChatCompletionsBuilder {
    settings: Settings<()>,
}

impl ChatCompletions {
    /// A builder for a server at `base_url` (the part before `/chat/completions`, e.g.
    /// `http://localhost:11434/v1` for Ollama).
    pub fn builder(base_url: impl Into<String>) -> ChatCompletionsBuilder {
        ChatCompletionsBuilder {
            settings: Settings::new("chat", base_url.into()),
        }
    }

    /// The provider's name (used in errors).
    pub fn name(&self) -> &str {
        self.provider.name()
    }
}

impl ChatCompletionsBuilder {
    shared_setters!("chat");

    /// Builds the provider.
    ///
    /// # Errors
    /// [`ProviderError::InvalidConfig`] for an invalid header name or value (naming the header), or a
    /// base URL that is not HTTP(S).
    pub fn build(self) -> Result<ChatCompletions, ProviderError> {
        Ok(ChatCompletions {
            provider: self.settings.build()?,
        })
    }
}

impl ModelProvider for ChatCompletions {
    fn stream<'a>(
        &'a self,
        request: &'a ModelRequest<'a>,
    ) -> BoxFuture<'a, noetic_core::Result<ModelStream>> {
        self.provider.stream(request)
    }
}

/// The Chat Completions wire: chunks translated into OpenResponses events by [`ChatDecoder`].
pub(crate) struct ChatWire;

impl Wire for ChatWire {
    type Options = ();
    type Decoder = ChatDecoder;
    const PATH: &'static str = "chat/completions";

    fn request_body(
        request: &ModelRequest<'_>,
        _options: &(),
        extra: &Map<String, Value>,
    ) -> Result<Vec<u8>, ProviderError> {
        request_body(request, extra)
    }

    fn decoder() -> ChatDecoder {
        ChatDecoder::new()
    }
}
