-- runnerq-fast PostgreSQL schema, migration 0003: retention.
--
-- * finished_idx: finished activities by (queue, status, finish time), so a
--   prune batch (queries.sql, prune_pick) reads only rows it deletes, never
--   the live work or other queues. Partial: only finished rows are in it.
-- * events_at_idx: event batch rows by (queue, time), for prune_events.
-- * runnerq_holds: named leases ("holds") with an expiry; the engine's
--   pruner takes ("<queue>", "prune") so one pruner runs per queue however
--   many workers serve it (queries.sql, hold).
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
