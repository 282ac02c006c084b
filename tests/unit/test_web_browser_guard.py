"""What a page of another site may do (issue 26, item 1): the Host check and the cross-site write check.

In process (httpx's ASGI transport), with the headers a browser sends; the
real browser from a second origin is in tests/browser/test_cross_origin.py.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount, Route

import runnerq_fast as rq
from runnerq_fast.web import create_app
from tests.web_helpers import asgi_client

Q = "/api/v1/queues/default/activities"
EVIL = "http://evil.example:8080"


def write_routes(app: Starlette, activity_id: str) -> list[tuple[str, str]]:
    """(method, path) of every route of the app that is not GET/HEAD, with its parameters filled in."""
    out = []
    for route in app.routes:
        if not isinstance(route, Route) or route.methods is None:
            continue
        for method in sorted(route.methods - {"GET", "HEAD"}):
            path = route.path.format(queue="default", id=activity_id, action="cancel")
            out.append((method, path))
    return out


async def _pending(backend: rq.Backend) -> tuple[str, dict[str, Any]]:
    fut = await rq.ActivityExecutor(backend).activity("t").payload({"n": 1}).delay(3600).execute()
    return fut.activity_id, {"queue": "default", "status": "scheduled", "priority": 2}


async def _unchanged(backend: rq.Backend, activity_id: str) -> None:
    snap = await backend.get_activity(activity_id)
    assert snap is not None and snap.status == "scheduled" and snap.priority == 2
    assert (await backend.stats("default")).total == 1
    events = await backend.get_events(activity_id)
    assert [e.event_type for e in events] == ["enqueued", "scheduled"], events  # no action recorded


# What a page of another origin can send without a CORS preflight: a form (urlencoded, multipart), text/plain,
# or no Content-Type at all; the browser adds Origin and (current ones) Sec-Fetch-Site.
SIMPLE = [
    ({"Origin": EVIL, "Sec-Fetch-Site": "cross-site", "Content-Type": "text/plain"}, b'{"type": "t"}', 403),
    ({"Origin": EVIL, "Sec-Fetch-Site": "cross-site"}, None, 403),
    ({"Origin": EVIL, "Content-Type": "application/x-www-form-urlencoded"}, b"type=t", 403),
    ({"Origin": "null", "Content-Type": "text/plain"}, b'{"type": "t"}', 403),
    ({"Sec-Fetch-Site": "same-site", "Content-Type": "text/plain"}, b'{"type": "t"}', 403),
    # without Origin (a client that is not a browser): still only JSON bodies
    ({"Content-Type": "text/plain"}, b'{"type": "t"}', 415),
    ({"Content-Type": "multipart/form-data; boundary=x"}, b"--x--", 415),
    ({}, b'{"type": "t", "priority": 4}', 415),
]


@pytest.mark.parametrize(("headers", "body", "status"), SIMPLE)
async def test_every_write_route_refuses_what_a_page_of_another_site_can_send(
    headers: dict[str, str], body: bytes | None, status: int
) -> None:
    """Before: a POST with no Content-Type or text/plain enqueued, cancelled and deleted (no check on Origin)."""
    backend = rq.MemoryBackend()
    activity_id, _ = await _pending(backend)
    app = create_app(backend)
    routes = write_routes(app, activity_id)
    # enqueue, batch, retry, cancel, run-now, priority, delete; the five bulk actions and their catch-all
    assert len(routes) == 13, routes
    async with asgi_client(app) as c:
        for method, path in routes:
            r = await c.request(method, path, headers=headers, content=body)
            assert r.status_code == status, (method, path, r.text)
            assert r.headers["content-type"] == "application/problem+json"
            assert ("origin" if status == 403 else "application/json") in r.json()["detail"]
        # the direct enqueue path (no CORS) and the routed one refuse alike
        r = await c.post(f"{Q}?wait=1", headers=headers, content=body)
        assert r.status_code == status
    await _unchanged(backend, activity_id)


async def test_the_same_writes_from_the_servers_own_origin_or_no_browser_work() -> None:
    backend = rq.MemoryBackend()
    activity_id, _ = await _pending(backend)
    own = {"Origin": "http://testserver", "Sec-Fetch-Site": "same-origin"}
    async with asgi_client(create_app(backend)) as c:
        enq = await c.post(Q, json={"type": "t"}, headers=own)
        prio = await c.post(f"{Q}/{activity_id}/priority", json={"priority": "high"}, headers=own)
        bodyless = await c.post(f"{Q}/{activity_id}/run-now", headers={"Content-Type": "application/json", **own})
        curl = await c.post(f"{Q}/{activity_id}/cancel")  # no body, no Content-Type, no Origin: curl -X POST
        typed = await c.post(f"{Q}/batch", json={"activities": [{"type": "t"}]},
                             headers={"Content-Type": "application/json; charset=utf-8", "Sec-Fetch-Site": "none"})
    assert enq.status_code == 201, enq.text
    assert prio.status_code == 200 and bodyless.status_code == 200, (prio.text, bodyless.text)
    assert curl.status_code == 200 and curl.json()["changed"] == [activity_id]
    assert typed.status_code == 201
    assert (await backend.stats("default")).total == 3


async def test_an_origin_allowed_by_cors_may_write_and_others_may_not() -> None:
    backend = rq.MemoryBackend()
    app = create_app(backend, cors_origins=["https://console.example"])
    cross = {"Sec-Fetch-Site": "cross-site"}
    async with asgi_client(app) as c:
        listed = await c.post(Q, json={"type": "t"}, headers={"Origin": "https://console.example", **cross})
        other = await c.post(Q, json={"type": "t"}, headers={"Origin": "https://evil.example", **cross})
        listed_text = await c.post(Q, content=b'{"type": "t"}',
                                   headers={"Origin": "https://console.example", "Content-Type": "text/plain"})
    assert listed.status_code == 201, listed.text
    assert listed.headers["access-control-allow-origin"] == "https://console.example"
    assert other.status_code == 403 and "cors_origins" in other.json()["detail"]
    assert listed_text.status_code == 415  # even an allowed origin sends JSON
    async with asgi_client(create_app(backend, cors_origins=["*"])) as c:
        star = await c.post(Q, json={"type": "t"}, headers={"Origin": "https://anyone.example", **cross})
    assert star.status_code == 201
    assert (await backend.stats("default")).total == 2


def loopback_client(app: Starlette, host: str = "127.0.0.1:8080") -> httpx.AsyncClient:
    """A client whose connection (ASGI ``server``) is ``host``, as a server bound there would see it."""
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=f"http://{host}")


@pytest.mark.parametrize("host", ["evil.example:8080", "evil.example", "127.0.0.1.nip.io:8080", "localhost.evil:8080"])
async def test_a_loopback_server_refuses_a_host_that_is_not_its_own(host: str) -> None:
    """DNS rebinding: a page of evil.example resolved to 127.0.0.1 read every payload (no Host check)."""
    backend = rq.MemoryBackend()
    activity_id, _ = await _pending(backend)
    async with loopback_client(create_app(backend)) as c:
        answers = [await c.get(p, headers={"Host": host}) for p in
                   ("/api/v1/queues/default/activities", f"{Q}/{activity_id}", "/metrics", "/")]
        answers.append(await c.post(Q, json={"type": "t"}, headers={"Host": host}))
    for r in answers:
        assert r.status_code == 400, (r.request.url, r.text)
        assert "--allowed-host" in r.json()["detail"] and "payload" not in r.text
    await _unchanged(backend, activity_id)


@pytest.mark.parametrize("host", ["127.0.0.1:8080", "localhost:8080", "LOCALHOST", "[::1]:9999", "127.0.0.2",
                                  "console.localhost:8080", "localhost.:8080", "queue.example:443",
                                  "a.corp.example", "corp.example"])
async def test_loopback_names_and_allowed_hosts_are_answered(host: str) -> None:
    app = create_app(rq.MemoryBackend(), allowed_hosts=["Queue.Example", ".corp.example"])
    async with loopback_client(app) as c:
        r = await c.get("/api/v1/queues", headers={"Host": host})
    assert r.status_code == 200, r.text


async def test_a_server_on_another_address_answers_any_host_unless_allowed_hosts_is_given() -> None:
    backend = rq.MemoryBackend()
    async with loopback_client(create_app(backend), "192.0.2.7:8080") as c:
        anything = await c.get("/api/v1/queues", headers={"Host": "anything.example"})
    async with loopback_client(create_app(backend, allowed_hosts=["queue.example"]), "192.0.2.7:8080") as c:
        listed = await c.get("/api/v1/queues", headers={"Host": "queue.example"})
        by_address = await c.get("/api/v1/queues")  # Host: 192.0.2.7:8080, the address connected to
        other = await c.get("/api/v1/queues", headers={"Host": "anything.example"})
    async with loopback_client(create_app(backend, allowed_hosts=["*"])) as c:
        star = await c.get("/api/v1/queues", headers={"Host": "anything.example"})
    assert anything.status_code == 200 and listed.status_code == 200 and by_address.status_code == 200
    assert other.status_code == 400 and star.status_code == 200


async def test_a_mounted_app_checks_the_host_its_embedder_configured() -> None:
    backend = rq.MemoryBackend()
    inner = create_app(backend, allowed_hosts=["jobs.example"])
    parent = Starlette(routes=[Mount("/jobs", app=inner)])
    async with loopback_client(parent) as c:
        listed = await c.get("/jobs/api/v1/queues", headers={"Host": "jobs.example"})
        other = await c.get("/jobs/api/v1/queues", headers={"Host": "evil.example"})
        cross = await c.post("/jobs" + Q, content=b'{"type": "t"}',
                             headers={"Host": "jobs.example", "Origin": EVIL, "Content-Type": "text/plain"})
    assert listed.status_code == 200 and other.status_code == 400 and cross.status_code == 403
    assert (await backend.stats("default")).total == 0


@pytest.mark.parametrize("entry", ["", " ", "example.com:8080", "http://example.com", "ex ample.com", "bücher.de"])
def test_an_allowed_host_that_is_not_a_host_name_is_refused(entry: str) -> None:
    with pytest.raises(ValueError, match="allowed_hosts"):
        create_app(rq.MemoryBackend(), allowed_hosts=[entry])
