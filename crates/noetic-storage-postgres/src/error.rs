//! The errors of `noetic-storage-postgres`, with stable codes.
//!
//! Failures reach callers as `noetic_core::Error`: `STORAGE_BUSY` when a lock, a serialization
//! conflict or a timeout stopped the work (nothing was written; retry later), `STORAGE_READ_ONLY` when
//! the database refuses writes (a hot standby, `default_transaction_read_only`), `STORAGE_ERROR` for
//! anything else (each naming the operation and the key, log or lease). The codes below are this
//! crate's own and arrive as `noetic_core::Error::Adapter`.

use noetic_core::Error;

/// Every stable error code of this crate with a one-line meaning (rendered into `docs/errors.md`).
pub const CODES: &[(&str, &str)] = &[(
    "POSTGRES_SCHEMA_UNKNOWN",
    "The database carries a schema migration this version does not know (written by a newer version, or altered); the message names the database (password redacted) and the migration.",
)];

/// The code of [`SchemaUnknown`].
pub const SCHEMA_UNKNOWN: &str = "POSTGRES_SCHEMA_UNKNOWN";

/// The database's schema is not one this version of the crate knows.
#[derive(Debug, thiserror::Error)]
#[error(
    "database `{database}` has schema migration {version}, which this version of noetic-storage-postgres {problem}"
)]
#[non_exhaustive]
pub struct SchemaUnknown {
    /// The database's URL, its password redacted.
    pub database: String,
    /// The migration version found in the database.
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

/// SQLSTATEs after which nothing was written and a retry may succeed: `serialization_failure`,
/// `deadlock_detected`, `lock_not_available` (`lock_timeout`, `NOWAIT`), `query_canceled`
/// (`statement_timeout`) and `too_many_connections`.
const BUSY: &[&str] = &["40001", "40P01", "55P03", "57014", "53300"];

/// `read_only_sql_transaction`: a hot standby, or `default_transaction_read_only` set.
const READ_ONLY: &str = "25006";

/// Maps a sqlx error of `operation` on `key` (a key, log or lease name) to the core error.
pub(crate) fn map(operation: &'static str, key: &str, error: sqlx::Error) -> Error {
    let key = key.to_owned();
    let state = match &error {
        sqlx::Error::Database(database) => database.code(),
        _ => None,
    };
    let busy = matches!(error, sqlx::Error::PoolTimedOut)
        || state.as_deref().is_some_and(|state| BUSY.contains(&state));
    let read_only = state.as_deref() == Some(READ_ONLY);
    let source = Box::new(error);
    if busy {
        Error::StorageBusy {
            operation,
            key,
            source,
        }
    } else if read_only {
        Error::StorageReadOnly {
            operation,
            key,
            source,
        }
    } else {
        Error::Storage {
            operation,
            key,
            source,
        }
    }
}

/// As [`map`], for errors of connecting to `location`: when the error's text contains one of
/// `secrets` (the URL's password, as written or decoded), the source becomes that text with each
/// secret replaced by `***`, so no error, log line or panic message shows the password.
pub(crate) fn map_connect(
    operation: &'static str,
    location: &str,
    secrets: &[String],
    error: sqlx::Error,
) -> Error {
    let text = error.to_string();
    if !secrets
        .iter()
        .any(|secret| !secret.is_empty() && text.contains(secret.as_str()))
    {
        return map(operation, location, error);
    }
    let mut redacted = text;
    for secret in secrets.iter().filter(|secret| !secret.is_empty()) {
        redacted = redacted.replace(secret.as_str(), "***");
    }
    Error::Storage {
        operation,
        key: location.to_owned(),
        source: redacted.into(),
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

/// A sequence number or time outside PostgreSQL's `bigint`.
pub(crate) fn out_of_range(operation: &'static str, key: &str, value: u64) -> Error {
    Error::Storage {
        operation,
        key: key.to_owned(),
        source: format!("{value} does not fit in PostgreSQL's bigint (64-bit signed)").into(),
    }
}
