"""Mounting the app inside FastAPI and Starlette, its lifespan there, and the direct enqueue path vs the router."""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
from fastapi import FastAPI
from starlette.applications import Starlette
from starlette.routing import Mount

import runnerq_fast as rq
from runnerq_fast.web import create_app
from tests.web_helpers import asgi_client, live_server

Q = "/api/v1/queues/default/activities"


async def test_mounted_in_fastapi_with_its_lifespan_entered_by_the_parent() -> None:
    rq_app = create_app("memory://", token="t")
    ctx = rq_app.state.runnerq

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with rq_app.router.lifespan_context(rq_app):
            yield

    api = FastAPI(lifespan=lifespan)

    @api.get("/hello")
    async def hello() -> dict[str, str]:
        return {"hello": "world"}

    api.mount("/queue", rq_app)
    async with live_server(api) as base, httpx.AsyncClient(base_url=base) as c:
        assert ctx._backend is not None  # opened by the parent's lifespan
        created = await c.post(f"/queue{Q}", json={"type": "t"}, headers={"Authorization": "Bearer t"})
        refused = await c.post(f"/queue{Q}", json={"type": "t"})
        location = created.headers["location"]
        got = await c.get(f"/queue/api/observability/activities/{created.json()['id']}")
        own = await c.get("/hello")
        doc = await c.get("/queue/api/openapi.json")
    assert created.status_code == 201 and location.startswith("/queue/api/v1/queues/default/activities/")
    assert refused.status_code == 401 and refused.json()["instance"] == f"/queue{Q}"
    assert got.status_code == 200 and own.json() == {"hello": "world"} and doc.status_code == 200
    assert ctx._backend is None  # closed by the parent's lifespan


async def test_two_mounts_two_backends_in_one_starlette_app() -> None:
    a, b = rq.MemoryBackend(), rq.MemoryBackend()
    outer = Starlette(routes=[Mount("/a", create_app(a)), Mount("/b", create_app(b, read_only=True))])
    async with asgi_client(outer) as c:
        ra = await c.post(f"/a{Q}", json={"type": "t"})
        rb = await c.post(f"/b{Q}", json={"type": "t"})
        stats_b = (await c.get("/b/api/observability/stats")).json()
    assert ra.status_code == 201 and rb.status_code == 405
    assert (await a.stats("default")).total == 1 and stats_b["total_activities"] == 0


Exchange = tuple[int, str, list[str], Any]


async def _exchange(app: Any, requests: list[tuple[str, dict[str, Any], dict[str, str]]]) -> list[Exchange]:
    out: list[Exchange] = []
    async with asgi_client(app) as c:
        for path, body, headers in requests:
            r = await c.post(path, json=body, headers=headers)
            data = r.json()
            if isinstance(data, dict):
                data.pop("id", None)
                data.pop("existing_id", None)
                if "detail" in data:
                    data["detail"] = re.sub(r"[0-9a-f]{32}", "<id>", data["detail"])
            out.append((r.status_code, r.headers["content-type"], sorted(k for k in r.headers if k != "date"), data))
    return out


async def test_the_direct_path_answers_exactly_as_the_routed_endpoint() -> None:
    requests: list[tuple[str, dict[str, Any], dict[str, str]]] = [
        (Q, {"type": "t", "payload": [1]}, {}),
        (Q, {"type": "t", "idempotency_key": "k"}, {}),
        (Q, {"type": "t", "idempotency_key": "k"}, {}),
        (Q, {"type": "t", "idempotency_key": "k", "on_duplicate": "no_reuse"}, {}),
        (Q, {"type": "t", "priority": 9}, {}),
        (Q, {"type": "t"}, {"Authorization": "Bearer wrong"}),
        (Q + "?wait=0.01", {"type": "t"}, {"Authorization": "Bearer tok"}),
        ("/api/v1/queues/%00/activities", {"type": "t"}, {}),
        (Q, {"nope": 1}, {}),
    ]
    auth = {"Authorization": "Bearer tok"}
    requests = [(p, b, h or auth) for p, b, h in requests]
    direct = create_app(rq.MemoryBackend(), token="tok")
    routed = create_app(rq.MemoryBackend(), token="tok")
    routed.direct_enqueue = None
    assert direct.direct_enqueue is not None
    assert await _exchange(direct, requests) == await _exchange(routed, requests)


async def test_cors_turns_the_direct_path_off_so_cors_headers_are_sent() -> None:
    app = create_app(rq.MemoryBackend(), cors_origins=["https://ok.example"])
    assert app.direct_enqueue is None
    async with asgi_client(app) as c:
        r = await c.post(Q, json={"type": "t"}, headers={"Origin": "https://ok.example"})
    assert r.status_code == 201 and r.headers["access-control-allow-origin"] == "https://ok.example"
