//! A std mutex that shrugs off poisoning (nothing held under it can be left half-changed).

/// Locks `mutex`, poisoned or not.
pub(crate) fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
