-- runnerq-fast PostgreSQL schema, migration 0013: the traceback of each failed attempt (issue 27).
--
-- An event row is a batch (activity_ids, with details parallel to it when
-- they differ), so the tracebacks are an array parallel to activity_ids too:
-- the ack of attempts whose handler raised writes them on its retrying,
-- failed and dead_letter rows (each at most 16,000 characters, NULL where an
-- attempt has none), and no other statement names the column (ack_completed,
-- the usual flush, and the live stream's events_after do not). get_events
-- reads an activity's own entry. delete_many sets a deleted activity's entry
-- to NULL with its id; prune_events removes whole rows.
-- A nullable column without a default: adding it rewrites no row.
-- Never edit an applied migration; add a new one.

ALTER TABLE runnerq_events ADD COLUMN tracebacks text[];
