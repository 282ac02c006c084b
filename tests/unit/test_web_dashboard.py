"""The worker and dashboard routes on the memory backend: the shared conformance, the cache, bad input,
the OpenAPI document, and the rolling series itself."""

from __future__ import annotations

import asyncio

import httpx
import pytest

import runnerq_fast as rq
from runnerq_fast.models import ActivityEvent
from runnerq_fast.web import create_app
from runnerq_fast.web.dashboard import QueueSeries, percentile
from tests.web_dashboard_conformance import DashboardWebConformance
from tests.web_helpers import asgi_client, live_server


class TestMemoryDashboard(DashboardWebConformance):
    @pytest.fixture
    def backend(self) -> rq.Backend:
        return rq.MemoryBackend()


async def test_the_dashboard_is_built_once_per_ttl_however_many_clients_poll() -> None:
    backend = rq.MemoryBackend()
    ex = rq.ActivityExecutor(backend, "q")
    await ex.activity("t").execute()
    app = create_app(backend, dashboard_ttl=60)
    async with asgi_client(app) as c:
        bodies = await asyncio.gather(*(c.get("/api/v1/queues/q/dashboard") for _ in range(50)))
        for _ in range(5):
            await ex.activity("t").execute()
        again = (await c.get("/api/v1/queues/q/dashboard")).json()
        other = (await c.get("/api/v1/queues/other/dashboard")).json()
    assert all(b.status_code == 200 and b.json()["counts"]["pending"] == 1 for b in bodies)
    assert again["counts"]["pending"] == 1  # the cached snapshot, not a re-read per request
    assert other["total"] == 0 and other["oldest_ready_age"] is None and other["unhandled_types"] == []
    assert app.state.runnerq_dashboard.builds == 2  # one per queue


async def test_bad_or_unserved_queues_are_problems_and_the_routes_are_in_openapi() -> None:
    backend = rq.MemoryBackend()
    async with asgi_client(create_app(backend, queues=["a"])) as c:
        unserved = await c.get("/api/v1/queues/b/dashboard")
        unserved_workers = await c.get("/api/v1/workers", params={"queue": "b"})
        bad = await c.get("/api/v1/workers", params={"queue": "x" * 300})
        served = await c.get("/api/v1/workers")
        doc = (await c.get("/api/openapi.json")).json()
    assert unserved.status_code == unserved_workers.status_code == 404
    assert bad.status_code == 422 and bad.headers["content-type"].startswith("application/problem+json")
    assert served.json() == {"workers": []}
    assert "/api/v1/workers" in doc["paths"] and "/api/v1/queues/{queue}/dashboard" in doc["paths"]
    schemas = doc["components"]["schemas"]
    assert {"DashboardView", "SeriesPoint", "UnhandledTypeView", "WorkerView", "WorkersResponse"} <= set(schemas)
    assert set(schemas["DashboardView"]["required"]) == {
        "queue", "counts", "total", "oldest_ready_age", "bucket_seconds", "window_seconds", "series", "unhandled_types",
        "workers",
        "generated_at"}


async def test_workers_of_unserved_queues_are_not_listed() -> None:
    backend = rq.MemoryBackend()
    for q in ("a", "b"):
        engine = rq.WorkerEngine(backend, queue_name=q, worker_id=f"w-{q}")
        engine.register_activity("t", lambda payload, ctx: None)
        await engine.start()
    try:
        async with asgi_client(create_app(backend, queues=["a"])) as c:
            served = (await c.get("/api/v1/workers")).json()["workers"]
        async with asgi_client(create_app(backend)) as c:
            every = (await c.get("/api/v1/workers")).json()["workers"]
    finally:
        for w in await backend.list_workers():
            await backend.deregister_worker(w.queue, w.worker_id)
    assert [w["id"] for w in served] == ["w-a"]
    assert [(w["queue"], w["id"]) for w in every] == [("a", "w-a"), ("b", "w-b")]


def test_a_negative_dashboard_ttl_is_refused() -> None:
    with pytest.raises(ValueError, match="dashboard_ttl"):
        create_app(rq.MemoryBackend(), dashboard_ttl=-1)


# ---------------------------------------------------------------- the series
def _ev(kind: str, at_ms: int, activity_id: str = "a", eid: int = 1) -> ActivityEvent:
    return ActivityEvent(eid, activity_id, "q", kind, at_ms)


def test_events_fall_into_ten_second_buckets_and_old_buckets_leave_the_window() -> None:
    s = QueueSeries(bucket_seconds=10, window_seconds=60)
    t0 = s.started_ms
    for kind, at in [("completed", t0 + 1), ("completed", t0 + 9_999), ("failed", t0 + 10_000),
                     ("dead_letter", t0 + 15_000), ("retrying", t0 + 15_000), ("enqueued", t0 + 1)]:
        s.add(_ev(kind, at))
    pts = s.points(t0 + 25_000)
    assert [(p.completed, p.failed) for p in pts] == [(2, 0), (0, 2), (0, 0)]
    assert [int(p.at.timestamp() * 1000) for p in pts] == [t0, t0 + 10_000, t0 + 20_000]
    s.add(_ev("completed", t0 + 70_000))  # six buckets later: the first ones leave the 60 s window
    later = s.points(t0 + 70_000)
    assert len(later) == 6 and later[-1].completed == 1 and sum(p.completed for p in later) == 1
    s.add(_ev("completed", t0 + 1))  # too late for the window: dropped, not miscounted
    assert sum(p.completed for p in s.points(t0 + 70_000)) == 1


def test_waits_come_from_sampled_claims_and_retried_or_deleted_ones_are_dropped() -> None:
    s = QueueSeries(bucket_seconds=10, window_seconds=60, wait_sample=4)
    t0 = s.started_ms
    for i in range(100):
        s.add(_ev("claimed", t0 + 100 + i, f"id{i}", i))
    sample = s.unmeasured()
    assert len(sample) == 4 and len({aid for aid, _ in sample}) == 4  # bounded, whatever the rate
    ready = {aid: at - 100 for aid, at in sample}
    retried, deleted = sample[0][0], sample[1][0]
    ready[retried] = sample[0][1] + 5_000  # its ready time is now after that claim: not a wait of it
    del ready[deleted]
    s.measure({aid for aid, _ in sample}, ready)
    (p,) = s.points(t0 + 1_000)
    assert p.wait_p50 == p.wait_p95 == 0.1 and s.unmeasured() == []


def test_claims_not_looked_up_stay_for_the_next_build() -> None:
    s = QueueSeries(wait_sample=8)
    t0 = s.started_ms
    s.add(_ev("claimed", t0 + 500, "x"))
    s.add(_ev("claimed", t0 + 600, "y"))
    s.measure({"x"}, {"x": t0 + 300})
    assert s.unmeasured() == [("y", t0 + 600)]
    s.measure({"y"}, {"y": t0})
    (p,) = s.points(t0 + 1)
    assert p.wait_p50 == 0.2 and p.wait_p95 == 0.6


@pytest.mark.parametrize(("values", "q", "want"), [([1.0], 0.5, 1.0), ([1.0, 2.0], 0.5, 1.0),
                                                    ([float(i) for i in range(1, 101)], 0.95, 95.0),
                                                    ([float(i) for i in range(1, 101)], 0.5, 50.0)])
def test_percentile_is_the_nearest_rank(values: list[float], q: float, want: float) -> None:
    assert percentile(values, q) == want


def test_bad_series_settings_are_refused() -> None:
    with pytest.raises(ValueError):
        QueueSeries(bucket_seconds=0)
    with pytest.raises(ValueError):
        QueueSeries(bucket_seconds=10, window_seconds=5)




async def test_a_served_queue_is_watched_from_app_start_before_any_dashboard_request() -> None:
    backend = rq.MemoryBackend()
    engine = rq.WorkerEngine(backend, queue_name="a")
    engine.register_activity("t", lambda payload, ctx: None)
    async with live_server(create_app(backend, queues=["a"], dashboard_ttl=0)) as url, engine:
        await asyncio.sleep(0.05)  # the app's lifespan has begun following the queue's events
        ids = await engine.executor.enqueue_many([engine.executor.activity("t") for _ in range(5)])
        for i in ids:
            await rq.ActivityFuture(backend, i).result(timeout=5)
        async with httpx.AsyncClient(base_url=url) as c:
            deadline = asyncio.get_running_loop().time() + 5
            while True:
                body = (await c.get("/api/v1/queues/a/dashboard")).json()
                if sum(p["completed"] for p in body["series"]) == 5 or asyncio.get_running_loop().time() > deadline:
                    break
                await asyncio.sleep(0.05)
    assert sum(p["completed"] for p in body["series"]) == 5  # counted although nobody had asked yet


class _SlowStats(rq.MemoryBackend):
    async def stats(self, queue: str) -> rq.QueueStats:
        await asyncio.sleep(0.1)
        return await super().stats(queue)


async def test_a_slow_build_is_reused_ten_times_as_long_as_it_took() -> None:
    backend = _SlowStats()
    app = create_app(backend, dashboard_ttl=0)
    async with asgi_client(app) as c:
        await c.get("/api/v1/queues/q/dashboard")
        await asyncio.sleep(0.3)  # within 10 x 0.1 s of the build
        await c.get("/api/v1/queues/q/dashboard")
        assert app.state.runnerq_dashboard.builds == 1
        await asyncio.sleep(1.0)
        await c.get("/api/v1/queues/q/dashboard")
    assert app.state.runnerq_dashboard.builds == 2


async def test_dashboards_of_many_queue_names_follow_a_bounded_number_of_streams() -> None:
    """Unauthenticated GETs for made-up queue names once started one stream reader each, for good: on Redis
    ~65 names took every pooled connection and enqueues hung (fresh-user run)."""
    from runnerq_fast.web.dashboard import MAX_WATCHES

    backend = rq.MemoryBackend()
    ex = rq.ActivityExecutor(backend, "kept")
    await ex.activity("t").execute()
    app = create_app(backend)
    routes = app.state.runnerq_dashboard
    async with asgi_client(app) as c:
        assert (await c.get("/api/v1/queues/kept/dashboard")).status_code == 200
        for i in range(3 * MAX_WATCHES):
            assert (await c.get(f"/api/v1/queues/made-up-{i}/dashboard")).status_code == 200
            assert (await c.get("/api/v1/queues/kept/dashboard")).status_code == 200  # in use: never evicted
        await asyncio.sleep(0)  # let cancelled watchers finish
        assert routes.watching <= MAX_WATCHES
        assert "kept" in routes._watches and "made-up-0" not in routes._watches
        r = await c.post("/api/v1/queues/kept/activities", json={"type": "t"})
        assert r.status_code == 201


async def test_a_pinned_served_queue_is_never_evicted() -> None:
    from runnerq_fast.web.dashboard import MAX_WATCHES

    app = create_app(rq.MemoryBackend(), queues=["served"] + [f"q{i}" for i in range(2 * MAX_WATCHES)])
    routes = app.state.runnerq_dashboard
    async with asgi_client(app) as c:
        await routes.watch_served()
        for i in range(2 * MAX_WATCHES):
            assert (await c.get(f"/api/v1/queues/q{i}/dashboard")).status_code == 200
        assert not routes._watches["served"].task.done()
