-- The document version (Loro frontiers, "counter@peer,...") a workflow's
-- stored JSON was written from, and the one each run ran (NULL: not from a
-- stored document, e.g. a run of a file).
ALTER TABLE workflows ADD COLUMN doc_version TEXT;
ALTER TABLE runs ADD COLUMN doc_version TEXT;

-- Versions of a workflow document: one row per burst of edits by one
-- author (consecutive edits within the engine's version gap, with the same
-- origin message, extend the last row). `parent` and `version` are the
-- document versions before and after; a row is written in the same
-- transaction as the update it records.
CREATE TABLE doc_versions (
    workflow_id   TEXT NOT NULL,
    seq           INTEGER NOT NULL,
    parent        TEXT NOT NULL,
    version       TEXT NOT NULL,
    author        TEXT NOT NULL,
    message       TEXT,
    started_at_us INTEGER NOT NULL,
    at_us         INTEGER NOT NULL,
    edits         INTEGER NOT NULL,
    PRIMARY KEY (workflow_id, seq)
) WITHOUT ROWID;
