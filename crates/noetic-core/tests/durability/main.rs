//! Durable executions through the public API: checkpoints at every step, model round and tool output;
//! restore and resume on a new harness sharing the store; the step ledger; errors; leases; write cost.
//!
//! "Crashes" here stop a run at an exact point chosen by the scripted model or a tool (their request
//! or call signals a channel and never finishes), then drop the run's future: nothing after that point
//! is recorded, exactly as if the process had died. Real SIGKILLed processes are in the CLI's tests.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod approval_restarts;
mod engine;
mod errors;
mod event_log;
mod fleet;
mod ledger;
mod resume;
mod sessions;
mod support;
mod writes;
