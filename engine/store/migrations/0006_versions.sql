-- The document version (Loro frontiers, "counter@peer,...") a workflow's
-- stored JSON was written from, and the one each run ran (NULL: not from a
-- stored document, e.g. a run of a file).
ALTER TABLE workflows ADD COLUMN doc_version TEXT;
ALTER TABLE runs ADD COLUMN doc_version TEXT;
