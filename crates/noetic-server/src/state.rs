//! What the routes share: the harness, the configuration, the threads this server has seen (with
//! the message ids it accepted on each, for idempotent POSTs), and the shutdown signal.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::SystemTime;

use noetic_core::AgentHarness;
use tokio_util::sync::CancellationToken;

use crate::config::ServeConfig;
use crate::error::ApiError;

/// How many accepted message ids a thread remembers for idempotency.
const REMEMBERED_IDS: usize = 4096;

pub(crate) struct AppState {
    pub(crate) harness: AgentHarness,
    pub(crate) config: ServeConfig,
    threads: Mutex<BTreeMap<String, ThreadEntry>>,
    /// Cancelled when the server stops: every event stream ends (with a final event).
    pub(crate) shutdown: CancellationToken,
    /// Set when the server stops taking messages.
    closing: AtomicBool,
}

struct ThreadEntry {
    created: SystemTime,
    ids: HashSet<String>,
    order: VecDeque<String>,
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
            config,
            threads: Mutex::new(BTreeMap::new()),
            shutdown,
            closing: AtomicBool::new(false),
        }
    }

    fn threads(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, ThreadEntry>> {
        self.threads
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
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
    pub(crate) async fn known(&self, thread_id: &str) -> Result<(), ApiError> {
        if self.threads().contains_key(thread_id) {
            return Ok(());
        }
        match self.harness.stored_thread(thread_id).await {
            Ok(Some(_)) => {
                self.remember(thread_id);
                Ok(())
            }
            // `INVALID_ARGUMENT`: the harness has no durable store to look in.
            Ok(None) => Err(ApiError::not_found(format!("no thread `{thread_id}`"))),
            Err(error) if error.code() == "INVALID_ARGUMENT" => {
                Err(ApiError::not_found(format!("no thread `{thread_id}`")))
            }
            Err(error) => Err(error.into()),
        }
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
