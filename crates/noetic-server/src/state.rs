//! What the routes share: the harness, the configuration, the threads this server has seen (with
//! the message ids it accepted on each, for idempotent POSTs), and the shutdown signal.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use noetic_core::{
    AgentHarness, ApprovalDecision, ApprovalRequest, Error, ExecuteOptions, Input, Scope,
};
use tokio_util::sync::CancellationToken;

use crate::config::ServeConfig;
use crate::engine::TurnEngine;
use crate::error::ApiError;

/// How many accepted message ids a thread remembers for idempotency.
const REMEMBERED_IDS: usize = 4096;

/// How many times a thread held by an expired server's lease is tried again.
const LOAD_ATTEMPTS: usize = 10;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

pub(crate) struct AppState {
    pub(crate) harness: AgentHarness,
    /// Where turns run instead of the harness, when they do (see `engine.rs`).
    pub(crate) engine: Option<Arc<dyn TurnEngine>>,
    pub(crate) config: ServeConfig,
    threads: Mutex<BTreeMap<String, ThreadEntry>>,
    /// Cancelled when the server stops: every event stream ends (with a final event).
    pub(crate) shutdown: CancellationToken,
    /// Set when the server stops taking messages.
    closing: AtomicBool,
    /// Threads waiting for a crashed predecessor's lease to expire before they are read back.
    loading: Mutex<HashSet<String>>,
}

struct ThreadEntry {
    created: SystemTime,
    ids: HashSet<String>,
    order: VecDeque<String>,
}

/// A person's decision on a call, as a route takes it.
pub(crate) enum Verdict {
    /// Run it (and, with `always`, its tool from now on where the harness keeps that).
    Approve { always: bool },
    /// Do not run it; the reason is the call's output.
    Reject(String),
}

/// A thread as listed.
#[derive(serde::Serialize)]
pub(crate) struct ThreadSummary {
    pub(crate) thread_id: String,
    pub(crate) created_at_ms: u64,
}

impl AppState {
    pub(crate) fn new(
        harness: AgentHarness,
        config: ServeConfig,
        shutdown: CancellationToken,
    ) -> Self {
        AppState {
            harness,
            engine: None,
            config,
            threads: Mutex::new(BTreeMap::new()),
            shutdown,
            closing: AtomicBool::new(false),
            loading: Mutex::new(HashSet::new()),
        }
    }

    /// Sends a message to where turns run: the engine, or the harness.
    pub(crate) async fn execute(
        &self,
        input: Input,
        options: ExecuteOptions,
    ) -> noetic_core::Result<()> {
        match &self.engine {
            Some(engine) => engine.execute(input, options).await,
            None => self.harness.execute(input, options).await,
        }
    }

    /// The calls of `thread_id` waiting for a person.
    pub(crate) async fn pending_approvals(
        &self,
        thread_id: &str,
    ) -> noetic_core::Result<Vec<ApprovalRequest>> {
        match &self.engine {
            Some(engine) => Ok(engine.status(thread_id).await?.pending_approvals),
            None => {
                self.harness
                    .pending_approvals(Scope::thread(thread_id.to_owned()))
                    .await
            }
        }
    }

    /// Decides the call `approval_id` of `thread_id`; the call decided. On an engine, `always` is
    /// a one-time approval (the engine keeps no standing ones).
    pub(crate) async fn decide(
        &self,
        thread_id: &str,
        approval_id: &str,
        verdict: Verdict,
    ) -> noetic_core::Result<ApprovalRequest> {
        let Some(engine) = &self.engine else {
            let harness = &self.harness;
            return match verdict {
                Verdict::Approve { always: false } => harness.approve(thread_id, approval_id).await,
                Verdict::Approve { always: true } => {
                    harness.approve_always(thread_id, approval_id).await
                }
                Verdict::Reject(reason) => harness.reject(thread_id, approval_id, reason).await,
            };
        };
        let request = engine
            .status(thread_id)
            .await?
            .pending_approvals
            .into_iter()
            .find(|request| request.approval_id == approval_id)
            .ok_or_else(|| Error::ApprovalNotFound {
                approval_id: approval_id.to_owned(),
                thread_id: thread_id.to_owned(),
            })?;
        let decision = match verdict {
            Verdict::Approve { .. } => ApprovalDecision::Approved,
            Verdict::Reject(reason) => ApprovalDecision::Rejected { reason },
        };
        engine.decide(thread_id, approval_id, decision).await?;
        Ok(request)
    }

    fn threads(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, ThreadEntry>> {
        lock(&self.threads)
    }

    /// Records `thread_id` as known (created, or messaged); `false` when it already was.
    pub(crate) fn remember(&self, thread_id: &str) -> bool {
        let mut threads = self.threads();
        if threads.contains_key(thread_id) {
            return false;
        }
        threads.insert(
            thread_id.to_owned(),
            ThreadEntry {
                created: SystemTime::now(),
                ids: HashSet::new(),
                order: VecDeque::new(),
            },
        );
        true
    }

    /// The threads this server has seen, oldest first.
    pub(crate) fn list(&self) -> Vec<ThreadSummary> {
        let mut list: Vec<ThreadSummary> = self
            .threads()
            .iter()
            .map(|(thread_id, entry)| ThreadSummary {
                thread_id: thread_id.clone(),
                created_at_ms: millis(entry.created),
            })
            .collect();
        list.sort_by_key(|summary| summary.created_at_ms);
        list
    }

    /// Whether `thread_id` exists: seen by this server, or recorded in the durable store (a thread
    /// of an earlier run of the server), which it then remembers.
    pub(crate) async fn known(self: &Arc<Self>, thread_id: &str) -> Result<(), ApiError> {
        if self.threads().contains_key(thread_id) {
            return Ok(());
        }
        match self.harness.stored_thread(thread_id).await {
            Ok(Some(_)) => {
                self.remember(thread_id);
                self.load(thread_id).await
            }
            // `INVALID_ARGUMENT`: the harness has no durable store to look in.
            Ok(None) => Err(ApiError::not_found(format!("no thread `{thread_id}`"))),
            Err(error) if error.code() == "INVALID_ARGUMENT" => {
                Err(ApiError::not_found(format!("no thread `{thread_id}`")))
            }
            Err(error) => Err(error.into()),
        }
    }

    /// Reads a durable thread back (resuming its unfinished turn) unless this harness has it. While
    /// another process's lease holds it (a server that crashed), a task reads it back once the lease
    /// expires. Nothing to do without a durable store.
    pub(crate) async fn load(self: &Arc<Self>, thread_id: &str) -> Result<(), ApiError> {
        match self.harness.load_thread(thread_id).await {
            Ok(()) => Ok(()),
            Err(error) if error.code() == "INVALID_ARGUMENT" => Ok(()),
            Err(noetic_core::Error::LeaseHeld { expires_at_ms, .. }) => {
                self.load_later(thread_id, expires_at_ms);
                Ok(())
            }
            Err(error) => Err(error.into()),
        }
    }

    /// Reads `thread_id` back once its lease (expiring at `expires_at_ms`) is free: at most
    /// [`LOAD_ATTEMPTS`] tries, each at the expiry the last refusal gave, until the server stops.
    fn load_later(self: &Arc<Self>, thread_id: &str, mut expires_at_ms: u64) {
        if !lock(&self.loading).insert(thread_id.to_owned()) {
            return;
        }
        let state = self.clone();
        let thread_id = thread_id.to_owned();
        tokio::spawn(async move {
            for _ in 0..LOAD_ATTEMPTS {
                let wait = Duration::from_millis(
                    expires_at_ms.saturating_sub(millis(SystemTime::now())) + 1,
                );
                tokio::select! {
                    () = tokio::time::sleep(wait) => {}
                    () = state.shutdown.cancelled() => break,
                }
                match state.harness.load_thread(&thread_id).await {
                    Err(noetic_core::Error::LeaseHeld {
                        expires_at_ms: later,
                        ..
                    }) => expires_at_ms = later,
                    Ok(()) => break,
                    Err(error) => {
                        tracing::warn!(
                            thread_id,
                            code = error.code(),
                            "cannot read the thread back: {error}"
                        );
                        break;
                    }
                }
            }
            lock(&state.loading).remove(&thread_id);
        });
    }

    /// Whether `message_id` was accepted on `thread_id` (among the ids a thread remembers).
    pub(crate) fn accepted(&self, thread_id: &str, message_id: &str) -> bool {
        self.threads()
            .get(thread_id)
            .is_some_and(|entry| entry.ids.contains(message_id))
    }

    /// Records `message_id` as accepted on `thread_id`; `false` when it already was (a retried POST).
    pub(crate) fn first_time(&self, thread_id: &str, message_id: &str) -> bool {
        let mut threads = self.threads();
        let entry = threads
            .entry(thread_id.to_owned())
            .or_insert_with(|| ThreadEntry {
                created: SystemTime::now(),
                ids: HashSet::new(),
                order: VecDeque::new(),
            });
        if !entry.ids.insert(message_id.to_owned()) {
            return false;
        }
        entry.order.push_back(message_id.to_owned());
        if entry.order.len() > REMEMBERED_IDS
            && let Some(oldest) = entry.order.pop_front()
        {
            entry.ids.remove(&oldest);
        }
        true
    }

    /// Forgets an accepted id whose message the harness then refused.
    pub(crate) fn forget(&self, thread_id: &str, message_id: &str) {
        if let Some(entry) = self.threads().get_mut(thread_id) {
            entry.ids.remove(message_id);
            entry.order.retain(|id| id != message_id);
        }
    }

    /// Every thread this server has seen.
    pub(crate) fn thread_ids(&self) -> Vec<String> {
        self.threads().keys().cloned().collect()
    }

    pub(crate) fn close(&self) {
        self.closing.store(true, Ordering::SeqCst);
    }

    pub(crate) fn closing(&self) -> bool {
        self.closing.load(Ordering::SeqCst)
    }
}

pub(crate) fn millis(time: SystemTime) -> u64 {
    time.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
        })
}
