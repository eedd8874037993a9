//! What the HTTP providers share: the builder settings and their setters, the built provider's state,
//! and one round's `stream()`. A [`Wire`] says what differs between OpenResponses, Chat Completions
//! and Anthropic Messages: the endpoint's path, the key's header, the body options, the request body,
//! the event decoder, and whether a whole JSON response is accepted in place of a stream. Both are
//! public ([`crate::wire`]): a provider crate of one's own gets retries, redaction, the SSE framing and
//! the stream's errors by writing a `Wire` alone.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
use noetic_core::model::{ModelRequest, ModelStream};
use noetic_core::{ModelProvider, ResponseEvent};
use reqwest::header::HeaderMap;
use serde_json::{Map, Value};

use crate::decode::WireDecoder;
use crate::error::ProviderError;
use crate::http::{CustomHeader, Endpoint, HttpClient, RetryConfig};
use crate::secret::{ApiKey, redact_url};
use crate::sse::DEFAULT_MAX_EVENT_BYTES;
use crate::stream::{decode_events, redact_event};

/// One wire format spoken over streaming HTTP: what an [`HttpProvider`] needs to speak it.
pub trait Wire: Send + Sync + 'static {
    /// The wire's own body settings (beyond the extra fields every wire takes).
    type Options: Clone + fmt::Debug + Default + Send + Sync + 'static;
    /// Decodes one response's SSE events.
    type Decoder: WireDecoder + Unpin;
    /// The endpoint below the base URL (`responses`, `chat/completions`, `messages`).
    const PATH: &'static str;
    /// The header the API key goes in, as the key alone (Anthropic's `x-api-key`); `None` sends it
    /// as `Authorization: Bearer <key>`.
    const KEY_HEADER: Option<&'static str> = None;

    /// Serializes a round's request as a streaming body. `extra` holds the caller's
    /// `.body_field(..)`s: each replaces the wire's own field of the same name (write it once, not
    /// twice) and the rest go last.
    ///
    /// # Errors
    /// [`ProviderError::InvalidConfig`] when the request cannot be expressed on this wire.
    fn request_body(
        request: &ModelRequest<'_>,
        options: &Self::Options,
        extra: &Map<String, Value>,
    ) -> Result<Vec<u8>, ProviderError>;

    /// A decoder for one response.
    fn decoder() -> Self::Decoder;

    /// How to read a whole (non-streaming) JSON response, for a wire whose servers may send one when
    /// they ignore `stream: true`; `None` when the wire has no such form (the body is read as SSE).
    fn whole_response() -> Option<WholeResponse> {
        None
    }
}

/// Reads the events a streamed response would have carried from a whole JSON response body.
pub type WholeResponse = fn(&[u8]) -> Result<Vec<ResponseEvent>, ProviderError>;

/// A builder's settings, shared by every HTTP provider's builder (the setters are
/// [`shared_setters!`]).
#[derive(Clone)]
pub(crate) struct Settings<O> {
    pub(crate) name: String,
    pub(crate) base_url: String,
    pub(crate) api_key: Option<ApiKey>,
    pub(crate) headers: Vec<CustomHeader>,
    /// The wire's own body settings.
    pub(crate) options: O,
    /// Extra top-level body fields, merged last (they win over the wire's own).
    pub(crate) extra: Map<String, Value>,
    pub(crate) retry: RetryConfig,
    pub(crate) connect_timeout: Duration,
    pub(crate) max_event_bytes: usize,
}

impl<O: Default> Settings<O> {
    /// The defaults: no key, no extra headers or fields, default retries, a 10 s connect timeout, and
    /// the default event cap.
    pub(crate) fn new(name: &str, base_url: String) -> Self {
        Settings {
            name: name.to_owned(),
            base_url,
            api_key: None,
            headers: Vec::new(),
            options: O::default(),
            extra: Map::new(),
            retry: RetryConfig::default(),
            connect_timeout: Duration::from_secs(10),
            max_event_bytes: DEFAULT_MAX_EVENT_BYTES,
        }
    }
}

impl<O> Settings<O> {
    /// The provider these settings describe.
    ///
    /// # Errors
    /// [`ProviderError::InvalidConfig`] for a base URL that is not HTTP(S), or an invalid header name
    /// or value (naming the header).
    pub(crate) fn build<W: Wire<Options = O>>(self) -> Result<HttpProvider<W>, ProviderError> {
        let http = Endpoint {
            base_url: &self.base_url,
            path: W::PATH,
            api_key: self.api_key.as_ref(),
            key_header: W::KEY_HEADER,
            headers: &self.headers,
            retry: self.retry,
            connect_timeout: self.connect_timeout,
        }
        .build()?;
        Ok(HttpProvider {
            inner: Arc::new(Inner {
                name: Arc::from(self.name),
                http,
                options: self.options,
                extra: self.extra,
                max_event_bytes: self.max_event_bytes,
            }),
        })
    }
}

impl<O: fmt::Debug> fmt::Debug for Settings<O> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // No secret shows: the key is `ApiKey(***)`, header values are `***`, userinfo is `***@`.
        f.debug_struct("Settings")
            .field("name", &self.name)
            .field("base_url", &redact_url(&self.base_url))
            .field("api_key", &self.api_key)
            .field("headers", &self.headers)
            .field("options", &self.options)
            .field("extra", &self.extra)
            .field("retry", &self.retry)
            .field("connect_timeout", &self.connect_timeout)
            .field("max_event_bytes", &self.max_event_bytes)
            .finish()
    }
}

/// The setters every HTTP provider builder has, for a builder struct with a `settings:
/// Settings<_>` field; `$default_name` is the provider's default name, for the docs.
macro_rules! shared_setters {
    ($default_name:literal) => {
        #[doc = concat!("The provider's name in errors (default `", $default_name, "`).")]
        pub fn name(mut self, name: impl Into<String>) -> Self {
            self.settings.name = name.into();
            self
        }

        /// The base URL: the part before the endpoint's path, e.g. `http://localhost:8000/v1`.
        /// Userinfo in it (`https://user:key@host/v1`) is sent as `Authorization: Basic …` and never
        /// shows in `Debug` or errors.
        pub fn base_url(mut self, base_url: impl Into<String>) -> Self {
            self.settings.base_url = base_url.into();
            self
        }

        /// The API key, sent as `Authorization: Bearer …` (on the Anthropic wire as `x-api-key: …`);
        /// never logged, never in `Debug`, redacted from errors.
        pub fn api_key(mut self, api_key: impl Into<String>) -> Self {
            self.settings.api_key = Some($crate::secret::ApiKey::new(api_key.into()));
            self
        }

        /// An extra header on every request (e.g. OpenRouter's `HTTP-Referer` and `X-Title`
        /// attribution). Names are case-insensitive and checked by `build()`. A value never shows in
        /// `Debug`; one whose name looks like a credential (`authorization`, `x-api-key`, `*-token`,
        /// cookies, …) is also sent as sensitive and redacted from errors. A later header of the same
        /// name replaces it.
        pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
            self.settings.headers.push($crate::http::CustomHeader {
                name: name.into(),
                value: value.into(),
                sensitive: false,
            });
            self
        }

        /// Like [`header`](Self::header), for a credential whose name does not give it away: the value
        /// is sent as sensitive and redacted from errors whatever the name.
        pub fn sensitive_header(
            mut self,
            name: impl Into<String>,
            value: impl Into<String>,
        ) -> Self {
            self.settings.headers.push($crate::http::CustomHeader {
                name: name.into(),
                value: value.into(),
                sensitive: true,
            });
            self
        }

        /// An extra top-level body field (`reasoning`, `provider`, …), merged last. A field the
        /// provider sends itself (`temperature`, `max_output_tokens`, `store`, even `model`) is
        /// replaced by it: the key appears once on the wire.
        pub fn body_field(mut self, name: impl Into<String>, value: serde_json::Value) -> Self {
            self.settings.extra.insert(name.into(), value);
            self
        }

        /// How requests that fail before their response starts are retried.
        pub fn retry(mut self, retry: $crate::http::RetryConfig) -> Self {
            self.settings.retry = retry;
            self
        }

        /// The TCP connect timeout (default 10 s).
        pub fn connect_timeout(mut self, timeout: std::time::Duration) -> Self {
            self.settings.connect_timeout = timeout;
            self
        }

        /// The cap on one stream event's size (default 16 MiB).
        pub fn max_event_bytes(mut self, bytes: usize) -> Self {
            self.settings.max_event_bytes = bytes;
            self
        }
    };
}

pub(crate) use shared_setters;

/// A built HTTP provider speaking `W`: the request POSTed with retries before the response starts,
/// its SSE body decoded by `W`'s decoder, secrets kept out of errors and events. Cheap to clone.
/// Build one with [`HttpProvider::builder`].
pub struct HttpProvider<W: Wire> {
    inner: Arc<Inner<W>>,
}

struct Inner<W: Wire> {
    name: Arc<str>,
    http: HttpClient,
    options: W::Options,
    extra: Map<String, Value>,
    max_event_bytes: usize,
}

impl<W: Wire> Clone for HttpProvider<W> {
    fn clone(&self) -> Self {
        HttpProvider {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<W: Wire> fmt::Debug for HttpProvider<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = &*self.inner;
        f.debug_struct("HttpProvider")
            .field("name", &inner.name)
            .field("http", &inner.http)
            .field("options", &inner.options)
            .field("extra", &inner.extra)
            .field("max_event_bytes", &inner.max_event_bytes)
            .finish()
    }
}

impl<W: Wire> HttpProvider<W> {
    /// A builder for a provider named `name` speaking `W` to the server at `base_url` (the part
    /// before `W::PATH`).
    pub fn builder(name: &str, base_url: impl Into<String>) -> HttpProviderBuilder<W> {
        HttpProviderBuilder {
            settings: Settings::new(name, base_url.into()),
            wire: std::marker::PhantomData,
        }
    }

    /// The provider's name (used in errors).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// One round: the request POSTed, its response's events decoded. Errors name the provider and
    /// the round, and carry no secret.
    ///
    /// # Cancel safety
    /// As `ModelProvider::stream`: dropping the future or the stream closes the connection.
    pub(crate) fn stream_round<'a>(
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
            let body = W::request_body(request, &inner.options, &inner.extra).map_err(fail)?;
            let started = inner.http.post(body).await.map_err(fail)?;
            let generation_id = generation_id(&started.headers);
            let whole = W::whole_response().filter(|_| is_json(&started.headers));
            let events = match whole {
                // A server that ignored `stream: true` and sent the whole response at once.
                Some(read_whole) => {
                    let body = collect(started.body, inner.max_event_bytes)
                        .await
                        .map_err(fail)?;
                    let events = read_whole(&body).map_err(fail)?;
                    let secrets = inner.http.secrets().clone();
                    futures_util::stream::iter(
                        events
                            .into_iter()
                            .map(move |event| Ok(redact_event(&secrets, event))),
                    )
                    .boxed()
                }
                None => decode_events(
                    started.body,
                    W::decoder(),
                    inner.max_event_bytes,
                    inner.name.clone(),
                    request.round,
                    inner.http.secrets().clone(),
                ),
            };
            Ok(ModelStream {
                generation_id,
                events,
            })
        })
    }
}

/// OpenRouter's `x-generation-id`, or a `x-request-id`, when the server sent one.
fn generation_id(headers: &HeaderMap) -> Option<String> {
    ["x-generation-id", "x-request-id"]
        .iter()
        .find_map(|name| headers.get(*name))
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned)
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.trim_start().starts_with("application/json"))
}

/// Reads a whole body, up to `limit` bytes.
async fn collect(
    mut body: BoxStream<'static, Result<Bytes, ProviderError>>,
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

impl<W: Wire> ModelProvider for HttpProvider<W> {
    fn stream<'a>(
        &'a self,
        request: &'a ModelRequest<'a>,
    ) -> BoxFuture<'a, noetic_core::Result<ModelStream>> {
        self.stream_round(request)
    }
}

/// Builds an [`HttpProvider`] speaking `W`, with the setters every HTTP provider's builder has.
#[must_use = "call .build() to get the provider"]
pub struct HttpProviderBuilder<W: Wire> {
    settings: Settings<W::Options>,
    wire: std::marker::PhantomData<fn() -> W>,
}

impl<W: Wire> Clone for HttpProviderBuilder<W> {
    fn clone(&self) -> Self {
        HttpProviderBuilder {
            settings: self.settings.clone(),
            wire: std::marker::PhantomData,
        }
    }
}

impl<W: Wire> fmt::Debug for HttpProviderBuilder<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpProviderBuilder")
            .field("settings", &self.settings)
            .finish()
    }
}

impl<W: Wire> HttpProviderBuilder<W> {
    shared_setters!("the one given to `HttpProvider::builder`");

    /// The wire's own body settings (`W::Options`).
    pub fn options(mut self, options: W::Options) -> Self {
        self.settings.options = options;
        self
    }

    /// Builds the provider.
    ///
    /// # Errors
    /// [`ProviderError::InvalidConfig`] for an invalid header name or value (naming the header), a
    /// key that is not a valid header value, or a base URL that is not HTTP(S).
    pub fn build(self) -> Result<HttpProvider<W>, ProviderError> {
        self.settings.build()
    }
}
