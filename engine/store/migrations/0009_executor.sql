-- Where a run executes: 'local' (this engine drives it) or 'worker' (handed
-- off to the shared Restate-backed worker; this engine mirrors its steps).
ALTER TABLE runs ADD COLUMN executor TEXT NOT NULL DEFAULT 'local';
