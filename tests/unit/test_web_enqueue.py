"""The enqueue routes through httpx's ASGI transport (memory backend): every status code, and coalescing."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

import runnerq_fast as rq
from runnerq_fast.codec import decode_json
from runnerq_fast.models import EnqueueResult, NewActivity
from runnerq_fast.web import WebLimits, create_app
from runnerq_fast.web.buffer import EnqueueBuffer
from tests.conformance import FAST
from tests.web_helpers import asgi_client

Q = "/api/v1/queues/default/activities"


async def stored(backend: rq.Backend, queue: str = "default") -> int:
    return (await backend.stats(queue)).total


async def test_one_activity_is_stored_with_every_option() -> None:
    backend = rq.MemoryBackend()
    run_at = datetime.now(UTC) + timedelta(hours=1)
    async with asgi_client(create_app(backend)) as c:
        r = await c.post(Q, json={
            "type": "email", "payload": {"to": "a@b.c"}, "priority": "high", "max_retries": 5, "timeout": 12.5,
            "metadata": {"tenant": "t1"}, "run_at": run_at.isoformat(),
        })
        assert r.status_code == 201
        body = r.json()
        assert body["created"] is True and body["queue"] == "default"
        assert r.headers["location"] == f"{Q}/{body['id']}"
        snap = await backend.get_activity(body["id"])
        assert snap is not None
        assert (snap.activity_type, snap.status, snap.priority, snap.max_retries, snap.timeout_ms) == (
            "email", "scheduled", 3, 5, 12500)
        assert decode_json(snap.payload) == {"to": "a@b.c"}
        assert snap.metadata == {"tenant": "t1"}
        assert abs(snap.ready_at_ms - run_at.timestamp() * 1000) < 2
        r = await c.post(Q, json={"type": "later", "delay": 30, "priority": 4})
        snap = await backend.get_activity(r.json()["id"])
        assert r.status_code == 201 and snap is not None and snap.status == "scheduled" and snap.priority == 4


async def test_a_key_that_returns_the_existing_activity_answers_200_and_no_reuse_409() -> None:
    backend = rq.MemoryBackend()
    async with asgi_client(create_app(backend)) as c:
        first = await c.post(Q, json={"type": "pay", "idempotency_key": "order-1"})
        again = await c.post(Q, json={"type": "pay", "idempotency_key": "order-1", "payload": 2})
        assert first.status_code == 201 and again.status_code == 200
        assert again.json() == {"id": first.json()["id"], "queue": "default", "created": False}
        conflict = await c.post(Q, json={"type": "pay", "idempotency_key": "order-1", "on_duplicate": "no_reuse"})
        assert conflict.status_code == 409
        assert conflict.headers["content-type"] == "application/problem+json"
        assert conflict.json()["existing_id"] == first.json()["id"]
        assert "order-1" in conflict.json()["detail"]
    assert await stored(backend) == 1


async def test_idempotency_key_header_same_body_is_the_same_activity_other_body_is_422() -> None:
    backend = rq.MemoryBackend()
    async with asgi_client(create_app(backend)) as c:
        body = {"type": "pay", "payload": {"amount": 5, "currency": "EUR"}, "metadata": {"a": "1"}}
        first = await c.post(Q, json=body, headers={"Idempotency-Key": "req-1"})
        # the same body, keys in another order: the same request
        same = await c.post(Q, json={"metadata": {"a": "1"}, "payload": {"currency": "EUR", "amount": 5},
                                     "type": "pay"}, headers={"Idempotency-Key": "req-1"})
        other = await c.post(Q, json={**body, "payload": {"amount": 6}}, headers={"Idempotency-Key": "req-1"})
        mismatch = await c.post(Q, json={**body, "idempotency_key": "k2"}, headers={"Idempotency-Key": "req-1"})
    assert first.status_code == 201 and same.status_code == 200
    assert same.json()["id"] == first.json()["id"]
    assert other.status_code == 422 and "different request body" in other.json()["detail"]
    assert other.json()["existing_id"] == first.json()["id"]
    assert mismatch.status_code == 422 and "differs" in mismatch.json()["detail"]
    snap = await backend.get_activity(first.json()["id"])
    assert snap is not None and snap.idempotency_key == "req-1"
    assert await stored(backend) == 1


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        ({"type": "t", "priority": 9}, 422, "priority"),
        ({"type": "t", "priority": "urgent"}, 422, "priority"),
        ({"type": "t", "delay": -1}, 422, "delay"),
        ({"type": "t", "delay": 1e300}, 422, "delay"),
        ({"type": "t", "timeout": -2}, 422, "timeout"),
        ({"type": "t", "max_retries": -1}, 422, "max_retries"),
        ({"type": "t", "payload": {"x": "a\u0000b"}}, 422, "NUL"),
        ({"type": "t", "payload": "y" * (1024 * 1024 + 1)}, 422, "over the limit"),
        ({"type": ""}, 422, "activity type"),
        ({"type": "   "}, 422, "activity type"),
        ({"type": "t" * 256}, 422, "activity type"),
        ({"type": "t", "delay": 1, "run_at": "2030-01-01T00:00:00Z"}, 422, "not both"),
        ({"type": "t", "run_at": "2030-01-01T00:00:00"}, 422, "timezone"),
        ({"type": "t", "metadata": {"k": 1}}, 422, "metadata"),
        ({"type": "t", "on_duplicate": "sometimes"}, 422, "on_duplicate"),
        ({"type": "t", "colour": "red"}, 422, "colour"),
        ({"payload": 1}, 422, "type"),
        ([1, 2], 422, "object"),
    ],
    ids=["priority-9", "priority-name", "negative-delay", "huge-delay", "negative-timeout", "negative-retries",
         "nul", "oversized", "empty-type", "blank-type", "long-type", "delay-and-run-at", "naive-run-at",
         "metadata-int", "bad-on-duplicate", "unknown-field", "no-type", "not-an-object"],
)
async def test_bad_input_is_refused_with_a_problem_and_nothing_is_stored(
    body: Any, status: int, needle: str
) -> None:
    backend = rq.MemoryBackend()
    async with asgi_client(create_app(backend)) as c:
        r = await c.post(Q, json=body)
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/problem+json"
    problem = r.json()
    assert problem["status"] == status and problem["title"] and needle in problem["detail"]
    assert await stored(backend) == 0


async def test_malformed_json_is_400_a_wrong_media_type_415_and_an_oversized_body_413() -> None:
    backend = rq.MemoryBackend()
    app = create_app(backend, limits=WebLimits(max_body_bytes=1000))
    async with asgi_client(app) as c:
        bad = await c.post(Q, content=b'{"type": ', headers={"content-type": "application/json"})
        text = await c.post(Q, content=b'{"type": "t"}', headers={"content-type": "text/plain"})
        big = await c.post(Q, json={"type": "t", "payload": "x" * 2000})

        async def chunks() -> Any:  # no Content-Length: counted as it arrives
            for _ in range(5):
                yield b" " * 300

        chunked = await c.post(Q, content=chunks(), headers={"content-type": "application/json"})
        bad_wait = await c.post(f"{Q}?wait=abc", json={"type": "t"})
        long_wait = await c.post(f"{Q}?wait=61", json={"type": "t"})
        bad_queue = await c.post("/api/v1/queues/%20/activities", json={"type": "t"})
    assert bad.status_code == 400 and "not valid JSON" in bad.json()["detail"]
    assert text.status_code == 415
    assert big.status_code == 413 and "1000" in big.json()["detail"]
    assert chunked.status_code == 413
    assert bad_wait.status_code == 422 and long_wait.status_code == 422
    assert bad_queue.status_code == 422 and "queue name" in bad_queue.json()["detail"]
    assert await stored(backend) == 0


async def test_wait_answers_with_the_result_the_error_or_202() -> None:
    backend = rq.MemoryBackend()
    engine = rq.WorkerEngine(backend, **FAST)

    @engine.activity("echo")
    async def echo(payload: Any, ctx: rq.ActivityContext) -> Any:
        return {"echo": payload}

    @engine.activity("boom")
    async def boom(payload: Any, ctx: rq.ActivityContext) -> Any:
        raise rq.NonRetryableError("declined")

    async with asgi_client(create_app(backend)) as c:
        slow = await c.post(f"{Q}?wait=0.05", json={"type": "echo", "payload": 1})
        assert slow.status_code == 202 and slow.json()["status"] == "pending"
        assert slow.headers["location"].endswith(slow.json()["id"])
        async with engine:
            ok = await c.post(f"{Q}?wait=5", json={"type": "echo", "payload": [1, 2]})
            failed = await c.post(f"{Q}?wait=5", json={"type": "boom"})
    assert ok.status_code == 201
    assert ok.json()["status"] == "completed" and ok.json()["result"] == {"echo": [1, 2]}
    assert ok.json()["error"] is None
    assert failed.status_code == 201
    assert failed.json()["status"] == "failed" and "declined" in failed.json()["error"]


async def test_batch_is_stored_in_order_in_one_round_trip() -> None:
    backend = CountingBackend()
    async with asgi_client(create_app(backend)) as c:
        r = await c.post(f"{Q}/batch", json={"activities": [
            {"type": "t", "payload": i, "idempotency_key": "dup" if i in (3, 4) else None} for i in range(500)
        ]})
        again = await c.post(f"{Q}/batch", json={"activities": [
            {"type": "t", "idempotency_key": "dup"},
            {"type": "t", "idempotency_key": "dup", "on_duplicate": "no_reuse"},
        ]})
        empty = await c.post(f"{Q}/batch", json={"activities": []})
    assert r.status_code == 201
    items = r.json()["activities"]
    assert len(items) == 500 and backend.calls == [500, 2]
    assert [it["outcome"] for it in items[2:6]] == ["created", "created", "existing", "created"]
    assert items[4]["id"] == items[3]["id"]
    snap = await backend.get_activity(items[123]["id"])
    assert snap is not None and decode_json(snap.payload) == 123
    assert again.status_code == 200
    assert [it["outcome"] for it in again.json()["activities"]] == ["existing", "conflict"]
    assert all(it["id"] == items[3]["id"] for it in again.json()["activities"])
    assert empty.status_code == 200 and empty.json()["activities"] == []
    assert await stored(backend) == 499


async def test_batch_validation_is_all_or_nothing() -> None:
    backend = rq.MemoryBackend()
    app = create_app(backend, limits=WebLimits(max_batch=10))
    async with asgi_client(app) as c:
        bad = await c.post(f"{Q}/batch", json={"activities": [
            {"type": "t"}, {"type": "t", "priority": 7}, {"type": "t"}, {"type": ""},
        ]})
        too_many = await c.post(f"{Q}/batch", json={"activities": [{"type": "t"}] * 11})
        header = await c.post(f"{Q}/batch", json={"activities": [{"type": "t"}]}, headers={"Idempotency-Key": "k"})
        schema = await c.post(f"{Q}/batch", json={"items": []})
    assert bad.status_code == 422
    assert [e["index"] for e in bad.json()["errors"]] == [1, 3]
    assert "nothing was stored" in bad.json()["detail"]
    assert too_many.status_code == 413 and "at most 10" in too_many.json()["detail"]
    assert header.status_code == 400
    assert schema.status_code == 422
    assert await stored(backend) == 0


class CountingBackend(rq.MemoryBackend):
    """A memory backend whose enqueue takes ``delay`` seconds and records each call's size and end time."""

    def __init__(self, delay: float = 0.0) -> None:
        super().__init__()
        self.delay = delay
        self.calls: list[int] = []
        self.stored_at: dict[str, float] = {}

    async def enqueue(
        self, queue: str, items: Sequence[NewActivity], *, connection: object = None
    ) -> list[EnqueueResult]:
        if self.delay:
            await asyncio.sleep(self.delay)
        out = await super().enqueue(queue, items, connection=connection)
        self.calls.append(len(items))
        now = time.monotonic()
        for r in out:
            self.stored_at.setdefault(r.activity_id, now)
        return out


async def test_concurrent_single_requests_are_coalesced_and_answered_after_they_are_stored() -> None:
    backend = CountingBackend(delay=0.02)
    app = create_app(backend)
    answered: dict[str, float] = {}
    async with asgi_client(app) as c:

        async def one(i: int) -> None:
            r = await c.post(Q, json={"type": "t", "payload": i})
            assert r.status_code == 201
            answered[r.json()["id"]] = time.monotonic()

        await asyncio.gather(*(one(i) for i in range(200)))
    assert len(answered) == 200 and sum(backend.calls) == 200
    assert len(backend.calls) <= 10, backend.calls  # one round trip per batch, not per request
    assert all(answered[i] >= backend.stored_at[i] for i in answered)


@pytest.mark.parametrize(("on_duplicate", "created", "conflicts"), [("return_existing", 1, 0), ("no_reuse", 1, 49)])
async def test_fifty_concurrent_requests_with_one_key(on_duplicate: str, created: int, conflicts: int) -> None:
    backend = CountingBackend(delay=0.005)
    async with asgi_client(create_app(backend)) as c:
        rs = await asyncio.gather(*(
            c.post(Q, json={"type": "pay", "payload": i, "idempotency_key": "k", "on_duplicate": on_duplicate})
            for i in range(50)
        ))
    assert sum(r.status_code == 201 for r in rs) == created
    assert sum(r.status_code == 409 for r in rs) == conflicts
    ids = {r.json().get("id") or r.json().get("existing_id") for r in rs}
    assert len(ids) == 1
    assert await stored(backend) == 1


async def test_a_backend_failure_is_503_and_a_bad_item_does_not_fail_its_batch() -> None:
    class Flaky(rq.MemoryBackend):
        down = False

        async def enqueue(
            self, queue: str, items: Sequence[NewActivity], *, connection: object = None
        ) -> list[EnqueueResult]:
            if self.down:
                raise rq.BackendError("connection refused")
            if any(it.activity_type == "poison" for it in items):
                raise rq.InvalidActivityError("the store refuses this payload")
            return await super().enqueue(queue, items, connection=connection)

    backend = Flaky()
    buf = EnqueueBuffer(backend, "default")
    ex = rq.ActivityExecutor(backend, "default")
    good = [ex.activity("t").payload(i).build() for i in range(5)]
    poison = ex.activity("poison").build()
    results = await asyncio.gather(*(buf.submit(it) for it in [*good[:2], poison, *good[2:]]), return_exceptions=True)
    assert isinstance(results[2], rq.InvalidActivityError)
    assert [r.activity_id for r in results if isinstance(r, EnqueueResult)] == [g.id for g in good]
    async with asgi_client(create_app(backend)) as c:
        backend.down = True
        r = await c.post(Q, json={"type": "t"})
    assert r.status_code == 503 and "connection refused" in r.json()["detail"]
    assert await stored(backend) == 5


async def test_enqueued_activities_are_counted_in_metrics() -> None:
    backend = rq.MemoryBackend()
    sink = rq.PrometheusMetrics()
    async with asgi_client(create_app(backend, metrics=sink)) as c:
        await c.post(Q, json={"type": "a"})
        await c.post(Q, json={"type": "a", "idempotency_key": "k"})
        await c.post(Q, json={"type": "a", "idempotency_key": "k"})  # existing: not counted again
        await c.post(f"{Q}/batch", json={"activities": [{"type": "b"}, {"type": "b"}, {"type": "a"}]})
    assert sink.value("runnerq_activities_enqueued_total", ("default", "a")) == 3
    assert sink.value("runnerq_activities_enqueued_total", ("default", "b")) == 2


async def test_served_queues_limit_enqueue() -> None:
    backend = rq.MemoryBackend()
    async with asgi_client(create_app(backend, queues=["emails"])) as c:
        ok = await c.post("/api/v1/queues/emails/activities", json={"type": "t"})
        other = await c.post(Q, json={"type": "t"})
    assert ok.status_code == 201
    assert other.status_code == 404 and "emails" in other.json()["detail"]
    assert await stored(backend, "emails") == 1 and await stored(backend) == 0


def test_create_app_refuses_bad_arguments() -> None:
    with pytest.raises(TypeError):
        create_app(42)  # type: ignore[arg-type]
    with pytest.raises(rq.InvalidActivityError):
        create_app("memory://", queues=[""])
    with pytest.raises(ValueError, match="token"):
        create_app("memory://", token="  ")


async def test_the_app_opens_a_url_on_first_request_when_its_lifespan_does_not_run() -> None:
    app = create_app("memory://")
    async with asgi_client(app) as c:
        r = await c.post(Q, json={"type": "t"})
        got = await c.get(f"/api/observability/activities/{r.json()['id']}")
    assert r.status_code == 201 and got.status_code == 200
    await app.state.runnerq.close()


async def test_unknown_routes_and_methods_are_problems() -> None:
    async with asgi_client(create_app(rq.MemoryBackend())) as c:
        missing = await c.get("/api/v1/nope")
        method = await c.delete(Q)
    assert missing.status_code == 404 and missing.headers["content-type"] == "application/problem+json"
    assert method.status_code == 405 and "POST" in method.headers["allow"]


async def test_httpx_version_supports_asgi_transport() -> None:
    assert hasattr(httpx, "ASGITransport")


async def test_a_lone_surrogate_escape_is_named_as_such_and_a_real_pair_is_stored() -> None:
    backend = rq.MemoryBackend()
    h = {"content-type": "application/json"}
    async with asgi_client(create_app(backend)) as c:
        for body, escape in ((rb'{"type": "t", "payload": "\ud800"}', r"\ud800"),
                             (rb'{"type": "t\udc00", "payload": 1}', r"\udc00"),
                             (rb'{"activities": [{"type": "t", "metadata": {"k": "\uDBFF"}}]}', r"\uDBFF")):
            path = f"{Q}/batch" if body.startswith(b'{"activities"') else Q
            r = await c.post(path, content=body, headers=h)
            assert r.status_code == 400, r.text
            assert r.json()["detail"].endswith(f"the escape {escape} at byte {body.index(escape.encode())} is a "
                                               "lone UTF-16 surrogate (no Unicode text holds one)")
        assert await stored(backend) == 0
        ok = await c.post(Q, content=rb'{"type": "t", "payload": "\ud83d\ude00"}', headers=h)
        assert ok.status_code == 201, ok.text
        snap = await backend.get_activity(ok.json()["id"])
        assert snap is not None and decode_json(snap.payload) == "\N{GRINNING FACE}"


async def test_a_queue_name_outside_latin_1_gets_a_percent_encoded_location_and_is_stored_once() -> None:
    backend = rq.MemoryBackend()
    async with asgi_client(create_app(backend)) as c:
        r = await c.post("/api/v1/queues/fu-%E2%82%AC%F0%9F%98%80/activities", json={"type": "t", "payload": 1})
        assert r.status_code == 201, r.text  # was a 500 raised AFTER the activity was stored
        assert r.headers["location"] == f"/api/v1/queues/fu-%E2%82%AC%F0%9F%98%80/activities/{r.json()['id']}"
        assert (await c.get(r.headers["location"])).status_code == 200
    assert await stored(backend, "fu-\N{EURO SIGN}\N{GRINNING FACE}") == 1


@pytest.mark.parametrize("path", [
    "/api/v1/queues/q%FF/activities",            # the direct single-enqueue path
    "/api/v1/queues/q%C3/activities/batch",      # a routed one: a truncated UTF-8 sequence
    "/api/v1/queues/q%FF",
    "/api/v1/queues/q/activities/%FF%FE",
])
async def test_a_path_that_is_not_utf8_once_percent_decoded_is_refused_not_stored_as_u_fffd(path: str) -> None:
    backend = rq.MemoryBackend()
    async with asgi_client(create_app(backend)) as c:
        if path.endswith("/activities"):
            r = await c.post(path, json={"type": "t", "payload": 1})
        elif path.endswith("/batch"):
            r = await c.post(path, json={"activities": [{"type": "t", "payload": 1}]})
        else:
            r = await c.get(path)
        assert r.status_code == 400, r.text  # was 201 into a queue named "q\ufffd" (or a 404 naming it)
        assert "UTF-8" in r.json()["detail"]
    assert await backend.list_queues() == []


async def test_a_queue_name_holding_u_fffd_itself_is_still_served() -> None:
    backend = rq.MemoryBackend()
    async with asgi_client(create_app(backend)) as c:
        r = await c.post("/api/v1/queues/q%EF%BF%BD/activities", json={"type": "t", "payload": 1})
        assert r.status_code == 201, r.text
    assert await stored(backend, "q\N{REPLACEMENT CHARACTER}") == 1


async def test_the_queue_names_dot_and_dot_dot_are_refused_on_every_route() -> None:
    """A queue "." or ".." was stored, but its Location (``/api/v1/queues/./activities/ID``) is unreachable:
    every client and proxy removes dot segments. A server decodes ``%2E`` to ".", so that is how one arrives."""
    backend = rq.MemoryBackend()
    async with asgi_client(create_app(backend)) as c:
        answers = [
            await c.post(f"/api/v1/queues/{q}/activities", json={"type": "t"}) for q in ("%2E", "%2E%2E")
        ] + [
            await c.post(f"/api/v1/queues/{q}/activities/batch", json={"activities": [{"type": "t"}]})
            for q in ("%2E", "%2E%2E")
        ] + [await c.get("/api/v1/queues/%2E%2E/activities"), await c.get("/api/observability/stats?queue=..")]
    for r in answers:
        assert r.status_code == 422, (r.request.url, r.text)
        assert "must not be '.' or '..'" in r.json()["detail"]
    assert await backend.list_queues() == []
    for dots in (".", ".."):
        with pytest.raises(rq.InvalidActivityError, match=r"must not be '\.' or '\.\.'"):
            create_app(backend, queues=["a", dots])
