//! Unique ids without a system call per id.
//!
//! Every context, turn and message needs an id. A uuid v4 each time costs a `getrandom` system call,
//! which showed up in the per-turn profile; instead a random 128-bit prefix is drawn once per process
//! and followed by a counter. Ids stay unique across processes (the prefix) and within one (the counter).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// The thread used when `ExecuteOptions::thread_id` is not set (and the thread of a context made
/// without one, where a thread must be named: approvals).
pub const DEFAULT_THREAD: &str = "__default__";

static PREFIX: OnceLock<String> = OnceLock::new();
static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A new id: `<32 hex digits>-<counter in hex>`.
pub(crate) fn new_id() -> String {
    let prefix = PREFIX.get_or_init(|| uuid::Uuid::new_v4().simple().to_string());
    format!("{prefix}-{:x}", COUNTER.fetch_add(1, Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_distinct_and_share_the_process_prefix() {
        let first = new_id();
        let second = new_id();
        assert_ne!(first, second);
        assert_eq!(first.split('-').next(), second.split('-').next());
        assert_eq!(first.split('-').next().map(str::len), Some(32));
    }
}
