//! Sessions through the public API: `execute`, queues, delivery modes, steering and streams, with a
//! paced model so each test decides when every stream event is emitted.
//!
//! - `delivery`: `execute` returns at once, threads run concurrently, `next-turn` coalescing,
//!   `interrupt`, steers sent when idle.
//! - `steering`: the three steer points, `on_steer` decisions (`Apply`, `Hold`, `Rewrite`, `Drop`),
//!   spawned children.
//! - `streams`: the full, text and reasoning streams across turns, and lag (`emit(false)` and the
//!   item stream are scenarios 17, 22 and 23).
//! - `derived`: the text, reasoning and item streams: turn boundaries, replay choice, lag markers.
//! - `retention`: what a session keeps for replay (byte bound, compaction at turn end).
//! - `responses`: `status` with queued work, empty input, `agent_response` for unknown threads.
//! - `abort`: `abort` mid-stream and mid-tool.
//! - `scenarios`: the original's P0 session scenarios (reference/runtime-behaviour.md §10, 1–24).
//! - `no_lost_messages`: a property test over random interleavings.
//! - `turn_history`: what spawned children and parallel paths see of a turn, and that what they said
//!   reaches the session history.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers outside #[test] fns

mod abort;
mod approval_props;
mod approvals;
mod delivery;
mod derived;
mod no_lost_messages;
mod responses;
mod retention;
mod scenarios;
mod sequenced;
mod steering;
mod streams;
mod support;
mod turn_history;
