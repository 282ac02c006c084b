-- runnerq-fast SQLite schema, migration 0012: the traceback of a failed attempt (issue 27).
--
-- An attempt whose handler raised is acknowledged with the traceback of what
-- it raised (bounded to 16,000 characters, from the handler's frame down);
-- the ack statement keeps the last one here, and get_activity reads it.
-- Only the per-row ack of a failed attempt writes it (ack_completed, the
-- usual flush, does not name it); listings do not read it. ADD COLUMN with
-- no default rewrites no row.
-- Never edit an applied migration; add a new one.

ALTER TABLE runnerq_activities ADD COLUMN traceback TEXT;
