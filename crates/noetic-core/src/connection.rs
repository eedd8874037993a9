//! Connections: named external systems (an MCP server, a database, a queue) and the operations they
//! support, checked against what the steps of a tree declare they need before the tree runs.
//!
//! A harness holds connection implementations ([`AgentHarnessBuilder::connection`]). A `run_code` or
//! `call_model` step declares a need with `.requires(connection, operation)`. Before anything of a tree
//! executes, [`AgentHarness::run`] walks it and fails with `CONNECTION_UNSATISFIED { connection,
//! operation, registered }` at the first need that no registered connection meets (`registered` says
//! whether the connection is missing or lacks the operation): no step starts, no event is emitted, no
//! provider is called. The check happens on every `run()` (it is a walk over the tree's
//! nodes, with no IO), so it also covers the first run of every root.
//!
//! The walk sees the static tree: sequence and loop bodies, `in_parallel` paths given to the builder,
//! `spawn` and `with_context` children. Steps chosen at run time (a `conditional`'s route, dynamic
//! parallel paths) cannot be known up front, so their needs are not checked in advance. The check runs
//! at `run()` rather than at `build()` because the agent graph is only one of the trees a harness runs.
//!
//! [`AgentHarnessBuilder::connection`]: crate::AgentHarnessBuilder::connection
//! [`AgentHarness::run`]: crate::AgentHarness::run

use std::sync::Arc;

/// A named connection and the operations it supports.
///
/// Implement it on the client of an external system, or use a [`ConnectionSpec`] to declare one.
/// Object safe: the harness stores connections as `Arc<dyn Connection>`, and steps reach theirs with
/// [`crate::AgentHarness::connection`].
pub trait Connection: Send + Sync + 'static {
    /// The connection's name, as steps refer to it.
    fn name(&self) -> &str;

    /// Whether the connection supports `operation`.
    fn supports(&self, operation: &str) -> bool;
}

impl<C: Connection + ?Sized> Connection for Arc<C> {
    fn name(&self) -> &str {
        (**self).name()
    }

    fn supports(&self, operation: &str) -> bool {
        (**self).supports(operation)
    }
}

impl<C: Connection + ?Sized> Connection for Box<C> {
    fn name(&self) -> &str {
        (**self).name()
    }

    fn supports(&self, operation: &str) -> bool {
        (**self).supports(operation)
    }
}

/// A connection declared by name and operations.
///
/// # Examples
/// ```
/// use noetic_core::{Connection, ConnectionSpec};
/// let db = ConnectionSpec::new("db", ["query", "insert"]);
/// assert!(db.supports("query"));
/// assert!(!db.supports("drop"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionSpec {
    name: String,
    operations: Vec<String>,
}

impl ConnectionSpec {
    /// A connection called `name` supporting `operations`.
    pub fn new(
        name: impl Into<String>,
        operations: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        ConnectionSpec {
            name: name.into(),
            operations: operations.into_iter().map(Into::into).collect(),
        }
    }

    /// The supported operations.
    pub fn operations(&self) -> &[String] {
        &self.operations
    }
}

impl Connection for ConnectionSpec {
    fn name(&self) -> &str {
        &self.name
    }

    fn supports(&self, operation: &str) -> bool {
        self.operations
            .iter()
            .any(|supported| supported == operation)
    }
}

/// One operation a step needs from a named connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Need {
    pub(crate) connection: String,
    pub(crate) operation: String,
}

impl Need {
    pub(crate) fn new(connection: impl Into<String>, operation: impl Into<String>) -> Self {
        Need {
            connection: connection.into(),
            operation: operation.into(),
        }
    }
}
