//! From a response's byte stream to framework events: SSE framing, then a [`WireDecoder`].

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use noetic_core::ResponseEvent;

use crate::decode::WireDecoder;
use crate::error::ProviderError;
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
}

impl<D: WireDecoder> State<D> {
    fn fail(&mut self, error: ProviderError) -> noetic_core::Error {
        self.finished = true;
        self.ready.clear();
        error.into_core(&self.provider, Some(self.round))
    }

    fn take_chunk(&mut self, chunk: &[u8]) -> Result<(), ProviderError> {
        let State {
            sse,
            wire,
            ready,
            decoded,
            ..
        } = self;
        let mut failure = None;
        sse.feed(chunk, &mut |event| {
            if failure.is_some() {
                return;
            }
            match wire.decode(&event.data, decoded) {
                Ok(()) => ready.extend(decoded.drain(..)),
                Err(error) => failure = Some(error),
            }
        })?;
        failure.map_or(Ok(()), Err)
    }
}

/// Decodes `body` into events with `wire`; errors name the provider and the round.
pub(crate) fn decode_events<D: WireDecoder>(
    body: BoxStream<'static, Result<Bytes, ProviderError>>,
    wire: D,
    max_event_bytes: usize,
    provider: Arc<str>,
    round: u32,
) -> BoxStream<'static, noetic_core::Result<ResponseEvent>> {
    let state = State {
        body,
        sse: SseDecoder::new(max_event_bytes),
        wire,
        ready: VecDeque::new(),
        decoded: Vec::new(),
        finished: false,
        provider,
        round,
    };
    futures_util::stream::unfold(state, |mut state| async move {
        loop {
            if let Some(event) = state.ready.pop_front() {
                return Some((Ok(event), state));
            }
            if state.finished {
                return None;
            }
            match state.body.next().await {
                Some(Ok(chunk)) => {
                    if let Err(error) = state.take_chunk(&chunk) {
                        let error = state.fail(error);
                        return Some((Err(error), state));
                    }
                }
                Some(Err(error)) => {
                    let error = state.fail(error);
                    return Some((Err(error), state));
                }
                None => {
                    state.finished = true;
                    let State {
                        wire,
                        ready,
                        decoded,
                        ..
                    } = &mut state;
                    if let Err(error) = wire.finish(decoded) {
                        let error = state.fail(error);
                        return Some((Err(error), state));
                    }
                    ready.extend(decoded.drain(..));
                }
            }
        }
    })
    .boxed()
}
