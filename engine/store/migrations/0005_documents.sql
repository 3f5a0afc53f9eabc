-- Workflow documents (Loro): appended updates, compacted into a snapshot.
-- Loading a document = its snapshot plus the updates after `upto_seq`.
CREATE TABLE doc_updates (
    workflow_id TEXT NOT NULL,
    seq         INTEGER NOT NULL,
    bytes       BLOB NOT NULL,
    at_us       INTEGER NOT NULL,
    PRIMARY KEY (workflow_id, seq)
) WITHOUT ROWID;

CREATE TABLE doc_snapshots (
    workflow_id TEXT PRIMARY KEY,
    upto_seq    INTEGER NOT NULL,
    bytes       BLOB NOT NULL,
    at_us       INTEGER NOT NULL
) WITHOUT ROWID;
