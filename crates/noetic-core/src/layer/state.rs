//! [`LayerCtx`]: what a layer hook sees, and its per-layer state store over the storage adapter.

use serde::{Serialize, de::DeserializeOwned};

use crate::context::Context;
use crate::{Error, Result};

/// How widely a piece of layer state is shared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LayerScope {
    /// One context (execution): keyed by the context id, so each session turn and child starts fresh.
    Execution,
    /// One session thread: keyed by the thread id (the root context's id when there is none).
    Thread,
    /// One resource (user, tenant): keyed by the resource id, else as [`LayerScope::Thread`].
    Resource,
    /// Everything on this storage: keyed `global`.
    Global,
}

/// The context a layer hook runs in: the [`Context`] and the layer's own state store.
///
/// State is stored in the harness's [`crate::adapter::StorageAdapter`] as JSON under
/// `layer/{layer_id}/{scope_key}/{key}`, where the scope key is the context id (execution), the thread
/// id (thread), the resource id (resource) or `global`.
#[derive(Debug, Clone, Copy)]
pub struct LayerCtx<'a> {
    context: &'a Context,
    layer_id: &'a str,
}

impl<'a> LayerCtx<'a> {
    /// The hook context of layer `layer_id` on `context`.
    pub fn new(context: &'a Context, layer_id: &'a str) -> Self {
        LayerCtx { context, layer_id }
    }

    /// The execution context.
    pub fn context(&self) -> &'a Context {
        self.context
    }

    /// The id of the layer whose state this accesses.
    pub fn layer_id(&self) -> &'a str {
        self.layer_id
    }

    /// The storage key of `key` in `scope`.
    pub fn state_key(&self, scope: LayerScope, key: &str) -> String {
        let context = self.context;
        let root_id = || {
            let mut root = context;
            while let Some(parent) = root.parent() {
                root = parent;
            }
            root.id().to_owned()
        };
        let thread = || {
            context
                .thread_id()
                .map(str::to_owned)
                .unwrap_or_else(root_id)
        };
        let scope_key = match scope {
            LayerScope::Execution => context.id().to_owned(),
            LayerScope::Thread => thread(),
            LayerScope::Resource => context
                .resource_id()
                .map(str::to_owned)
                .unwrap_or_else(thread),
            LayerScope::Global => "global".to_owned(),
        };
        format!("layer/{}/{scope_key}/{key}", self.layer_id)
    }

    /// Reads the state at `key` in `scope`; `None` when nothing is stored.
    ///
    /// # Errors
    /// [`Error::Storage`] when the adapter fails or the stored value is not a `T`.
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads.
    pub async fn state_get<T: DeserializeOwned>(
        &self,
        scope: LayerScope,
        key: &str,
    ) -> Result<Option<T>> {
        let storage_key = self.state_key(scope, key);
        let storage = self.context.runtime().storage();
        match storage.get(&storage_key).await? {
            None => Ok(None),
            Some(bytes) => {
                serde_json::from_slice(&bytes)
                    .map(Some)
                    .map_err(|source| Error::Storage {
                        operation: "get",
                        key: storage_key,
                        source: Box::new(source),
                    })
            }
        }
    }

    /// Writes `value` as the state at `key` in `scope`.
    ///
    /// # Errors
    /// [`Error::Storage`] when `value` does not serialize or the adapter fails.
    ///
    /// # Cancel safety
    /// Dropping it before it resolves may or may not have written the value (never half of it).
    pub async fn state_set<T: Serialize + ?Sized>(
        &self,
        scope: LayerScope,
        key: &str,
        value: &T,
    ) -> Result<()> {
        let storage_key = self.state_key(scope, key);
        let bytes = serde_json::to_vec(value).map_err(|source| Error::Storage {
            operation: "set",
            key: storage_key.clone(),
            source: Box::new(source),
        })?;
        let storage = self.context.runtime().storage();
        storage.set(&storage_key, bytes).await
    }

    /// Removes the state at `key` in `scope`.
    ///
    /// # Errors
    /// [`Error::Storage`] when the adapter fails.
    ///
    /// # Cancel safety
    /// Dropping it before it resolves may or may not have removed the value.
    pub async fn state_delete(&self, scope: LayerScope, key: &str) -> Result<()> {
        let storage_key = self.state_key(scope, key);
        let storage = self.context.runtime().storage();
        storage.delete(&storage_key).await
    }
}
