-- runnerq-fast SQLite schema, migration 0004: the worker registry.
--
-- One row per running engine (queue, worker id), replaced by every heartbeat
-- (register_worker) and deleted at a clean stop (deregister_worker). A row
-- whose expires_at (epoch ms) has passed belongs to an engine that stopped
-- heartbeating: listings skip it and the next registration deletes it.
-- activity_types is a JSON array of text ('["*"]': any type).
-- (0003 is the retention migration.) Never edit an applied migration; add a new one.

CREATE TABLE runnerq_workers (
    queue_name     TEXT    NOT NULL,
    worker_id      TEXT    NOT NULL,
    host           TEXT    NOT NULL,
    pid            INTEGER NOT NULL,
    activity_types TEXT    NOT NULL,
    in_flight      INTEGER NOT NULL,
    concurrency    INTEGER NOT NULL,
    started_at     INTEGER NOT NULL,
    last_seen      INTEGER NOT NULL,
    expires_at     INTEGER NOT NULL,
    PRIMARY KEY (queue_name, worker_id)
);
