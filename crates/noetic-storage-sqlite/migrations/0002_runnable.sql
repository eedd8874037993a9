-- noetic-storage-sqlite schema, version 2: runnable marks (the work queue of hosts sharing the file).
-- `place` orders claims oldest first; a name marked again keeps its place.

CREATE TABLE IF NOT EXISTS runnable (
    name TEXT PRIMARY KEY NOT NULL,
    place INTEGER NOT NULL
) WITHOUT ROWID;

CREATE INDEX IF NOT EXISTS runnable_place ON runnable (place);
