-- runnerq-fast SQLite schema, migration 0007: when the next delayed activity is due.
--
-- An idle fetcher reads the ready time of the earliest scheduled or retrying
-- activity of the types it claims once per wait (queries.sql, next_due and
-- next_due_any), so it wakes at that time whatever its poll interval. These
-- partial indexes make that read one index probe per type (one in all for a
-- fetcher of every type) however many activities wait; only scheduled and
-- retrying rows have entries.
-- Never edit an applied migration; add a new one.

CREATE INDEX runnerq_activities_due_type_idx
    ON runnerq_activities (queue_name, activity_type, ready_at)
    WHERE status IN ('scheduled', 'retrying');

CREATE INDEX runnerq_activities_due_idx
    ON runnerq_activities (queue_name, ready_at)
    WHERE status IN ('scheduled', 'retrying');
