-- runnerq-fast PostgreSQL schema, migration 0008: fewer index entries per claim (issue 17).
--
-- No claim or ack is a HOT update (status is indexed), so each one inserts
-- an entry into every index whose predicate its new row version matches.
-- A claim wrote four (primary key, lease_idx, and the two listing indexes of
-- 0002); a drain's claims are the engine's critical path and the two listing
-- entries were about a quarter of a claim's server CPU (callgrind: 154k ->
-- 115k instructions per claimed activity).
--
-- * status_listing_idx / type_listing_idx replace status_created_idx /
--   type_created_idx with the same keys, without the transient processing
--   rows: a claim now writes the primary key and lease_idx entries only, and
--   so does a heartbeat (extend_leases). The listings (queries.sql, query_*,
--   count_*, pick_*) read the processing rows of a queue through lease_idx
--   (queue_name, lease_expires_at) WHERE status = 'processing' and sort them:
--   at most the activities in flight, never the finished rows.
-- * deduplicate_items = off on both: their keys end with the id, so no two
--   entries are ever equal and a deduplication pass (run whenever a leaf page
--   fills) can never free space; it only cost compares (5 % of an ack).
-- * queue_names reads the maintained counters (0003), not an index of
--   runnerq_activities (no full index on queue_name is left).
-- * runnerq_events.activity_ids STORAGE EXTERNAL: a batch row names up to
--   hundreds of uuids (16 bytes each, over the 2 kB TOAST threshold from
--   about 120 on), which do not compress: pglz tried on every claim, ack
--   and enqueue event row and gave up (4-5 % of each statement). EXTERNAL
--   moves them out of line uncompressed, as before, without the attempt.
--   Rows already stored are not rewritten.
--
-- CREATE INDEX here locks writes to runnerq_activities while it builds (the
-- migration runs in one transaction, so not CONCURRENTLY); on a large
-- existing table, build the two indexes CONCURRENTLY by hand first, with the
-- same names and definitions, and this migration then finds them (IF NOT
-- EXISTS); DROP INDEX of the old ones is quick.
-- Never edit an applied migration; add a new one.

CREATE INDEX IF NOT EXISTS runnerq_activities_status_listing_idx
    ON runnerq_activities (queue_name, status, created_at, id)
    WITH (deduplicate_items = off)
    WHERE status <> 'processing';

CREATE INDEX IF NOT EXISTS runnerq_activities_type_listing_idx
    ON runnerq_activities (queue_name, activity_type, status, created_at, id)
    WITH (deduplicate_items = off)
    WHERE status <> 'processing';

DROP INDEX IF EXISTS runnerq_activities_status_created_idx;
DROP INDEX IF EXISTS runnerq_activities_type_created_idx;

ALTER TABLE runnerq_events ALTER COLUMN activity_ids SET STORAGE EXTERNAL;
