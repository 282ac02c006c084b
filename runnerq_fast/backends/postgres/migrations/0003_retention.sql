-- runnerq-fast PostgreSQL schema, migration 0003: retention and maintained counts.
--
-- * finished_idx: finished activities by (queue, status, finish time), so a
--   prune batch (queries.sql, prune_pick) reads only rows it deletes, never
--   the live work or other queues. Partial: only finished rows are in it.
-- * events_at_idx: event batch rows by (queue, time), for prune_events.
-- * runnerq_holds: named leases ("holds") with an expiry; the engine's
--   pruner takes ("<queue>", "prune") so one pruner runs per queue however
--   many workers serve it (queries.sql, hold).
-- * Counts per (queue, type, status), maintained by statement-level triggers
--   on runnerq_activities in the same transaction as every status change, so
--   stats and the queue summary read a few counter rows instead of every row
--   of a queue (issue 15). The triggers never update a shared counter row
--   (concurrent claims and acks would queue on its lock until each commits):
--   each statement appends its net changes to runnerq_count_deltas, and
--   queries.sql fold_counts moves them into runnerq_counts now and then (the
--   engine's pruner every pass, stats once it meets more than a few thousand).
--   Readers add both tables up in one snapshot, so a count never drifts.
--
-- CREATE INDEX here locks writes to the table while it builds (the migration
-- runs in one transaction, so not CONCURRENTLY); on a large existing table
-- build them CONCURRENTLY by hand first, with the same names, and this
-- migration then finds them (IF NOT EXISTS).
-- Never edit an applied migration; add 0004_*.sql.

CREATE INDEX IF NOT EXISTS runnerq_activities_finished_idx
    ON runnerq_activities (queue_name, status, finished_at)
    WHERE status IN ('completed', 'failed', 'dead_letter', 'cancelled');

CREATE INDEX IF NOT EXISTS runnerq_events_at_idx ON runnerq_events (queue_name, at);

CREATE TABLE IF NOT EXISTS runnerq_holds (
    queue_name text        NOT NULL,
    purpose    text        NOT NULL,
    holder     text        NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (queue_name, purpose)
);

CREATE TABLE IF NOT EXISTS runnerq_counts (
    queue_name    text   NOT NULL,
    activity_type text   NOT NULL,
    status        text   NOT NULL,
    n             bigint NOT NULL,
    PRIMARY KEY (queue_name, activity_type, status)
);

CREATE TABLE IF NOT EXISTS runnerq_count_deltas (
    queue_name    text   NOT NULL,
    activity_type text   NOT NULL,
    status        text   NOT NULL,
    n             bigint NOT NULL
);

CREATE OR REPLACE FUNCTION runnerq_count_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO runnerq_count_deltas (queue_name, activity_type, status, n)
    SELECT queue_name, activity_type, status, count(*) FROM runnerq_new GROUP BY 1, 2, 3;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION runnerq_count_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO runnerq_count_deltas (queue_name, activity_type, status, n)
    SELECT queue_name, activity_type, status, sum(n)
    FROM (SELECT queue_name, activity_type, status, -1 AS n FROM runnerq_old
          UNION ALL
          SELECT queue_name, activity_type, status, 1 FROM runnerq_new) d
    GROUP BY 1, 2, 3
    HAVING sum(n) <> 0;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION runnerq_count_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO runnerq_count_deltas (queue_name, activity_type, status, n)
    SELECT queue_name, activity_type, status, -count(*) FROM runnerq_old GROUP BY 1, 2, 3;
    RETURN NULL;
END $$;

-- No writer may commit between the backfill and the triggers (its rows would be counted by neither).
LOCK TABLE runnerq_activities IN SHARE ROW EXCLUSIVE MODE;

DELETE FROM runnerq_counts;
DELETE FROM runnerq_count_deltas;
INSERT INTO runnerq_counts (queue_name, activity_type, status, n)
SELECT queue_name, activity_type, status, count(*) FROM runnerq_activities GROUP BY 1, 2, 3;

DROP TRIGGER IF EXISTS runnerq_count_inserted ON runnerq_activities;
DROP TRIGGER IF EXISTS runnerq_count_updated ON runnerq_activities;
DROP TRIGGER IF EXISTS runnerq_count_deleted ON runnerq_activities;
CREATE TRIGGER runnerq_count_inserted AFTER INSERT ON runnerq_activities
    REFERENCING NEW TABLE AS runnerq_new FOR EACH STATEMENT EXECUTE FUNCTION runnerq_count_inserted();
CREATE TRIGGER runnerq_count_updated AFTER UPDATE ON runnerq_activities
    REFERENCING OLD TABLE AS runnerq_old NEW TABLE AS runnerq_new
    FOR EACH STATEMENT EXECUTE FUNCTION runnerq_count_updated();
CREATE TRIGGER runnerq_count_deleted AFTER DELETE ON runnerq_activities
    REFERENCING OLD TABLE AS runnerq_old FOR EACH STATEMENT EXECUTE FUNCTION runnerq_count_deleted();
