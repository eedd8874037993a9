//! From a response's byte stream to framework events: SSE framing, then a [`WireDecoder`].

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::stream::BoxStream;
use futures_util::{Stream, StreamExt};
use noetic_core::ResponseEvent;

use crate::decode::WireDecoder;
use crate::error::ProviderError;
use crate::secret::Secrets;
use crate::sse::SseDecoder;

struct State<D> {
    body: BoxStream<'static, Result<Bytes, ProviderError>>,
    sse: SseDecoder,
    wire: D,
    /// Decoded events not yet handed out. Reused across chunks.
    ready: VecDeque<ResponseEvent>,
    /// Scratch buffer for one event's decoded output. Reused.
    decoded: Vec<ResponseEvent>,
    finished: bool,
    provider: Arc<str>,
    round: u32,
    /// Redacted from errors and error events (servers echo keys back).
    secrets: Secrets,
}

impl<D: WireDecoder> State<D> {
    fn fail(&mut self, error: ProviderError) -> noetic_core::Error {
        self.finished = true;
        self.ready.clear();
        error
            .redact(&self.secrets)
            .into_core(&self.provider, Some(self.round))
    }

    fn take_chunk(&mut self, chunk: &[u8]) -> Result<(), ProviderError> {
        let State {
            sse,
            wire,
            ready,
            decoded,
            secrets,
            ..
        } = self;
        let mut failure = None;
        sse.feed(chunk, &mut |event| {
            if failure.is_some() {
                return;
            }
            match wire.decode(&event.data, decoded) {
                Ok(()) => ready.extend(decoded.drain(..).map(|event| redact_event(secrets, event))),
                Err(error) => failure = Some(error),
            }
        })?;
        failure.map_or(Ok(()), Err)
    }
}

/// `event` with secrets redacted from the provider's error texts (only error events carry any).
pub(crate) fn redact_event(secrets: &Secrets, mut event: ResponseEvent) -> ResponseEvent {
    match &mut event {
        ResponseEvent::Error { message, .. } => secrets.redact_string(message),
        ResponseEvent::Finished(snapshot) => {
            if let Some(error) = &mut snapshot.error {
                secrets.redact_string(error);
            }
        }
        _ => {}
    }
    event
}

/// Decodes `body` into events with `wire`; errors name the provider and the round, and neither errors
/// nor error events carry `secrets`.
///
/// A hand-written stream rather than `stream::unfold`: `unfold` moves its whole state into a new
/// future for every item, which showed up in profiles as per-event copying.
pub(crate) fn decode_events<D: WireDecoder + Unpin>(
    body: BoxStream<'static, Result<Bytes, ProviderError>>,
    wire: D,
    max_event_bytes: usize,
    provider: Arc<str>,
    round: u32,
    secrets: Secrets,
) -> BoxStream<'static, noetic_core::Result<ResponseEvent>> {
    State {
        body,
        sse: SseDecoder::new(max_event_bytes),
        wire,
        ready: VecDeque::new(),
        decoded: Vec::new(),
        finished: false,
        provider,
        round,
        secrets,
    }
    .boxed()
}

impl<D: WireDecoder + Unpin> Stream for State<D> {
    type Item = noetic_core::Result<ResponseEvent>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(event) = this.ready.pop_front() {
                return Poll::Ready(Some(Ok(event)));
            }
            if this.finished {
                return Poll::Ready(None);
            }
            match this.body.poll_next_unpin(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok(chunk))) => {
                    if let Err(error) = this.take_chunk(&chunk) {
                        return Poll::Ready(Some(Err(this.fail(error))));
                    }
                }
                Poll::Ready(Some(Err(error))) => return Poll::Ready(Some(Err(this.fail(error)))),
                Poll::Ready(None) => {
                    this.finished = true;
                    if let Err(error) = this.wire.finish(&mut this.decoded) {
                        return Poll::Ready(Some(Err(this.fail(error))));
                    }
                    let secrets = &this.secrets;
                    this.ready.extend(
                        this.decoded
                            .drain(..)
                            .map(|event| redact_event(secrets, event)),
                    );
                }
            }
        }
    }
}
