-- runnerq-fast SQLite schema, migration 0009: status tests as OR chains (issue 17).
--
-- The status CHECK of 0001 and the partial indexes of 0001, 0003 and 0006
-- were written `status IN ('pending', 'scheduled', 'retrying')` and the like.
-- SQLite evaluates a CHECK, and the predicate of each partial index on the
-- old and the new row, for every UPDATE that sets status (each claim and
-- each ack), and an IN list of three or more constants there is coded as a
-- temporary b-tree built anew for each row (inside constraint checks and
-- index maintenance there is no once-per-statement shortcut): EXPLAIN of the
-- ack showed eight such b-trees per acknowledged row, of the claim six per
-- claimed row. The same tests written as ORs of equalities are plain
-- comparisons; together they were a third of the CPU time of a claim and
-- its ack (tests/integration/test_sqlite_backend.py checks that none is
-- left).
--
-- SQLite cannot change a CHECK in place, so the table is rebuilt (the
-- procedure of https://www.sqlite.org/lang_altertable.html#otheralter, in the
-- one transaction apply_migrations runs every migration in): the same
-- columns in the same order, with the same declared types and defaults, the
-- same rows with the same seq (the rowid), then the same indexes, the partial
-- ones with their predicate spelt as ORs. This reads and writes every
-- activity once: on a large file the first open after the upgrade takes
-- that long, under the write lock. A query uses a partial index only if its
-- WHERE implies the index's predicate, which SQLite proves by matching the
-- expression, so the queries that use these indexes (queries.sql: claim,
-- claim_suspect, suspects_ready, ready_head, ready_by_type, prune_pick) spell
-- the status test the same way, in the same order. Two-value lists (0007's
-- due indexes) are coded as comparisons by SQLite already; they are
-- recreated as they were.
-- Never edit an applied migration; add a new one.

CREATE TABLE runnerq_activities_0009 (
    seq              INTEGER PRIMARY KEY,
    id               TEXT    NOT NULL UNIQUE,
    queue_name       TEXT    NOT NULL,
    activity_type    TEXT    NOT NULL,
    status           TEXT    NOT NULL CHECK (
        status = 'pending' OR status = 'scheduled' OR status = 'processing' OR status = 'retrying'
        OR status = 'completed' OR status = 'failed' OR status = 'dead_letter' OR status = 'cancelled'),
    priority         INTEGER NOT NULL,
    retry_count      INTEGER NOT NULL DEFAULT 0,
    max_retries      INTEGER NOT NULL,
    timeout_ms       INTEGER NOT NULL,
    payload          TEXT    NOT NULL,
    metadata         TEXT    NOT NULL,
    created_at       INTEGER NOT NULL,
    ready_at         INTEGER NOT NULL,
    started_at       INTEGER,
    finished_at      INTEGER,
    lease_expires_at INTEGER,
    claim_token      TEXT,
    worker_id        TEXT,
    last_error       TEXT,
    result           TEXT,
    idempotency_key  TEXT,
    dead_lettered_at INTEGER,
    parent_id        TEXT,
    cancel_requested_at INTEGER,
    suspect          INTEGER NOT NULL DEFAULT 0
);

INSERT INTO runnerq_activities_0009 (
    seq, id, queue_name, activity_type, status, priority, retry_count, max_retries, timeout_ms, payload,
    metadata, created_at, ready_at, started_at, finished_at, lease_expires_at, claim_token, worker_id,
    last_error, result, idempotency_key, dead_lettered_at, parent_id, cancel_requested_at, suspect)
SELECT seq, id, queue_name, activity_type, status, priority, retry_count, max_retries, timeout_ms, payload,
       metadata, created_at, ready_at, started_at, finished_at, lease_expires_at, claim_token, worker_id,
       last_error, result, idempotency_key, dead_lettered_at, parent_id, cancel_requested_at, suspect
FROM runnerq_activities;

DROP TABLE runnerq_activities;

ALTER TABLE runnerq_activities_0009 RENAME TO runnerq_activities;

-- 0001
CREATE INDEX runnerq_activities_dequeue_idx
    ON runnerq_activities (queue_name, priority DESC, retry_count DESC, ready_at, seq)
    WHERE (status = 'pending' OR status = 'scheduled' OR status = 'retrying');

CREATE INDEX runnerq_activities_lease_idx
    ON runnerq_activities (queue_name, lease_expires_at)
    WHERE status = 'processing';

CREATE INDEX runnerq_activities_dead_idx
    ON runnerq_activities (queue_name, dead_lettered_at)
    WHERE status = 'dead_letter';

-- 0002
CREATE INDEX runnerq_activities_status_created_idx
    ON runnerq_activities (queue_name, status, created_at, id);

CREATE INDEX runnerq_activities_type_created_idx
    ON runnerq_activities (queue_name, activity_type, status, created_at, id);

CREATE INDEX runnerq_activities_parent_idx
    ON runnerq_activities (parent_id, created_at, id)
    WHERE parent_id IS NOT NULL;

-- 0003
CREATE INDEX runnerq_activities_finished_idx
    ON runnerq_activities (queue_name, status, finished_at)
    WHERE (status = 'completed' OR status = 'failed' OR status = 'dead_letter' OR status = 'cancelled');

-- 0006
CREATE INDEX runnerq_activities_suspect_idx
    ON runnerq_activities (queue_name, priority DESC, retry_count DESC, ready_at, seq)
    WHERE suspect = 1 AND (status = 'pending' OR status = 'scheduled' OR status = 'retrying');

-- 0007
CREATE INDEX runnerq_activities_due_type_idx
    ON runnerq_activities (queue_name, activity_type, ready_at)
    WHERE status IN ('scheduled', 'retrying');

CREATE INDEX runnerq_activities_due_idx
    ON runnerq_activities (queue_name, ready_at)
    WHERE status IN ('scheduled', 'retrying');
