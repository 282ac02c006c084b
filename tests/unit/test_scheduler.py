"""Periodic schedules: tick arithmetic, validation, one activity per tick across engines, missed ticks."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pytest

import runnerq_fast as rq
from runnerq_fast.engine.scheduler import late_limit, make_schedule, tick_key
from runnerq_fast.models import EnqueueResult, NewActivity
from tests.conformance import FAST


def _tick_ms(row: rq.ActivitySnapshot) -> int:
    """The tick an activity stands for, from its idempotency key ``periodic:<name>:<ms>``."""
    assert row.idempotency_key is not None
    prefix, _, ms = row.idempotency_key.rpartition(":")
    assert prefix.startswith("periodic:")
    return int(ms)


def _ts(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def test_interval_ticks_are_aligned_to_the_epoch() -> None:
    s = make_schedule(0.25, "t")
    assert s.next_tick(100.0) == 100.25
    assert s.next_tick(100.1) == 100.25
    assert s.previous_tick(100.3) == 100.25
    assert s.previous_tick(100.25) == 100.25
    assert tick_key(s, 100.25) == "periodic:t:100250"


def test_cron_ticks_follow_the_timezone_and_dst() -> None:
    s = make_schedule("0 9 * * *", "report", timezone="Europe/Paris")
    # 09:00 in Paris is 08:00 UTC in winter (CET) and 07:00 UTC in summer (CEST)
    assert s.next_tick(_ts("2026-01-15T12:00:00+00:00")) == _ts("2026-01-16T08:00:00+00:00")
    assert s.next_tick(_ts("2026-07-15T12:00:00+00:00")) == _ts("2026-07-16T07:00:00+00:00")
    assert s.previous_tick(_ts("2026-07-16T07:00:00+00:00")) == _ts("2026-07-16T07:00:00+00:00")
    assert s.previous_tick(_ts("2026-07-16T06:59:59+00:00")) == _ts("2026-07-15T07:00:00+00:00")
    every5 = make_schedule("*/5 * * * *", "x")
    assert every5.next_tick(_ts("2026-03-01T10:02:30+00:00")) == _ts("2026-03-01T10:05:00+00:00")
    assert every5.timezone == "UTC" and every5.spec == "*/5 * * * *"


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        (("61 * * * *", "t"), {}, "bad cron expression"),
        (("* * *", "t"), {}, "bad cron expression"),
        (("* * * * *", "t"), {"timezone": "Mars/Olympus"}, "unknown timezone"),
        ((0.0, "t"), {}, "at least"),
        ((float("nan"), "t"), {}, "at least"),
        ((5, "t"), {"timezone": "Europe/Paris"}, "timezone applies to cron"),
        ((True, "t"), {}, "cron expression"),
        ((5, "t"), {"missed": "all"}, "missed must be"),
        ((5, "t"), {"catch_up": -1}, "catch_up"),
        ((5, "t"), {"payload": float("nan")}, "NaN"),
        ((5, "t"), {"priority": 9}, "priority"),
        ((5, "t"), {"name": " "}, "name"),
    ],
)
def test_bad_schedules_are_refused(args: tuple[Any, ...], kwargs: dict[str, Any], match: str) -> None:
    engine = rq.WorkerEngine(rq.MemoryBackend())
    with pytest.raises(rq.ConfigError, match=match):
        engine.periodic(*args, **kwargs)
    assert engine.schedules == []


def test_schedule_names_are_unique_and_listed() -> None:
    engine = rq.WorkerEngine(rq.MemoryBackend())
    a = engine.periodic(60, "cleanup", payload={"days": 7})
    b = engine.periodic("0 3 * * *", "cleanup", name="nightly-cleanup", timezone="Europe/Paris")
    with pytest.raises(rq.ConfigError, match="exists"):
        engine.periodic(30, "cleanup")
    assert engine.schedules == [a, b]
    assert (a.name, a.every, a.cron, a.metadata) == ("cleanup", 60.0, None, {"schedule": "cleanup"})
    assert (b.name, b.cron, b.timezone) == ("nightly-cleanup", "0 3 * * *", "Europe/Paris")


async def test_three_engines_enqueue_exactly_one_activity_per_tick() -> None:
    backend = rq.MemoryBackend()
    ran: list[str] = []
    engines = []
    for _ in range(3):
        engine = rq.WorkerEngine(backend, **{**FAST, "queue_name": "p"})

        @engine.activity("beat")
        async def beat(payload: Any, ctx: rq.ActivityContext) -> None:
            ran.append(ctx.activity_id)

        engine.periodic(0.1, "beat", payload={"n": 1})
        engines.append(engine)
    started = time.time()
    for e in engines:
        await e.start()
    await asyncio.sleep(0.05)  # the scheduler tasks run their first step (after the engines' workers)
    all_up = time.time()
    await asyncio.sleep(1.0)
    first_down = time.time()
    for e in engines:
        await e.stop()
    all_down = time.time()
    rows = await backend.list_activities("p", None, limit=1000)
    keys = [r.idempotency_key for r in rows]
    assert len(keys) == len(set(keys)), "a tick was enqueued twice"
    ticks = sorted(_tick_ms(r) for r in rows)
    assert len(ticks) == len(set(ticks))
    # every tick while all three engines ran is there exactly once (50 ms margin before the stop)
    window = [k * 100 for k in range(math.floor(all_up * 10) + 1, math.floor((first_down - 0.05) * 10) + 1)]
    assert [t for t in ticks if window[0] <= t <= window[-1]] == window
    assert all(started * 1000 < t <= all_down * 1000 for t in ticks)  # skip: nothing before the start
    for r in rows:
        tick = datetime.fromtimestamp(_tick_ms(r) / 1000, UTC).isoformat(timespec="milliseconds")
        assert r.metadata == {"schedule": "beat", "tick": tick}
    assert len(ran) == len(set(ran)) and len(ran) >= len(window)


async def test_skip_policy_does_not_run_a_missed_tick() -> None:
    backend = rq.MemoryBackend()
    engine = rq.WorkerEngine(backend, **{**FAST, "queue_name": "p", "activity_types": "*"})
    engine.periodic("0 0 1 1 *", "yearly")  # next tick months away, last one months ago
    async with engine:
        await asyncio.sleep(0.05)
    assert await backend.list_activities("p", None) == []


async def test_run_once_policy_runs_the_latest_missed_tick_once_across_restarts() -> None:
    backend = rq.MemoryBackend()
    seen: list[float] = []

    def build() -> rq.WorkerEngine:
        engine = rq.WorkerEngine(backend, **{**FAST, "queue_name": "p"})

        @engine.activity("yearly")
        async def yearly(payload: Any, ctx: rq.ActivityContext) -> None:
            seen.append(ctx.enqueued_at)

        engine.periodic("0 0 1 1 *", "yearly", missed="run_once", catch_up=366 * 86400)
        return engine

    async with build():
        for _ in range(500):
            if seen:
                break
            await asyncio.sleep(0.01)
    assert len(seen) == 1
    async with build() as engine:  # the second start finds the tick's key and enqueues nothing
        await asyncio.sleep(0.2)
        stats = engine.stats
    rows = await backend.list_activities("p", None)
    assert len(rows) == 1
    year = datetime.now(UTC).year
    assert _tick_ms(rows[0]) == round(datetime(year, 1, 1, tzinfo=UTC).timestamp() * 1000)
    assert rows[0].status == "completed" and len(seen) == 1 and stats["completed"] == 0


async def test_run_once_respects_the_catch_up_window() -> None:
    backend = rq.MemoryBackend()
    engine = rq.WorkerEngine(backend, **{**FAST, "queue_name": "p", "activity_types": "*"})
    engine.periodic("0 0 1 1 *", "yearly", missed="run_once", catch_up=60)  # last tick is older than 60 s
    async with engine:
        await asyncio.sleep(0.05)
    if datetime.now(UTC).timetuple().tm_yday > 1:
        assert await backend.list_activities("p", None) == []


async def test_schedules_cannot_be_added_after_start() -> None:
    engine = rq.WorkerEngine(rq.MemoryBackend(), **FAST)

    @engine.activity("t")
    async def t(payload: Any, ctx: rq.ActivityContext) -> None:
        return None

    async with engine:
        with pytest.raises(rq.ConfigError, match="before the engine starts"):
            engine.periodic(1, "t")


class SlowEnqueue(rq.MemoryBackend):
    """A memory backend whose enqueue takes longer than the schedule's interval."""

    async def enqueue(
        self, queue: str, items: Sequence[NewActivity], *, connection: object | None = None
    ) -> list[EnqueueResult]:
        await asyncio.sleep(0.15)
        return await super().enqueue(queue, items, connection=connection)


async def test_a_slow_enqueue_delays_ticks_but_loses_none() -> None:
    backend = SlowEnqueue()
    engine = rq.WorkerEngine(backend, **{**FAST, "queue_name": "p", "activity_types": "*"})
    engine.periodic(0.1, "beat")
    async with engine:
        await asyncio.sleep(0.05)
        up = time.time()
        await asyncio.sleep(0.8)
        down = time.time()
    ticks = sorted(_tick_ms(r) for r in await backend.list_activities("p", None, limit=1000))
    # each enqueue takes 150 ms for 100 ms ticks: they land late, but every tick up to the stop lands
    expected_until = min(down - 0.2, ticks[-1] / 1000)
    window = [k * 100 for k in range(math.floor(up * 10) + 1, math.floor(expected_until * 10) + 1)]
    assert len(window) >= 4
    assert [t for t in ticks if t >= window[0]][: len(window)] == window
    assert len(ticks) == len(set(ticks))


def test_the_late_limit_is_the_spacing_within_one_second_and_a_minute() -> None:
    assert late_limit(make_schedule(0.1, "t"), 100.0) == 1.0
    assert late_limit(make_schedule(30, "t"), 120.0) == 30.0
    assert late_limit(make_schedule("0 * * * *", "t"), 3600.0) == 60.0
