"""A PostgreSQL server that cancels statements (issue 26, items 8 and 11), on the shared server.

The backends here set ``statement_timeout`` (or ``lock_timeout``) for their
own sessions only (``server_settings``; the shared server is not
reconfigured), and another session holds ``LOCK TABLE runnerq_activities IN
EXCLUSIVE MODE`` so every write of the table waits and is cancelled: the
server raises SQLSTATE 57014 (55P03) and rolls the statement back. That is
a transient error, not a bad request: the backend retries it (every method,
since nothing was applied) and reports :class:`StoreBusyError` when it gives
up; the engine keeps the acks and flushes them once the lock goes, never
dropping them as if the store refused them.

The slow test with a private server whose worker role has the timeout
(``ALTER ROLE``) and a reaper backlog is tests/faults/test_postgres_statement_timeout.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest

import runnerq_fast as rq
from runnerq_fast.backends import _servercheck as servercheck
from runnerq_fast.backends.postgres import PostgresBackend
from runnerq_fast.errors import StoreBusyError
from runnerq_fast.models import Ack, AckOutcome
from runnerq_fast.resilience import busy_attempts

pytestmark = pytest.mark.postgres

QUEUE = "st"
TIMEOUT_MS = 20
LOCK_HELD = 1.0  # seconds the table lock is held: several flush retries, and past the old poison-ack path


@contextlib.asynccontextmanager
async def table_locked(url: str) -> AsyncIterator[asyncpg.Connection]:
    """Another session holding an EXCLUSIVE lock on ``runnerq_activities`` (reads pass, writes wait)."""
    conn = await asyncpg.connect(url, timeout=5)
    tx = conn.transaction()
    await tx.start()
    try:
        await conn.execute("LOCK TABLE runnerq_activities IN EXCLUSIVE MODE")
        yield conn
    finally:
        with contextlib.suppress(Exception):
            await tx.rollback()
        await conn.close()


@pytest.mark.parametrize(
    ("setting", "cause"),
    [("statement_timeout", asyncpg.QueryCanceledError), ("lock_timeout", asyncpg.LockNotAvailableError)],
)
async def test_a_cancelled_ack_is_a_transient_error_and_lands_once_retried(
    pg_url: str, setting: str, cause: type[Exception]
) -> None:
    backend = await PostgresBackend.open(pg_url, migrate=False, server_settings={setting: str(TIMEOUT_MS)})
    try:
        ids = await rq.ActivityExecutor(backend, QUEUE).enqueue_many([("t", i) for i in range(5)])
        claimed = await backend.claim(QUEUE, "w", 10, None, 30_000)
        assert len(claimed) == len(ids)
        acks = [Ack(c.id, c.claim_token, AckOutcome.COMPLETED, result=b"1") for c in claimed]
        async with table_locked(pg_url) as holder:
            with busy_attempts(1), pytest.raises(StoreBusyError) as info:
                await backend.ack(QUEUE, acks)
            assert isinstance(info.value.__cause__, cause) and info.value.transient
            assert backend._store_health.up  # the server answered: it is not down
            # retried like a request that never reached the store: it lands once the lock goes
            release = asyncio.get_running_loop().call_later(0.3, lambda: asyncio.ensure_future(holder.close()))
            try:
                assert await backend.ack(QUEUE, acks) == []
            finally:
                release.cancel()
        assert (await backend.stats(QUEUE)).completed == len(ids)
        assert await backend.ack(QUEUE, acks) == [a.id for a in acks]  # applied once: now stale
    finally:
        await backend.close()


@pytest.mark.one_loop
async def test_engine_keeps_acks_the_store_cancels_and_runs_each_activity_once(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Acks cancelled by ``statement_timeout`` for a second are flushed afterwards, none dropped.

    Before: three cancelled flushes sent the acks one by one, each cancelled
    too; a lease renewal of the same activity, retried until the lock went,
    then "proved" the store up, and the acks were dropped as ones it refuses:
    their activities stayed ``processing`` until their lease expired, then ran again.
    """
    caplog.set_level(logging.WARNING, logger="runnerq_fast")
    backend = await PostgresBackend.open(pg_url, migrate=False,
                                         server_settings={"statement_timeout": str(TIMEOUT_MS)})
    engine = rq.WorkerEngine(backend, queue_name=QUEUE, max_workers=64, poll_interval=0.05,
                             ack_flush_interval=0.001, prune_interval=0)
    runs: Counter[int] = Counter()
    go = asyncio.Event()
    half = 50

    @engine.activity("t")
    async def t(payload: int, ctx: rq.ActivityContext) -> int:
        runs[payload] += 1
        if payload >= half:
            await go.wait()  # finishes while the table is locked: its ack is cancelled
        return payload

    try:
        feeder = await PostgresBackend.open(pg_url, migrate=False)  # no timeout: the test's own enqueue
        try:
            ids = await rq.ActivityExecutor(feeder, QUEUE).enqueue_many([("t", i) for i in range(2 * half)])
        finally:
            await feeder.close()
        async with engine:
            for aid in ids[:half]:
                await rq.ActivityFuture(backend, aid).result(timeout=10)
            async with table_locked(pg_url):
                go.set()
                await asyncio.sleep(LOCK_HELD)
            for aid in ids:
                await rq.ActivityFuture(backend, aid).result(timeout=5)  # no lease (30 s) to wait for
            assert engine.in_flight == 0
        stats = await backend.stats(QUEUE)
        assert stats.completed == len(ids) and stats.processing == 0, stats
        assert sorted(runs) == list(range(len(ids))) and set(runs.values()) == {1}, runs
        assert engine.stats["rejected"] == 0
        messages = [r.getMessage() for r in caplog.records]
        assert any("cancelled by the store" in m for m in messages), messages  # the lock was felt
        assert not any("dropping an ack" in m for m in messages), messages
    finally:
        await backend.close()


# ------------------------------------------------------------------ item 11: the autovacuum warning
async def test_autovacuum_is_checked_once_from_the_worker_not_on_connect(
    pg_url: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shared server runs with autovacuum off: opening a backend is quiet, an engine's start warns once."""
    monkeypatch.setattr(servercheck, "_CHECKED", set())  # as in a fresh worker process
    caplog.set_level(logging.WARNING, logger="runnerq_fast")

    def warnings() -> int:
        return sum("autovacuum is off" in r.getMessage() for r in caplog.records)

    backend = await PostgresBackend.open(pg_url, migrate=False)
    try:
        on = await backend.pool.fetchval("SELECT current_setting('autovacuum') = 'on'")
        second = await PostgresBackend.open(pg_url, migrate=False)
        await second.close()
        assert warnings() == 0
        for _ in range(2):  # started twice, and a second engine on the same server: still one warning
            for queue in ("a", "b"):
                engine = rq.WorkerEngine(backend, queue_name=queue, poll_interval=0.05, prune_interval=0)

                @engine.activity("t")
                async def t(payload: Any, ctx: rq.ActivityContext) -> None:
                    return None

                async with engine:
                    pass
        assert warnings() == (0 if on else 1)
    finally:
        await backend.close()


def test_the_sync_client_prints_no_autovacuum_warning(pg_url: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="runnerq_fast")
    with rq.SyncExecutor(pg_url, QUEUE) as client:
        aid = client.activity("t").payload({}).execute()
    assert aid
    assert not any("autovacuum" in r.getMessage() for r in caplog.records)
