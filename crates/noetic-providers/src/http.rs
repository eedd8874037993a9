//! The HTTP side of a provider: one POST per round, retried only before its response starts.
//!
//! The client is `reqwest::Client` wrapped in a `tower` retry layer. The layer sees a request complete
//! when its response *headers* arrive, so a retry can only ever happen before the first byte of a
//! stream: a 429 or 5xx status, or a connection that failed or reset before answering. Once a stream
//! has started it is never re-sent (that would pay twice). Delays honour `Retry-After` (seconds) and
//! otherwise back off exponentially, both capped.

use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use tower::ServiceExt;
use tower::retry::{Policy, Retry};

use crate::error::ProviderError;

/// How a provider retries requests that failed before their response started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryConfig {
    /// Retries after the first attempt (default 2: three attempts in all).
    pub max_retries: u32,
    /// The first backoff delay (default 500 ms), doubled per retry.
    pub initial_backoff: Duration,
    /// The cap on any delay, `Retry-After` included (default 30 s).
    pub max_delay: Duration,
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            max_retries: 2,
            initial_backoff: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
        }
    }
}

impl RetryConfig {
    /// No retries at all.
    pub fn none() -> Self {
        RetryConfig {
            max_retries: 0,
            ..RetryConfig::default()
        }
    }

    /// Sets the number of retries.
    pub fn max_retries(mut self, max_retries: u32) -> Self {
        self.max_retries = max_retries;
        self
    }
}

/// The retry policy of one request (tower clones it per request, so the count is per request).
#[derive(Debug, Clone)]
struct RetryPolicy {
    config: RetryConfig,
    attempt: u32,
}

impl Policy<reqwest::Request, reqwest::Response, reqwest::Error> for RetryPolicy {
    type Future = tokio::time::Sleep;

    fn retry(
        &mut self,
        _request: &mut reqwest::Request,
        result: &mut Result<reqwest::Response, reqwest::Error>,
    ) -> Option<Self::Future> {
        if self.attempt >= self.config.max_retries {
            return None;
        }
        let backoff = self
            .config
            .initial_backoff
            .saturating_mul(2u32.saturating_pow(self.attempt.min(16)));
        let delay = match result {
            Ok(response) if is_retryable_status(response.status().as_u16()) => {
                retry_after(response.headers()).unwrap_or(backoff)
            }
            Ok(_) => return None,
            // Before any response: the connection failed, or broke before the headers came.
            Err(error) if error.is_connect() || error.is_request() => backoff,
            Err(_) => return None,
        };
        self.attempt += 1;
        let delay = delay.min(self.config.max_delay);
        tracing::debug!(
            attempt = self.attempt,
            ?delay,
            "retrying a model request that failed before its response"
        );
        Some(tokio::time::sleep(delay))
    }

    fn clone_request(&mut self, request: &reqwest::Request) -> Option<reqwest::Request> {
        request.try_clone()
    }
}

fn is_retryable_status(status: u16) -> bool {
    status == 429 || (500..600).contains(&status)
}

/// `Retry-After` in seconds (the HTTP-date form is rare from model APIs and falls back to backoff).
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(reqwest::header::RETRY_AFTER)?.to_str().ok()?;
    let seconds: f64 = value.trim().parse().ok()?;
    (seconds.is_finite() && seconds >= 0.0).then(|| Duration::from_secs_f64(seconds))
}

/// A started response: its headers and its body as a byte stream.
pub(crate) struct Started {
    pub(crate) headers: HeaderMap,
    pub(crate) body: BoxStream<'static, Result<Bytes, ProviderError>>,
}

/// A POST-and-stream client shared by a provider's rounds. Cheap to clone.
#[derive(Clone)]
pub(crate) struct HttpClient {
    service: Retry<RetryPolicy, reqwest::Client>,
    headers: HeaderMap,
}

impl std::fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Header values may hold credentials: list the names only.
        f.debug_struct("HttpClient")
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl HttpClient {
    /// A client sending `headers` with every request. Sensitive values must already be marked as such.
    pub(crate) fn new(
        headers: HeaderMap,
        retry: RetryConfig,
        connect_timeout: Duration,
    ) -> Result<Self, ProviderError> {
        let client = reqwest::Client::builder()
            .connect_timeout(connect_timeout)
            .build()
            .map_err(|error| ProviderError::InvalidConfig {
                field: "http client",
                message: error.to_string(),
            })?;
        let policy = RetryPolicy {
            config: retry,
            attempt: 0,
        };
        Ok(HttpClient {
            service: Retry::new(policy, client),
            headers,
        })
    }

    /// POSTs a JSON body and returns once the response has started.
    ///
    /// # Errors
    /// [`ProviderError::Http`] for an error status (after the retries), with the provider's message
    /// read from its JSON error body; [`ProviderError::Transport`] when no response came.
    pub(crate) async fn post(&self, url: &str, body: Vec<u8>) -> Result<Started, ProviderError> {
        let url = reqwest::Url::parse(url).map_err(|error| ProviderError::InvalidConfig {
            field: "base_url",
            message: format!("{url}: {error}"),
        })?;
        let mut request = reqwest::Request::new(reqwest::Method::POST, url);
        *request.headers_mut() = self.headers.clone();
        request.headers_mut().insert(
            reqwest::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        request.headers_mut().insert(
            reqwest::header::ACCEPT,
            HeaderValue::from_static("text/event-stream"),
        );
        *request.body_mut() = Some(reqwest::Body::from(body));
        let response = self
            .service
            .clone()
            .oneshot(request)
            .await
            .map_err(|error| ProviderError::Transport {
                message: transport_message(error),
            })?;
        let status = response.status();
        if !status.is_success() {
            let text = response.text().await.unwrap_or_default();
            return Err(ProviderError::Http {
                status: status.as_u16(),
                message: error_message(&text, status),
            });
        }
        let headers = response.headers().clone();
        let body = response
            .bytes_stream()
            .map(|chunk| {
                chunk.map_err(|error| ProviderError::Transport {
                    message: format!("stream broke mid-response: {}", transport_message(error)),
                })
            })
            .boxed();
        Ok(Started { headers, body })
    }
}

/// A reqwest error without the URL (which may carry a key in a query string) and with its cause.
fn transport_message(error: reqwest::Error) -> String {
    let error = error.without_url();
    let mut message = error.to_string();
    let mut source = std::error::Error::source(&error);
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    message
}

/// The provider's message from an error body (`{"error": {"message": …}}`, `{"message": …}`), else the
/// body itself, else the status text.
fn error_message(body: &str, status: reqwest::StatusCode) -> String {
    let parsed: Option<serde_json::Value> = serde_json::from_str(body).ok();
    let message = parsed.as_ref().and_then(|value| {
        value
            .pointer("/error/message")
            .or_else(|| value.get("message"))
            .or_else(|| value.get("error").filter(|error| error.is_string()))
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned)
    });
    match message {
        Some(message) => message,
        None if !body.trim().is_empty() => body.chars().take(500).collect(),
        None => status.canonical_reason().unwrap_or("error").to_owned(),
    }
}

/// Builds a header map, marking the named values as sensitive (kept out of `Debug` and logs by hyper).
pub(crate) fn header(
    name: &'static str,
    value: &str,
    sensitive: bool,
) -> Result<(HeaderName, HeaderValue), ProviderError> {
    let mut value = HeaderValue::from_str(value).map_err(|_| ProviderError::InvalidConfig {
        field: name,
        message: "not a valid header value".to_owned(),
    })?;
    value.set_sensitive(sensitive);
    Ok((HeaderName::from_static(name), value))
}

/// The settings every HTTP provider shares, checked and turned into an endpoint URL and a client.
pub(crate) struct Endpoint<'a> {
    pub(crate) base_url: &'a str,
    pub(crate) path: &'static str,
    pub(crate) api_key: Option<&'a crate::secret::ApiKey>,
    pub(crate) headers: &'a [(&'static str, String)],
    pub(crate) retry: RetryConfig,
    pub(crate) connect_timeout: Duration,
}

impl Endpoint<'_> {
    /// The full URL of the endpoint and a client sending the headers (the key as a sensitive
    /// `Authorization: Bearer` header).
    ///
    /// # Errors
    /// [`ProviderError::InvalidConfig`] for a base URL that is not HTTP(S) or an invalid header value.
    pub(crate) fn build(&self) -> Result<(String, HttpClient), ProviderError> {
        let base = self.base_url.trim_end_matches('/');
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(ProviderError::InvalidConfig {
                field: "base_url",
                message: format!("`{base}` is not an http(s) URL"),
            });
        }
        let mut headers = HeaderMap::new();
        if let Some(key) = self.api_key {
            let (name, value) = header("authorization", &format!("Bearer {}", key.expose()), true)?;
            headers.insert(name, value);
        }
        for (name, value) in self.headers {
            let (name, value) = header(name, value, false)?;
            headers.insert(name, value);
        }
        Ok((
            format!("{base}/{}", self.path),
            HttpClient::new(headers, self.retry, self.connect_timeout)?,
        ))
    }
}
