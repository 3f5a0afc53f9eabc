-- Retention: a workflow's runs newest first (keep_max, runs per workflow),
-- and the runs that pin a definition (a definition goes with its last run).
CREATE INDEX runs_workflow ON runs (workflow_id, created_at_us);
CREATE INDEX runs_definition ON runs (definition);
