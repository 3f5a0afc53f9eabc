-- `runs.steps` (0014) now holds an inline object or array value as itself
-- instead of as a JSON string of its text (engine/store/src/journal/packed.rs):
-- no escaping pass over text that is already JSON. Rows written before read
-- as they did; no row changes here. The version moves so that an older
-- Sluice, which would read the new rows as damaged, refuses this data dir
-- with its "newer schema" error instead.
CREATE TABLE schema_bump (x);
DROP TABLE schema_bump;
