//! Tests of [`MockServer`] and [`MockReply`] through a minimal raw HTTP/1.1 client, which sees the
//! chunked transfer encoding frame by frame (so chunk sizes can be asserted exactly, whatever TCP does)
//! and tells a clean end of body from an aborted connection.

use std::io;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use noetic_test_support::{MockReply, MockServer, RecordedHttpRequest, fixtures_dir};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::time::timeout;

/// A guard against a hung test, not a wait for work: every read normally completes in microseconds.
const GUARD: Duration = Duration::from_secs(10);

const TEXT_FIXTURE: &str = "openai-responses.text.gpt-4o-mini.sse";

// ---------------------------------------------------------------------------------------------------
// A raw HTTP/1.1 client.

/// The status line and headers of a response.
struct Head {
    status: u16,
    headers: Vec<(String, String)>,
}

impl Head {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(header, _)| header.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }

    fn is_chunked(&self) -> bool {
        self.header("transfer-encoding") == Some("chunked")
    }
}

/// One connection whose response head has been read.
struct Connection {
    reader: BufReader<TcpStream>,
}

/// A whole response: the head and the body frames as sent (one frame if not chunked).
struct Reply {
    head: Head,
    frames: Vec<Vec<u8>>,
}

impl Reply {
    fn body(&self) -> Vec<u8> {
        self.frames.concat()
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body()).expect("the body is JSON")
    }
}

/// Sends one request (`connection: close`) and reads the response head.
async fn send(
    server: &MockServer,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (Head, Connection) {
    let stream = TcpStream::connect(server.local_addr())
        .await
        .expect("connect to the mock server");
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nhost: {}\r\nconnection: close\r\ncontent-length: {}\r\n",
        server.local_addr(),
        body.len()
    );
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    let mut reader = BufReader::new(stream);
    reader
        .get_mut()
        .write_all(request.as_bytes())
        .await
        .expect("write the request");
    let head = timeout(GUARD, read_head(&mut reader))
        .await
        .expect("the head arrives")
        .expect("the head is readable");
    (head, Connection { reader })
}

async fn read_head(reader: &mut BufReader<TcpStream>) -> io::Result<Head> {
    let mut line = String::new();
    reader.read_line(&mut line).await?;
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|status| status.parse().ok())
        .ok_or_else(|| io::Error::other(format!("bad status line {line:?}")))?;
    let mut headers = Vec::new();
    loop {
        line.clear();
        reader.read_line(&mut line).await?;
        let line = line.trim_end();
        if line.is_empty() {
            return Ok(Head { status, headers });
        }
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| io::Error::other(format!("bad header line {line:?}")))?;
        headers.push((name.trim().to_lowercase(), value.trim().to_owned()));
    }
}

impl Connection {
    /// The next chunk of a chunked body; `None` at the terminating chunk; an error if the connection
    /// ends first.
    async fn next_chunk(&mut self) -> io::Result<Option<Vec<u8>>> {
        let mut line = String::new();
        if self.reader.read_line(&mut line).await? == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        let size = line.trim_end().split(';').next().unwrap_or_default();
        let size = usize::from_str_radix(size, 16)
            .map_err(|_| io::Error::other(format!("bad chunk size line {line:?}")))?;
        let mut chunk = vec![0; size + 2];
        self.reader.read_exact(&mut chunk).await?;
        if !chunk.ends_with(b"\r\n") {
            return Err(io::Error::other("chunk not followed by CRLF"));
        }
        chunk.truncate(size);
        Ok((size > 0).then_some(chunk))
    }

    /// Reads chunks until `expected_len` bytes have arrived.
    async fn read_at_least(&mut self, expected_len: usize) -> Vec<u8> {
        let mut received = Vec::new();
        while received.len() < expected_len {
            let chunk = timeout(GUARD, self.next_chunk())
                .await
                .expect("a chunk arrives")
                .expect("the connection is open")
                .expect("the body has not ended");
            received.extend_from_slice(&chunk);
        }
        received
    }

    /// The rest of the body, frame by frame.
    async fn read_body(&mut self, head: &Head) -> io::Result<Vec<Vec<u8>>> {
        if head.is_chunked() {
            let mut frames = Vec::new();
            while let Some(chunk) = self.next_chunk().await? {
                frames.push(chunk);
            }
            return Ok(frames);
        }
        let length = head
            .header("content-length")
            .and_then(|length| length.parse().ok())
            .ok_or_else(|| io::Error::other("neither chunked nor content-length"))?;
        let mut body = vec![0; length];
        self.reader.read_exact(&mut body).await?;
        Ok(vec![body])
    }
}

/// A whole request and response.
async fn fetch(
    server: &MockServer,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Reply {
    let (head, mut connection) = send(server, method, path, headers, body).await;
    let frames = timeout(GUARD, connection.read_body(&head))
        .await
        .expect("the body arrives")
        .expect("the body ends cleanly");
    Reply { head, frames }
}

/// `POST /v1/responses` with a small JSON body.
async fn post(server: &MockServer) -> Reply {
    fetch(server, "POST", "/v1/responses", &[], r#"{"model":"m"}"#).await
}

fn fixture_bytes(name: &str) -> Vec<u8> {
    std::fs::read(fixtures_dir().join(name)).expect("the fixture exists")
}

fn data_events(data: &[&str]) -> String {
    data.iter()
        .map(|data| format!("data: {data}\n\n"))
        .collect()
}

// ---------------------------------------------------------------------------------------------------
// Bodies and chunking.

#[tokio::test]
async fn body_arrives_intact_at_chunk_sizes_1_and_7() {
    let fixture = fixture_bytes(TEXT_FIXTURE);
    for size in [1, 7] {
        let server = MockServer::start().await;
        server.push(MockReply::fixture(TEXT_FIXTURE).chunk_size(size));
        let reply = post(&server).await;
        assert_eq!(reply.head.status, 200);
        assert!(reply.head.is_chunked());
        assert_eq!(reply.body(), fixture, "chunk size {size}");
        let (last, full) = reply.frames.split_last().expect("frames");
        assert!(
            full.iter().all(|frame| frame.len() == size),
            "chunk size {size}"
        );
        assert!((1..=size).contains(&last.len()));
        assert_eq!(reply.frames.len(), fixture.len().div_ceil(size));
    }
}

#[tokio::test]
async fn sse_without_chunk_size_is_one_chunked_frame() {
    let server = MockServer::start().await;
    server.push(MockReply::fixture(TEXT_FIXTURE));
    let reply = post(&server).await;
    assert!(
        reply.head.is_chunked(),
        "SSE is streamed like real servers do"
    );
    assert_eq!(reply.head.header("content-type"), Some("text/event-stream"));
    assert_eq!(reply.frames, vec![fixture_bytes(TEXT_FIXTURE)]);
}

#[tokio::test]
async fn sse_events_frames_each_event_then_done() {
    let server = MockServer::start().await;
    server.push(MockReply::sse_events([json!({"a": 1}), json!({"b": "x"})]));
    let reply = post(&server).await;
    let expected = data_events(&[r#"{"a":1}"#, r#"{"b":"x"}"#, "[DONE]"]);
    assert_eq!(String::from_utf8(reply.body()).expect("utf-8"), expected);
}

#[tokio::test]
async fn delay_between_chunks_paces_the_body() {
    let server = MockServer::start().await;
    server.push(
        MockReply::sse("abcdefghi")
            .chunk_size(3)
            .delay_between_chunks(Duration::from_millis(20)),
    );
    let started = Instant::now();
    let reply = post(&server).await;
    assert_eq!(reply.body(), b"abcdefghi");
    assert_eq!(reply.frames.len(), 3);
    // Two delays between three chunks; a lower bound holds on any machine.
    assert!(started.elapsed() >= Duration::from_millis(40));
}

#[tokio::test]
async fn frame_per_event_sends_each_event_in_a_frame_of_its_own() {
    let server = MockServer::start().await;
    server.push(
        MockReply::sse_events([json!({"a": 1}), json!({"b": "x"})])
            .frame_per_event()
            .delay_between_chunks(Duration::from_millis(20)),
    );
    let started = Instant::now();
    let reply = post(&server).await;
    let frames: Vec<String> = reply
        .frames
        .iter()
        .map(|frame| String::from_utf8(frame.clone()).expect("utf-8"))
        .collect();
    assert_eq!(
        frames,
        [
            data_events(&[r#"{"a":1}"#]),
            data_events(&[r#"{"b":"x"}"#]),
            data_events(&["[DONE]"])
        ]
    );
    // Two delays between three events.
    assert!(started.elapsed() >= Duration::from_millis(40));
}

// ---------------------------------------------------------------------------------------------------
// Fixtures.

#[tokio::test]
async fn sse_fixture_is_served_byte_for_byte() {
    let server = MockServer::start().await;
    server.push(MockReply::fixture(TEXT_FIXTURE));
    assert_eq!(post(&server).await.body(), fixture_bytes(TEXT_FIXTURE));
}

#[tokio::test]
async fn jsonl_fixture_is_reframed_line_by_line() {
    let name = "openai-responses.error-then-failed.gpt-5-nano.jsonl";
    let server = MockServer::start().await;
    server.push(MockReply::fixture(name));
    let reply = post(&server).await;
    let contents = String::from_utf8(fixture_bytes(name)).expect("utf-8");
    let lines: Vec<&str> = contents.lines().filter(|line| !line.is_empty()).collect();
    assert_eq!(lines.len(), 4);
    assert_eq!(reply.head.header("content-type"), Some("text/event-stream"));
    assert_eq!(
        String::from_utf8(reply.body()).expect("utf-8"),
        data_events(&lines)
    );
}

#[tokio::test]
async fn json_fixture_is_served_as_application_json() {
    let name = "openrouter-responses.nonstream.cache-write-then-read.gpt-5.6-sol.json";
    let server = MockServer::start().await;
    server.push(MockReply::fixture(name));
    let reply = post(&server).await;
    assert_eq!(reply.head.status, 200);
    assert_eq!(reply.head.header("content-type"), Some("application/json"));
    assert!(!reply.head.is_chunked());
    assert_eq!(reply.body(), fixture_bytes(name));
}

// ---------------------------------------------------------------------------------------------------
// Requests, status and headers, routing.

#[tokio::test]
async fn requests_records_method_path_headers_and_body() {
    let server = MockServer::start().await;
    server.set_fallback(MockReply::sse_events([]));
    let body = r#"{"model":"gpt-4o-mini","stream":true}"#;
    let headers = [
        ("Authorization", "Bearer test-key"),
        ("X-Title", "noetic"),
        ("content-type", "application/json"),
    ];
    post_with(&server, "/v1/responses", &headers, body).await;
    post_with(&server, "/v1/chat/completions", &[], "not json").await;

    let requests = server.requests();
    assert_eq!(server.request_count(), 2);
    let RecordedHttpRequest {
        method,
        path,
        headers,
        body,
        raw_body,
    } = &requests[0];
    assert_eq!((method.as_str(), path.as_str()), ("POST", "/v1/responses"));
    assert_eq!(
        raw_body.as_ref(),
        br#"{"model":"gpt-4o-mini","stream":true}"#
    );
    assert_eq!(*body, json!({"model": "gpt-4o-mini", "stream": true}));
    assert!(headers.contains(&("authorization".to_owned(), "Bearer test-key".to_owned())));
    assert_eq!(requests[0].header("x-title"), Some("noetic"));
    assert_eq!(requests[0].header("Content-Type"), Some("application/json"));
    assert_eq!(requests[1].path, "/v1/chat/completions");
    assert_eq!(requests[1].body, json!("not json"));
}

async fn post_with(server: &MockServer, path: &str, headers: &[(&str, &str)], body: &str) {
    let reply = fetch(server, "POST", path, headers, body).await;
    assert_eq!(reply.head.status, 200);
}

#[tokio::test]
async fn status_and_headers_are_applied() {
    let server = MockServer::start().await;
    let error = json!({"error": {"message": "slow down"}});
    server.push(MockReply::json(429, error.clone()).header("Retry-After", "2"));
    server.push(
        MockReply::sse("data: {}\n\n")
            .status(201)
            .header("x-generation-id", "gen-123")
            .header("content-type", "text/event-stream; charset=utf-8"),
    );

    let reply = post(&server).await;
    assert_eq!(reply.head.status, 429);
    assert_eq!(reply.head.header("retry-after"), Some("2"));
    assert_eq!(reply.head.header("content-type"), Some("application/json"));
    assert_eq!(reply.json(), error);

    let reply = post(&server).await;
    assert_eq!(reply.head.status, 201);
    assert_eq!(reply.head.header("x-generation-id"), Some("gen-123"));
    let content_types = reply
        .head
        .headers
        .iter()
        .filter(|(name, _)| name == "content-type")
        .count();
    assert_eq!(
        content_types, 1,
        "header() replaces the constructor's value"
    );
    assert_eq!(
        reply.head.header("content-type"),
        Some("text/event-stream; charset=utf-8")
    );
}

#[tokio::test]
async fn queue_then_fallback_then_no_reply_500() {
    let server = MockServer::start().await;
    let reply = post(&server).await;
    assert_eq!(reply.head.status, 500);
    assert_eq!(
        reply.json()["error"]["message"],
        "mock server has no reply queued"
    );

    server.push(MockReply::json(200, json!({"n": 1})));
    server.push(MockReply::json(200, json!({"n": 2})));
    server.set_fallback(MockReply::json(200, json!({"n": "fallback"})));
    let mut seen = Vec::new();
    for _ in 0..4 {
        seen.push(post(&server).await.json()["n"].clone());
    }
    assert_eq!(
        seen,
        [json!(1), json!(2), json!("fallback"), json!("fallback")]
    );
    assert_eq!(server.request_count(), 5);
}

#[tokio::test]
async fn models_route_and_unknown_routes() {
    let server = MockServer::start().await;
    server.set_fallback(MockReply::json(200, json!({})));
    let models = fetch(&server, "GET", "/v1/models", &[], "").await;
    assert_eq!(
        (models.head.status, models.json()),
        (200, json!({"data": []}))
    );
    let outside = fetch(&server, "POST", "/other", &[], "{}").await;
    assert_eq!(outside.head.status, 404);
    let get = fetch(&server, "GET", "/v1/responses", &[], "").await;
    assert_eq!(get.head.status, 404);
    let requests = server.requests();
    assert_eq!(requests.len(), 3, "every request is recorded");
    assert_eq!(
        requests[0].body,
        Value::Null,
        "an empty body is recorded as null"
    );
}

#[tokio::test]
async fn wait_for_requests_resolves_once_enough_arrived() {
    let server = MockServer::start().await;
    server.set_fallback(MockReply::json(200, json!({})));
    timeout(GUARD, server.wait_for_requests(0))
        .await
        .expect("zero requests are already there");
    let clients: Vec<_> = (0..3)
        .map(|_| {
            let server = server.clone();
            tokio::spawn(async move { post(&server).await.head.status })
        })
        .collect();
    timeout(GUARD, server.wait_for_requests(3))
        .await
        .expect("three requests arrive");
    assert!(server.requests().len() >= 3);
    for client in join_all(clients).await {
        assert_eq!(client.expect("client task"), 200);
    }
}

// ---------------------------------------------------------------------------------------------------
// Faults.

fn five_events() -> MockReply {
    MockReply::sse_events((0..5).map(|n| json!({"n": n})))
}

#[tokio::test]
async fn stall_after_events_sends_exactly_those_events_then_nothing() {
    for size in [0, 7] {
        let server = MockServer::start().await;
        server.push(five_events().chunk_size(size).stall_after_events(2));
        let (head, mut connection) = send(&server, "POST", "/v1/responses", &[], "{}").await;
        assert_eq!(head.status, 200);
        let expected = data_events(&[r#"{"n":0}"#, r#"{"n":1}"#]);
        let received = connection.read_at_least(expected.len()).await;
        assert_eq!(String::from_utf8(received).expect("utf-8"), expected);
        // The fault under test is silence: the timeout is the assertion.
        let next = timeout(Duration::from_millis(300), connection.next_chunk()).await;
        assert!(next.is_err(), "chunk size {size}: nothing after the stall");
    }
}

#[tokio::test]
async fn drop_after_events_aborts_the_connection() {
    let server = MockServer::start().await;
    server.push(five_events().drop_after_events(1));
    let (head, mut connection) = send(&server, "POST", "/v1/responses", &[], "{}").await;
    assert_eq!(head.status, 200);
    let expected = data_events(&[r#"{"n":0}"#]);
    assert_eq!(
        connection.read_at_least(expected.len()).await,
        expected.as_bytes()
    );
    let end = timeout(GUARD, connection.next_chunk())
        .await
        .expect("the connection ends");
    assert!(end.is_err(), "an abort, not a clean end of body: {end:?}");
}

#[tokio::test]
async fn drop_after_events_delivers_a_long_prefix_before_the_abort() {
    let name = "openai-responses.reasoning-summary-long.o3-mini.sse";
    let fixture = fixture_bytes(name);
    let prefix_len = fixture
        .windows(2)
        .enumerate()
        .filter(|(_, pair)| pair == b"\n\n")
        .nth(1499)
        .map(|(index, _)| index + 2)
        .expect("the fixture has 1,753 events");
    for size in [0, 4096] {
        let server = MockServer::start().await;
        server.push(
            MockReply::fixture(name)
                .chunk_size(size)
                .drop_after_events(1500),
        );
        let (_head, mut connection) = send(&server, "POST", "/v1/responses", &[], "{}").await;
        let received = connection.read_at_least(prefix_len).await;
        assert_eq!(received, fixture[..prefix_len], "chunk size {size}");
        let end = timeout(GUARD, connection.next_chunk())
            .await
            .expect("the connection ends");
        assert!(
            end.is_err(),
            "chunk size {size}: an abort, not a clean end: {end:?}"
        );
    }
}

#[tokio::test]
async fn dropping_the_server_ends_stalled_streams() {
    let server = MockServer::start().await;
    server.push(five_events().stall_after_events(1));
    let (_head, mut connection) = send(&server, "POST", "/v1/responses", &[], "{}").await;
    connection.read_at_least(1).await;
    drop(server);
    let end = timeout(GUARD, connection.next_chunk())
        .await
        .expect("the stalled stream ends when the server is dropped");
    assert!(end.is_err(), "{end:?}");
}

#[tokio::test]
async fn without_terminal_event_drops_the_terminal_event_and_done() {
    let server = MockServer::start().await;
    server.push(
        MockReply::sse_events([
            json!({"type": "response.created"}),
            json!({"type": "response.completed"}),
        ])
        .without_terminal_event(),
    );
    server.push(MockReply::fixture(TEXT_FIXTURE).without_terminal_event());

    let reply = post(&server).await;
    let expected = data_events(&[r#"{"type":"response.created"}"#]);
    assert_eq!(String::from_utf8(reply.body()).expect("utf-8"), expected);

    let fixture = String::from_utf8(fixture_bytes(TEXT_FIXTURE)).expect("utf-8");
    let terminal = fixture
        .rfind("event: response.completed\n")
        .expect("the fixture ends with response.completed");
    let reply = post(&server).await;
    assert_eq!(
        String::from_utf8(reply.body()).expect("utf-8"),
        fixture[..terminal]
    );
}

#[tokio::test]
async fn malformed_and_oversized_events_are_inserted() {
    let server = MockServer::start().await;
    server.push(
        MockReply::sse_events([json!(1), json!(2)])
            .malformed_line_after_events(1)
            .oversized_event_after_events(2, 100),
    );
    let oversized = format!("\"{}\"", "x".repeat(98));
    let expected = data_events(&["1", "{not json", "2", &oversized, "[DONE]"]);
    let reply = post(&server).await;
    assert_eq!(String::from_utf8(reply.body()).expect("utf-8"), expected);
    assert_eq!(oversized.len(), 100);
}

#[tokio::test]
async fn faults_count_events_not_comment_blocks() {
    let body = ": OPENROUTER PROCESSING\n\ndata: {\"n\":0}\n\n: OPENROUTER PROCESSING\n\ndata: {\"n\":1}\n\n";
    let server = MockServer::start().await;
    server.push(MockReply::sse(body).stall_after_events(1));
    let (_head, mut connection) = send(&server, "POST", "/v1/responses", &[], "{}").await;
    let expected = ": OPENROUTER PROCESSING\n\ndata: {\"n\":0}\n\n";
    let received = connection.read_at_least(expected.len()).await;
    assert_eq!(String::from_utf8(received).expect("utf-8"), expected);
    let next = timeout(Duration::from_millis(300), connection.next_chunk()).await;
    assert!(next.is_err(), "nothing after the stall");
}

// ---------------------------------------------------------------------------------------------------
// Concurrency.

#[tokio::test]
async fn a_stalled_stream_does_not_block_other_requests() {
    let server = MockServer::start().await;
    server.push(five_events().stall_after_events(1));
    let (_head, mut stalled) = send(&server, "POST", "/v1/responses", &[], "{}").await;
    stalled.read_at_least(1).await;
    server.push(MockReply::fixture(TEXT_FIXTURE));
    assert_eq!(post(&server).await.body(), fixture_bytes(TEXT_FIXTURE));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_many_concurrent_streams() {
    let server = MockServer::start().await;
    server.set_fallback(MockReply::fixture(TEXT_FIXTURE).chunk_size(512));
    let clients: Vec<_> = (0..200)
        .map(|_| {
            let server = server.clone();
            tokio::spawn(async move { post(&server).await.body() })
        })
        .collect();
    let fixture = fixture_bytes(TEXT_FIXTURE);
    for body in join_all(clients).await {
        assert_eq!(body.expect("client task"), fixture);
    }
    assert_eq!(server.request_count(), 200);
}

#[test]
fn handles_and_futures_are_send() {
    fn assert_send_sync<T: Send + Sync>(_: &T) {}
    fn assert_send<T: Send>(_: T) {}
    assert_send(MockServer::start());
    let reply = MockReply::sse("");
    assert_send_sync(&reply);
    fn server_is_send_sync(server: &MockServer) {
        assert_send_sync(server);
        assert_send(server.wait_for_requests(1));
    }
    let _ = server_is_send_sync;
}
