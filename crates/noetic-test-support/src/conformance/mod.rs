//! The durable-store conformance suite: the behaviour every [`DurableStore`] owes the harness, written
//! once and run by every backend (the in-memory `KvDurableStore`, SQLite, PostgreSQL, and the next).
//!
//! A backend's test crate binds itself to the contract with one macro call,
//! [`durable_store_conformance!`](crate::durable_store_conformance), given a block that makes a fresh
//! store: the macro writes one `#[tokio::test]` per section, so a failure names the section. As
//! core's `tests/layers/storage.rs` does it (test functions cannot run in a doctest, so this one is
//! shown, not compiled):
//!
//! ```text
//! mod conformance {
//!     use noetic_core::KvDurableStore;
//!     use noetic_test_support::conformance::StoreOpener;
//!
//!     noetic_test_support::durable_store_conformance!({
//!         (StoreOpener::shared(std::sync::Arc::new(KvDurableStore::in_memory())), ())
//!     });
//! }
//! ```
//!
//! The block evaluates to `(StoreOpener<S>, keep)`: the [`StoreOpener`] gives handles on one fresh,
//! empty store (a new handle per call, as a restarted process would open it), and `keep` is held
//! until the test ends (a temp dir, a test database). The block runs inside the test function, so it
//! may `return` to skip (`test_database_or_skip!()`).
//!
//! The sections, each a public function of this module that a backend may also call by hand:
//!
//! | Section | Test the macro writes | What it holds the store to |
//! |---|---|---|
//! | [`commits`] | `commits_apply_every_part_or_none` | a commit is atomic: a failed one applies none of its puts, deletes, clears, trims or appends; a key written twice keeps its last write |
//! | [`prefix_reads`] | `records_read_back_and_list_by_prefix_in_key_order` | put, replace, delete, `records(prefix)` sorted bytewise, `%` / `_` literal, prefixes with no upper bound |
//! | [`logs`] | `logs_append_at_their_exact_next_sequence_and_read_from_any_point` | appends from 0, the exact-sequence conflict naming the log, trims keeping the next sequence number, clearing a prefix |
//! | [`leases`] | `leases_are_granted_renewed_expire_on_the_store_clock_and_fence_a_stale_holder` | epochs, renewal, `LEASE_HELD`, takeover after expiry, `LEASE_LOST` for a fenced stale holder, release, dropped leases |
//! | [`runnable`] | `runnable_marks_keep_their_order_and_claims_take_the_oldest_free_one` | marks oldest first, atomic with their commit, claims skipping live leases, takeover of an expired one, the wake-up |
//! | [`paid_calls`] | `a_cut_off_paid_round_stays_pending_for_a_new_harness_until_settled` | a round cut off mid-stream is listed by `pending_spend` on a new harness; a priced round leaves no record; `settle_spend` removes it for good |
//! | [`approvals`] | `a_call_awaiting_approval_survives_a_crash_and_runs_once_when_approved_on_a_new_harness` | a durable approval is listed by a new harness after a crash, decided there once, and its call runs once |
//! | [`threads`] | `threads_left_idle_are_read_back_and_continued_by_a_new_harness` | idle threads leave memory and resume their own history; a second harness takes a released thread over |
//! | [`corrupt_rows`] | `corrupt_rows_are_named_with_their_stable_codes_and_other_rows_still_read` | garbage under a checkpoint, thread, message, paid-call or approval row is `CHECKPOINT_CORRUPT` (or `CHECKPOINT_SCHEMA_MISMATCH`) naming the row; an unknown execution is `CHECKPOINT_NOT_FOUND`; others still read |
//! | [`event_log`] | `a_thread_s_event_log_is_replayed_by_a_new_harness_with_its_ids_and_trimmed_to_retain` | a thread's event log (`event_log`): what one harness streamed, a new harness replays after any id with the same ids and events; trimmed to `retain`, one `Lagged` for what is gone; the new harness numbers on |
//!
//! The store sections ([`commits`] to [`runnable`]) use fake timestamps: a store that decides leases
//! on a clock of its own (PostgreSQL's `LeaseClock::Database`) runs them on the caller's clock. The
//! harness sections use the wall clock and short lease TTLs. Corruption is made through the store's
//! public API (a garbage record or log entry under the row's key), so it is the same on every backend;
//! rows a driver cannot decode (a column of the wrong type) are each backend's own tests.
//!
//! [`durable_conformance`](crate::durable_conformance) runs the store sections one after another on
//! one store, for stores that cannot be opened twice (SQLite in memory) and for wrappers.

mod corrupt;
mod events;
mod harness;

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use noetic_core::StorageAdapter;
use noetic_core::adapter::durable::DurableStore;

pub use crate::durable::{commits, leases, logs, prefix_reads, runnable};
pub use corrupt::corrupt_rows;
pub use events::event_log;
pub use harness::{approvals, paid_calls, threads};

/// What a store must be for the harness sections: a [`DurableStore`] and [`StorageAdapter`] a
/// harness can own (`AgentHarnessBuilder::durable`), cheap to clone.
pub trait ConformanceStore: DurableStore + StorageAdapter + Clone + 'static {}

impl<S: DurableStore + StorageAdapter + Clone + 'static> ConformanceStore for S {}

/// Opens handles on one store's data: each [`StoreOpener::open`] gives a new handle, as a restarted
/// process would open the same file or database. A harness section that "crashes" a harness opens
/// that harness's handle on a runtime of its own and drops the runtime, so a handle must not depend on
/// the runtime that opened another.
pub struct StoreOpener<S> {
    open: Arc<dyn Fn() -> BoxFuture<'static, S> + Send + Sync>,
}

impl<S: Send + 'static> StoreOpener<S> {
    /// Handles made by `open` (connect again, open the file again).
    pub fn new<F, Fut>(open: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = S> + Send + 'static,
    {
        StoreOpener {
            open: Arc::new(move || Box::pin(open())),
        }
    }

    /// Every handle a clone of `store`: for stores that live in memory (`Arc<KvDurableStore>`).
    pub fn shared(store: S) -> Self
    where
        S: Clone + Sync,
    {
        StoreOpener::new(move || std::future::ready(store.clone()))
    }

    /// A new handle on the store.
    ///
    /// # Cancel safety
    /// As the opener's future: dropping it abandons the handle being opened.
    pub async fn open(&self) -> S {
        (self.open)().await
    }
}

impl<S> Clone for StoreOpener<S> {
    fn clone(&self) -> Self {
        StoreOpener {
            open: self.open.clone(),
        }
    }
}

impl<S> fmt::Debug for StoreOpener<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreOpener").finish_non_exhaustive()
    }
}

/// How long a harness section waits for any one thing before it fails naming it.
pub(crate) const WAIT: Duration = Duration::from_secs(30);

/// Awaits `future` for at most [`WAIT`], panicking with `what` it waited for.
pub(crate) async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    match tokio::time::timeout(WAIT, future).await {
        Ok(value) => value,
        Err(_) => panic!("timed out after {WAIT:?} waiting for {what}"),
    }
}

/// Writes one `#[tokio::test]` per section of the durable-store conformance suite
/// ([`conformance`](crate::conformance)), each on a fresh store made by `$fresh`: a block evaluating
/// to `(StoreOpener<S>, keep)`, run inside the test (so it may `return` to skip), `keep` held until
/// the test ends. The calling crate needs `tokio` with `macros` and `rt-multi-thread` (the harness
/// sections run on two worker threads).
#[macro_export]
macro_rules! durable_store_conformance {
    ($fresh:block) => {
        $crate::durable_store_conformance!(@store $fresh, commits_apply_every_part_or_none, commits);
        $crate::durable_store_conformance!(
            @store $fresh, records_read_back_and_list_by_prefix_in_key_order, prefix_reads
        );
        $crate::durable_store_conformance!(
            @store $fresh, logs_append_at_their_exact_next_sequence_and_read_from_any_point, logs
        );
        $crate::durable_store_conformance!(
            @store $fresh,
            leases_are_granted_renewed_expire_on_the_store_clock_and_fence_a_stale_holder,
            leases
        );
        $crate::durable_store_conformance!(
            @store $fresh,
            runnable_marks_keep_their_order_and_claims_take_the_oldest_free_one,
            runnable
        );
        $crate::durable_store_conformance!(
            @harness $fresh,
            a_cut_off_paid_round_stays_pending_for_a_new_harness_until_settled,
            paid_calls
        );
        $crate::durable_store_conformance!(
            @harness $fresh,
            a_call_awaiting_approval_survives_a_crash_and_runs_once_when_approved_on_a_new_harness,
            approvals
        );
        $crate::durable_store_conformance!(
            @harness $fresh,
            threads_left_idle_are_read_back_and_continued_by_a_new_harness,
            threads
        );
        $crate::durable_store_conformance!(
            @harness $fresh,
            corrupt_rows_are_named_with_their_stable_codes_and_other_rows_still_read,
            corrupt_rows
        );
        $crate::durable_store_conformance!(
            @harness $fresh,
            a_thread_s_event_log_is_replayed_by_a_new_harness_with_its_ids_and_trimmed_to_retain,
            event_log
        );
    };
    (@store $fresh:block, $test:ident, $section:ident) => {
        #[::tokio::test]
        async fn $test() {
            let (opener, _keep) = $fresh;
            let store = $crate::conformance::StoreOpener::open(&opener).await;
            $crate::conformance::$section(&store).await;
        }
    };
    (@harness $fresh:block, $test:ident, $section:ident) => {
        #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $test() {
            let (opener, _keep) = $fresh;
            $crate::conformance::$section(&opener).await;
        }
    };
}
