//! Integration tests of the step variants, `until` predicates, hooks and contexts, through the public
//! API only.

#![allow(clippy::unwrap_used)] // test helpers and step bodies outside #[test] fns

mod conditional;
mod context;
mod depth;
mod hooks;
mod invoke_tool;
mod loops;
mod parallel;
mod platform;
mod run_code;
mod sequence;
mod spawn;
mod support;
mod validation;
mod with_context;
