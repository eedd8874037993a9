//! `PostgresStorage` through its public API, each test on a fresh database of the test-support server
//! (`noetic_test_support::postgres`; skipped loudly without PostgreSQL): the conformance suites,
//! database-clock leases, races between two pools, corrupt rows and unknown schemas, errors without
//! the password, and a durable harness on PostgreSQL.

mod clock;
mod concurrency;
mod conformance;
mod corrupt;
mod errors;
mod harness;
mod support;
