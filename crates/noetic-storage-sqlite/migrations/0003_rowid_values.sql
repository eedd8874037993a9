-- noetic-storage-sqlite schema, version 3: the tables holding values (`kv`, `records`, `logs`) become
-- rowid tables keyed by a unique index. As WITHOUT ROWID tables their rows were index cells, which
-- spill to overflow pages past about 1 KB; every seek that passed such a cell read its overflow
-- pages, so a checkpoint of a turn with a ~1.5 KB answer read the file about a hundred times. A rowid
-- table keeps a row of up to about 4 KB on its leaf page, and the seeks run on the small index.

CREATE TABLE kv_v3 (
    key TEXT PRIMARY KEY NOT NULL,
    value BLOB NOT NULL
);
INSERT INTO kv_v3 (key, value) SELECT key, value FROM kv;
DROP TABLE kv;
ALTER TABLE kv_v3 RENAME TO kv;

CREATE TABLE records_v3 (
    key TEXT PRIMARY KEY NOT NULL,
    value BLOB NOT NULL
);
INSERT INTO records_v3 (key, value) SELECT key, value FROM records;
DROP TABLE records;
ALTER TABLE records_v3 RENAME TO records;

CREATE TABLE logs_v3 (
    log TEXT NOT NULL,
    seq INTEGER NOT NULL,
    value BLOB NOT NULL,
    PRIMARY KEY (log, seq)
);
INSERT INTO logs_v3 (log, seq, value) SELECT log, seq, value FROM logs;
DROP TABLE logs;
ALTER TABLE logs_v3 RENAME TO logs;
