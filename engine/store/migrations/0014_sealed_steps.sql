-- The journal of a run recorded whole when it ended (a run in one go: a
-- webhook's pure steps), packed into its row: one row written per run
-- instead of one per record as well (see engine/store/src/journal/packed.rs).
-- NULL for runs journaled record by record in `journal`.
ALTER TABLE runs ADD COLUMN steps TEXT;
