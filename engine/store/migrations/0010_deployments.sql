-- Workflows deployed to the shared worker (docs/worker.md): the version the
-- worker owns, and how far this engine has read the deployment's run log
-- (runs the worker started itself, from schedules and webhooks, adopted
-- into local history). An undeployed workflow keeps its row (version NULL)
-- until its log is read to the end.
CREATE TABLE deployments (
    workflow_id    TEXT PRIMARY KEY,
    version        TEXT,
    deployed_at_us INTEGER,
    log_read       INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
