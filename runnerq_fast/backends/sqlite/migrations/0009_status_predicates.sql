-- runnerq-fast SQLite schema, migration 0009: partial-index predicates as OR chains (issue 17).
--
-- The partial indexes of 0001, 0003 and 0006 were written
-- `WHERE status IN ('pending', 'scheduled', 'retrying')` and the like. SQLite
-- evaluates such a predicate for the old and the new row of every UPDATE
-- that sets status or a column of the index, and an IN list of three or more
-- constants there is coded as a temporary b-tree built for each row (no
-- once-per-statement shortcut inside index maintenance): five temporary
-- b-trees per claimed row and seven per acknowledged one (EXPLAIN of the
-- ack). The same predicates written as ORs of equalities are plain
-- comparisons: the ack statement costs about 40 % less, the claim about 30 %
-- (tests/integration/test_sqlite_backend.py checks that no index
-- maintenance builds one any more).
--
-- Same indexes, same columns, same rows; only the predicate's spelling
-- changes. A query uses a partial index only if its WHERE implies the
-- index's predicate, which SQLite proves by matching the expression, so the
-- queries that use these indexes (queries.sql: claim, claim_suspect,
-- suspects_ready, ready_head, ready_by_type, prune_pick) spell the status
-- test the same way, in the same order. The two-value lists of 0007's due
-- indexes are coded as comparisons already and stay as they are.
-- Never edit an applied migration; add a new one.

DROP INDEX runnerq_activities_dequeue_idx;

CREATE INDEX runnerq_activities_dequeue_idx
    ON runnerq_activities (queue_name, priority DESC, retry_count DESC, ready_at, seq)
    WHERE (status = 'pending' OR status = 'scheduled' OR status = 'retrying');

DROP INDEX runnerq_activities_suspect_idx;

CREATE INDEX runnerq_activities_suspect_idx
    ON runnerq_activities (queue_name, priority DESC, retry_count DESC, ready_at, seq)
    WHERE suspect = 1 AND (status = 'pending' OR status = 'scheduled' OR status = 'retrying');

DROP INDEX runnerq_activities_finished_idx;

CREATE INDEX runnerq_activities_finished_idx
    ON runnerq_activities (queue_name, status, finished_at)
    WHERE (status = 'completed' OR status = 'failed' OR status = 'dead_letter' OR status = 'cancelled');
