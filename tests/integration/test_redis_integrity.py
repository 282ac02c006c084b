"""Redis-specific integrity (issue 11): the key layout is injective and one slot per queue; a Lua script
that fails writes nothing; corrupt hashes are reported, never raised."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st
from redis.crc import key_slot

import runnerq_fast as rq
from runnerq_fast.backends.redis import RedisBackend, keys
from runnerq_fast.cli import cli
from runnerq_fast.models import Ack, AckOutcome, ClaimedActivity, LeaseRef
from tests.conformance import new, now_ms
from tests.redis_fixtures import NUMBER_PARTS, damage

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


# ------------------------------------------------ item 2: a script meeting a corrupt hash writes nothing wrong
async def _three_claimed(b: RedisBackend, q: str) -> list[ClaimedActivity]:
    ids = [r.activity_id for r in await b.enqueue(q, [new("t") for _ in range(3)])]
    got = {a.id: a for a in await b.claim(q, "w", 3, None, 5000)}
    return [got[i] for i in ids]


async def _damage(b: RedisBackend, q: str, activity_id: str, field: str, value: bytes) -> None:
    key = keys.activity(b._ns, q, activity_id)
    if field in NUMBER_PARTS:
        await damage(b.client, key, field, value)
    else:
        await b.client.hset(key, field, value)


async def test_an_ack_batch_with_a_corrupt_retry_dead_letters_it_and_applies_the_others(
    redis_backend: RedisBackend,
) -> None:
    b, q = redis_backend, "acks"
    first, bad, last = await _three_claimed(b, q)
    await _damage(b, q, bad.id, "rc", b"two")
    retry = [Ack(a.id, a.claim_token, AckOutcome.RETRY, None, "again", now_ms()) for a in (first, bad, last)]
    assert await b.ack(q, retry) == []  # on main: ResponseError after the first ack was written
    for a in (first, last):
        snap = await b.get_activity(a.id)
        assert snap is not None and (snap.status, snap.retry_count) == ("retrying", 1)
    snap = await b.get_activity(bad.id)
    assert snap is not None and snap.status == "dead_letter"
    assert snap.last_error == "corrupt row: retry_count is 'two', not an integer"
    stats = await b.stats(q)
    assert (stats.retrying, stats.dead_letter, stats.processing) == (2, 1, 0)


async def test_a_release_batch_with_a_corrupt_activity_dead_letters_it_and_releases_the_others(
    redis_backend: RedisBackend,
) -> None:
    b, q = redis_backend, "releases"
    first, bad, last = await _three_claimed(b, q)
    await _damage(b, q, bad.id, "pr", b"")
    released = await b.release(q, [LeaseRef(a.id, a.claim_token) for a in (first, bad, last)])
    assert sorted(released) == sorted(a.id for a in (first, bad, last))  # none is held any more
    again = await b.claim(q, "w", 10, None, 5000)
    assert sorted(a.id for a in again) == sorted([first.id, last.id]) and all(a.retry_count == 0 for a in again)
    snap = await b.get_activity(bad.id)
    assert snap is not None and snap.status == "dead_letter" and snap.last_error is not None
    assert snap.last_error.startswith("corrupt row: priority is ''")


async def test_promoting_a_corrupt_delayed_activity_dead_letters_it_alone(redis_backend: RedisBackend) -> None:
    b, q = redis_backend, "delayed"
    ex = rq.ActivityExecutor(b, q)
    futs = [await ex.activity("t").delay(0.1).execute() for _ in range(3)]
    await _damage(b, q, futs[1].activity_id, "r", b"soon")
    await asyncio.sleep(0.15)
    got = await b.claim(q, "w", 10, None, 5000)  # on main: every claim raised, the queue was wedged
    assert sorted(a.id for a in got) == sorted([futs[0].activity_id, futs[2].activity_id])
    snap = await b.get_activity(futs[1].activity_id)
    assert snap is not None and snap.status == "dead_letter" and snap.corrupt is not None
    assert (await b.stats(q)).scheduled == 0


async def test_operator_actions_skip_a_corrupt_activity_and_apply_to_the_others(redis_backend: RedisBackend) -> None:
    b, q = redis_backend, "actions"
    first, bad, last = await _three_claimed(b, q)
    await _damage(b, q, bad.id, "rc", b"x")
    await b.ack(q, [Ack(a.id, a.claim_token, AckOutcome.DEAD_LETTER, None, "no") for a in (first, bad, last)])
    await _damage(b, q, bad.id, "pr", b"x")  # a dead letter that cannot be scored: retry skips it
    res = await b.retry_activities(q, rq.ActivityFilter(statuses=("dead_letter",)))
    assert sorted(res.changed) == sorted([first.id, last.id]) and res.skipped == 1
    snap = await b.get_activity(bad.id)
    assert snap is not None and snap.status == "dead_letter"


async def test_inspect_prints_a_corrupt_activity_with_its_reason(
    redis_backend: RedisBackend, redis_url: str, redis_namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    b, q = redis_backend, "inspected"
    (res,) = await b.enqueue(q, [new("t")])
    await _damage(b, q, res.activity_id, "pr", b"\xff")
    await _damage(b, q, res.activity_id, "e", b"\xfe oops")
    await _damage(b, q, res.activity_id, "x:999", b"enqueued\x1fnot-a-time")
    opened = RedisBackend.open.__func__  # type: ignore[attr-defined]

    async def in_namespace(cls: type[RedisBackend], /, url: str, **kw: Any) -> RedisBackend:
        return await opened(cls, url, **{**kw, "namespace": redis_namespace})  # type: ignore[no-any-return]

    monkeypatch.setattr(RedisBackend, "open", classmethod(in_namespace))
    runner = CliRunner()
    for extra in ([], ["--json"]):
        out = await asyncio.to_thread(runner.invoke, cli, ["inspect", res.activity_id, "--backend", redis_url, *extra])
        assert out.exit_code == 0, out.output
        assert "corrupt row: priority is" in out.output and "Traceback" not in out.output
