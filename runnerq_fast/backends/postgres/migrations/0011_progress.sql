-- runnerq-fast PostgreSQL schema, migration 0011: progress reported by a running handler (issue 27, item 6).
--
-- * progress: the last value a handler reported with ctx.set_progress, as
--   JSON text (a fraction from 0 to 1, or an object); NULL until one does.
--   Written under the claim (queries.sql: set_progress), at most a few times
--   a second per running activity (the engine coalesces), never by a claim or
--   an ack: the drain's statements do not name it. Kept after the attempt,
--   and across a retry until the next attempt reports its own.
-- ADD COLUMN without a default changes only the catalog: no row is rewritten.
-- Never edit an applied migration; add a new numbered one.

ALTER TABLE runnerq_activities ADD COLUMN IF NOT EXISTS progress text;
