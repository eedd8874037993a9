//! The step ledger: one row per completed step, keyed by its path in the tree, so a resumed run returns
//! recorded outputs instead of running completed steps again.
//!
//! A path is the parent's path, `/`, the step id, `#` and how many times that id already ran under the
//! same parent (`/flow#0/gather#0`, `/flow#0/loop#0/body#3`), so loop iterations and repeated runs are
//! distinct. A row whose id or kind differs from the step now at its path is dropped with everything
//! under it (a tombstone row records that), and that step runs fresh.

use std::collections::BTreeMap;

use serde_json::Value;

use super::record::LedgerRow;
use crate::step_kind::StepKind;
use crate::{Error, Result};

/// The default cap on one recorded output, in bytes of JSON.
pub const DEFAULT_MAX_ENTRY_BYTES: u64 = 128 * 1024;
/// The default cap on rows kept per execution.
pub const DEFAULT_MAX_ENTRIES: u64 = 1000;

/// How much of the ledger is kept: outputs over `max_entry_bytes` are not recorded (their step runs
/// again on resume), and beyond `max_entries` rows the oldest are removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct LedgerRetention {
    /// The largest output recorded, in bytes of JSON (default 128 KiB).
    pub max_entry_bytes: u64,
    /// The most rows kept (default 1000).
    pub max_entries: u64,
}

impl Default for LedgerRetention {
    fn default() -> Self {
        LedgerRetention {
            max_entry_bytes: DEFAULT_MAX_ENTRY_BYTES,
            max_entries: DEFAULT_MAX_ENTRIES,
        }
    }
}

impl LedgerRetention {
    /// Caps of `max_entry_bytes` and `max_entries`.
    ///
    /// # Errors
    /// [`Error::StepLedgerRetentionInvalid`] naming the cap that is 0.
    pub fn new(max_entry_bytes: u64, max_entries: u64) -> Result<Self> {
        for (field, value) in [
            ("max_entry_bytes", max_entry_bytes),
            ("max_entries", max_entries),
        ] {
            if value == 0 {
                return Err(Error::StepLedgerRetentionInvalid { field, value });
            }
        }
        Ok(LedgerRetention {
            max_entry_bytes,
            max_entries,
        })
    }
}

struct Entry {
    step_id: String,
    kind: StepKind,
    output: Value,
}

/// The ledger of one execution in memory: the rows loaded on restore, and those not yet recorded.
pub(super) struct Ledger {
    retention: LedgerRetention,
    entries: BTreeMap<String, Entry>,
    pending: Vec<LedgerRow>,
    /// The sequence number of the oldest row still stored.
    oldest_seq: u64,
}

impl Ledger {
    pub(super) fn new(retention: LedgerRetention) -> Self {
        Ledger {
            retention,
            entries: BTreeMap::new(),
            pending: Vec::new(),
            oldest_seq: 0,
        }
    }

    /// A ledger of `rows` read back in sequence order (later rows win; tombstones remove their subtree).
    pub(super) fn loaded(retention: LedgerRetention, rows: Vec<(u64, LedgerRow)>) -> Self {
        let mut ledger = Ledger::new(retention);
        ledger.oldest_seq = rows.first().map_or(0, |(seq, _)| *seq);
        for (_, row) in rows {
            match row.output {
                Some(output) => {
                    ledger.entries.insert(
                        row.path,
                        Entry {
                            step_id: row.step_id,
                            kind: row.kind,
                            output,
                        },
                    );
                }
                None => ledger.drop_subtree(&row.path),
            }
        }
        ledger
    }

    fn drop_subtree(&mut self, path: &str) {
        let below = format!("{path}/");
        self.entries
            .retain(|key, _| key != path && !key.starts_with(&below));
    }

    /// The recorded output of the step at `path`, when it is that same step. A different step at the
    /// path drops the path's rows (and those under it) and returns `None`.
    pub(super) fn replay(&mut self, path: &str, step_id: &str, kind: StepKind) -> Option<Value> {
        let entry = self.entries.get(path)?;
        if entry.step_id == step_id && entry.kind == kind {
            return Some(entry.output.clone());
        }
        let stale = self.entries.remove(path)?;
        self.drop_subtree(path);
        self.pending.push(LedgerRow {
            path: path.to_owned(),
            step_id: stale.step_id,
            kind: stale.kind,
            output: None,
        });
        None
    }

    /// Records a completed step's output, unless it is over `max_entry_bytes` (then its step runs again
    /// on resume).
    pub(super) fn record(&mut self, path: &str, step_id: &str, kind: StepKind, output: &Value) {
        let size = serde_json::to_vec(output).map_or(u64::MAX, |bytes| bytes.len() as u64);
        if size > self.retention.max_entry_bytes {
            tracing::debug!(
                path,
                size,
                "step output over the ledger's max_entry_bytes: not recorded"
            );
            return;
        }
        self.pending.push(LedgerRow {
            path: path.to_owned(),
            step_id: step_id.to_owned(),
            kind,
            output: Some(output.clone()),
        });
    }

    /// The rows to append from sequence `next_seq`, and the sequence below which rows are to be removed
    /// to stay within `max_entries`.
    pub(super) fn take_pending(&mut self, next_seq: u64) -> (Vec<LedgerRow>, Option<u64>) {
        let rows = std::mem::take(&mut self.pending);
        let end = next_seq + rows.len() as u64;
        let trim = (end - self.oldest_seq > self.retention.max_entries).then(|| {
            self.oldest_seq = end - self.retention.max_entries;
            self.oldest_seq
        });
        (rows, trim)
    }
}
