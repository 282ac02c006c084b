"""The SSE stream on a real uvicorn server (memory backend): ids, resume, keepalive, bounded buffer, disconnects."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, AsyncIterator, MutableMapping
from typing import Any

import httpx

import runnerq_fast as rq
from runnerq_fast.models import ActivityEvent
from runnerq_fast.web import create_app
from runnerq_fast.web.stream import StreamHub, format_event
from runnerq_fast.web.wire import encode, event_view
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


async def test_a_disconnected_client_is_cleaned_up_and_the_reader_stops_after_the_grace_then_restarts() -> None:
    backend = rq.MemoryBackend()
    ex = rq.ActivityExecutor(backend)
    app = create_app(backend, sse_grace=0.05)
    streams, hubs = app.state.runnerq_streams, app.state.runnerq_hubs
    async with live_server(app) as base, httpx.AsyncClient(base_url=base, timeout=10) as c:
        async with c.stream("GET", STREAM) as r:
            await sse_events(r.aiter_lines(), 1)
            first = hubs["default"]
            assert len(streams) == 1 and len(backend._subscribers["default"]) == 1

        async def gone() -> bool:
            return not streams and not hubs and not backend._subscribers["default"]

        await eventually(gone, 5, "the stream, its hub and the backend subscription to be released")
        assert first.closed
        async with c.stream("GET", STREAM) as r:  # a fresh reader for the next client
            lines = r.aiter_lines()
            await sse_events(lines, 1)
            assert hubs["default"] is not first and len(backend._subscribers["default"]) == 1
            new = await ex.activity("t").execute()
            (ev,) = await sse_events(lines, 1)
    assert json.loads(ev["data"])["activity_id"] == new.activity_id


def _scope(path: str) -> dict[str, Any]:
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
            "scheme": "http", "path": path, "raw_path": path.encode(), "root_path": "", "query_string": b"",
            "headers": [(b"host", b"t")], "server": ("t", 80), "client": ("c", 1)}


async def test_a_slow_client_is_told_to_resync_without_holding_up_the_reader_or_other_clients() -> None:
    """The ASGI app called directly with a ``send`` that blocks (the socket is full) beside a live client."""
    backend = rq.MemoryBackend()
    app = create_app(backend, sse_buffer=50, sse_flush_interval=0.01)
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

    call = asyncio.create_task(app(_scope(STREAM), receive, send))
    await eventually(lambda: _true(len(chunks) == 1), 5, "the first chunk")
    (slow,) = app.state.runnerq_streams
    hub = app.state.runnerq_hubs["default"]
    async with live_server(app) as base, httpx.AsyncClient(base_url=base, timeout=10) as c, \
            c.stream("GET", STREAM) as r:
        lines = r.aiter_lines()
        await sse_events(lines, 1)
        ids: list[str] = []
        for k in range(25):  # bursts of 20 (smaller than the buffer) the fast client keeps up with
            ids += await ex.enqueue_many([("t", k * 20 + i) for i in range(20)])
            await asyncio.sleep(0.02)
        fast = await sse_events(lines, 500)  # the other client gets everything meanwhile
        assert hub.read == 500  # the reader did not wait for the slow client
        assert len(hub._chunks) < 2 * 50  # the ring holds at most twice the buffer, whatever the clients
        assert hub.clients == 1  # the slow client was dropped
    released.set()
    await asyncio.wait_for(call, 5)
    disconnect.set()
    tail = b"".join(chunks)
    assert tail.count(b"event: resync") == 1 and tail.endswith(b"\n\n")
    last = tail.rsplit(b"event: resync\nid: ", 1)[1].split(b"\n", 1)[0]
    stored = await all_event_ids(backend, ids)
    # the id to resume from, once refetched: the newest event read when the client was dropped,
    # more than the buffer past what it was sent
    assert int(last) in stored and int(last) - stored[0] + 1 > slow.sent + 50
    assert b'"last_event_id":%d}' % int(last) in tail
    assert [int(e["id"]) for e in fast] == stored


async def test_a_resume_ahead_of_the_shared_reader_hands_over_with_no_gap_and_no_duplicate() -> None:
    """The shared reader lags (20 ms per event): a client resuming after an event it has not read yet
    replays from the store, then joins the ring once the reader has caught up with the replay."""
    backend = rq.MemoryBackend()
    ex = rq.ActivityExecutor(backend)

    async def opener(after: int | None) -> AsyncIterator[rq.ActivityEvent]:
        async for ev in backend.event_stream("default", after):
            if after is None:  # the shared reader's source lags, the replays do not
                await asyncio.sleep(0.02)
            yield ev

    hub = StreamHub(opener, flush_interval=0.0, grace=0.0)
    try:
        live = hub.client(None)._body()
        assert await live.__anext__() == b"retry: 2000\n\n"
        await asyncio.sleep(0.01)  # the reader task subscribes on its first turn
        probe = await ex.activity("probe").execute()
        await eventually(lambda: _true(hub.read == 1), 5, "the shared reader")
        batch = list(await ex.enqueue_many([("t", i) for i in range(10)]))
        ids = await all_event_ids(backend, batch)
        assert hub.read < 8
        client = hub.client(ids[7])  # the reader has not read ids[7] yet
        ahead = client._body()
        assert await ahead.__anext__() == b"retry: 2000\n\n"
        first = await asyncio.wait_for(_collect(ahead, 2, close=False), 5)  # from its replay
        assert client.replaying and client.replayed == 2
        reading = asyncio.create_task(_collect(ahead, 40))
        more: list[str] = []
        for i in range(40):  # faster than the reader reads: the replay stays ahead of it
            more.append((await ex.activity("u").payload(i).execute()).activity_id)
            await asyncio.sleep(0.01)
            if i == 20:
                assert not client.replaying  # handed over while the writes go on
        rest = await asyncio.wait_for(reading, 5)
        everything = await asyncio.wait_for(_collect(live, 51), 5)
    finally:
        hub.close()
    order = await all_event_ids(backend, [probe.activity_id, *batch, *more])
    assert first + rest == order[order.index(ids[7]) + 1:]
    assert client.sent == 42 and client.replayed >= 2
    assert everything == order


async def _collect(body: AsyncGenerator[bytes], n: int, *, close: bool = True) -> list[int]:
    ids: list[int] = []
    while len(ids) < n:
        chunk = await body.__anext__()
        ids += [int(line[4:]) for line in chunk.split(b"\n") if line.startswith(b"id: ")]
    if close:
        await body.aclose()
    return ids


async def test_a_failing_backend_read_ends_every_client_with_an_error_event() -> None:
    backend = rq.MemoryBackend()

    async def failing(after: int | None) -> AsyncIterator[rq.ActivityEvent]:
        async for ev in backend.event_stream("default", after):
            yield ev
            raise ConnectionError("the store went away")

    hub = StreamHub(failing, flush_interval=0.0)
    bodies = [hub.client(None)._body() for _ in range(3)]
    for b in bodies:
        await b.__anext__()
    await asyncio.sleep(0.01)  # the reader task subscribes on its first turn
    await rq.ActivityExecutor(backend).activity("t").execute()
    outs = await asyncio.wait_for(asyncio.gather(*[_drain(b) for b in bodies]), 5)
    assert all(o.startswith(b"id: ") and o.endswith(b"event: error\ndata: " + o.rsplit(b"data: ", 1)[1]) for o in outs)
    assert all(b"the backend event stream failed" in o for o in outs)
    assert hub.closed and isinstance(hub.error, ConnectionError)


async def _drain(body: AsyncIterator[bytes]) -> bytes:
    return b"".join([chunk async for chunk in body])


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


def test_the_live_stream_leaves_a_failed_attempt_s_traceback_out() -> None:
    # every watcher gets every event: the traceback (up to 16,000 characters) stays in the activity's events
    ev = ActivityEvent(7, "a" * 32, "q", "retrying", 1_700_000_000_000, "ValueError: x", "Traceback ...")
    frame = format_event(ev)
    assert frame.startswith(b"id: 7\ndata: ")
    sent = json.loads(frame.split(b"data: ", 1)[1])
    assert sent["event_type"] == "retrying" and sent["detail"] == "ValueError: x" and "traceback" not in sent
    assert json.loads(encode(event_view(ev)))["traceback"] == "Traceback ..."
