"""RunnerQ's read routes, health, /metrics and the OpenAPI document (memory backend, ASGI transport)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

import runnerq_fast as rq
from runnerq_fast.web import create_app, wire
from tests.conformance import FAST
from tests.damaged_results import DamagedResults
from tests.web_helpers import asgi_client

OBS = "/api/observability"


async def drained(backend: rq.MemoryBackend) -> dict[str, str]:
    """Five activities run to completion, failure, dead letter; returns their ids by role."""
    engine = rq.WorkerEngine(backend, **FAST)

    @engine.activity("ok")
    async def ok(payload: Any, ctx: rq.ActivityContext) -> Any:
        return {"doubled": payload * 2}

    @engine.activity("bad")
    async def bad(payload: Any, ctx: rq.ActivityContext) -> Any:
        raise RuntimeError("boom")

    ex = engine.executor
    ids = {
        "done": (await ex.activity("ok").payload(21).execute()).activity_id,
        "dead": (await ex.activity("bad").max_retries(0).execute()).activity_id,
    }
    async with engine:
        for i in ids.values():
            with contextlib.suppress(rq.ActivityFailed):
                await rq.ActivityFuture(backend, i).result(timeout=5)
    ids["waiting"] = (await ex.activity("ok").payload(1).metadata({"k": "v"}).execute()).activity_id
    return ids


async def test_stats_listings_detail_events_result_and_dead_letter() -> None:
    backend = rq.MemoryBackend()
    ids = await drained(backend)
    async with asgi_client(create_app(backend)) as c:
        stats = (await c.get(f"{OBS}/stats")).json()
        pending = (await c.get(f"{OBS}/activities/pending")).json()
        completed = (await c.get(f"{OBS}/activities/completed", params={"limit": 1})).json()
        dl_list = (await c.get(f"{OBS}/activities/dead_letter")).json()
        detail = (await c.get(f"{OBS}/activities/{ids['done']}")).json()
        h = ids["done"]
        dashed = await c.get(f"{OBS}/activities/{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}")
        events = (await c.get(f"{OBS}/activities/{ids['done']}/events")).json()
        last_event = (await c.get(f"{OBS}/activities/{ids['done']}/events", params={"limit": 1})).json()
        result = (await c.get(f"{OBS}/activities/{ids['done']}/result")).json()
        unfinished = await c.get(f"{OBS}/activities/{ids['waiting']}/result")
        dead = (await c.get(f"{OBS}/dead-letter")).json()
    assert stats == {"queue": "default", "pending_activities": 1, "processing_activities": 0,
                     "scheduled_activities": 0, "retrying_activities": 0, "completed_activities": 1,
                     "failed_activities": 0, "dead_letter_activities": 1, "cancelled_activities": 0,
                     "total_activities": 3}
    assert [a["id"] for a in pending] == [ids["waiting"]] and pending[0]["metadata"] == {"k": "v"}
    assert [a["id"] for a in completed] == [ids["done"]]
    assert [a["id"] for a in dl_list] == [ids["dead"]]
    assert detail["status"] == "completed" and detail["payload"] == 21 and detail["activity_type"] == "ok"
    assert detail["started_at"] is not None and detail["finished_at"] is not None
    assert dashed.status_code == 200 and dashed.json()["id"] == ids["done"]
    assert [e["event_type"] for e in events] == ["enqueued", "claimed", "completed"]
    assert [e["event_type"] for e in last_event] == ["completed"]
    assert result == {"activity_id": ids["done"], "status": "completed", "result": {"doubled": 42}, "error": None,
                      "corrupt": None}
    assert unfinished.status_code == 200 and unfinished.json() is None
    assert [d["activity"]["id"] for d in dead] == [ids["dead"]] and "boom" in dead[0]["error"]
    assert dead[0]["failed_at"].endswith("Z")


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/activities/0123456789abcdef0123456789abcdef", 404),
        ("/activities/0123456789abcdef0123456789abcdef/events", 404),
        ("/activities/0123456789abcdef0123456789abcdef/result", 404),
        ("/activities/not-a-status", 404),
        ("/activities/pending?limit=0", 422),
        ("/activities/pending?limit=1001", 422),
        ("/activities/pending?offset=-1", 422),
        ("/activities/pending?offset=10001", 422),
        ("/activities/pending?limit=ten", 422),
        ("/stats?queue=", 200),
        ("/stats?queue=%00", 422),
        ("/dead-letter?limit=5000", 422),
    ],
)
async def test_bad_lookups_are_problems(path: str, status: int) -> None:
    async with asgi_client(create_app(rq.MemoryBackend())) as c:
        r = await c.get(OBS + path)
    assert r.status_code == status, r.text
    if status >= 400:
        assert r.headers["content-type"] == "application/problem+json" and r.json()["detail"]


async def test_an_activity_of_a_queue_not_served_is_not_found() -> None:
    backend = rq.MemoryBackend()
    other = await rq.ActivityExecutor(backend, "private").activity("t").execute()
    async with asgi_client(create_app(backend, queues=["public"])) as c:
        r = await c.get(f"{OBS}/activities/{other.activity_id}")
    assert r.status_code == 404


async def test_health_and_readiness() -> None:
    class Down(rq.MemoryBackend):
        async def get_activity(self, activity_id: str) -> Any:
            raise rq.BackendError("connection refused")

    async with asgi_client(create_app(rq.MemoryBackend())) as c:
        up = await c.get("/healthz")
        ready = await c.get("/readyz")
    async with asgi_client(create_app(Down())) as c:
        live = await c.get("/healthz")
        not_ready = await c.get("/readyz")
    assert up.json() == {"status": "ok"} and ready.json() == {"status": "ok", "backend": "memory"}
    assert live.status_code == 200
    assert not_ready.status_code == 503 and "connection refused" in not_ready.json()["detail"]


async def test_metrics_serve_the_prometheus_text_format() -> None:
    backend = rq.MemoryBackend()
    sink = rq.PrometheusMetrics()
    async with asgi_client(create_app(backend, metrics=sink)) as c:
        await c.post("/api/v1/queues/default/activities", json={"type": "t"})
        r = await c.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    fams = {f.name: f for f in text_string_to_metric_families(r.text)}
    enq = fams["runnerq_activities_enqueued"]
    assert [(s.labels, s.value) for s in enq.samples if s.name.endswith("_total")] == [
        ({"queue": "default", "activity_type": "t"}, 1.0)
    ]
    assert {"runnerq_activity_duration_seconds", "runnerq_queue_wait_seconds"} <= set(fams)


async def test_openapi_is_generated_from_the_structs() -> None:
    async with asgi_client(create_app(rq.MemoryBackend())) as c:
        doc = (await c.get("/api/openapi.json")).json()
        redirect = await c.get("/api", follow_redirects=False)
        index = (await c.get("/")).json()
    assert doc["openapi"].startswith("3.1")
    schemas = doc["components"]["schemas"]
    want = set(wire.EnqueueRequest.__struct_fields__)
    assert set(schemas["EnqueueRequest"]["properties"]) == want
    assert schemas["EnqueueRequest"]["required"] == ["type"]
    assert schemas["EnqueueRequest"]["additionalProperties"] is False  # forbid_unknown_fields
    assert set(schemas["Problem"]["properties"]) >= {"type", "title", "status", "detail"}
    post = doc["paths"]["/api/v1/queues/{queue}/activities"]["post"]
    body_schema = post["requestBody"]["content"]["application/json"]["schema"]
    assert body_schema["$ref"] == "#/components/schemas/EnqueueRequest" and "not" in body_schema  # delay or run_at
    assert {"200", "201", "202", "400", "409", "413", "415", "422", "503"} <= set(post["responses"])
    assert post["responses"]["422"]["content"]["application/problem+json"]["schema"]["$ref"].endswith("/Problem")
    for path in ("/api/observability/stats", "/api/observability/stream", "/api/observability/dead-letter",
                 "/api/observability/activities/{key}", "/api/observability/activities/{id}/events",
                 "/api/observability/activities/{id}/result", "/metrics", "/healthz", "/readyz"):
        assert "get" in doc["paths"][path], path
    assert redirect.status_code in (302, 307) and redirect.headers["location"] == "/api/openapi.json"
    assert index["openapi"] == "/api/openapi.json"


async def test_depth_and_oldest_ready_gauges_are_read_at_scrape_time_and_cached() -> None:
    backend = rq.MemoryBackend()
    ex = rq.ActivityExecutor(backend, "g")
    await ex.activity("t").execute()
    await ex.activity("t").delay(3600).execute()
    app = create_app(backend, gauge_ttl=60)
    gauges = app.state.runnerq_metrics.gauges
    async with asgi_client(app) as c:
        await asyncio.sleep(0.05)
        first = (await c.get("/metrics")).text
        await ex.activity("t").execute()
        cached = (await c.get("/metrics")).text
        gauges.clear()
        fresh = (await c.get("/metrics")).text

    def depth(text: str, status: str) -> float:
        fams = {f.name: f for f in text_string_to_metric_families(text)}
        return next(s.value for s in fams["runnerq_queue_depth"].samples
                    if s.labels == {"queue": "g", "status": status})

    assert depth(first, "pending") == 1 and depth(first, "scheduled") == 1 and depth(first, "completed") == 0
    assert depth(cached, "pending") == 1  # within the ttl: no backend read
    assert depth(fresh, "pending") == 2 and gauges.readings == 2
    fams = {f.name: f for f in text_string_to_metric_families(first)}
    (age,) = [s for s in fams["runnerq_oldest_ready_age_seconds"].samples if s.labels == {"queue": "g"}]
    assert 0.04 <= age.value < 30


async def test_gauges_of_served_queues_only() -> None:
    backend = rq.MemoryBackend()
    await rq.ActivityExecutor(backend, "private").activity("t").execute()
    async with asgi_client(create_app(backend, queues=["public"])) as c:
        text = (await c.get("/metrics")).text
    assert 'queue="private"' not in text
    assert 'runnerq_queue_depth{queue="public",status="pending"} 0.0' in text


async def test_a_damaged_result_is_null_with_its_reason_and_every_body_stays_valid_json() -> None:
    backend = DamagedResults()
    ids = await drained(backend)
    backend.damaged = True
    engine = rq.WorkerEngine(backend, **FAST)

    @engine.activity("ok")
    async def ok(payload: Any, ctx: rq.ActivityContext) -> Any:
        return {"doubled": payload * 2}

    async with asgi_client(create_app(backend)) as c, engine:
        seed = await c.get(f"{OBS}/activities/{ids['done']}/result")
        detail = await c.get(f"/api/v1/queues/default/activities/{ids['done']}")
        waited = await c.post("/api/v1/queues/default/activities?wait=5", json={"type": "ok", "payload": 2})
        failed = await c.get(f"{OBS}/activities/{ids['dead']}/result")
    # each body embedded the stored text raw: '{"doubled": 4' made all three responses invalid JSON
    for response in (seed, detail, waited):
        assert response.status_code in (200, 201), response.text
    reason = "corrupt row: result is not valid JSON"
    assert seed.json() == {"activity_id": ids["done"], "status": "completed", "result": None, "error": None,
                           "corrupt": reason}
    assert detail.json()["result"]["result"] is None and detail.json()["result"]["corrupt"] == reason
    assert waited.json()["status"] == "completed" and waited.json()["result"] is None
    assert waited.json()["corrupt"] == reason
    assert failed.json()["corrupt"] is None and "boom" in failed.json()["error"]
