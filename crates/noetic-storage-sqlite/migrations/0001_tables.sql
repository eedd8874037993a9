-- noetic-storage-sqlite schema, version 1.
-- Keys, log and lease names are TEXT compared bytewise (BINARY collation), so a prefix is a key range.

CREATE TABLE IF NOT EXISTS kv (
    key TEXT PRIMARY KEY NOT NULL,
    value BLOB NOT NULL
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS records (
    key TEXT PRIMARY KEY NOT NULL,
    value BLOB NOT NULL
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS logs (
    log TEXT NOT NULL,
    seq INTEGER NOT NULL,
    value BLOB NOT NULL,
    PRIMARY KEY (log, seq)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS log_heads (
    log TEXT PRIMARY KEY NOT NULL,
    next_seq INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS leases (
    name TEXT PRIMARY KEY NOT NULL,
    holder TEXT NOT NULL,
    epoch INTEGER NOT NULL,
    expires_at_ms INTEGER NOT NULL
) WITHOUT ROWID;
