-- runnerq-fast SQLite schema, migration 0003: retention and maintained counts.
--
-- * finished_idx: finished activities by (queue, status, finish time), so a
--   prune batch reads only the rows it deletes. Partial: finished rows only.
-- * events_at_idx: events by (queue, time), for prune_events.
-- * runnerq_holds: named leases ("holds") with an expiry (epoch ms); the
--   engine's pruner takes ("<queue>", "prune") so one pruner runs per queue.
-- * runnerq_counts: activities per (queue, type, status), kept by triggers in
--   the same transaction as every insert, status change and delete (SQLite
--   has one writer at a time, so a counter row is never contended), so stats
--   and the queue summary read a few counter rows instead of every row of a
--   queue (issue 15). Backfilled here from the rows already stored.
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

CREATE TABLE runnerq_counts (
    queue_name    TEXT    NOT NULL,
    activity_type TEXT    NOT NULL,
    status        TEXT    NOT NULL,
    n             INTEGER NOT NULL,
    PRIMARY KEY (queue_name, activity_type, status)
) WITHOUT ROWID;

INSERT INTO runnerq_counts (queue_name, activity_type, status, n)
SELECT queue_name, activity_type, status, count(*) FROM runnerq_activities GROUP BY 1, 2, 3;

CREATE TRIGGER runnerq_count_inserted AFTER INSERT ON runnerq_activities
BEGIN
    INSERT INTO runnerq_counts (queue_name, activity_type, status, n)
    VALUES (new.queue_name, new.activity_type, new.status, 1)
    ON CONFLICT (queue_name, activity_type, status) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER runnerq_count_updated AFTER UPDATE OF status, queue_name, activity_type ON runnerq_activities
WHEN old.status IS NOT new.status OR old.queue_name IS NOT new.queue_name
     OR old.activity_type IS NOT new.activity_type
BEGIN
    UPDATE runnerq_counts SET n = n - 1
    WHERE queue_name = old.queue_name AND activity_type = old.activity_type AND status = old.status;
    INSERT INTO runnerq_counts (queue_name, activity_type, status, n)
    VALUES (new.queue_name, new.activity_type, new.status, 1)
    ON CONFLICT (queue_name, activity_type, status) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER runnerq_count_deleted AFTER DELETE ON runnerq_activities
BEGIN
    UPDATE runnerq_counts SET n = n - 1
    WHERE queue_name = old.queue_name AND activity_type = old.activity_type AND status = old.status;
END;
