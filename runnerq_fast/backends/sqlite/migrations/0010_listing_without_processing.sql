-- runnerq-fast SQLite schema, migration 0010: the listing indexes leave out processing rows (issue 17).
--
-- status_created_idx and type_created_idx (migration 0002) held an entry
-- for every activity, keyed by its status: every claim (pending ->
-- processing) and every ack (processing -> completed, ...) deleted one entry
-- of each and inserted another, four of the b-tree writes a claimed and
-- acknowledged activity costs, and with the id lookups the largest part of
-- the SQLite thread's work in a drain. A processing row is transient (it is
-- held by a running worker), so these two indexes now leave it out
-- (`WHERE status <> 'processing'`): a claim only deletes, an ack only inserts.
-- The processing rows of a queue are listed and counted from one small index
-- of their own, processing_idx, with the columns of type_created_idx: one
-- range per type in the same (created_at, id) order as every other listing
-- range (a listing of every type merges the ranges of the types that have
-- processing rows, found by one probe per type), and covering for the counts.
-- A query uses a partial index only if its WHERE spells the predicate, so the
-- statements on these indexes (queries.sql: scan_status_*, scan_type_*,
-- count_status, count_type, stats, counts_by_type, queue_names) say
-- `status <> 'processing'`, and the processing ones `status = 'processing'`.
-- Dropping and creating indexes reads the table once, under the write lock
-- apply_migrations holds (which also gathers ANALYZE statistics again if the
-- file has some: those of the dropped indexes are gone).
-- Never edit an applied migration; add a new one.

DROP INDEX runnerq_activities_status_created_idx;

DROP INDEX runnerq_activities_type_created_idx;

CREATE INDEX runnerq_activities_status_created_idx
    ON runnerq_activities (queue_name, status, created_at, id)
    WHERE status <> 'processing';

CREATE INDEX runnerq_activities_type_created_idx
    ON runnerq_activities (queue_name, activity_type, status, created_at, id)
    WHERE status <> 'processing';

CREATE INDEX runnerq_activities_processing_idx
    ON runnerq_activities (queue_name, activity_type, status, created_at, id)
    WHERE status = 'processing';

