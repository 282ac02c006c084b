"""Periodic schedules across worker processes: exactly one activity per tick (SQLite, PostgreSQL, Redis).

Three ``runnerq-fast worker`` subprocesses run the same 1-second schedule on
one store. Every tick between the moment all three run and the moment the
first is stopped must have exactly one activity; no tick may have two.
The window is counted from tick timestamps, not assumed.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import redis
import redis.asyncio as aioredis

import runnerq_fast as rq
from tests.acceptance.helpers import HERE, WorkerProcess, run_cli

PROCESSES = 3


def _tick_ms(row: rq.ActivitySnapshot) -> int:
    assert row.idempotency_key is not None and row.idempotency_key.startswith("periodic:beat:")
    return int(row.idempotency_key.rpartition(":")[2])


async def _rows(url: str, queue: str) -> list[rq.ActivitySnapshot]:
    backend = await rq.connect(url)
    try:
        return await backend.list_activities(queue, None, limit=10_000)
    finally:
        await backend.close()


async def _drop_redis_queue(url: str, queue: str) -> None:
    client = aioredis.Redis.from_url(url)
    try:
        async for key in client.scan_iter(match=f"rq:{{{queue}}}:*", count=1000):
            await client.delete(key)
        await client.srem("rq:queues", queue)
    finally:
        await client.aclose()


@pytest.fixture(params=["sqlite", "postgresql", "redis"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(backend URL, queue) of a fresh store; the Redis queue's keys are deleted afterwards."""
    queue = f"periodic-{uuid.uuid4().hex[:8]}"
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/periodic.db", queue
    elif request.param == "postgresql":
        yield request.getfixturevalue("fresh_pg_url"), queue
    else:
        url = request.getfixturevalue("redis_url")
        try:
            redis.Redis.from_url(url, socket_connect_timeout=2).ping()
        except redis.RedisError as exc:
            if os.environ.get("CI", "").lower() == "true":
                pytest.fail(f"Redis at {url} is not usable: {exc!r}")
            pytest.skip(f"Redis at {url} is not usable: {exc!r}")
        try:
            yield url, queue
        finally:
            asyncio.run(_drop_redis_queue(url, queue))


def _run(start_worker: Callable[..., WorkerProcess], url: str, queue: str, seconds: float) -> None:
    workers = [start_worker("periodic_app:engine", "--backend", url, "--queue", queue, "--concurrency", "4",
                            cwd=HERE) for _ in range(PROCESSES)]
    for w in workers:
        w.wait_for_log("engine ", timeout=30)
        w.wait_for_log("started on", timeout=30)
    time.sleep(0.3)  # every scheduler task has taken its first step
    all_up = time.time()
    time.sleep(seconds)
    first_stop = time.time()
    for w in workers:
        w.signal(signal.SIGTERM)
    for w in workers:
        assert w.wait(30) == 0, w.log()
    rows = asyncio.run(_rows(url, queue))
    ticks = [_tick_ms(r) for r in rows]
    assert len(ticks) == len(set(ticks)), f"a tick has two activities: {sorted(ticks)}"
    # the ticks while all three ran, with 0.3 s of margin before the first stop (enqueues land after the tick)
    window = list(range(math.floor(all_up) + 1, math.floor(first_stop - 0.3) + 1))
    assert len(window) >= math.floor(seconds) - 1
    in_window = sorted(t // 1000 for t in ticks if window[0] * 1000 <= t <= window[-1] * 1000)
    assert in_window == window, f"ticks {in_window}, expected {window}"
    assert all(t % 1000 == 0 for t in ticks)
    done = [r for r in rows if r.status == "completed"]
    assert len(done) >= len(window)
    print(f"{url.split(':')[0]}: {len(window)} ticks in the window, {len(in_window)} activities for them; "
          f"{len(ticks)} activities in all, {len(done)} completed")


def test_three_processes_enqueue_one_activity_per_tick_on_sqlite(
    start_worker: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path}/periodic.db"
    _run(start_worker, url, "periodic-fast", 4.0)
    # the schedule is visible on each of its activities (inspect) and in the engine's listing
    row = asyncio.run(_rows(url, "periodic-fast"))[0]
    shown = run_cli("inspect", row.id, "--backend", url, "--json")
    assert shown.returncode == 0, shown.stderr
    doc = json.loads(shown.stdout)
    tick = datetime.fromtimestamp(_tick_ms(row) / 1000, UTC).isoformat(timespec="milliseconds")
    assert doc["activity"]["metadata"] == {"schedule": "beat", "tick": tick}
    assert doc["result"]["data"]["tick"] == tick
    listed = run_cli("schedules", "periodic_app:engine", "--json", "--next", "2", cwd=HERE)
    assert listed.returncode == 0, listed.stderr
    (sched,) = json.loads(listed.stdout)["schedules"]
    assert (sched["name"], sched["activity_type"], sched["every"], sched["missed"]) == ("beat", "beat", 1.0, "skip")
    first, second = (datetime.fromisoformat(t).timestamp() for t in sched["next_ticks"])
    assert second - first == 1.0 and first % 1 == 0


@pytest.mark.slow
def test_three_processes_for_ten_seconds(start_worker: Callable[..., WorkerProcess], store: tuple[str, str]) -> None:
    url, queue = store
    _run(start_worker, url, queue, 10.0)
