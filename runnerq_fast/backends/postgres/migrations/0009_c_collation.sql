-- runnerq-fast PostgreSQL schema, migration 0009: byte-order comparison of the key text columns (issue 17).
--
-- queue_name, activity_type and status lead almost every index of
-- runnerq_activities, and every claim, ack and enqueue inserts entries
-- into several of them: each insert compares them on the way down the
-- B-tree. Under the database's collation (C.UTF-8 on the development and CI
-- servers, which PostgreSQL 15 treats as a libc locale) each comparison
-- looks the collation up and goes through strcoll; under COLLATE "C" it is a
-- memcmp. callgrind, 10,000 activities: claim 107,451 -> 106,106, ack
-- 154,530 -> 148,758, enqueue 118,562 -> 115,841 instructions per activity.
-- Equality does not change (every collation here is deterministic) and no
-- statement orders by these columns, so no result changes.
-- runnerq_idempotency's queue_name and activity_type follow, so that the
-- join of delete_many (idempotency rows of deleted activities) compares two
-- columns of one collation and keeps using their primary key.
--
-- The ALTERs rewrite no row (text to text), but rebuild every index on these
-- columns and check the status constraint while holding an ACCESS EXCLUSIVE
-- lock: on a large existing table, run this migration in a quiet moment
-- (measured: 0008 and 0009 together took 27 s on a store of one million
-- activities, 0008 alone 8 s, on the shared 2-core development machine at
-- load 4-5).
-- Never edit an applied migration; add a new one.

ALTER TABLE runnerq_activities
    ALTER COLUMN queue_name TYPE text COLLATE "C",
    ALTER COLUMN activity_type TYPE text COLLATE "C",
    ALTER COLUMN status TYPE text COLLATE "C";

ALTER TABLE runnerq_idempotency
    ALTER COLUMN queue_name TYPE text COLLATE "C",
    ALTER COLUMN activity_type TYPE text COLLATE "C";
