//! Context layers through the public API: the storage adapter and its conformance suite, hook order and
//! lifecycle, layer state across harnesses, recall placement, response gates and token budgets.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

mod budget;
mod builtin;
mod gates;
mod lifecycle;
mod protocol;
mod recall;
mod state;
mod storage;
mod support;
