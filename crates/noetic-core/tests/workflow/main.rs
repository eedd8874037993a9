//! Integration tests of JSON workflow documents: parsing with error pointers, hydration of every node
//! kind, the original's multi-model judge example, validation against the original's schema, round
//! trips, `parse_and_run_workflow`, the `schedule` step and the `acp-agent` node.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod acp_agent;
mod bad_bytes;
mod connections;
mod harness;
mod invalid;
mod judge;
mod nodes;
mod roundtrip;
mod schedule;
mod schema;
mod support;
