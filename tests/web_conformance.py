"""The web app against every backend: v1 listings, actions and the enqueue path (subclassed per backend).

A subclass provides a ``backend`` fixture (memory in tests/unit, SQLite,
PostgreSQL and Redis in tests/integration) and ``queue`` names a fresh queue.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import msgspec
import pytest

import runnerq_fast as rq
from runnerq_fast.web import create_app
from tests.conformance import FAST, eventually
from tests.typed_payloads import ORDER_ID, SAMPLE_JSON, sample_order, typed_engine
from tests.web_helpers import asgi_client, live_server, sse_events

V1 = "/api/v1/queues"


async def seed(backend: rq.Backend, queue: str) -> dict[str, Any]:
    """A small mixed queue: 30 pending (3 types, 2 tenants, priorities), children, a failure, a scheduled one."""
    ex = rq.ActivityExecutor(backend, queue)
    ids: dict[str, Any] = {"pending": []}
    for i in range(30):
        b = ex.activity(("email", "sms", "push")[i % 3]).payload(i).priority(1 + i % 4)
        b = b.metadata({"tenant": "t1" if i % 2 else "t2"})
        ids["pending"].append((await b.execute()).activity_id)
    ids["scheduled"] = (await ex.activity("later").delay(3600).execute()).activity_id
    engine = rq.WorkerEngine(backend, **{**FAST, "queue_name": queue}, activity_types=["parent", "broken"])

    @engine.activity("parent")
    async def parent(payload: Any, ctx: rq.ActivityContext) -> list[str]:
        return [(await ctx.executor.activity("child").payload(k).execute()).activity_id for k in range(3)]

    @engine.activity("broken")
    async def broken(payload: Any, ctx: rq.ActivityContext) -> None:
        raise rq.NonRetryableError("no")

    ids["parent"] = (await ex.activity("parent").execute()).activity_id
    ids["broken"] = (await ex.activity("broken").execute()).activity_id
    async with engine:
        ids["children"] = await rq.ActivityFuture(backend, ids["parent"]).result(timeout=10)
        with contextlib.suppress(rq.ActivityFailed):
            await rq.ActivityFuture(backend, ids["broken"]).result(timeout=10)
    return ids


async def page_all(c: httpx.AsyncClient, url: str, **params: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    cursor = None
    for _ in range(100):
        r = await c.get(url, params={**params, **({"cursor": cursor} if cursor else {})})
        assert r.status_code == 200, r.text
        body = r.json()
        items += body["items"]
        cursor = body["next_cursor"]
        if cursor is None:
            return items
    raise AssertionError("the cursor never ended")


async def check_v1_and_actions(c: httpx.AsyncClient, backend: rq.Backend, queue: str) -> None:
    """Every v1 read route and every action, by id and in bulk, against ``backend``."""
    ids = await seed(backend, queue)
    base = f"{V1}/{queue}"
    # queues with counts by status and by type
    queues = (await c.get(V1)).json()["queues"]
    (mine,) = [q for q in queues if q["queue"] == queue]
    assert mine["counts"]["pending"] == 33 and mine["counts"]["completed"] == 1 and mine["counts"]["failed"] == 1
    assert mine["counts"]["scheduled"] == 1 and mine["total"] == 36
    assert mine["by_type"]["email"] == {"pending": 10} and mine["by_type"]["child"] == {"pending": 3}
    assert mine["oldest_ready_at"] is not None
    one = (await c.get(base)).json()
    assert one["queue"] == queue and one["total"] == 36
    # filtered, keyset-paged listings (newest first by default; no duplicates across pages)
    emails = await page_all(c, f"{base}/activities", type="email", limit=3)
    assert len(emails) == 10 and len({a["id"] for a in emails}) == 10
    created = [datetime.fromisoformat(a["created_at"]) for a in emails]  # not the strings: "…:01Z" > "…:01.5Z"
    assert created == sorted(created, reverse=True)
    oldest = await page_all(c, f"{base}/activities", type="email", limit=4, order="oldest")
    assert [a["id"] for a in oldest] == [a["id"] for a in reversed(emails)]
    t1_high = await page_all(c, f"{base}/activities", metadata="tenant=t1", priority="high,critical", limit=5)
    want = {ids["pending"][i] for i in range(30) if i % 2 and 1 + i % 4 >= 3}
    assert {a["id"] for a in t1_high} == want
    several = await page_all(c, f"{base}/activities", status="failed,scheduled")
    assert {a["id"] for a in several} == {ids["broken"], ids["scheduled"]}
    future = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    assert await page_all(c, f"{base}/activities", created_after=future) == []
    past = await page_all(c, f"{base}/activities", created_before=future, type="sms", limit=1000)
    assert len(past) == 10
    kids = await page_all(c, f"{base}/activities", parent_id=ids["parent"])
    assert {a["id"] for a in kids} == set(ids["children"]) and all(a["parent_id"] == ids["parent"] for a in kids)
    count = (await c.get(f"{base}/activities/count", params={"status": "pending"})).json()
    assert count == {"count": 33, "exact": True}
    capped = (await c.get(f"{base}/activities/count", params={"cap": 5})).json()
    assert capped == {"count": 5, "exact": False}
    # one activity with events, result and children
    detail = (await c.get(f"{base}/activities/{ids['parent']}")).json()
    assert detail["activity"]["status"] == "completed"
    assert [e["event_type"] for e in detail["events"]][:2] == ["enqueued", "claimed"]
    assert detail["result"]["result"] == ids["children"]
    assert [ch["id"] for ch in detail["children"]] == ids["children"] and detail["children_next_cursor"] is None
    children = (await c.get(f"{base}/activities/{ids['parent']}/children", params={"limit": 2})).json()
    assert [ch["id"] for ch in children["items"]] == ids["children"][:2] and children["next_cursor"]
    for bad in ({"status": "bogus"}, {"priority": "9"}, {"created_after": "yesterday"}, {"metadata": "novalue"},
                {"limit": "0"}, {"cursor": "garbage"}, {"order": "random"}):
        r = await c.get(f"{base}/activities", params=bad)
        assert r.status_code == 422, (bad, r.text)
    assert (await c.get(f"{base}/activities/{'0' * 32}")).status_code == 404
    # the traceback of the failed attempt (issue 27): in the view of one activity, not in listings
    assert detail["activity"]["traceback"] is None
    broken = (await c.get(f"{base}/activities/{ids['broken']}")).json()["activity"]
    assert broken["traceback"].startswith("Traceback (most recent call last):\n")
    assert "in broken\n" in broken["traceback"] and broken["traceback"].rstrip().endswith("NonRetryableError: no")
    assert all(a["traceback"] is None for a in several)
    old = (await c.get(f"/api/observability/activities/{ids['broken']}", params={"queue": queue})).json()
    assert old["traceback"] == broken["traceback"]
    # and on the event of the attempt that raised (the activity's events, both APIs); null on the others
    for events in (
        (await c.get(f"{base}/activities/{ids['broken']}")).json()["events"],
        (await c.get(f"/api/observability/activities/{ids['broken']}/events", params={"queue": queue})).json(),
    ):
        assert [e["traceback"] for e in events if e["event_type"] == "failed"] == [broken["traceback"]]
        assert all(e["traceback"] is None for e in events if e["event_type"] != "failed")
    assert all(e["traceback"] is None for e in detail["events"])

    # ------------------------------------------------------ actions by id
    broken = ids["broken"]
    r = await c.post(f"{base}/activities/{broken}/retry")
    assert r.status_code == 200 and r.json() == {"action": "retry", "changed": [broken], "changed_count": 1,
                                                 "skipped": 0}
    snap = await backend.get_activity(broken)
    assert snap is not None and snap.status == "pending"
    again = await c.post(f"{base}/activities/{broken}/retry")
    assert again.status_code == 409 and "pending" in again.json()["detail"]
    sched = ids["scheduled"]
    assert (await c.post(f"{base}/activities/{sched}/priority", json={"priority": "critical"})).status_code == 200
    assert (await c.post(f"{base}/activities/{sched}/run-now")).status_code == 200
    snap = await backend.get_activity(sched)
    assert snap is not None and snap.status == "pending" and snap.priority == 4
    assert (await c.post(f"{base}/activities/{sched}/cancel")).status_code == 200
    snap = await backend.get_activity(sched)
    assert snap is not None and snap.status == "cancelled"
    kinds = [e["event_type"] for e in (await c.get(f"{base}/activities/{sched}")).json()["events"]]
    assert {"priority_changed", "run_now", "cancelled"} <= set(kinds)
    assert (await c.delete(f"{base}/activities/{ids['pending'][0]}")).status_code == 409  # not finished
    assert (await c.delete(f"{base}/activities/{sched}")).status_code == 200
    assert await backend.get_activity(sched) is None
    assert (await c.post(f"{base}/activities/{'0' * 32}/retry")).status_code == 404

    # ------------------------------------------------------------ in bulk
    r = await c.post(f"{base}/actions/set-priority",
                     json={"filter": {"type": ["push"], "metadata": {"tenant": "t2"}}, "priority": 1})
    push_t2 = [ids["pending"][i] for i in range(30) if i % 3 == 2 and i % 2 == 0]
    assert r.status_code == 200 and set(r.json()["changed"]) <= set(push_t2)
    for i in push_t2:
        snap = await backend.get_activity(i)
        assert snap is not None and snap.priority == 1
    r = await c.post(f"{base}/actions/cancel", json={"ids": ids["pending"][:5]})
    assert r.status_code == 200 and sorted(r.json()["changed"]) == sorted(ids["pending"][:5])
    # ids and a filter: only the sms among them; two of those are cancelled already
    r = await c.post(f"{base}/actions/cancel", json={"filter": {"type": ["sms"]}, "ids": ids["pending"][:9]})
    assert r.json()["changed"] == [ids["pending"][7]] and r.json()["skipped"] == 2
    r = await c.post(f"{base}/actions/retry", json={"filter": {"status": ["cancelled"]}, "limit": 2})
    assert r.status_code == 200 and r.json()["changed_count"] == 2
    assert (await c.get(f"{base}/activities/count", params={"status": "cancelled"})).json()["count"] == 4
    r = await c.post(f"{base}/actions/delete", json={"filter": {"status": ["completed"], "type": ["parent"]}})
    assert r.json()["changed"] == [ids["parent"]]
    for body, status in (({}, 422), ({"filter": {"status": ["bogus"]}}, 422), ({"ids": [], "limit": 0}, 422),
                         ({"filter": {}, "priority": 2}, 422), ({"colour": 1}, 422)):
        r = await c.post(f"{base}/actions/retry", json=body)
        assert r.status_code == status, (body, r.text)
    assert (await c.post(f"{base}/actions/set-priority", json={"filter": {}})).status_code == 422
    assert (await c.post(f"{base}/actions/explode", json={"filter": {}})).status_code == 404


class WebConformance:
    """Checks of the HTTP service that hold on every backend."""

    @property
    def queue(self) -> str:
        return f"web{uuid.uuid4().hex[:10]}"

    async def test_v1_listings_counts_detail_and_actions(self, backend: rq.Backend) -> None:
        async with asgi_client(create_app(backend)) as c:
            await check_v1_and_actions(c, backend, self.queue)

    async def test_fifty_concurrent_requests_with_one_key_make_one_activity(self, backend: rq.Backend) -> None:
        q = self.queue
        path = f"{V1}/{q}/activities"
        async with asgi_client(create_app(backend)) as c:
            existing = await asyncio.gather(*(
                c.post(path, json={"type": "pay", "payload": i, "idempotency_key": "k1"}) for i in range(50)))
            no_reuse = await asyncio.gather(*(
                c.post(path, json={"type": "pay", "idempotency_key": "k2", "on_duplicate": "no_reuse"})
                for _ in range(50)))
        assert sum(r.status_code == 201 for r in existing) == 1
        assert sum(r.status_code == 200 for r in existing) == 49
        assert len({r.json()["id"] for r in existing}) == 1
        assert sum(r.status_code == 201 for r in no_reuse) == 1
        assert sum(r.status_code == 409 for r in no_reuse) == 49
        assert (await backend.stats(q)).total == 2

    async def test_a_batch_repeating_a_key_stores_it_once(self, backend: rq.Backend) -> None:
        q = self.queue
        async with asgi_client(create_app(backend)) as c:
            r = await c.post(f"{V1}/{q}/activities/batch", json={"activities": [
                {"type": "pay", "payload": 1, "idempotency_key": "k"},
                {"type": "pay", "payload": 2, "idempotency_key": "k"},
                {"type": "pay", "payload": 3, "idempotency_key": "k", "on_duplicate": "no_reuse"},
                {"type": "other", "payload": 4, "idempotency_key": "k"},
            ]})
        items = r.json()["activities"]
        assert [it["outcome"] for it in items] == ["created", "existing", "conflict", "created"]
        assert items[0]["id"] == items[1]["id"] == items[2]["id"] != items[3]["id"]
        assert (await backend.stats(q)).total == 2

    async def test_a_payload_enqueued_over_http_reaches_a_typed_handler_as_its_type(self, backend: rq.Backend) -> None:
        """Issue 27 item 5: HTTP sends JSON; the worker decodes it into the handler's annotation (or dead-letters)."""
        q = self.queue
        async with asgi_client(create_app(backend)) as c:
            one = await c.post(f"{V1}/{q}/activities", json={"type": "order", "payload": SAMPLE_JSON})
            batch = await c.post(f"{V1}/{q}/activities/batch", json={"activities": [
                {"type": "when", "payload": "2026-01-02T03:04:05Z"},
                {"type": "order", "payload": {**SAMPLE_JSON, "id": "not-a-uuid"}}]})
        assert one.status_code == 201 and batch.status_code == 201, (one.text, batch.text)
        ids = [one.json()["id"], *(item["id"] for item in batch.json()["activities"])]
        received: list[Any] = []
        engine = typed_engine(backend, q, received)
        async with engine:
            assert await rq.ActivityFuture(backend, ids[0]).result(timeout=10) == f"{ORDER_ID} 19.90"
            assert await rq.ActivityFuture(backend, ids[1]).result(timeout=10) is None
            with pytest.raises(rq.ActivityFailed, match=r"payload does not match Order.*Invalid UUID - at `\$\.id`"):
                await rq.ActivityFuture(backend, ids[2]).result(timeout=10)
        assert sorted(received, key=repr) == sorted([sample_order(), datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)],
                                                    key=repr)

    async def test_stored_json_is_served_as_json(self, backend: rq.Backend) -> None:
        q = self.queue
        payload = {"s": "é ✓", "n": [1, 2.5, None, True], "deep": {"k": {"k": []}}}
        async with asgi_client(create_app(backend)) as c:
            r = await c.post(f"{V1}/{q}/activities", json={"type": "t", "payload": payload, "metadata": {"a": "b"}})
            aid = r.json()["id"]
            runnerq = (await c.get(f"/api/observability/activities/{aid}")).json()
            v1 = (await c.get(f"{V1}/{q}/activities/{aid}")).json()["activity"]
        assert runnerq["payload"] == payload == v1["payload"]
        assert runnerq["metadata"] == {"a": "b"} == v1["metadata"]
        assert runnerq["queue"] == q and runnerq["status"] == "pending"

    async def test_progress_is_served_with_the_activity_and_on_the_stream(self, backend: rq.Backend) -> None:
        # ctx.set_progress: in the v1 and observability detail of the activity (null in listings and before
        # any report), and as a "progress" event on the live stream with the value as its detail
        q = self.queue
        engine = rq.WorkerEngine(backend, **{**FAST, "queue_name": q})
        go_on = asyncio.Event()

        @engine.activity("job")
        async def job(payload: Any, ctx: rq.ActivityContext) -> None:
            ctx.set_progress({"done": 2, "total": 5})
            await go_on.wait()
            ctx.set_progress(1.0)

        app = create_app(backend, queues=[q], sse_flush_interval=0.01)
        async with live_server(app) as base, httpx.AsyncClient(base_url=base, timeout=15) as c, \
                c.stream("GET", "/api/observability/stream") as stream:
            lines = stream.aiter_lines()
            assert await sse_events(lines, 1) == [{"retry": "2000"}]
            fut = await engine.executor.activity("job").execute()
            aid = fut.activity_id
            assert (await c.get(f"{V1}/{q}/activities/{aid}")).json()["activity"]["progress"] is None
            async with engine:
                async def reported() -> bool:
                    r = await c.get(f"{V1}/{q}/activities/{aid}")
                    return bool(r.json()["activity"]["progress"] == {"done": 2, "total": 5})

                await eventually(reported, 10, "the progress to be served")
                seen = (await c.get(f"/api/observability/activities/{aid}")).json()
                assert seen["progress"] == {"done": 2, "total": 5} and seen["status"] == "processing"
                listed = (await c.get(f"{V1}/{q}/activities")).json()["items"]
                assert [a["progress"] for a in listed] == [None]
                go_on.set()
                await fut.result(timeout=10)
            assert (await c.get(f"{V1}/{q}/activities/{aid}")).json()["activity"]["progress"] == 1.0
            kinds: list[tuple[str, str | None]] = []

            async def until_completed() -> None:
                while "completed" not in [k for k, _ in kinds]:
                    for msg in await sse_events(lines, 1):
                        ev = msgspec.json.decode(msg["data"])
                        kinds.append((ev["event_type"], ev["detail"]))

            await asyncio.wait_for(until_completed(), 15)
        assert [d for k, d in kinds if k == "progress"] == ['{"done":2,"total":5}', "1.0"]
        assert kinds.index(("progress", "1.0")) < [k for k, _ in kinds].index("completed")

    async def test_runnerq_listings_page_by_offset_and_show_dead_letters(self, backend: rq.Backend) -> None:
        q = self.queue
        ex = rq.ActivityExecutor(backend, q)
        ids = [(await ex.activity("t").payload(i).execute()).activity_id for i in range(7)]
        engine = rq.WorkerEngine(backend, **{**FAST, "queue_name": q}, activity_types=["doomed"])

        @engine.activity("doomed")
        async def doomed(payload: Any, ctx: rq.ActivityContext) -> None:
            raise RuntimeError("always")

        dead = (await ex.activity("doomed").max_retries(0).execute()).activity_id
        async with engine:
            with contextlib.suppress(rq.ActivityFailed):
                await rq.ActivityFuture(backend, dead).result(timeout=10)
        async with asgi_client(create_app(backend)) as c:
            first = (await c.get("/api/observability/activities/pending", params={"queue": q, "limit": 3})).json()
            second = (await c.get("/api/observability/activities/pending",
                                  params={"queue": q, "limit": 3, "offset": 3})).json()
            rest = (await c.get("/api/observability/activities/pending",
                                params={"queue": q, "offset": 6})).json()
            listed = (await c.get("/api/observability/activities/dead_letter", params={"queue": q})).json()
            records = (await c.get("/api/observability/dead-letter", params={"queue": q})).json()
        newest_first = list(reversed(ids))
        assert [a["id"] for a in first + second + rest] == newest_first
        assert [a["id"] for a in listed] == [dead]
        assert [r["activity"]["id"] for r in records] == [dead] and "always" in records[0]["error"]
        assert records[0]["failed_at"] is not None

    # ---------------------------------------------- bad input found by a fresh-user run (each was a 500)
    async def test_a_body_nested_too_deeply_is_400_and_stores_nothing(self, backend: rq.Backend) -> None:
        q = self.queue
        body = b'{"type": "t", "payload": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
        async with asgi_client(create_app(backend)) as c:
            r = await c.post(f"/api/v1/queues/{q}/activities", content=body,
                             headers={"Content-Type": "application/json"})
            assert r.status_code == 400, r.text
            assert "nested too deeply" in r.json()["detail"]
            r = await c.post(f"/api/v1/queues/{q}/activities/batch", content=b'{"activities": [' + body + b"]}",
                             headers={"Content-Type": "application/json"})
            assert r.status_code in (400, 413), r.text
        assert (await backend.stats(q)).pending == 0

    async def test_a_cursor_or_resume_id_out_of_range_is_422(self, backend: rq.Backend) -> None:
        q = self.queue
        await rq.ActivityExecutor(backend, q).activity("t").execute()
        async with asgi_client(create_app(backend)) as c:
            for created in (99999999999999999999999, 2**63, -(2**63) - 1, -1):
                raw = msgspec.json.encode([1, created, "01a23123d0cb70008b093b16604be07b", True])
                cursor = base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
                r = await c.get(f"/api/v1/queues/{q}/activities", params={"cursor": cursor})
                assert r.status_code == 422, (created, r.status_code, r.text)
                assert r.headers["content-type"].startswith("application/problem+json")
            r = await c.get("/api/observability/stream", params={"queue": q, "after": str(2**63)})
            assert r.status_code == 422, r.text
            r = await c.get(f"/api/v1/queues/{q}/activities", params={"created_after": "9999-12-31T23:59:59Z"})
            assert r.status_code == 422 and "years 1971-6428" in r.json()["detail"], r.text


async def _stored_order(backend: rq.Backend, queue: str, n: int) -> list[int]:
    """The first ``n`` event ids of ``queue`` in the store's own stream order (its replay from the start)."""
    out: list[int] = []
    source = backend.event_stream(queue, 0)
    try:
        async with asyncio.timeout(10):
            async for ev in source:
                out.append(ev.id)
                if len(out) == n:
                    break
    finally:
        await source.aclose()  # type: ignore[attr-defined]
    return out


async def _read_ids(lines: Any, n: int) -> list[int]:
    return [int(e["id"]) for e in await asyncio.wait_for(sse_events(lines, n), 15) if "id" in e]


class StreamConformance:
    """The shared stream reader on every backend: many clients, one backend reader, exact resume."""

    async def test_streams_share_one_reader_and_every_resume_is_exact(self, backend: rq.Backend) -> None:
        """A replay from the store (old id, id 0) and a resume from the ring, while events are written,
        each hand over to the shared reader with no gap and no duplicate; 12 clients, one backend reader."""
        q = f"sse{uuid.uuid4().hex[:10]}"
        ex = rq.ActivityExecutor(backend, q)
        app = create_app(backend, queues=[q], sse_flush_interval=0.01)
        await ex.enqueue_many([("t", i) for i in range(20)])  # before any stream: only a replay has these
        old = await _stored_order(backend, q, 20)
        async with live_server(app) as base, httpx.AsyncClient(base_url=base, timeout=15) as c, \
                contextlib.AsyncExitStack() as stack:

            async def open_stream(after: int | None) -> Any:
                headers = {} if after is None else {"Last-Event-ID": str(after)}
                r = await stack.enter_async_context(c.stream("GET", "/api/observability/stream", headers=headers))
                assert r.status_code == 200
                lines = r.aiter_lines()
                assert await sse_events(lines, 1) == [{"retry": "2000"}]
                return lines

            live = [await open_stream(None) for _ in range(8)]
            (hub,) = app.state.runnerq_hubs.values()
            await ex.activity("probe").execute()  # once the hub has it, the live streams have all that follow
            await eventually_true(lambda: hub.read == 1)
            writer = asyncio.create_task(_write_slowly(ex, 30))  # the replays below race the writes
            from_zero = await open_stream(0)
            from_old = await open_stream(old[9])
            await eventually_true(lambda: hub.read >= 6)
            ring_id = hub._ids[2]  # an event the shared reader holds: resumes from its ring
            from_ring = await open_stream(ring_id)
            head_id = hub._ids[-1]
            from_head = await open_stream(head_id)
            await writer
            await ex.enqueue_many([("u", i) for i in range(10)])
            order = await _stored_order(backend, q, 61)
            got_zero = await _read_ids(from_zero, 61)
            got_old = await _read_ids(from_old, 51)
            got_ring = await _read_ids(from_ring, 61 - order.index(ring_id) - 1)
            got_head = await _read_ids(from_head, 61 - order.index(head_id) - 1)
            got_live = [await _read_ids(lines, 41) for lines in live]
            streams = list(app.state.runnerq_streams)
            assert len(streams) == 12 and not any(s.replaying for s in streams)  # every replay handed over
            assert hub.opened == 1 and hub.read == 41  # one backend reader for 12 clients
            assert len(app.state.runnerq_hubs) == 1
        assert order[:20] == old
        assert got_zero == order
        assert got_old == order[10:]
        assert got_ring == order[order.index(ring_id) + 1:]
        assert got_head == order[order.index(head_id) + 1:]
        assert all(g == order[20:] for g in got_live)


async def _write_slowly(ex: rq.ActivityExecutor, n: int) -> None:
    for i in range(n):
        await ex.activity("w").payload(i).execute()
        await asyncio.sleep(0.003)


async def eventually_true(check: Any, timeout: float = 10) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "timed out"
        await asyncio.sleep(0.005)
