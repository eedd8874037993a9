//! The Anthropic Messages API, natively: `POST {base}/messages` with `stream: true`, decoded into the
//! same OpenResponses events and items as the other wires, so swapping `OpenRouter` for `Anthropic`
//! changes nothing else. The body is built in `request.rs`, the events read in `events.rs` and turned
//! into items by `decoder.rs`.
//!
//! The key goes in `x-api-key` (never `Authorization`), `anthropic-version: 2023-06-01` on every
//! request, beta features by [`AnthropicBuilder::beta`]. Usage follows the wire's rules: the
//! `message_start` usage overwritten field by field by `message_delta` (cumulative, never summed);
//! input is the whole prompt (uncached + cache writes + cache reads), cached the cache reads.

mod decoder;
mod events;
mod request;
#[cfg(test)]
mod tests;

use futures_util::future::BoxFuture;
use noetic_core::ModelProvider;
use noetic_core::model::{ModelRequest, ModelStream, PromptCache};
use serde_json::{Map, Value};

pub(crate) use decoder::AnthropicDecoder;
use decoder::whole_message_events;
pub use request::DEFAULT_MAX_TOKENS;
use request::{BodyOptions, request_body};

use crate::error::ProviderError;
use crate::provider::{HttpProvider, Settings, WholeResponse, Wire, shared_setters};
use crate::responses::read_key;

/// The Anthropic API.
pub const ANTHROPIC_BASE_URL: &str = "https://api.anthropic.com/v1";
/// The `anthropic-version` every request sends.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// A provider speaking the Anthropic Messages API over streaming HTTP.
#[derive(Clone, Debug)]
pub struct Anthropic {
    provider: HttpProvider<MessagesWire>,
}

/// Builds an [`Anthropic`] provider.
#[derive(Clone, Debug)]
#[must_use = "call .build() to get the provider"]
pub struct AnthropicBuilder {
    settings: Settings<BodyOptions>,
    betas: Vec<String>,
}

impl Anthropic {
    /// The env var that holds the key.
    pub const API_KEY_VAR: &'static str = "ANTHROPIC_API_KEY";

    /// A provider for the Anthropic API with the key from `ANTHROPIC_API_KEY`.
    ///
    /// # Errors
    /// [`ProviderError::MissingApiKey`] when the variable is unset or empty.
    pub fn from_env() -> Result<Anthropic, ProviderError> {
        Self::new(read_key(Self::API_KEY_VAR)?)
    }

    /// A provider for the Anthropic API with `api_key`.
    ///
    /// # Errors
    /// [`ProviderError::InvalidConfig`] for a key that is not a valid header value.
    pub fn new(api_key: impl Into<String>) -> Result<Anthropic, ProviderError> {
        Self::builder(api_key).build()
    }

    /// A builder for the Anthropic API with `api_key`; `.base_url(…)` points it at a proxy or a
    /// compatible server.
    pub fn builder(api_key: impl Into<String>) -> AnthropicBuilder {
        let mut settings = Settings::new("anthropic", ANTHROPIC_BASE_URL.to_owned());
        settings.api_key = Some(crate::secret::ApiKey::new(api_key.into()));
        AnthropicBuilder {
            settings,
            betas: Vec::new(),
        }
    }

    /// The provider's name (used in errors).
    pub fn name(&self) -> &str {
        self.provider.name()
    }
}

impl AnthropicBuilder {
    shared_setters!("anthropic");

    /// Extended thinking with a budget of `budget_tokens` (`thinking: {"type": "enabled", …}`) for
    /// steps that set none (`call_model(..).thinking(..)` wins); the thinking comes back as reasoning
    /// items, replayed with their signatures.
    pub fn thinking(mut self, budget_tokens: u64) -> Self {
        self.settings.options.thinking_budget = Some(budget_tokens);
        self
    }

    /// Prompt-cache breakpoints for steps that set none (`call_model(..).prompt_cache(..)` wins;
    /// default [`PromptCache::Off`]).
    pub fn cache(mut self, cache: PromptCache) -> Self {
        self.settings.options.cache = cache;
        self
    }

    /// `max_tokens` for a step that sets no `max_output_tokens` (default [`DEFAULT_MAX_TOKENS`]).
    pub fn max_tokens(mut self, max_tokens: u64) -> Self {
        self.settings.options.max_tokens = Some(max_tokens);
        self
    }

    /// Adds an `anthropic-beta` feature (e.g. `structured-outputs-2025-11-13`); several are sent
    /// comma-separated.
    pub fn beta(mut self, feature: impl Into<String>) -> Self {
        self.betas.push(feature.into());
        self
    }

    /// Builds the provider.
    ///
    /// # Errors
    /// [`ProviderError::InvalidConfig`] for an invalid header name or value (naming the header), a
    /// key that is not a valid header value, or a base URL that is not HTTP(S).
    pub fn build(self) -> Result<Anthropic, ProviderError> {
        let AnthropicBuilder {
            mut settings,
            betas,
        } = self;
        // Ours first: a caller's header of the same name replaces it.
        let mut headers = vec![crate::http::CustomHeader {
            name: "anthropic-version".to_owned(),
            value: ANTHROPIC_VERSION.to_owned(),
            sensitive: false,
        }];
        if !betas.is_empty() {
            headers.push(crate::http::CustomHeader {
                name: "anthropic-beta".to_owned(),
                value: betas.join(","),
                sensitive: false,
            });
        }
        headers.append(&mut settings.headers);
        settings.headers = headers;
        Ok(Anthropic {
            provider: settings.build()?,
        })
    }
}

impl ModelProvider for Anthropic {
    fn stream<'a>(
        &'a self,
        request: &'a ModelRequest<'a>,
    ) -> BoxFuture<'a, noetic_core::Result<ModelStream>> {
        self.provider.stream(request)
    }
}

/// The Messages wire.
pub(crate) struct MessagesWire;

impl Wire for MessagesWire {
    type Options = BodyOptions;
    type Decoder = AnthropicDecoder;
    const PATH: &'static str = "messages";
    const KEY_HEADER: Option<&'static str> = Some("x-api-key");

    fn request_body(
        request: &ModelRequest<'_>,
        options: &BodyOptions,
        extra: &Map<String, Value>,
    ) -> Result<Vec<u8>, ProviderError> {
        request_body(request, options, extra)
    }

    fn decoder() -> AnthropicDecoder {
        AnthropicDecoder::new()
    }

    fn whole_response() -> Option<WholeResponse> {
        Some(whole_message_events)
    }
}
