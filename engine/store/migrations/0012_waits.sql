-- Runs that wait for a decision (`flow.approval`). A run parked there (no
-- driver: nothing left to do but wait) keeps its status `running` and has
-- `waiting_since_us` set; it reads back as `waiting`, is not resumed at
-- start, and retention never prunes it (it is not finished).
ALTER TABLE runs ADD COLUMN waiting_since_us INTEGER;

-- One row per approval step that started and has not been decided (its
-- Started record committed before or with it; removed with its decision's
-- record, or when the run ends). Its deadline is when the timeout fires.
CREATE TABLE waits (
    run_id      TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    node        TEXT NOT NULL,
    lineage     TEXT NOT NULL,
    activation  TEXT NOT NULL,
    since_us    INTEGER NOT NULL,
    deadline_us INTEGER,
    message     TEXT,
    PRIMARY KEY (run_id, node, lineage, activation)
) WITHOUT ROWID;

CREATE INDEX waits_due ON waits (deadline_us) WHERE deadline_us IS NOT NULL;
