"""The engine's registry entry: one call per heartbeat tick (never per activity), and a registry that fails
never stops the engine."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest

import runnerq_fast as rq
from runnerq_fast.engine.presence import TTL_HEARTBEATS, Presence
from runnerq_fast.models import WorkerInfo
from tests.conformance import FAST


class _CountingBackend(rq.MemoryBackend):
    """Counts registry calls; ``down`` makes them raise."""

    def __init__(self) -> None:
        super().__init__()
        self.registered: list[WorkerInfo] = []
        self.left = 0
        self.down = False

    async def register_worker(self, info: WorkerInfo, ttl_ms: int) -> None:
        if self.down:
            raise ConnectionError("registry down")
        self.registered.append(info)
        await super().register_worker(info, ttl_ms)

    async def deregister_worker(self, queue: str, worker_id: str) -> None:
        if self.down:
            raise ConnectionError("registry down")
        self.left += 1
        await super().deregister_worker(queue, worker_id)


async def test_the_entry_is_refreshed_once_per_heartbeat_tick_whatever_the_activity_rate() -> None:
    backend = _CountingBackend()
    engine = rq.WorkerEngine(backend, **{**FAST, "heartbeat_interval": 0.2})

    @engine.activity("t")
    async def t(payload: Any, ctx: rq.ActivityContext) -> None:
        return None

    began = time.monotonic()
    async with engine:
        for _ in range(5):
            ids = await engine.executor.enqueue_many([engine.executor.activity("t") for _ in range(200)])
            await asyncio.gather(*(rq.ActivityFuture(backend, i).result(timeout=10) for i in ids))
        await asyncio.sleep(0.5)
        elapsed = time.monotonic() - began
    assert engine.stats["completed"] == 1000
    ticks = elapsed / 0.2
    assert 2 <= len(backend.registered) <= ticks + 2  # start + one per tick, not one per activity
    assert backend.left == 1 and await backend.list_workers() == []


async def test_a_failing_registry_is_logged_once_and_the_engine_keeps_working(
    caplog: pytest.LogCaptureFixture,
) -> None:
    backend = _CountingBackend()
    backend.down = True
    engine = rq.WorkerEngine(backend, **{**FAST, "heartbeat_interval": 0.05})

    @engine.activity("t")
    async def t(payload: Any, ctx: rq.ActivityContext) -> int:
        return 7

    with caplog.at_level(logging.WARNING, logger="runnerq_fast.engine"):
        async with engine:
            fut = await engine.executor.activity("t").execute()
            assert await fut.result(timeout=5) == 7
            await asyncio.sleep(0.3)  # several failing heartbeats
            backend.down = False
            await asyncio.sleep(0.2)
            assert [w.worker_id for w in await backend.list_workers()] == [engine.worker_id]  # back
            backend.down = True
            await asyncio.sleep(0.2)  # a second outage
    failing = [r for r in caplog.records if "worker registry heartbeat failed" in r.getMessage()]
    assert len(failing) == 2  # once per outage, not once per tick
    assert any("could not leave the worker registry" in r.getMessage() for r in caplog.records)


def test_the_entry_lives_three_heartbeats_and_any_type_is_a_star() -> None:
    p = Presence(rq.MemoryBackend(), "q", "w", None, 16, 10.0)
    info = p.info(3)
    assert p.ttl_ms == TTL_HEARTBEATS * 10_000 == 30_000
    assert info.activity_types == ("*",) and info.in_flight == 3 and info.concurrency == 16
    assert info.started_at_ms <= info.last_seen_ms
