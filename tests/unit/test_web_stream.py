"""The SSE stream on a real uvicorn server (memory backend): ids, resume, keepalive, bounded buffer, disconnects."""

from __future__ import annotations

import asyncio
import json
from collections.abc import MutableMapping
from typing import Any

import httpx

import runnerq_fast as rq
from runnerq_fast.web import create_app
from tests.acceptance.helpers import eventually
from tests.web_helpers import asgi_client, live_server, sse_events

STREAM = "/api/observability/stream"


async def all_event_ids(backend: rq.MemoryBackend, ids: list[str]) -> list[int]:
    out: list[int] = []
    for i in ids:
        out += [e.id for e in await backend.get_events(i)]
    return sorted(out)


async def test_events_carry_ids_and_resume_after_last_event_id_with_no_gap_and_no_duplicate() -> None:
    backend = rq.MemoryBackend()
    ex = rq.ActivityExecutor(backend)
    app = create_app(backend)
    enqueued: list[str] = []
    async with live_server(app) as base, httpx.AsyncClient(base_url=base, timeout=10) as c:
        async with c.stream("GET", STREAM, params={"after": 0}) as r:
            assert r.status_code == 200
            assert r.headers["content-type"].startswith("text/event-stream")
            assert r.headers["cache-control"] == "no-cache" and r.headers["x-accel-buffering"] == "no"
            lines = r.aiter_lines()
            first = await sse_events(lines, 1)
            assert first == [{"retry": "2000"}]
            for i in range(5):
                enqueued.append((await ex.activity("t").payload(i).execute()).activity_id)
            got = await sse_events(lines, 3)
        seen = [int(e["id"]) for e in got]
        for e in got:
            data = json.loads(e["data"])
            assert data["id"] == int(e["id"]) and data["event_type"] == "enqueued" and data["queue"] == "default"
        # disconnected: events written meanwhile must come on resume
        for i in range(5, 10):
            enqueued.append((await ex.activity("t").payload(i).execute()).activity_id)
        async with c.stream("GET", STREAM, headers={"Last-Event-ID": str(seen[-1])}) as r:
            lines = r.aiter_lines()
            rest = await sse_events(lines, 1 + 10 - len(seen))
        resumed = [int(e["id"]) for e in rest if "id" in e]
    assert seen + resumed == await all_event_ids(backend, enqueued)


async def test_without_a_resume_id_the_stream_is_live_only_and_a_bad_id_is_422() -> None:
    backend = rq.MemoryBackend()
    ex = rq.ActivityExecutor(backend)
    await ex.activity("old").execute()
    async with live_server(create_app(backend)) as base, httpx.AsyncClient(base_url=base, timeout=10) as c:
        async with c.stream("GET", STREAM) as r:
            lines = r.aiter_lines()
            await sse_events(lines, 1)  # retry:
            new = await ex.activity("new").execute()
            (ev,) = await sse_events(lines, 1)
        bad = await c.get(STREAM, headers={"Last-Event-ID": "abc"})
    assert json.loads(ev["data"])["activity_id"] == new.activity_id
    assert bad.status_code == 422 and bad.headers["content-type"] == "application/problem+json"


async def test_an_idle_stream_sends_keepalive_comments() -> None:
    backend = rq.MemoryBackend()
    async with live_server(create_app(backend, sse_keepalive=0.05)) as base, \
            httpx.AsyncClient(base_url=base, timeout=10) as c, c.stream("GET", STREAM) as r:
        lines: list[str] = []
        async for line in r.aiter_lines():
            lines.append(line)
            if lines.count(": keepalive") >= 2:
                break
    assert lines[0] == "retry: 2000" and lines.count(": keepalive") == 2


async def test_a_disconnected_client_is_cleaned_up() -> None:
    backend = rq.MemoryBackend()
    app = create_app(backend)
    streams = app.state.runnerq_streams
    async with live_server(app) as base, httpx.AsyncClient(base_url=base, timeout=10) as c:
        async with c.stream("GET", STREAM) as r:
            await sse_events(r.aiter_lines(), 1)
            assert len(streams) == 1 and len(backend._subscribers["default"]) == 1

        async def gone() -> bool:
            return not streams and not backend._subscribers["default"]

        await eventually(gone, 5, "the stream and its backend subscription to be released")


async def test_a_slow_client_is_told_to_resync_and_its_buffer_stays_bounded() -> None:
    """The ASGI app called directly with a ``send`` that blocks: the client cannot take anything."""
    backend = rq.MemoryBackend()
    app = create_app(backend, sse_buffer=50)
    ex = rq.ActivityExecutor(backend)
    released = asyncio.Event()
    chunks: list[bytes] = []
    disconnect = asyncio.Event()

    async def send(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.body" and chunks:
            await released.wait()  # the socket is full
        if message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    async def receive() -> MutableMapping[str, Any]:
        await disconnect.wait()
        return {"type": "http.disconnect"}

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
             "scheme": "http", "path": STREAM, "raw_path": STREAM.encode(), "root_path": "", "query_string": b"",
             "headers": [(b"host", b"t")], "server": ("t", 80), "client": ("c", 1)}
    call = asyncio.create_task(app(scope, receive, send))
    await eventually(lambda: _true(len(chunks) == 1), 5, "the first chunk")
    (stream,) = app.state.runnerq_streams
    await ex.enqueue_many([("t", i) for i in range(500)])  # 500 events for a 50-event buffer
    await eventually(lambda: _true(stream._overflow_at is not None), 5, "the overflow")
    released.set()
    await asyncio.wait_for(call, 5)
    disconnect.set()
    assert stream.peak <= 50
    tail = b"".join(chunks)
    assert b"event: resync" in tail
    last = tail.rsplit(b"event: resync\nid: ", 1)[1].split(b"\n", 1)[0]
    assert int(last) == stream._overflow_at
    assert not app.state.runnerq_streams and not backend._subscribers["default"]


async def _true(value: bool) -> bool:
    return value


async def test_the_runnerq_routes_choose_the_queue() -> None:
    backend = rq.MemoryBackend()
    await rq.ActivityExecutor(backend, "emails").activity("t").execute()
    async with asgi_client(create_app(backend, queues=["emails"])) as c:
        default = (await c.get("/api/observability/stats")).json()
        other = await c.get("/api/observability/stats", params={"queue": "default"})
    assert default["queue"] == "emails" and default["pending_activities"] == 1
    assert other.status_code == 404
