-- runnerq-fast SQLite schema, migration 0001: the initial tables.
--
-- Applied by runnerq_fast.backends.sqlite.backend.apply_migrations() inside
-- one BEGIN IMMEDIATE transaction (SQLite's write lock), so processes that
-- start together apply each migration exactly once; recorded in
-- runnerq_migrations. Never edit an applied migration; add 0002_*.sql.
--
-- Times are INTEGER epoch milliseconds. Ids are the engine's 32-hex-digit
-- UUIDv7 text (time-ordered, so inserts append to the id index). Payloads,
-- metadata and results are already-validated UTF-8 JSON stored as TEXT.
--
-- A finished activity's result is its row (status, result, last_error), as in
-- the PostgreSQL schema: one fewer insert and index entry per ack.

CREATE TABLE runnerq_activities (
    seq              INTEGER PRIMARY KEY,  -- the rowid: insertion order, the last tie-breaker of the claim order
    id               TEXT    NOT NULL UNIQUE,
    queue_name       TEXT    NOT NULL,
    activity_type    TEXT    NOT NULL,
    status           TEXT    NOT NULL CHECK (status IN (
        'pending', 'scheduled', 'processing', 'retrying', 'completed', 'failed', 'dead_letter', 'cancelled')),
    priority         INTEGER NOT NULL,
    retry_count      INTEGER NOT NULL DEFAULT 0,
    max_retries      INTEGER NOT NULL,
    timeout_ms       INTEGER NOT NULL,
    payload          TEXT    NOT NULL,
    metadata         TEXT    NOT NULL,
    created_at       INTEGER NOT NULL,
    ready_at         INTEGER NOT NULL,   -- scheduled time, or created_at for immediate work
    started_at       INTEGER,
    finished_at      INTEGER,
    lease_expires_at INTEGER,
    claim_token      TEXT,
    worker_id        TEXT,
    last_error       TEXT,
    result           TEXT,               -- the handler's return value (JSON) once completed
    idempotency_key  TEXT,
    dead_lettered_at INTEGER
);

-- Dequeue: the claim walks this index in SPEC order (priority DESC,
-- retry_count DESC, ready_at ASC, then insertion order).
CREATE INDEX runnerq_activities_dequeue_idx
    ON runnerq_activities (queue_name, priority DESC, retry_count DESC, ready_at, seq)
    WHERE status IN ('pending', 'scheduled', 'retrying');

-- Reaper: held leases by expiry.
CREATE INDEX runnerq_activities_lease_idx
    ON runnerq_activities (queue_name, lease_expires_at)
    WHERE status = 'processing';

-- Dead-letter view, newest first.
CREATE INDEX runnerq_activities_dead_idx
    ON runnerq_activities (queue_name, dead_lettered_at)
    WHERE status = 'dead_letter';

-- Events: one row per activity and transition. The INTEGER PRIMARY KEY is the
-- event id; SQLite has one writer at a time, so ids grow in commit order and a
-- live stream resumes after any id without missing a late commit.
CREATE TABLE runnerq_events (
    id          INTEGER PRIMARY KEY,
    activity_id TEXT    NOT NULL,
    queue_name  TEXT    NOT NULL,
    event_type  TEXT    NOT NULL,
    at          INTEGER NOT NULL,
    detail      TEXT
);

CREATE INDEX runnerq_events_activity_idx ON runnerq_events (activity_id);

CREATE TABLE runnerq_idempotency (
    queue_name    TEXT    NOT NULL,
    activity_type TEXT    NOT NULL,
    key           TEXT    NOT NULL,
    activity_id   TEXT    NOT NULL,
    expires_at    INTEGER NOT NULL,
    PRIMARY KEY (queue_name, activity_type, key)
) WITHOUT ROWID;
