"""Fault: Redis restarted under a running worker.

Each test starts its OWN ``redis-server`` on a free port in a temporary
directory (the shared server on 6379 is never touched) and runs a
:class:`WorkerEngine` in this process against it.

* Without persistence (``--save "" --appendonly no``) a restart loses
  everything; the worker must log the lost connection, reconnect, reload its
  scripts (``NOSCRIPT``) and run activities enqueued after the restart.
* With AOF (``--appendonly yes --appendfsync always``) a crash (SIGKILL) and
  restart lose nothing acknowledged: every activity whose result was stored
  before the crash is still ``completed``, and the rest are still there and
  drain after the restart.

Needs ``redis-server`` on PATH; skipped otherwise. Slow: ``-m slow``.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import runnerq_fast as rq
from runnerq_fast.backends.redis import RedisBackend
from tests.conformance import FAST, eventually
from tests.faults.servers import RedisServer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120, method="thread")]

QUEUE = "fault"


@pytest.fixture
def make_server(tmp_path: Path) -> Iterator[Any]:
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    servers: list[RedisServer] = []

    def make(*args: str) -> RedisServer:
        server = RedisServer(tmp_path, *args)
        server.start()
        servers.append(server)
        return server

    yield make
    for s in servers:
        s.stop(signal.SIGKILL)


async def _engine(backend: RedisBackend, runs: list[int]) -> rq.WorkerEngine:
    engine = rq.WorkerEngine(backend, **{**FAST, "queue_name": QUEUE, "lease_timeout": 3.0, "max_workers": 8})

    @engine.activity("job")
    async def job(payload: Any, ctx: rq.ActivityContext) -> int:
        runs.append(int(payload))
        await asyncio.sleep(0.005)
        return int(payload)

    return engine


async def test_restart_without_persistence_worker_reconnects_and_keeps_working(
    make_server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    server = make_server("--save", "", "--appendonly", "no")
    backend = await RedisBackend.open(server.url)
    runs: list[int] = []
    engine = await _engine(backend, runs)
    caplog.set_level(logging.WARNING)
    try:
        async with engine:
            before = await engine.executor.activity("job").payload(1).execute()
            assert await before.result(timeout=10) == 1
            server.stop()
            await asyncio.sleep(1.0)  # the worker's loops fail meanwhile
            server.start()
            assert await backend.client.dbsize() == 0  # nothing survived: no persistence
            after = await engine.executor.enqueue_many([("job", i) for i in range(100, 150)])
            futures = [rq.ActivityFuture(backend, i) for i in after]
            assert [await f.result(timeout=20) for f in futures] == list(range(100, 150))
        assert sorted(set(runs) - {1}) == list(range(100, 150))
        logged = " ".join(r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)
        assert "Error" in logged or "failed" in logged or "lost" in logged
    finally:
        await backend.close()


async def test_script_cache_flush_is_reloaded(make_server: Any) -> None:
    server = make_server("--save", "", "--appendonly", "no")
    backend = await RedisBackend.open(server.url)
    try:
        await backend.client.script_flush()
        ex = rq.ActivityExecutor(backend, QUEUE)
        fut = await ex.activity("job").execute()  # NOSCRIPT -> reloaded -> stored
        await backend.client.script_flush()
        assert [a.id for a in await backend.claim(QUEUE, "w", 5, None, 5000)] == [fut.activity_id]
    finally:
        await backend.close()


async def test_eviction_policy_other_than_noeviction_warns(make_server: Any, caplog: pytest.LogCaptureFixture) -> None:
    server = make_server("--save", "", "--maxmemory-policy", "allkeys-lru")
    caplog.set_level(logging.WARNING)
    backend = await RedisBackend.open(server.url)
    try:
        assert await backend.check_eviction_policy() == "allkeys-lru"
        assert any("allkeys-lru" in r.getMessage() and "noeviction" in r.getMessage() for r in caplog.records)
    finally:
        await backend.close()


async def test_crash_with_aof_loses_nothing_acknowledged(make_server: Any) -> None:
    server = make_server("--save", "", "--appendonly", "yes", "--appendfsync", "always")
    backend = await RedisBackend.open(server.url)
    runs: list[int] = []
    try:
        engine = await _engine(backend, runs)
        ids = await engine.executor.enqueue_many([("job", i) for i in range(300)])
        await engine.start()
        insp = rq.QueueInspector(backend, QUEUE)

        async def some_done() -> bool:
            return (await insp.stats()).completed >= 100

        await eventually(some_done, 20, "100 completed")
        server.stop(signal.SIGKILL)  # crash mid-drain
        done_before = set(runs)
        await engine.stop()
        server.start()
        acknowledged = [i for i in ids if (r := await backend.get_result(i)) is not None and r.status == "completed"]
        assert len(acknowledged) >= 100  # everything acknowledged before the crash is still there
        assert (await insp.stats()).total == 300  # and nothing enqueued was lost
        engine2 = await _engine(backend, runs)
        async with engine2:
            results = [await rq.ActivityFuture(backend, i).result(timeout=30) for i in ids]
        assert results == list(range(300))
        assert done_before <= set(runs)
    finally:
        await backend.close()
