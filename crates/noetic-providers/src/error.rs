//! The error type of `noetic-providers`, with stable codes.
//!
//! HTTP and stream failures reach the harness as `noetic_core::Error::Provider` (`PROVIDER_ERROR`, with
//! the status and the provider's message); decoding and configuration failures keep their own codes
//! through `noetic_core::Error::Adapter`.

use crate::secret::Secrets;

/// Every stable error code of this crate with a one-line meaning (rendered into `docs/errors.md`).
pub const CODES: &[(&str, &str)] = &[
    (
        "MISSING_API_KEY",
        "The provider's API key env var is not set (the message names it).",
    ),
    (
        "PROVIDER_CONFIG_INVALID",
        "A provider setting is invalid (the message names it).",
    ),
    (
        "SSE_MALFORMED",
        "The response stream is not valid SSE: an oversized event or non-UTF-8 data.",
    ),
    (
        "EVENT_MALFORMED",
        "A stream event is not valid JSON or lacks a required field (type and a snippet are named).",
    ),
];

/// An error of a provider.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProviderError {
    /// The API key env var is not set.
    #[error("{env_var} is not set: export it, or use the offline demo model")]
    MissingApiKey {
        /// The env var.
        env_var: &'static str,
    },
    /// A setting is invalid.
    #[error("invalid provider setting `{field}`: {message}")]
    InvalidConfig {
        /// The setting.
        field: &'static str,
        /// What is wrong.
        message: String,
    },
    /// The server answered with an error status.
    #[error("HTTP {status}: {message}")]
    Http {
        /// The status.
        status: u16,
        /// The provider's message (from its JSON error body when it sent one).
        message: String,
    },
    /// The connection failed before a response started.
    #[error("{message}")]
    Transport {
        /// What happened, with the causes' texts.
        message: String,
        /// The error underneath (for a request, the `reqwest::Error` without its URL), for a caller
        /// that inspects it (`is_timeout`, `is_connect`); carried into the core error's `source()`.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// The connection broke after the response started (a stream is never re-sent: it was billed).
    /// As a core error its message names the round.
    #[error("the stream broke mid-response: {message}")]
    StreamBroken {
        /// What happened.
        message: String,
    },
    /// The provider reported an error inside the stream.
    #[error("{message}")]
    Stream {
        /// The provider's message (with its code when it gave one).
        message: String,
    },
    /// The byte stream is not valid SSE.
    #[error("malformed SSE: {message}")]
    Sse {
        /// What is wrong.
        message: String,
    },
    /// An event is not valid JSON or misses a field.
    #[error("malformed `{event_type}` event: {message} (data: {snippet})")]
    Event {
        /// The event's type, or `unknown` when it could not be read.
        event_type: String,
        /// The parse message.
        message: String,
        /// The start of the offending data.
        snippet: String,
    },
}

impl ProviderError {
    /// The stable code of this error.
    pub fn code(&self) -> &'static str {
        match self {
            ProviderError::MissingApiKey { .. } => "MISSING_API_KEY",
            ProviderError::InvalidConfig { .. } => "PROVIDER_CONFIG_INVALID",
            ProviderError::Http { .. }
            | ProviderError::Transport { .. }
            | ProviderError::StreamBroken { .. }
            | ProviderError::Stream { .. } => "PROVIDER_ERROR",
            ProviderError::Sse { .. } => "SSE_MALFORMED",
            ProviderError::Event { .. } => "EVENT_MALFORMED",
        }
    }

    /// Converts into the core error, naming the provider and (when known) the round; a stream that
    /// broke mid-response names the round in its message too.
    pub fn into_core(self, provider: &str, round: Option<u32>) -> noetic_core::Error {
        match self {
            ProviderError::Http { status, message } => in_round(
                noetic_core::Error::provider(provider, Some(status), message),
                round,
            ),
            ProviderError::Transport { message, source } => {
                let error = in_round(noetic_core::Error::provider(provider, None, message), round);
                match source {
                    Some(source) => error.with_source(source),
                    None => error,
                }
            }
            ProviderError::Stream { message } => {
                in_round(noetic_core::Error::provider(provider, None, message), round)
            }
            ProviderError::StreamBroken { message } => {
                let message = match round {
                    Some(round) => {
                        format!("the stream broke mid-response in round {round}: {message}")
                    }
                    None => format!("the stream broke mid-response: {message}"),
                };
                in_round(noetic_core::Error::provider(provider, None, message), round)
            }
            other => noetic_core::Error::Adapter {
                code: other.code(),
                source: Box::new(other),
            },
        }
    }

    /// This error with every secret in its texts replaced by `***` (servers echo keys back).
    pub(crate) fn redact(mut self, secrets: &Secrets) -> Self {
        match &mut self {
            ProviderError::MissingApiKey { .. } => {}
            ProviderError::Transport { message, source } => {
                secrets.redact_string(message);
                // A source whose texts hold a secret is dropped: it cannot be redacted in place.
                if source
                    .as_deref()
                    .is_some_and(|source| secrets.appears_in_chain(source))
                {
                    *source = None;
                }
            }
            ProviderError::InvalidConfig { message, .. }
            | ProviderError::Http { message, .. }
            | ProviderError::StreamBroken { message }
            | ProviderError::Stream { message }
            | ProviderError::Sse { message } => secrets.redact_string(message),
            ProviderError::Event {
                event_type,
                message,
                snippet,
            } => {
                secrets.redact_string(event_type);
                secrets.redact_string(message);
                secrets.redact_cut(snippet);
            }
        }
        self
    }

    /// `EVENT_MALFORMED`: the data of an event of type `event_type` did not parse (`message`);
    /// keeps the start of `data`, for the error to name it.
    pub fn event(event_type: &str, message: impl std::fmt::Display, data: &str) -> Self {
        let mut end = data.len().min(120);
        while !data.is_char_boundary(end) {
            end -= 1;
        }
        ProviderError::Event {
            event_type: event_type.to_owned(),
            message: message.to_string(),
            snippet: data[..end].to_owned(),
        }
    }
}

/// `error` naming `round`, when known.
fn in_round(error: noetic_core::Error, round: Option<u32>) -> noetic_core::Error {
    match round {
        Some(round) => error.in_round(round),
        None => error,
    }
}
