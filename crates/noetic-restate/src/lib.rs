//! noetic threads on [Restate](https://restate.dev): each thread a virtual object keyed by its id,
//! each turn an invocation of its exclusive `turn` handler whose model rounds and tool calls are
//! journaled steps (through core's [`noetic_core::engine::StepJournal`] seam). Restate decides where
//! and when a turn runs and keeps one at a time per thread; a crash of this process or of the
//! Restate server re-pays at most the round in flight: the recorded rounds and calls are replayed
//! from the journal, not run again.
//!
//! - [`RestateHost`]: serves a harness's agent graph as the `NoeticThread` object on an HTTP/2
//!   endpoint Restate invokes (register it with [`RestateClient::register`]).
//! - [`RestateClient`]: `execute` (through the thread's `NoeticInbox` object: idempotent by
//!   message id, messages sent while a turn runs coalesced into the next), `steer` (through the
//!   inbox too, taken at each steer point between rounds), `output`, `history`,
//!   `approve` / `reject` (a gated call's wait is a Restate signal), `abort` (prompt when the turn
//!   runs in the process handling it), and `register`, over the ingress and admin APIs.
//!
//! What this version does not do yet (see `docs/restate.md`): listing pending approvals,
//! streaming events to subscribers across processes, the durable store as the history's record (the
//! history is the object's state).

mod client;
mod error;
mod inbox;
mod journal;
mod record;
mod thread;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use noetic_core::adapter::durable::DurableStore;
use noetic_core::session::ThreadRecorder;
use noetic_core::{AgentHarness, EventSink};
use restate_sdk::prelude::{Endpoint, HttpServer};
use tokio::net::TcpListener;

pub use client::{RestateClient, TurnHandle};
pub use error::CODES;
pub use inbox::{Accepted, LastTurn, MessageInput, SteerOutcome, ThreadStatus};
pub use thread::{AbortInput, DecideInput, TurnInput, TurnOutput};

/// How long one attempt of a turn may go without journal progress before Restate aborts it, by
/// default: an hour, so a slow model round is never cut and paid again.
pub const DEFAULT_ROUND_TIMEOUT: Duration = Duration::from_secs(3600);

/// Serves a harness's agent graph to Restate as the `NoeticThread` virtual object.
pub struct RestateHost {
    harness: AgentHarness,
    round_timeout: Duration,
    event_sink: Option<Arc<dyn EventSink>>,
    recorder: Option<ThreadRecorder>,
}

impl RestateHost {
    /// A host running `harness`'s agent graph for every thread's turns.
    pub fn new(harness: AgentHarness) -> Self {
        RestateHost {
            harness,
            round_timeout: DEFAULT_ROUND_TIMEOUT,
            event_sink: None,
            recorder: None,
        }
    }

    /// Sets how long an attempt may go without journal progress (a model round or tool call in
    /// flight) before Restate aborts it and retries: longer than the slowest round
    /// ([`DEFAULT_ROUND_TIMEOUT`] unless set).
    #[must_use]
    pub fn round_timeout(mut self, timeout: Duration) -> Self {
        self.round_timeout = timeout;
        self
    }

    /// Sends the events of the turns this process runs to `sink` (live, process-local: the turns
    /// another process runs, or an attempt's replayed steps, are not seen here).
    #[must_use]
    pub fn event_sink(mut self, sink: Arc<dyn EventSink>) -> Self {
        self.event_sink = Some(sink);
        self
    }

    /// Keeps the threads' record in `store` (SQLite or PostgreSQL, as a harness's durable store):
    /// each turn starts from the history there and records its end there, and the events of each
    /// journaled step go to the thread's event log once the step is journaled — all in the format
    /// of durable sessions, each write idempotent. So a harness on the same store (with
    /// `shared_threads` and an event log, as `noetic serve` runs) reads the threads' history and
    /// last turns and streams their events to its subscribers. Without it, the history is the
    /// object's Restate state and events reach only [`RestateHost::event_sink`].
    #[must_use]
    pub fn store(mut self, store: Arc<dyn DurableStore>) -> Self {
        self.recorder = Some(ThreadRecorder::new(store));
        self
    }

    /// The Restate endpoint: mount it in a server of your own, or use [`RestateHost::serve`].
    pub fn endpoint(self) -> Endpoint {
        use restate_sdk::prelude::IntoServiceDefinition as _;
        let options = thread::options(self.round_timeout);
        let object = thread::NoeticThread {
            harness: self.harness,
            event_sink: self.event_sink,
            recorder: self.recorder,
            running: Arc::default(),
        };
        Endpoint::builder()
            .bind(object.into_service_definition().options(options))
            .bind(inbox::NoeticInbox.into_service_definition())
            .build()
    }

    /// Serves the endpoint on `listener` (HTTP/2 without TLS, as Restate speaks to a deployment)
    /// until `shutdown` completes.
    pub async fn serve(self, listener: TcpListener, shutdown: impl Future) {
        HttpServer::new(self.endpoint())
            .serve_with_cancel(listener, shutdown)
            .await;
    }
}

impl std::fmt::Debug for RestateHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RestateHost")
            .field("round_timeout", &self.round_timeout)
            .finish_non_exhaustive()
    }
}
