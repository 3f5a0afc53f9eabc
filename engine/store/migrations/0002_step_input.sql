-- Steps of pure node kinds are journaled once, after they ran: their input
-- travels with the Succeeded / Failed record instead of a Started record.
ALTER TABLE journal ADD COLUMN input TEXT;
