-- runnerq-fast PostgreSQL schema, migration 0007: when the next delayed activity is due.
--
-- An idle fetcher reads the ready time of the earliest scheduled or retrying
-- activity of the types it claims once per wait (queries.sql, next_due and
-- next_due_any), so it wakes at that time whatever its poll interval. These
-- partial indexes make that read one index probe per type (one in all for a
-- fetcher of every type) however many activities wait; only scheduled and
-- retrying rows have entries, so an enqueue of ready work and a claim of it
-- do not touch them.
--
-- CREATE INDEX here locks writes to runnerq_activities while it builds (the
-- migration runs in one transaction, so not CONCURRENTLY); on a large
-- existing table, build these indexes CONCURRENTLY by hand first, with the
-- same names, and this migration then finds them (IF NOT EXISTS).
-- Never edit an applied migration; add a new one.

CREATE INDEX IF NOT EXISTS runnerq_activities_due_type_idx
    ON runnerq_activities (queue_name, activity_type, ready_at)
    WHERE status IN ('scheduled', 'retrying');

CREATE INDEX IF NOT EXISTS runnerq_activities_due_idx
    ON runnerq_activities (queue_name, ready_at)
    WHERE status IN ('scheduled', 'retrying');
