"""The web app on the memory backend: the shared web conformance, plus auth on actions and cancel-running.

``tests/integration/test_web_backends.py`` runs :class:`tests.web_conformance.WebConformance`
on SQLite, PostgreSQL and Redis.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

import runnerq_fast as rq
from runnerq_fast.web import create_app
from tests.conformance import FAST
from tests.web_conformance import StreamConformance, WebConformance
from tests.web_helpers import asgi_client

V1 = "/api/v1/queues"


class TestMemoryWeb(WebConformance, StreamConformance):
    @pytest.fixture
    def backend(self) -> rq.Backend:
        return rq.MemoryBackend()


async def test_actions_need_the_token_and_are_refused_read_only() -> None:
    backend = rq.MemoryBackend()
    ex = rq.ActivityExecutor(backend)
    a = await ex.activity("t").execute()
    async with asgi_client(create_app(backend, token="tok")) as c:
        anon = await c.post(f"{V1}/default/activities/{a.activity_id}/cancel")
        bulk = await c.post(f"{V1}/default/actions/cancel", json={"filter": {}})
        delete = await c.delete(f"{V1}/default/activities/{a.activity_id}")
        ok = await c.post(f"{V1}/default/activities/{a.activity_id}/cancel", headers={"Authorization": "Bearer tok"})
    assert anon.status_code == bulk.status_code == delete.status_code == 401
    assert ok.status_code == 200
    async with asgi_client(create_app(backend, read_only=True)) as c:
        assert (await c.post(f"{V1}/default/actions/retry", json={"filter": {}})).status_code == 405
        assert (await c.get(f"{V1}/default/activities")).status_code == 200


async def test_cancelling_a_running_activity_over_http_records_the_request() -> None:
    backend = rq.MemoryBackend()
    engine = rq.WorkerEngine(backend, **FAST)
    started = asyncio.Event()
    release = asyncio.Event()

    @engine.activity("long")
    async def long(payload: Any, ctx: rq.ActivityContext) -> None:
        started.set()
        await release.wait()

    async with engine, asgi_client(create_app(backend)) as c:
        aid = (await c.post(f"{V1}/default/activities", json={"type": "long"})).json()["id"]
        await asyncio.wait_for(started.wait(), 5)
        cancel = await c.post(f"{V1}/default/activities/{aid}/cancel")
        detail = (await c.get(f"{V1}/default/activities/{aid}")).json()
        again = await c.post(f"{V1}/default/activities/{aid}/cancel")
        release.set()
    assert cancel.status_code == 200 and cancel.json()["changed"] == [aid]
    assert detail["activity"]["status"] == "processing"
    assert "cancel_requested" in [e["event_type"] for e in detail["events"]]
    assert again.status_code == 409  # already asked to stop


async def test_cancelling_a_running_activity_over_http_stops_its_handler() -> None:
    backend = rq.MemoryBackend()
    engine = rq.WorkerEngine(backend, **{**FAST, "lease_timeout": 0.3})
    started = asyncio.Event()

    @engine.activity("long")
    async def long(payload: Any, ctx: rq.ActivityContext) -> None:
        started.set()
        await asyncio.sleep(30)

    async with engine, asgi_client(create_app(backend)) as c:
        aid = (await c.post(f"{V1}/default/activities", json={"type": "long"})).json()["id"]
        await asyncio.wait_for(started.wait(), 5)
        cancel = await c.post(f"{V1}/default/activities/{aid}/cancel")
        waited = await c.get(f"/api/observability/activities/{aid}/result")
        with pytest.raises(rq.ActivityCancelled):
            await rq.ActivityFuture(backend, aid).result(timeout=5)
        result = (await c.get(f"/api/observability/activities/{aid}/result")).json()
    assert cancel.status_code == 200 and cancel.json()["changed"] == [aid]
    assert waited.status_code == 200
    assert result["status"] == "cancelled"


async def test_a_failing_backend_is_a_503_problem_and_any_other_error_a_500_problem() -> None:
    """Listings answered a plain-text 500 while the store was unreachable (fresh-user run)."""

    class Down(rq.MemoryBackend):
        broken: type[Exception] = rq.BackendError

        async def query_activities(self, *args: Any, **kwargs: Any) -> Any:
            raise self.broken("connection refused")

    backend = Down()
    async with asgi_client(create_app(backend)) as c:
        r = await c.get("/api/v1/queues/q/activities")
        assert r.status_code == 503 and r.headers["content-type"].startswith("application/problem+json"), r.text
        assert "connection refused" in r.json()["detail"] and r.headers["retry-after"] == "1"
    backend.broken = RuntimeError
    app = create_app(backend)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app, raise_app_exceptions=False),
                                 base_url="http://testserver") as c:
        r = await c.get("/api/v1/queues/q/activities")
        assert r.status_code == 500 and r.headers["content-type"].startswith("application/problem+json"), r.text
