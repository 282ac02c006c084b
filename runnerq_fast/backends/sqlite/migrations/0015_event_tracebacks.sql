-- runnerq-fast SQLite schema, migration 0015: the traceback of each failed attempt (issue 27).
--
-- The retrying, failed and dead_letter event written by the ack of an
-- attempt whose handler raised keeps that attempt's traceback (at most
-- 16,000 characters); every other event has NULL. Only the per-row ack of a
-- failed attempt writes it (insert_event_traceback; ack_completed, the usual
-- flush, and the live stream's events_after do not name it); get_events
-- reads it. It goes with its event row (delete_events, prune_events).
-- ADD COLUMN with no default rewrites no row.
-- Never edit an applied migration; add a new one.

ALTER TABLE runnerq_events ADD COLUMN traceback TEXT;
