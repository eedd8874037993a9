//! A mock model-provider HTTP server speaking the real wire format, for testing the reqwest-based
//! providers end to end and for benchmarks.
//!
//! [`MockServer::start`] binds `127.0.0.1:0` and serves on a spawned tokio task until the last handle is
//! dropped. Every `POST` under `/v1` (`/v1/responses`, `/v1/chat/completions`, …) takes the next queued
//! [`MockReply`], or the fallback, or gets a 500. Replies can be re-chunked, paced and broken on purpose
//! (stall, abrupt disconnect, missing terminal event, malformed or oversized event) to test how a client
//! copes with what real servers do.
//!
//! Replies are turned into a ready-to-send plan when queued, so serving one costs a few `Arc` clones: the
//! server can sustain thousands of concurrent streams, and no lock is held while a body streams.

mod reply;
mod sse;

use std::collections::VecDeque;
use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::Response;
use axum::serve::ListenerExt;
use bytes::Bytes;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;

pub use reply::MockReply;
use reply::Plan;

/// The largest request body the server reads (larger ones get a 413 and are recorded with a `Null` body).
const MAX_REQUEST_BODY: usize = 64 * 1024 * 1024;

/// A running mock provider server; clones share it, and it stops when the last clone is dropped.
///
/// Routes: `GET /v1/models` answers `{"data": []}`; any `POST` under `/v1` takes a reply (the queue,
/// then the fallback, then a 500 `"mock server has no reply queued"`); anything else is a 404. Every
/// request, whatever its route, is recorded before it is answered.
///
/// # Examples
///
/// ```
/// use noetic_test_support::{MockReply, MockServer};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let server = MockServer::start().await;
/// server.push(MockReply::fixture("openai-responses.text.gpt-4o-mini.sse").chunk_size(7));
/// server.push(MockReply::json(429, serde_json::json!({"error": {"message": "slow down"}})).header("retry-after", "1"));
/// assert!(server.base_url().starts_with("http://127.0.0.1:"));
/// // Point a provider at `server.base_url()`, run it, then inspect `server.requests()`.
/// assert_eq!(server.request_count(), 0);
/// # }
/// ```
#[derive(Clone)]
#[must_use]
pub struct MockServer {
    handle: Arc<Handle>,
}

/// An HTTP request as the mock server received it.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedHttpRequest {
    /// The method, e.g. `"POST"`.
    pub method: String,
    /// The path without the query, e.g. `"/v1/responses"`.
    pub path: String,
    /// The headers in arrival order, names lowercased.
    pub headers: Vec<(String, String)>,
    /// The body parsed as JSON; a `Value::String` of the raw text (lossy UTF-8) if it is not JSON;
    /// `Value::Null` if it is empty or was too large to read.
    pub body: Value,
    /// The body's bytes as sent (empty if it was too large to read), for what parsing hides, such as
    /// a key that appears twice in a JSON object.
    pub raw_body: Bytes,
}

impl MockServer {
    /// Binds `127.0.0.1:0` and serves on a spawned tokio task, which stops (gracefully: stalled streams
    /// are aborted, idle connections closed) when the last handle is dropped.
    ///
    /// # Panics
    ///
    /// If no tokio runtime is running, or the loopback port cannot be bound.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: dropping the future before it resolves drops the listener; nothing is served.
    pub async fn start() -> MockServer {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .unwrap_or_else(|error| panic!("mock server: cannot bind 127.0.0.1:0: {error}"));
        let address = listener
            .local_addr()
            .unwrap_or_else(|error| panic!("mock server: no local address: {error}"));
        let (shutdown_sender, shutdown) = watch::channel(());
        let shared = Arc::new(Shared {
            state: Mutex::new(ReplyState::default()),
            requests: Mutex::new(Vec::new()),
            request_count: watch::channel(0).0,
            shutdown: shutdown.clone(),
            completed: Arc::new(AtomicUsize::new(0)),
        });
        let router = Router::new()
            .fallback(handle)
            .with_state(Arc::clone(&shared));
        // Without TCP_NODELAY, Nagle's algorithm holds back small chunks for up to a delayed-ACK period.
        let listener = listener.tap_io(|stream| {
            let _ = stream.set_nodelay(true);
        });
        let mut signal = shutdown;
        let server = axum::serve(listener, router).with_graceful_shutdown(async move {
            // Resolves with an error once the last `MockServer` handle drops the sender.
            let _ = signal.changed().await;
        });
        // The task ends by itself once the handle is dropped (see `Handle::shutdown`).
        tokio::spawn(async move {
            let _ = server.await;
        });
        MockServer {
            handle: Arc::new(Handle {
                shared,
                address,
                _shutdown: shutdown_sender,
            }),
        }
    }

    /// The base URL to configure a provider with: `http://127.0.0.1:PORT/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.handle.address)
    }

    /// The socket address the server listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.handle.address
    }

    /// Queues `reply`; each `POST` under `/v1` takes the next one, in order.
    pub fn push(&self, reply: MockReply) {
        let plan = Arc::new(reply.into_plan());
        self.handle.shared.replies().queue.push_back(plan);
    }

    /// Computes each reply from its request while the queue is empty (before the fallback). For
    /// conversations whose next reply depends on what the client sent, such as a tool loop served to many
    /// concurrent clients.
    pub fn set_responder(
        &self,
        responder: impl Fn(&RecordedHttpRequest) -> MockReply + Send + Sync + 'static,
    ) {
        self.handle.shared.replies().responder = Some(Arc::new(responder));
    }

    /// Stops keeping requests for [`MockServer::requests`] (they are still counted), so a long
    /// benchmark does not grow the server's memory.
    pub fn forget_requests(&self) {
        self.handle.shared.replies().forget_requests = true;
    }

    /// Sets the reply used (again and again) while the queue is empty, replacing any earlier fallback.
    pub fn set_fallback(&self, reply: MockReply) {
        let plan = Arc::new(reply.into_plan());
        self.handle.shared.replies().fallback = Some(plan);
    }

    /// Every request received so far, in arrival order, on any route.
    pub fn requests(&self) -> Vec<RecordedHttpRequest> {
        lock(&self.handle.shared.requests).clone()
    }

    /// How many replies were sent whole: every frame of the body handed to the connection and the
    /// body ended as planned (not stalled, aborted, or dropped by the client first).
    pub fn completed_replies(&self) -> usize {
        self.handle.shared.completed.load(Ordering::SeqCst)
    }

    /// How many requests have been received so far, on any route.
    pub fn request_count(&self) -> usize {
        *self.handle.shared.request_count.borrow()
    }

    /// Resolves once at least `n` requests have been received (at once if they already have). Each one
    /// is in [`requests`](Self::requests) by then.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: it only watches a counter.
    pub async fn wait_for_requests(&self, n: usize) {
        let mut count = self.handle.shared.request_count.subscribe();
        // The sender lives in `Shared`, which `self` keeps alive, so this cannot fail.
        let _ = count.wait_for(|count| *count >= n).await;
    }
}

impl fmt::Debug for MockServer {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("MockServer")
            .field("base_url", &self.base_url())
            .field("request_count", &self.request_count())
            .finish()
    }
}

impl RecordedHttpRequest {
    /// The first value of the header `name` (case-insensitive), if present.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(header, _)| header.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }
}

/// What the last handle owns: dropping it drops `_shutdown`, which stops the server.
struct Handle {
    shared: Arc<Shared>,
    address: SocketAddr,
    /// Never sent on; dropping it wakes the graceful-shutdown signal and every stalled stream.
    _shutdown: watch::Sender<()>,
}

/// The state shared by the handles and the request handler.
struct Shared {
    state: Mutex<ReplyState>,
    requests: Mutex<Vec<RecordedHttpRequest>>,
    /// The number of recorded requests; a watch so `wait_for_requests` needs no polling.
    request_count: watch::Sender<usize>,
    /// Changes (with an error) when the server is dropped.
    shutdown: watch::Receiver<()>,
    /// How many reply bodies were sent to their planned end (see `completed_replies`).
    completed: Arc<AtomicUsize>,
}

/// Computes a reply from the request (benchmarks: the reply depends on the conversation).
type Responder = dyn Fn(&RecordedHttpRequest) -> MockReply + Send + Sync;

#[derive(Default)]
struct ReplyState {
    queue: VecDeque<Arc<Plan>>,
    responder: Option<Arc<Responder>>,
    fallback: Option<Arc<Plan>>,
    /// Whether requests are kept for `requests()` (off for long benchmark runs).
    forget_requests: bool,
}

impl Shared {
    fn replies(&self) -> MutexGuard<'_, ReplyState> {
        lock(&self.state)
    }

    fn record(&self, request: RecordedHttpRequest) {
        if !self.replies().forget_requests {
            lock(&self.requests).push(request);
        }
        // After the push, so a waiter woken by the count finds the request in `requests()`.
        self.request_count.send_modify(|count| *count += 1);
    }

    fn next_reply(&self, request: &RecordedHttpRequest) -> Option<Arc<Plan>> {
        let mut replies = self.replies();
        if let Some(plan) = replies.queue.pop_front() {
            return Some(plan);
        }
        if let Some(responder) = replies.responder.clone() {
            // Computed outside the lock: a responder may be slow, and requests run concurrently.
            drop(replies);
            return Some(Arc::new(responder(request).into_plan()));
        }
        replies.fallback.clone()
    }
}

/// Answers one request: records it, then routes it.
async fn handle(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, MAX_REQUEST_BODY).await;
    let recorded = RecordedHttpRequest {
        method: parts.method.to_string(),
        path: parts.uri.path().to_owned(),
        headers: parts
            .headers
            .iter()
            .map(|(name, value)| {
                let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
                (name.as_str().to_owned(), value)
            })
            .collect(),
        body: body.as_ref().map_or(Value::Null, |body| parse_body(body)),
        raw_body: body.as_ref().map_or_else(|_| Bytes::new(), Bytes::clone),
    };
    shared.record(recorded.clone());
    if body.is_err() {
        return json_response(
            StatusCode::PAYLOAD_TOO_LARGE,
            "mock server could not read the request body",
        );
    }
    let path = parts.uri.path();
    let under_v1 = path == "/v1" || path.starts_with("/v1/");
    if parts.method == Method::GET && path == "/v1/models" {
        let mut response = Response::new(Body::from(json!({"data": []}).to_string()));
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        return response;
    }
    if parts.method != Method::POST || !under_v1 {
        return json_response(StatusCode::NOT_FOUND, "mock server has no such route");
    }
    match shared.next_reply(&recorded) {
        Some(plan) => plan.respond(shared.shutdown.clone(), shared.completed.clone()),
        None => json_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            "mock server has no reply queued",
        ),
    }
}

/// An OpenAI-shaped JSON error response.
fn json_response(status: StatusCode, message: &str) -> Response {
    let body = json!({"error": {"message": message, "type": "mock_server_error", "code": null}});
    let mut response = Response::new(Body::from(body.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

fn parse_body(body: &[u8]) -> Value {
    if body.is_empty() {
        return Value::Null;
    }
    serde_json::from_slice(body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned()))
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock leaves the data consistent (every critical section is one push or
    // pop), so a poisoned lock is still usable.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
