//! `PostgresStorage` through its public API, each test on a fresh database of the test-support server
//! (`noetic_test_support::postgres`; skipped loudly without PostgreSQL): the conformance suites (the
//! durable-store suite of `noetic-test-support`, one test per section), and what is PostgreSQL's own:
//! database-clock leases, races between two pools, TLS against a server started with `ssl=on`, rows
//! out of range or of the wrong column type, unknown schemas, and errors without the password.

mod clock;
mod concurrency;
mod conformance;
mod corrupt;
mod errors;
mod support;
mod tls;
