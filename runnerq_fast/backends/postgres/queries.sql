-- runnerq-fast PostgreSQL queries.
--
-- Loaded once by runnerq_fast.backends.postgres.sql.load_queries(); each block
-- starts with a "-- name: <identifier>" line, and comment lines right after it
-- document the block. Parameters are positional ($1, ...) and always cast, so
-- asyncpg prepares every statement once per connection.
--
-- Conventions:
--   * times leave the database as epoch milliseconds:
--     floor(extract(epoch FROM x) * 1000)::bigint (numeric, exact);
--     they enter as timestamptz 'epoch' + ms * interval '1 millisecond';
--   * every statement that changes activities also writes its events (and
--     results for terminal states) in the same statement, so one round trip
--     is one transaction;
--   * notifications: channel runnerq_work (payload: queue name) means "work may
--     be ready"; channel runnerq_results (payload: queue name) means "some
--     activity ended". At most one of each per statement, never one per row.
--   * ack outcomes: 1 completed, 2 retry, 3 failed, 4 dead letter,
--     5 cancelled (runnerq_fast.models.AckOutcome). A retry of an activity
--     whose cancellation was requested (cancel_requested_at) ends it
--     cancelled instead, and so do a release and an expired lease;
--   * listings (query_*, count_*, pick_*) walk runnerq_activities_status_listing_idx
--     or runnerq_activities_type_listing_idx one range per status (and type)
--     through LATERAL joins, so each range is an ordered index scan that stops
--     at its LIMIT. Those indexes leave out the processing rows (migration
--     0008: a claim writes no entry in them), so each statement reads the
--     processing rows of the queue, when asked for, through lease_idx in a
--     UNION ALL branch and sorts them: at most the activities in flight.
--     Absent bounds are -infinity/infinity, never
--     "$n IS NULL OR ...", so every statement keeps one plan (generic or custom).
--     The bound on the side the scan starts from is ONE row comparison on
--     (created_at, id) that folds the cursor and the created range together
--     (least/greatest): with a second bound on that side the B-tree may start
--     from the looser one and read the whole range up to the tighter one.

-- name: lock_migrations
-- Serialises concurrent migrate() calls until the transaction ends.
-- The key is the ASCII of "runnerq" as a bigint.
SELECT pg_advisory_xact_lock(32199648856023665);

-- name: create_migrations_table
CREATE TABLE IF NOT EXISTS runnerq_migrations (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- name: applied_migrations
SELECT version FROM runnerq_migrations ORDER BY version;

-- name: record_migration
INSERT INTO runnerq_migrations (version, name) VALUES ($1::integer, $2::text);

-- name: enqueue
-- $1 queue, then one array per NewActivity field in item order: $2 ids (one
-- per item: they set the row count), $3 types, $4 payloads, $5 priorities,
-- $6 max retries, $7 timeouts (ms), $8 run-at times (epoch ms), $9 metadata,
-- $10 idempotency keys. An array of $3..$10 with ONE element gives that value
-- to every row (a batch's types, defaults and often payloads are all equal:
-- one element instead of 500 to encode, send and unnest); $10 and $12 may be
-- NULL: no item has a key / a parent (unnest pads them with NULLs). $11 whether
-- to send the rate-limited runnerq_work notification in this statement (for
-- any row: a delayed one makes waiting fetchers time their wait again, see
-- next_due). Returns one row: created count.
-- Cost per row (the statement runs on a generic plan after five executions):
-- clock is MATERIALIZED so now() in epoch ms is computed once, not once per
-- row in numeric; rows go in unnest order (no sort); the events are one
-- plain aggregate over ins (no hash grouping, no sort): one 'enqueued' row,
-- and a 'scheduled' row only when some item is delayed, taking the next
-- event id in that order so 'enqueued' comes first in a timeline.
WITH input AS (
    SELECT t.id,
           CASE WHEN cardinality($3::text[]) = 1 THEN ($3::text[])[1] ELSE t.activity_type END AS activity_type,
           CASE WHEN cardinality($4::text[]) = 1 THEN ($4::text[])[1] ELSE t.payload END AS payload,
           CASE WHEN cardinality($5::smallint[]) = 1 THEN ($5::smallint[])[1] ELSE t.priority END AS priority,
           CASE WHEN cardinality($6::integer[]) = 1 THEN ($6::integer[])[1] ELSE t.max_retries END AS max_retries,
           CASE WHEN cardinality($7::bigint[]) = 1 THEN ($7::bigint[])[1] ELSE t.timeout_ms END AS timeout_ms,
           CASE WHEN cardinality($8::bigint[]) = 1 THEN ($8::bigint[])[1] ELSE t.run_at_ms END AS run_at_ms,
           CASE WHEN cardinality($9::text[]) = 1 THEN ($9::text[])[1] ELSE t.metadata END AS metadata,
           CASE WHEN cardinality($10::text[]) = 1 THEN ($10::text[])[1] ELSE t.idempotency_key END
               AS idempotency_key,
           t.parent_id
    FROM unnest($2::uuid[], $3::text[], $4::text[], $5::smallint[], $6::integer[], $7::bigint[],
                $8::bigint[], $9::text[], $10::text[], $12::uuid[])
        AS t(id, activity_type, payload, priority, max_retries, timeout_ms, run_at_ms, metadata,
             idempotency_key, parent_id)
), clock AS MATERIALIZED (
    SELECT now() AS now, floor(extract(epoch FROM now()) * 1000)::bigint AS now_ms
), ins AS (
    INSERT INTO runnerq_activities (id, queue_name, activity_type, status, priority, max_retries, timeout_ms,
                                    payload, metadata, created_at, ready_at, idempotency_key, parent_id)
    SELECT i.id, $1::text, i.activity_type,
           CASE WHEN i.run_at_ms > c.now_ms THEN 'scheduled' ELSE 'pending' END,
           i.priority, i.max_retries, i.timeout_ms, i.payload, i.metadata, c.now,
           CASE WHEN i.run_at_ms > c.now_ms THEN timestamptz 'epoch' + i.run_at_ms * interval '1 millisecond'
                ELSE c.now END,
           i.idempotency_key, i.parent_id
    FROM clock c CROSS JOIN input i
    RETURNING id, status
), ev AS (
    INSERT INTO runnerq_events (queue_name, event_type, at, activity_ids)
    SELECT $1::text, e.event_type, now(), e.ids
    FROM (SELECT array_agg(id) AS enqueued,
                 array_agg(id) FILTER (WHERE status = 'scheduled') AS scheduled
          FROM ins) a
    CROSS JOIN LATERAL (VALUES ('enqueued', a.enqueued), ('scheduled', a.scheduled)) AS e(event_type, ids)
    WHERE e.ids IS NOT NULL
), notes AS (
    SELECT pg_notify('runnerq_work', $1::text)
    FROM (SELECT 1 FROM ins WHERE $11::boolean LIMIT 1) s
)
SELECT count(*) AS created, (SELECT count(*) FROM notes) AS notified FROM ins;

-- name: next_due
-- Seconds from now until the earliest scheduled or retrying activity of
-- queue $1 of one of the types $2 is due (negative: overdue; NULL: none).
-- An idle fetcher reads it once per wait, so it wakes at that time however
-- long its poll interval: one probe of runnerq_activities_due_type_idx per type.
SELECT extract(epoch FROM min(d.ready_at) - now())::float8
FROM unnest($2::text[]) AS t(activity_type)
CROSS JOIN LATERAL (
    SELECT a.ready_at
    FROM runnerq_activities a
    WHERE a.queue_name = $1::text AND a.activity_type = t.activity_type AND a.status IN ('scheduled', 'retrying')
    ORDER BY a.ready_at
    LIMIT 1
) d;

-- name: next_due_any
-- next_due for a fetcher of every type: one probe of runnerq_activities_due_idx.
SELECT extract(epoch FROM min(ready_at) - now())::float8
FROM runnerq_activities
WHERE queue_name = $1::text AND status IN ('scheduled', 'retrying');

-- name: notify_work
-- The trailing, rate-limited "work may be ready" notification.
SELECT pg_notify('runnerq_work', $1::text);

-- name: idempotency_claim
-- Takes (or locks) the key rows of a batch for this transaction, one row per
-- input element: $2 types, $3 keys (no (type, key) twice), $4 the new
-- activity ids, $5 TTLs (ms) of queue $1. A key goes to its new id when it is
-- absent, expired, or its id is in $6 (the items that ALLOW_REUSE);
-- otherwise it keeps its holder. Rows are inserted, so locked, in (type, key)
-- order: concurrent batches lock shared keys in the same order and cannot
-- deadlock. Returns (type, key, holder after the statement) per key: a
-- holder equal to the item's id means "create the activity".
INSERT INTO runnerq_idempotency AS k (queue_name, activity_type, key, activity_id, expires_at)
SELECT $1::text, t.activity_type, t.key, t.id, now() + t.ttl_ms * interval '1 millisecond'
FROM unnest($2::text[], $3::text[], $4::uuid[], $5::bigint[]) AS t(activity_type, key, id, ttl_ms)
ORDER BY t.activity_type, t.key
ON CONFLICT (queue_name, activity_type, key) DO UPDATE
SET activity_id = CASE WHEN k.expires_at <= now() OR excluded.activity_id = ANY($6::uuid[])
                       THEN excluded.activity_id ELSE k.activity_id END,
    expires_at = CASE WHEN k.expires_at <= now() OR excluded.activity_id = ANY($6::uuid[])
                      THEN excluded.expires_at ELSE k.expires_at END
RETURNING k.activity_type, k.key, k.activity_id;

-- name: idempotency_take_over
-- Run after idempotency_claim returned other holders ($4), while this
-- transaction holds those key rows' locks, so the statement's fresh snapshot
-- sees each holder's committed status. One element per key: $2 types, $3
-- keys, $4 holders, $5 new ids, $6 TTLs (ms), $7 whether the item
-- ALLOW_REUSE_ON_FAILURE. Moves a key to its new id when its holder no
-- longer exists, or when $7 and the holder ended failed, dead_letter or
-- cancelled. Returns the new ids that took their key.
WITH candidate AS (
    SELECT c.activity_type, c.key, c.holder, c.id, c.ttl_ms, c.on_failure, a.status AS holder_status
    FROM unnest($2::text[], $3::text[], $4::uuid[], $5::uuid[], $6::bigint[], $7::boolean[])
        AS c(activity_type, key, holder, id, ttl_ms, on_failure)
    LEFT JOIN runnerq_activities a ON a.id = c.holder
)
UPDATE runnerq_idempotency k
SET activity_id = c.id, expires_at = now() + c.ttl_ms * interval '1 millisecond'
FROM candidate c
WHERE k.queue_name = $1::text AND k.activity_type = c.activity_type AND k.key = c.key
  AND k.activity_id = c.holder
  AND (c.holder_status IS NULL
       OR (c.on_failure AND c.holder_status IN ('failed', 'dead_letter', 'cancelled')))
RETURNING c.id;

-- name: claim
-- $1 queue, $2 activity types (NULL: any), $3 limit, $4 claim token,
-- $5 worker id, $6 lease in milliseconds, $7 commit asynchronously (see
-- below). Rows come back in claim order.
-- The two times leave as timestamptz_send(): 8 bytes, big-endian
-- microseconds since 2000-01-01 UTC, which rows.claimed_from_rows turns into
-- epoch milliseconds (floor), the same figure as the numeric
-- floor(extract(epoch FROM x) * 1000) of the convention above at a fraction
-- of its cost (two numeric conversions per row were ~2 us of server CPU per
-- claimed activity, about a twentieth of a claim + ack).
-- "picked" walks runnerq_activities_dequeue_idx and locks what it takes; the
-- update then finds those rows by ctid (a TID scan: a row locked by this
-- transaction cannot move), so its cost does not grow with the table. The
-- ordering columns are not changed by the claim, so the final ORDER BY
-- restores claim order. Suspects (migration 0006) are left to claim_suspect.
-- $7 (PostgresBackend(async_claims=True), off by default): commit this claim
-- asynchronously (set_config('synchronous_commit', 'off', true): this
-- transaction only), without waiting for its WAL to reach the disk: a
-- quarter of a claim's time in a drain, and claims are the engine's critical
-- path. A server crash can then forget the claims of its last moments (at
-- most 3 x wal_writer_delay, 600 ms by default): such an activity is pending
-- again after recovery and may be claimed by another worker while its first
-- run still goes on (the first worker's heartbeat reports the lease lost and
-- its ack is rejected as stale) -- the one case where a lease does not
-- protect a running activity, hence opt-in. Nothing else is lost: an ack
-- flushes the WAL up to its own commit, so an acknowledged activity's claim
-- is always on disk; every other statement keeps the server's setting.
WITH picked AS MATERIALIZED (
    SELECT ctid AS row_ctid
    FROM runnerq_activities
    WHERE queue_name = $1::text
      AND status IN ('pending', 'scheduled', 'retrying')
      AND ready_at <= now()
      AND ($2::text[] IS NULL OR activity_type = ANY ($2::text[]))
      AND NOT suspect
    ORDER BY priority DESC, retry_count DESC, ready_at, id
    LIMIT $3::integer
    FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE runnerq_activities a
    SET status = 'processing', claim_token = $4::text, worker_id = $5::text, started_at = now(),
        lease_expires_at = now() + $6::bigint * interval '1 millisecond'
    WHERE a.ctid = ANY (ARRAY(SELECT row_ctid FROM picked))
    RETURNING a.id, a.activity_type, a.payload, a.priority, a.retry_count, a.max_retries, a.timeout_ms,
              a.metadata, a.created_at, a.ready_at
), ev AS (
    INSERT INTO runnerq_events (queue_name, event_type, at, activity_ids, detail)
    SELECT $1::text, 'claimed', now(), array_agg(id ORDER BY priority DESC, retry_count DESC, ready_at, id), $5::text
    FROM claimed
    HAVING count(*) > 0
), async_commit AS (
    SELECT set_config('synchronous_commit', 'off', true) WHERE $7::boolean
)
SELECT id, activity_type, payload, priority, retry_count, max_retries, timeout_ms, metadata,
       timestamptz_send(created_at) AS created_at_us, timestamptz_send(ready_at) AS ready_at_us
FROM claimed LEFT JOIN async_commit ON true
ORDER BY priority DESC, retry_count DESC, ready_at, id;

-- name: claim_suspect
-- The parameters ($3 is 1) and rows of claim, over the suspects only: "picked"
-- walks runnerq_activities_suspect_idx (a few rows), and the engine runs what
-- it returns alone, so an expiry of this claim counts (requeue_expired).
-- $7: commit asynchronously, as for claim.
WITH picked AS MATERIALIZED (
    SELECT ctid AS row_ctid
    FROM runnerq_activities
    WHERE queue_name = $1::text
      AND suspect AND status IN ('pending', 'scheduled', 'retrying')
      AND ready_at <= now()
      AND ($2::text[] IS NULL OR activity_type = ANY ($2::text[]))
    ORDER BY priority DESC, retry_count DESC, ready_at, id
    LIMIT $3::integer
    FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE runnerq_activities a
    SET status = 'processing', claim_token = $4::text, worker_id = $5::text, started_at = now(),
        lease_expires_at = now() + $6::bigint * interval '1 millisecond'
    WHERE a.ctid = ANY (ARRAY(SELECT row_ctid FROM picked))
    RETURNING a.id, a.activity_type, a.payload, a.priority, a.retry_count, a.max_retries, a.timeout_ms,
              a.metadata, a.created_at, a.ready_at
), ev AS (
    INSERT INTO runnerq_events (queue_name, event_type, at, activity_ids, detail)
    SELECT $1::text, 'claimed', now(), array_agg(id), $5::text
    FROM claimed
    HAVING count(*) > 0
), async_commit AS (
    SELECT set_config('synchronous_commit', 'off', true) WHERE $7::boolean
)
SELECT id, activity_type, payload, priority, retry_count, max_retries, timeout_ms, metadata,
       timestamptz_send(created_at) AS created_at_us, timestamptz_send(ready_at) AS ready_at_us
FROM claimed LEFT JOIN async_commit ON true;

-- name: suspects_ready
-- $1 queue, $2 activity types (NULL: any): how many suspects claim_suspect
-- could take now (runnerq_activities_suspect_idx).
SELECT count(*) FROM runnerq_activities
WHERE queue_name = $1::text AND suspect AND status IN ('pending', 'scheduled', 'retrying') AND ready_at <= now()
  AND ($2::text[] IS NULL OR activity_type = ANY ($2::text[]));

-- name: ack
-- $1 queue (notification payload), then parallel arrays: ids, claim tokens,
-- outcomes, results, errors, retry times (epoch ms), tracebacks (NULL where
-- the handler did not raise: the row keeps its last one). Only rows still
-- processing under the same claim token change; a retry (2) of a row whose
-- cancellation was requested ends it cancelled. Returns one row: the
-- accepted ids and how many notifications were sent.
WITH input AS (
    SELECT *
    FROM unnest($2::uuid[], $3::text[], $4::smallint[], $5::text[], $6::text[], $7::bigint[], $8::text[])
        AS t(id, claim_token, outcome, result, error, retry_at_ms, traceback)
), done AS (
    UPDATE runnerq_activities a
    SET status = CASE WHEN i.outcome = 5 OR (i.outcome = 2 AND a.cancel_requested_at IS NOT NULL) THEN 'cancelled'
                      WHEN i.outcome = 1 THEN 'completed' WHEN i.outcome = 2 THEN 'retrying'
                      WHEN i.outcome = 3 THEN 'failed' ELSE 'dead_letter' END,
        retry_count = CASE WHEN i.outcome = 2 AND a.cancel_requested_at IS NULL THEN a.retry_count + 1
                           ELSE a.retry_count END,
        ready_at = CASE WHEN i.outcome = 2 AND a.cancel_requested_at IS NULL
                        THEN greatest(timestamptz 'epoch' + i.retry_at_ms * interval '1 millisecond', now())
                        ELSE a.ready_at END,
        finished_at = CASE WHEN i.outcome = 2 AND a.cancel_requested_at IS NULL THEN a.finished_at ELSE now() END,
        dead_lettered_at = CASE WHEN i.outcome = 4 THEN now() ELSE a.dead_lettered_at END,
        last_error = CASE WHEN i.outcome = 2 OR i.error IS NOT NULL THEN i.error ELSE a.last_error END,
        result = CASE WHEN i.outcome = 1 THEN i.result END,
        traceback = coalesce(i.traceback, a.traceback),
        claim_token = NULL,
        lease_expires_at = NULL,
        cancel_requested_at = NULL,
        suspect = false
    FROM input i
    WHERE a.id = i.id AND a.status = 'processing' AND a.claim_token = i.claim_token
    RETURNING a.id, a.queue_name, a.status, a.ready_at, i.outcome, CASE WHEN a.status <> 'cancelled' THEN i.error END
        AS error, CASE WHEN a.status <> 'cancelled' THEN i.traceback END AS traceback
), ev AS (
    -- tracebacks (migration 0013) parallel to activity_ids, like details: NULL when no attempt of the batch row has one
    INSERT INTO runnerq_events (queue_name, event_type, at, activity_ids, details, tracebacks)
    SELECT queue_name, event_type, now(), array_agg(id),
           CASE WHEN bool_or(detail IS NOT NULL) THEN array_agg(detail) END,
           CASE WHEN bool_or(traceback IS NOT NULL) THEN array_agg(traceback) END
    FROM (SELECT queue_name, status AS event_type, id, error AS detail, traceback FROM done) s
    GROUP BY queue_name, event_type
), notes AS (
    SELECT pg_notify('runnerq_results', $1::text) FROM (SELECT 1 FROM done WHERE status <> 'retrying' LIMIT 1) s
    UNION ALL
    SELECT pg_notify('runnerq_work', $1::text)
    FROM (SELECT 1 FROM done WHERE status = 'retrying' LIMIT 1) s  -- a later retry: fetchers time their wait
)
SELECT coalesce(array_agg(id), '{}') AS ids, (SELECT count(*) FROM notes) AS notified FROM done;

-- name: ack_completed
-- The ack of a batch whose every outcome is 1 (completed) with no error: $1
-- queue, then parallel arrays of ids, claim tokens and results. It changes
-- the rows and writes the events and notification that ack would for such a
-- batch, from three arrays instead of six and without ack's per-row CASEs.
WITH input AS (
    SELECT * FROM unnest($2::uuid[], $3::text[], $4::text[]) AS t(id, claim_token, result)
), done AS (
    UPDATE runnerq_activities a
    SET status = 'completed', finished_at = now(), result = i.result,
        claim_token = NULL, lease_expires_at = NULL, cancel_requested_at = NULL, suspect = false
    FROM input i
    WHERE a.id = i.id AND a.status = 'processing' AND a.claim_token = i.claim_token
    RETURNING a.id, a.queue_name
), ev AS (
    INSERT INTO runnerq_events (queue_name, event_type, at, activity_ids)
    SELECT queue_name, 'completed', now(), array_agg(id) FROM done GROUP BY queue_name
), notes AS (
    SELECT pg_notify('runnerq_results', $1::text) FROM (SELECT 1 FROM done LIMIT 1) s
)
SELECT coalesce(array_agg(id), '{}') AS ids, (SELECT count(*) FROM notes) AS notified FROM done;

-- name: extend_leases
-- $1 ids, $2 claim tokens, $3 lease in milliseconds. Returns the ids extended,
-- each with a lease_extended event (detail: the new expiry, epoch ms), and
-- whether an operator asked to cancel it.
WITH input AS (
    SELECT * FROM unnest($1::uuid[], $2::text[]) AS t(id, claim_token)
), extended AS (
    UPDATE runnerq_activities a
    SET lease_expires_at = now() + $3::bigint * interval '1 millisecond'
    FROM input i
    WHERE a.id = i.id AND a.status = 'processing' AND a.claim_token = i.claim_token
    RETURNING a.id, a.queue_name, a.lease_expires_at, a.cancel_requested_at IS NOT NULL AS cancel
), ev AS (
    INSERT INTO runnerq_events (queue_name, event_type, at, activity_ids, details)
    SELECT queue_name, event_type, now(), array_agg(id),
           CASE WHEN bool_or(detail IS NOT NULL) THEN array_agg(detail) END
    FROM (SELECT queue_name, 'lease_extended' AS event_type, id,
                 floor(extract(epoch FROM lease_expires_at) * 1000)::bigint::text AS detail
          FROM extended) s
    GROUP BY queue_name, event_type
)
SELECT id, cancel FROM extended;

-- name: set_progress
-- $1 ids, $2 claim tokens, $3 progress values (JSON text): each written only
-- under its claim, with a progress event (detail: the value). Returns the ids written.
WITH input AS (
    SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[]) AS t(id, claim_token, progress)
), written AS (
    UPDATE runnerq_activities a
    SET progress = i.progress
    FROM input i
    WHERE a.id = i.id AND a.status = 'processing' AND a.claim_token = i.claim_token
    RETURNING a.id, a.queue_name, i.progress
), ev AS (
    INSERT INTO runnerq_events (queue_name, event_type, at, activity_ids, details)
    SELECT queue_name, 'progress', now(), array_agg(id), array_agg(progress)
    FROM written GROUP BY queue_name
)
SELECT id FROM written;

-- name: release
-- $1 ids, $2 claim tokens: back to pending without counting an attempt (or
-- cancelled, when an operator asked to cancel it). Returns one row: the
-- released ids and how many notifications were sent.
WITH input AS (
    SELECT * FROM unnest($1::uuid[], $2::text[]) AS t(id, claim_token)
), rel AS (
    UPDATE runnerq_activities a
    SET status = CASE WHEN a.cancel_requested_at IS NULL THEN 'pending' ELSE 'cancelled' END,
        finished_at = CASE WHEN a.cancel_requested_at IS NULL THEN a.finished_at ELSE now() END,
        claim_token = NULL, lease_expires_at = NULL, cancel_requested_at = NULL
    FROM input i
    WHERE a.id = i.id AND a.status = 'processing' AND a.claim_token = i.claim_token
    RETURNING a.id, a.queue_name, a.status
), ev AS (
    INSERT INTO runnerq_events (queue_name, event_type, at, activity_ids, detail)
    SELECT queue_name, CASE WHEN status = 'pending' THEN 'requeued' ELSE 'cancelled' END, now(), array_agg(id),
           'released at shutdown'
    FROM rel GROUP BY queue_name, status
), notes AS (
    SELECT pg_notify('runnerq_work', q) FROM (SELECT DISTINCT queue_name AS q FROM rel WHERE status = 'pending') s
    UNION ALL
    SELECT pg_notify('runnerq_results', q) FROM (SELECT DISTINCT queue_name AS q FROM rel WHERE status = 'cancelled') s
)
SELECT coalesce(array_agg(id), '{}') AS ids, (SELECT count(*) FROM notes) AS notified FROM rel;

-- name: requeue_expired
-- $1 queue, $2 limit, $3 the last error of an expiry not counted
-- (runnerq_fast.models.LEASE_EXPIRED_UNCHARGED). An expired lease counts as
-- an attempt only against a suspect (claimed alone by claim_suspect):
-- dead_letter (with a result row) once retry_count + 1 exceeds max_retries,
-- its retry_count left at max_retries as a handler's last failure leaves it
-- (retries taken; attempts = retry_count + 1), else pending and counted. Any other expiry goes back to pending uncounted (it may have
-- shared a worker another activity killed). Either way it is suspect from
-- now on. An activity whose cancellation was requested ends cancelled instead.
-- Returns (id, new status) rows; the notified column repeats one count.
WITH expired AS MATERIALIZED (
    SELECT id
    FROM runnerq_activities
    WHERE queue_name = $1::text AND status = 'processing' AND lease_expires_at <= now()
    ORDER BY lease_expires_at
    LIMIT $2::integer
    FOR UPDATE SKIP LOCKED
), reaped AS (
    UPDATE runnerq_activities a
    SET retry_count = CASE WHEN a.cancel_requested_at IS NULL AND a.suspect AND a.retry_count + 1 <= a.max_retries
                           THEN a.retry_count + 1 ELSE a.retry_count END,
        status = CASE WHEN a.cancel_requested_at IS NOT NULL THEN 'cancelled'
                      WHEN a.suspect AND a.retry_count + 1 > a.max_retries THEN 'dead_letter' ELSE 'pending' END,
        last_error = CASE WHEN a.cancel_requested_at IS NOT NULL THEN a.last_error
                          WHEN NOT a.suspect THEN $3::text
                          WHEN a.retry_count + 1 > a.max_retries THEN 'lease expired; retries exhausted'
                          ELSE 'lease expired' END,
        finished_at = CASE WHEN a.cancel_requested_at IS NOT NULL
                                OR (a.suspect AND a.retry_count + 1 > a.max_retries) THEN now()
                           ELSE a.finished_at END,
        dead_lettered_at = CASE WHEN a.cancel_requested_at IS NULL AND a.suspect
                                     AND a.retry_count + 1 > a.max_retries THEN now()
                                ELSE a.dead_lettered_at END,
        claim_token = NULL,
        lease_expires_at = NULL,
        cancel_requested_at = NULL,
        suspect = true
    FROM expired e
    WHERE a.id = e.id
    RETURNING a.id, a.queue_name, a.status, a.last_error
), ev AS (
    INSERT INTO runnerq_events (queue_name, event_type, at, activity_ids, details)
    SELECT queue_name, event_type, now(), array_agg(id),
           CASE WHEN bool_or(detail IS NOT NULL) THEN array_agg(detail) END
    FROM (SELECT queue_name, CASE WHEN status = 'pending' THEN 'requeued' ELSE status END AS event_type,
                 id, CASE WHEN status = 'cancelled' THEN 'lease expired' ELSE last_error END AS detail
          FROM reaped) s
    GROUP BY queue_name, event_type
), notes AS (
    SELECT pg_notify('runnerq_results', $1::text)
    FROM (SELECT 1 FROM reaped WHERE status IN ('dead_letter', 'cancelled') LIMIT 1) s
    UNION ALL
    SELECT pg_notify('runnerq_work', $1::text) FROM (SELECT 1 FROM reaped WHERE status = 'pending' LIMIT 1) s
)
SELECT id, status, (SELECT count(*) FROM notes) AS notified FROM reaped;

-- name: cancel
-- $1 id. Only work that has not started can be cancelled.
WITH c AS (
    UPDATE runnerq_activities
    SET status = 'cancelled', finished_at = now(), claim_token = NULL, lease_expires_at = NULL
    WHERE id = $1::uuid AND status IN ('pending', 'scheduled', 'retrying')
    RETURNING id, queue_name
), ev AS (
    INSERT INTO runnerq_events (queue_name, event_type, at, activity_ids)
    SELECT queue_name, 'cancelled', now(), ARRAY[id] FROM c
), notes AS (
    SELECT pg_notify('runnerq_results', queue_name) FROM c
)
SELECT id, (SELECT count(*) FROM notes) AS notified FROM c;

-- name: get_result
-- A result is the terminal state of the activity row: completed keeps the
-- handler's return value, failed and dead_letter the last error and traceback.
SELECT id, status, result, CASE WHEN status IN ('failed', 'dead_letter') THEN last_error END,
       CASE WHEN status IN ('failed', 'dead_letter') THEN traceback END
FROM runnerq_activities
WHERE id = $1::uuid AND status IN ('completed', 'failed', 'dead_letter', 'cancelled');

-- name: get_results
-- The results among $1 ids (the ids currently awaited by this process).
SELECT id, status, result, CASE WHEN status IN ('failed', 'dead_letter') THEN last_error END,
       CASE WHEN status IN ('failed', 'dead_letter') THEN traceback END
FROM runnerq_activities
WHERE id = ANY ($1::uuid[]) AND status IN ('completed', 'failed', 'dead_letter', 'cancelled');

-- name: stats
-- $1 queue: counts by status from the maintained counters (migration 0003):
-- runnerq_counts plus the deltas not folded yet, in one snapshot; never a
-- row of runnerq_activities. The third column: delta rows read (the backend
-- folds them once there are many).
SELECT status, sum(n)::bigint, count(*) FILTER (WHERE folded IS FALSE)
FROM (SELECT status, n, TRUE AS folded FROM runnerq_counts WHERE queue_name = $1::text
      UNION ALL
      SELECT status, n, FALSE FROM runnerq_count_deltas WHERE queue_name = $1::text) c
GROUP BY status;

-- name: fold_counts
-- Move every delta into runnerq_counts (a concurrent fold waits on the delta
-- rows this one deletes, then finds them gone: nothing is counted twice).
-- Returns the delta rows folded.
WITH d AS (
    DELETE FROM runnerq_count_deltas RETURNING queue_name, activity_type, status, n
), s AS (
    INSERT INTO runnerq_counts AS c (queue_name, activity_type, status, n)
    SELECT queue_name, activity_type, status, sum(n) FROM d GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
    ON CONFLICT (queue_name, activity_type, status) DO UPDATE SET n = c.n + excluded.n
)
SELECT count(*) FROM d;

-- name: list_activities
-- $1 queue, $2 status (NULL: any), $3 offset, $4 limit; newest first.
SELECT id, queue_name, activity_type, status, priority, payload, metadata, retry_count, max_retries, timeout_ms,
       floor(extract(epoch FROM created_at) * 1000)::bigint,
       floor(extract(epoch FROM ready_at) * 1000)::bigint,
       floor(extract(epoch FROM started_at) * 1000)::bigint,
       floor(extract(epoch FROM finished_at) * 1000)::bigint,
       CASE WHEN status = 'processing' THEN floor(extract(epoch FROM lease_expires_at) * 1000)::bigint END,
       last_error, idempotency_key, parent_id
FROM runnerq_activities
WHERE queue_name = $1::text AND ($2::text IS NULL OR status = $2::text)
ORDER BY id DESC
OFFSET $3::integer
LIMIT $4::integer;

-- name: get_activity
-- The snapshot's columns, then the traceback (migration 0010) and the progress (0011).
SELECT id, queue_name, activity_type, status, priority, payload, metadata, retry_count, max_retries, timeout_ms,
       floor(extract(epoch FROM created_at) * 1000)::bigint,
       floor(extract(epoch FROM ready_at) * 1000)::bigint,
       floor(extract(epoch FROM started_at) * 1000)::bigint,
       floor(extract(epoch FROM finished_at) * 1000)::bigint,
       CASE WHEN status = 'processing' THEN floor(extract(epoch FROM lease_expires_at) * 1000)::bigint END,
       last_error, idempotency_key, parent_id, traceback, progress
FROM runnerq_activities
WHERE id = $1::uuid;

-- name: get_activity_before_0011
-- get_activity on a database not migrated to 0010 and 0011 yet (a read-only look: inspect, serve
-- --read-only; no traceback or progress column): the snapshot's columns only.
SELECT id, queue_name, activity_type, status, priority, payload, metadata, retry_count, max_retries, timeout_ms,
       floor(extract(epoch FROM created_at) * 1000)::bigint,
       floor(extract(epoch FROM ready_at) * 1000)::bigint,
       floor(extract(epoch FROM started_at) * 1000)::bigint,
       floor(extract(epoch FROM finished_at) * 1000)::bigint,
       CASE WHEN status = 'processing' THEN floor(extract(epoch FROM lease_expires_at) * 1000)::bigint END,
       last_error, idempotency_key, parent_id
FROM runnerq_activities
WHERE id = $1::uuid;

-- name: list_dead_letter
-- $1 queue, $2 offset, $3 limit; most recently dead-lettered first.
SELECT id, queue_name, activity_type, status, priority, payload, metadata, retry_count, max_retries, timeout_ms,
       floor(extract(epoch FROM created_at) * 1000)::bigint,
       floor(extract(epoch FROM ready_at) * 1000)::bigint,
       floor(extract(epoch FROM started_at) * 1000)::bigint,
       floor(extract(epoch FROM finished_at) * 1000)::bigint,
       NULL::bigint,
       last_error, idempotency_key, parent_id,
       floor(extract(epoch FROM dead_lettered_at) * 1000)::bigint
FROM runnerq_activities
WHERE queue_name = $1::text AND status = 'dead_letter'
ORDER BY dead_lettered_at DESC, id DESC
OFFSET $2::integer
LIMIT $3::integer;

-- name: get_events
-- The activity's events, oldest first: the batch rows that name it (GIN on
-- activity_ids), unnested to its own entry, with its failed attempt's
-- traceback (migration 0013). Event id = batch id * 2^20 + position.
-- A deleted activity keeps only its "deleted" row, for the live stream: its
-- timeline is empty.
SELECT e.id * 1048576 + u.ord, u.aid, e.queue_name, e.event_type, floor(extract(epoch FROM e.at) * 1000)::bigint,
       coalesce(e.details[u.ord], e.detail), e.tracebacks[u.ord]
FROM runnerq_events e CROSS JOIN LATERAL unnest(e.activity_ids) WITH ORDINALITY AS u(aid, ord)
WHERE e.activity_ids @> ARRAY[$1::uuid] AND u.aid = $1::uuid AND e.event_type <> 'deleted'
ORDER BY 1;

-- name: get_events_before_0013
-- get_events on a database not migrated to 0013 yet (opened without
-- migrating, e.g. a read-only inspect): no tracebacks.
SELECT e.id * 1048576 + u.ord, u.aid, e.queue_name, e.event_type, floor(extract(epoch FROM e.at) * 1000)::bigint,
       coalesce(e.details[u.ord], e.detail)
FROM runnerq_events e CROSS JOIN LATERAL unnest(e.activity_ids) WITH ORDINALITY AS u(aid, ord)
WHERE e.activity_ids @> ARRAY[$1::uuid] AND u.aid = $1::uuid AND e.event_type <> 'deleted'
ORDER BY 1;

-- name: events_after
-- $1 queue, then the stream position ($2 tx as text, $3 batch id, $4 position
-- in the batch), $5 limit: the next page in (tx, id, position) order, only
-- from transactions that ended before every transaction still running, so
-- nothing can later commit behind the position. Positions of deleted
-- activities hold NULL (delete_activities) and are skipped.
SELECT e.id * 1048576 + u.ord AS event_id, u.aid, e.queue_name, e.event_type,
       floor(extract(epoch FROM e.at) * 1000)::bigint, coalesce(e.details[u.ord], e.detail),
       e.tx::text, e.id, u.ord
FROM runnerq_events e CROSS JOIN LATERAL unnest(e.activity_ids) WITH ORDINALITY AS u(aid, ord)
WHERE e.queue_name = $1::text AND u.aid IS NOT NULL
  AND (e.tx, e.id) >= ($2::text::xid8, $3::bigint)
  AND ((e.tx, e.id) > ($2::text::xid8, $3::bigint) OR u.ord > $4::bigint)
  AND e.tx < pg_snapshot_xmin(pg_current_snapshot())
ORDER BY e.tx, e.id, u.ord
LIMIT $5::integer;

-- name: stream_position_of
-- The stream position just after event $1 (batch id * 2^20 + position), or no
-- row when that batch is unknown.
SELECT tx::text, id, ($1::bigint & 1048575) FROM runnerq_events WHERE id = ($1::bigint >> 20);

-- name: stream_position_now
-- The position of "from now on": every transaction not yet ended is ahead of it.
SELECT pg_snapshot_xmin(pg_current_snapshot())::text, 0::bigint, 0::bigint;

-- name: queue_names
-- Every queue with an activity, from the maintained counters (migration
-- 0003; counted in the same transactions as the rows, so as exact as a read
-- of runnerq_activities): a (queue, type, status) whose counter and deltas
-- add up to zero holds no activity. Never a row of runnerq_activities.
SELECT DISTINCT queue_name
FROM (SELECT queue_name
      FROM (SELECT queue_name, activity_type, status, n FROM runnerq_counts
            UNION ALL
            SELECT queue_name, activity_type, status, n FROM runnerq_count_deltas) c
      GROUP BY queue_name, activity_type, status
      HAVING sum(n) <> 0) q
ORDER BY 1;

-- name: counts_by_type
-- $1 queues: counts by (queue, type, status) from the maintained counters,
-- as stats (never a row of runnerq_activities).
SELECT queue_name, activity_type, status, sum(n)::bigint
FROM (SELECT queue_name, activity_type, status, n FROM runnerq_counts WHERE queue_name = ANY ($1::text[])
      UNION ALL
      SELECT queue_name, activity_type, status, n FROM runnerq_count_deltas WHERE queue_name = ANY ($1::text[])) c
GROUP BY queue_name, activity_type, status
HAVING sum(n) <> 0;

-- name: oldest_ready
-- $1 queues: per queue, the ready time (epoch ms) of the oldest activity a
-- worker could claim now. A loose index scan of runnerq_activities_dequeue_idx:
-- for each (queue, priority) it hops from one retry count to the next lower
-- one, reading the head of each group (its oldest ready time), so the cost is
-- the number of (priority, retry count) groups, not the backlog.
WITH RECURSIVE heads AS (
    SELECT q.name, p.pr, h.retry_count, h.ready_at
    FROM unnest($1::text[]) AS q(name)
    CROSS JOIN unnest('{4,3,2,1}'::smallint[]) AS p(pr)
    CROSS JOIN LATERAL (
        SELECT a.retry_count, a.ready_at FROM runnerq_activities a
        WHERE a.queue_name = q.name AND a.status IN ('pending', 'scheduled', 'retrying') AND a.priority = p.pr
        ORDER BY a.priority DESC, a.retry_count DESC, a.ready_at, a.id
        LIMIT 1
    ) h
    UNION ALL
    SELECT heads.name, heads.pr, h.retry_count, h.ready_at
    FROM heads
    CROSS JOIN LATERAL (
        SELECT a.retry_count, a.ready_at FROM runnerq_activities a
        WHERE a.queue_name = heads.name AND a.status IN ('pending', 'scheduled', 'retrying')
          AND a.priority = heads.pr AND a.retry_count < heads.retry_count
        ORDER BY a.priority DESC, a.retry_count DESC, a.ready_at, a.id
        LIMIT 1
    ) h
)
SELECT name, floor(extract(epoch FROM min(ready_at) FILTER (WHERE ready_at <= now())) * 1000)::bigint
FROM heads
GROUP BY name;

-- name: query_status_desc
-- One page, newest first, over one range of runnerq_activities_status_listing_idx per status in $2
-- (processing: the queue's rows in lease_idx, sorted).
-- $1 queue, $2 statuses, $3 rows to examine, $4 rows to return, $5/$6
-- created range (epoch ms; NULL: open), $7/$8 cursor (created_at in epoch
-- microseconds, id; NULL: from the start), $9 priorities and $10 metadata
-- (a jsonb object) checked row by row (NULL: any).
-- One row per item ($4 = page size + 1: one more tells there is a next
-- page), whole row plus created_us, each also carrying how many rows were
-- examined and the key of the last one; no item: one row with only those.
WITH cand AS MATERIALIZED (
    SELECT x.id, x.created_at, x.status, x.priority, x.ok
    FROM (
        SELECT r.*
        FROM (SELECT u.st FROM unnest($2::text[]) AS u(st) WHERE u.st <> 'processing') s
        CROSS JOIN LATERAL (
            SELECT a.id, a.created_at, a.status, a.priority,
                   ($9::smallint[] IS NULL OR a.priority = ANY ($9::smallint[]))
                   AND ($10::jsonb IS NULL OR a.metadata::jsonb @> $10::jsonb) AS ok
            FROM runnerq_activities a
            WHERE a.queue_name = $1::text AND a.status = s.st AND a.status <> 'processing'
              AND a.created_at >= coalesce(timestamptz 'epoch' + $5::bigint * interval '1 millisecond', '-infinity')
              AND (a.created_at, a.id) < (least(coalesce(timestamptz 'epoch' + $7::bigint * interval '1 microsecond', 'infinity'), coalesce(timestamptz 'epoch' + $6::bigint * interval '1 millisecond', 'infinity')),
                                          CASE WHEN coalesce(timestamptz 'epoch' + $7::bigint * interval '1 microsecond', 'infinity') < coalesce(timestamptz 'epoch' + $6::bigint * interval '1 millisecond', 'infinity')
                                               THEN $8::uuid ELSE '00000000-0000-0000-0000-000000000000' END)
            ORDER BY a.created_at DESC, a.id DESC
            LIMIT $3::integer
        ) r
        UNION ALL
        (
            SELECT a.id, a.created_at, a.status, a.priority,
                   ($9::smallint[] IS NULL OR a.priority = ANY ($9::smallint[]))
                   AND ($10::jsonb IS NULL OR a.metadata::jsonb @> $10::jsonb) AS ok
            FROM runnerq_activities a
            WHERE 'processing' = ANY ($2::text[]) AND a.queue_name = $1::text AND a.status = 'processing'
              AND a.created_at >= coalesce(timestamptz 'epoch' + $5::bigint * interval '1 millisecond', '-infinity')
              AND (a.created_at, a.id) < (least(coalesce(timestamptz 'epoch' + $7::bigint * interval '1 microsecond', 'infinity'), coalesce(timestamptz 'epoch' + $6::bigint * interval '1 millisecond', 'infinity')),
                                          CASE WHEN coalesce(timestamptz 'epoch' + $7::bigint * interval '1 microsecond', 'infinity') < coalesce(timestamptz 'epoch' + $6::bigint * interval '1 millisecond', 'infinity')
                                               THEN $8::uuid ELSE '00000000-0000-0000-0000-000000000000' END)
            ORDER BY a.created_at DESC, a.id DESC
            LIMIT $3::integer
        )
    ) x
    ORDER BY x.created_at DESC, x.id DESC
    LIMIT $3::integer
), hits AS (
    SELECT c.id, c.created_at FROM cand c WHERE c.ok ORDER BY c.created_at DESC, c.id DESC LIMIT $4::integer
), edge AS (
    SELECT (SELECT count(*) FROM cand) AS examined, l.id AS last_id,
           floor(extract(epoch FROM l.created_at) * 1000000)::bigint AS last_us
    FROM (SELECT 1) one
    LEFT JOIN LATERAL (SELECT c.id, c.created_at FROM cand c ORDER BY c.created_at, c.id LIMIT 1) l ON true
)
SELECT e.examined, e.last_us, e.last_id, r.*
FROM edge e
LEFT JOIN LATERAL (
    SELECT a.id, a.queue_name, a.activity_type, a.status, a.priority, a.payload, a.metadata, a.retry_count,
           a.max_retries, a.timeout_ms,
           floor(extract(epoch FROM a.created_at) * 1000)::bigint,
           floor(extract(epoch FROM a.ready_at) * 1000)::bigint,
           floor(extract(epoch FROM a.started_at) * 1000)::bigint,
           floor(extract(epoch FROM a.finished_at) * 1000)::bigint,
           CASE WHEN a.status = 'processing' THEN floor(extract(epoch FROM a.lease_expires_at) * 1000)::bigint END,
           a.last_error, a.idempotency_key, a.parent_id,
           floor(extract(epoch FROM a.created_at) * 1000000)::bigint AS created_us
    FROM hits h JOIN runnerq_activities a ON a.id = h.id
) r ON true
ORDER BY r.created_us DESC, r.id DESC;

-- name: query_status_asc
-- One page, oldest first, over one range of runnerq_activities_status_listing_idx per status in $2
-- (processing: the queue's rows in lease_idx, sorted).
-- $1 queue, $2 statuses, $3 rows to examine, $4 rows to return, $5/$6
-- created range (epoch ms; NULL: open), $7/$8 cursor (created_at in epoch
-- microseconds, id; NULL: from the start), $9 priorities and $10 metadata
-- (a jsonb object) checked row by row (NULL: any).
-- One row per item ($4 = page size + 1: one more tells there is a next
-- page), whole row plus created_us, each also carrying how many rows were
-- examined and the key of the last one; no item: one row with only those.
WITH cand AS MATERIALIZED (
    SELECT x.id, x.created_at, x.status, x.priority, x.ok
    FROM (
        SELECT r.*
        FROM (SELECT u.st FROM unnest($2::text[]) AS u(st) WHERE u.st <> 'processing') s
        CROSS JOIN LATERAL (
            SELECT a.id, a.created_at, a.status, a.priority,
                   ($9::smallint[] IS NULL OR a.priority = ANY ($9::smallint[]))
                   AND ($10::jsonb IS NULL OR a.metadata::jsonb @> $10::jsonb) AS ok
            FROM runnerq_activities a
            WHERE a.queue_name = $1::text AND a.status = s.st AND a.status <> 'processing'
              AND a.created_at < coalesce(timestamptz 'epoch' + $6::bigint * interval '1 millisecond', 'infinity')
              AND (a.created_at, a.id) > (greatest(coalesce(timestamptz 'epoch' + $7::bigint * interval '1 microsecond', '-infinity'), (coalesce(timestamptz 'epoch' + $5::bigint * interval '1 millisecond', '-infinity') - interval '1 microsecond')),
                                          CASE WHEN coalesce(timestamptz 'epoch' + $7::bigint * interval '1 microsecond', '-infinity') > (coalesce(timestamptz 'epoch' + $5::bigint * interval '1 millisecond', '-infinity') - interval '1 microsecond')
                                               THEN $8::uuid ELSE 'ffffffff-ffff-ffff-ffff-ffffffffffff' END)
            ORDER BY a.created_at, a.id
            LIMIT $3::integer
        ) r
        UNION ALL
        (
            SELECT a.id, a.created_at, a.status, a.priority,
                   ($9::smallint[] IS NULL OR a.priority = ANY ($9::smallint[]))
                   AND ($10::jsonb IS NULL OR a.metadata::jsonb @> $10::jsonb) AS ok
            FROM runnerq_activities a
            WHERE 'processing' = ANY ($2::text[]) AND a.queue_name = $1::text AND a.status = 'processing'
              AND a.created_at < coalesce(timestamptz 'epoch' + $6::bigint * interval '1 millisecond', 'infinity')
              AND (a.created_at, a.id) > (greatest(coalesce(timestamptz 'epoch' + $7::bigint * interval '1 microsecond', '-infinity'), (coalesce(timestamptz 'epoch' + $5::bigint * interval '1 millisecond', '-infinity') - interval '1 microsecond')),
                                          CASE WHEN coalesce(timestamptz 'epoch' + $7::bigint * interval '1 microsecond', '-infinity') > (coalesce(timestamptz 'epoch' + $5::bigint * interval '1 millisecond', '-infinity') - interval '1 microsecond')
                                               THEN $8::uuid ELSE 'ffffffff-ffff-ffff-ffff-ffffffffffff' END)
            ORDER BY a.created_at, a.id
            LIMIT $3::integer
        )
    ) x
    ORDER BY x.created_at, x.id
    LIMIT $3::integer
), hits AS (
    SELECT c.id, c.created_at FROM cand c WHERE c.ok ORDER BY c.created_at, c.id LIMIT $4::integer
), edge AS (
    SELECT (SELECT count(*) FROM cand) AS examined, l.id AS last_id,
           floor(extract(epoch FROM l.created_at) * 1000000)::bigint AS last_us
    FROM (SELECT 1) one
    LEFT JOIN LATERAL (SELECT c.id, c.created_at FROM cand c ORDER BY c.created_at DESC, c.id DESC LIMIT 1) l ON true
)
SELECT e.examined, e.last_us, e.last_id, r.*
FROM edge e
LEFT JOIN LATERAL (
    SELECT a.id, a.queue_name, a.activity_type, a.status, a.priority, a.payload, a.metadata, a.retry_count,
           a.max_retries, a.timeout_ms,
           floor(extract(epoch FROM a.created_at) * 1000)::bigint,
           floor(extract(epoch FROM a.ready_at) * 1000)::bigint,
           floor(extract(epoch FROM a.started_at) * 1000)::bigint,
           floor(extract(epoch FROM a.finished_at) * 1000)::bigint,
           CASE WHEN a.status = 'processing' THEN floor(extract(epoch FROM a.lease_expires_at) * 1000)::bigint END,
           a.last_error, a.idempotency_key, a.parent_id,
           floor(extract(epoch FROM a.created_at) * 1000000)::bigint AS created_us
    FROM hits h JOIN runnerq_activities a ON a.id = h.id
) r ON true
ORDER BY r.created_us , r.id ;

-- name: query_type_desc
-- One page, newest first, over one range of runnerq_activities_type_listing_idx per (type in $11, status in $2)
-- (processing: the queue's rows in lease_idx, sorted).
-- $1 queue, $2 statuses, $3 rows to examine, $4 rows to return, $5/$6
-- created range (epoch ms; NULL: open), $7/$8 cursor (created_at in epoch
-- microseconds, id; NULL: from the start), $9 priorities and $10 metadata
-- (a jsonb object) checked row by row (NULL: any).
-- One row per item ($4 = page size + 1: one more tells there is a next
-- page), whole row plus created_us, each also carrying how many rows were
-- examined and the key of the last one; no item: one row with only those.
WITH cand AS MATERIALIZED (
    SELECT x.id, x.created_at, x.status, x.priority, x.ok
    FROM (
        SELECT r.*
        FROM unnest($11::text[]) AS t(typ)
        CROSS JOIN (SELECT u.st FROM unnest($2::text[]) AS u(st) WHERE u.st <> 'processing') s
        CROSS JOIN LATERAL (
            SELECT a.id, a.created_at, a.status, a.priority,
                   ($9::smallint[] IS NULL OR a.priority = ANY ($9::smallint[]))
                   AND ($10::jsonb IS NULL OR a.metadata::jsonb @> $10::jsonb) AS ok
            FROM runnerq_activities a
            WHERE a.queue_name = $1::text AND a.activity_type = t.typ AND a.status = s.st AND a.status <> 'processing'
              AND a.created_at >= coalesce(timestamptz 'epoch' + $5::bigint * interval '1 millisecond', '-infinity')
              AND (a.created_at, a.id) < (least(coalesce(timestamptz 'epoch' + $7::bigint * interval '1 microsecond', 'infinity'), coalesce(timestamptz 'epoch' + $6::bigint * interval '1 millisecond', 'infinity')),
                                          CASE WHEN coalesce(timestamptz 'epoch' + $7::bigint * interval '1 microsecond', 'infinity') < coalesce(timestamptz 'epoch' + $6::bigint * interval '1 millisecond', 'infinity')
                                               THEN $8::uuid ELSE '00000000-0000-0000-0000-000000000000' END)
            ORDER BY a.created_at DESC, a.id DESC
            LIMIT $3::integer
        ) r
        UNION ALL
        (
            SELECT a.id, a.created_at, a.status, a.priority,
                   ($9::smallint[] IS NULL OR a.priority = ANY ($9::smallint[]))
                   AND ($10::jsonb IS NULL OR a.metadata::jsonb @> $10::jsonb) AS ok
            FROM runnerq_activities a
            WHERE 'processing' = ANY ($2::text[]) AND a.queue_name = $1::text AND a.status = 'processing'
              AND a.activity_type = ANY ($11::text[])
              AND a.created_at >= coalesce(timestamptz 'epoch' + $5::bigint * interval '1 millisecond', '-infinity')
              AND (a.created_at, a.id) < (least(coalesce(timestamptz 'epoch' + $7::bigint * interval '1 microsecond', 'infinity'), coalesce(timestamptz 'epoch' + $6::bigint * interval '1 millisecond', 'infinity')),
                                          CASE WHEN coalesce(timestamptz 'epoch' + $7::bigint * interval '1 microsecond', 'infinity') < coalesce(timestamptz 'epoch' + $6::bigint * interval '1 millisecond', 'infinity')
                                               THEN $8::uuid ELSE '00000000-0000-0000-0000-000000000000' END)
            ORDER BY a.created_at DESC, a.id DESC
            LIMIT $3::integer
        )
    ) x
    ORDER BY x.created_at DESC, x.id DESC
    LIMIT $3::integer
), hits AS (
    SELECT c.id, c.created_at FROM cand c WHERE c.ok ORDER BY c.created_at DESC, c.id DESC LIMIT $4::integer
), edge AS (
    SELECT (SELECT count(*) FROM cand) AS examined, l.id AS last_id,
           floor(extract(epoch FROM l.created_at) * 1000000)::bigint AS last_us
    FROM (SELECT 1) one
    LEFT JOIN LATERAL (SELECT c.id, c.created_at FROM cand c ORDER BY c.created_at, c.id LIMIT 1) l ON true
)
SELECT e.examined, e.last_us, e.last_id, r.*
FROM edge e
LEFT JOIN LATERAL (
    SELECT a.id, a.queue_name, a.activity_type, a.status, a.priority, a.payload, a.metadata, a.retry_count,
           a.max_retries, a.timeout_ms,
           floor(extract(epoch FROM a.created_at) * 1000)::bigint,
           floor(extract(epoch FROM a.ready_at) * 1000)::bigint,
           floor(extract(epoch FROM a.started_at) * 1000)::bigint,
           floor(extract(epoch FROM a.finished_at) * 1000)::bigint,
           CASE WHEN a.status = 'processing' THEN floor(extract(epoch FROM a.lease_expires_at) * 1000)::bigint END,
           a.last_error, a.idempotency_key, a.parent_id,
           floor(extract(epoch FROM a.created_at) * 1000000)::bigint AS created_us
    FROM hits h JOIN runnerq_activities a ON a.id = h.id
) r ON true
ORDER BY r.created_us DESC, r.id DESC;

-- name: query_type_asc
-- One page, oldest first, over one range of runnerq_activities_type_listing_idx per (type in $11, status in $2)
-- (processing: the queue's rows in lease_idx, sorted).
-- $1 queue, $2 statuses, $3 rows to examine, $4 rows to return, $5/$6
-- created range (epoch ms; NULL: open), $7/$8 cursor (created_at in epoch
-- microseconds, id; NULL: from the start), $9 priorities and $10 metadata
-- (a jsonb object) checked row by row (NULL: any).
-- One row per item ($4 = page size + 1: one more tells there is a next
-- page), whole row plus created_us, each also carrying how many rows were
-- examined and the key of the last one; no item: one row with only those.
WITH cand AS MATERIALIZED (
    SELECT x.id, x.created_at, x.status, x.priority, x.ok
    FROM (
        SELECT r.*
        FROM unnest($11::text[]) AS t(typ)
        CROSS JOIN (SELECT u.st FROM unnest($2::text[]) AS u(st) WHERE u.st <> 'processing') s
        CROSS JOIN LATERAL (
            SELECT a.id, a.created_at, a.status, a.priority,
                   ($9::smallint[] IS NULL OR a.priority = ANY ($9::smallint[]))
                   AND ($10::jsonb IS NULL OR a.metadata::jsonb @> $10::jsonb) AS ok
            FROM runnerq_activities a
            WHERE a.queue_name = $1::text AND a.activity_type = t.typ AND a.status = s.st AND a.status <> 'processing'
              AND a.created_at < coalesce(timestamptz 'epoch' + $6::bigint * interval '1 millisecond', 'infinity')
              AND (a.created_at, a.id) > (greatest(coalesce(timestamptz 'epoch' + $7::bigint * interval '1 microsecond', '-infinity'), (coalesce(timestamptz 'epoch' + $5::bigint * interval '1 millisecond', '-infinity') - interval '1 microsecond')),
                                          CASE WHEN coalesce(timestamptz 'epoch' + $7::bigint * interval '1 microsecond', '-infinity') > (coalesce(timestamptz 'epoch' + $5::bigint * interval '1 millisecond', '-infinity') - interval '1 microsecond')
                                               THEN $8::uuid ELSE 'ffffffff-ffff-ffff-ffff-ffffffffffff' END)
            ORDER BY a.created_at, a.id
            LIMIT $3::integer
        ) r
        UNION ALL
        (
            SELECT a.id, a.created_at, a.status, a.priority,
                   ($9::smallint[] IS NULL OR a.priority = ANY ($9::smallint[]))
                   AND ($10::jsonb IS NULL OR a.metadata::jsonb @> $10::jsonb) AS ok
            FROM runnerq_activities a
            WHERE 'processing' = ANY ($2::text[]) AND a.queue_name = $1::text AND a.status = 'processing'
              AND a.activity_type = ANY ($11::text[])
              AND a.created_at < coalesce(timestamptz 'epoch' + $6::bigint * interval '1 millisecond', 'infinity')
              AND (a.created_at, a.id) > (greatest(coalesce(timestamptz 'epoch' + $7::bigint * interval '1 microsecond', '-infinity'), (coalesce(timestamptz 'epoch' + $5::bigint * interval '1 millisecond', '-infinity') - interval '1 microsecond')),
                                          CASE WHEN coalesce(timestamptz 'epoch' + $7::bigint * interval '1 microsecond', '-infinity') > (coalesce(timestamptz 'epoch' + $5::bigint * interval '1 millisecond', '-infinity') - interval '1 microsecond')
                                               THEN $8::uuid ELSE 'ffffffff-ffff-ffff-ffff-ffffffffffff' END)
            ORDER BY a.created_at, a.id
            LIMIT $3::integer
        )
    ) x
    ORDER BY x.created_at, x.id
    LIMIT $3::integer
), hits AS (
    SELECT c.id, c.created_at FROM cand c WHERE c.ok ORDER BY c.created_at, c.id LIMIT $4::integer
), edge AS (
    SELECT (SELECT count(*) FROM cand) AS examined, l.id AS last_id,
           floor(extract(epoch FROM l.created_at) * 1000000)::bigint AS last_us
    FROM (SELECT 1) one
    LEFT JOIN LATERAL (SELECT c.id, c.created_at FROM cand c ORDER BY c.created_at DESC, c.id DESC LIMIT 1) l ON true
)
SELECT e.examined, e.last_us, e.last_id, r.*
FROM edge e
LEFT JOIN LATERAL (
    SELECT a.id, a.queue_name, a.activity_type, a.status, a.priority, a.payload, a.metadata, a.retry_count,
           a.max_retries, a.timeout_ms,
           floor(extract(epoch FROM a.created_at) * 1000)::bigint,
           floor(extract(epoch FROM a.ready_at) * 1000)::bigint,
           floor(extract(epoch FROM a.started_at) * 1000)::bigint,
           floor(extract(epoch FROM a.finished_at) * 1000)::bigint,
           CASE WHEN a.status = 'processing' THEN floor(extract(epoch FROM a.lease_expires_at) * 1000)::bigint END,
           a.last_error, a.idempotency_key, a.parent_id,
           floor(extract(epoch FROM a.created_at) * 1000000)::bigint AS created_us
    FROM hits h JOIN runnerq_activities a ON a.id = h.id
) r ON true
ORDER BY r.created_us , r.id ;

-- name: query_parent_desc
-- One page, newest first, over the children of $11 (runnerq_activities_parent_idx), statuses $2, types $12 (NULL: any).
-- $1 queue, $2 statuses, $3 rows to examine, $4 rows to return, $5/$6
-- created range (epoch ms; NULL: open), $7/$8 cursor (created_at in epoch
-- microseconds, id; NULL: from the start), $9 priorities and $10 metadata
-- (a jsonb object) checked row by row (NULL: any).
-- One row per item ($4 = page size + 1: one more tells there is a next
-- page), whole row plus created_us, each also carrying how many rows were
-- examined and the key of the last one; no item: one row with only those.
WITH cand AS MATERIALIZED (
    SELECT a.id, a.created_at, a.status, a.priority,
           ($9::smallint[] IS NULL OR a.priority = ANY ($9::smallint[]))
               AND ($10::jsonb IS NULL OR a.metadata::jsonb @> $10::jsonb) AS ok
    FROM runnerq_activities a
    WHERE a.parent_id = $11::uuid AND a.queue_name = $1::text AND a.status = ANY ($2::text[])
      AND ($12::text[] IS NULL OR a.activity_type = ANY ($12::text[]))
      AND a.created_at >= coalesce(timestamptz 'epoch' + $5::bigint * interval '1 millisecond', '-infinity')
      AND (a.created_at, a.id) < (least(coalesce(timestamptz 'epoch' + $7::bigint * interval '1 microsecond', 'infinity'), coalesce(timestamptz 'epoch' + $6::bigint * interval '1 millisecond', 'infinity')),
                                  CASE WHEN coalesce(timestamptz 'epoch' + $7::bigint * interval '1 microsecond', 'infinity') < coalesce(timestamptz 'epoch' + $6::bigint * interval '1 millisecond', 'infinity')
                                       THEN $8::uuid ELSE '00000000-0000-0000-0000-000000000000' END)
    ORDER BY a.created_at DESC, a.id DESC
    LIMIT $3::integer
), hits AS (
    SELECT c.id, c.created_at FROM cand c WHERE c.ok ORDER BY c.created_at DESC, c.id DESC LIMIT $4::integer
), edge AS (
    SELECT (SELECT count(*) FROM cand) AS examined, l.id AS last_id,
           floor(extract(epoch FROM l.created_at) * 1000000)::bigint AS last_us
    FROM (SELECT 1) one
    LEFT JOIN LATERAL (SELECT c.id, c.created_at FROM cand c ORDER BY c.created_at, c.id LIMIT 1) l ON true
)
SELECT e.examined, e.last_us, e.last_id, r.*
FROM edge e
LEFT JOIN LATERAL (
    SELECT a.id, a.queue_name, a.activity_type, a.status, a.priority, a.payload, a.metadata, a.retry_count,
           a.max_retries, a.timeout_ms,
           floor(extract(epoch FROM a.created_at) * 1000)::bigint,
           floor(extract(epoch FROM a.ready_at) * 1000)::bigint,
           floor(extract(epoch FROM a.started_at) * 1000)::bigint,
           floor(extract(epoch FROM a.finished_at) * 1000)::bigint,
           CASE WHEN a.status = 'processing' THEN floor(extract(epoch FROM a.lease_expires_at) * 1000)::bigint END,
           a.last_error, a.idempotency_key, a.parent_id,
           floor(extract(epoch FROM a.created_at) * 1000000)::bigint AS created_us
    FROM hits h JOIN runnerq_activities a ON a.id = h.id
) r ON true
ORDER BY r.created_us DESC, r.id DESC;

-- name: query_parent_asc
-- One page, oldest first, over the children of $11 (runnerq_activities_parent_idx), statuses $2, types $12 (NULL: any).
-- $1 queue, $2 statuses, $3 rows to examine, $4 rows to return, $5/$6
-- created range (epoch ms; NULL: open), $7/$8 cursor (created_at in epoch
-- microseconds, id; NULL: from the start), $9 priorities and $10 metadata
-- (a jsonb object) checked row by row (NULL: any).
-- One row per item ($4 = page size + 1: one more tells there is a next
-- page), whole row plus created_us, each also carrying how many rows were
-- examined and the key of the last one; no item: one row with only those.
WITH cand AS MATERIALIZED (
    SELECT a.id, a.created_at, a.status, a.priority,
           ($9::smallint[] IS NULL OR a.priority = ANY ($9::smallint[]))
               AND ($10::jsonb IS NULL OR a.metadata::jsonb @> $10::jsonb) AS ok
    FROM runnerq_activities a
    WHERE a.parent_id = $11::uuid AND a.queue_name = $1::text AND a.status = ANY ($2::text[])
      AND ($12::text[] IS NULL OR a.activity_type = ANY ($12::text[]))
      AND a.created_at < coalesce(timestamptz 'epoch' + $6::bigint * interval '1 millisecond', 'infinity')
      AND (a.created_at, a.id) > (greatest(coalesce(timestamptz 'epoch' + $7::bigint * interval '1 microsecond', '-infinity'), (coalesce(timestamptz 'epoch' + $5::bigint * interval '1 millisecond', '-infinity') - interval '1 microsecond')),
                                  CASE WHEN coalesce(timestamptz 'epoch' + $7::bigint * interval '1 microsecond', '-infinity') > (coalesce(timestamptz 'epoch' + $5::bigint * interval '1 millisecond', '-infinity') - interval '1 microsecond')
                                       THEN $8::uuid ELSE 'ffffffff-ffff-ffff-ffff-ffffffffffff' END)
    ORDER BY a.created_at, a.id
    LIMIT $3::integer
), hits AS (
    SELECT c.id, c.created_at FROM cand c WHERE c.ok ORDER BY c.created_at, c.id LIMIT $4::integer
), edge AS (
    SELECT (SELECT count(*) FROM cand) AS examined, l.id AS last_id,
           floor(extract(epoch FROM l.created_at) * 1000000)::bigint AS last_us
    FROM (SELECT 1) one
    LEFT JOIN LATERAL (SELECT c.id, c.created_at FROM cand c ORDER BY c.created_at DESC, c.id DESC LIMIT 1) l ON true
)
SELECT e.examined, e.last_us, e.last_id, r.*
FROM edge e
LEFT JOIN LATERAL (
    SELECT a.id, a.queue_name, a.activity_type, a.status, a.priority, a.payload, a.metadata, a.retry_count,
           a.max_retries, a.timeout_ms,
           floor(extract(epoch FROM a.created_at) * 1000)::bigint,
           floor(extract(epoch FROM a.ready_at) * 1000)::bigint,
           floor(extract(epoch FROM a.started_at) * 1000)::bigint,
           floor(extract(epoch FROM a.finished_at) * 1000)::bigint,
           CASE WHEN a.status = 'processing' THEN floor(extract(epoch FROM a.lease_expires_at) * 1000)::bigint END,
           a.last_error, a.idempotency_key, a.parent_id,
           floor(extract(epoch FROM a.created_at) * 1000000)::bigint AS created_us
    FROM hits h JOIN runnerq_activities a ON a.id = h.id
) r ON true
ORDER BY r.created_us , r.id ;

-- name: query_ids_desc
-- One page, newest first, over the ids $11 (primary key), statuses $2, types $12 (NULL: any).
-- $1 queue, $2 statuses, $3 rows to examine, $4 rows to return, $5/$6
-- created range (epoch ms; NULL: open), $7/$8 cursor (created_at in epoch
-- microseconds, id; NULL: from the start), $9 priorities and $10 metadata
-- (a jsonb object) checked row by row (NULL: any).
-- One row per item ($4 = page size + 1: one more tells there is a next
-- page), whole row plus created_us, each also carrying how many rows were
-- examined and the key of the last one; no item: one row with only those.
WITH cand AS MATERIALIZED (
    SELECT a.id, a.created_at, a.status, a.priority,
           ($9::smallint[] IS NULL OR a.priority = ANY ($9::smallint[]))
               AND ($10::jsonb IS NULL OR a.metadata::jsonb @> $10::jsonb) AS ok
    FROM runnerq_activities a
    WHERE a.id = ANY ($11::uuid[]) AND a.queue_name = $1::text AND a.status = ANY ($2::text[])
      AND ($12::text[] IS NULL OR a.activity_type = ANY ($12::text[]))
      AND a.created_at >= coalesce(timestamptz 'epoch' + $5::bigint * interval '1 millisecond', '-infinity')
      AND (a.created_at, a.id) < (least(coalesce(timestamptz 'epoch' + $7::bigint * interval '1 microsecond', 'infinity'), coalesce(timestamptz 'epoch' + $6::bigint * interval '1 millisecond', 'infinity')),
                                  CASE WHEN coalesce(timestamptz 'epoch' + $7::bigint * interval '1 microsecond', 'infinity') < coalesce(timestamptz 'epoch' + $6::bigint * interval '1 millisecond', 'infinity')
                                       THEN $8::uuid ELSE '00000000-0000-0000-0000-000000000000' END)
    ORDER BY a.created_at DESC, a.id DESC
    LIMIT $3::integer
), hits AS (
    SELECT c.id, c.created_at FROM cand c WHERE c.ok ORDER BY c.created_at DESC, c.id DESC LIMIT $4::integer
), edge AS (
    SELECT (SELECT count(*) FROM cand) AS examined, l.id AS last_id,
           floor(extract(epoch FROM l.created_at) * 1000000)::bigint AS last_us
    FROM (SELECT 1) one
    LEFT JOIN LATERAL (SELECT c.id, c.created_at FROM cand c ORDER BY c.created_at, c.id LIMIT 1) l ON true
)
SELECT e.examined, e.last_us, e.last_id, r.*
FROM edge e
LEFT JOIN LATERAL (
    SELECT a.id, a.queue_name, a.activity_type, a.status, a.priority, a.payload, a.metadata, a.retry_count,
           a.max_retries, a.timeout_ms,
           floor(extract(epoch FROM a.created_at) * 1000)::bigint,
           floor(extract(epoch FROM a.ready_at) * 1000)::bigint,
           floor(extract(epoch FROM a.started_at) * 1000)::bigint,
           floor(extract(epoch FROM a.finished_at) * 1000)::bigint,
           CASE WHEN a.status = 'processing' THEN floor(extract(epoch FROM a.lease_expires_at) * 1000)::bigint END,
           a.last_error, a.idempotency_key, a.parent_id,
           floor(extract(epoch FROM a.created_at) * 1000000)::bigint AS created_us
    FROM hits h JOIN runnerq_activities a ON a.id = h.id
) r ON true
ORDER BY r.created_us DESC, r.id DESC;

-- name: query_ids_asc
-- One page, oldest first, over the ids $11 (primary key), statuses $2, types $12 (NULL: any).
-- $1 queue, $2 statuses, $3 rows to examine, $4 rows to return, $5/$6
-- created range (epoch ms; NULL: open), $7/$8 cursor (created_at in epoch
-- microseconds, id; NULL: from the start), $9 priorities and $10 metadata
-- (a jsonb object) checked row by row (NULL: any).
-- One row per item ($4 = page size + 1: one more tells there is a next
-- page), whole row plus created_us, each also carrying how many rows were
-- examined and the key of the last one; no item: one row with only those.
WITH cand AS MATERIALIZED (
    SELECT a.id, a.created_at, a.status, a.priority,
           ($9::smallint[] IS NULL OR a.priority = ANY ($9::smallint[]))
               AND ($10::jsonb IS NULL OR a.metadata::jsonb @> $10::jsonb) AS ok
    FROM runnerq_activities a
    WHERE a.id = ANY ($11::uuid[]) AND a.queue_name = $1::text AND a.status = ANY ($2::text[])
      AND ($12::text[] IS NULL OR a.activity_type = ANY ($12::text[]))
      AND a.created_at < coalesce(timestamptz 'epoch' + $6::bigint * interval '1 millisecond', 'infinity')
      AND (a.created_at, a.id) > (greatest(coalesce(timestamptz 'epoch' + $7::bigint * interval '1 microsecond', '-infinity'), (coalesce(timestamptz 'epoch' + $5::bigint * interval '1 millisecond', '-infinity') - interval '1 microsecond')),
                                  CASE WHEN coalesce(timestamptz 'epoch' + $7::bigint * interval '1 microsecond', '-infinity') > (coalesce(timestamptz 'epoch' + $5::bigint * interval '1 millisecond', '-infinity') - interval '1 microsecond')
                                       THEN $8::uuid ELSE 'ffffffff-ffff-ffff-ffff-ffffffffffff' END)
    ORDER BY a.created_at, a.id
    LIMIT $3::integer
), hits AS (
    SELECT c.id, c.created_at FROM cand c WHERE c.ok ORDER BY c.created_at, c.id LIMIT $4::integer
), edge AS (
    SELECT (SELECT count(*) FROM cand) AS examined, l.id AS last_id,
           floor(extract(epoch FROM l.created_at) * 1000000)::bigint AS last_us
    FROM (SELECT 1) one
    LEFT JOIN LATERAL (SELECT c.id, c.created_at FROM cand c ORDER BY c.created_at DESC, c.id DESC LIMIT 1) l ON true
)
SELECT e.examined, e.last_us, e.last_id, r.*
FROM edge e
LEFT JOIN LATERAL (
    SELECT a.id, a.queue_name, a.activity_type, a.status, a.priority, a.payload, a.metadata, a.retry_count,
           a.max_retries, a.timeout_ms,
           floor(extract(epoch FROM a.created_at) * 1000)::bigint,
           floor(extract(epoch FROM a.ready_at) * 1000)::bigint,
           floor(extract(epoch FROM a.started_at) * 1000)::bigint,
           floor(extract(epoch FROM a.finished_at) * 1000)::bigint,
           CASE WHEN a.status = 'processing' THEN floor(extract(epoch FROM a.lease_expires_at) * 1000)::bigint END,
           a.last_error, a.idempotency_key, a.parent_id,
           floor(extract(epoch FROM a.created_at) * 1000000)::bigint AS created_us
    FROM hits h JOIN runnerq_activities a ON a.id = h.id
) r ON true
ORDER BY r.created_us , r.id ;

-- name: count_status
-- How many rows match, over one range of runnerq_activities_status_listing_idx per status in $2
-- (processing: the queue's rows in lease_idx, sorted).
-- $1 queue, $2 statuses, $3 rows to examine, $4 rows to return, $5/$6
-- created range (epoch ms; NULL: open), $7/$8 cursor (created_at in epoch
-- microseconds, id; NULL: from the start), $9 priorities and $10 metadata
-- (a jsonb object) checked row by row (NULL: any).
-- $7/$8 are NULL. Each range keeps its ORDER BY (an ordered index scan, which
-- stops at its LIMIT; unordered, the planner may pick a bitmap scan that reads
-- the whole range), but their union has none, so the outer LIMIT $3 stops the
-- nested loop as soon as $3 rows came back. Returns (rows examined,
-- rows matching the row-by-row conditions, at most $4).
WITH cand AS MATERIALIZED (
    SELECT x.id, x.created_at, x.status, x.priority, x.ok
    FROM (
        SELECT r.*
        FROM (SELECT u.st FROM unnest($2::text[]) AS u(st) WHERE u.st <> 'processing') s
        CROSS JOIN LATERAL (
            SELECT a.id, a.created_at, a.status, a.priority,
                   ($9::smallint[] IS NULL OR a.priority = ANY ($9::smallint[]))
                   AND ($10::jsonb IS NULL OR a.metadata::jsonb @> $10::jsonb) AS ok
            FROM runnerq_activities a
            WHERE a.queue_name = $1::text AND a.status = s.st AND a.status <> 'processing'
              AND a.created_at >= coalesce(timestamptz 'epoch' + $5::bigint * interval '1 millisecond', '-infinity')
              AND (a.created_at, a.id) < (least(coalesce(timestamptz 'epoch' + $7::bigint * interval '1 microsecond', 'infinity'), coalesce(timestamptz 'epoch' + $6::bigint * interval '1 millisecond', 'infinity')),
                                          CASE WHEN coalesce(timestamptz 'epoch' + $7::bigint * interval '1 microsecond', 'infinity') < coalesce(timestamptz 'epoch' + $6::bigint * interval '1 millisecond', 'infinity')
                                               THEN $8::uuid ELSE '00000000-0000-0000-0000-000000000000' END)
            ORDER BY a.created_at DESC, a.id DESC
            LIMIT $3::integer
        ) r
        UNION ALL
        (
            SELECT a.id, a.created_at, a.status, a.priority,
                   ($9::smallint[] IS NULL OR a.priority = ANY ($9::smallint[]))
                   AND ($10::jsonb IS NULL OR a.metadata::jsonb @> $10::jsonb) AS ok
            FROM runnerq_activities a
            WHERE 'processing' = ANY ($2::text[]) AND a.queue_name = $1::text AND a.status = 'processing'
              AND a.created_at >= coalesce(timestamptz 'epoch' + $5::bigint * interval '1 millisecond', '-infinity')
              AND (a.created_at, a.id) < (least(coalesce(timestamptz 'epoch' + $7::bigint * interval '1 microsecond', 'infinity'), coalesce(timestamptz 'epoch' + $6::bigint * interval '1 millisecond', 'infinity')),
                                          CASE WHEN coalesce(timestamptz 'epoch' + $7::bigint * interval '1 microsecond', 'infinity') < coalesce(timestamptz 'epoch' + $6::bigint * interval '1 millisecond', 'infinity')
                                               THEN $8::uuid ELSE '00000000-0000-0000-0000-000000000000' END)
            ORDER BY a.created_at DESC, a.id DESC
            LIMIT $3::integer
        )
    ) x
    LIMIT $3::integer
)
SELECT count(*), least(count(*) FILTER (WHERE ok), $4::integer) FROM cand;

-- name: count_type
-- How many rows match, over one range of runnerq_activities_type_listing_idx per (type in $11, status in $2)
-- (processing: the queue's rows in lease_idx, sorted).
-- $1 queue, $2 statuses, $3 rows to examine, $4 rows to return, $5/$6
-- created range (epoch ms; NULL: open), $7/$8 cursor (created_at in epoch
-- microseconds, id; NULL: from the start), $9 priorities and $10 metadata
-- (a jsonb object) checked row by row (NULL: any).
-- $7/$8 are NULL. Each range keeps its ORDER BY (an ordered index scan, which
-- stops at its LIMIT; unordered, the planner may pick a bitmap scan that reads
-- the whole range), but their union has none, so the outer LIMIT $3 stops the
-- nested loop as soon as $3 rows came back. Returns (rows examined,
-- rows matching the row-by-row conditions, at most $4).
WITH cand AS MATERIALIZED (
    SELECT x.id, x.created_at, x.status, x.priority, x.ok
    FROM (
        SELECT r.*
        FROM unnest($11::text[]) AS t(typ)
        CROSS JOIN (SELECT u.st FROM unnest($2::text[]) AS u(st) WHERE u.st <> 'processing') s
        CROSS JOIN LATERAL (
            SELECT a.id, a.created_at, a.status, a.priority,
                   ($9::smallint[] IS NULL OR a.priority = ANY ($9::smallint[]))
                   AND ($10::jsonb IS NULL OR a.metadata::jsonb @> $10::jsonb) AS ok
            FROM runnerq_activities a
            WHERE a.queue_name = $1::text AND a.activity_type = t.typ AND a.status = s.st AND a.status <> 'processing'
              AND a.created_at >= coalesce(timestamptz 'epoch' + $5::bigint * interval '1 millisecond', '-infinity')
              AND (a.created_at, a.id) < (least(coalesce(timestamptz 'epoch' + $7::bigint * interval '1 microsecond', 'infinity'), coalesce(timestamptz 'epoch' + $6::bigint * interval '1 millisecond', 'infinity')),
                                          CASE WHEN coalesce(timestamptz 'epoch' + $7::bigint * interval '1 microsecond', 'infinity') < coalesce(timestamptz 'epoch' + $6::bigint * interval '1 millisecond', 'infinity')
                                               THEN $8::uuid ELSE '00000000-0000-0000-0000-000000000000' END)
            ORDER BY a.created_at DESC, a.id DESC
            LIMIT $3::integer
        ) r
        UNION ALL
        (
            SELECT a.id, a.created_at, a.status, a.priority,
                   ($9::smallint[] IS NULL OR a.priority = ANY ($9::smallint[]))
                   AND ($10::jsonb IS NULL OR a.metadata::jsonb @> $10::jsonb) AS ok
            FROM runnerq_activities a
            WHERE 'processing' = ANY ($2::text[]) AND a.queue_name = $1::text AND a.status = 'processing'
              AND a.activity_type = ANY ($11::text[])
              AND a.created_at >= coalesce(timestamptz 'epoch' + $5::bigint * interval '1 millisecond', '-infinity')
              AND (a.created_at, a.id) < (least(coalesce(timestamptz 'epoch' + $7::bigint * interval '1 microsecond', 'infinity'), coalesce(timestamptz 'epoch' + $6::bigint * interval '1 millisecond', 'infinity')),
                                          CASE WHEN coalesce(timestamptz 'epoch' + $7::bigint * interval '1 microsecond', 'infinity') < coalesce(timestamptz 'epoch' + $6::bigint * interval '1 millisecond', 'infinity')
                                               THEN $8::uuid ELSE '00000000-0000-0000-0000-000000000000' END)
            ORDER BY a.created_at DESC, a.id DESC
            LIMIT $3::integer
        )
    ) x
    LIMIT $3::integer
)
SELECT count(*), least(count(*) FILTER (WHERE ok), $4::integer) FROM cand;

-- name: count_parent
-- How many rows match, over the children of $11 (runnerq_activities_parent_idx), statuses $2, types $12 (NULL: any).
-- $1 queue, $2 statuses, $3 rows to examine, $4 rows to return, $5/$6
-- created range (epoch ms; NULL: open), $7/$8 cursor (created_at in epoch
-- microseconds, id; NULL: from the start), $9 priorities and $10 metadata
-- (a jsonb object) checked row by row (NULL: any).
-- $7/$8 are NULL. Each range keeps its ORDER BY (an ordered index scan, which
-- stops at its LIMIT; unordered, the planner may pick a bitmap scan that reads
-- the whole range), but their union has none, so the outer LIMIT $3 stops the
-- nested loop as soon as $3 rows came back. Returns (rows examined,
-- rows matching the row-by-row conditions, at most $4).
WITH cand AS MATERIALIZED (
    SELECT a.id, a.created_at, a.status, a.priority,
           ($9::smallint[] IS NULL OR a.priority = ANY ($9::smallint[]))
               AND ($10::jsonb IS NULL OR a.metadata::jsonb @> $10::jsonb) AS ok
    FROM runnerq_activities a
    WHERE a.parent_id = $11::uuid AND a.queue_name = $1::text AND a.status = ANY ($2::text[])
      AND ($12::text[] IS NULL OR a.activity_type = ANY ($12::text[]))
      AND a.created_at >= coalesce(timestamptz 'epoch' + $5::bigint * interval '1 millisecond', '-infinity')
      AND (a.created_at, a.id) < (least(coalesce(timestamptz 'epoch' + $7::bigint * interval '1 microsecond', 'infinity'), coalesce(timestamptz 'epoch' + $6::bigint * interval '1 millisecond', 'infinity')),
                                  CASE WHEN coalesce(timestamptz 'epoch' + $7::bigint * interval '1 microsecond', 'infinity') < coalesce(timestamptz 'epoch' + $6::bigint * interval '1 millisecond', 'infinity')
                                       THEN $8::uuid ELSE '00000000-0000-0000-0000-000000000000' END)
    ORDER BY a.created_at DESC, a.id DESC
    LIMIT $3::integer
)
SELECT count(*), least(count(*) FILTER (WHERE ok), $4::integer) FROM cand;

-- name: count_ids
-- How many rows match, over the ids $11 (primary key), statuses $2, types $12 (NULL: any).
-- $1 queue, $2 statuses, $3 rows to examine, $4 rows to return, $5/$6
-- created range (epoch ms; NULL: open), $7/$8 cursor (created_at in epoch
-- microseconds, id; NULL: from the start), $9 priorities and $10 metadata
-- (a jsonb object) checked row by row (NULL: any).
-- $7/$8 are NULL. Each range keeps its ORDER BY (an ordered index scan, which
-- stops at its LIMIT; unordered, the planner may pick a bitmap scan that reads
-- the whole range), but their union has none, so the outer LIMIT $3 stops the
-- nested loop as soon as $3 rows came back. Returns (rows examined,
-- rows matching the row-by-row conditions, at most $4).
WITH cand AS MATERIALIZED (
    SELECT a.id, a.created_at, a.status, a.priority,
           ($9::smallint[] IS NULL OR a.priority = ANY ($9::smallint[]))
               AND ($10::jsonb IS NULL OR a.metadata::jsonb @> $10::jsonb) AS ok
    FROM runnerq_activities a
    WHERE a.id = ANY ($11::uuid[]) AND a.queue_name = $1::text AND a.status = ANY ($2::text[])
      AND ($12::text[] IS NULL OR a.activity_type = ANY ($12::text[]))
      AND a.created_at >= coalesce(timestamptz 'epoch' + $5::bigint * interval '1 millisecond', '-infinity')
      AND (a.created_at, a.id) < (least(coalesce(timestamptz 'epoch' + $7::bigint * interval '1 microsecond', 'infinity'), coalesce(timestamptz 'epoch' + $6::bigint * interval '1 millisecond', 'infinity')),
                                  CASE WHEN coalesce(timestamptz 'epoch' + $7::bigint * interval '1 microsecond', 'infinity') < coalesce(timestamptz 'epoch' + $6::bigint * interval '1 millisecond', 'infinity')
                                       THEN $8::uuid ELSE '00000000-0000-0000-0000-000000000000' END)
    LIMIT $3::integer
)
SELECT count(*), least(count(*) FILTER (WHERE ok), $4::integer) FROM cand;

-- name: count_plain_status
-- count_status without row-by-row conditions ($9/$10 NULL, unused): it reads
-- only runnerq_activities_status_listing_idx (an index-only scan where the
-- visibility map allows), never the rows; processing rows come from lease_idx.
WITH cand AS MATERIALIZED (
    SELECT 1
    FROM (
        SELECT r.*
        FROM (SELECT u.st FROM unnest($2::text[]) AS u(st) WHERE u.st <> 'processing') s
        CROSS JOIN LATERAL (
            SELECT 1
            FROM runnerq_activities a
            WHERE a.queue_name = $1::text AND a.status = s.st AND a.status <> 'processing'
              AND a.created_at >= coalesce(timestamptz 'epoch' + $5::bigint * interval '1 millisecond', '-infinity')
              AND (a.created_at, a.id) < (least(coalesce(timestamptz 'epoch' + $7::bigint * interval '1 microsecond', 'infinity'), coalesce(timestamptz 'epoch' + $6::bigint * interval '1 millisecond', 'infinity')),
                                          CASE WHEN coalesce(timestamptz 'epoch' + $7::bigint * interval '1 microsecond', 'infinity') < coalesce(timestamptz 'epoch' + $6::bigint * interval '1 millisecond', 'infinity')
                                               THEN $8::uuid ELSE '00000000-0000-0000-0000-000000000000' END)
            ORDER BY a.created_at DESC, a.id DESC
            LIMIT $3::integer
        ) r
        UNION ALL
        (
            SELECT 1
            FROM runnerq_activities a
            WHERE 'processing' = ANY ($2::text[]) AND a.queue_name = $1::text AND a.status = 'processing'
              AND a.created_at >= coalesce(timestamptz 'epoch' + $5::bigint * interval '1 millisecond', '-infinity')
              AND (a.created_at, a.id) < (least(coalesce(timestamptz 'epoch' + $7::bigint * interval '1 microsecond', 'infinity'), coalesce(timestamptz 'epoch' + $6::bigint * interval '1 millisecond', 'infinity')),
                                          CASE WHEN coalesce(timestamptz 'epoch' + $7::bigint * interval '1 microsecond', 'infinity') < coalesce(timestamptz 'epoch' + $6::bigint * interval '1 millisecond', 'infinity')
                                               THEN $8::uuid ELSE '00000000-0000-0000-0000-000000000000' END)
            ORDER BY a.created_at DESC, a.id DESC
            LIMIT $3::integer
        )
    ) x
    LIMIT $3::integer
)
SELECT count(*), least(count(*), $4::integer) FROM cand
WHERE $9::smallint[] IS NULL AND $10::jsonb IS NULL;

-- name: count_plain_type
-- count_type without row-by-row conditions ($9/$10 NULL, unused): it reads
-- only runnerq_activities_type_listing_idx (an index-only scan where the
-- visibility map allows), never the rows; processing rows come from lease_idx.
WITH cand AS MATERIALIZED (
    SELECT 1
    FROM (
        SELECT r.*
        FROM unnest($11::text[]) AS t(typ)
        CROSS JOIN (SELECT u.st FROM unnest($2::text[]) AS u(st) WHERE u.st <> 'processing') s
        CROSS JOIN LATERAL (
            SELECT 1
            FROM runnerq_activities a
            WHERE a.queue_name = $1::text AND a.activity_type = t.typ AND a.status = s.st AND a.status <> 'processing'
              AND a.created_at >= coalesce(timestamptz 'epoch' + $5::bigint * interval '1 millisecond', '-infinity')
              AND (a.created_at, a.id) < (least(coalesce(timestamptz 'epoch' + $7::bigint * interval '1 microsecond', 'infinity'), coalesce(timestamptz 'epoch' + $6::bigint * interval '1 millisecond', 'infinity')),
                                          CASE WHEN coalesce(timestamptz 'epoch' + $7::bigint * interval '1 microsecond', 'infinity') < coalesce(timestamptz 'epoch' + $6::bigint * interval '1 millisecond', 'infinity')
                                               THEN $8::uuid ELSE '00000000-0000-0000-0000-000000000000' END)
            ORDER BY a.created_at DESC, a.id DESC
            LIMIT $3::integer
        ) r
        UNION ALL
        (
            SELECT 1
            FROM runnerq_activities a
            WHERE 'processing' = ANY ($2::text[]) AND a.queue_name = $1::text AND a.status = 'processing'
              AND a.activity_type = ANY ($11::text[])
              AND a.created_at >= coalesce(timestamptz 'epoch' + $5::bigint * interval '1 millisecond', '-infinity')
              AND (a.created_at, a.id) < (least(coalesce(timestamptz 'epoch' + $7::bigint * interval '1 microsecond', 'infinity'), coalesce(timestamptz 'epoch' + $6::bigint * interval '1 millisecond', 'infinity')),
                                          CASE WHEN coalesce(timestamptz 'epoch' + $7::bigint * interval '1 microsecond', 'infinity') < coalesce(timestamptz 'epoch' + $6::bigint * interval '1 millisecond', 'infinity')
                                               THEN $8::uuid ELSE '00000000-0000-0000-0000-000000000000' END)
            ORDER BY a.created_at DESC, a.id DESC
            LIMIT $3::integer
        )
    ) x
    LIMIT $3::integer
)
SELECT count(*), least(count(*), $4::integer) FROM cand
WHERE $9::smallint[] IS NULL AND $10::jsonb IS NULL;

-- name: pick_status
-- The rows an action applies to, newest first, over one range of runnerq_activities_status_listing_idx per status in $2
-- (processing: the queue's rows in lease_idx, sorted).
-- $1 queue, $2 statuses, $3 rows to examine, $4 rows to return, $5/$6
-- created range (epoch ms; NULL: open), $7/$8 cursor (created_at in epoch
-- microseconds, id; NULL: from the start), $9 priorities and $10 metadata
-- (a jsonb object) checked row by row (NULL: any).
-- Returns up to $4 matching rows (id, status, priority), each also carrying
-- how many rows were examined and the key of the last one (to go on from
-- there when the row-by-row conditions matched too few); no match: one row
-- with only those.
WITH cand AS MATERIALIZED (
    SELECT x.id, x.created_at, x.status, x.priority, x.ok
    FROM (
        SELECT r.*
        FROM (SELECT u.st FROM unnest($2::text[]) AS u(st) WHERE u.st <> 'processing') s
        CROSS JOIN LATERAL (
            SELECT a.id, a.created_at, a.status, a.priority,
                   ($9::smallint[] IS NULL OR a.priority = ANY ($9::smallint[]))
                   AND ($10::jsonb IS NULL OR a.metadata::jsonb @> $10::jsonb) AS ok
            FROM runnerq_activities a
            WHERE a.queue_name = $1::text AND a.status = s.st AND a.status <> 'processing'
              AND a.created_at >= coalesce(timestamptz 'epoch' + $5::bigint * interval '1 millisecond', '-infinity')
              AND (a.created_at, a.id) < (least(coalesce(timestamptz 'epoch' + $7::bigint * interval '1 microsecond', 'infinity'), coalesce(timestamptz 'epoch' + $6::bigint * interval '1 millisecond', 'infinity')),
                                          CASE WHEN coalesce(timestamptz 'epoch' + $7::bigint * interval '1 microsecond', 'infinity') < coalesce(timestamptz 'epoch' + $6::bigint * interval '1 millisecond', 'infinity')
                                               THEN $8::uuid ELSE '00000000-0000-0000-0000-000000000000' END)
            ORDER BY a.created_at DESC, a.id DESC
            LIMIT $3::integer
        ) r
        UNION ALL
        (
            SELECT a.id, a.created_at, a.status, a.priority,
                   ($9::smallint[] IS NULL OR a.priority = ANY ($9::smallint[]))
                   AND ($10::jsonb IS NULL OR a.metadata::jsonb @> $10::jsonb) AS ok
            FROM runnerq_activities a
            WHERE 'processing' = ANY ($2::text[]) AND a.queue_name = $1::text AND a.status = 'processing'
              AND a.created_at >= coalesce(timestamptz 'epoch' + $5::bigint * interval '1 millisecond', '-infinity')
              AND (a.created_at, a.id) < (least(coalesce(timestamptz 'epoch' + $7::bigint * interval '1 microsecond', 'infinity'), coalesce(timestamptz 'epoch' + $6::bigint * interval '1 millisecond', 'infinity')),
                                          CASE WHEN coalesce(timestamptz 'epoch' + $7::bigint * interval '1 microsecond', 'infinity') < coalesce(timestamptz 'epoch' + $6::bigint * interval '1 millisecond', 'infinity')
                                               THEN $8::uuid ELSE '00000000-0000-0000-0000-000000000000' END)
            ORDER BY a.created_at DESC, a.id DESC
            LIMIT $3::integer
        )
    ) x
    ORDER BY x.created_at DESC, x.id DESC
    LIMIT $3::integer
), hits AS (
    SELECT c.id, c.created_at, c.status, c.priority FROM cand c WHERE c.ok
    ORDER BY c.created_at DESC, c.id DESC LIMIT $4::integer
), edge AS (
    SELECT (SELECT count(*) FROM cand) AS examined, l.id AS last_id,
           floor(extract(epoch FROM l.created_at) * 1000000)::bigint AS last_us
    FROM (SELECT 1) one
    LEFT JOIN LATERAL (SELECT c.id, c.created_at FROM cand c ORDER BY c.created_at, c.id LIMIT 1) l ON true
)
SELECT e.examined, e.last_us, e.last_id, h.id, h.status, h.priority
FROM edge e LEFT JOIN hits h ON true
ORDER BY h.created_at DESC, h.id DESC;

-- name: pick_type
-- The rows an action applies to, newest first, over one range of runnerq_activities_type_listing_idx per (type in $11, status in $2)
-- (processing: the queue's rows in lease_idx, sorted).
-- $1 queue, $2 statuses, $3 rows to examine, $4 rows to return, $5/$6
-- created range (epoch ms; NULL: open), $7/$8 cursor (created_at in epoch
-- microseconds, id; NULL: from the start), $9 priorities and $10 metadata
-- (a jsonb object) checked row by row (NULL: any).
-- Returns up to $4 matching rows (id, status, priority), each also carrying
-- how many rows were examined and the key of the last one (to go on from
-- there when the row-by-row conditions matched too few); no match: one row
-- with only those.
WITH cand AS MATERIALIZED (
    SELECT x.id, x.created_at, x.status, x.priority, x.ok
    FROM (
        SELECT r.*
        FROM unnest($11::text[]) AS t(typ)
        CROSS JOIN (SELECT u.st FROM unnest($2::text[]) AS u(st) WHERE u.st <> 'processing') s
        CROSS JOIN LATERAL (
            SELECT a.id, a.created_at, a.status, a.priority,
                   ($9::smallint[] IS NULL OR a.priority = ANY ($9::smallint[]))
                   AND ($10::jsonb IS NULL OR a.metadata::jsonb @> $10::jsonb) AS ok
            FROM runnerq_activities a
            WHERE a.queue_name = $1::text AND a.activity_type = t.typ AND a.status = s.st AND a.status <> 'processing'
              AND a.created_at >= coalesce(timestamptz 'epoch' + $5::bigint * interval '1 millisecond', '-infinity')
              AND (a.created_at, a.id) < (least(coalesce(timestamptz 'epoch' + $7::bigint * interval '1 microsecond', 'infinity'), coalesce(timestamptz 'epoch' + $6::bigint * interval '1 millisecond', 'infinity')),
                                          CASE WHEN coalesce(timestamptz 'epoch' + $7::bigint * interval '1 microsecond', 'infinity') < coalesce(timestamptz 'epoch' + $6::bigint * interval '1 millisecond', 'infinity')
                                               THEN $8::uuid ELSE '00000000-0000-0000-0000-000000000000' END)
            ORDER BY a.created_at DESC, a.id DESC
            LIMIT $3::integer
        ) r
        UNION ALL
        (
            SELECT a.id, a.created_at, a.status, a.priority,
                   ($9::smallint[] IS NULL OR a.priority = ANY ($9::smallint[]))
                   AND ($10::jsonb IS NULL OR a.metadata::jsonb @> $10::jsonb) AS ok
            FROM runnerq_activities a
            WHERE 'processing' = ANY ($2::text[]) AND a.queue_name = $1::text AND a.status = 'processing'
              AND a.activity_type = ANY ($11::text[])
              AND a.created_at >= coalesce(timestamptz 'epoch' + $5::bigint * interval '1 millisecond', '-infinity')
              AND (a.created_at, a.id) < (least(coalesce(timestamptz 'epoch' + $7::bigint * interval '1 microsecond', 'infinity'), coalesce(timestamptz 'epoch' + $6::bigint * interval '1 millisecond', 'infinity')),
                                          CASE WHEN coalesce(timestamptz 'epoch' + $7::bigint * interval '1 microsecond', 'infinity') < coalesce(timestamptz 'epoch' + $6::bigint * interval '1 millisecond', 'infinity')
                                               THEN $8::uuid ELSE '00000000-0000-0000-0000-000000000000' END)
            ORDER BY a.created_at DESC, a.id DESC
            LIMIT $3::integer
        )
    ) x
    ORDER BY x.created_at DESC, x.id DESC
    LIMIT $3::integer
), hits AS (
    SELECT c.id, c.created_at, c.status, c.priority FROM cand c WHERE c.ok
    ORDER BY c.created_at DESC, c.id DESC LIMIT $4::integer
), edge AS (
    SELECT (SELECT count(*) FROM cand) AS examined, l.id AS last_id,
           floor(extract(epoch FROM l.created_at) * 1000000)::bigint AS last_us
    FROM (SELECT 1) one
    LEFT JOIN LATERAL (SELECT c.id, c.created_at FROM cand c ORDER BY c.created_at, c.id LIMIT 1) l ON true
)
SELECT e.examined, e.last_us, e.last_id, h.id, h.status, h.priority
FROM edge e LEFT JOIN hits h ON true
ORDER BY h.created_at DESC, h.id DESC;

-- name: pick_parent
-- The rows an action applies to, newest first, over the children of $11 (runnerq_activities_parent_idx), statuses $2, types $12 (NULL: any).
-- $1 queue, $2 statuses, $3 rows to examine, $4 rows to return, $5/$6
-- created range (epoch ms; NULL: open), $7/$8 cursor (created_at in epoch
-- microseconds, id; NULL: from the start), $9 priorities and $10 metadata
-- (a jsonb object) checked row by row (NULL: any).
-- Returns up to $4 matching rows (id, status, priority), each also carrying
-- how many rows were examined and the key of the last one (to go on from
-- there when the row-by-row conditions matched too few); no match: one row
-- with only those.
WITH cand AS MATERIALIZED (
    SELECT a.id, a.created_at, a.status, a.priority,
           ($9::smallint[] IS NULL OR a.priority = ANY ($9::smallint[]))
               AND ($10::jsonb IS NULL OR a.metadata::jsonb @> $10::jsonb) AS ok
    FROM runnerq_activities a
    WHERE a.parent_id = $11::uuid AND a.queue_name = $1::text AND a.status = ANY ($2::text[])
      AND ($12::text[] IS NULL OR a.activity_type = ANY ($12::text[]))
      AND a.created_at >= coalesce(timestamptz 'epoch' + $5::bigint * interval '1 millisecond', '-infinity')
      AND (a.created_at, a.id) < (least(coalesce(timestamptz 'epoch' + $7::bigint * interval '1 microsecond', 'infinity'), coalesce(timestamptz 'epoch' + $6::bigint * interval '1 millisecond', 'infinity')),
                                  CASE WHEN coalesce(timestamptz 'epoch' + $7::bigint * interval '1 microsecond', 'infinity') < coalesce(timestamptz 'epoch' + $6::bigint * interval '1 millisecond', 'infinity')
                                       THEN $8::uuid ELSE '00000000-0000-0000-0000-000000000000' END)
    ORDER BY a.created_at DESC, a.id DESC
    LIMIT $3::integer
), hits AS (
    SELECT c.id, c.created_at, c.status, c.priority FROM cand c WHERE c.ok
    ORDER BY c.created_at DESC, c.id DESC LIMIT $4::integer
), edge AS (
    SELECT (SELECT count(*) FROM cand) AS examined, l.id AS last_id,
           floor(extract(epoch FROM l.created_at) * 1000000)::bigint AS last_us
    FROM (SELECT 1) one
    LEFT JOIN LATERAL (SELECT c.id, c.created_at FROM cand c ORDER BY c.created_at, c.id LIMIT 1) l ON true
)
SELECT e.examined, e.last_us, e.last_id, h.id, h.status, h.priority
FROM edge e LEFT JOIN hits h ON true
ORDER BY h.created_at DESC, h.id DESC;

-- name: pick_ids
-- The rows an action applies to, newest first, over the ids $11 (primary key), statuses $2, types $12 (NULL: any).
-- $1 queue, $2 statuses, $3 rows to examine, $4 rows to return, $5/$6
-- created range (epoch ms; NULL: open), $7/$8 cursor (created_at in epoch
-- microseconds, id; NULL: from the start), $9 priorities and $10 metadata
-- (a jsonb object) checked row by row (NULL: any).
-- Returns up to $4 matching rows (id, status, priority), each also carrying
-- how many rows were examined and the key of the last one (to go on from
-- there when the row-by-row conditions matched too few); no match: one row
-- with only those.
WITH cand AS MATERIALIZED (
    SELECT a.id, a.created_at, a.status, a.priority,
           ($9::smallint[] IS NULL OR a.priority = ANY ($9::smallint[]))
               AND ($10::jsonb IS NULL OR a.metadata::jsonb @> $10::jsonb) AS ok
    FROM runnerq_activities a
    WHERE a.id = ANY ($11::uuid[]) AND a.queue_name = $1::text AND a.status = ANY ($2::text[])
      AND ($12::text[] IS NULL OR a.activity_type = ANY ($12::text[]))
      AND a.created_at >= coalesce(timestamptz 'epoch' + $5::bigint * interval '1 millisecond', '-infinity')
      AND (a.created_at, a.id) < (least(coalesce(timestamptz 'epoch' + $7::bigint * interval '1 microsecond', 'infinity'), coalesce(timestamptz 'epoch' + $6::bigint * interval '1 millisecond', 'infinity')),
                                  CASE WHEN coalesce(timestamptz 'epoch' + $7::bigint * interval '1 microsecond', 'infinity') < coalesce(timestamptz 'epoch' + $6::bigint * interval '1 millisecond', 'infinity')
                                       THEN $8::uuid ELSE '00000000-0000-0000-0000-000000000000' END)
    ORDER BY a.created_at DESC, a.id DESC
    LIMIT $3::integer
), hits AS (
    SELECT c.id, c.created_at, c.status, c.priority FROM cand c WHERE c.ok
    ORDER BY c.created_at DESC, c.id DESC LIMIT $4::integer
), edge AS (
    SELECT (SELECT count(*) FROM cand) AS examined, l.id AS last_id,
           floor(extract(epoch FROM l.created_at) * 1000000)::bigint AS last_us
    FROM (SELECT 1) one
    LEFT JOIN LATERAL (SELECT c.id, c.created_at FROM cand c ORDER BY c.created_at, c.id LIMIT 1) l ON true
)
SELECT e.examined, e.last_us, e.last_id, h.id, h.status, h.priority
FROM edge e LEFT JOIN hits h ON true
ORDER BY h.created_at DESC, h.id DESC;

-- name: retry_many
-- $1 queue, $2 ids: failed, dead-lettered or cancelled ones back to pending,
-- ready now, retries counted from 0 (the errors stay in the events). One
-- retry_requested event per activity (detail: its old status).
WITH done AS (
    UPDATE runnerq_activities a
    SET status = 'pending', retry_count = 0, ready_at = now(), finished_at = NULL, dead_lettered_at = NULL,
        result = NULL, claim_token = NULL, lease_expires_at = NULL, cancel_requested_at = NULL
    FROM runnerq_activities old
    WHERE a.id = ANY ($2::uuid[]) AND old.id = a.id AND a.queue_name = $1::text
      AND a.status IN ('failed', 'dead_letter', 'cancelled')
    RETURNING a.id, old.status AS was
), ev AS (
    INSERT INTO runnerq_events (queue_name, event_type, at, activity_ids, details)
    SELECT $1::text, 'retry_requested', now(), array_agg(id), array_agg(was) FROM done HAVING count(*) > 0
), notes AS (
    SELECT pg_notify('runnerq_work', $1::text) FROM (SELECT 1 FROM done LIMIT 1) s
)
SELECT coalesce(array_agg(id), '{}') AS ids, (SELECT count(*) FROM notes) AS notified FROM done;

-- name: cancel_many
-- $1 queue, $2 ids: pending, scheduled and retrying ones end cancelled (event
-- cancelled, result waiters notified); processing ones not yet asked are
-- marked cancel requested (event cancel_requested) for their engine's next
-- heartbeat.
WITH done AS (
    UPDATE runnerq_activities a
    SET status = CASE WHEN a.status = 'processing' THEN 'processing' ELSE 'cancelled' END,
        finished_at = CASE WHEN a.status = 'processing' THEN a.finished_at ELSE now() END,
        cancel_requested_at = CASE WHEN a.status = 'processing' THEN now() END,
        claim_token = CASE WHEN a.status = 'processing' THEN a.claim_token END,
        lease_expires_at = CASE WHEN a.status = 'processing' THEN a.lease_expires_at END
    WHERE a.id = ANY ($2::uuid[]) AND a.queue_name = $1::text
      AND (a.status IN ('pending', 'scheduled', 'retrying')
           OR (a.status = 'processing' AND a.cancel_requested_at IS NULL))
    RETURNING a.id, CASE WHEN a.status = 'processing' THEN 'cancel_requested' ELSE 'cancelled' END AS kind
), ev AS (
    INSERT INTO runnerq_events (queue_name, event_type, at, activity_ids)
    SELECT $1::text, kind, now(), array_agg(id) FROM done GROUP BY kind
), notes AS (
    SELECT pg_notify('runnerq_results', $1::text) FROM (SELECT 1 FROM done WHERE kind = 'cancelled' LIMIT 1) s
)
SELECT coalesce(array_agg(id), '{}') AS ids, (SELECT count(*) FROM notes) AS notified FROM done;

-- name: run_now_many
-- $1 queue, $2 ids: scheduled and retrying ones become pending, ready now
-- (event run_now, detail: the old status).
WITH done AS (
    UPDATE runnerq_activities a
    SET status = 'pending', ready_at = now()
    FROM runnerq_activities old
    WHERE a.id = ANY ($2::uuid[]) AND old.id = a.id AND a.queue_name = $1::text
      AND a.status IN ('scheduled', 'retrying')
    RETURNING a.id, old.status AS was
), ev AS (
    INSERT INTO runnerq_events (queue_name, event_type, at, activity_ids, details)
    SELECT $1::text, 'run_now', now(), array_agg(id), array_agg(was) FROM done HAVING count(*) > 0
), notes AS (
    SELECT pg_notify('runnerq_work', $1::text) FROM (SELECT 1 FROM done LIMIT 1) s
)
SELECT coalesce(array_agg(id), '{}') AS ids, (SELECT count(*) FROM notes) AS notified FROM done;

-- name: set_priority_many
-- $1 queue, $2 ids, $3 priority: only activities that have not started and
-- are not at $3 already (event priority_changed, detail "old->new"). The
-- dequeue index re-sorts them by itself.
WITH done AS (
    UPDATE runnerq_activities a
    SET priority = $3::smallint
    FROM runnerq_activities old
    WHERE a.id = ANY ($2::uuid[]) AND old.id = a.id AND a.queue_name = $1::text
      AND a.status IN ('pending', 'scheduled', 'retrying') AND a.priority <> $3::smallint
    RETURNING a.id, old.priority::text || '->' || $3::smallint::text AS change, a.ready_at
), ev AS (
    INSERT INTO runnerq_events (queue_name, event_type, at, activity_ids, details)
    SELECT $1::text, 'priority_changed', now(), array_agg(id), array_agg(change) FROM done HAVING count(*) > 0
), notes AS (
    SELECT pg_notify('runnerq_work', $1::text) FROM (SELECT 1 FROM done WHERE ready_at <= now() LIMIT 1) s
)
SELECT coalesce(array_agg(id), '{}') AS ids, (SELECT count(*) FROM notes) AS notified FROM done;

-- name: delete_many
-- $1 queue, $2 ids: finished activities, with their idempotency key rows
-- (only where the key still names them). Their positions in the event batch
-- rows become NULL, so ids of other activities' events stay as they are
-- (batch id * 2^20 + position) and the GIN index forgets them; unless $3
-- (pruning: nothing goes to the stream), one "deleted" batch row goes to the
-- live stream. Each batch row is rewritten with a join of its ids against
-- the deleted ones (not "= ANY" per element: a prune batch of 1,000 against
-- claim and ack rows of 1,000 ids each was a million comparisons per row).
-- Returns the deleted ids and the event batches left without any activity
-- (delete_empty_events).
WITH del AS (
    DELETE FROM runnerq_activities a
    WHERE a.id = ANY ($2::uuid[]) AND a.queue_name = $1::text
      AND a.status IN ('completed', 'failed', 'dead_letter', 'cancelled')
    RETURNING a.id, a.activity_type, a.idempotency_key
), gone AS (
    SELECT coalesce(array_agg(id), '{}') AS ids FROM del
), keys AS (
    DELETE FROM runnerq_idempotency k USING del
    WHERE k.queue_name = $1::text AND k.activity_type = del.activity_type AND k.key = del.idempotency_key
      AND k.activity_id = del.id
), evs AS (
    UPDATE runnerq_events e
    SET activity_ids = ARRAY(SELECT CASE WHEN d.id IS NULL THEN u.aid END
                             FROM unnest(e.activity_ids) WITH ORDINALITY AS u(aid, ord)
                             LEFT JOIN unnest(g.ids) AS d(id) ON d.id = u.aid
                             ORDER BY u.ord),
        -- a deleted activity's traceback goes with its position (migration 0013)
        tracebacks = CASE WHEN e.tracebacks IS NOT NULL
                          THEN ARRAY(SELECT CASE WHEN d.id IS NULL THEN e.tracebacks[u.ord] END
                                     FROM unnest(e.activity_ids) WITH ORDINALITY AS u(aid, ord)
                                     LEFT JOIN unnest(g.ids) AS d(id) ON d.id = u.aid
                                     ORDER BY u.ord) END
    FROM gone g
    WHERE e.activity_ids && g.ids
    RETURNING e.id, cardinality(array_remove(e.activity_ids, NULL)) = 0 AS empty
), ev AS (
    INSERT INTO runnerq_events (queue_name, event_type, at, activity_ids)
    SELECT $1::text, 'deleted', now(), g.ids FROM gone g WHERE cardinality(g.ids) > 0 AND NOT $3::boolean
)
SELECT (SELECT ids FROM gone) AS ids,
       coalesce((SELECT array_agg(id) FROM evs WHERE empty), '{}') AS empty_batches;

-- name: delete_empty_events
-- $1 event batch ids: batch rows that name no activity any more.
DELETE FROM runnerq_events
WHERE id = ANY ($1::bigint[]) AND cardinality(array_remove(activity_ids, NULL)) = 0;

-- name: prune_pick
-- $1 queue, $2 finished statuses, $3 age in milliseconds, $4 limit: ids of
-- activities that finished before now - $3, oldest first per status, locked
-- for the delete that follows in the same transaction (delete_many with
-- $3 = true). One ordered range scan of runnerq_activities_finished_idx per
-- status (migration 0003) that stops at the limit: it reads the rows it
-- returns, whatever the size of the rest of the queue.
SELECT p.id
FROM unnest($2::text[]) AS s(status)
CROSS JOIN LATERAL (
    SELECT a.id FROM runnerq_activities a
    WHERE a.queue_name = $1::text AND a.status = s.status
      AND a.status IN ('completed', 'failed', 'dead_letter', 'cancelled')
      AND a.finished_at < now() - $3::bigint * interval '1 millisecond'
    ORDER BY a.finished_at
    LIMIT $4::integer
    FOR UPDATE SKIP LOCKED
) p
LIMIT $4::integer;

-- name: prune_events
-- $1 queue, $2 age in milliseconds, $3 limit: event batch rows of the queue
-- recorded before now - $2 (runnerq_events_at_idx). Returns how many went.
WITH old AS (
    SELECT ctid AS row_ctid FROM runnerq_events
    WHERE queue_name = $1::text AND at < now() - $2::bigint * interval '1 millisecond'
    LIMIT $3::integer
), gone AS (
    DELETE FROM runnerq_events WHERE ctid = ANY (ARRAY(SELECT row_ctid FROM old)) RETURNING 1
)
SELECT count(*) FROM gone;

-- name: hold
-- $1 queue, $2 purpose, $3 holder, $4 ttl in milliseconds: take the hold if
-- it is free or expired, renew it if $3 holds it. One row when $3 holds it now.
INSERT INTO runnerq_holds AS h (queue_name, purpose, holder, expires_at)
VALUES ($1::text, $2::text, $3::text, now() + $4::bigint * interval '1 millisecond')
ON CONFLICT (queue_name, purpose) DO UPDATE
SET holder = excluded.holder, expires_at = excluded.expires_at
WHERE h.holder = excluded.holder OR h.expires_at <= now()
RETURNING 1;
-- name: register_worker
-- One engine's registry entry (its heartbeat), dropping expired entries first:
-- $1 queue, $2 worker id, $3 host, $4 pid, $5 types, $6 in flight, $7 concurrency,
-- $8 started, $9 last seen (epoch ms), $10 time to live (ms, from now() on the server).
WITH expired AS (
    DELETE FROM runnerq_workers WHERE expires_at <= now()
)
INSERT INTO runnerq_workers (queue_name, worker_id, host, pid, activity_types, in_flight, concurrency,
                             started_at, last_seen, expires_at)
VALUES ($1::text, $2::text, $3::text, $4::integer, $5::text[], $6::integer, $7::integer,
        'epoch'::timestamptz + $8::bigint * interval '1 millisecond',
        'epoch'::timestamptz + $9::bigint * interval '1 millisecond',
        now() + $10::bigint * interval '1 millisecond')
ON CONFLICT (queue_name, worker_id) DO UPDATE SET
    host = excluded.host, pid = excluded.pid, activity_types = excluded.activity_types,
    in_flight = excluded.in_flight, concurrency = excluded.concurrency, started_at = excluded.started_at,
    last_seen = excluded.last_seen, expires_at = excluded.expires_at;

-- name: deregister_worker
DELETE FROM runnerq_workers WHERE queue_name = $1::text AND worker_id = $2::text;

-- name: list_workers
-- Live entries of queue $1, or of every queue when $1 is NULL.
SELECT worker_id, queue_name, host, pid, activity_types, in_flight, concurrency,
       floor(extract(epoch FROM started_at) * 1000)::bigint,
       floor(extract(epoch FROM last_seen) * 1000)::bigint
FROM runnerq_workers
WHERE expires_at > now() AND ($1::text IS NULL OR queue_name = $1::text)
ORDER BY queue_name, worker_id;

-- name: ready_by_type
-- $1 queue: per type, how many activities a worker could claim now and the oldest
-- ready time (epoch ms) among them. Reads the rows of runnerq_activities_dequeue_idx
-- (pending, scheduled, retrying: the backlog), never finished ones.
SELECT activity_type, count(*), floor(extract(epoch FROM min(ready_at)) * 1000)::bigint
FROM runnerq_activities
WHERE queue_name = $1::text AND status IN ('pending', 'scheduled', 'retrying') AND ready_at <= now()
GROUP BY activity_type;

-- name: set_type_defaults
-- Replace the enqueue defaults of some types of queue $1: $2 types, $3 max retries,
-- $4 timeouts (ms), $5 priorities (arrays of one length; NULL: not set by the type).
INSERT INTO runnerq_type_defaults (queue_name, activity_type, max_retries, timeout_ms, priority)
SELECT $1::text, t, r, tm, p
FROM unnest($2::text[], $3::integer[], $4::bigint[], $5::smallint[]) AS u(t, r, tm, p)
ON CONFLICT (queue_name, activity_type) DO UPDATE SET
    max_retries = excluded.max_retries, timeout_ms = excluded.timeout_ms, priority = excluded.priority,
    updated_at = now();

-- name: get_type_defaults
-- The enqueue defaults recorded for the types of queue $1.
SELECT activity_type, max_retries, timeout_ms, priority FROM runnerq_type_defaults WHERE queue_name = $1::text;
