"""Reference: the bare batch claim + ack loop on PostgreSQL, the physical limit of this design.

No queue library: asyncpg on one connection, a table with the columns a
durable queue needs (id, queue, type, JSON payload, priority, status, claim
token, lease, times) and a partial index on the ready rows in claim order.

* enqueue: ``COPY`` of each batch (the fastest way rows get into PostgreSQL);
* drain: ``UPDATE ... FROM (SELECT ... ORDER BY priority DESC, created_at
  LIMIT $n FOR UPDATE SKIP LOCKED) RETURNING``, then one ``UPDATE ... WHERE
  id = ANY($ids) AND claim_token = $token`` marks the batch completed, until a
  claim comes back empty. Default durability (logged table,
  ``synchronous_commit`` as the server has it), no events or results stored.

Variants: ``default`` claims 256 rows per round trip (runnerq-fast's default
``max_workers``), ``batch1000`` claims 1,000.
"""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime
from typing import Any

import asyncpg
from _harness import PeerConfig, Timings, main, run_async, version_of

VARIANTS: dict[str, dict[str, Any]] = {
    "default": {"claim_batch": 256},
    "batch1000": {"claim_batch": 1000},
}

TABLE = "bare_jobs"

SCHEMA = f"""
CREATE TABLE {TABLE} (
    id uuid PRIMARY KEY,
    queue text NOT NULL,
    activity_type text NOT NULL,
    payload jsonb NOT NULL,
    priority smallint NOT NULL DEFAULT 2,
    status text NOT NULL DEFAULT 'pending',
    claim_token uuid,
    lease_until timestamptz,
    created_at timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz
);
CREATE INDEX {TABLE}_ready ON {TABLE} (queue, priority DESC, created_at) WHERE status = 'pending';
"""

CLAIM = f"""
UPDATE {TABLE} j SET status = 'processing', claim_token = $3, lease_until = now() + interval '30 seconds'
FROM (SELECT id FROM {TABLE} WHERE queue = $1 AND status = 'pending'
      ORDER BY priority DESC, created_at LIMIT $2 FOR UPDATE SKIP LOCKED) c
WHERE j.id = c.id
RETURNING j.id, j.activity_type, j.payload
"""

ACK = f"""
UPDATE {TABLE} SET status = 'completed', finished_at = now(), lease_until = NULL
WHERE id = ANY($1::uuid[]) AND claim_token = $2 AND status = 'processing'
"""


async def _run(config: PeerConfig, settings: dict[str, Any]) -> Timings:
    if not config.pg_dsn:
        raise SystemExit("bare_pg needs --pg-dsn")
    claim_batch = int(settings["claim_batch"])
    conn = await asyncpg.connect(config.pg_dsn)
    try:
        await conn.execute(f"DROP TABLE IF EXISTS {TABLE}")
        await conn.execute(SCHEMA)
        queue = "bench"
        n = config.n

        t0 = time.perf_counter()
        done = 0
        while done < n:
            size = min(config.batch_size, n - done)
            now = datetime.now(UTC)
            records = [(uuid.uuid4(), queue, "noop", "null", 2, "pending", now) for _ in range(size)]
            await conn.copy_records_to_table(
                TABLE, records=records,
                columns=["id", "queue", "activity_type", "payload", "priority", "status", "created_at"])
            done += size
        enqueue_seconds = time.perf_counter() - t0

        claim = await conn.prepare(CLAIM)
        ack = await conn.prepare(ACK)
        t0 = time.perf_counter()
        deadline = t0 + config.timeout
        drained = 0
        while True:
            token = uuid.uuid4()
            rows = await claim.fetch(queue, claim_batch, token)
            if not rows:
                break
            ids = [r[0] for r in rows]   # the no-op "handler" runs here
            await ack.fetch(ids, token)
            drained += len(ids)
            if time.perf_counter() > deadline:
                raise TimeoutError(f"{drained}/{n} drained in {config.timeout} s")
        drain_seconds = time.perf_counter() - t0
        completed = await conn.fetchval(f"SELECT count(*) FROM {TABLE} WHERE status = 'completed'")
        if completed != n:
            raise RuntimeError(f"{completed} rows completed, expected {n}")
        sync = await conn.fetchval("SHOW synchronous_commit")
        return Timings(enqueue_seconds, drain_seconds,
                       {"completed": completed, "synchronous_commit": sync, "enqueue": "COPY"})
    finally:
        try:
            await conn.execute(f"DROP TABLE IF EXISTS {TABLE}")
        finally:
            await conn.close()


def run(config: PeerConfig, settings: dict[str, Any]) -> Timings:
    """The workload (see the module docstring)."""
    return run_async(_run(config, settings))


if __name__ == "__main__":
    main("bare PostgreSQL loop", f"asyncpg {version_of('asyncpg')}", VARIANTS, run)
