-- runnerq-fast PostgreSQL schema, migration 0002: operator features.
--
-- * parent_id: the activity whose handler enqueued this one (ctx.executor).
-- * cancel_requested_at: an operator asked to cancel this running activity;
--   the engine learns it on its next heartbeat (extend_leases).
-- * Listing indexes. A listing walks one range of one of them per status
--   (and per type) of its filter, in (created_at, id) order, and merges the
--   ranges (queries.sql, query_*), so it never reads rows of statuses it did
--   not ask for, and never all finished rows of a queue:
--     status_created_idx  (queue, status, created_at, id): status filters and
--                         the unfiltered listing (one range per status);
--     type_created_idx    (queue, type, status, created_at, id): type filters;
--     parent_idx          the children of one activity (rows with a parent only).
--   Both full indexes are updated by every claim and ack (a status change is
--   never a HOT update, whatever the indexes): the price of fast listings,
--   measured in the issue's note.
--
-- CREATE INDEX here locks writes to runnerq_activities while it builds (the
-- migration runs in one transaction, so not CONCURRENTLY); on a large
-- existing table, build these indexes CONCURRENTLY by hand first, with the
-- same names, and this migration then finds them (IF NOT EXISTS).
-- Never edit an applied migration; add 0003_*.sql.

ALTER TABLE runnerq_activities
    ADD COLUMN IF NOT EXISTS parent_id uuid,
    ADD COLUMN IF NOT EXISTS cancel_requested_at timestamptz;

CREATE INDEX IF NOT EXISTS runnerq_activities_status_created_idx
    ON runnerq_activities (queue_name, status, created_at, id);

CREATE INDEX IF NOT EXISTS runnerq_activities_type_created_idx
    ON runnerq_activities (queue_name, activity_type, status, created_at, id);

CREATE INDEX IF NOT EXISTS runnerq_activities_parent_idx
    ON runnerq_activities (parent_id, created_at, id)
    WHERE parent_id IS NOT NULL;
