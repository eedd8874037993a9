//! Bad bytes through the public API: arbitrary bytes into the SSE decoder, and real captures mutated
//! (truncated, spliced, bytes flipped, huge lines) through both providers over the mock server. Never a
//! panic, never a hang; always events or an error with a stable code.
//!
//! `cargo fuzz` would need a nightly toolchain; these property tests cover the same ground on stable,
//! with case counts kept small enough for a quick suite.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

mod providers;
mod sse;
