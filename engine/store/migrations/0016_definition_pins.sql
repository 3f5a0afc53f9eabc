-- How many runs pin each stored definition, kept by the journal writer in
-- the transaction that inserts or deletes those runs (one upsert per
-- definition per committed batch). Retention reads it to know whether a
-- definition is still needed. It replaces the index over every run's
-- definition column (0011): 80 bytes and a b-tree insert per run, about 5%
-- of a webhook run's instructions, for a question asked only when runs go.
CREATE TABLE definition_pins (
    hash TEXT PRIMARY KEY NOT NULL,
    runs INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO definition_pins (hash, runs)
    SELECT substr(definition, 2), COUNT(*) FROM runs
    WHERE definition LIKE '#%' GROUP BY definition;
DROP INDEX runs_definition;
