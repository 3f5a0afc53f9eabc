-- Drafts and publish: `definition` / `doc_version` hold the draft (the
-- document as edited); what triggers, API and CLI runs by id run is the
-- published definition, until the user publishes again.
ALTER TABLE workflows ADD COLUMN published_definition TEXT;
ALTER TABLE workflows ADD COLUMN published_version TEXT;
ALTER TABLE workflows ADD COLUMN published_at_us INTEGER;

-- Every workflow stored before drafts existed is published as it is, so
-- nothing that runs today stops.
UPDATE workflows SET published_definition = definition, published_version = doc_version,
    published_at_us = updated_at_us;

-- When this version was last published (null: never); a published version
-- is closed: later edits start a new one.
ALTER TABLE doc_versions ADD COLUMN published_at_us INTEGER;
UPDATE doc_versions SET published_at_us = (SELECT w.published_at_us FROM workflows w
    WHERE w.id = doc_versions.workflow_id AND w.published_version = doc_versions.version);

-- Whether a run ran the draft (the editor's Run) rather than the published version.
ALTER TABLE runs ADD COLUMN draft INTEGER NOT NULL DEFAULT 0;
