"""Redis batch enqueue (``lua/enqueue.lua``): mixed batches store what the memory backend stores."""

from __future__ import annotations

import time
from typing import Any

from runnerq_fast.backends.memory import MemoryBackend
from runnerq_fast.backends.redis import RedisBackend, keys
from runnerq_fast.backends.redis.scoring import encode_score
from runnerq_fast.models import NewActivity, OnDuplicate, Priority
from tests.conformance import new


def _mixed_batch() -> list[NewActivity]:
    later = int(time.time() * 1000) + 3_600_000
    return [
        new("a"),
        new("b", priority=Priority.CRITICAL, max_retries=0, timeout_ms=7, metadata=b'{"k":"v"}'),
        new("a", idempotency_key="k1", on_duplicate=OnDuplicate.RETURN_EXISTING),
        new("a", run_at_ms=later),
        new("a", idempotency_key="k1", on_duplicate=OnDuplicate.RETURN_EXISTING),  # the holder is item 3
        new("a", parent_id="parent-1"),
        new("a", idempotency_key="k2", on_duplicate=OnDuplicate.NO_REUSE),
        new("b", priority=Priority.CRITICAL, max_retries=0, timeout_ms=7, metadata=b'{"k":"v"}'),
        new("a", idempotency_key="k2", on_duplicate=OnDuplicate.NO_REUSE),  # rejected: item 7 holds k2
        new("a", idempotency_key="k3", on_duplicate=OnDuplicate.ALLOW_REUSE),
        new("a", idempotency_key="k3", on_duplicate=OnDuplicate.ALLOW_REUSE),  # created, takes k3
        new("a"),
    ]


def _stored(snap: Any) -> tuple[Any, ...]:
    return (snap.activity_type, snap.status, snap.priority, snap.payload, snap.metadata, snap.max_retries,
            snap.timeout_ms, snap.idempotency_key, snap.parent_id, snap.retry_count)


async def test_a_mixed_batch_gives_the_outcomes_fields_events_and_scores_of_the_memory_backend(
    redis_backend: RedisBackend,
) -> None:
    b, q = redis_backend, "mixed"
    items = _mixed_batch()
    mem = MemoryBackend()
    expected = await mem.enqueue(q, items)
    got = await b.enqueue(q, items)
    assert [(r.activity_id, r.outcome) for r in got] == [(r.activity_id, r.outcome) for r in expected]
    assert [r.outcome for r in got].count(1) == 10  # the positions of the two not created are where they belong
    created = [it for it, r in zip(items, got, strict=True) if r.outcome == 1]
    for it in created:
        snap, want = await b.get_activity(it.id), await mem.get_activity(it.id)
        assert snap is not None and want is not None
        assert _stored(snap) == _stored(want)
        events = [e.event_type for e in await b.get_events(it.id)]
        assert events == [e.event_type for e in await mem.get_events(it.id)]
        assert events == (["enqueued", "scheduled"] if it.run_at_ms else ["enqueued"])
        ready = await b.client.zscore(keys.prefix(b._ns, q) + "ready:" + it.activity_type, it.id)
        if snap.status == "pending":
            assert ready == encode_score(int(it.priority), 0, snap.ready_at_ms)
        else:
            assert ready is None
    assert (await b.stats(q)).pending == 9 and (await b.stats(q)).scheduled == 1
    p = keys.prefix(b._ns, q)
    sizes = [await b.client.zcard(p + k) for k in ("ty:a", "ty:b", "ready:a", "ready:b", "st:pending", "kids:parent-1")]
    assert sizes == [8, 2, 7, 2, 9, 1]  # the index entries of the items of each profile, however interleaved
    await mem.close()


async def test_a_second_batch_of_the_same_keys_returns_the_holders(redis_backend: RedisBackend) -> None:
    b, q = redis_backend, "again"
    items = _mixed_batch()
    first = await b.enqueue(q, items)
    again = [new(it.activity_type, idempotency_key=it.idempotency_key, on_duplicate=it.on_duplicate) for it in items]
    second = await b.enqueue(q, again)
    holders = {it.idempotency_key: r.activity_id for it, r in zip(items, first, strict=True) if r.outcome == 1}
    for it, r in zip(again, second, strict=True):
        if it.idempotency_key is None or it.on_duplicate == OnDuplicate.ALLOW_REUSE:
            assert (r.activity_id, r.outcome) == (it.id, 1)
        else:
            assert r.activity_id == holders[it.idempotency_key]
            assert r.outcome == (3 if it.on_duplicate == OnDuplicate.NO_REUSE else 2)


async def test_batches_over_one_script_call_keep_their_order_and_events(redis_backend: RedisBackend) -> None:
    b, q = redis_backend, "chunks"
    items = [new("t", idempotency_key=f"k{i % 1100}") if i % 7 == 0 else new("t") for i in range(2500)]
    got = await b.enqueue(q, items)
    assert [r.activity_id for r in got] == [it.id for it in items]
    assert (await b.stats(q)).pending == 2500
    ids = {e.id for it in items[::250] for e in await b.get_events(it.id)}
    assert len(ids) == 10 and max(ids) <= 2500
    stream = b.event_stream(q, after_id=0)
    seen = [await anext(stream) for _ in range(2500)]
    await stream.aclose()  # type: ignore[attr-defined]
    assert [(e.id, e.activity_id, e.event_type) for e in seen] == [
        (i + 1, it.id, "enqueued") for i, it in enumerate(items)
    ]
