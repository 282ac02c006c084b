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
--   * ack outcomes: 1 completed, 2 retry, 3 failed, 4 dead letter
--     (runnerq_fast.models.AckOutcome).

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
-- $1 queue, then one array per NewActivity field (same length, item order),
-- $11 whether to send the rate-limited runnerq_work notification in this
-- statement (only when some row is ready now). Returns one row: created count.
WITH input AS (
    SELECT *
    FROM unnest($2::uuid[], $3::text[], $4::text[], $5::smallint[], $6::integer[], $7::bigint[],
                $8::bigint[], $9::text[], $10::text[]) WITH ORDINALITY
        AS t(id, activity_type, payload, priority, max_retries, timeout_ms, run_at_ms, metadata,
             idempotency_key, ord)
), clock AS (
    SELECT now() AS now, floor(extract(epoch FROM now()) * 1000)::bigint AS now_ms
), ins AS (
    INSERT INTO runnerq_activities (id, queue_name, activity_type, status, priority, max_retries, timeout_ms,
                                    payload, metadata, created_at, ready_at, idempotency_key)
    SELECT i.id, $1::text, i.activity_type,
           CASE WHEN i.run_at_ms > c.now_ms THEN 'scheduled' ELSE 'pending' END,
           i.priority, i.max_retries, i.timeout_ms, i.payload, i.metadata, c.now,
           CASE WHEN i.run_at_ms > c.now_ms THEN timestamptz 'epoch' + i.run_at_ms * interval '1 millisecond'
                ELSE c.now END,
           i.idempotency_key
    FROM input i CROSS JOIN clock c
    ORDER BY i.ord
    RETURNING id, status
), ev AS (
    INSERT INTO runnerq_events (queue_name, event_type, at, activity_ids, details)
    SELECT queue_name, event_type, now(), array_agg(id),
           CASE WHEN bool_or(detail IS NOT NULL) THEN array_agg(detail) END
    FROM (SELECT $1::text AS queue_name, 'enqueued' AS event_type, id, NULL::text AS detail FROM ins
          UNION ALL
          SELECT $1::text, 'scheduled', id, NULL FROM ins WHERE status = 'scheduled') s
    GROUP BY queue_name, event_type
    ORDER BY event_type  -- 'enqueued' takes the lower event id, so it comes first in a timeline
), notes AS (
    SELECT pg_notify('runnerq_work', $1::text)
    FROM (SELECT 1 FROM ins WHERE $11::boolean AND status = 'pending' LIMIT 1) s
)
SELECT count(*) AS created, (SELECT count(*) FROM notes) AS notified FROM ins;

-- name: notify_work
-- The trailing, rate-limited "work may be ready" notification.
SELECT pg_notify('runnerq_work', $1::text);

-- name: idempotency_upsert
-- Takes (or locks) the key row of ($1 queue, $2 type, $3 key) for this
-- transaction. The key goes to $4 (the new activity) when it is absent,
-- expired, or $6 (ALLOW_REUSE) is true; otherwise it keeps its holder.
-- Returns the holder after the statement: $4 means "create the activity".
INSERT INTO runnerq_idempotency AS k (queue_name, activity_type, key, activity_id, expires_at)
VALUES ($1::text, $2::text, $3::text, $4::uuid, now() + $5::bigint * interval '1 millisecond')
ON CONFLICT (queue_name, activity_type, key) DO UPDATE
SET activity_id = CASE WHEN k.expires_at <= now() OR $6::boolean THEN excluded.activity_id
                       ELSE k.activity_id END,
    expires_at = CASE WHEN k.expires_at <= now() OR $6::boolean THEN excluded.expires_at
                      ELSE k.expires_at END
RETURNING activity_id;

-- name: idempotency_take_over
-- Run after idempotency_upsert returned another holder ($4), while this
-- transaction holds the key row lock, so the statement's fresh snapshot sees
-- the holder's committed status. Moves the key to $5 when the holder no
-- longer exists, or when $7 (ALLOW_REUSE_ON_FAILURE) and the holder ended
-- failed, dead_letter or cancelled. Returns (taken, holder status).
WITH holder AS (
    SELECT status FROM runnerq_activities WHERE id = $4::uuid
), taken AS (
    UPDATE runnerq_idempotency
    SET activity_id = $5::uuid, expires_at = now() + $6::bigint * interval '1 millisecond'
    WHERE queue_name = $1::text AND activity_type = $2::text AND key = $3::text
      AND (NOT EXISTS (SELECT 1 FROM holder)
           OR ($7::boolean AND (SELECT status FROM holder) IN ('failed', 'dead_letter', 'cancelled')))
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM taken) AS taken, (SELECT status FROM holder) AS holder_status;

-- name: claim
-- $1 queue, $2 activity types (NULL: any), $3 limit, $4 claim token,
-- $5 worker id, $6 lease in milliseconds. Rows come back in claim order.
-- "picked" walks runnerq_activities_dequeue_idx and locks what it takes; the
-- update then finds those rows by ctid (a TID scan: a row locked by this
-- transaction cannot move), so its cost does not grow with the table. The
-- ordering columns are not changed by the claim, so the final ORDER BY
-- restores claim order.
WITH picked AS MATERIALIZED (
    SELECT ctid AS row_ctid
    FROM runnerq_activities
    WHERE queue_name = $1::text
      AND status IN ('pending', 'scheduled', 'retrying')
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
    SELECT $1::text, 'claimed', now(), array_agg(id ORDER BY priority DESC, retry_count DESC, ready_at, id), $5::text
    FROM claimed
    HAVING count(*) > 0
)
SELECT id, activity_type, payload, priority, retry_count, max_retries, timeout_ms, metadata,
       floor(extract(epoch FROM created_at) * 1000)::bigint AS created_at_ms,
       floor(extract(epoch FROM ready_at) * 1000)::bigint AS ready_at_ms
FROM claimed
ORDER BY priority DESC, retry_count DESC, ready_at, id;

-- name: ack
-- $1 queue (notification payload), then parallel arrays: ids, claim tokens,
-- outcomes, results, errors, retry times (epoch ms). Only rows still
-- processing under the same claim token change. Returns one row: the
-- accepted ids and how many notifications were sent.
WITH input AS (
    SELECT *
    FROM unnest($2::uuid[], $3::text[], $4::smallint[], $5::text[], $6::text[], $7::bigint[])
        AS t(id, claim_token, outcome, result, error, retry_at_ms)
), done AS (
    UPDATE runnerq_activities a
    SET status = CASE i.outcome WHEN 1 THEN 'completed' WHEN 2 THEN 'retrying' WHEN 3 THEN 'failed'
                                ELSE 'dead_letter' END,
        retry_count = CASE WHEN i.outcome = 2 THEN a.retry_count + 1 ELSE a.retry_count END,
        ready_at = CASE WHEN i.outcome = 2
                        THEN greatest(timestamptz 'epoch' + i.retry_at_ms * interval '1 millisecond', now())
                        ELSE a.ready_at END,
        finished_at = CASE WHEN i.outcome = 2 THEN a.finished_at ELSE now() END,
        dead_lettered_at = CASE WHEN i.outcome = 4 THEN now() ELSE a.dead_lettered_at END,
        last_error = CASE WHEN i.outcome = 2 OR i.error IS NOT NULL THEN i.error ELSE a.last_error END,
        result = CASE WHEN i.outcome = 1 THEN i.result END,
        claim_token = NULL,
        lease_expires_at = NULL
    FROM input i
    WHERE a.id = i.id AND a.status = 'processing' AND a.claim_token = i.claim_token
    RETURNING a.id, a.queue_name, a.status, a.ready_at, i.outcome, i.error
), ev AS (
    INSERT INTO runnerq_events (queue_name, event_type, at, activity_ids, details)
    SELECT queue_name, event_type, now(), array_agg(id),
           CASE WHEN bool_or(detail IS NOT NULL) THEN array_agg(detail) END
    FROM (SELECT queue_name, status AS event_type, id, error AS detail FROM done) s
    GROUP BY queue_name, event_type
), notes AS (
    SELECT pg_notify('runnerq_results', $1::text) FROM (SELECT 1 FROM done WHERE outcome <> 2 LIMIT 1) s
    UNION ALL
    SELECT pg_notify('runnerq_work', $1::text)
    FROM (SELECT 1 FROM done WHERE outcome = 2 AND ready_at <= now() LIMIT 1) s
)
SELECT coalesce(array_agg(id), '{}') AS ids, (SELECT count(*) FROM notes) AS notified FROM done;

-- name: extend_leases
-- $1 ids, $2 claim tokens, $3 lease in milliseconds. Returns the ids extended,
-- each with a lease_extended event (detail: the new expiry, epoch ms).
WITH input AS (
    SELECT * FROM unnest($1::uuid[], $2::text[]) AS t(id, claim_token)
), extended AS (
    UPDATE runnerq_activities a
    SET lease_expires_at = now() + $3::bigint * interval '1 millisecond'
    FROM input i
    WHERE a.id = i.id AND a.status = 'processing' AND a.claim_token = i.claim_token
    RETURNING a.id, a.queue_name, a.lease_expires_at
), ev AS (
    INSERT INTO runnerq_events (queue_name, event_type, at, activity_ids, details)
    SELECT queue_name, event_type, now(), array_agg(id),
           CASE WHEN bool_or(detail IS NOT NULL) THEN array_agg(detail) END
    FROM (SELECT queue_name, 'lease_extended' AS event_type, id,
                 floor(extract(epoch FROM lease_expires_at) * 1000)::bigint::text AS detail
          FROM extended) s
    GROUP BY queue_name, event_type
)
SELECT id FROM extended;

-- name: release
-- $1 ids, $2 claim tokens: back to pending without counting an attempt.
-- Returns one row: the released ids and how many notifications were sent.
WITH input AS (
    SELECT * FROM unnest($1::uuid[], $2::text[]) AS t(id, claim_token)
), rel AS (
    UPDATE runnerq_activities a
    SET status = 'pending', claim_token = NULL, lease_expires_at = NULL
    FROM input i
    WHERE a.id = i.id AND a.status = 'processing' AND a.claim_token = i.claim_token
    RETURNING a.id, a.queue_name
), ev AS (
    INSERT INTO runnerq_events (queue_name, event_type, at, activity_ids, detail)
    SELECT queue_name, 'requeued', now(), array_agg(id), 'released at shutdown' FROM rel GROUP BY queue_name
), notes AS (
    SELECT pg_notify('runnerq_work', q) FROM (SELECT DISTINCT queue_name AS q FROM rel) s
)
SELECT coalesce(array_agg(id), '{}') AS ids, (SELECT count(*) FROM notes) AS notified FROM rel;

-- name: requeue_expired
-- $1 queue, $2 limit. An expired lease counts as an attempt: dead_letter
-- (with a result row) once retry_count + 1 exceeds max_retries, else pending.
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
    SET retry_count = a.retry_count + 1,
        status = CASE WHEN a.retry_count + 1 > a.max_retries THEN 'dead_letter' ELSE 'pending' END,
        last_error = CASE WHEN a.retry_count + 1 > a.max_retries THEN 'lease expired; retries exhausted'
                          ELSE 'lease expired' END,
        finished_at = CASE WHEN a.retry_count + 1 > a.max_retries THEN now() ELSE a.finished_at END,
        dead_lettered_at = CASE WHEN a.retry_count + 1 > a.max_retries THEN now() ELSE a.dead_lettered_at END,
        claim_token = NULL,
        lease_expires_at = NULL
    FROM expired e
    WHERE a.id = e.id
    RETURNING a.id, a.queue_name, a.status, a.last_error
), ev AS (
    INSERT INTO runnerq_events (queue_name, event_type, at, activity_ids, details)
    SELECT queue_name, event_type, now(), array_agg(id),
           CASE WHEN bool_or(detail IS NOT NULL) THEN array_agg(detail) END
    FROM (SELECT queue_name, CASE WHEN status = 'dead_letter' THEN 'dead_letter' ELSE 'requeued' END AS event_type,
                 id, last_error AS detail
          FROM reaped) s
    GROUP BY queue_name, event_type
), notes AS (
    SELECT pg_notify('runnerq_results', $1::text)
    FROM (SELECT 1 FROM reaped WHERE status = 'dead_letter' LIMIT 1) s
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
-- handler's return value, failed and dead_letter the last error.
SELECT id, status, result, CASE WHEN status IN ('failed', 'dead_letter') THEN last_error END
FROM runnerq_activities
WHERE id = $1::uuid AND status IN ('completed', 'failed', 'dead_letter', 'cancelled');

-- name: get_results
-- The results among $1 ids (the ids currently awaited by this process).
SELECT id, status, result, CASE WHEN status IN ('failed', 'dead_letter') THEN last_error END
FROM runnerq_activities
WHERE id = ANY ($1::uuid[]) AND status IN ('completed', 'failed', 'dead_letter', 'cancelled');

-- name: stats
SELECT status, count(*) AS n FROM runnerq_activities WHERE queue_name = $1::text GROUP BY status;

-- name: list_activities
-- $1 queue, $2 status (NULL: any), $3 offset, $4 limit; newest first.
SELECT id, queue_name, activity_type, status, priority, payload, metadata, retry_count, max_retries, timeout_ms,
       floor(extract(epoch FROM created_at) * 1000)::bigint,
       floor(extract(epoch FROM ready_at) * 1000)::bigint,
       floor(extract(epoch FROM started_at) * 1000)::bigint,
       floor(extract(epoch FROM finished_at) * 1000)::bigint,
       CASE WHEN status = 'processing' THEN floor(extract(epoch FROM lease_expires_at) * 1000)::bigint END,
       last_error, idempotency_key
FROM runnerq_activities
WHERE queue_name = $1::text AND ($2::text IS NULL OR status = $2::text)
ORDER BY id DESC
OFFSET $3::integer
LIMIT $4::integer;

-- name: get_activity
SELECT id, queue_name, activity_type, status, priority, payload, metadata, retry_count, max_retries, timeout_ms,
       floor(extract(epoch FROM created_at) * 1000)::bigint,
       floor(extract(epoch FROM ready_at) * 1000)::bigint,
       floor(extract(epoch FROM started_at) * 1000)::bigint,
       floor(extract(epoch FROM finished_at) * 1000)::bigint,
       CASE WHEN status = 'processing' THEN floor(extract(epoch FROM lease_expires_at) * 1000)::bigint END,
       last_error, idempotency_key
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
       last_error, idempotency_key,
       floor(extract(epoch FROM dead_lettered_at) * 1000)::bigint
FROM runnerq_activities
WHERE queue_name = $1::text AND status = 'dead_letter'
ORDER BY dead_lettered_at DESC, id DESC
OFFSET $2::integer
LIMIT $3::integer;

-- name: get_events
-- The activity's events, oldest first: the batch rows that name it (GIN on
-- activity_ids), unnested to its own entry. Event id = batch id * 2^20 + position.
SELECT e.id * 1048576 + u.ord, u.aid, e.queue_name, e.event_type, floor(extract(epoch FROM e.at) * 1000)::bigint,
       coalesce(e.details[u.ord], e.detail)
FROM runnerq_events e CROSS JOIN LATERAL unnest(e.activity_ids) WITH ORDINALITY AS u(aid, ord)
WHERE e.activity_ids @> ARRAY[$1::uuid] AND u.aid = $1::uuid
ORDER BY 1;

-- name: events_after
-- $1 queue, then the stream position ($2 tx as text, $3 batch id, $4 position
-- in the batch), $5 limit: the next page in (tx, id, position) order, only
-- from transactions that ended before every transaction still running, so
-- nothing can later commit behind the position.
SELECT e.id * 1048576 + u.ord AS event_id, u.aid, e.queue_name, e.event_type,
       floor(extract(epoch FROM e.at) * 1000)::bigint, coalesce(e.details[u.ord], e.detail),
       e.tx::text, e.id, u.ord
FROM runnerq_events e CROSS JOIN LATERAL unnest(e.activity_ids) WITH ORDINALITY AS u(aid, ord)
WHERE e.queue_name = $1::text
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
