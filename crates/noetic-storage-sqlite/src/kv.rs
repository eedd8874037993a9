//! [`StorageAdapter`] over table `kv`.

use futures_util::future::BoxFuture;
use noetic_core::Result;
use noetic_core::adapter::{StorageAdapter, StorageOp};
use sqlx::sqlite::SqliteRow;
use sqlx::{Connection, Row};

use crate::error::{corrupt, map};
use crate::{PrefixSql, SqliteStorage};

const GET: &str = "SELECT value FROM kv WHERE key = ?1";
const SET: &str = "INSERT INTO kv (key, value) VALUES (?1, ?2) ON CONFLICT (key) DO UPDATE SET value = excluded.value";
const DELETE: &str = "DELETE FROM kv WHERE key = ?1";
const LIST: PrefixSql = PrefixSql {
    bounded: "SELECT key FROM kv WHERE key >= ?1 AND key < ?2 ORDER BY key",
    open: "SELECT key FROM kv WHERE key >= ?1 ORDER BY key",
};

fn value(operation: &'static str, key: &str, row: &SqliteRow) -> Result<Vec<u8>> {
    row.try_get::<Vec<u8>, _>(0)
        .map_err(|error| corrupt(operation, key, error))
}

impl StorageAdapter for SqliteStorage {
    fn get<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>>> {
        Box::pin(async move {
            let mut reader = self.reader("get", key).await?;
            let row = sqlx::query(GET)
                .bind(key)
                .fetch_optional(reader.conn().await)
                .await
                .map_err(|error| map("get", key, error))?;
            row.map(|row| value("get", key, &row)).transpose()
        })
    }

    fn set<'a>(&'a self, key: &'a str, value: Vec<u8>) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let mut writer = self.writer("set", key).await?;
            sqlx::query(SET)
                .bind(key)
                .bind(value)
                .execute(writer.conn().await)
                .await
                .map_err(|error| map("set", key, error))?;
            Ok(())
        })
    }

    fn delete<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let mut writer = self.writer("delete", key).await?;
            sqlx::query(DELETE)
                .bind(key)
                .execute(writer.conn().await)
                .await
                .map_err(|error| map("delete", key, error))?;
            Ok(())
        })
    }

    fn list<'a>(&'a self, prefix: &'a str) -> BoxFuture<'a, Result<Vec<String>>> {
        Box::pin(async move {
            let mut reader = self.reader("list", prefix).await?;
            let rows = LIST
                .query(prefix)
                .fetch_all(reader.conn().await)
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
            let first = keys.first().map_or("", String::as_str);
            // One read transaction, so the values come from one snapshot.
            let mut reader = self.reader("get_many", first).await?;
            let mut tx = reader
                .conn()
                .await
                .begin()
                .await
                .map_err(|error| map("get_many", first, error))?;
            let mut values = Vec::with_capacity(keys.len());
            for key in keys {
                let row = sqlx::query(GET)
                    .bind(key.as_str())
                    .fetch_optional(&mut *tx)
                    .await
                    .map_err(|error| map("get_many", key, error))?;
                values.push(row.map(|row| value("get_many", key, &row)).transpose()?);
            }
            tx.commit()
                .await
                .map_err(|error| map("get_many", first, error))?;
            Ok(values)
        })
    }

    fn batch(&self, ops: Vec<StorageOp>) -> BoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let Some(first) = ops.first().map(|op| op.key().to_owned()) else {
                return Ok(());
            };
            let mut writer = self.writer("batch", &first).await?;
            let mut tx = writer
                .conn()
                .await
                .begin_with("BEGIN IMMEDIATE")
                .await
                .map_err(|error| map("batch", &first, error))?;
            for op in ops {
                match op {
                    StorageOp::Set { key, value } => {
                        sqlx::query(SET)
                            .bind(key.as_str())
                            .bind(value)
                            .execute(&mut *tx)
                            .await
                            .map_err(|error| map("batch", &key, error))?;
                    }
                    StorageOp::Delete { key } => {
                        sqlx::query(DELETE)
                            .bind(key.as_str())
                            .execute(&mut *tx)
                            .await
                            .map_err(|error| map("batch", &key, error))?;
                    }
                    // StorageOp is non-exhaustive: an op this version does not know fails the batch.
                    other => {
                        return Err(noetic_core::Error::Storage {
                            operation: "batch",
                            key: other.key().to_owned(),
                            source: "unsupported storage op".into(),
                        });
                    }
                }
            }
            tx.commit()
                .await
                .map_err(|error| map("batch", &first, error))
        })
    }
}
