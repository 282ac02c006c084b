-- runnerq-fast PostgreSQL schema, migration 0006: suspect activities (issue 11, item 12).
--
-- * suspect: the activity's lease expired while it was claimed beside others
--   (an ordinary claim), so the reaper did not count the attempt: it may have
--   merely shared a worker that another activity killed. A suspect is claimed
--   only alone (queries.sql, claim_suspect), and an expiry then counts; an
--   accepted ack clears it. ADD COLUMN with a constant default rewrites no rows.
-- * suspect_idx: the ready suspects of a queue in claim order; partial, so it
--   holds only the few suspect rows; ordinary claims and acks only check its predicate.
-- Never edit an applied migration; add a new numbered one.

ALTER TABLE runnerq_activities
    ADD COLUMN IF NOT EXISTS suspect boolean NOT NULL DEFAULT false;

CREATE INDEX IF NOT EXISTS runnerq_activities_suspect_idx
    ON runnerq_activities (queue_name, priority DESC, retry_count DESC, ready_at, id)
    WHERE suspect AND status IN ('pending', 'scheduled', 'retrying');
