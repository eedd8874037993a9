//! Channels through the public API: modes, timeouts, back-pressure, cancellation and the external
//! handle lifecycle (reference scenarios 37–41), plus property tests of the queue.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

mod backpressure;
mod cancellation;
mod lifecycle;
mod modes;
mod properties;
mod support;
mod timeouts;
