//! Shared pieces of the noetic examples, so that tests can run exactly what the examples run.
//!
//! Each example is its own target in this package (`cargo run --example quickstart`).

pub mod quickstart;
