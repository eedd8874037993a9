//! The errors of `noetic-storage-sqlite`, with stable codes.
//!
//! Failures reach callers as `noetic_core::Error`: `STORAGE_BUSY` when the database stays locked past
//! the busy timeout, `STORAGE_READ_ONLY` when the file cannot be written, `STORAGE_ERROR` for anything
//! else (each naming the operation and the key, log or lease). The codes below are this crate's own and
//! arrive as `noetic_core::Error::Adapter`.

use noetic_core::Error;

/// Every stable error code of this crate with a one-line meaning (rendered into `docs/errors.md`).
pub const CODES: &[(&str, &str)] = &[(
    "SQLITE_SCHEMA_UNKNOWN",
    "The database file carries a schema migration this version does not know (written by a newer version, or altered); the message names the file and the migration.",
)];

/// The code of [`SchemaUnknown`].
pub const SCHEMA_UNKNOWN: &str = "SQLITE_SCHEMA_UNKNOWN";

/// The database file's schema is not one this version of the crate knows.
#[derive(Debug, thiserror::Error)]
#[error(
    "database `{path}` has schema migration {version}, which this version of noetic-storage-sqlite {problem}"
)]
#[non_exhaustive]
pub struct SchemaUnknown {
    /// The database file.
    pub path: String,
    /// The migration version found in the file.
    pub version: i64,
    /// What is wrong with it.
    pub problem: &'static str,
}

impl SchemaUnknown {
    pub(crate) fn into_error(self) -> Error {
        Error::Adapter {
            code: SCHEMA_UNKNOWN,
            source: Box::new(self),
        }
    }
}

// SQLite's primary result codes (the low byte of an extended code).
const SQLITE_BUSY: i64 = 5;
const SQLITE_LOCKED: i64 = 6;
const SQLITE_READONLY: i64 = 8;
const SQLITE_CANTOPEN: i64 = 14;

/// Maps a sqlx error of `operation` on `key` (a key, log or lease name) to the core error.
pub(crate) fn map(operation: &'static str, key: &str, error: sqlx::Error) -> Error {
    let primary = match &error {
        sqlx::Error::Database(database) => database
            .code()
            .and_then(|code| code.parse::<i64>().ok())
            .map(|code| code & 0xff),
        _ => None,
    };
    let key = key.to_owned();
    let source = Box::new(error);
    match primary {
        Some(SQLITE_BUSY | SQLITE_LOCKED) => Error::StorageBusy {
            operation,
            key,
            source,
        },
        Some(SQLITE_READONLY | SQLITE_CANTOPEN) => Error::StorageReadOnly {
            operation,
            key,
            source,
        },
        _ if matches!(*source, sqlx::Error::PoolTimedOut) => Error::StorageBusy {
            operation,
            key,
            source,
        },
        _ => Error::Storage {
            operation,
            key,
            source,
        },
    }
}

/// A stored value that does not decode: `Error::Storage` naming `key`.
pub(crate) fn corrupt(
    operation: &'static str,
    key: &str,
    problem: impl std::fmt::Display,
) -> Error {
    Error::Storage {
        operation,
        key: key.to_owned(),
        source: format!("corrupt row: {problem}").into(),
    }
}

/// A sequence number or time outside SQLite's signed 64-bit integers.
pub(crate) fn out_of_range(operation: &'static str, key: &str, value: u64) -> Error {
    Error::Storage {
        operation,
        key: key.to_owned(),
        source: format!("{value} does not fit in SQLite's 64-bit signed integers").into(),
    }
}
