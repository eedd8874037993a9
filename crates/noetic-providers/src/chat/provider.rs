//! The Chat Completions provider: `POST {base}/chat/completions` with `stream: true`.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use noetic_core::ModelProvider;
use noetic_core::model::{ModelRequest, ModelStream};
use serde_json::Value;

use super::{ChatBodyOptions, ChatDecoder, request_body};
use crate::error::ProviderError;
use crate::http::{CustomHeader, Endpoint, HttpClient, RetryConfig};
use crate::responses::generation_id;
use crate::secret::{ApiKey, redact_url};
use crate::sse::DEFAULT_MAX_EVENT_BYTES;
use crate::stream::decode_events;

/// A provider speaking Chat Completions (vLLM, llama.cpp, Ollama, OpenRouter's chat endpoint…),
/// translated into OpenResponses events and items.
#[derive(Clone, Debug)]
pub struct ChatCompletions {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    name: Arc<str>,
    http: HttpClient,
    body: ChatBodyOptions,
    max_event_bytes: usize,
}

/// Builds a [`ChatCompletions`] provider.
#[derive(Clone)]
#[must_use = "call .build() to get the provider"]
pub struct ChatCompletionsBuilder {
    name: String,
    base_url: String,
    api_key: Option<ApiKey>,
    headers: Vec<CustomHeader>,
    body: ChatBodyOptions,
    retry: RetryConfig,
    connect_timeout: Duration,
    max_event_bytes: usize,
}

impl ChatCompletions {
    /// A builder for a server at `base_url` (the part before `/chat/completions`, e.g.
    /// `http://localhost:11434/v1` for Ollama).
    pub fn builder(base_url: impl Into<String>) -> ChatCompletionsBuilder {
        ChatCompletionsBuilder {
            name: "chat".to_owned(),
            base_url: base_url.into(),
            api_key: None,
            headers: Vec::new(),
            body: ChatBodyOptions::default(),
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

impl std::fmt::Debug for ChatCompletionsBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // No secret shows: the key is `ApiKey(***)`, header values are `***`, userinfo is `***@`.
        f.debug_struct("ChatCompletionsBuilder")
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

impl ChatCompletionsBuilder {
    /// The provider's name in errors (default `chat`).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
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

    /// An extra top-level body field, merged last.
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
    /// [`ProviderError::InvalidConfig`] for an invalid header value or a base URL that is not HTTP(S).
    pub fn build(self) -> Result<ChatCompletions, ProviderError> {
        let http = Endpoint {
            base_url: &self.base_url,
            path: "chat/completions",
            api_key: self.api_key.as_ref(),
            headers: &self.headers,
            retry: self.retry,
            connect_timeout: self.connect_timeout,
        }
        .build()?;
        Ok(ChatCompletions {
            inner: Arc::new(Inner {
                name: Arc::from(self.name.as_str()),
                http,
                body: self.body,
                max_event_bytes: self.max_event_bytes,
            }),
        })
    }
}

impl ModelProvider for ChatCompletions {
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
            let body = request_body(request, &inner.body).map_err(fail)?;
            let started = inner.http.post(body).await.map_err(fail)?;
            let generation_id = generation_id(&started.headers);
            let events = decode_events(
                started.body,
                ChatDecoder::new(),
                inner.max_event_bytes,
                inner.name.clone(),
                request.round,
                inner.http.secrets().clone(),
            );
            Ok(ModelStream {
                generation_id,
                events,
            })
        })
    }
}
