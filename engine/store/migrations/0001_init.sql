-- Sluice store schema, version 1: workflows, runs, the run journal and run logs.
-- Value columns (runs.input, runs.output, journal.data) hold either JSON text or
-- "@" + the hex blake3 hash of a blob in <data dir>/blobs (JSON never starts with '@').

CREATE TABLE workflows (
    id            TEXT PRIMARY KEY NOT NULL,
    name          TEXT NOT NULL,
    definition    TEXT NOT NULL,
    updated_at_us INTEGER NOT NULL
);

CREATE TABLE runs (
    id             TEXT PRIMARY KEY NOT NULL,
    workflow_id    TEXT NOT NULL,
    definition     TEXT NOT NULL,
    "trigger"      TEXT NOT NULL,
    input          TEXT NOT NULL,
    status         TEXT NOT NULL DEFAULT 'running'
                   CHECK (status IN ('running', 'succeeded', 'failed', 'cancelled')),
    output         TEXT,
    error          TEXT,
    created_at_us  INTEGER NOT NULL,
    finished_at_us INTEGER,
    parent_run     TEXT
);

-- list_runs: newest first, ties broken by id.
CREATE INDEX runs_created ON runs (created_at_us, id);
-- unfinished_runs at startup: only the few running rows.
CREATE INDEX runs_running ON runs (created_at_us, id) WHERE status = 'running';

-- One row per journal record; seq is assigned by the runtime, per run.
CREATE TABLE journal (
    run_id      TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    seq         INTEGER NOT NULL,
    kind        INTEGER NOT NULL CHECK (kind BETWEEN 1 AND 4),
    node        TEXT NOT NULL,
    lineage     TEXT NOT NULL,
    activation  TEXT NOT NULL,
    attempt     INTEGER NOT NULL,
    at_us       INTEGER NOT NULL,
    data        TEXT,
    error       TEXT,
    duration_us INTEGER,
    PRIMARY KEY (run_id, seq)
) WITHOUT ROWID;

CREATE TABLE logs (
    id      INTEGER PRIMARY KEY,
    run_id  TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    node    TEXT NOT NULL,
    lineage TEXT NOT NULL,
    level   TEXT NOT NULL,
    message TEXT NOT NULL,
    at_us   INTEGER NOT NULL
);

-- run_logs: the index carries the rowid, so it also gives insertion order.
CREATE INDEX logs_run ON logs (run_id);
