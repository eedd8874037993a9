//! Reading an execution back: its header, state, item log and ledger, each row checked.
//!
//! A row that does not parse is [`Error::CheckpointCorrupt`] naming the execution and the row; an unknown
//! schema version is [`Error::CheckpointSchemaMismatch`]; an unknown id is
//! [`Error::CheckpointNotFound`]. Only the execution asked for is read, so a corrupt one never stops
//! another from restoring.

use serde::de::DeserializeOwned;

use super::record::{
    ExecutionRecord, Header, LedgerRow, SCHEMA_VERSION, StateRecord, header_key, items_log,
    ledger_log, state_key,
};
use crate::adapter::durable::DurableStore;
use crate::item::Item;
use crate::{Error, Result};

/// An execution as read back.
pub(crate) struct Restored {
    pub(crate) header: Header,
    pub(crate) state: StateRecord,
    pub(crate) items: Vec<Item>,
    pub(crate) ledger: Vec<(u64, LedgerRow)>,
    pub(crate) ledger_next_seq: u64,
}

fn corrupt(execution_id: &str, key: String, problem: impl std::fmt::Display) -> Error {
    Error::CheckpointCorrupt {
        execution_id: execution_id.to_owned(),
        key,
        problem: problem.to_string(),
    }
}

/// Parses a row, checking its `schema_version` first when it has one, so a newer format is named as
/// such rather than as corrupt.
pub(crate) fn parse<T: DeserializeOwned>(execution_id: &str, key: &str, bytes: &[u8]) -> Result<T> {
    let value: serde_json::Value = serde_json::from_slice(bytes)
        .map_err(|error| corrupt(execution_id, key.to_owned(), error))?;
    if let Some(found) = value.get("schema_version") {
        match found.as_u64() {
            Some(found) if found == u64::from(SCHEMA_VERSION) => {}
            Some(found) => {
                return Err(Error::CheckpointSchemaMismatch {
                    execution_id: execution_id.to_owned(),
                    found: u32::try_from(found).unwrap_or(u32::MAX),
                    expected: SCHEMA_VERSION,
                });
            }
            None => {
                return Err(corrupt(
                    execution_id,
                    key.to_owned(),
                    "schema_version is not a number",
                ));
            }
        }
    }
    serde_json::from_value(value).map_err(|error| corrupt(execution_id, key.to_owned(), error))
}

async fn header(store: &dyn DurableStore, execution_id: &str) -> Result<Option<Header>> {
    let key = header_key(execution_id);
    match store.record(&key).await? {
        None => Ok(None),
        Some(bytes) => parse(execution_id, &key, &bytes).map(Some),
    }
}

async fn state(store: &dyn DurableStore, execution_id: &str) -> Result<Option<StateRecord>> {
    let key = state_key(execution_id);
    match store.record(&key).await? {
        None => Ok(None),
        Some(bytes) => parse(execution_id, &key, &bytes).map(Some),
    }
}

/// Appends the items of `log` (the first `limit` of them, or all) to `items`, checking each entry's
/// sequence number; a gap or a row that does not parse is [`Error::CheckpointCorrupt`] naming
/// `subject` and the entry.
pub(crate) async fn read_items(
    store: &dyn DurableStore,
    subject: &str,
    log: &str,
    limit: Option<u64>,
    items: &mut Vec<Item>,
) -> Result<()> {
    for (expected, entry) in (0u64..).zip(store.read_log(log, 0).await?) {
        if limit.is_some_and(|limit| entry.seq >= limit) {
            break;
        }
        let key = format!("{log}#{}", entry.seq);
        if entry.seq != expected {
            return Err(corrupt(subject, key, "the log has a gap"));
        }
        let item: Item =
            serde_json::from_slice(&entry.value).map_err(|error| corrupt(subject, key, error))?;
        items.push(item);
    }
    Ok(())
}

/// Reads everything of `execution_id`.
///
/// # Errors
/// [`Error::CheckpointNotFound`], [`Error::CheckpointSchemaMismatch`], [`Error::CheckpointCorrupt`] as
/// above; storage errors.
pub(crate) async fn load(store: &dyn DurableStore, execution_id: &str) -> Result<Restored> {
    let header = header(store, execution_id)
        .await?
        .ok_or_else(|| Error::CheckpointNotFound {
            execution_id: execution_id.to_owned(),
        })?;
    let state = state(store, execution_id).await?.unwrap_or(StateRecord {
        schema_version: SCHEMA_VERSION,
        item_count: 0,
        state: serde_json::Value::Object(Default::default()),
        spend: Default::default(),
        step_count: 0,
        cursors: Default::default(),
        steers_taken: Vec::new(),
    });
    let mut items = Vec::new();
    if let Some(base) = &header.base {
        read_items(store, execution_id, &base.log, Some(base.count), &mut items).await?;
        if items.len() as u64 != base.count {
            return Err(corrupt(
                execution_id,
                base.log.clone(),
                format!(
                    "{} items in the base log, {} expected",
                    items.len(),
                    base.count
                ),
            ));
        }
    }
    let log = items_log(execution_id);
    read_items(store, execution_id, &log, None, &mut items).await?;
    if items.len() as u64 != state.item_count {
        return Err(corrupt(
            execution_id,
            log,
            format!(
                "{} items in the log, {} in the state",
                items.len(),
                state.item_count
            ),
        ));
    }
    let ledger_name = ledger_log(execution_id);
    let ledger_next_seq = store.next_seq(&ledger_name).await?;
    let mut ledger = Vec::new();
    for entry in store.read_log(&ledger_name, 0).await? {
        let key = format!("{ledger_name}#{}", entry.seq);
        let row: LedgerRow = serde_json::from_slice(&entry.value)
            .map_err(|error| corrupt(execution_id, key, error))?;
        ledger.push((entry.seq, row));
    }
    Ok(Restored {
        header,
        state,
        items,
        ledger,
        ledger_next_seq,
    })
}

/// The public view of `execution_id`'s header and spend, `None` when unknown.
///
/// # Errors
/// [`Error::CheckpointSchemaMismatch`] or [`Error::CheckpointCorrupt`] for a bad header or state row;
/// storage errors.
pub(crate) async fn read_execution(
    store: &dyn DurableStore,
    execution_id: &str,
) -> Result<Option<ExecutionRecord>> {
    let Some(header) = header(store, execution_id).await? else {
        return Ok(None);
    };
    let spend = state(store, execution_id)
        .await?
        .map(|state| state.spend)
        .unwrap_or_default();
    Ok(Some(ExecutionRecord {
        execution_id: header.execution_id,
        status: header.status,
        input: header.input,
        output: header.output,
        error: header.error,
        metadata: header.metadata,
        thread_id: header.thread_id,
        spend,
        created_ms: header.created_ms,
        updated_ms: header.updated_ms,
    }))
}

/// The ids of every execution in `store`, sorted.
///
/// # Errors
/// Storage errors.
pub(crate) async fn list_executions(store: &dyn DurableStore) -> Result<Vec<String>> {
    Ok(store
        .records("exec/")
        .await?
        .into_iter()
        .filter_map(|(key, _)| {
            key.strip_prefix("exec/")?
                .strip_suffix("/header")
                .map(str::to_owned)
        })
        .collect())
}
