//! Real captures, mutated, through both providers over the mock server: the round ends (no hang) in
//! events the accumulator folds, or in an error with a stable code; nothing panics.

use std::time::Duration;

use futures_util::StreamExt;
use noetic_core::ModelProvider;
use noetic_core::item::Item;
use noetic_core::model::{ModelParams, ModelRequest, ResponseAccumulator};
use noetic_providers::{ChatCompletions, OpenResponses, RetryConfig};
use noetic_test_support::{MockReply, MockServer, fixtures_dir};
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

/// The codes a round may fail with on bad bytes.
const STABLE_CODES: &[&str] = &["SSE_MALFORMED", "EVENT_MALFORMED", "PROVIDER_ERROR"];

/// The cap on one event in these tests, small so that huge lines reach it.
const MAX_EVENT_BYTES: usize = 16 * 1024;

/// Captures larger than this are left out to keep the suite quick.
const MAX_FIXTURE_BYTES: usize = 64 * 1024;

/// A capture as the server would send it.
struct Capture {
    body: Vec<u8>,
    content_type: &'static str,
}

/// The captures whose names satisfy `wanted`: `.sse` as is, `.jsonl` framed as SSE, `.json` whole.
fn captures(wanted: impl Fn(&str) -> bool) -> Vec<Capture> {
    let mut names: Vec<String> = std::fs::read_dir(fixtures_dir())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .filter(|name| wanted(name))
        .collect();
    names.sort();
    let captures: Vec<Capture> = names
        .iter()
        .filter_map(|name| {
            let bytes = std::fs::read(fixtures_dir().join(name)).unwrap();
            if bytes.len() > MAX_FIXTURE_BYTES {
                return None;
            }
            let (body, content_type) = if name.ends_with(".jsonl") {
                let mut body = Vec::new();
                for line in bytes
                    .split(|byte| *byte == b'\n')
                    .filter(|line| !line.is_empty())
                {
                    body.extend_from_slice(b"data: ");
                    body.extend_from_slice(line);
                    body.extend_from_slice(b"\n\n");
                }
                (body, "text/event-stream")
            } else if name.ends_with(".json") {
                (bytes, "application/json")
            } else if name.ends_with(".sse") {
                (bytes, "text/event-stream")
            } else {
                return None;
            };
            Some(Capture { body, content_type })
        })
        .collect();
    assert!(
        captures.len() >= 3,
        "found the captures in {:?}",
        fixtures_dir()
    );
    captures
}

/// One change to a capture's bytes.
#[derive(Debug, Clone)]
enum Mutation {
    /// Cut the body here.
    Truncate(Index),
    /// XOR one byte with a non-zero mask.
    Flip(Index, u8),
    /// Remove up to `len` bytes.
    Delete(Index, usize),
    /// Repeat up to `len` bytes in place.
    Duplicate(Index, usize),
    /// Insert up to `len` bytes of another capture (maybe of the other wire format).
    Splice {
        at: Index,
        donor: Index,
        from: Index,
        len: usize,
    },
    /// Insert arbitrary bytes.
    Insert(Index, Vec<u8>),
    /// Insert a line of `len` bytes, ended or not.
    HugeLine(Index, usize, bool),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        any::<Index>().prop_map(Mutation::Truncate),
        (any::<Index>(), 1u8..=255).prop_map(|(at, mask)| Mutation::Flip(at, mask)),
        (any::<Index>(), 1usize..256).prop_map(|(at, len)| Mutation::Delete(at, len)),
        (any::<Index>(), 1usize..256).prop_map(|(at, len)| Mutation::Duplicate(at, len)),
        (any::<Index>(), any::<Index>(), any::<Index>(), 1usize..2048).prop_map(
            |(at, donor, from, len)| Mutation::Splice {
                at,
                donor,
                from,
                len
            }
        ),
        (any::<Index>(), prop::collection::vec(any::<u8>(), 1..32))
            .prop_map(|(at, bytes)| Mutation::Insert(at, bytes)),
        (any::<Index>(), 1usize..(4 * MAX_EVENT_BYTES), any::<bool>())
            .prop_map(|(at, len, ended)| Mutation::HugeLine(at, len, ended)),
    ]
}

fn apply(body: &mut Vec<u8>, mutation: &Mutation, donors: &[Capture]) {
    let at = |index: &Index, body: &Vec<u8>| index.index(body.len() + 1);
    match mutation {
        Mutation::Truncate(index) => {
            let cut = at(index, body);
            body.truncate(cut);
        }
        Mutation::Flip(index, mask) => {
            if !body.is_empty() {
                let position = index.index(body.len());
                body[position] ^= mask;
            }
        }
        Mutation::Delete(index, len) => {
            let start = at(index, body);
            let end = (start + len).min(body.len());
            body.drain(start..end);
        }
        Mutation::Duplicate(index, len) => {
            let start = at(index, body);
            let end = (start + len).min(body.len());
            let copy = body[start..end].to_vec();
            body.splice(start..start, copy);
        }
        Mutation::Splice {
            at: index,
            donor,
            from,
            len,
        } => {
            let donor = &donors[donor.index(donors.len())].body;
            let start = from.index(donor.len() + 1);
            let end = (start + len).min(donor.len());
            let position = at(index, body);
            body.splice(position..position, donor[start..end].iter().copied());
        }
        Mutation::Insert(index, bytes) => {
            let position = at(index, body);
            body.splice(position..position, bytes.iter().copied());
        }
        Mutation::HugeLine(index, len, ended) => {
            let position = at(index, body);
            let mut line = b"data: {\"type\":\"response.output_text.delta\",\"delta\":\"".to_vec();
            line.resize(line.len() + len, b'x');
            if *ended {
                line.extend_from_slice(b"\"}\n\n");
            }
            body.splice(position..position, line);
        }
    }
}

#[derive(Debug, Clone)]
struct Case {
    capture: Index,
    mutations: Vec<Mutation>,
    /// 0: the whole body in one frame.
    chunk_size: usize,
    status: u16,
}

fn case() -> impl Strategy<Value = Case> {
    (
        any::<Index>(),
        prop::collection::vec(mutation(), 1..5),
        prop_oneof![Just(0usize), 16usize..4096],
        prop_oneof![4 => Just(200u16), 1 => Just(400u16), 1 => Just(500u16)],
    )
        .prop_map(|(capture, mutations, chunk_size, status)| Case {
            capture,
            mutations,
            chunk_size,
            status,
        })
}

/// Serves the mutated capture and runs one round to its end; the error, if any, must have a stable
/// code. A round that does not end within the bound is a hang.
async fn check_round(
    server: &MockServer,
    provider: &dyn ModelProvider,
    captures: &[Capture],
    donors: &[Capture],
    case: Case,
) -> Result<(), TestCaseError> {
    let capture = &captures[case.capture.index(captures.len())];
    let mut body = capture.body.clone();
    for mutation in &case.mutations {
        apply(&mut body, mutation, donors);
    }
    server.push(
        MockReply::sse(body)
            .status(case.status)
            .header("content-type", capture.content_type)
            .chunk_size(case.chunk_size),
    );
    let params = ModelParams::default();
    let input = [Item::user_text("hello")];
    let request = ModelRequest::new("m", &input, &params);
    let round = async {
        let stream = provider.stream(&request).await?;
        let mut accumulator = ResponseAccumulator::new();
        let mut events = stream.events;
        while let Some(event) = events.next().await {
            accumulator.push(&event?);
        }
        accumulator.finish("mock", 0).map(|_| ())
    };
    // Not a wait for work: a guard that turns a hang into a failure.
    let outcome = tokio::time::timeout(Duration::from_secs(30), round)
        .await
        .map_err(|_| TestCaseError::fail("the round did not end: a hang"))?;
    if let Err(error) = outcome {
        prop_assert!(
            STABLE_CODES.contains(&error.code()),
            "unstable code {}: {error}",
            error.code()
        );
    }
    Ok(())
}

fn run_cases(captures: &[Capture], provider: impl FnOnce(&MockServer) -> Box<dyn ModelProvider>) {
    let donors = captures_all();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let server = runtime.block_on(MockServer::start());
    let provider = runtime.block_on(async { provider(&server) });
    let mut runner = TestRunner::new(Config {
        cases: 96,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&case(), |case| {
            runtime.block_on(check_round(&server, &*provider, captures, &donors, case))
        })
        .unwrap();
}

fn captures_all() -> Vec<Capture> {
    captures(|_| true)
}

#[test]
fn mutated_responses_captures_end_in_events_or_a_stable_error() {
    let captures = captures(|name| !name.contains("-chat."));
    run_cases(&captures, |server| {
        Box::new(
            OpenResponses::builder(server.base_url())
                .api_key("sk-test")
                .max_event_bytes(MAX_EVENT_BYTES)
                .retry(RetryConfig::none())
                .build()
                .unwrap(),
        )
    });
}

#[test]
fn mutated_chat_captures_end_in_events_or_a_stable_error() {
    let captures = captures(|name| name.contains("-chat."));
    run_cases(&captures, |server| {
        Box::new(
            ChatCompletions::builder(server.base_url())
                .api_key("sk-test")
                .max_event_bytes(MAX_EVENT_BYTES)
                .retry(RetryConfig::none())
                .build()
                .unwrap(),
        )
    });
}

#[tokio::test]
async fn an_absurd_output_index_is_malformed_not_a_huge_allocation() {
    let server = MockServer::start().await;
    let provider = OpenResponses::builder(server.base_url())
        .retry(RetryConfig::none())
        .build()
        .unwrap();
    for event in [
        serde_json::json!({"type": "response.output_text.delta", "output_index": 4_000_000_000u32, "content_index": 0, "delta": "x"}),
        serde_json::json!({"type": "response.output_text.delta", "output_index": 0, "content_index": 4_000_000_000u32, "delta": "x"}),
    ] {
        server.push(MockReply::sse_events([event]));
        let params = ModelParams::default();
        let input = [Item::user_text("hello")];
        let request = ModelRequest::new("m", &input, &params);
        let mut events = provider.stream(&request).await.unwrap().events;
        let mut accumulator = ResponseAccumulator::new();
        let error = loop {
            match events.next().await {
                // Folding the event is what would allocate a slot per index.
                Some(Ok(event)) => accumulator.push(&event),
                Some(Err(error)) => break error,
                None => panic!("the absurd index was accepted"),
            };
        };
        assert_eq!(error.code(), "EVENT_MALFORMED");
        assert!(error.to_string().contains("4000000000"), "{error}");
    }
}

#[tokio::test]
async fn an_error_body_that_never_ends_fails_the_round_at_once() {
    // An error status, then a large body that never ends: the provider reads a bounded start of it
    // for the message instead of waiting for (and buffering) the rest.
    let mut body = b"data: ".to_vec();
    body.extend(std::iter::repeat_n(b'x', 256 * 1024));
    body.extend_from_slice(b"\n\ndata: never sent\n\n");
    let server = MockServer::start().await;
    let providers: [Box<dyn ModelProvider>; 2] = [
        Box::new(
            OpenResponses::builder(server.base_url())
                .retry(RetryConfig::none())
                .build()
                .unwrap(),
        ),
        Box::new(
            ChatCompletions::builder(server.base_url())
                .retry(RetryConfig::none())
                .build()
                .unwrap(),
        ),
    ];
    for provider in &providers {
        server.push(
            MockReply::sse(body.clone())
                .status(400)
                .header("content-type", "text/plain")
                .stall_after_events(1),
        );
        let params = ModelParams::default();
        let input = [Item::user_text("hello")];
        let request = ModelRequest::new("m", &input, &params);
        // Not a wait for work: a guard that turns a hang into a failure.
        let outcome = tokio::time::timeout(Duration::from_secs(30), provider.stream(&request))
            .await
            .expect("the round did not end: it waited for the end of an endless error body");
        let Err(error) = outcome else {
            panic!("a 400 is an error")
        };
        assert!(
            matches!(
                &error,
                noetic_core::Error::Provider {
                    status: Some(400),
                    ..
                }
            ),
            "{error:?}"
        );
        assert!(error.to_string().contains("data: xxx"), "{error}");
    }
}
