"""Fault: the worker's PostgreSQL role has ``statement_timeout = '20ms'`` (issue 26, item 8).

Common on managed servers. The test runs its OWN cluster
(:mod:`tests.faults.servers`; the shared server is never touched), creates
a role ``worker`` and ``ALTER ROLE worker SET statement_timeout = '20ms'``;
the schema is migrated by ``postgres`` (no timeout), and every statement of
the worker engine runs under the limit.

* Reaper: a backlog of expired leases (claimed by a worker that "died")
  far larger than one 20 ms statement can requeue: with one batch of
  everything the reaper was cancelled on every pass and requeued nothing
  (they stayed ``processing``); now it halves the batch until a batch
  lands and requeues the whole backlog, each lease once, in bounded batches.
* Acks: while the engine drains, another session holds an EXCLUSIVE lock
  on ``runnerq_activities`` for a second, twice: every write waits and is
  cancelled at 20 ms. Every activity completes exactly once, none stays
  ``processing``, no ack is dropped.

Needs ``initdb``/``pg_ctl`` under ``/usr/lib/postgresql/*/bin``; skipped
otherwise. Slow: run with ``python -m pytest -m slow``.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import Counter
from collections.abc import Callable, Iterator
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

import runnerq_fast as rq
from runnerq_fast.backends.postgres import PostgresBackend, apply_migrations
from tests.faults.servers import PrivatePostgres, fresh_database, running_postgres

pytestmark = [pytest.mark.slow, pytest.mark.one_loop, pytest.mark.timeout(120, method="thread")]

QUEUE = "stmt"
BACKLOG = 20_000  # expired leases: one statement requeueing them all takes far longer than 20 ms
REAPER_BATCH = BACKLOG
DRAIN = 600
LOCK_HELD = 1.0
DONE_WITHIN = 60.0


@pytest.fixture
def private_postgres() -> Iterator[PrivatePostgres]:
    with running_postgres() as server:
        yield server


async def _worker_database(server: PrivatePostgres) -> str:
    """A migrated database, and the URL of role ``worker`` whose statements are cancelled after 20 ms."""
    url = await fresh_database(server)
    admin = await asyncpg.connect(url, timeout=10)
    try:
        await apply_migrations(admin)
        await admin.execute("CREATE ROLE worker LOGIN")
        await admin.execute("ALTER ROLE worker SET statement_timeout = '20ms'")
        await admin.execute("GRANT ALL ON ALL TABLES IN SCHEMA public TO worker")
        await admin.execute("GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO worker")
    finally:
        await admin.close()
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"worker@127.0.0.1:{server.port}"))


async def _statuses(url: str) -> Counter[str]:
    conn = await asyncpg.connect(url, timeout=10)
    try:
        rows = await conn.fetch("SELECT status, count(*) FROM runnerq_activities WHERE queue_name = $1 "
                                "GROUP BY status", QUEUE)
    finally:
        await conn.close()
    return Counter({r[0]: r[1] for r in rows})


async def _until(url: str, done: Callable[[Counter[str]], bool]) -> Counter[str]:
    """The queue's status counts once ``done`` says so, or after ``DONE_WITHIN`` seconds."""
    deadline = asyncio.get_running_loop().time() + DONE_WITHIN
    while True:
        counts = await _statuses(url)
        if done(counts) or asyncio.get_running_loop().time() > deadline:
            return counts
        await asyncio.sleep(0.2)


async def test_the_reaper_requeues_a_backlog_in_bounded_batches_under_a_statement_timeout(
    private_postgres: PrivatePostgres, caplog: pytest.LogCaptureFixture
) -> None:
    worker_url = await _worker_database(private_postgres)
    admin_url = private_postgres.url(urlsplit(worker_url).path.lstrip("/"))
    # the backlog: claimed by a worker that died (postgres role: no timeout), leases already expired
    seed = await PostgresBackend.open(admin_url, migrate=False)
    try:
        executor = rq.ActivityExecutor(seed, QUEUE)
        for start in range(0, BACKLOG, 5000):
            await executor.enqueue_many([("t", i) for i in range(start, start + 5000)])
        claimed = 0
        while claimed < BACKLOG:
            claimed += len(await seed.claim(QUEUE, "dead-worker", 5000, None, 1))
        await asyncio.sleep(0.01)
    finally:
        await seed.close()
    # one statement requeueing the whole backlog is cancelled: the server really enforces the limit
    conn = await asyncpg.connect(worker_url, timeout=10)
    try:
        with pytest.raises(asyncpg.QueryCanceledError):
            await conn.execute("UPDATE runnerq_activities SET lease_expires_at = lease_expires_at "
                               "WHERE status = 'processing'")
    finally:
        await conn.close()

    caplog.set_level(logging.INFO, logger="runnerq_fast")
    backend = await PostgresBackend.open(worker_url, migrate=False)
    engine = rq.WorkerEngine(backend, queue_name=QUEUE, max_workers=64, reaper_batch_size=REAPER_BATCH,
                             reaper_interval=0.5, poll_interval=0.05, prune_interval=0)

    @engine.activity("other")  # the requeued backlog is suspect (claimed one at a time): not drained here
    async def other(payload: int, ctx: rq.ActivityContext) -> None:
        return None

    try:
        async with engine:
            counts = await _until(admin_url, lambda c: c["processing"] == 0)  # the test reads without the limit
    finally:
        await backend.close()
    assert counts["pending"] == BACKLOG and counts["processing"] == 0, counts
    messages = [r.getMessage() for r in caplog.records]
    assert any("reaper batch of" in m and "cancelled by the store" in m for m in messages)
    reaped = [int(m.group(1)) for m in (re.match(r"reaper: (\d+) expired leases requeued", x) for x in messages)
              if m]
    assert sum(reaped) == BACKLOG, reaped  # every expired lease requeued once
    assert max(reaped) < REAPER_BATCH, reaped  # in bounded batches, smaller than the one the server cancels
    assert len(reaped) > 1


async def test_every_activity_completes_once_while_a_lock_makes_acks_time_out(
    private_postgres: PrivatePostgres, caplog: pytest.LogCaptureFixture
) -> None:
    worker_url = await _worker_database(private_postgres)
    admin_url = private_postgres.url(urlsplit(worker_url).path.lstrip("/"))
    seed = await PostgresBackend.open(admin_url, migrate=False)
    try:
        await rq.ActivityExecutor(seed, QUEUE).enqueue_many([("t", i) for i in range(DRAIN)])
    finally:
        await seed.close()
    caplog.set_level(logging.WARNING, logger="runnerq_fast")
    runs: Counter[int] = Counter()
    backend = await PostgresBackend.open(worker_url, migrate=False)
    engine = rq.WorkerEngine(backend, queue_name=QUEUE, max_workers=32, poll_interval=0.05, prune_interval=0)

    @engine.activity("t")
    async def t(payload: int, ctx: rq.ActivityContext) -> None:
        runs[payload] += 1
        await asyncio.sleep(0.005)

    holder = await asyncpg.connect(admin_url, timeout=10)
    try:
        async with engine:
            for _ in range(2):
                while sum(runs.values()) < DRAIN // 4:
                    await asyncio.sleep(0.01)
                async with holder.transaction():
                    await holder.execute("LOCK TABLE runnerq_activities IN EXCLUSIVE MODE")
                    await asyncio.sleep(LOCK_HELD)
            counts = await _until(admin_url, lambda c: c["completed"] == DRAIN)
    finally:
        await holder.close()
        await backend.close()
    assert counts["completed"] == DRAIN and counts["processing"] == 0, counts
    assert len(runs) == DRAIN and set(runs.values()) == {1}, Counter(runs.values())
    messages = [r.getMessage() for r in caplog.records]
    assert any("cancelled by the store" in m for m in messages)
    assert not any("dropping an ack" in m for m in messages)
