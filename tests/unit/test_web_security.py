"""Bearer token, read-only, body caps, CORS off by default, and two apps sharing nothing."""

from __future__ import annotations

import hmac
from typing import Any

import pytest

import runnerq_fast as rq
from runnerq_fast.web import WebLimits, create_app
from tests.web_helpers import asgi_client

Q = "/api/v1/queues/default/activities"


async def test_mutating_routes_need_the_bearer_token_reads_do_not() -> None:
    backend = rq.MemoryBackend()
    async with asgi_client(create_app(backend, token="s3cret")) as c:
        none = await c.post(Q, json={"type": "t"})
        wrong = await c.post(Q, json={"type": "t"}, headers={"Authorization": "Bearer nope"})
        basic = await c.post(f"{Q}/batch", json={"activities": []}, headers={"Authorization": "Basic czNjcmV0"})
        empty = await c.post(Q, json={"type": "t"}, headers={"Authorization": "Bearer "})
        ok = await c.post(Q, json={"type": "t"}, headers={"Authorization": "Bearer s3cret"})
        lower = await c.post(Q, json={"type": "t"}, headers={"Authorization": "bearer s3cret"})
        reads = [await c.get(p) for p in ("/api/observability/stats", "/healthz", "/metrics", "/api/openapi.json")]
    for r in (none, wrong, basic, empty):
        assert r.status_code == 401, r.text
        assert r.headers["www-authenticate"].startswith("Bearer")
        assert r.headers["content-type"] == "application/problem+json"
    assert ok.status_code == 201 and lower.status_code == 201
    assert all(r.status_code == 200 for r in reads)
    assert (await backend.stats("default")).total == 2


async def test_the_token_is_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: Any, b: Any) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)  # the module auth compares with
    async with asgi_client(create_app(rq.MemoryBackend(), token="s3cret")) as c:
        await c.post(Q, json={"type": "t"}, headers={"Authorization": "Bearer guess"})
    assert calls == [(b"guess", b"s3cret")]


async def test_the_token_is_in_the_openapi_document_only_when_configured() -> None:
    async with asgi_client(create_app(rq.MemoryBackend(), token="t")) as c:
        with_token = (await c.get("/api/openapi.json")).json()
    async with asgi_client(create_app(rq.MemoryBackend())) as c:
        without = (await c.get("/api/openapi.json")).json()
    assert with_token["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    assert with_token["paths"]["/api/v1/queues/{queue}/activities"]["post"]["security"] == [{"bearer": []}]
    assert "securitySchemes" not in without["components"]


async def test_read_only_serves_gets_only() -> None:
    backend = rq.MemoryBackend()
    await rq.ActivityExecutor(backend).activity("t").execute()
    async with asgi_client(create_app(backend, read_only=True, token="t")) as c:
        post = await c.post(Q, json={"type": "t"}, headers={"Authorization": "Bearer t"})
        batch = await c.post(f"{Q}/batch", json={"activities": [{"type": "t"}]})
        stats = await c.get("/api/observability/stats")
    assert post.status_code == 405 and batch.status_code == 405
    assert post.headers["allow"] == "GET, HEAD" and "read-only" in post.json()["detail"]
    assert stats.status_code == 200 and stats.json()["pending_activities"] == 1
    assert (await backend.stats("default")).total == 1


async def test_request_bodies_are_capped() -> None:
    backend = rq.MemoryBackend()
    app = create_app(backend, limits=WebLimits(max_body_bytes=512, max_batch_body_bytes=2048))
    async with asgi_client(app) as c:
        one = await c.post(Q, json={"type": "t", "payload": "x" * 600})
        batch = await c.post(f"{Q}/batch", json={"activities": [{"type": "t", "payload": "x" * 100}] * 30})
        fits = await c.post(f"{Q}/batch", json={"activities": [{"type": "t", "payload": "x" * 100}] * 10})
    assert one.status_code == 413 and batch.status_code == 413
    assert fits.status_code == 201
    assert (await backend.stats("default")).total == 10


async def test_cors_is_off_by_default_and_on_for_listed_origins() -> None:
    preflight = {"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"}
    async with asgi_client(create_app(rq.MemoryBackend())) as c:
        get = await c.get("/api/observability/stats", headers={"Origin": "https://evil.example"})
        options = await c.options(Q, headers=preflight)
    assert "access-control-allow-origin" not in get.headers
    assert "access-control-allow-origin" not in options.headers and options.status_code == 405
    app = create_app(rq.MemoryBackend(), cors_origins=["https://console.example"])
    async with asgi_client(app) as c:
        allowed = await c.get("/api/observability/stats", headers={"Origin": "https://console.example"})
        refused = await c.get("/api/observability/stats", headers={"Origin": "https://evil.example"})
    assert allowed.headers["access-control-allow-origin"] == "https://console.example"
    assert "access-control-allow-origin" not in refused.headers


async def test_two_apps_in_one_process_share_nothing() -> None:
    a_backend, b_backend = rq.MemoryBackend(), rq.MemoryBackend()
    a, b = create_app(a_backend, token="a"), create_app(b_backend)
    async with asgi_client(a) as ca, asgi_client(b) as cb:
        ra = await ca.post(Q, json={"type": "t"}, headers={"Authorization": "Bearer a"})
        rb = await cb.post(Q, json={"type": "t"})
        ra_in_b = await cb.get(f"/api/observability/activities/{ra.json()['id']}")
        metrics_a = (await ca.get("/metrics")).text
        metrics_b = (await cb.get("/metrics")).text
    assert ra.status_code == 201 and rb.status_code == 201
    assert ra_in_b.status_code == 404
    assert (await a_backend.stats("default")).total == 1 and (await b_backend.stats("default")).total == 1
    line = 'runnerq_activities_enqueued_total{activity_type="t",queue="default"} 1.0'
    assert line in metrics_a and line in metrics_b
    assert a.state.runnerq is not b.state.runnerq


@pytest.mark.parametrize("token", ["\u20acuro", "t\u00f6k\u0113n", "a\nb", "nul\x00", "del\x7f"])
def test_a_token_no_header_can_carry_is_refused_at_creation(token: str) -> None:
    """A token outside Latin-1 (or with a control character) was accepted, then no request could ever match it:
    a header is Latin-1 bytes, so every write answered 401."""
    with pytest.raises(ValueError, match=r"outside Latin-1|control character") as err:
        create_app(rq.MemoryBackend(), token=token)
    assert "no request could ever match" in str(err.value)


async def test_a_latin1_token_matches_the_bytes_a_client_sends() -> None:
    backend = rq.MemoryBackend()
    async with asgi_client(create_app(backend, token=" caf\u00e9 ")) as c:
        latin1 = await c.post(Q, json={"type": "t"}, headers={b"Authorization": b"Bearer caf\xe9"})
        utf8 = await c.post(Q, json={"type": "t"}, headers={b"Authorization": "Bearer caf\u00e9".encode()})
    assert latin1.status_code == 201, latin1.text
    assert utf8.status_code == 401  # other bytes: not the token
    assert (await backend.stats("default")).total == 1
