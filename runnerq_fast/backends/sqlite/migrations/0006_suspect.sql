-- runnerq-fast SQLite schema, migration 0006: suspect activities (issue 11, item 12).
--
-- * suspect: 1 when the activity's lease expired while it was claimed beside
--   others (an ordinary claim), so the reaper did not count the attempt: it
--   may have merely shared a worker that another activity killed. A suspect
--   is claimed only alone (queries.sql, claim_suspect) and an expiry then
--   counts; an accepted ack clears it (0).
-- * suspect_idx: the ready suspects of a queue in claim order (few rows).
-- Never edit an applied migration; add a new numbered one.

ALTER TABLE runnerq_activities ADD COLUMN suspect INTEGER NOT NULL DEFAULT 0;

CREATE INDEX runnerq_activities_suspect_idx
    ON runnerq_activities (queue_name, priority DESC, retry_count DESC, ready_at, seq)
    WHERE suspect = 1 AND status IN ('pending', 'scheduled', 'retrying');
