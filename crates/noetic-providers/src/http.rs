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
use crate::secret::{ApiKey, REDACTED, Secrets, is_sensitive_header, redact_url};

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

/// A POST-and-stream client for one endpoint, shared by a provider's rounds. Cheap to clone.
#[derive(Clone)]
pub(crate) struct HttpClient {
    service: Retry<RetryPolicy, reqwest::Client>,
    /// The endpoint, without userinfo (that became an `Authorization` header).
    url: reqwest::Url,
    headers: HeaderMap,
    secrets: Secrets,
}

impl std::fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Header values may hold credentials: list the names only.
        f.debug_struct("HttpClient")
            .field("url", &self.url.as_str())
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl HttpClient {
    /// The secrets to redact from whatever the server sends back into an error.
    pub(crate) fn secrets(&self) -> &Secrets {
        &self.secrets
    }

    /// POSTs a JSON body to the endpoint and returns once the response has started.
    ///
    /// # Errors
    /// [`ProviderError::Http`] for an error status (after the retries), with the provider's message
    /// read from its JSON error body (of which only the first 64 KiB are read); [`ProviderError::Transport`]
    /// when no response came. Secrets are redacted from both.
    pub(crate) async fn post(&self, body: Vec<u8>) -> Result<Started, ProviderError> {
        let mut request = reqwest::Request::new(reqwest::Method::POST, self.url.clone());
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
            .map_err(|error| {
                let error = error.without_url();
                ProviderError::Transport {
                    message: transport_message(&error),
                    source: Some(Box::new(error)),
                }
                .redact(&self.secrets)
            })?;
        let status = response.status();
        if !status.is_success() {
            let mut text = error_body(response).await;
            // Before the message is cut short, so that no cut leaves the start of a secret behind
            // (the read bound may have cut one already: `redact_cut`).
            self.secrets.redact_cut(&mut text);
            return Err(ProviderError::Http {
                status: status.as_u16(),
                message: error_message(&text, status),
            }
            .redact(&self.secrets));
        }
        let headers = response.headers().clone();
        // Redacted where the stream is decoded, which holds the secrets anyway.
        let body = response
            .bytes_stream()
            .map(|chunk| {
                chunk.map_err(|error| ProviderError::StreamBroken {
                    message: transport_message(&error.without_url()),
                })
            })
            .boxed();
        Ok(Started { headers, body })
    }
}

/// The most of an error response's body that is read for its message; the rest is never waited for
/// (a server may send an error status and then a body that never ends).
const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;

/// How much of an error body that holds no JSON message is shown.
const MAX_ERROR_TEXT_CHARS: usize = 500;

/// The start of an error response's body (up to [`MAX_ERROR_BODY_BYTES`], UTF-8 read lossily); a body
/// that fails midway gives what came before. Dropping the response then closes the connection.
async fn error_body(mut response: reqwest::Response) -> String {
    let mut body = Vec::new();
    while body.len() < MAX_ERROR_BODY_BYTES {
        match response.chunk().await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            Ok(None) | Err(_) => break,
        }
    }
    body.truncate(MAX_ERROR_BODY_BYTES);
    String::from_utf8_lossy(&body).into_owned()
}

/// A reqwest error without the URL (which may carry a key in a query string) and with its cause.
fn transport_message(error: &reqwest::Error) -> String {
    let mut message = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    message
}

/// The provider's message from an error body (`{"error": {"message": …}}`, `{"message": …}`), led
/// by the error's type when it has one (`{"error": {"type": "authentication_error", …}}`: Anthropic,
/// OpenAI), else the start of the body itself, else the status text.
fn error_message(body: &str, status: reqwest::StatusCode) -> String {
    let parsed: Option<serde_json::Value> = serde_json::from_str(body).ok();
    let message = parsed.as_ref().and_then(|value| {
        let message = value
            .pointer("/error/message")
            .or_else(|| value.get("message"))
            .or_else(|| value.get("error").filter(|error| error.is_string()))
            .and_then(serde_json::Value::as_str)?;
        Some(
            match value
                .pointer("/error/type")
                .and_then(serde_json::Value::as_str)
            {
                Some(kind) if !kind.is_empty() => format!("{kind}: {message}"),
                _ => message.to_owned(),
            },
        )
    });
    match message {
        Some(message) => message,
        None if !body.trim().is_empty() => body.chars().take(MAX_ERROR_TEXT_CHARS).collect(),
        None => status.canonical_reason().unwrap_or("error").to_owned(),
    }
}

/// One custom header as configured; checked at `build()`. Its value never shows in `Debug`.
#[derive(Clone)]
pub(crate) struct CustomHeader {
    pub(crate) name: String,
    pub(crate) value: String,
    /// The caller said the value is a credential (names like `x-api-key` are treated so anyway).
    pub(crate) sensitive: bool,
}

impl std::fmt::Debug for CustomHeader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}: {REDACTED}", self.name)
    }
}

impl CustomHeader {
    /// The header as sent. A name is valid in any case (header names are case-insensitive).
    ///
    /// # Errors
    /// [`ProviderError::InvalidConfig`] naming the header (never showing its value) for an invalid
    /// name or value.
    fn to_header(&self) -> Result<(HeaderName, HeaderValue, bool), ProviderError> {
        let invalid = |message: String| ProviderError::InvalidConfig {
            field: "header",
            message,
        };
        if self.name.is_empty() {
            return Err(invalid("a header name is empty".to_owned()));
        }
        let shown = self.name.escape_debug();
        let name = HeaderName::from_bytes(self.name.as_bytes())
            .map_err(|_| invalid(format!("`{shown}` is not a valid header name")))?;
        let mut value = HeaderValue::from_str(&self.value).map_err(|_| {
            invalid(format!(
                "the value of `{shown}` is not a valid header value (visible ASCII only)"
            ))
        })?;
        let sensitive = self.sensitive || is_sensitive_header(name.as_str());
        value.set_sensitive(sensitive);
        Ok((name, value, sensitive))
    }
}

/// The settings every HTTP provider shares, checked and turned into a client for one endpoint.
pub(crate) struct Endpoint<'a> {
    pub(crate) base_url: &'a str,
    pub(crate) path: &'static str,
    pub(crate) api_key: Option<&'a ApiKey>,
    /// The header the key goes in, as the key alone; `None` for `Authorization: Bearer`.
    pub(crate) key_header: Option<&'static str>,
    pub(crate) headers: &'a [CustomHeader],
    pub(crate) retry: RetryConfig,
    pub(crate) connect_timeout: Duration,
}

impl Endpoint<'_> {
    /// A client for `{base_url}/{path}` sending the headers: userinfo in the base URL as a
    /// `Basic` `Authorization` header, the key as `Authorization: Bearer` (which wins; or alone in the
    /// wire's key header, e.g. `x-api-key`), then the custom headers (a custom `authorization` wins
    /// over both). Every credential is marked sensitive and collected for redaction.
    ///
    /// # Errors
    /// [`ProviderError::InvalidConfig`] for a base URL that is not HTTP(S), or an invalid header name
    /// or value.
    pub(crate) fn build(&self) -> Result<HttpClient, ProviderError> {
        let base = self.base_url.trim_end_matches('/');
        let invalid_url = |problem: String| ProviderError::InvalidConfig {
            field: "base_url",
            message: format!("`{}` {problem}", redact_url(base)),
        };
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(invalid_url("is not an http(s) URL".to_owned()));
        }
        let mut url = reqwest::Url::parse(&format!("{base}/{}", self.path))
            .map_err(|error| invalid_url(format!("is not a valid URL: {error}")))?;
        let client = reqwest::Client::builder()
            .connect_timeout(self.connect_timeout)
            .build()
            .map_err(|error| ProviderError::InvalidConfig {
                field: "http client",
                message: error.to_string(),
            })?;
        let mut headers = HeaderMap::new();
        let mut secrets = Vec::new();
        if let Some(basic) = take_userinfo(&client, &mut url, &mut secrets)
            .ok_or_else(|| invalid_url("has userinfo that cannot be removed".to_owned()))?
        {
            headers.insert(reqwest::header::AUTHORIZATION, basic);
        }
        if let Some(key) = self.api_key {
            let text = match self.key_header {
                Some(_) => key.expose().to_owned(),
                None => format!("Bearer {}", key.expose()),
            };
            let mut value =
                HeaderValue::from_str(&text).map_err(|_| ProviderError::InvalidConfig {
                    field: "api_key",
                    message: "not a valid header value (visible ASCII only)".to_owned(),
                })?;
            value.set_sensitive(true);
            secrets.push(key.expose().to_owned());
            let name =
                match self.key_header {
                    Some(name) => reqwest::header::HeaderName::from_bytes(name.as_bytes())
                        .map_err(|_| ProviderError::InvalidConfig {
                            field: "key header",
                            message: format!("`{name}` is not a valid header name"),
                        })?,
                    None => reqwest::header::AUTHORIZATION,
                };
            headers.insert(name, value);
        }
        for header in self.headers {
            let (name, value, sensitive) = header.to_header()?;
            if sensitive {
                secrets.push(header.value.clone());
                // `Bearer <token>`: the token alone may come back too.
                if let Some((_, credential)) = header.value.split_once(' ') {
                    secrets.push(credential.trim().to_owned());
                }
            }
            headers.insert(name, value);
        }
        let policy = RetryPolicy {
            config: self.retry,
            attempt: 0,
        };
        Ok(HttpClient {
            service: Retry::new(policy, client),
            url,
            headers,
            secrets: Secrets::new(secrets),
        })
    }
}

/// Moves the userinfo of `url` (`user:key@host`) into a sensitive `Basic` header value, collecting
/// its secrets: the password, or the user name when there is no password (a token given as the user).
/// `Some(None)` when there is none; `None` when it could not be removed.
fn take_userinfo(
    client: &reqwest::Client,
    url: &mut reqwest::Url,
    secrets: &mut Vec<String>,
) -> Option<Option<HeaderValue>> {
    let user = percent_decode(url.username());
    let password = url.password().map(percent_decode);
    if user.is_empty() && password.is_none() {
        return Some(None);
    }
    match (&password, url.password()) {
        (Some(password), Some(raw)) => secrets.extend([password.clone(), raw.to_owned()]),
        _ => secrets.extend([user.clone(), url.username().to_owned()]),
    }
    url.set_username("").ok()?;
    url.set_password(None).ok()?;
    // reqwest encodes the credentials (and marks the value sensitive).
    let request = client
        .post(url.clone())
        .basic_auth(user, password)
        .build()
        .ok()?;
    let value = request
        .headers()
        .get(reqwest::header::AUTHORIZATION)?
        .clone();
    if let Some(encoded) = value
        .to_str()
        .ok()
        .and_then(|text| text.strip_prefix("Basic "))
    {
        secrets.push(encoded.to_owned());
    }
    Some(Some(value))
}

/// `%XX` escapes decoded (lossily), as a URL's userinfo is sent.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while let Some(&byte) = bytes.get(index) {
        let hex = bytes
            .get(index + 1..index + 3)
            .filter(|hex| hex.iter().all(u8::is_ascii_hexdigit))
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match (byte, hex) {
            (b'%', Some(decoded)) => {
                out.push(decoded);
                index += 3;
            }
            _ => {
                out.push(byte);
                index += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}
