//! A provider crate as a third party writes one, twice over: a toy streaming wire spoken over HTTP,
//! - [`ToyProvider`]: on `noetic-core`'s public [`ModelProvider`] trait alone (and `noetic-providers`'
//!   public [`SseDecoder`] for the SSE framing), its retries and redaction its own;
//! - [`ToyWire`]: the same wire as a [`Wire`] on `noetic-providers`' public HTTP plumbing
//!   ([`noetic_providers::wire`]), which brings the retries, redaction and stream errors.
//!
//! Both are held to the provider conformance kit in the tests (`tests/kit.rs`). `docs/providers.md`
//! ("Writing a provider crate") walks through them.
//!
//! The toy wire: `POST {base}/toy` with `{"model", "messages": [{"role", "text"}]}` and the key in
//! `x-toy-key`; the answer is an SSE stream of `{"type": "text", "text"}` events ended by
//! `{"type": "done", "input_tokens", "output_tokens"}`.

use std::fmt;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use noetic_core::item::{Item, Role};
use noetic_core::model::{ModelRequest, ModelStream, ResponseSnapshot, ResponseStatus};
use noetic_core::{Error, ModelProvider, ResponseEvent, TokenUsage};
use noetic_providers::wire::{HttpProvider, Wire, WireDecoder};
use noetic_providers::{ProviderError, SseDecoder};
use serde_json::{Value, json};

/// The provider's name in errors.
const NAME: &str = "toy";

/// A provider speaking the toy wire.
#[derive(Clone)]
pub struct ToyProvider {
    http: reqwest::Client,
    url: String,
    key: String,
    retries: u32,
}

/// The key never shows: not in `Debug`, not in errors.
impl fmt::Debug for ToyProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToyProvider")
            .field("url", &self.url)
            .field("key", &"<redacted>")
            .field("retries", &self.retries)
            .finish()
    }
}

impl ToyProvider {
    /// A provider for the server at `base_url` with `api_key`, retrying a 429 or 5xx twice.
    pub fn new(base_url: &str, api_key: &str) -> ToyProvider {
        ToyProvider {
            http: reqwest::Client::new(),
            url: format!("{}/toy", base_url.trim_end_matches('/')),
            key: api_key.to_owned(),
            retries: 2,
        }
    }

    /// How many times a 429 or 5xx is retried (after its `retry-after`, else a short backoff).
    #[must_use]
    pub fn retries(mut self, retries: u32) -> ToyProvider {
        self.retries = retries;
        self
    }

    /// `text` with the key taken out.
    fn redact(&self, text: &str) -> String {
        text.replace(&self.key, "[redacted]")
    }

    /// Sends the request, retrying what may pass; the response once its status is 200.
    async fn send(&self, body: Vec<u8>) -> Result<reqwest::Response, Error> {
        let mut attempt = 0;
        loop {
            let response = self
                .http
                .post(&self.url)
                .header("x-toy-key", &self.key)
                .header("content-type", "application/json")
                .body(body.clone())
                .send()
                .await
                .map_err(|error| Error::provider(NAME, None, self.redact(&error.to_string())))?;
            let status = response.status().as_u16();
            if status == 200 {
                return Ok(response);
            }
            if (status == 429 || status >= 500) && attempt < self.retries {
                let wait = response
                    .headers()
                    .get("retry-after")
                    .and_then(|value| value.to_str().ok())
                    .and_then(|value| value.trim().parse::<u64>().ok())
                    .map_or(Duration::from_millis(250 << attempt), Duration::from_secs);
                tokio::time::sleep(wait).await;
                attempt += 1;
                continue;
            }
            let text = response.text().await.unwrap_or_default();
            let message = serde_json::from_str::<Value>(&text)
                .ok()
                .and_then(|body| body.pointer("/error/message")?.as_str().map(str::to_owned))
                .unwrap_or(text);
            return Err(Error::provider(NAME, Some(status), self.redact(&message)));
        }
    }
}

impl ModelProvider for ToyProvider {
    fn stream<'a>(
        &'a self,
        request: &'a ModelRequest<'a>,
    ) -> BoxFuture<'a, noetic_core::Result<ModelStream>> {
        Box::pin(async move {
            let body = request_body(request)
                .map_err(|error| Error::provider(NAME, None, error.to_string()))?;
            let response = self
                .send(body)
                .await
                .map_err(|error| error.in_round(request.round))?;
            let round = request.round;
            let mut decoder = SseDecoder::default();
            let mut state = Decoding::default();
            let events = response
                .bytes_stream()
                .map(move |chunk| {
                    let mut out = Vec::new();
                    match chunk {
                        Ok(bytes) => {
                            let fed = decoder.feed(&bytes, &mut |event| {
                                out.push(state.event(&event.data).map_err(|error| {
                                    malformed(format!("{error} in {}", event.data))
                                }));
                            });
                            if let Err(error) = fed {
                                out.push(Err(malformed(error.to_string())));
                            }
                        }
                        Err(error) => out.push(Err(Error::provider(
                            NAME,
                            None,
                            format!("the stream broke mid-response: {error}"),
                        )
                        .in_round(round))),
                    }
                    futures_util::stream::iter(out.into_iter().flat_map(|events| match events {
                        Ok(events) => events.into_iter().map(Ok).collect::<Vec<_>>(),
                        Err(error) => vec![Err(error)],
                    }))
                })
                .flatten()
                .boxed();
            Ok(ModelStream {
                generation_id: None,
                events,
            })
        })
    }
}

/// What the stream has shown so far.
#[derive(Default)]
struct Decoding {
    started: bool,
    text: String,
}

impl Decoding {
    /// One SSE event's data as the framework's events (none for the `[DONE]` a server may add).
    fn event(&mut self, data: &str) -> Result<Vec<ResponseEvent>, serde_json::Error> {
        if data.trim() == "[DONE]" {
            return Ok(Vec::new());
        }
        let event: Value = serde_json::from_str(data)?;
        let mut out = Vec::new();
        if !self.started {
            self.started = true;
            out.push(ResponseEvent::Created {
                response_id: None,
                model: None,
            });
            out.push(ResponseEvent::OutputItemAdded {
                output_index: 0,
                item: Item::message(Role::Assistant, Vec::new()),
            });
        }
        match event.get("type").and_then(Value::as_str) {
            Some("text") => {
                let text = event
                    .get("text")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                self.text.push_str(text);
                out.push(ResponseEvent::OutputTextDelta {
                    output_index: 0,
                    content_index: 0,
                    delta: text.to_owned(),
                });
            }
            Some("done") => {
                let count = |name: &str| event.get(name).and_then(Value::as_u64);
                out.push(ResponseEvent::OutputItemDone {
                    output_index: 0,
                    item: Item::assistant_text(std::mem::take(&mut self.text)),
                });
                let usage = match (count("input_tokens"), count("output_tokens")) {
                    (Some(input), Some(output)) => Some(TokenUsage {
                        input_tokens: input,
                        output_tokens: output,
                        ..TokenUsage::default()
                    }),
                    _ => None,
                };
                out.push(ResponseEvent::Finished(Box::new(ResponseSnapshot {
                    status: Some(ResponseStatus::Completed),
                    usage,
                    ..ResponseSnapshot::default()
                })));
            }
            // Events this crate does not know are skipped, never fatal.
            _ => {}
        }
        Ok(out)
    }
}

/// Bad data on the wire: `EVENT_MALFORMED`, the code the harness and the kit expect for it.
fn malformed(message: String) -> Error {
    Error::Adapter {
        code: "EVENT_MALFORMED",
        source: message.into(),
    }
}

/// The toy wire's request body.
fn request_body(request: &ModelRequest<'_>) -> Result<Vec<u8>, serde_json::Error> {
    let messages: Vec<Value> = request
        .input
        .iter()
        .filter_map(|item| match item {
            Item::Message(message) => Some(json!({
                "role": if message.role == Role::Assistant { "assistant" } else { "user" },
                "text": item.text().unwrap_or_default(),
            })),
            _ => None,
        })
        .collect();
    serde_json::to_vec(&json!({"model": request.model, "messages": messages}))
}

/// The toy wire as a [`Wire`]: `noetic-providers` does the HTTP, the retries, the redaction and the
/// SSE framing; this says the path, the key's header, the body and how to read the events.
#[derive(Debug)]
pub struct ToyWire;

impl Wire for ToyWire {
    type Options = ();
    type Decoder = ToyDecoder;
    const PATH: &'static str = "toy";
    const KEY_HEADER: Option<&'static str> = Some("x-toy-key");

    fn request_body(
        request: &ModelRequest<'_>,
        _options: &(),
        _extra: &serde_json::Map<String, Value>,
    ) -> Result<Vec<u8>, ProviderError> {
        request_body(request).map_err(|error| ProviderError::event("request", error, ""))
    }

    fn decoder() -> ToyDecoder {
        ToyDecoder::default()
    }
}

/// Reads one toy response's events.
#[derive(Default)]
pub struct ToyDecoder {
    state: Decoding,
}

impl WireDecoder for ToyDecoder {
    fn decode(&mut self, data: &str, out: &mut Vec<ResponseEvent>) -> Result<(), ProviderError> {
        let events = self
            .state
            .event(data)
            .map_err(|error| ProviderError::event("toy", error, data))?;
        out.extend(events);
        Ok(())
    }

    fn finish(&mut self, _out: &mut Vec<ResponseEvent>) -> Result<(), ProviderError> {
        // A stream without its `done` event gets no terminal event: the harness reports it cut.
        Ok(())
    }
}

/// A provider speaking [`ToyWire`] to the server at `base_url`.
///
/// # Errors
/// The builder's, for a base URL that is not HTTP(S) or a key that is not a header value.
pub fn toy_wire_provider(
    base_url: &str,
    api_key: &str,
    retries: bool,
) -> Result<HttpProvider<ToyWire>, ProviderError> {
    let retry = if retries {
        noetic_providers::RetryConfig::default()
    } else {
        noetic_providers::RetryConfig::none()
    };
    HttpProvider::<ToyWire>::builder("toy", base_url)
        .api_key(api_key)
        .retry(retry)
        .build()
}
