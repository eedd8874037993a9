//! `SqliteStorage` through its public API: the conformance suites on a file and in memory, reopening,
//! two stores on one file, read-only and locked files, corrupt rows and unknown schemas, many idle
//! durable threads.

mod conformance;
mod corrupt;
mod files;
mod paid;
mod support;
mod threads;
