-- noetic-storage-postgres schema, version 2: runnable marks, the work queue of hosts sharing the
-- database. A host claims the oldest mark (lowest `place`) whose lease is free with
-- `FOR UPDATE SKIP LOCKED`; a name marked again keeps its place.

CREATE TABLE IF NOT EXISTS runnable (
    name TEXT COLLATE "C" PRIMARY KEY,
    place BIGINT GENERATED ALWAYS AS IDENTITY
);

CREATE INDEX IF NOT EXISTS runnable_place ON runnable (place);
