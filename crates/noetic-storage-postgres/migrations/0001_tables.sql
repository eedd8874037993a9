-- noetic-storage-postgres schema, version 1.
-- Keys, log and lease names are text in the "C" collation (compared bytewise), so a prefix is a key
-- range; values are bytea; sequence numbers, epochs and times are bigint (milliseconds since the Unix
-- epoch for times).

CREATE TABLE IF NOT EXISTS kv (
    key text COLLATE "C" PRIMARY KEY,
    value bytea NOT NULL
);

CREATE TABLE IF NOT EXISTS records (
    key text COLLATE "C" PRIMARY KEY,
    value bytea NOT NULL
);

CREATE TABLE IF NOT EXISTS logs (
    log text COLLATE "C" NOT NULL,
    seq bigint NOT NULL,
    value bytea NOT NULL,
    PRIMARY KEY (log, seq)
);

CREATE TABLE IF NOT EXISTS log_heads (
    log text COLLATE "C" PRIMARY KEY,
    next_seq bigint NOT NULL
);

CREATE TABLE IF NOT EXISTS leases (
    name text COLLATE "C" PRIMARY KEY,
    holder text NOT NULL,
    epoch bigint NOT NULL,
    expires_at_ms bigint NOT NULL
);
