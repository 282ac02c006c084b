-- runnerq-fast SQLite schema, migration 0011: held leases are found through processing_idx (issue 17).
--
-- lease_idx (migration 0001: queue, lease expiry, of processing rows only)
-- and processing_idx (0010: queue, type, status, created, id, of the same
-- rows) both held an entry for every held activity: a claim inserted one in
-- each and an ack deleted one from each, two of the b-tree writes of a
-- drained activity (4 % of its instructions on the SQLite thread). lease_idx
-- is dropped and processing_idx gets the lease expiry as its last column, so
-- the reaper's statement (queries.sql: expired) reads the queue's
-- processing entries from that index alone, tests the lease on each and reads
-- the table only for the expired ones, which it sorts by expiry. That is one
-- index entry per activity the queue's workers hold, per reaper pass (every
-- reaper_interval, 5 s by default), instead of one probe; listings, counts
-- and stats read processing_idx as before (its first five columns are the
-- same). A lease renewal (extend_lease) moves the row's entry in
-- processing_idx where it moved its lease_idx entry.
-- Dropping and creating indexes reads the table once, under the write lock
-- apply_migrations holds (which also gathers ANALYZE statistics again if the
-- file has some).
-- Never edit an applied migration; add a new one.

DROP INDEX runnerq_activities_lease_idx;

DROP INDEX runnerq_activities_processing_idx;

CREATE INDEX runnerq_activities_processing_idx
    ON runnerq_activities (queue_name, activity_type, status, created_at, id, lease_expires_at)
    WHERE status = 'processing';
