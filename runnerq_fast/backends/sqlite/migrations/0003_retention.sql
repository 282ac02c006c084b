-- runnerq-fast SQLite schema, migration 0003: retention.
--
-- * finished_idx: finished activities by (queue, status, finish time), so a
--   prune batch reads only the rows it deletes. Partial: finished rows only.
-- * events_at_idx: events by (queue, time), for prune_events.
-- * runnerq_holds: named leases ("holds") with an expiry (epoch ms); the
--   engine's pruner takes ("<queue>", "prune") so one pruner runs per queue.
-- Counts are not maintained here: row triggers keeping a counts table cost
-- a third of the drain rate (benchmarks/gate.py against the same branch
-- without them); stats reads the queue's entries of status_created_idx.
-- Never edit an applied migration; add 0004_*.sql.

CREATE INDEX runnerq_activities_finished_idx
    ON runnerq_activities (queue_name, status, finished_at)
    WHERE status IN ('completed', 'failed', 'dead_letter', 'cancelled');

CREATE INDEX runnerq_events_at_idx ON runnerq_events (queue_name, at);

CREATE TABLE runnerq_holds (
    queue_name TEXT    NOT NULL,
    purpose    TEXT    NOT NULL,
    holder     TEXT    NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (queue_name, purpose)
) WITHOUT ROWID;
