-- runnerq-fast SQLite queries.
--
-- Loaded once by runnerq_fast.backends.sqlfiles.load_queries(); each block
-- starts with a "-- name: <identifier>" line, and comment lines right after it
-- document the block. Parameters are numbered (?1, ?2, ...) and bound from
-- tuples, so executemany() runs a batch through one prepared statement.
--
-- Conventions:
--   * every time is INTEGER epoch milliseconds, computed by the caller (all
--     processes sharing a file share the machine's clock);
--   * every write runs inside one BEGIN IMMEDIATE transaction per backend
--     call (one claim, one ack flush, one enqueue batch), which also writes
--     the events of that call, so a call is atomic and processes never
--     interleave inside one;
--   * a list parameter (activity types, ids) is one JSON array read with
--     json_each(), so no statement text is ever built from values;
--   * ack outcomes: 1 completed, 2 retry, 3 failed, 4 dead letter,
--     5 cancelled (runnerq_fast.models.AckOutcome);
--   * listings: the scan_* blocks walk one index range each in
--     (created_at, id) order, returning the same key columns (id, created_at,
--     status, priority, metadata, activity_type, parent_id); the backend
--     merges the ranges of a filter and reads whole rows only for the page.
--     Bounds are always bound (no "?n IS NULL OR ..."), so each block keeps
--     one plan: no cursor is (created_at <= 2^62, id < '') going down and
--     (created_at >= -1, id > '') going up.

-- name: create_migrations_table
CREATE TABLE IF NOT EXISTS runnerq_migrations (
    version    INTEGER PRIMARY KEY,
    name       TEXT    NOT NULL,
    applied_at INTEGER NOT NULL
);

-- name: applied_migrations
SELECT version FROM runnerq_migrations ORDER BY version;

-- name: record_migration
INSERT INTO runnerq_migrations (version, name, applied_at) VALUES (?1, ?2, ?3);

-- name: has_schema
-- One row when the activities table exists (read-only opens check this).
SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'runnerq_activities';

-- name: has_statistics
-- One row when ANALYZE has been run on the file (apply_migrations runs it again after a migration).
SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'sqlite_stat1';

-- name: insert_activity
-- ?1 id, ?2 queue, ?3 type, ?4 status, ?5 priority, ?6 max_retries,
-- ?7 timeout_ms, ?8 payload, ?9 metadata, ?10 created_at, ?11 ready_at,
-- ?12 idempotency key, ?13 parent id.
INSERT INTO runnerq_activities (id, queue_name, activity_type, status, priority, max_retries, timeout_ms,
                                payload, metadata, created_at, ready_at, idempotency_key, parent_id)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13);

-- name: insert_event
-- ?1 activity id, ?2 queue, ?3 event type, ?4 at (ms), ?5 detail.
INSERT INTO runnerq_events (activity_id, queue_name, event_type, at, detail) VALUES (?1, ?2, ?3, ?4, ?5);

-- name: insert_event_traceback
-- ?1 activity id, ?2 queue, ?3 event type, ?4 at (ms), ?5 detail, ?6 the
-- failed attempt's traceback (migration 0015): a failure event of an ack.
INSERT INTO runnerq_events (activity_id, queue_name, event_type, at, detail, traceback)
VALUES (?1, ?2, ?3, ?4, ?5, ?6);

-- name: insert_events
-- ?1 activity ids as a JSON array, ?2 queue, ?3 event type, ?4 at (ms), ?5 detail: one
-- event per id, in the array's order (so ids are assigned in that order). One statement
-- for a claim's or an ack flush's events, which share all but the activity: half the
-- cost of one insert_event per row through executemany.
INSERT INTO runnerq_events (activity_id, queue_name, event_type, at, detail)
SELECT value, ?2, ?3, ?4, ?5 FROM json_each(?1);

-- name: idempotency_get
-- The key's holder and expiry, if the key is known.
SELECT activity_id, expires_at FROM runnerq_idempotency
WHERE queue_name = ?1 AND activity_type = ?2 AND key = ?3;

-- name: idempotency_put
-- ?1 queue, ?2 type, ?3 key, ?4 new holder, ?5 expiry (ms).
INSERT INTO runnerq_idempotency (queue_name, activity_type, key, activity_id, expires_at)
VALUES (?1, ?2, ?3, ?4, ?5)
ON CONFLICT (queue_name, activity_type, key) DO UPDATE
SET activity_id = excluded.activity_id, expires_at = excluded.expires_at;

-- name: activity_status
SELECT status FROM runnerq_activities WHERE id = ?1;

-- name: claim
-- ?1 queue, ?2 now (ms), ?3 activity types as a JSON array (NULL: any), ?4
-- limit: the rows a claim takes, in SPEC order (it walks
-- runnerq_activities_dequeue_idx), with what the worker needs; claim_set then
-- marks them held, in the same transaction. Suspects (migration 0006) are left
-- to claim_suspect. A SELECT and an UPDATE by seq instead of one UPDATE ...
-- RETURNING: RETURNING keeps its rows in a temporary table and the IN
-- (subquery) builds another, both per row (about 7 % of a drained activity's
-- instructions on the SQLite thread), and the rows come back sorted.
SELECT id, activity_type, payload, priority, retry_count, max_retries, timeout_ms, metadata,
       created_at, ready_at, seq
FROM runnerq_activities
WHERE queue_name = ?1
  AND (status = 'pending' OR status = 'scheduled' OR status = 'retrying')
  AND (ready_at <= ?2 OR ready_at >= '')  -- a TEXT or BLOB ready_at (a corrupt row) sorts after every number
  AND (?3 IS NULL OR activity_type IN (SELECT value FROM json_each(?3)))
  AND suspect = 0
ORDER BY priority DESC, retry_count DESC, ready_at, seq
LIMIT ?4;

-- name: claim_suspect
-- The parameters and rows of claim (?4 is 1), over the suspects only
-- (runnerq_activities_suspect_idx): the engine runs what it returns alone.
SELECT id, activity_type, payload, priority, retry_count, max_retries, timeout_ms, metadata,
       created_at, ready_at, seq
FROM runnerq_activities
WHERE queue_name = ?1
  AND suspect = 1 AND (status = 'pending' OR status = 'scheduled' OR status = 'retrying')
  AND ready_at <= ?2
  AND (?3 IS NULL OR activity_type IN (SELECT value FROM json_each(?3)))
ORDER BY priority DESC, retry_count DESC, ready_at, seq
LIMIT ?4;

-- name: claim_set
-- ?1 claim token, ?2 worker id, ?3 now (ms), ?4 lease expiry (ms), ?5 the seq
-- of each row claim or claim_suspect just returned, as a JSON array: they
-- become held by this claim (run in the transaction of that read, under the
-- write lock, so they are still the rows it read).
UPDATE runnerq_activities
SET status = 'processing', claim_token = ?1, worker_id = ?2, started_at = ?3, lease_expires_at = ?4
WHERE seq IN (SELECT value FROM json_each(?5));

-- name: suspects_ready
-- ?1 queue, ?2 now (ms), ?3 activity types as a JSON array (NULL: any): how
-- many suspects claim_suspect could take.
SELECT count(*) FROM runnerq_activities
WHERE queue_name = ?1 AND suspect = 1 AND (status = 'pending' OR status = 'scheduled' OR status = 'retrying') AND ready_at <= ?2
  AND (?3 IS NULL OR activity_type IN (SELECT value FROM json_each(?3)));

-- name: next_due
-- ?1 queue, ?2 activity types as a JSON array: the ready time (ms) of the
-- earliest scheduled or retrying activity of one of those types (NULL: none).
-- An idle fetcher reads it once per wait, so it wakes at that time however
-- long its poll interval: one probe of runnerq_activities_due_type_idx per type.
SELECT min((SELECT min(a.ready_at) FROM runnerq_activities a
            WHERE a.queue_name = ?1 AND a.activity_type = t.value AND a.status IN ('scheduled', 'retrying')))
FROM json_each(?2) t;

-- name: next_due_any
-- next_due for a fetcher of every type: one probe of runnerq_activities_due_idx.
SELECT min(ready_at) FROM runnerq_activities
WHERE queue_name = ?1 AND status IN ('scheduled', 'retrying');

-- name: held
-- ?1 ids as a JSON array: the ones currently processing, with their claim token
-- and whether an operator asked to cancel them.
SELECT id, claim_token, cancel_requested_at IS NOT NULL FROM runnerq_activities
WHERE id IN (SELECT value FROM json_each(?1)) AND status = 'processing';

-- name: ack
-- ?1 outcome, ?2 result JSON, ?3 error, ?4 retry time (ms), ?5 now (ms),
-- ?6 id, ?7 claim token, ?8 traceback (NULL where the handler did not raise:
-- the row keeps its last one). Guarded by the claim like every ack.
UPDATE runnerq_activities
SET status = CASE ?1 WHEN 1 THEN 'completed' WHEN 2 THEN 'retrying' WHEN 3 THEN 'failed' WHEN 5 THEN 'cancelled'
                     ELSE 'dead_letter' END,
    retry_count = CASE WHEN ?1 = 2 THEN retry_count + 1 ELSE retry_count END,
    ready_at = CASE WHEN ?1 = 2 THEN max(?4, ?5) ELSE ready_at END,
    finished_at = CASE WHEN ?1 = 2 THEN finished_at ELSE ?5 END,
    dead_lettered_at = CASE WHEN ?1 = 4 THEN ?5 ELSE dead_lettered_at END,
    last_error = CASE WHEN ?1 = 2 OR ?3 IS NOT NULL THEN ?3 ELSE last_error END,
    result = CASE WHEN ?1 = 1 THEN ?2 END,
    traceback = coalesce(?8, traceback),
    claim_token = NULL,
    lease_expires_at = NULL,
    cancel_requested_at = NULL,
    suspect = 0
WHERE id = ?6 AND status = 'processing' AND claim_token = ?7;

-- name: ack_completed
-- ?1 a JSON object {claim token || id: result JSON text or null} of plain
-- completions (outcome 1, no error; ids distinct, tokens of 32 characters),
-- ?2 now (ms): the ack statement's changes for all of them in one statement,
-- guarded the same way. One statement per flush instead of one execution per
-- row: half the work of a completion's ack. It returns nothing: the caller
-- compares its count of changed rows with the number of acks and, when some
-- were stale, undoes it (a savepoint) and runs ack_completed_ids instead
-- (RETURNING keeps its rows in a temporary table, about 6 % of a drained
-- activity's instructions on the SQLite thread when every flush used it).
UPDATE runnerq_activities
SET status = 'completed', finished_at = ?2, result = j.value, claim_token = NULL, lease_expires_at = NULL,
    cancel_requested_at = NULL, suspect = 0
FROM json_each(?1) AS j
WHERE runnerq_activities.id = substr(j.key, 33) AND runnerq_activities.status = 'processing'
  AND runnerq_activities.claim_token = substr(j.key, 1, 32);

-- name: ack_completed_ids
-- ack_completed returning the ids it applied to (a flush with stale acks).
UPDATE runnerq_activities
SET status = 'completed', finished_at = ?2, result = j.value, claim_token = NULL, lease_expires_at = NULL,
    cancel_requested_at = NULL, suspect = 0
FROM json_each(?1) AS j
WHERE runnerq_activities.id = substr(j.key, 33) AND runnerq_activities.status = 'processing'
  AND runnerq_activities.claim_token = substr(j.key, 1, 32)
RETURNING id;

-- name: extend_lease
-- ?1 new expiry (ms), ?2 id, ?3 claim token.
UPDATE runnerq_activities SET lease_expires_at = ?1
WHERE id = ?2 AND status = 'processing' AND claim_token = ?3;

-- name: set_progress
-- ?1 progress (JSON text), ?2 id, ?3 claim token: written only under the claim.
UPDATE runnerq_activities SET progress = ?1
WHERE id = ?2 AND status = 'processing' AND claim_token = ?3;

-- name: release
-- ?1 id, ?2 claim token: back to pending without counting an attempt.
UPDATE runnerq_activities SET status = 'pending', claim_token = NULL, lease_expires_at = NULL
WHERE id = ?1 AND status = 'processing' AND claim_token = ?2;

-- name: expired
-- ?1 queue, ?2 now (ms), ?3 limit: held activities whose lease has run out, and those whose lease
-- is TEXT or a BLOB (a corrupt row: such values sort after every number), in lease order; the other
-- columns are returned for the caller to check (runnerq_fast/backends/rowcheck.py).
-- The queue's entries of runnerq_activities_processing_idx, which ends with the lease (migration
-- 0011): the lease is tested on the index entry, and only expired rows are read.
SELECT id, retry_count, max_retries, cancel_requested_at IS NOT NULL,
       priority, timeout_ms, created_at, ready_at, lease_expires_at, suspect
FROM runnerq_activities
WHERE queue_name = ?1 AND status = 'processing' AND (lease_expires_at <= ?2 OR lease_expires_at >= '')
ORDER BY lease_expires_at
LIMIT ?3;

-- name: dead_letter_corrupt
-- ?1 id, ?2 reason, ?3 now (ms): a row that cannot be decoded, read by a claim or the reaper, is
-- dead-lettered alone with the reason (its attempts are not counted: they are unreadable).
UPDATE runnerq_activities
SET status = 'dead_letter', last_error = ?2, finished_at = ?3, dead_lettered_at = ?3,
    claim_token = NULL, lease_expires_at = NULL
WHERE id = ?1;

-- name: reap_requeue
-- ?1 id, ?2 the last error of an expiry not counted
-- (runnerq_fast.models.LEASE_EXPIRED_UNCHARGED): back to pending, and suspect from now on. The expired lease counts
-- as an attempt only if it already was a suspect (claimed alone); otherwise
-- it may have shared a worker another activity killed, and is not counted.
UPDATE runnerq_activities
SET retry_count = retry_count + suspect, status = 'pending',
    last_error = CASE WHEN suspect = 1 THEN 'lease expired'
                      ELSE ?2 END,
    claim_token = NULL, lease_expires_at = NULL, suspect = 1
WHERE id = ?1 AND status = 'processing';

-- name: reap_dead
-- ?1 id, ?2 now (ms): an expired lease of a suspect with retries exhausted. Its retry_count
-- stays (retries taken, max_retries by now), as a handler's last failure leaves it.
UPDATE runnerq_activities
SET status = 'dead_letter', last_error = 'lease expired; retries exhausted',
    finished_at = ?2, dead_lettered_at = ?2, claim_token = NULL, lease_expires_at = NULL
WHERE id = ?1 AND status = 'processing';

-- name: cancel_held
-- ?1 id, ?2 now (ms): a processing activity an operator asked to cancel ends
-- cancelled (on a release or an expired lease).
UPDATE runnerq_activities
SET status = 'cancelled', finished_at = ?2, claim_token = NULL, lease_expires_at = NULL, cancel_requested_at = NULL
WHERE id = ?1 AND status = 'processing';

-- name: cancel
-- ?1 id, ?2 now (ms). Only work that has not started can be cancelled.
UPDATE runnerq_activities
SET status = 'cancelled', finished_at = ?2, claim_token = NULL, lease_expires_at = NULL
WHERE id = ?1 AND status IN ('pending', 'scheduled', 'retrying')
RETURNING queue_name;

-- name: get_result
-- A result is the terminal state of the activity row: completed keeps the
-- handler's return value, failed and dead_letter the last error and traceback.
SELECT id, status, result, CASE WHEN status IN ('failed', 'dead_letter') THEN last_error END,
       CASE WHEN status IN ('failed', 'dead_letter') THEN traceback END
FROM runnerq_activities
WHERE id = ?1 AND status IN ('completed', 'failed', 'dead_letter', 'cancelled');

-- name: get_results
-- The results among ?1 ids (a JSON array: the ids awaited in this process).
SELECT id, status, result, CASE WHEN status IN ('failed', 'dead_letter') THEN last_error END,
       CASE WHEN status IN ('failed', 'dead_letter') THEN traceback END
FROM runnerq_activities
WHERE id IN (SELECT value FROM json_each(?1)) AND status IN ('completed', 'failed', 'dead_letter', 'cancelled');

-- name: stats
-- ?1 queue: counts by status from the queue's entries of
-- runnerq_activities_status_created_idx, and of runnerq_activities_processing_idx
-- for the processing rows it leaves out (migration 0010): covering indexes, no
-- table row is read, and no entry of another queue.
SELECT status, count(*) FROM runnerq_activities WHERE queue_name = ?1 AND status <> 'processing' GROUP BY status
UNION ALL
SELECT 'processing', count(*) FROM runnerq_activities WHERE queue_name = ?1 AND status = 'processing';

-- name: list_activities
-- ?1 queue, ?2 status (NULL: any), ?3 offset, ?4 limit; newest first.
SELECT id, queue_name, activity_type, status, priority, payload, metadata, retry_count, max_retries, timeout_ms,
       created_at, ready_at, started_at, finished_at,
       CASE WHEN status = 'processing' THEN lease_expires_at END, last_error, idempotency_key, parent_id
FROM runnerq_activities
WHERE queue_name = ?1 AND (?2 IS NULL OR status = ?2)
ORDER BY seq DESC
LIMIT ?4 OFFSET ?3;

-- name: get_activity
-- The snapshot's columns, then the traceback (migration 0012) and the progress (0013).
SELECT id, queue_name, activity_type, status, priority, payload, metadata, retry_count, max_retries, timeout_ms,
       created_at, ready_at, started_at, finished_at,
       CASE WHEN status = 'processing' THEN lease_expires_at END, last_error, idempotency_key, parent_id, traceback, progress
FROM runnerq_activities
WHERE id = ?1;

-- name: get_activity_before_0013
-- get_activity on a file not migrated to 0012 and 0013 yet (a read-only look: inspect, serve
-- --read-only; no traceback or progress column): the snapshot's columns only.
SELECT id, queue_name, activity_type, status, priority, payload, metadata, retry_count, max_retries, timeout_ms,
       created_at, ready_at, started_at, finished_at,
       CASE WHEN status = 'processing' THEN lease_expires_at END, last_error, idempotency_key, parent_id
FROM runnerq_activities
WHERE id = ?1;

-- name: list_dead_letter
-- ?1 queue, ?2 offset, ?3 limit; most recently dead-lettered first.
SELECT id, queue_name, activity_type, status, priority, payload, metadata, retry_count, max_retries, timeout_ms,
       created_at, ready_at, started_at, finished_at, NULL, last_error, idempotency_key, parent_id, dead_lettered_at
FROM runnerq_activities
WHERE queue_name = ?1 AND status = 'dead_letter'
ORDER BY dead_lettered_at DESC, seq DESC
LIMIT ?3 OFFSET ?2;

-- name: get_events
-- The activity's events, oldest first, with a failed attempt's traceback
-- (migration 0015). A deleted activity keeps only its "deleted" row, for the
-- live stream; its timeline is empty.
SELECT id, activity_id, queue_name, event_type, at, detail, traceback FROM runnerq_events
WHERE activity_id = ?1 AND event_type <> 'deleted'
ORDER BY id;

-- name: get_events_before_0015
-- get_events on a file not migrated to 0015 yet (opened read-only, so never
-- migrated): no tracebacks.
SELECT id, activity_id, queue_name, event_type, at, detail FROM runnerq_events
WHERE activity_id = ?1 AND event_type <> 'deleted'
ORDER BY id;

-- name: events_after
-- ?1 queue, ?2 last event id seen, ?3 limit: the next page of the live stream.
-- One writer at a time means ids are assigned in commit order, so nothing can
-- later appear behind ?2.
SELECT id, activity_id, queue_name, event_type, at, detail FROM runnerq_events
WHERE id > ?2 AND queue_name = ?1
ORDER BY id
LIMIT ?3;

-- name: last_event_id
SELECT coalesce(max(id), 0) FROM runnerq_events;

-- name: scan_status_desc
-- ?1 queue, ?2 status (not processing: scan_processing_*), ?3 created at or
-- after, ?4 created before, ?5/?6 cursor (created_at, id): one range of
-- runnerq_activities_status_created_idx, newest first.
SELECT id, created_at, status, priority, metadata, activity_type, parent_id FROM runnerq_activities
WHERE queue_name = ?1 AND status = ?2 AND status <> 'processing' AND created_at >= ?3 AND created_at < ?4
  AND created_at <= ?5 AND (created_at < ?5 OR id < ?6)
ORDER BY created_at DESC, id DESC;

-- name: scan_status_asc
-- As scan_status_desc, oldest first.
SELECT id, created_at, status, priority, metadata, activity_type, parent_id FROM runnerq_activities
WHERE queue_name = ?1 AND status = ?2 AND status <> 'processing' AND created_at >= ?3 AND created_at < ?4
  AND created_at >= ?5 AND (created_at > ?5 OR id > ?6)
ORDER BY created_at, id;

-- name: scan_type_desc
-- As scan_status_desc for ?7 activity type: runnerq_activities_type_created_idx.
SELECT id, created_at, status, priority, metadata, activity_type, parent_id FROM runnerq_activities
WHERE queue_name = ?1 AND activity_type = ?7 AND status = ?2 AND status <> 'processing'
  AND created_at >= ?3 AND created_at < ?4
  AND created_at <= ?5 AND (created_at < ?5 OR id < ?6)
ORDER BY created_at DESC, id DESC;

-- name: scan_type_asc
-- As scan_type_desc, oldest first.
SELECT id, created_at, status, priority, metadata, activity_type, parent_id FROM runnerq_activities
WHERE queue_name = ?1 AND activity_type = ?7 AND status = ?2 AND status <> 'processing'
  AND created_at >= ?3 AND created_at < ?4
  AND created_at >= ?5 AND (created_at > ?5 OR id > ?6)
ORDER BY created_at, id;

-- name: processing_types
-- ?1 queue: the activity types that have processing rows, one probe of
-- runnerq_activities_processing_idx per type (a skip scan).
WITH RECURSIVE t(name) AS (
    SELECT min(activity_type) FROM runnerq_activities WHERE queue_name = ?1 AND status = 'processing'
    UNION ALL
    SELECT (SELECT min(activity_type) FROM runnerq_activities
            WHERE queue_name = ?1 AND status = 'processing' AND activity_type > t.name)
    FROM t WHERE t.name IS NOT NULL
)
SELECT name FROM t WHERE name IS NOT NULL;

-- name: scan_processing_desc
-- scan_type_desc for the processing rows (?2 is 'processing'), which the two
-- listing indexes leave out: one range of runnerq_activities_processing_idx,
-- in the same order. A listing of every type merges one per processing_types.
SELECT id, created_at, status, priority, metadata, activity_type, parent_id FROM runnerq_activities
WHERE queue_name = ?1 AND activity_type = ?7 AND status = 'processing' AND ?2 = 'processing'
  AND created_at >= ?3 AND created_at < ?4
  AND created_at <= ?5 AND (created_at < ?5 OR id < ?6)
ORDER BY created_at DESC, id DESC;

-- name: scan_processing_asc
-- As scan_processing_desc, oldest first.
SELECT id, created_at, status, priority, metadata, activity_type, parent_id FROM runnerq_activities
WHERE queue_name = ?1 AND activity_type = ?7 AND status = 'processing' AND ?2 = 'processing'
  AND created_at >= ?3 AND created_at < ?4
  AND created_at >= ?5 AND (created_at > ?5 OR id > ?6)
ORDER BY created_at, id;

-- name: scan_parent_desc
-- ?1 queue, ?2 parent id, ?3 .. ?6 as scan_status_desc: the children of one
-- activity (runnerq_activities_parent_idx), newest first.
SELECT id, created_at, status, priority, metadata, activity_type, parent_id FROM runnerq_activities
WHERE parent_id = ?2 AND queue_name = ?1 AND created_at >= ?3 AND created_at < ?4
  AND created_at <= ?5 AND (created_at < ?5 OR id < ?6)
ORDER BY created_at DESC, id DESC;

-- name: scan_parent_asc
-- As scan_parent_desc, oldest first.
SELECT id, created_at, status, priority, metadata, activity_type, parent_id FROM runnerq_activities
WHERE parent_id = ?2 AND queue_name = ?1 AND created_at >= ?3 AND created_at < ?4
  AND created_at >= ?5 AND (created_at > ?5 OR id > ?6)
ORDER BY created_at, id;

-- name: scan_ids
-- ?1 queue, ?2 ids as a JSON array: their key columns, in no order.
SELECT id, created_at, status, priority, metadata, activity_type, parent_id FROM runnerq_activities
WHERE id IN (SELECT value FROM json_each(?2)) AND queue_name = ?1;

-- name: snapshots_by_ids
-- ?1 ids as a JSON array: whole rows for a page.
SELECT id, queue_name, activity_type, status, priority, payload, metadata, retry_count, max_retries, timeout_ms,
       created_at, ready_at, started_at, finished_at,
       CASE WHEN status = 'processing' THEN lease_expires_at END, last_error, idempotency_key, parent_id
FROM runnerq_activities
WHERE id IN (SELECT value FROM json_each(?1));

-- name: queue_names
-- Every queue with an activity: a skip scan over the first column of
-- runnerq_activities_status_created_idx and of runnerq_activities_processing_idx
-- (one probe of each per queue).
WITH RECURSIVE q(name) AS (
    SELECT (SELECT min(n) FROM (SELECT min(queue_name) AS n FROM runnerq_activities WHERE status <> 'processing'
                                UNION ALL
                                SELECT min(queue_name) FROM runnerq_activities WHERE status = 'processing'))
    UNION ALL
    SELECT (SELECT min(n) FROM (SELECT min(queue_name) AS n FROM runnerq_activities
                                WHERE status <> 'processing' AND queue_name > q.name
                                UNION ALL
                                SELECT min(queue_name) FROM runnerq_activities
                                WHERE status = 'processing' AND queue_name > q.name))
    FROM q WHERE q.name IS NOT NULL
)
SELECT name FROM q WHERE name IS NOT NULL;

-- name: counts_by_type
-- ?1 queue: counts by type and status (reads the queue's entries of
-- runnerq_activities_type_created_idx, not the rows; and the processing rows,
-- which it leaves out, through runnerq_activities_processing_idx).
SELECT activity_type, status, count(*) FROM runnerq_activities
WHERE queue_name = ?1 AND status <> 'processing' GROUP BY activity_type, status
UNION ALL
SELECT activity_type, 'processing', count(*) FROM runnerq_activities
WHERE queue_name = ?1 AND status = 'processing' GROUP BY activity_type;

-- name: ready_head
-- ?1 queue, ?2 priority, ?3 retry count bound (exclusive): the oldest ready
-- time among ready rows of that priority with the largest retry count below
-- ?3 (one probe of runnerq_activities_dequeue_idx). Repeated per (priority,
-- retry count) group, it finds the oldest claimable activity without reading
-- the backlog.
SELECT retry_count, ready_at FROM runnerq_activities
WHERE queue_name = ?1 AND (status = 'pending' OR status = 'scheduled' OR status = 'retrying') AND priority = ?2 AND retry_count < ?3
ORDER BY priority DESC, retry_count DESC, ready_at, seq
LIMIT 1;

-- name: retry_one
-- ?1 id, ?2 now (ms): a failed, dead-lettered or cancelled activity back to
-- pending, ready now, its retries counted from 0 again (the errors stay in
-- its events).
UPDATE runnerq_activities
SET status = 'pending', retry_count = 0, ready_at = ?2, finished_at = NULL, dead_lettered_at = NULL, result = NULL,
    claim_token = NULL, lease_expires_at = NULL, cancel_requested_at = NULL
WHERE id = ?1 AND status IN ('failed', 'dead_letter', 'cancelled');

-- name: request_cancel
-- ?1 id, ?2 now (ms): ask the engine running it to cancel the handler.
UPDATE runnerq_activities SET cancel_requested_at = ?2
WHERE id = ?1 AND status = 'processing' AND cancel_requested_at IS NULL;

-- name: run_now_one
-- ?1 id, ?2 now (ms): a scheduled or retrying activity becomes ready now.
UPDATE runnerq_activities SET status = 'pending', ready_at = ?2
WHERE id = ?1 AND status IN ('scheduled', 'retrying');

-- name: set_priority_one
-- ?1 id, ?2 priority: only activities that have not started.
UPDATE runnerq_activities SET priority = ?2
WHERE id = ?1 AND status IN ('pending', 'scheduled', 'retrying') AND priority <> ?2;

-- name: delete_one
-- ?1 id: a finished activity. Returns what its idempotency key row needs.
DELETE FROM runnerq_activities
WHERE id = ?1 AND status IN ('completed', 'failed', 'dead_letter', 'cancelled')
RETURNING activity_type, idempotency_key;

-- name: delete_events
-- ?1 id: the activity's timeline.
DELETE FROM runnerq_events WHERE activity_id = ?1;

-- name: delete_key
-- ?1 queue, ?2 type, ?3 key, ?4 id: the idempotency key, if it still names this activity.
DELETE FROM runnerq_idempotency WHERE queue_name = ?1 AND activity_type = ?2 AND key = ?3 AND activity_id = ?4;

-- name: count_status
-- ?1 queue, ?2 status (not processing: count_processing), ?3 created at or
-- after, ?4 created before, ?5 most rows to count: how many (up to ?5) are in
-- one range of runnerq_activities_status_created_idx (read from the index alone).
SELECT count(*) FROM (
    SELECT 1 FROM runnerq_activities
    WHERE queue_name = ?1 AND status = ?2 AND status <> 'processing' AND created_at >= ?3 AND created_at < ?4
    LIMIT ?5
);

-- name: count_type
-- As count_status for ?6 activity type: one range of runnerq_activities_type_created_idx.
SELECT count(*) FROM (
    SELECT 1 FROM runnerq_activities
    WHERE queue_name = ?1 AND activity_type = ?6 AND status = ?2 AND status <> 'processing'
      AND created_at >= ?3 AND created_at < ?4
    LIMIT ?5
);

-- name: count_processing
-- count_status for the processing rows (?2 is 'processing'): the queue's
-- entries of runnerq_activities_processing_idx (read from the index alone; a
-- created range is tested on each, at most what the queue's workers hold).
SELECT count(*) FROM (
    SELECT 1 FROM runnerq_activities
    WHERE queue_name = ?1 AND status = 'processing' AND ?2 = 'processing' AND created_at >= ?3 AND created_at < ?4
    LIMIT ?5
);

-- name: count_processing_type
-- count_type for the processing rows: one range of runnerq_activities_processing_idx.
SELECT count(*) FROM (
    SELECT 1 FROM runnerq_activities
    WHERE queue_name = ?1 AND activity_type = ?6 AND status = 'processing' AND ?2 = 'processing'
      AND created_at >= ?3 AND created_at < ?4
    LIMIT ?5
);

-- name: prune_pick
-- ?1 queue, ?2 one finished status, ?3 finished before (ms), ?4 limit: ids
-- to prune, with what their idempotency key rows need. A range of
-- runnerq_activities_finished_idx (migration 0003): it reads only the rows it returns.
SELECT id, activity_type, idempotency_key FROM runnerq_activities
WHERE queue_name = ?1 AND status = ?2 AND (status = 'completed' OR status = 'failed' OR status = 'dead_letter' OR status = 'cancelled')
  AND finished_at < ?3
LIMIT ?4;

-- name: prune_events
-- ?1 queue, ?2 recorded before (ms), ?3 limit (runnerq_events_at_idx).
DELETE FROM runnerq_events
WHERE id IN (SELECT id FROM runnerq_events WHERE queue_name = ?1 AND at < ?2 LIMIT ?3);

-- name: hold
-- ?1 queue, ?2 purpose, ?3 holder, ?4 expiry (ms), ?5 now (ms): take the hold
-- if it is free or expired, renew it if ?3 holds it. One row when ?3 holds it now.
INSERT INTO runnerq_holds (queue_name, purpose, holder, expires_at) VALUES (?1, ?2, ?3, ?4)
ON CONFLICT (queue_name, purpose) DO UPDATE
SET holder = excluded.holder, expires_at = excluded.expires_at
WHERE runnerq_holds.holder = excluded.holder OR runnerq_holds.expires_at <= ?5
RETURNING 1;
-- name: register_worker
-- One engine's registry entry (its heartbeat): ?1 queue, ?2 worker id, ?3 host, ?4 pid,
-- ?5 types (JSON array), ?6 in flight, ?7 concurrency, ?8 started, ?9 last seen,
-- ?10 expiry (epoch ms).
INSERT INTO runnerq_workers (queue_name, worker_id, host, pid, activity_types, in_flight, concurrency,
                             started_at, last_seen, expires_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
ON CONFLICT (queue_name, worker_id) DO UPDATE SET
    host = excluded.host, pid = excluded.pid, activity_types = excluded.activity_types,
    in_flight = excluded.in_flight, concurrency = excluded.concurrency, started_at = excluded.started_at,
    last_seen = excluded.last_seen, expires_at = excluded.expires_at;

-- name: expire_workers
-- Drop the entries of engines that stopped heartbeating (?1 now, epoch ms).
DELETE FROM runnerq_workers WHERE expires_at <= ?1;

-- name: deregister_worker
DELETE FROM runnerq_workers WHERE queue_name = ?1 AND worker_id = ?2;

-- name: list_workers
-- Live entries (?1 now, epoch ms) of queue ?2, or of every queue when ?2 is NULL.
SELECT worker_id, queue_name, host, pid, activity_types, in_flight, concurrency, started_at, last_seen
FROM runnerq_workers
WHERE expires_at > ?1 AND (?2 IS NULL OR queue_name = ?2)
ORDER BY queue_name, worker_id;

-- name: ready_by_type
-- ?1 queue, ?2 now (epoch ms): per type, how many activities a worker could claim now and the
-- oldest ready time among them. Reads only rows in a ready status (pending, scheduled,
-- retrying: the backlog), never finished ones.
SELECT activity_type, count(*), min(ready_at) FROM runnerq_activities
WHERE queue_name = ?1 AND (status = 'pending' OR status = 'scheduled' OR status = 'retrying') AND ready_at <= ?2
GROUP BY activity_type;

-- name: set_type_defaults
-- Replace the enqueue defaults of one type: ?1 queue, ?2 type, ?3 max retries, ?4 timeout (ms),
-- ?5 priority (NULL: not set by the type), ?6 now (epoch ms).
INSERT INTO runnerq_type_defaults (queue_name, activity_type, max_retries, timeout_ms, priority, updated_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6)
ON CONFLICT (queue_name, activity_type) DO UPDATE SET
    max_retries = excluded.max_retries, timeout_ms = excluded.timeout_ms, priority = excluded.priority,
    updated_at = excluded.updated_at;

-- name: get_type_defaults
-- The enqueue defaults recorded for the types of queue ?1.
SELECT activity_type, max_retries, timeout_ms, priority FROM runnerq_type_defaults WHERE queue_name = ?1;
