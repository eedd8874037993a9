//! `noetic serve`: any [`AgentHarness`] over HTTP, for web frontends.
//!
//! [`NoeticServer::router`] is an axum [`Router`] to mount in your own app (or run with
//! [`NoeticServer::serve`]):
//!
//! - the native API under `/v1`: threads, `POST /v1/threads/{id}/messages` (execute; `delivery`
//!   makes it a steer; a client-chosen `message_id` makes it idempotent), `GET …/events` (SSE whose
//!   `id:` is the session bus's sequence number, resumable with `Last-Event-ID` or `?after=`, a
//!   `lagged` event first when the cursor fell off what is kept), `POST …/abort` with `drain_ms`,
//!   approvals listed and decided, status, history, health and info;
//! - the AI SDK UI message stream (`POST /v1/ai-sdk/chat`, `GET /v1/ai-sdk/chat/{id}/stream`), so
//!   `useChat` with `DefaultChatTransport` works against it unchanged;
//! - AG-UI (`POST /v1/ag-ui`: a `RunAgentInput` in, the run's events out as SSE), so `@ag-ui/client`'s
//!   `HttpAgent` and CopilotKit work against it; a tool approval ends the run with an `interrupt`
//!   outcome and the next run's `resume` answers it;
//! - a web page at `/` (one embedded HTML file) to chat with the harness.
//!
//! Secure by default: the `Host` header must name an allowed host (loopback names unless told
//! otherwise: DNS rebinding), an `Origin` must be the server's own or an allowed one (a page the user
//! visits must not drive a server that runs tools), a bearer token when [`ServeConfig::token`] is
//! set (compared in constant time; required by `noetic serve` on any address but loopback), CORS
//! only for allowed origins, body and message size limits, a per-thread queue limit (429). Errors are
//! JSON with a stable code (`{"error": {"code", "message"}}`). A disconnect never cancels a turn;
//! any number of clients may watch one thread. See `docs/serve.md`.
//!
//! ```no_run
//! # async fn demo(harness: noetic_core::AgentHarness) -> std::io::Result<()> {
//! use noetic_server::{NoeticServer, ServeConfig};
//! let server = NoeticServer::new(harness, ServeConfig::new());
//! let app: axum::Router = axum::Router::new()
//!     .route("/", axum::routing::get(|| async { "my app" }))
//!     .nest_service("/agent", server.router());
//! # let _ = app;
//! # Ok(()) }
//! ```

mod ag_ui;
mod ai_sdk;
mod config;
mod engine;
mod error;
mod follow;
mod native;
mod page;
mod security;
mod sse;
mod state;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderName, Method, header};
use noetic_core::{AbortOptions, AgentHarness, DrainReport, Scope, SessionStatus};
use tokio_util::sync::CancellationToken;
use tower_http::cors::{AllowOrigin, CorsLayer};

pub use config::{
    DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_MESSAGE_BYTES, DEFAULT_MAX_QUEUE, ServeConfig, Token,
};
pub use engine::{EngineStatus, TurnEngine};
pub use error::{ApiError, CODES};

use state::AppState;

/// A harness served over HTTP. Cheap to clone; every clone serves the same threads.
#[derive(Clone)]
pub struct NoeticServer {
    state: Arc<AppState>,
}

impl std::fmt::Debug for NoeticServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NoeticServer")
            .field("harness", &self.state.harness.name())
            .field("config", &self.state.config)
            .finish()
    }
}

/// What [`NoeticServer::stop`] did: the running turns it drained, by thread.
#[derive(Debug, Default)]
pub struct StopReport {
    /// Each thread whose turn was running, with its drain report (`None` without a drain window).
    pub drained: Vec<(String, Option<DrainReport>)>,
}

impl NoeticServer {
    /// Serves `harness` with `config`.
    pub fn new(harness: AgentHarness, config: ServeConfig) -> Self {
        NoeticServer {
            state: Arc::new(AppState::new(harness, config, CancellationToken::new())),
        }
    }

    /// Serves threads whose turns run on `engine` (a durable-execution engine: see
    /// [`TurnEngine`]): messages, steers, aborts and decisions go to it; history, status of what
    /// is queued and the event streams come from `harness`, which must share the store the engine
    /// records the threads in (`shared_threads`, with an event log) and runs no turn itself.
    pub fn on_engine(
        harness: AgentHarness,
        config: ServeConfig,
        engine: Arc<dyn TurnEngine>,
    ) -> Self {
        let mut state = AppState::new(harness, config, CancellationToken::new());
        state.engine = Some(engine);
        NoeticServer {
            state: Arc::new(state),
        }
    }

    /// The harness served.
    pub fn harness(&self) -> &AgentHarness {
        &self.state.harness
    }

    /// The routes, guarded (host, origin, token), limited, with CORS for allowed origins.
    pub fn router(&self) -> Router {
        let config = &self.state.config;
        let mut router = native::routes()
            .merge(ai_sdk::routes())
            .merge(ag_ui::routes());
        if config.page {
            router = router.merge(page::routes());
        }
        let mut router = router
            .fallback(|| async { ApiError::not_found("no such route") })
            .layer(DefaultBodyLimit::max(config.max_body_bytes))
            .layer(axum::middleware::from_fn_with_state(
                self.state.clone(),
                security::guard,
            ))
            .with_state(self.state.clone());
        if !config.allowed_origins.is_empty() {
            let origins: Vec<_> = config
                .allowed_origins
                .iter()
                .filter_map(|origin| origin.parse().ok())
                .collect();
            router = router.layer(
                CorsLayer::new()
                    .allow_origin(AllowOrigin::list(origins))
                    .allow_methods([Method::GET, Method::POST])
                    .allow_headers([
                        header::AUTHORIZATION,
                        header::CONTENT_TYPE,
                        HeaderName::from_static("last-event-id"),
                    ])
                    .expose_headers([header::LOCATION]),
            );
        }
        router
    }

    /// Stops the server's side of things: no new message is taken (503), every event stream ends
    /// with a final `server_shutdown` event (clients reconnect elsewhere or later with
    /// `Last-Event-ID`), and the turns running on the threads this server has seen are aborted —
    /// after letting their model rounds in flight finish for up to `drain` when given. A turn
    /// waiting for a person's approval is left parked: with a durable store it is read back, still
    /// waiting, by the next run of the server; without one it ends with the process. On a harness
    /// sharing its threads with other hosts nothing is aborted: its `serve` loop drains and lets
    /// threads go, and the other hosts carry on.
    pub async fn stop(&self, drain: Option<Duration>) -> StopReport {
        self.state.close();
        self.state.shutdown.cancel();
        let harness = &self.state.harness;
        let mut report = StopReport::default();
        if harness.shares_threads() || self.state.engine.is_some() {
            // A host of a fleet aborts nothing: `AgentHarness::serve` drains its turns and lets
            // their threads go, and another host carries on with what is left.
            return report;
        }
        let running: Vec<String> = self
            .state
            .thread_ids()
            .into_iter()
            .filter(|thread| {
                !matches!(
                    harness.status(Scope::thread(thread.clone())),
                    SessionStatus::Idle
                        | SessionStatus::Queued { .. }
                        | SessionStatus::AwaitingApproval { .. }
                )
            })
            .collect();
        let stops = running.iter().map(|thread| {
            let mut options = AbortOptions::new()
                .thread_id(thread.clone())
                .reason("the server is stopping");
            if let Some(window) = drain {
                options = options.drain(window);
            }
            harness.abort(options)
        });
        let reports = futures_util::future::join_all(stops).await;
        report.drained = running.into_iter().zip(reports).collect();
        report
    }

    /// Serves on `listener` until `shutdown` resolves, then [`NoeticServer::stop`]s (draining for
    /// `drain`) and waits for the connections to close (at most `drain` plus 5 s).
    ///
    /// # Errors
    /// The listener's I/O errors.
    pub async fn serve(
        &self,
        listener: tokio::net::TcpListener,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
        drain: Option<Duration>,
    ) -> std::io::Result<StopReport> {
        let stopped = CancellationToken::new();
        let app = self.router();
        let serving = axum::serve(listener, app)
            .with_graceful_shutdown(stopped.clone().cancelled_owned())
            .into_future();
        tokio::pin!(serving);
        tokio::select! {
            result = &mut serving => return result.map(|()| StopReport::default()),
            () = shutdown => {}
        }
        let report = self.stop(drain).await;
        stopped.cancel();
        let bound = drain.unwrap_or_default() + Duration::from_secs(5);
        match tokio::time::timeout(bound, serving).await {
            Ok(result) => result.map(|()| report),
            Err(_) => Ok(report),
        }
    }
}
