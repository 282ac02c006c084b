-- runnerq-fast PostgreSQL schema, migration 0004: the worker registry.
--
-- One row per running engine (queue, worker id), replaced by every heartbeat
-- (register_worker) and deleted at a clean stop (deregister_worker). A row
-- whose expires_at has passed belongs to an engine that stopped heartbeating:
-- listings skip it and the next registration deletes it. Expiry is on the
-- database's clock (now()); started_at and last_seen are the engine's.
-- activity_types '{*}' means any type. A few rows, rewritten every few
-- seconds: small enough that its churn never matters.
-- (0003 is the retention migration.) Never edit an applied migration; add a new one.

CREATE TABLE IF NOT EXISTS runnerq_workers (
    queue_name     text        NOT NULL,
    worker_id      text        NOT NULL,
    host           text        NOT NULL,
    pid            integer     NOT NULL,
    activity_types text[]      NOT NULL,
    in_flight      integer     NOT NULL,
    concurrency    integer     NOT NULL,
    started_at     timestamptz NOT NULL,
    last_seen      timestamptz NOT NULL,
    expires_at     timestamptz NOT NULL,
    PRIMARY KEY (queue_name, worker_id)
);
