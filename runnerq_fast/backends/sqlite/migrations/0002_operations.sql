-- runnerq-fast SQLite schema, migration 0002: operator features.
--
-- * parent_id: the activity whose handler enqueued this one (ctx.executor).
-- * cancel_requested_at: an operator asked to cancel this running activity
--   (epoch ms); the engine learns it on its next heartbeat.
-- * Listing indexes. Every listing walks one of them in (created_at, id)
--   order, one range per status (and type) of the filter, merged by the
--   backend, so no listing reads rows of statuses it did not ask for:
--     status_created_idx  (queue, status, created_at, id): status filters, and
--                         the unfiltered listing (one range per status);
--     type_created_idx    (queue, type, status, created_at, id): type filters;
--     parent_idx          children of one activity.
-- Never edit an applied migration; add 0003_*.sql.

ALTER TABLE runnerq_activities ADD COLUMN parent_id TEXT;

ALTER TABLE runnerq_activities ADD COLUMN cancel_requested_at INTEGER;

CREATE INDEX runnerq_activities_status_created_idx
    ON runnerq_activities (queue_name, status, created_at, id);

CREATE INDEX runnerq_activities_type_created_idx
    ON runnerq_activities (queue_name, activity_type, status, created_at, id);

CREATE INDEX runnerq_activities_parent_idx
    ON runnerq_activities (parent_id, created_at, id)
    WHERE parent_id IS NOT NULL;
