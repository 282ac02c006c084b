"""Per-type concurrency limits within one engine (``WorkerConfig.limits``)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

import runnerq_fast as rq
from tests.conformance import FAST


async def test_a_limited_type_never_exceeds_its_limit_and_never_starves_the_others() -> None:
    backend = rq.MemoryBackend()
    engine = rq.WorkerEngine(backend, **{**FAST, "queue_name": "l", "max_workers": 8, "limits": {"slow": 2}})
    running = 0
    peak = 0
    finished: dict[str, list[float]] = {"slow": [], "fast": []}

    @engine.activity("slow")
    async def slow(payload: Any, ctx: rq.ActivityContext) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        try:
            await asyncio.sleep(0.03)
        finally:
            running -= 1
        finished["slow"].append(time.perf_counter())

    @engine.activity("fast")
    async def fast(payload: Any, ctx: rq.ActivityContext) -> None:
        await asyncio.sleep(0.001)
        finished["fast"].append(time.perf_counter())

    # the slow ones first and at a higher priority: without the limit they would take every slot
    ex = engine.executor
    await ex.enqueue_many([ex.activity("slow").payload(i).priority(rq.Priority.HIGH) for i in range(20)])
    await ex.enqueue_many([ex.activity("fast").payload(i) for i in range(20)])
    async with engine:
        for _ in range(500):
            if len(finished["slow"]) == 20 and len(finished["fast"]) == 20:
                break
            await asyncio.sleep(0.01)
    assert len(finished["slow"]) == 20 and len(finished["fast"]) == 20
    assert peak == 2
    assert max(finished["fast"]) < max(finished["slow"])
    # the fast ones ran while the slow ones were still queued: all done before half the slow ones
    assert max(finished["fast"]) < sorted(finished["slow"])[9]
    assert (await backend.stats("l")).completed == 40


async def test_a_type_at_its_limit_is_claimed_again_when_a_slot_frees() -> None:
    backend = rq.MemoryBackend()
    # a long poll interval: only the freed slot (not the poll) can wake the fetcher in time
    engine = rq.WorkerEngine(backend, **{**FAST, "queue_name": "l", "poll_interval": 30.0, "limits": {"one": 1}})
    order: list[int] = []

    @engine.activity("one")
    async def one(payload: int, ctx: rq.ActivityContext) -> None:
        order.append(payload)
        await asyncio.sleep(0.01)

    await engine.executor.enqueue_many([("one", i) for i in range(5)])
    started = time.perf_counter()
    async with engine:
        while len(order) < 5 and time.perf_counter() - started < 5:
            await asyncio.sleep(0.005)
        await asyncio.sleep(0.02)
    assert sorted(order) == list(range(5))
    assert time.perf_counter() - started < 5


@pytest.mark.parametrize(
    ("settings", "match"),
    [
        ({"limits": {"nope": 2}}, "no handler for: nope"),
        ({"limits": {"t": 2}, "activity_types": "*"}, 'not with activity_types="\\*"'),
    ],
)
async def test_limits_on_types_the_engine_does_not_claim_are_refused(settings: dict[str, Any], match: str) -> None:
    engine = rq.WorkerEngine(rq.MemoryBackend(), **{**FAST, **settings})

    @engine.activity("t")
    async def t(payload: Any, ctx: rq.ActivityContext) -> None:
        return None

    with pytest.raises(rq.ConfigError, match=match):
        await engine.start()


async def test_a_limit_on_a_type_a_narrowed_engine_does_not_claim_limits_nothing_there() -> None:
    """``--activity-types resize`` on an engine whose limits name ``thumbnail``: it runs, claims only resize.

    The engine that also has the thumbnail handler keeps the limit (the recipe for a limit across processes).
    """
    backend = rq.MemoryBackend()
    engine = rq.WorkerEngine(backend, **{**FAST, "queue_name": "l", "limits": {"thumbnail": 1},
                                         "activity_types": ["resize"]})
    ran: list[str] = []

    @engine.activity("thumbnail")
    async def thumbnail(payload: Any, ctx: rq.ActivityContext) -> None:
        ran.append("thumbnail")

    @engine.activity("resize")
    async def resize(payload: Any, ctx: rq.ActivityContext) -> None:
        ran.append("resize")

    await engine.executor.enqueue_many([("thumbnail", 1), ("resize", 1), ("resize", 2)])
    async with engine:
        for _ in range(500):
            if len(ran) == 2:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)
    assert ran == ["resize", "resize"]
    stats = await backend.stats("l")
    assert (stats.completed, stats.pending) == (2, 1)


@pytest.mark.parametrize("limit", [0, -1, 1.5, True, "2"])
def test_a_limit_must_be_a_positive_int(limit: Any) -> None:
    with pytest.raises(rq.ConfigError, match="must be an int >= 1"):
        rq.WorkerConfig(limits={"t": limit})
