//! Adapter traits: the seams through which the core reaches the outside world.
//!
//! Each adapter is an object-safe trait (the harness holds it as an `Arc<dyn …>`) with an in-memory
//! implementation beside it, so a harness built with no adapters runs sandboxed and offline.
//!
//! - [`storage`]: key-value persistence ([`StorageAdapter`], [`InMemoryStorage`]).
//! - [`durable`]: records, append-only logs and fenced leases ([`DurableStore`], [`KvDurableStore`] over
//!   any key-value adapter), which checkpoints, the step ledger and durable sessions write through.
//! - [`fs`]: files inside a root ([`FsAdapter`], [`InMemoryFs`]).
//! - [`shell`]: shell commands ([`ShellAdapter`], [`NoShell`], which answers exit 127).
//! - [`subprocess`]: where steps run ([`SubprocessAdapter`], [`InProcess`]); out-of-process adapters
//!   run registered steps in child processes.
//! - the model seam: [`ModelProvider`] (defined in [`crate::model`], with its request and events).
//! - connections: [`Connection`] and [`ConnectionSpec`], whose operations steps declare they need.
//!
//! This is the one home of the adapter traits; their defining modules' paths keep working.

pub mod durable;
pub mod fs;
mod kv_durable;
pub mod shell;
pub mod storage;
pub mod subprocess;

pub use durable::{
    Commit, DurableStore, Fence, KvDurableStore, Lease, LeaseRequest, LogAppend, LogEntry, Records,
};
pub use fs::{DirEntry, EntryKind, FileStat, FsAdapter, FsError, InMemoryFs, ReadOutput};
pub use shell::{NoShell, ShellAdapter, ShellCommand, ShellError, ShellOutput, ShellStatus};
pub use storage::{InMemoryStorage, StorageAdapter, StorageOp};
pub use subprocess::{
    ChildError, ChildMessage, ChildProcess, InProcess, LiveChild, SignalOutcome, StepRequest,
    SubprocessAdapter,
};

pub use crate::connection::{Connection, ConnectionSpec};
pub use crate::model::{ModelProvider, ModelRequest, ModelStream};
