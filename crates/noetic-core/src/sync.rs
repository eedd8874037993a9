//! The one poison-tolerant lock helper. A leaf: it imports nothing of the crate.

use std::sync::{Mutex, MutexGuard};

/// Locks `mutex`, recovering from poisoning. Every critical section in the crate leaves its data
/// consistent at each step (a push, a pop, a take, an assignment, or a batch applied from a prepared
/// list), so a panic while one was held cannot leave the data half-written.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
