//! The OpenResponses provider: `POST {base}/responses` with `stream: true`, for OpenRouter, OpenAI and
//! any compatible server. The wire itself is in `request.rs` (the body) and `events.rs` (the events).

mod events;
mod request;

use futures_util::future::BoxFuture;
use noetic_core::ModelProvider;
use noetic_core::model::{ModelRequest, ModelStream};
use serde_json::{Map, Value};

use crate::error::ProviderError;
use crate::provider::{HttpProvider, Settings, WholeResponse, Wire, shared_setters};
#[cfg(test)]
pub(crate) use events::parse_event;
use events::{ResponsesDecoder, whole_response_events};
use request::{BodyOptions, request_body};

/// The OpenRouter API.
pub const OPENROUTER_BASE_URL: &str = "https://openrouter.ai/api/v1";
/// The OpenAI API.
pub const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";

/// A provider speaking OpenResponses over streaming HTTP.
#[derive(Clone, Debug)]
pub struct OpenResponses {
    provider: HttpProvider<ResponsesWire>,
}

/// Builds an [`OpenResponses`] provider.
#[derive(Clone, Debug)]
#[must_use = "call .build() to get the provider"]
pub struct OpenResponsesBuilder {
    settings: Settings<BodyOptions>,
}

impl OpenResponses {
    /// A builder for a server at `base_url` (the part before `/responses`, e.g. `http://localhost:8000/v1`).
    pub fn builder(base_url: impl Into<String>) -> OpenResponsesBuilder {
        OpenResponsesBuilder {
            settings: Settings::new("openresponses", base_url.into()),
        }
    }

    /// The provider's name (used in errors).
    pub fn name(&self) -> &str {
        self.provider.name()
    }
}

impl OpenResponsesBuilder {
    shared_setters!("openresponses");

    /// `store` in the body (OpenAI keeps responses unless `false`).
    pub fn store(mut self, store: bool) -> Self {
        self.settings.options.store = Some(store);
        self
    }

    /// Adds an `include` entry (e.g. `reasoning.encrypted_content`).
    pub fn include(mut self, include: impl Into<String>) -> Self {
        self.settings.options.include.push(include.into());
        self
    }

    /// Offers tools with `strict: true` and schemas rewritten by [`crate::strict_schema`], so the model's
    /// arguments are guaranteed to match (OpenAI's strict function calling). Off by default: not every
    /// compatible server accepts it.
    pub fn strict_tools(mut self, strict: bool) -> Self {
        self.settings.options.strict_tools = strict;
        self
    }

    /// Builds the provider.
    ///
    /// # Errors
    /// [`ProviderError::InvalidConfig`] for an invalid header name or value (naming the header), or a
    /// base URL that is not HTTP(S).
    pub fn build(self) -> Result<OpenResponses, ProviderError> {
        Ok(OpenResponses {
            provider: self.settings.build()?,
        })
    }
}

impl ModelProvider for OpenResponses {
    fn stream<'a>(
        &'a self,
        request: &'a ModelRequest<'a>,
    ) -> BoxFuture<'a, noetic_core::Result<ModelStream>> {
        self.provider.stream(request)
    }
}

/// The OpenResponses wire: events one to one, whole JSON responses accepted.
pub(crate) struct ResponsesWire;

impl Wire for ResponsesWire {
    type Options = BodyOptions;
    type Decoder = ResponsesDecoder;
    const PATH: &'static str = "responses";

    fn request_body(
        request: &ModelRequest<'_>,
        options: &BodyOptions,
        extra: &Map<String, Value>,
    ) -> Result<Vec<u8>, ProviderError> {
        request_body(request, options, extra)
    }

    fn decoder() -> ResponsesDecoder {
        ResponsesDecoder
    }

    fn whole_response() -> Option<WholeResponse> {
        Some(whole_response_events)
    }
}

/// Constructors for OpenRouter (`OPENROUTER_API_KEY`).
#[derive(Debug)]
pub struct OpenRouter;

impl OpenRouter {
    /// The env var that holds the key.
    pub const API_KEY_VAR: &'static str = "OPENROUTER_API_KEY";

    /// A provider for OpenRouter's Responses API with the key from `OPENROUTER_API_KEY`.
    ///
    /// # Errors
    /// [`ProviderError::MissingApiKey`] when the variable is unset or empty.
    pub fn from_env() -> Result<OpenResponses, ProviderError> {
        Self::builder(read_key(Self::API_KEY_VAR)?).build()
    }

    /// A builder preset for OpenRouter with `api_key`; add attribution with
    /// `.header("HTTP-Referer", …)` and `.header("X-Title", …)`.
    pub fn builder(api_key: impl Into<String>) -> OpenResponsesBuilder {
        OpenResponses::builder(OPENROUTER_BASE_URL)
            .name("openrouter")
            .api_key(api_key)
    }
}

/// Constructors for OpenAI (`OPENAI_API_KEY`).
#[derive(Debug)]
pub struct OpenAI;

impl OpenAI {
    /// The env var that holds the key.
    pub const API_KEY_VAR: &'static str = "OPENAI_API_KEY";

    /// A provider for OpenAI's Responses API with the key from `OPENAI_API_KEY`.
    ///
    /// # Errors
    /// [`ProviderError::MissingApiKey`] when the variable is unset or empty.
    pub fn from_env() -> Result<OpenResponses, ProviderError> {
        Self::builder(read_key(Self::API_KEY_VAR)?).build()
    }

    /// A builder preset for OpenAI: stateless (`store: false`) with encrypted reasoning included, so
    /// reasoning items can be replayed in the next request.
    pub fn builder(api_key: impl Into<String>) -> OpenResponsesBuilder {
        OpenResponses::builder(OPENAI_BASE_URL)
            .name("openai")
            .api_key(api_key)
            .store(false)
            .include("reasoning.encrypted_content")
    }
}

pub(crate) fn read_key(var: &'static str) -> Result<String, ProviderError> {
    match std::env::var(var) {
        Ok(key) if !key.trim().is_empty() => Ok(key),
        _ => Err(ProviderError::MissingApiKey { env_var: var }),
    }
}
