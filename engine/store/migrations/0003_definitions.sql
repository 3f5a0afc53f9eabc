-- Each pinned workflow version is stored once: a run's `definition` column
-- holds "#" + the blake3 hash of the text kept here (older rows: the text).
CREATE TABLE definitions (
    hash TEXT PRIMARY KEY,
    text TEXT NOT NULL
) WITHOUT ROWID;
