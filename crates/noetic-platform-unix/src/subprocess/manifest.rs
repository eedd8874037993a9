//! Durable manifests: one record per live child in the storage adapter, so that a restarted host
//! finds the children its predecessor started.

use std::path::PathBuf;

use noetic_core::adapter::{LiveChild, StepRequest, StorageAdapter};
use serde::{Deserialize, Serialize};

use super::SubprocessError;
use crate::group;

/// Where the manifests live in the storage adapter: `subprocess/manifest/<handle id>`.
pub const MANIFEST_PREFIX: &str = "subprocess/manifest/";

/// The manifest format this build writes and reads.
const VERSION: u32 = 1;

/// What a host records of a child when it starts it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Manifest {
    /// The format.
    pub version: u32,
    /// What the child runs.
    pub request: StepRequest,
    /// Its pid, which is also its process group.
    pub pid: u32,
    /// Its start time in clock ticks since boot: with the pid, it tells the child from a process
    /// that got its pid later.
    pub start_ticks: u64,
    /// When it started, in milliseconds since the Unix epoch.
    pub started_at_ms: u64,
    /// The socket it serves on.
    pub socket: PathBuf,
    /// Where its stderr goes.
    pub log: PathBuf,
}

impl Manifest {
    pub(crate) fn new(
        request: StepRequest,
        pid: u32,
        start_ticks: u64,
        socket: PathBuf,
        log: PathBuf,
    ) -> Self {
        let started_at_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| {
                u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
            });
        Manifest {
            version: VERSION,
            request,
            pid,
            start_ticks,
            started_at_ms,
            socket,
            log,
        }
    }

    pub(crate) fn key(&self) -> String {
        key(&self.request.handle_id)
    }

    /// Whether the process the manifest names is still the child: alive, not a zombie, and started
    /// when the child did (a pid reused by another process has another start time).
    pub(crate) fn is_alive(&self) -> bool {
        i32::try_from(self.pid)
            .ok()
            .and_then(group::stat)
            .is_some_and(|stat| stat.state != 'Z' && stat.start_ticks == self.start_ticks)
    }

    pub(crate) fn live_child(&self) -> LiveChild {
        LiveChild::new(
            self.request.handle_id.as_str(),
            self.request.step_id.as_str(),
            self.request.execution_id.as_str(),
            self.pid,
            self.request.detached,
            self.started_at_ms,
        )
    }

    /// Removes the manifest, the socket and the log of a child that is gone.
    pub(crate) async fn clear(&self, storage: &dyn StorageAdapter) -> noetic_core::Result<()> {
        let _ = std::fs::remove_file(&self.socket);
        let _ = std::fs::remove_file(&self.log);
        storage.delete(&self.key()).await
    }

    pub(crate) fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// The manifest stored under `key`.
    pub(crate) fn decode(key: &str, bytes: &[u8]) -> Result<Manifest, SubprocessError> {
        let corrupt = |problem: String| SubprocessError::ManifestCorrupt {
            key: key.to_owned(),
            problem,
        };
        let value: serde_json::Value =
            serde_json::from_slice(bytes).map_err(|error| corrupt(format!("not JSON: {error}")))?;
        match value.get("version").and_then(serde_json::Value::as_u64) {
            Some(version) if version == u64::from(VERSION) => {}
            Some(version) => {
                return Err(corrupt(format!(
                    "unknown manifest version {version} (this build reads {VERSION})"
                )));
            }
            None => return Err(corrupt("no `version` field".to_owned())),
        }
        let manifest: Manifest =
            serde_json::from_value(value).map_err(|error| corrupt(error.to_string()))?;
        if manifest.key() != key {
            return Err(corrupt(format!(
                "it names handle `{}`, not the one of its key",
                manifest.request.handle_id
            )));
        }
        Ok(manifest)
    }
}

/// The storage key of the manifest of `handle_id`.
pub(crate) fn key(handle_id: &str) -> String {
    format!("{MANIFEST_PREFIX}{handle_id}")
}
