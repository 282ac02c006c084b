"""The worker and dashboard routes against every backend, with a real engine draining (subclassed per backend).

A subclass provides a ``backend`` fixture (memory in tests/unit, SQLite,
PostgreSQL and Redis in tests/integration): a fresh, empty store per test.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from datetime import datetime
from typing import Any

import httpx

import runnerq_fast as rq
from runnerq_fast.web import create_app
from tests.conformance import FAST
from tests.web_helpers import asgi_client

Q = "dash"
DASH = f"/api/v1/queues/{Q}/dashboard"


async def _until(c: httpx.AsyncClient, url: str, ok: Any, timeout: float = 15.0, **params: Any) -> dict[str, Any]:
    """GET ``url`` until ``ok(body)``; the last body otherwise fails the test."""
    deadline = time.monotonic() + timeout
    body: dict[str, Any] = {}
    while time.monotonic() < deadline:
        r = await c.get(url, params=params)
        assert r.status_code == 200, r.text
        body = r.json()
        if ok(body):
            return body
        await asyncio.sleep(0.05)
    raise AssertionError(f"{url} never matched; last body: {body}")


def _parse(ts: str) -> datetime:
    return datetime.fromisoformat(ts.replace("Z", "+00:00"))


class DashboardWebConformance:
    """``GET /api/v1/workers`` and ``GET /api/v1/queues/{queue}/dashboard`` while an engine drains the queue."""

    async def test_dashboard_and_workers_follow_an_engine_draining_the_queue(self, backend: rq.Backend) -> None:
        engine = rq.WorkerEngine(backend, **{**FAST, "queue_name": Q, "max_workers": 8, "heartbeat_interval": 0.2})

        @engine.activity("ok")
        async def ok(payload: Any, ctx: rq.ActivityContext) -> int:
            await asyncio.sleep(0.01)
            return int(payload)

        @engine.activity("bad")
        async def bad(payload: Any, ctx: rq.ActivityContext) -> None:
            raise rq.NonRetryableError("no")

        ex = engine.executor
        oks = [await ex.activity("ok").payload(i).execute() for i in range(20)]
        bads = [await ex.activity("bad").execute() for _ in range(2)]
        for _ in range(3):
            await ex.activity("nobody_handles_this").execute()
        async with asgi_client(create_app(backend, dashboard_ttl=0.05)) as c:
            before = (await c.get(DASH)).json()
            assert before["queue"] == Q and before["counts"]["pending"] == 25 and before["total"] == 25
            assert before["workers"] == 0 and (before["bucket_seconds"], before["window_seconds"]) == (10, 900)
            assert before["unhandled_types"] == [  # no worker yet: everything ready is unhandled, most first
                {"type": "ok", "ready": 20}, {"type": "nobody_handles_this", "ready": 3}, {"type": "bad", "ready": 2}]
            assert before["oldest_ready_age"] is not None and before["oldest_ready_age"] >= 0
            assert before["series"] and all(p["completed"] == p["failed"] == 0 for p in before["series"])
            assert (await c.get("/api/v1/workers", params={"queue": Q})).json() == {"workers": []}
            async with engine:
                for f in oks:
                    await f.result(timeout=15)
                for f in bads:
                    with contextlib.suppress(rq.ActivityFailed):
                        await f.result(timeout=15)
                (w,) = (await c.get("/api/v1/workers", params={"queue": Q})).json()["workers"]
                assert w["id"] == engine.worker_id and w["queue"] == Q and sorted(w["types"]) == ["bad", "ok"]
                assert w["concurrency"] == 8 and w["in_flight"] >= 0 and isinstance(w["pid"], int)
                assert _parse(w["started_at"]) <= _parse(w["last_seen"])
                everyone = (await c.get("/api/v1/workers")).json()["workers"]
                assert [x["id"] for x in everyone if x["queue"] == Q] == [engine.worker_id]

                def drained(d: dict[str, Any]) -> bool:
                    series = d["series"]
                    return (sum(p["completed"] for p in series) == 20 and sum(p["failed"] for p in series) == 2
                            and any(p["wait_p50"] is not None for p in series))

                after = await _until(c, DASH, drained)
                assert after["counts"]["completed"] == 20 and after["counts"]["failed"] == 2
                assert after["counts"]["pending"] == 3 and after["total"] == 25
                assert after["unhandled_types"] == [{"type": "nobody_handles_this", "ready": 3}]
                assert after["workers"] == 1
                waits = [p for p in after["series"] if p["wait_p50"] is not None]
                assert all(0 <= p["wait_p50"] <= p["wait_p95"] < 60 for p in waits)
                starts = [_parse(p["at"]) for p in after["series"]]
                assert starts == sorted(starts) and all(
                    (b - a).total_seconds() == 10 for a, b in itertools.pairwise(starts))
                assert _parse(after["generated_at"]) >= starts[-1]
            assert (await c.get("/api/v1/workers", params={"queue": Q})).json() == {"workers": []}
            gone = await _until(c, DASH, lambda d: d["workers"] == 0)
            assert [u["type"] for u in gone["unhandled_types"]] == ["nobody_handles_this"]
