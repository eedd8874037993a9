//! `SqliteStorage` through its public API: the conformance suites on a file (the durable-store suite
//! of `noetic-test-support`, one test per section) and in memory, and what is SQLite's own: reopening
//! the file, two stores on one file, read-only and locked files, rows of the wrong SQL type and
//! unknown schemas.

mod conformance;
mod corrupt;
mod files;
mod script;
mod support;
