"""Redis-specific behaviour beyond the conformance suite: Lua score, keys, TTLs, wakeups."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import runnerq_fast as rq
from runnerq_fast.backends import _servercheck as servercheck
from runnerq_fast.backends.redis import RedisBackend
from runnerq_fast.backends.redis.scoring import MAX_READY_MS, MAX_RETRY_RANK, encode_score
from runnerq_fast.models import Ack, AckOutcome, WorkerInfo
from tests.acceptance.helpers import run_cli
from tests.conformance import new
from tests.faults.servers import RedisServer, have_redis_server
from tests.redis_fixtures import REDIS_URL, damage, to_earlier_layout


@pytest.fixture(scope="module")
def sync_redis() -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2)
    try:
        client.ping()
    except (redis.RedisError, OSError) as exc:
        message = f"Redis at {REDIS_URL} is not usable: {exc!r}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    yield client
    client.close()


def _lua_scores(client: redis.Redis, triples: list[tuple[int, int, int]]) -> list[float]:
    """Scores the Lua helper gives, read back through ZADD/ZSCORE exactly as the scripts store them."""
    from importlib import resources

    helper = (resources.files("runnerq_fast.backends.redis") / "lua" / "_score.lua").read_text("utf-8")
    body = helper + (
        "\nlocal out = {}\n"
        "for i = 1, #ARGV, 3 do\n"
        "  local m = tostring((i + 2) / 3)\n"
        "  redis.call('ZADD', KEYS[1], rq_score(tonumber(ARGV[i]), tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])), m)\n"
        "  out[#out + 1] = redis.call('ZSCORE', KEYS[1], m)\n"
        "end\n"
        "redis.call('DEL', KEYS[1])\n"
        "return out\n"
    )
    key = f"rqt{uuid.uuid4().hex[:12]}:{{score}}:probe"
    args = [v for t in triples for v in t]
    return [float(s) for s in client.eval(body, 1, key, *args)]


extreme_retries = st.one_of(st.integers(0, MAX_RETRY_RANK), st.sampled_from([MAX_RETRY_RANK + 1, 10**9]))
extreme_ready = st.one_of(
    st.integers(0, MAX_READY_MS),
    st.sampled_from([-1, -(10**12), MAX_READY_MS + 1, 10**15, 1_700_000_000_000, 0, MAX_READY_MS]),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(1, 4), extreme_retries, extreme_ready), min_size=1, max_size=50))
def test_lua_score_equals_encode_score(sync_redis: redis.Redis, triples: list[tuple[int, int, int]]) -> None:
    assert _lua_scores(sync_redis, triples) == [encode_score(*t) for t in triples]


def test_lua_score_at_the_corners(sync_redis: redis.Redis) -> None:
    corners = [(p, r, t) for p in (1, 4) for r in (0, MAX_RETRY_RANK) for t in (0, MAX_READY_MS)]
    assert _lua_scores(sync_redis, corners) == [encode_score(*t) for t in corners]


async def test_every_key_of_a_queue_shares_its_hash_tag(redis_backend: RedisBackend, redis_namespace: str) -> None:
    ex = rq.ActivityExecutor(redis_backend, "tagged")
    fut = await ex.activity("t").idempotency_key("k").execute()
    await ex.activity("later").delay(60).execute()
    (a,) = await redis_backend.claim("tagged", "w", 1, ["t"], 5000)
    await redis_backend.ack("tagged", [Ack(a.id, a.claim_token, AckOutcome.COMPLETED, b"1")])
    assert a.id == fut.activity_id
    names = [k.decode() async for k in redis_backend.client.scan_iter(match=f"{redis_namespace}:*")]
    assert f"{redis_namespace}:queues" in names
    others = [n for n in names if n != f"{redis_namespace}:queues"]
    assert len(others) >= 8 and all(n.startswith(f"{redis_namespace}:{{tagged}}:") for n in others)


async def test_a_claim_over_several_types_with_work_in_one_takes_its_head_in_order(
    redis_backend: RedisBackend, redis_namespace: str
) -> None:
    """claim.lua's path for one type with ready work among those asked for (ZRANGE + ZREMRANGEBYRANK)."""
    q = "onetype"
    order = []
    for prio in [1, 4, 2, 3, 2]:
        await asyncio.sleep(0.003)  # distinct ready times at millisecond resolution
        (res,) = await redis_backend.enqueue(q, [new("b", priority=prio)])
        order.append((prio, res.activity_id))
    expected = [aid for _, aid in sorted(order, key=lambda p: -p[0])]
    first = await redis_backend.claim(q, "w", 3, ["a", "b", "c"], 5000)
    assert [a.id for a in first] == expected[:3]
    assert all(a.activity_type == "b" for a in first)
    rest = await redis_backend.claim(q, "w", 10, ["c", "b"], 5000)
    assert [a.id for a in rest] == expected[3:]
    assert await redis_backend.claim(q, "w", 10, ["a", "b", "c"], 5000) == []
    assert await redis_backend.client.zcard(f"{redis_namespace}:{{{q}}}:ready:b") == 0
    stats = await redis_backend.stats(q)
    assert (stats.pending, stats.processing) == (0, 5)


async def test_a_stale_ready_entry_is_dropped_and_a_merged_claim_still_fills_its_batch(
    redis_backend: RedisBackend, redis_namespace: str
) -> None:
    """An id in a ready set without its hash (removed meanwhile) is skipped and removed, on either claim path."""
    q = "stale"
    ready = f"{redis_namespace}:{{{q}}}:ready:"
    await redis_backend.enqueue(q, [new("a"), new("b"), new("b")])
    await redis_backend.client.zadd(ready + "a", {"gone-a": 0.0})  # lowest score: the first candidate
    # several types with work: the merge skips the stale id and still takes 3
    got = await redis_backend.claim(q, "w", 3, ["a", "b"], 5000)
    assert sorted(a.activity_type for a in got) == ["a", "b", "b"]
    assert await redis_backend.client.zscore(ready + "a", "gone-a") is None
    # one type with work: the stale head is removed and not returned
    (fresh,) = await redis_backend.enqueue(q, [new("b")])
    await redis_backend.client.zadd(ready + "b", {"gone-b": 0.0})
    got = await redis_backend.claim(q, "w", 5, ["a", "b"], 5000)
    assert [a.id for a in got] == [fresh.activity_id]
    assert await redis_backend.client.zcard(ready + "b") == 0


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("to", b"5\x1f6", "timeout_ms is missing"),  # the separator of the numbers (field n): none reads
        ("mr", None, "max_retries is missing"),  # a part missing from n: none reads
        ("to", b"5.5", "timeout_ms is '5.5', not an integer"),
    ],
)
async def test_a_claimed_row_whose_numbers_do_not_decode_is_dead_lettered_alone_with_its_reason(
    redis_backend: RedisBackend, redis_namespace: str, field: str, value: bytes | None, reason: str
) -> None:
    q = "packed"
    ids = [r.activity_id for r in await redis_backend.enqueue(q, [new("t") for _ in range(3)])]
    await damage(redis_backend.client, f"{redis_namespace}:{{{q}}}:a:{ids[1]}", field, value)
    got = await redis_backend.claim(q, "w", 10, None, 5000)
    assert sorted(a.id for a in got) == sorted([ids[0], ids[2]])
    snap = await redis_backend.get_activity(ids[1])
    assert snap is not None and snap.status == "dead_letter"
    assert snap.last_error is not None and reason in snap.last_error, snap.last_error


async def test_finished_results_expire_and_dead_letters_stay(redis_url: str, redis_namespace: str) -> None:
    backend = await RedisBackend.open(redis_url, namespace=redis_namespace, result_ttl=0.2)
    try:
        q = "ttl"
        done, dead = await backend.enqueue(q, [new("t"), new("t")])
        claimed = await backend.claim(q, "w", 2, None, 5000)
        by_id = {c.id: c for c in claimed}
        c1, c2 = by_id[done.activity_id], by_id[dead.activity_id]
        await backend.ack(
            q,
            [
                Ack(c1.id, c1.claim_token, AckOutcome.COMPLETED, b"1"),
                Ack(c2.id, c2.claim_token, AckOutcome.DEAD_LETTER, None, "gave up"),
            ],
        )
        r = backend.client
        await backend.requeue_expired(q, 100)  # not yet due
        assert await r.exists(f"{redis_namespace}:{{{q}}}:a:{c1.id}") == 1
        await asyncio.sleep(0.25)
        await backend.requeue_expired(q, 100)  # the reaper removes the finished one
        assert await r.exists(f"{redis_namespace}:{{{q}}}:a:{c1.id}") == 0
        assert await backend.get_result(c1.id) is None
        assert await r.exists(f"{redis_namespace}:{{{q}}}:a:{c2.id}") == 1
        [record] = await backend.list_dead_letter(q)
        assert record.activity.id == c2.id and record.error == "gave up" and record.dead_lettered_at_ms > 0
    finally:
        await backend.close()



async def test_an_expired_result_keeps_its_idempotency_key_and_a_prune_releases_it(
    redis_url: str, redis_namespace: str
) -> None:
    """The reaper's ``result_ttl`` removal keeps the key until ``idempotency_ttl`` (issue 11, item 10), as
    ``<id>\\x1f<status>``; ``prune`` of a still-stored holder releases its key (issue 15)."""
    backend = await RedisBackend.open(redis_url, namespace=redis_namespace, result_ttl=0.2)
    try:
        ex = rq.ActivityExecutor(backend, "ttl-key")
        first = await ex.activity("t").idempotency_key("k1").execute()
        (c,) = await backend.claim("ttl-key", "w", 1, None, 5000)
        await backend.ack("ttl-key", [Ack(c.id, c.claim_token, AckOutcome.COMPLETED, b"1")])
        await asyncio.sleep(0.25)
        await backend.requeue_expired("ttl-key", 100)  # the reaper removes the finished one
        assert await backend.get_activity(first.activity_id) is None
        key = f"{redis_namespace}:{{ttl-key}}:idem:1:t:k1"
        assert await backend.client.get(key) == f"{first.activity_id}\x1fcompleted".encode()
        again = await ex.activity("t").idempotency_key("k1").execute()
        assert not again.created and again.activity_id == first.activity_id

        second = await ex.activity("t").idempotency_key("k2").execute()
        (c,) = await backend.claim("ttl-key", "w", 1, None, 5000)
        await backend.ack("ttl-key", [Ack(c.id, c.claim_token, AckOutcome.COMPLETED, b"1")])
        await asyncio.sleep(0.01)  # "older than 0 ms": finished before this millisecond
        assert await backend.prune("ttl-key", ["completed"], 0) == 1
        assert await backend.client.exists(f"{redis_namespace}:{{ttl-key}}:idem:1:t:k2") == 0
        fresh = await ex.activity("t").idempotency_key("k2").execute()
        assert fresh.created and fresh.activity_id != second.activity_id
    finally:
        await backend.close()


async def test_wait_for_work_wakes_on_enqueue_not_on_timeout(redis_backend: RedisBackend) -> None:
    q = "wake"
    await redis_backend.client.delete(f"{redis_backend._ns}:{{{q}}}:wake")
    waiter = asyncio.create_task(redis_backend.wait_for_work(q, 10.0))
    await asyncio.sleep(0.1)
    assert not waiter.done()
    await redis_backend.enqueue(q, [new("t")])
    await asyncio.wait_for(waiter, 3.0)  # far sooner than the 10 s timeout
    assert waiter.done() and waiter.exception() is None


async def test_wait_for_work_is_woken_only_by_work_of_the_types_it_claims(redis_backend: RedisBackend) -> None:
    q = "typed-wake"
    waiter = asyncio.create_task(redis_backend.wait_for_work(q, 10.0, ["a"]))
    await asyncio.sleep(0.1)
    await redis_backend.enqueue(q, [new("b")])  # its token is in wake:b (and wake), never taken by this waiter
    await asyncio.sleep(0.2)
    assert not waiter.done()
    await redis_backend.enqueue(q, [new("a")])
    await asyncio.wait_for(waiter, 3.0)
    assert await redis_backend.client.llen(f"{redis_backend._ns}:{{{q}}}:wake:b") == 1


async def test_wait_for_work_ends_when_a_scheduled_activity_is_due(redis_backend: RedisBackend) -> None:
    q = "due"
    await redis_backend.enqueue(q, [new("t", run_at_ms=int(time.time() * 1000) + 200)])
    await redis_backend.client.delete(f"{redis_backend._ns}:{{{q}}}:wake")
    t0 = time.monotonic()
    await redis_backend.wait_for_work(q, 10.0)
    assert time.monotonic() - t0 < 5.0
    assert len(await redis_backend.claim(q, "w", 5, None, 5000)) == 1


async def test_connect_picks_redis_and_refuses_bad_options(redis_url: str, redis_namespace: str) -> None:
    backend = await rq.connect(redis_url, namespace=redis_namespace)
    try:
        assert isinstance(backend, RedisBackend) and backend.name == "redis"
    finally:
        await backend.close()
    with pytest.raises(rq.ConfigError, match="namespace"):
        await RedisBackend.open(redis_url, namespace="a:b")
    with pytest.raises(rq.ConfigError, match="result_ttl"):
        await RedisBackend.open(redis_url, namespace=redis_namespace, result_ttl=0)


async def test_unreachable_server_is_a_backend_error() -> None:
    with pytest.raises(rq.BackendError, match="cannot use Redis"):
        await RedisBackend.open("redis://127.0.0.1:1/0")


async def test_eviction_policy_is_checked(redis_backend: RedisBackend, caplog: pytest.LogCaptureFixture) -> None:
    policy = await redis_backend.check_eviction_policy()
    warned = any("maxmemory-policy" in r.message for r in caplog.records if r.levelno >= logging.WARNING)
    assert (policy == "noeviction") != warned or policy is None


async def test_one_stream_entry_per_batch_and_resumable_event_ids(redis_backend: RedisBackend) -> None:
    q = "stream"
    results = await redis_backend.enqueue(q, [new("t"), new("t")])
    first, second = (r.activity_id for r in results)
    entries: Any = await redis_backend.client.xrange(f"{redis_backend._ns}:{{{q}}}:events")
    assert len(entries) == 1 and entries[0][0] == b"0-2"  # one entry for the batch, named by its last event
    [e1] = await redis_backend.get_events(first)
    [e2] = await redis_backend.get_events(second)
    assert (e1.id, e2.id) == (1, 2) and e1.event_type == "enqueued"
    assert await redis_backend.cancel(second)
    stream = redis_backend.event_stream(q, after_id=e1.id)
    got = [await asyncio.wait_for(anext(stream), 3) for _ in range(2)]
    await stream.aclose()  # type: ignore[attr-defined]
    assert [(e.id, e.activity_id, e.event_type) for e in got] == [(2, second, "enqueued"), (3, second, "cancelled")]


async def test_one_ack_batch_mixes_plain_completions_with_other_outcomes(redis_backend: RedisBackend) -> None:
    # plain completions (no error) go before the others, in runs of one claim token (lua/ack.lua)
    b, q = redis_backend, "mixed-acks"
    await b.enqueue(q, [new("t") for _ in range(5)] + [new("u")])
    c = await b.claim(q, "w", 6, None, 30_000)
    acks = [
        Ack(c[0].id, c[0].claim_token, AckOutcome.COMPLETED, b"1"),
        Ack(c[1].id, c[1].claim_token, AckOutcome.RETRY, None, "E: again", retry_at_ms=0),
        Ack(c[2].id, "stale", AckOutcome.COMPLETED, b"2"),
        Ack(c[3].id, c[3].claim_token, AckOutcome.COMPLETED, None),
        Ack(c[4].id, c[4].claim_token, AckOutcome.FAILED, None, "E: no"),
        Ack(c[5].id, c[5].claim_token, AckOutcome.COMPLETED, b"[3]"),
    ]
    assert await b.ack(q, acks) == [c[2].id]
    statuses = {a.id: (await b.get_activity(a.id)).status for a in c}  # type: ignore[union-attr]
    assert statuses == {c[0].id: "completed", c[1].id: "retrying", c[2].id: "processing", c[3].id: "completed",
                        c[4].id: "failed", c[5].id: "completed"}
    assert [(await b.get_result(a.id)).data for a in (c[0], c[5])] == [b"1", b"[3]"]  # type: ignore[union-attr]
    stats = await b.stats(q)
    assert (stats.completed, stats.retrying, stats.processing, stats.failed) == (3, 1, 1, 1)
    kinds = [e.event_type for e in await b.get_events(c[0].id)]
    assert kinds == ["enqueued", "claimed", "completed"]


async def test_completions_with_and_without_results_alternate_in_runs_of_one_kind(redis_backend: RedisBackend) -> None:
    # completions without a result (a handler that returned None) are plain too, in runs of their own
    # ("token, -r, then r ids", lua/ack.lua): runs of both kinds and of two claim tokens, interleaved,
    # with a stale ack of each kind, end as the same acks one at a time would
    b, q = redis_backend, "result-runs"
    await b.enqueue(q, [new("t") for _ in range(10)])
    first = await b.claim(q, "w1", 5, None, 30_000)
    second = await b.claim(q, "w2", 5, None, 30_000)
    c = first + second
    results: list[bytes | None] = [None, None, b"1", None, b"2", b"3", None, None, b"4", None]
    acks = [Ack(a.id, a.claim_token, AckOutcome.COMPLETED, r) for a, r in zip(c, results, strict=True)]
    acks[3] = Ack(c[3].id, "stale", AckOutcome.COMPLETED, None)
    acks[8] = Ack(c[8].id, "stale", AckOutcome.COMPLETED, b"4")
    pubsub = b.client.pubsub()
    await pubsub.subscribe(f"{b._ns}:{{{q}}}:done")
    await pubsub.get_message(timeout=1)  # the subscription's confirmation
    assert await b.ack(q, acks) == [c[3].id, c[8].id]
    msg = await pubsub.get_message(ignore_subscribe_messages=True, timeout=3)
    await pubsub.aclose()
    done = [a.id for i, a in enumerate(c) if i not in (3, 8)]
    assert msg is not None and msg["data"].decode() == ",".join(done)
    for i, a in enumerate(c):
        got = await b.get_activity(a.id)
        assert got is not None and got.status == ("processing" if i in (3, 8) else "completed"), i
        if i not in (3, 8):
            res = await b.get_result(a.id)
            assert res is not None and res.status == "completed" and res.data == results[i], i
            assert [e.event_type for e in await b.get_events(a.id)] == ["enqueued", "claimed", "completed"]
    fields = await b.client.hkeys(f"{b._ns}:{{{q}}}:a:{c[0].id}")
    assert b"res" not in fields and b"fa" in fields  # no result stored for None, as a single ack stores it
    stats = await b.stats(q)
    assert (stats.completed, stats.processing) == (8, 2)
    # the stale ones are still held by their real claims
    assert await b.ack(q, [Ack(c[i].id, c[i].claim_token, AckOutcome.COMPLETED, None) for i in (3, 8)]) == []
    assert (await b.stats(q)).completed == 10


async def test_events_of_a_batch_over_one_stream_entry_match_the_hashes(redis_backend: RedisBackend) -> None:
    # a script writes at most 500 events per stream entry: 1,200 enqueued, claimed and acknowledged in
    # one call each fill several entries, and every hash field x:<id> names its own event of the stream
    from runnerq_fast.backends.redis.backend import _entry_events

    b, q = redis_backend, "big-batches"
    ids = [r.activity_id for r in await b.enqueue(q, [new("t") for _ in range(1200)])]
    claimed = await b.claim(q, "w", 1200, None, 30_000)
    assert sorted(c.id for c in claimed) == sorted(ids)
    assert await b.ack(q, [Ack(c.id, c.claim_token, AckOutcome.COMPLETED, b"1") for c in claimed]) == []
    entries: Any = await b.client.xrange(f"{b._ns}:{{{q}}}:events")
    assert [int(sid.split(b"-")[1]) for sid, _ in entries] == [500, 1000, 1200, 1700, 2200, 2400, 2900, 3400, 3600]
    events = {e.id: e for sid, fields in entries for e in _entry_events(q, sid, fields)}
    assert sorted(events) == list(range(1, 3601))
    for c in claimed:
        got = await b.get_events(c.id)
        assert [(e.event_type, e.detail) for e in got] == [("enqueued", None), ("claimed", "w"), ("completed", None)]
        assert all((events[e.id].activity_id, events[e.id].event_type, events[e.id].detail)
                   == (c.id, e.event_type, e.detail) for e in got)


async def test_an_ack_publishes_the_ids_it_finished_in_order(redis_backend: RedisBackend) -> None:
    # P.."done" gets the plain completions first, then the other finished acks; not a retry, not a stale ack
    b, q = redis_backend, "done-channel"
    await b.enqueue(q, [new("t") for _ in range(7)])
    c = await b.claim(q, "w", 7, None, 30_000)
    pubsub = b.client.pubsub()
    await pubsub.subscribe(f"{b._ns}:{{{q}}}:done")
    await pubsub.get_message(timeout=1)  # the subscription's confirmation
    plain = [Ack(a.id, a.claim_token, AckOutcome.COMPLETED, b"1") for a in c[:3]]
    assert await b.ack(q, plain) == []
    mixed = [
        Ack(c[3].id, c[3].claim_token, AckOutcome.FAILED, None, "E: no"),
        Ack(c[4].id, c[4].claim_token, AckOutcome.COMPLETED, b"2"),
        Ack(c[5].id, c[5].claim_token, AckOutcome.RETRY, None, "E: again", retry_at_ms=0),
        Ack(c[0].id, c[0].claim_token, AckOutcome.COMPLETED, b"3"),  # already acknowledged: rejected
        Ack(c[6].id, c[6].claim_token, AckOutcome.DEAD_LETTER, None, "E: dead"),
    ]
    assert await b.ack(q, mixed) == [c[0].id]
    got: list[str] = []
    while len(got) < 2:
        msg = await pubsub.get_message(ignore_subscribe_messages=True, timeout=3)
        assert msg is not None
        got.append(msg["data"].decode())
    await pubsub.aclose()
    assert got == [",".join(a.id for a in c[:3]), ",".join((c[4].id, c[3].id, c[6].id))]


async def test_stream_entries_keep_details_of_any_text_once_per_entry(redis_backend: RedisBackend) -> None:
    q = "stream-details"
    b = redis_backend
    ids = [r.activity_id for r in await b.enqueue(q, [new("t") for _ in range(4)])]
    claimed = await b.claim(q, "w\x1e\x1fker", 4, None, 30_000)
    errors = ["E: a\x1fb\x1ec", "", "E: a\x1fb\x1ec"]
    await b.ack(q, [Ack(c.id, c.claim_token, AckOutcome.FAILED, None, e) for c, e in zip(claimed, errors, strict=False)]
                + [Ack(claimed[3].id, claimed[3].claim_token, AckOutcome.COMPLETED, b"1")])
    stream = b.event_stream(q, after_id=0)
    got = [await asyncio.wait_for(anext(stream), 3) for _ in range(12)]
    await stream.aclose()  # type: ignore[attr-defined]
    assert [e.id for e in got] == list(range(1, 13))
    assert [(e.event_type, e.detail) for e in got[4:8]] == [("claimed", "w\x1e\x1fker")] * 4
    failed = {e.activity_id: e.detail for e in got[8:] if e.event_type == "failed"}
    assert failed == {c.id: e for c, e in zip(claimed, errors, strict=False)}
    assert [(e.activity_id, e.event_type, e.detail) for e in got[8:] if e.event_type == "completed"] == [
        (claimed[3].id, "completed", None)
    ]
    assert sorted(e.activity_id for e in got[:4]) == sorted(ids)
    entries: Any = await b.client.xrange(f"{b._ns}:{{{q}}}:events")
    ack_entry = entries[-1][1]
    assert sorted(k for k in ack_entry if k.startswith(b"d")) == [b"d1", b"d2"]  # each distinct detail once
    for e in got:  # the hash keeps the same events
        assert e in await b.get_events(e.activity_id)


async def test_stream_entries_of_the_earlier_layout_still_read(redis_backend: RedisBackend) -> None:
    # before the "e" records, an entry had fields "<i>" = "<kind>\x1f<id>" and "d<i>" = detail per event
    q = "stream-old"
    b = redis_backend
    key = f"{b._ns}:{{{q}}}:events"
    await b.client.xadd(key, {"at": 1000, "n": 2, "1": "enqueued\x1fa1", "2": "claimed\x1fa2", "d2": "w1"}, id="0-7")
    stream = b.event_stream(q, after_id=0)
    got = [await asyncio.wait_for(anext(stream), 3) for _ in range(2)]
    await stream.aclose()  # type: ignore[attr-defined]
    assert [(e.id, e.activity_id, e.event_type, e.at_ms, e.detail) for e in got] == [
        (6, "a1", "enqueued", 1000, None), (7, "a2", "claimed", 1000, "w1")
    ]


async def test_a_cancellation_swallowed_by_the_client_still_cancels(
    redis_backend: RedisBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    # redis-py can absorb a CancelledError that arrives mid-command and return normally; the
    # engine's loops (reaper, fetcher) then never stopped and engine.stop() hung.
    async def swallowing_evalsha(*args: Any) -> list[Any]:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(10)
        return []

    monkeypatch.setattr(redis_backend.client, "evalsha", swallowing_evalsha)
    task = asyncio.create_task(redis_backend.claim("q", "w", 1, None, 1000))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 2)


@pytest.mark.parametrize(
    ("method", "call"),
    [
        ("blpop", lambda b: b.wait_for_work("q", 30.0)),
        ("zrevrange", lambda b: b.list_dead_letter("q")),
        ("smembers", lambda b: b.get_activity("01a22e07835f7005886b4c4a38e55961")),
        ("xrevrange", lambda b: anext(b.event_stream("q"))),
    ],
)
async def test_every_client_call_re_raises_a_swallowed_cancellation(
    redis_backend: RedisBackend, monkeypatch: pytest.MonkeyPatch, method: str, call: Any
) -> None:
    # The whole kind of the bug above: not only scripts, every await on the client.
    async def swallowing(*args: Any, **kwargs: Any) -> Any:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(10)
        return []

    monkeypatch.setattr(redis_backend.client, method, swallowing)
    task = asyncio.create_task(call(redis_backend))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 2)


@pytest.mark.parametrize(
    "args",
    [
        ("EVALSHA", "abc", 1, "rq:{q}:", b'{"a": 1}', 0, 86_400_000, "", "héllo"),
        ("CONFIG GET", "maxmemory-policy"),
        ("BLPOP", "k", 0.25),
        ("SET", b"\x00\xff", -5),
    ],
)
def test_hiredis_packing_matches_redis_py(args: tuple[Any, ...]) -> None:
    from redis.asyncio.connection import Connection

    from runnerq_fast.backends.redis.backend import _HiredisPackingConnection

    assert b"".join(_HiredisPackingConnection().pack_command(*args)) == b"".join(Connection().pack_command(*args))
    both = [args, ("PING",)]
    assert b"".join(_HiredisPackingConnection().pack_commands(both)) == b"".join(Connection().pack_commands(both))


async def test_registry_keys_share_the_hash_tag_and_a_lost_queue_set_comes_back_on_the_next_heartbeat(
    redis_backend: RedisBackend, redis_namespace: str
) -> None:
    info = WorkerInfo(worker_id="w1", queue="tagged", host="h", pid=1, activity_types=("t",), in_flight=0,
                      concurrency=1, started_at_ms=1, last_seen_ms=2)
    await redis_backend.register_worker(info, 60_000)
    names = {k.decode() async for k in redis_backend.client.scan_iter(match=f"{redis_namespace}:*")}
    assert {f"{redis_namespace}:{{tagged}}:workers", f"{redis_namespace}:{{tagged}}:workers:exp",
            f"{redis_namespace}:wqueues"} <= names
    await redis_backend.client.delete(f"{redis_namespace}:wqueues")  # as after a restart that lost the set
    assert await redis_backend.list_workers() == []
    await redis_backend.register_worker(info, 60_000)
    assert await redis_backend.list_workers() == [info]


async def test_migrate_upgrades_hashes_of_the_earlier_layout(redis_backend: RedisBackend) -> None:
    b = redis_backend
    q = "up*[grade]?"  # glob characters in the queue name: the SCAN pattern escapes them
    pending, held = [r.activity_id for r in await b.enqueue(q, [new("t"), new("t", priority=rq.Priority.HIGH)])]
    (claimed,) = await b.claim(q, "w", 1, None, 30_000)
    assert claimed.id == held
    before = {i: await b.get_activity(i) for i in (pending, held)}
    for i in (pending, held):
        await to_earlier_layout(b.client, f"{b._ns}:{{{q}}}:a:{i}")
    assert (await b.get_activity(held)).corrupt is not None  # type: ignore[union-attr]
    await b.migrate()
    await b.migrate()  # idempotent
    assert {i: await b.get_activity(i) for i in (pending, held)} == before
    assert await b.ack(q, [Ack(held, claimed.claim_token, AckOutcome.COMPLETED, b"7")]) == []
    (again,) = await b.claim(q, "w", 1, None, 30_000)
    assert (again.id, again.priority, again.created_at_ms) == (pending, before[pending].priority,  # type: ignore[union-attr]
                                                              before[pending].created_at_ms)  # type: ignore[union-attr]


# ------------------------------------------------------------------ issue 26: the eviction warning, once, from a worker
@pytest.fixture
def lru_redis_url(tmp_path: Path) -> Iterator[str]:
    """A private Redis whose ``maxmemory-policy`` is ``allkeys-lru``."""
    if not have_redis_server():
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("redis-server is not on PATH")
        pytest.skip("redis-server is not on PATH")
    server = RedisServer(tmp_path, "--maxmemory-policy", "allkeys-lru", "--save", "", "--appendonly", "no")
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


def _eviction_warnings(caplog: pytest.LogCaptureFixture) -> int:
    return sum("maxmemory-policy" in r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)


async def test_the_eviction_policy_is_warned_once_from_the_worker_not_on_connect(
    lru_redis_url: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(servercheck, "_CHECKED", set())  # as in a fresh worker process
    caplog.set_level(logging.WARNING, logger="runnerq_fast")
    backend = await RedisBackend.open(lru_redis_url)
    try:
        second = await RedisBackend.open(lru_redis_url)
        await second.close()
        assert _eviction_warnings(caplog) == 0
        for _ in range(2):  # started twice, and a second engine on the same server: still one warning
            for queue in ("a", "b"):
                engine = rq.WorkerEngine(backend, queue_name=queue, poll_interval=0.05, prune_interval=0)

                @engine.activity("t")
                async def t(payload: Any, ctx: rq.ActivityContext) -> None:
                    return None

                async with engine:
                    pass
        assert _eviction_warnings(caplog) == 1
        assert await backend.check_eviction_policy() == "allkeys-lru"  # on demand: warns each time
        assert _eviction_warnings(caplog) == 2
    finally:
        await backend.close()


def test_the_sync_client_prints_no_eviction_warning(lru_redis_url: str, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="runnerq_fast")
    with rq.SyncExecutor(lru_redis_url, "sync") as client:
        assert client.activity("t").payload({}).execute()
    assert _eviction_warnings(caplog) == 0


@pytest.mark.slow
def test_cli_commands_print_no_eviction_warning(lru_redis_url: str) -> None:
    """Three CLI processes (about 1 s each)."""
    for args in (("stats", "--queue", "sync"), ("queues",), ("enqueue", "t", "--payload", "{}")):
        done = run_cli(*args, "--backend", lru_redis_url)
        assert done.returncode == 0, (args, done.stderr)
        assert "maxmemory" not in done.stderr + done.stdout, (args, done.stderr)
