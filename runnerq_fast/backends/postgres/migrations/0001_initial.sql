-- runnerq-fast PostgreSQL schema, migration 0001: the initial tables.
--
-- Applied by runnerq_fast.backends.postgres.schema.migrate() inside one
-- transaction that holds pg_advisory_xact_lock, and recorded in
-- runnerq_migrations. Never edit an applied migration; add 0002_*.sql.
--
-- A finished activity's result is its row: status, result and last_error
-- (no separate results table: one fewer insert and index entry per ack).
--
-- Times are timestamptz and leave the database as epoch milliseconds
-- (see queries.sql). Payloads, metadata and results are already-validated
-- UTF-8 JSON stored as text: cheaper to insert than jsonb and readable in psql.

CREATE TABLE runnerq_activities (
    id               uuid        PRIMARY KEY,
    queue_name       text        NOT NULL,
    activity_type    text        NOT NULL,
    status           text        NOT NULL,
    priority         smallint    NOT NULL,
    retry_count      integer     NOT NULL DEFAULT 0,
    max_retries      integer     NOT NULL,
    timeout_ms       bigint      NOT NULL,
    payload          text        NOT NULL,
    metadata         text        NOT NULL,
    created_at       timestamptz NOT NULL,
    ready_at         timestamptz NOT NULL,   -- scheduled time, or created_at for immediate work
    started_at       timestamptz,
    finished_at      timestamptz,
    lease_expires_at timestamptz,
    claim_token      text,
    worker_id        text,
    last_error       text,
    result           text,                   -- the handler's return value (JSON) once completed
    idempotency_key  text,
    dead_lettered_at timestamptz,
    CONSTRAINT runnerq_activities_status_check CHECK (status IN (
        'pending', 'scheduled', 'processing', 'retrying', 'completed', 'failed', 'dead_letter', 'cancelled'))
);

-- A queue table turns over fast: every claim and ack leaves a dead row version
-- and dead index entries that slow the next claims until vacuum removes them.
-- Vacuum it after 2% churn instead of PostgreSQL's default 20%.
ALTER TABLE runnerq_activities SET (
    autovacuum_vacuum_scale_factor = 0.02,
    autovacuum_vacuum_insert_scale_factor = 0.02,
    autovacuum_analyze_scale_factor = 0.02
);

-- Dequeue: the claim walks this index in SPEC order (priority DESC, retry_count DESC, ready_at ASC,
-- then insertion order).
CREATE INDEX runnerq_activities_dequeue_idx
    ON runnerq_activities (queue_name, priority DESC, retry_count DESC, ready_at, id)
    WHERE status IN ('pending', 'scheduled', 'retrying');

-- Reaper: held leases by expiry.
CREATE INDEX runnerq_activities_lease_idx
    ON runnerq_activities (queue_name, lease_expires_at)
    WHERE status = 'processing';

-- Events: one row per statement and kind of transition, naming every activity
-- that made it (a claim of 500 writes one row, not 500). An event's id is
-- batch id * 2^20 + its 1-based position in activity_ids, so ids keep growing
-- and a live stream can resume after any of them; one statement may name at
-- most 2^20 - 1 activities. details is NULL or parallel to activity_ids;
-- detail holds one text for the whole batch (e.g. the claiming worker).
-- tx is the writing transaction: the live stream reads in (tx, id) order and
-- only transactions older than every running one, so an event that commits
-- late can never fall behind a reader's position (ids alone are assigned
-- before commit, in a different order). GIN on activity_ids serves one
-- activity's timeline.
CREATE TABLE runnerq_events (
    id           bigserial   NOT NULL,
    tx           xid8        NOT NULL DEFAULT pg_current_xact_id(),
    queue_name   text        NOT NULL,
    event_type   text        NOT NULL,
    at           timestamptz NOT NULL,
    activity_ids uuid[]      NOT NULL,
    details      text[],
    detail       text
);

CREATE INDEX runnerq_events_id_brin ON runnerq_events USING brin (id);
CREATE INDEX runnerq_events_stream_idx ON runnerq_events (queue_name, tx, id);
CREATE INDEX runnerq_events_activity_gin ON runnerq_events USING gin (activity_ids);

CREATE TABLE runnerq_idempotency (
    queue_name    text        NOT NULL,
    activity_type text        NOT NULL,
    key           text        NOT NULL,
    activity_id   uuid        NOT NULL,
    expires_at    timestamptz NOT NULL,
    PRIMARY KEY (queue_name, activity_type, key)
);
