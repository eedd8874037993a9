//! The OpenResponses provider: `POST {base}/responses` with `stream: true`, for OpenRouter, OpenAI and
//! any compatible server.

pub(crate) mod wire;

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use noetic_core::model::{ModelRequest, ModelStream};
use noetic_core::{ModelProvider, ResponseEvent};
use reqwest::header::HeaderMap;
use serde_json::Value;

use crate::decode::WireDecoder;
use crate::error::ProviderError;
use crate::http::{CustomHeader, Endpoint, HttpClient, RetryConfig};
use crate::secret::{ApiKey, redact_url};
use crate::sse::DEFAULT_MAX_EVENT_BYTES;
use crate::stream::{decode_events, redact_event};

/// The OpenRouter API.
pub const OPENROUTER_BASE_URL: &str = "https://openrouter.ai/api/v1";
/// The OpenAI API.
pub const OPENAI_BASE_URL: &str = "https://api.openai.com/v1";

/// A provider speaking OpenResponses over streaming HTTP.
#[derive(Clone, Debug)]
pub struct OpenResponses {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    name: Arc<str>,
    http: HttpClient,
    body: wire::BodyOptions,
    max_event_bytes: usize,
}

/// Builds an [`OpenResponses`] provider.
#[derive(Clone)]
#[must_use = "call .build() to get the provider"]
pub struct OpenResponsesBuilder {
    name: String,
    base_url: String,
    api_key: Option<ApiKey>,
    headers: Vec<CustomHeader>,
    body: wire::BodyOptions,
    retry: RetryConfig,
    connect_timeout: Duration,
    max_event_bytes: usize,
}

impl OpenResponses {
    /// A builder for a server at `base_url` (the part before `/responses`, e.g. `http://localhost:8000/v1`).
    pub fn builder(base_url: impl Into<String>) -> OpenResponsesBuilder {
        OpenResponsesBuilder {
            name: "openresponses".to_owned(),
            base_url: base_url.into(),
            api_key: None,
            headers: Vec::new(),
            body: wire::BodyOptions::default(),
            retry: RetryConfig::default(),
            connect_timeout: Duration::from_secs(10),
            max_event_bytes: DEFAULT_MAX_EVENT_BYTES,
        }
    }

    /// The provider's name (used in errors).
    pub fn name(&self) -> &str {
        &self.inner.name
    }
}

impl std::fmt::Debug for OpenResponsesBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // No secret shows: the key is `ApiKey(***)`, header values are `***`, userinfo is `***@`.
        f.debug_struct("OpenResponsesBuilder")
            .field("name", &self.name)
            .field("base_url", &redact_url(&self.base_url))
            .field("api_key", &self.api_key)
            .field("headers", &self.headers)
            .field("body", &self.body)
            .field("retry", &self.retry)
            .field("connect_timeout", &self.connect_timeout)
            .field("max_event_bytes", &self.max_event_bytes)
            .finish()
    }
}

impl OpenResponsesBuilder {
    /// The provider's name in errors (default `openresponses`).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// The base URL.
    pub fn base_url(mut self, base_url: impl Into<String>) -> Self {
        self.base_url = base_url.into();
        self
    }

    /// The API key, sent as `Authorization: Bearer …` (never logged, never in `Debug`).
    pub fn api_key(mut self, api_key: impl Into<String>) -> Self {
        self.api_key = Some(ApiKey::new(api_key.into()));
        self
    }

    /// An extra header on every request (e.g. OpenRouter's `HTTP-Referer` and `X-Title` attribution).
    /// Names are case-insensitive and checked by [`build`](Self::build). A value never shows in `Debug`;
    /// one whose name looks like a credential (`authorization`, `x-api-key`, `*-token`, cookies, …) is
    /// also sent as sensitive and redacted from errors. A later header of the same name replaces it.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push(CustomHeader {
            name: name.into(),
            value: value.into(),
            sensitive: false,
        });
        self
    }

    /// Like [`header`](Self::header), for a credential whose name does not give it away: the value is
    /// sent as sensitive and redacted from errors whatever the name.
    pub fn sensitive_header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.push(CustomHeader {
            name: name.into(),
            value: value.into(),
            sensitive: true,
        });
        self
    }

    /// `store` in the body (OpenAI keeps responses unless `false`).
    pub fn store(mut self, store: bool) -> Self {
        self.body.store = Some(store);
        self
    }

    /// Adds an `include` entry (e.g. `reasoning.encrypted_content`).
    pub fn include(mut self, include: impl Into<String>) -> Self {
        self.body.include.push(include.into());
        self
    }

    /// Offers tools with `strict: true` and schemas rewritten by [`crate::strict_schema`], so the model's
    /// arguments are guaranteed to match (OpenAI's strict function calling). Off by default: not every
    /// compatible server accepts it.
    pub fn strict_tools(mut self, strict: bool) -> Self {
        self.body.strict_tools = strict;
        self
    }

    /// An extra top-level body field (`reasoning`, `provider`, …), merged last.
    pub fn body_field(mut self, name: impl Into<String>, value: Value) -> Self {
        self.body.extra.insert(name.into(), value);
        self
    }

    /// How requests that fail before their response starts are retried.
    pub fn retry(mut self, retry: RetryConfig) -> Self {
        self.retry = retry;
        self
    }

    /// The TCP connect timeout (default 10 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The cap on one stream event's size (default 16 MiB).
    pub fn max_event_bytes(mut self, bytes: usize) -> Self {
        self.max_event_bytes = bytes;
        self
    }

    /// Builds the provider.
    ///
    /// # Errors
    /// [`ProviderError::InvalidConfig`] for a header value that is not valid, or a base URL that is not
    /// HTTP(S).
    pub fn build(self) -> Result<OpenResponses, ProviderError> {
        let http = Endpoint {
            base_url: &self.base_url,
            path: "responses",
            api_key: self.api_key.as_ref(),
            headers: &self.headers,
            retry: self.retry,
            connect_timeout: self.connect_timeout,
        }
        .build()?;
        Ok(OpenResponses {
            inner: Arc::new(Inner {
                name: Arc::from(self.name.as_str()),
                http,
                body: self.body,
                max_event_bytes: self.max_event_bytes,
            }),
        })
    }
}

impl ModelProvider for OpenResponses {
    fn stream<'a>(
        &'a self,
        request: &'a ModelRequest<'a>,
    ) -> BoxFuture<'a, noetic_core::Result<ModelStream>> {
        Box::pin(async move {
            let inner = &*self.inner;
            let fail = |error: ProviderError| {
                error
                    .redact(inner.http.secrets())
                    .into_core(&inner.name, Some(request.round))
            };
            let body = wire::request_body(request, &inner.body).map_err(fail)?;
            let started = inner.http.post(body).await.map_err(fail)?;
            let generation_id = generation_id(&started.headers);
            let events = if is_json(&started.headers) {
                // A server that ignored `stream: true` and sent the whole response at once.
                let body = collect(started.body, inner.max_event_bytes)
                    .await
                    .map_err(fail)?;
                let events = whole_response_events(&body).map_err(fail)?;
                let secrets = inner.http.secrets().clone();
                futures_util::stream::iter(
                    events
                        .into_iter()
                        .map(move |event| Ok(redact_event(&secrets, event))),
                )
                .boxed()
            } else {
                decode_events(
                    started.body,
                    ResponsesDecoder,
                    inner.max_event_bytes,
                    inner.name.clone(),
                    request.round,
                    inner.http.secrets().clone(),
                )
            };
            Ok(ModelStream {
                generation_id,
                events,
            })
        })
    }
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.trim_start().starts_with("application/json"))
}

/// Reads a whole body, up to `limit` bytes.
async fn collect(
    mut body: futures_util::stream::BoxStream<'static, Result<bytes::Bytes, ProviderError>>,
    limit: usize,
) -> Result<Vec<u8>, ProviderError> {
    let mut out = Vec::new();
    while let Some(chunk) = body.next().await {
        let chunk = chunk?;
        if out.len() + chunk.len() > limit {
            return Err(ProviderError::Sse {
                message: format!("response body larger than the {limit}-byte limit"),
            });
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// The events a streamed response would have carried, from a whole (non-streaming) response body.
fn whole_response_events(body: &[u8]) -> Result<Vec<ResponseEvent>, ProviderError> {
    let text = String::from_utf8_lossy(body);
    let wire: wire::WireResponse = serde_json::from_slice(body)
        .map_err(|error| ProviderError::event("response", error, &text))?;
    let snapshot = wire.into_snapshot(None);
    let mut events = vec![ResponseEvent::Created {
        response_id: snapshot.id.clone(),
        model: snapshot.model.clone(),
    }];
    for (index, item) in snapshot.output.iter().enumerate() {
        let output_index = u32::try_from(index).unwrap_or(u32::MAX);
        events.push(ResponseEvent::OutputItemDone {
            output_index,
            item: item.clone(),
        });
    }
    events.push(ResponseEvent::Finished(Box::new(snapshot)));
    Ok(events)
}

/// OpenRouter's `x-generation-id`, or a `x-request-id`, when the server sent one.
pub(crate) fn generation_id(headers: &HeaderMap) -> Option<String> {
    ["x-generation-id", "x-request-id"]
        .iter()
        .find_map(|name| headers.get(*name))
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned)
}

/// Decodes OpenResponses events: one JSON event per SSE event.
struct ResponsesDecoder;

impl WireDecoder for ResponsesDecoder {
    fn decode(&mut self, data: &str, out: &mut Vec<ResponseEvent>) -> Result<(), ProviderError> {
        out.extend(wire::parse_event(data)?);
        Ok(())
    }

    fn finish(&mut self, _out: &mut Vec<ResponseEvent>) -> Result<(), ProviderError> {
        Ok(())
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
