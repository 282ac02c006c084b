-- runnerq-fast PostgreSQL schema, migration 0012: per-type enqueue defaults (issue 27).
--
-- One row per (queue, activity type) whose handler a worker registered with
-- options (@engine.activity("t", max_retries=..., timeout=..., priority=...)).
-- A started engine writes the rows of the types it has handlers for (the last
-- writer wins); producers that enqueue such a type without setting an option
-- (HTTP, CLI, the sync client, another process) read them, cached a few
-- seconds. NULL: the type does not set it (the producer's own default).
-- timeout_ms is milliseconds (0 = none). A few rows, written once per engine
-- start: never on the path of an activity.
-- Never edit an applied migration; add a new one.

CREATE TABLE IF NOT EXISTS runnerq_type_defaults (
    queue_name    text COLLATE "C" NOT NULL,
    activity_type text COLLATE "C" NOT NULL,
    max_retries   integer,
    timeout_ms    bigint,
    priority      smallint,
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue_name, activity_type)
);
