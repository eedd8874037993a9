//! [`StorageAdapter`] over table `kv`.

use std::collections::{BTreeMap, HashMap};

use futures_util::future::BoxFuture;
use noetic_core::adapter::{StorageAdapter, StorageOp};
use noetic_core::{Error, Result};
use sqlx::Row;
use sqlx::postgres::PgRow;

use crate::error::{corrupt, map};
use crate::{PostgresStorage, PrefixSql};

const GET: &str = "SELECT value FROM kv WHERE key = $1";
const GET_MANY: &str = "SELECT key, value FROM kv WHERE key = ANY($1)";
const SET: &str = "INSERT INTO kv (key, value) VALUES ($1, $2) \
     ON CONFLICT (key) DO UPDATE SET value = excluded.value";
const SET_MANY: &str = "INSERT INTO kv (key, value) SELECT * FROM UNNEST($1::text[], $2::bytea[]) \
     ON CONFLICT (key) DO UPDATE SET value = excluded.value";
const DELETE: &str = "DELETE FROM kv WHERE key = $1";
const DELETE_MANY: &str = "DELETE FROM kv WHERE key = ANY($1)";
const LIST: PrefixSql = PrefixSql {
    bounded: "SELECT key FROM kv WHERE key >= $1 AND key < $2 ORDER BY key",
    open: "SELECT key FROM kv WHERE key >= $1 ORDER BY key",
};

fn value(operation: &'static str, key: &str, row: &PgRow, column: usize) -> Result<Vec<u8>> {
    row.try_get::<Vec<u8>, _>(column)
        .map_err(|error| corrupt(operation, key, error))
}

impl StorageAdapter for PostgresStorage {
    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>>> {
        Box::pin(async move {
            let row = sqlx::query(GET)
                .bind(key)
                .fetch_optional(self.pool())
                .await
                .map_err(|error| map("get", key, error))?;
            row.map(|row| value("get", key, &row, 0)).transpose()
        })
    }

    fn set<'a>(&'a self, key: &'a str, value: Vec<u8>) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            sqlx::query(SET)
                .bind(key)
                .bind(value)
                .execute(self.pool())
                .await
                .map_err(|error| map("set", key, error))?;
            Ok(())
        })
    }

    fn delete<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            sqlx::query(DELETE)
                .bind(key)
                .execute(self.pool())
                .await
                .map_err(|error| map("delete", key, error))?;
            Ok(())
        })
    }

    fn list<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Vec<String>>> {
        Box::pin(async move {
            let rows = LIST
                .query(prefix)
                .fetch_all(self.pool())
                .await
                .map_err(|error| map("list", prefix, error))?;
            rows.iter()
                .map(|row| {
                    row.try_get::<String, _>(0)
                        .map_err(|error| corrupt("list", prefix, error))
                })
                .collect()
        })
    }

    fn get_many<'a>(&'a self, keys: &'a [String]) -> BoxFuture<'a, Result<Vec<Option<Vec<u8>>>>> {
        Box::pin(async move {
            let Some(first) = keys.first() else {
                return Ok(Vec::new());
            };
            // One statement, so the values come from one snapshot.
            let rows = sqlx::query(GET_MANY)
                .bind(keys)
                .fetch_all(self.pool())
                .await
                .map_err(|error| map("get_many", first, error))?;
            let mut found: HashMap<String, Vec<u8>> = HashMap::with_capacity(rows.len());
            for row in &rows {
                let key: String = row
                    .try_get(0)
                    .map_err(|error| corrupt("get_many", first, error))?;
                let bytes = value("get_many", &key, row, 1)?;
                found.insert(key, bytes);
            }
            // In the order asked, a key asked twice getting its value twice.
            let mut taken: HashMap<&str, usize> = HashMap::new();
            let mut values = Vec::with_capacity(keys.len());
            for key in keys {
                if let Some(bytes) = found.remove(key.as_str()) {
                    taken.insert(key, values.len());
                    values.push(Some(bytes));
                } else if let Some(&at) = taken.get(key.as_str()) {
                    let again = values[at].clone();
                    values.push(again);
                } else {
                    values.push(None);
                }
            }
            Ok(values)
        })
    }

    fn batch(&self, ops: Vec<StorageOp>) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let Some(first) = ops.first().map(|op| op.key().to_owned()) else {
                return Ok(());
            };
            // Only each key's last op matters: the batch becomes one delete and one upsert, its keys
            // in order (so two batches lock common keys in the same order).
            let mut last: BTreeMap<String, Option<Vec<u8>>> = BTreeMap::new();
            for op in ops {
                match op {
                    StorageOp::Set { key, value } => last.insert(key, Some(value)),
                    StorageOp::Delete { key } => last.insert(key, None),
                    // StorageOp is non-exhaustive: an op this version does not know fails the batch.
                    other => {
                        return Err(Error::Storage {
                            operation: "batch",
                            key: other.key().to_owned(),
                            source: "unsupported storage op".into(),
                        });
                    }
                };
            }
            let mut deletes = Vec::new();
            let (mut keys, mut values) = (Vec::new(), Vec::new());
            for (key, value) in last {
                match value {
                    Some(value) => {
                        keys.push(key);
                        values.push(value);
                    }
                    None => deletes.push(key),
                }
            }
            let delete = (!deletes.is_empty()).then(|| sqlx::query(DELETE_MANY).bind(deletes));
            let upsert = (!keys.is_empty()).then(|| sqlx::query(SET_MANY).bind(keys).bind(values));
            match (delete, upsert) {
                // One statement is atomic by itself.
                (Some(query), None) | (None, Some(query)) => {
                    query
                        .execute(self.pool())
                        .await
                        .map_err(|error| map("batch", &first, error))?;
                }
                (Some(delete), Some(upsert)) => {
                    let mut tx = self
                        .pool()
                        .begin()
                        .await
                        .map_err(|error| map("batch", &first, error))?;
                    delete
                        .execute(&mut *tx)
                        .await
                        .map_err(|error| map("batch", &first, error))?;
                    upsert
                        .execute(&mut *tx)
                        .await
                        .map_err(|error| map("batch", &first, error))?;
                    tx.commit()
                        .await
                        .map_err(|error| map("batch", &first, error))?;
                }
                (None, None) => {}
            }
            Ok(())
        })
    }
}
