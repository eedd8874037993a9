//! Adapter traits: the seams through which the core reaches the outside world.
//!
//! Each adapter is an object-safe trait (the harness holds it as an `Arc<dyn …>`) with an in-memory
//! implementation beside it, so a harness built with no adapters runs sandboxed and offline.
//!
//! - [`storage`]: key-value persistence ([`StorageAdapter`], [`InMemoryStorage`]).

pub mod storage;

pub use storage::{InMemoryStorage, StorageAdapter, StorageOp};
