//! The SSE decoder on arbitrary bytes: the same events wherever the chunks split, and under a small cap
//! nothing but events within it or `SSE_MALFORMED`.

use noetic_providers::{SseDecoder, SseEvent};
use proptest::prelude::*;

/// Bytes that look like SSE often enough to reach every branch: field names, every line ending,
/// comments, multi-byte and invalid UTF-8, and arbitrary bytes.
fn sse_bytes() -> impl Strategy<Value = Vec<u8>> {
    let token = prop_oneof![
        Just(b"data: ".to_vec()),
        Just(b"data:".to_vec()),
        Just(b"data".to_vec()),
        Just(b"event: x".to_vec()),
        Just(b"id: 1".to_vec()),
        Just(b": keep-alive".to_vec()),
        Just(b"\n".to_vec()),
        Just(b"\r".to_vec()),
        Just(b"\r\n".to_vec()),
        Just(b"\n\n".to_vec()),
        Just(b":".to_vec()),
        Just(b" ".to_vec()),
        Just("é😀".as_bytes().to_vec()),
        Just(vec![0xff]),
        Just(vec![0xf0, 0x9f]), // a truncated 4-byte character
        Just(b"[DONE]".to_vec()),
        prop::collection::vec(any::<u8>(), 0..8),
        "[a-z{}\":,]{0,12}".prop_map(String::into_bytes),
    ];
    prop::collection::vec(token, 0..64).prop_map(|tokens| tokens.concat())
}

/// Decodes `input` split at `cuts` (byte offsets, any order), with an empty chunk after the pieces
/// whose bit is set in `empty_after`, stopping at the first error.
fn decode(
    input: &[u8],
    cuts: &[prop::sample::Index],
    empty_after: u16,
    max_event_bytes: usize,
) -> (Vec<SseEvent>, Result<bool, String>) {
    let mut offsets: Vec<usize> = cuts.iter().map(|cut| cut.index(input.len() + 1)).collect();
    offsets.push(0);
    offsets.push(input.len());
    offsets.sort_unstable();
    let mut decoder = SseDecoder::new(max_event_bytes);
    let mut events = Vec::new();
    for (number, window) in offsets.windows(2).enumerate() {
        let piece = &input[window[0]..window[1]];
        let empty = (empty_after >> (number % 16)) & 1 == 1;
        for piece in [piece, &[][..]].into_iter().take(if empty { 2 } else { 1 }) {
            if let Err(error) = decoder.feed(piece, &mut |event| events.push(event)) {
                assert_eq!(error.code(), "SSE_MALFORMED", "{error}");
                return (events, Err(error.to_string()));
            }
        }
    }
    let pending = decoder.has_pending();
    (events, Ok(pending))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn sse_decoding_is_the_same_wherever_the_chunks_split(
        input in sse_bytes(),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..12),
        empty_after in any::<u16>(),
    ) {
        // Empty chunks too: a body stream may yield one, even between the CR and LF of a CRLF.
        let whole = decode(&input, &[], 0, noetic_providers::DEFAULT_MAX_EVENT_BYTES);
        let chunked = decode(&input, &cuts, empty_after, noetic_providers::DEFAULT_MAX_EVENT_BYTES);
        prop_assert_eq!(whole, chunked);
    }

    #[test]
    fn sse_decoding_any_bytes_under_a_small_cap_gives_events_within_it_or_sse_malformed(
        input in prop_oneof![sse_bytes(), prop::collection::vec(any::<u8>(), 0..512)],
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..12),
        empty_after in any::<u16>(),
        cap in 1usize..48,
    ) {
        // `decode` asserts the error code; here: no event outgrows the cap.
        let (events, _) = decode(&input, &cuts, empty_after, cap);
        for event in &events {
            prop_assert!(event.data.len() <= cap, "{} bytes over a {cap}-byte cap", event.data.len());
        }
    }
}

#[test]
fn a_huge_line_without_an_end_is_refused_at_the_cap_not_buffered() {
    let mut decoder = SseDecoder::new(1024);
    let line = vec![b'x'; 4096];
    let mut fed = 0;
    let error = loop {
        match decoder.feed(&line[fed..fed + 256], &mut |_| {}) {
            Ok(()) => fed += 256,
            Err(error) => break error,
        }
        assert!(fed < line.len(), "a line past the cap must be refused");
    };
    assert_eq!(error.code(), "SSE_MALFORMED");
    assert!(fed <= 1024, "refused once past the cap, after {fed} bytes");
}

#[test]
fn an_empty_chunk_between_the_cr_and_lf_of_a_crlf_changes_nothing() {
    let mut decoder = SseDecoder::default();
    let mut events = Vec::new();
    for piece in [&b"data: a\r"[..], b"", b"\ndata: b\r\n\r\n"] {
        decoder
            .feed(piece, &mut |event| events.push(event))
            .unwrap();
    }
    let data: Vec<&str> = events.iter().map(|event| event.data.as_str()).collect();
    assert_eq!(data, ["a\nb"]);
}
