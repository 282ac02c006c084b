"""Redis-specific integrity (issue 11): the key layout is injective and one slot per queue; a Lua script
that fails writes nothing; corrupt hashes are reported, never raised."""

from __future__ import annotations

import asyncio

from hypothesis import given
from hypothesis import strategies as st
from redis.crc import key_slot

import runnerq_fast as rq
from runnerq_fast.backends.redis import RedisBackend, keys
from runnerq_fast.models import Ack, AckOutcome

HOSTILE = ["A", "A}:idem:1:t:k", "A}", "{A}", "}{", "A%7D", "%", "%25", "x}:sched", "{", "a{b}c"]


@given(st.text(alphabet="ab{}%:7DB25", min_size=1, max_size=12), st.text(alphabet="ab{}%:7DB25", min_size=1,
                                                                       max_size=12))
def test_distinct_queues_have_distinct_prefixes_that_no_other_key_extends(q1: str, q2: str) -> None:
    p1, p2 = keys.prefix("rq", q1), keys.prefix("rq", q2)
    if q1 != q2:
        assert not p1.startswith(p2) and not p2.startswith(p1)
    assert keys.queue_of_channel("rq", keys.done_channel("rq", q1)) == q1
    tag = p1[len("rq:{") : -2]
    assert "{" not in tag and "}" not in tag and keys.untag(tag) == q1


def test_a_name_without_braces_or_percent_keeps_its_keys() -> None:
    assert keys.prefix("rq", "emails:high") == "rq:{emails:high}:"
    assert keys.activity("rq", "q", "abc") == "rq:{q}:a:abc"


async def test_every_key_of_a_hostile_queue_is_in_the_queues_one_slot(
    redis_backend: RedisBackend, redis_namespace: str
) -> None:
    for q in HOSTILE:
        ex = rq.ActivityExecutor(redis_backend, q)
        await ex.activity("t}:x").idempotency_key("k}:wake").execute()
        await ex.activity("later").delay(60).execute()
        (a,) = await redis_backend.claim(q, "w", 1, ["t}:x"], 5000)
        await redis_backend.ack(q, [Ack(a.id, a.claim_token, AckOutcome.COMPLETED, b"1")])
    names = [k.decode() async for k in redis_backend.client.scan_iter(match=f"{redis_namespace}:*")]
    by_prefix = {q: [n for n in names if n.startswith(keys.prefix(redis_namespace, q))] for q in HOSTILE}
    assert sum(len(v) for v in by_prefix.values()) == len(names) - 1  # all but the queue registry
    for q, own in by_prefix.items():
        assert len(own) >= 8, q
        assert {key_slot(n.encode()) for n in own} == {key_slot(keys.tag(q).encode())}, q


async def test_a_queue_named_after_another_queues_idempotency_key_leaves_that_queue_alone(
    redis_backend: RedisBackend,
) -> None:
    ex_a = rq.ActivityExecutor(redis_backend, "A")
    held = await ex_a.activity("t").idempotency_key("k}:wake", rq.OnDuplicate.NO_REUSE).execute()
    # on main this queue's wake list was queue A's idempotency key: WRONGTYPE on every enqueue and claim
    ex_b = rq.ActivityExecutor(redis_backend, "A}:idem:1:t:k")
    other = await ex_b.activity("t").execute()
    (b,) = await redis_backend.claim("A}:idem:1:t:k", "w", 10, None, 5000)
    assert b.id == other.activity_id
    again = await ex_a.activity("t").idempotency_key("k}:wake", rq.OnDuplicate.RETURN_EXISTING).execute()
    assert not again.created and again.activity_id == held.activity_id


async def test_a_claim_of_a_hostile_type_never_takes_another_queues_delayed_activity(
    redis_backend: RedisBackend,
) -> None:
    mine = await rq.ActivityExecutor(redis_backend, "A").activity("x}:sched").execute()
    # on main this queue's sched set was queue A's ready set of type "x}:sched"
    later = await rq.ActivityExecutor(redis_backend, "A}:ready:x").activity("t").delay(0.3).execute()
    (a,) = await redis_backend.claim("A", "w", 10, ["x}:sched"], 5000)
    assert a.id == mine.activity_id
    assert await redis_backend.claim("A", "w", 10, ["x}:sched"], 5000) == []
    await asyncio.sleep(0.35)
    (b,) = await redis_backend.claim("A}:ready:x", "w", 10, None, 5000)
    assert b.id == later.activity_id
