//! Key-value storage: the [`StorageAdapter`] trait and its in-memory default, [`InMemoryStorage`].
//!
//! Keys are `/`-separated strings; values are opaque bytes. Layer state (`layer/{layer_id}/{scope}/{key}`)
//! is the first user; checkpoints and ledgers will share the same adapter. A harness built without an
//! adapter gets an [`InMemoryStorage`], so every storage call is a cheap map operation.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use futures_util::future::BoxFuture;

use crate::Result;

/// One write of an atomic [`StorageAdapter::batch`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StorageOp {
    /// Sets `key` to `value`.
    Set {
        /// The key.
        key: String,
        /// The value.
        value: Vec<u8>,
    },
    /// Removes `key` (a missing key is not an error).
    Delete {
        /// The key.
        key: String,
    },
}

impl StorageOp {
    /// A `Set` op.
    pub fn set(key: impl Into<String>, value: impl Into<Vec<u8>>) -> Self {
        StorageOp::Set {
            key: key.into(),
            value: value.into(),
        }
    }

    /// A `Delete` op.
    pub fn delete(key: impl Into<String>) -> Self {
        StorageOp::Delete { key: key.into() }
    }

    /// The key the op writes.
    pub fn key(&self) -> &str {
        match self {
            StorageOp::Set { key, .. } | StorageOp::Delete { key } => key,
        }
    }
}

/// A key-value store. Object safe: the harness holds one as an `Arc<dyn StorageAdapter>`.
///
/// Implementations report failures as [`crate::Error::Storage`] with the operation and key involved.
///
/// # Cancel safety
/// Reads are cancel safe. Dropping a write's future before it resolves leaves the store either
/// unchanged or with the write fully applied; implementations must never leave half of a `batch`.
pub trait StorageAdapter: Send + Sync + 'static {
    /// The value of `key`, `None` when missing.
    ///
    /// # Errors
    /// [`crate::Error::Storage`] when the store fails.
    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>>>;

    /// Sets `key` to `value`.
    ///
    /// # Errors
    /// [`crate::Error::Storage`] when the store fails.
    fn set<'a>(&'a self, key: &'a str, value: Vec<u8>) -> BoxFuture<'a, Result<()>>;

    /// Removes `key`; a missing key is not an error.
    ///
    /// # Errors
    /// [`crate::Error::Storage`] when the store fails.
    fn delete<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<()>>;

    /// Every key starting with `prefix`, sorted ascending.
    ///
    /// # Errors
    /// [`crate::Error::Storage`] when the store fails.
    fn list<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Vec<String>>>;

    /// The values of `keys`, in the same order (`None` for a missing key).
    ///
    /// # Errors
    /// [`crate::Error::Storage`] when the store fails.
    fn get_many<'a>(&'a self, keys: &'a [String]) -> BoxFuture<'a, Result<Vec<Option<Vec<u8>>>>>;

    /// Applies every op at once: either all are visible afterwards or (on error) none.
    ///
    /// # Errors
    /// [`crate::Error::Storage`] when the store fails; nothing is applied then.
    fn batch(&self, ops: Vec<StorageOp>) -> BoxFuture<'_, Result<()>>;
}

macro_rules! forward_storage {
    ($($wrapper:ident),*) => {$(
        impl<T: StorageAdapter + ?Sized> StorageAdapter for $wrapper<T> {
            fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>>> {
                (**self).get(key)
            }

            fn set<'a>(&'a self, key: &'a str, value: Vec<u8>) -> BoxFuture<'a, Result<()>> {
                (**self).set(key, value)
            }

            fn delete<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<()>> {
                (**self).delete(key)
            }

            fn list<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Vec<String>>> {
                (**self).list(prefix)
            }

            fn get_many<'a>(
                &'a self,
                keys: &'a [String],
            ) -> BoxFuture<'a, Result<Vec<Option<Vec<u8>>>>> {
                (**self).get_many(keys)
            }

            fn batch(&self, ops: Vec<StorageOp>) -> BoxFuture<'_, Result<()>> {
                (**self).batch(ops)
            }
        }
    )*};
}

forward_storage!(Arc, Box);

/// The in-memory [`StorageAdapter`]: a sorted map behind a mutex. The harness default.
///
/// Every operation completes synchronously inside its future, so `batch` is atomic and no lock is held
/// across an await.
#[derive(Debug, Default)]
pub struct InMemoryStorage {
    map: Mutex<BTreeMap<String, Vec<u8>>>,
}

impl InMemoryStorage {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// The number of keys stored.
    pub fn len(&self) -> usize {
        self.map().len()
    }

    /// Whether nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.map().is_empty()
    }

    fn map(&self) -> MutexGuard<'_, BTreeMap<String, Vec<u8>>> {
        // Every critical section is a single map operation (or a batch applied from a prepared list), so
        // a poisoned lock still guards consistent data.
        crate::sync::lock(&self.map)
    }
}

impl StorageAdapter for InMemoryStorage {
    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>>> {
        Box::pin(async move { Ok(self.map().get(key).cloned()) })
    }

    fn set<'a>(&'a self, key: &'a str, value: Vec<u8>) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            self.map().insert(key.to_owned(), value);
            Ok(())
        })
    }

    fn delete<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            self.map().remove(key);
            Ok(())
        })
    }

    fn list<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Vec<String>>> {
        Box::pin(async move {
            let keys = self
                .map()
                .range(prefix.to_owned()..)
                .take_while(|(key, _)| key.starts_with(prefix))
                .map(|(key, _)| key.clone())
                .collect();
            Ok(keys)
        })
    }

    fn get_many<'a>(&'a self, keys: &'a [String]) -> BoxFuture<'a, Result<Vec<Option<Vec<u8>>>>> {
        Box::pin(async move {
            let map = self.map();
            Ok(keys.iter().map(|key| map.get(key).cloned()).collect())
        })
    }

    fn batch(&self, ops: Vec<StorageOp>) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let mut map = self.map();
            for op in ops {
                match op {
                    StorageOp::Set { key, value } => {
                        map.insert(key, value);
                    }
                    StorageOp::Delete { key } => {
                        map.remove(&key);
                    }
                }
            }
            Ok(())
        })
    }
}
