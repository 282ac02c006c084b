"""Redis-specific behaviour of the operator features: key layout, hash slots, drift, skipped rows."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import Any

import pytest
from redis.crc import key_slot
from redis.exceptions import ResponseError

from runnerq_fast.backends.redis import RedisBackend, keys
from runnerq_fast.backends.redis.operations import member
from runnerq_fast.models import Ack, AckOutcome, ActivityCount, ActivityFilter, LeaseRef
from tests.conformance import new, now_ms
from tests.redis_fixtures import damage

F = ActivityFilter


async def _mixed_workload(b: RedisBackend, q: str) -> dict[str, str]:
    """Activities of ``q`` in every status, some with a parent, some changed by actions; returns role -> id."""
    (parent,) = [r.activity_id for r in await b.enqueue(q, [new("p")])]
    kids = [r.activity_id for r in await b.enqueue(q, [new("k", parent_id=parent) for _ in range(5)])]
    await b.enqueue(q, [new("s", run_at_ms=now_ms() + 600_000), new("t", priority=4)])
    held = await b.claim(q, "w", 5, ["k"], 30_000)
    by_id = {c.id: c for c in held}
    outcomes = {
        kids[0]: AckOutcome.COMPLETED,
        kids[1]: AckOutcome.FAILED,
        kids[2]: AckOutcome.DEAD_LETTER,
        kids[4]: AckOutcome.COMPLETED,
    }
    acks = [
        Ack(kid, by_id[kid].claim_token, o, b"1" if o == 1 else None, None if o == 1 else "x")
        for kid, o in outcomes.items()
    ]
    assert await b.ack(q, acks) == []
    await b.ack(q, [Ack(kids[1], "stale", AckOutcome.COMPLETED)])  # rejected: changes nothing
    await b.retry_activities(q, F(ids=(kids[1],)))
    await b.cancel_activities(q, F(ids=(kids[3],)))  # running: cancel requested
    await b.set_priority(q, F(activity_types=("t",)), 2)
    await b.run_now(q, F(activity_types=("s",)))
    await b.delete_activities(q, F(ids=(kids[0],)))
    return {"parent": parent, "done": kids[0], "retried": kids[1], "dead": kids[2], "running": kids[3]}


async def _truth(b: RedisBackend, q: str) -> Counter[tuple[str, str]]:
    """``(status, type) -> n`` read from every activity hash of ``q`` (SCAN: tests only)."""
    out: Counter[tuple[str, str]] = Counter()
    r: Any = b.client
    async for k in r.scan_iter(match=f"{b._ns}:{{{q}}}:a:*", count=1000):
        s, t = await r.hmget(k, ["s", "t"])
        out[(s.decode(), t.decode())] += 1
    return out


async def test_every_new_key_shares_the_queue_hash_slot(redis_backend: RedisBackend, redis_namespace: str) -> None:
    b, q = redis_backend, "slotted"
    await _mixed_workload(b, q)
    r: Any = b.client
    names = {k.decode() async for k in r.scan_iter(match=f"{redis_namespace}:*", count=1000)}
    prefix = keys.prefix(redis_namespace, q)
    new_keys = [
        keys.type_set(redis_namespace, q, "k"),
        keys.children(redis_namespace, q, "x"),
        keys.counts(redis_namespace, q),
        keys.dead_letter(redis_namespace, q),
        prefix + "fin",
        keys.status_set(redis_namespace, q, "failed"),
    ]
    for k in new_keys:
        assert k.startswith(prefix)
    present = {n for n in names if n != keys.queues(redis_namespace)}
    assert {
        keys.type_set(redis_namespace, q, "k"),
        keys.counts(redis_namespace, q),
        prefix + "fin",
        keys.dead_letter(redis_namespace, q),
    } <= present
    assert any(n.startswith(prefix + "kids:") for n in present)
    slots = {key_slot(n.encode()) for n in present}
    assert slots == {key_slot(prefix.encode())}, sorted(present)


async def test_counters_and_indexes_agree_with_the_hashes_after_every_kind_of_change(
    redis_backend: RedisBackend,
) -> None:
    b, q = redis_backend, "drift"
    roles = await _mixed_workload(b, q)
    # the running one is asked to cancel; its worker retries, which ends it cancelled
    snap = await b.get_activity(roles["running"])
    assert snap is not None and snap.status == "processing"
    (again,) = await b.claim(q, "w", 1, ["k"], 30_000)  # the retried one
    assert again.id == roles["retried"]
    await b.release(q, [LeaseRef(again.id, again.claim_token)])
    truth = await _truth(b, q)
    stored: Any = await b.client.hgetall(keys.counts(b._ns, q))
    counters = Counter({tuple(f.decode().split("\x1f")): int(n) for f, n in stored.items()})
    assert counters == truth
    stats = await b.stats(q)
    for status in keys.STATUSES:
        assert getattr(stats, status) == sum(n for (s, _), n in truth.items() if s == status), status
    for typ in {t for _, t in truth}:
        assert await b.client.zcard(keys.type_set(b._ns, q, typ)) == sum(n for (_, t), n in truth.items() if t == typ)
    summary = {s.queue: s for s in await b.list_queues()}[q]
    assert summary.by_type == {t: {s: n for (s, tt), n in truth.items() if tt == t} for t in {t for _, t in truth}}


async def test_the_reaper_removes_expired_results_with_their_index_entries(
    redis_url: str, redis_namespace: str
) -> None:
    b = await RedisBackend.open(redis_url, namespace=redis_namespace, result_ttl=0.05)
    try:
        q = "expiry"
        (parent,) = [r.activity_id for r in await b.enqueue(q, [new("p")])]
        await b.enqueue(q, [new("k", parent_id=parent) for _ in range(3)])
        held = await b.claim(q, "w", 3, ["k"], 30_000)
        await b.ack(q, [Ack(c.id, c.claim_token, AckOutcome.COMPLETED, b"1") for c in held])
        assert (await b.count_activities(q, F(parent_id=parent))).count == 3
        await asyncio.sleep(0.12)
        page = await b.query_activities(q, F(statuses=("completed",)))  # kept until the reaper runs
        assert len(page.items) == 3
        await b.requeue_expired(q, 100)
        page = await b.query_activities(q, F(statuses=("completed",)))
        assert page.items == [] and page.next_cursor is None
        ns = redis_namespace
        assert await b.client.zcard(keys.status_set(ns, q, "completed")) == 0
        assert await b.client.zcard(keys.type_set(ns, q, "k")) == 0
        assert await b.client.exists(keys.children(ns, q, parent)) == 0
        assert await b.client.zcard(keys.prefix(ns, q) + "fin") == 0
        assert await b.client.hgetall(keys.counts(ns, q)) == {b"pending\x1fp": b"1"}
        assert (await b.stats(q)).total == 1
    finally:
        await b.close()


async def test_a_corrupt_hash_is_listed_with_its_reason_and_a_missing_one_is_skipped(
    redis_backend: RedisBackend, caplog: pytest.LogCaptureFixture
) -> None:
    b, q = redis_backend, "corrupt"
    ids = [r.activity_id for r in await b.enqueue(q, [new("t") for _ in range(5)])]
    await damage(b.client, keys.activity(b._ns, q, ids[1]), "pr", b"not a number")
    await b.client.hdel(keys.activity(b._ns, q, ids[2]), "t")
    await b.client.delete(keys.activity(b._ns, q, ids[3]))  # gone: an expired result, silently skipped
    with caplog.at_level(logging.WARNING, logger="runnerq_fast.backends.redis"):
        page = await b.query_activities(q, F(), limit=10)
        typed = await b.query_activities(q, F(priorities=(2,)), limit=10)
        listed = await b.list_activities(q, "pending")
    corrupt = {s.id: s.corrupt for s in page.items}
    assert list(corrupt) == [ids[4], ids[2], ids[1], ids[0]] and page.next_cursor is None
    assert corrupt[ids[1]] == "corrupt row: priority is 'not a number', not an integer"
    assert "activity_type is missing" in (corrupt[ids[2]] or "")
    assert corrupt[ids[0]] is None and corrupt[ids[4]] is None
    # a priority that is no number matches no priority; the hash without a type has its priority
    assert [s.id for s in typed.items] == [ids[4], ids[2], ids[0]]
    assert [(s.id, s.corrupt) for s in listed] == list(corrupt.items())
    warned = " ".join(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert ids[1] in warned and ids[3] not in warned
    assert (await b.count_activities(q, F(metadata=(("k", "v"),)))).count == 0


async def test_a_refused_action_script_writes_nothing(redis_backend: RedisBackend) -> None:
    b, q = redis_backend, "refused"
    (aid,) = [r.activity_id for r in await b.enqueue(q, [new("t")])]
    stream = keys.stream(b._ns, q)
    before = (await b.client.xlen(stream), await b.client.hgetall(keys.activity(b._ns, q, aid)))
    with pytest.raises(ResponseError, match="priority must be 1-4"):
        await b._run("priority", q, [9, aid])
    assert (await b.client.xlen(stream), await b.client.hgetall(keys.activity(b._ns, q, aid))) == before


async def test_index_members_sort_by_creation_then_id(redis_backend: RedisBackend) -> None:
    b, q = redis_backend, "order"
    ids = [r.activity_id for r in await b.enqueue(q, [new("t") for _ in range(3)])]
    snaps = [await b.get_activity(i) for i in ids]
    r: Any = b.client
    got = await r.execute_command("ZRANGE", keys.status_set(b._ns, q, "pending"), "-", "+", "BYLEX")
    assert got == sorted(member(s.created_at_ms, s.id) for s in snaps if s is not None)
    assert member(5, "ab") == b"000000000000005:ab"


async def test_oldest_ready_looks_past_priority_and_retry_bands(redis_backend: RedisBackend) -> None:
    b, q = redis_backend, "bands"
    (old,) = [r.activity_id for r in await b.enqueue(q, [new("a", priority=1)])]
    await asyncio.sleep(0.01)
    (r,) = [r.activity_id for r in await b.enqueue(q, [new("r", priority=3)])]
    (c,) = await b.claim(q, "w", 1, ["r"], 30_000)
    await b.ack(q, [Ack(c.id, c.claim_token, AckOutcome.RETRY, None, "x", 0)])
    await asyncio.sleep(0.01)
    await b.enqueue(q, [new("a", priority=4) for _ in range(3)])

    async def oldest() -> int | None:
        return {s.queue: s for s in await b.list_queues()}[q].oldest_ready_ms

    first = await b.get_activity(old)
    assert first is not None and await oldest() == first.ready_at_ms  # lowest priority, behind four others
    await b.cancel_activities(q, F(ids=(old,)))
    retried = await b.get_activity(r)
    assert retried is not None and retried.retry_count == 1
    assert await oldest() == retried.ready_at_ms  # priority 3 with one retry: older than the priority-4 ones


async def test_one_reaper_pass_drops_more_expired_results_than_one_script_call_takes(
    redis_url: str, redis_namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runnerq_fast.backends.redis import backend as module

    monkeypatch.setattr(module, "_EXPIRED_BATCH", 2)
    b = await RedisBackend.open(redis_url, namespace=redis_namespace, result_ttl=0.05)
    try:
        q = "expiry-batches"
        await b.enqueue(q, [new("k") for _ in range(7)])
        held = await b.claim(q, "w", 7, None, 30_000)
        await b.ack(q, [Ack(c.id, c.claim_token, AckOutcome.FAILED, None, "x") for c in held])
        await asyncio.sleep(0.12)
        await b.requeue_expired(q, 100)
        assert await b.client.zcard(keys.prefix(redis_namespace, q) + "fin") == 0
        assert (await b.stats(q)).total == 0 and await b.list_queues() == []
    finally:
        await b.close()


async def test_metadata_filter_matches_decoded_values_not_text(redis_backend: RedisBackend) -> None:
    b, q = redis_backend, "meta"
    escaped, plain, longer, _number, quoted = [
        r.activity_id
        for r in await b.enqueue(
            q,
            [
                new("t", metadata=b'{"k": "caf\\u00e9"}'),  # an encoder that escapes non-ASCII
                new("t", metadata=b'{"k": "t7"}'),
                new("t", metadata=b'{"k": "t70", "x": "t7"}'),
                new("t", metadata=b'{"k": 7}'),
                new("t", metadata=b'{"k": "say \\"hi\\""}'),
            ],
        )
    ]

    async def ids(k: str, v: str) -> set[str]:
        return {s.id for s in (await b.query_activities(q, F(metadata=((k, v),)))).items}

    assert await ids("k", "café") == {escaped}
    assert await ids("k", "t7") == {plain}
    assert await ids("x", "t7") == {longer}
    assert await ids("k", "7") == set()  # a number is not the string "7"
    assert await ids("k", 'say "hi"') == {quoted}
    assert (await b.count_activities(q, F(metadata=(("k", "t7"),)))).count == 1


async def test_processing_is_listed_from_the_lease_set_in_creation_order(redis_backend: RedisBackend) -> None:
    b, q = redis_backend, "running"
    ids = [r.activity_id for r in await b.enqueue(q, [new("t") for _ in range(5)])]
    await asyncio.sleep(0.01)
    late = [r.activity_id for r in await b.enqueue(q, [new("u") for _ in range(2)])]
    await b.claim(q, "w", 10, None, 30_000)
    assert await b.client.exists(keys.status_set(b._ns, q, "processing")) == 0  # not kept: the lease set is
    everything = list(reversed(ids + late))
    seen: list[str] = []
    cursor = None
    while True:
        page = await b.query_activities(q, F(statuses=("processing",)), limit=3, cursor=cursor)
        seen += [s.id for s in page.items]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert seen == everything
    oldest = await b.query_activities(q, F(statuses=("processing", "pending")), newest_first=False, limit=2)
    assert [s.id for s in oldest.items] == ids[:2]
    snap = await b.get_activity(late[0])
    assert snap is not None
    ranged = F(statuses=("processing",), created_after_ms=snap.created_at_ms)
    assert [s.id for s in (await b.query_activities(q, ranged)).items] == list(reversed(late))
    assert await b.count_activities(q, ranged) == ActivityCount(2, True)
    assert await b.count_activities(q, F(statuses=("processing",))) == ActivityCount(7, True)
    assert [s.id for s in await b.list_activities(q, "processing", 1, 3)] == everything[1:4]
    assert [s.id for s in await b.list_activities(q, None, 0, 2)] == everything[:2]
    assert (await b.stats(q)).processing == 7


async def test_a_retried_activity_is_not_removed_when_its_old_result_expires(
    redis_url: str, redis_namespace: str
) -> None:
    b = await RedisBackend.open(redis_url, namespace=redis_namespace, result_ttl=0.05)
    try:
        q = "retried"
        (aid,) = [r.activity_id for r in await b.enqueue(q, [new("t")])]
        (c,) = await b.claim(q, "w", 1, None, 30_000)
        await b.ack(q, [Ack(c.id, c.claim_token, AckOutcome.FAILED, None, "boom")])
        assert (await b.retry_activities(q, F(ids=(aid,)))).changed == [aid]
        await asyncio.sleep(0.1)
        await b.requeue_expired(q, 100)
        snap = await b.get_activity(aid)
        assert snap is not None and snap.status == "pending"
        assert await b.client.zcard(keys.prefix(redis_namespace, q) + "fin") == 0
        assert (await b.count_activities(q, F(statuses=("pending",)))).count == 1
    finally:
        await b.close()


async def test_a_hash_without_its_creation_time_does_not_fail_the_ack_batch(redis_backend: RedisBackend) -> None:
    b, q = redis_backend, "damaged"
    await b.enqueue(q, [new("t"), new("t")])
    held = await b.claim(q, "w", 2, None, 30_000)
    await damage(b.client, keys.activity(b._ns, q, held[0].id), "c", None)
    assert await b.ack(q, [Ack(c.id, c.claim_token, AckOutcome.COMPLETED, b"1") for c in held]) == []
    for c in held:
        res = await b.get_result(c.id)
        assert res is not None and res.status == "completed"


async def test_a_requested_cancel_records_why_it_ended(redis_backend: RedisBackend) -> None:
    b, q = redis_backend, "why"
    a, c = [r.activity_id for r in await b.enqueue(q, [new("t"), new("u")])]
    (ha,) = await b.claim(q, "w", 1, ["t"], 30_000)
    (hc,) = await b.claim(q, "w", 1, ["u"], 20)
    await b.cancel_activities(q, F(ids=(a, c)))
    assert await b.release(q, [LeaseRef(a, ha.claim_token)]) == [a]
    await asyncio.sleep(0.05)
    assert (await b.requeue_expired(q, 10)).cancelled == [c]
    for aid, why in ((a, "released at shutdown"), (c, "lease expired")):
        last = (await b.get_events(aid))[-1]
        assert (last.event_type, last.detail) == ("cancelled", why)
    assert hc.id == c


async def test_an_expired_batch_of_results_spares_one_finished_again_since(
    redis_backend: RedisBackend, redis_url: str, redis_namespace: str
) -> None:
    # P.."fin" keeps one member per script run (a batch of ids): an activity retried and finished
    # again later is in a later batch too, and goes only with that one
    short = await RedisBackend.open(redis_url, namespace=redis_namespace, result_ttl=0.05)
    try:
        q = "batches"
        a, c = [r.activity_id for r in await short.enqueue(q, [new("t"), new("t")])]
        held = await short.claim(q, "w", 2, None, 30_000)
        await short.ack(q, [Ack(h.id, h.claim_token, AckOutcome.FAILED, None, "E: x") for h in held])
        assert (await redis_backend.retry_activities(q, F(ids=(a,)))).changed == [a]
        (again,) = await redis_backend.claim(q, "w", 1, None, 30_000)  # the default result ttl: 24 h
        await redis_backend.ack(q, [Ack(a, again.claim_token, AckOutcome.COMPLETED, b"2")])
        await asyncio.sleep(0.12)
        await short.requeue_expired(q, 100)
        assert await redis_backend.get_activity(c) is None
        result = await redis_backend.get_result(a)
        assert result is not None and result.data == b"2"
        assert await redis_backend.client.zcard(keys.prefix(redis_namespace, q) + "fin") == 1
    finally:
        await short.close()


async def test_a_result_expiry_of_the_earlier_layout_is_still_dropped(redis_url: str, redis_namespace: str) -> None:
    # before the batches, P.."fin" had one member per id
    b = await RedisBackend.open(redis_url, namespace=redis_namespace, result_ttl=0.05)
    try:
        q = "legacy-fin"
        (aid,) = [r.activity_id for r in await b.enqueue(q, [new("t")])]
        (c,) = await b.claim(q, "w", 1, None, 30_000)
        await b.ack(q, [Ack(aid, c.claim_token, AckOutcome.COMPLETED, b"1")])
        fin = keys.prefix(redis_namespace, q) + "fin"
        r: Any = b.client
        (batch,) = await r.zrange(fin, 0, -1)
        await b.client.delete(keys.prefix(redis_namespace, q) + "finb:" + batch.decode())
        await r.zadd(fin, {batch: 0.0, aid: 1.0})
        await asyncio.sleep(0.06)
        await b.requeue_expired(q, 100)
        assert await b.get_activity(aid) is None and await b.client.zcard(fin) == 0
        assert (await b.stats(q)).total == 0
    finally:
        await b.close()


async def test_no_metadata_is_stored_as_no_field_and_reads_as_empty(redis_backend: RedisBackend) -> None:
    b, q = redis_backend, "meta"
    plain, tagged = [r.activity_id for r in await b.enqueue(q, [new("t"), new("t", metadata=b'{"k":"v"}')])]
    r: Any = b.client
    assert await r.hexists(keys.activity(b._ns, q, plain), "m") == 0  # metadata {}: one hash field less
    assert await r.hget(keys.activity(b._ns, q, tagged), "m") == b'{"k":"v"}'
    snap = await b.get_activity(plain)
    assert snap is not None and snap.metadata == {} and snap.corrupt is None
    page = await b.query_activities(q, F(metadata=(("k", "v"),)))
    assert [s.id for s in page.items] == [tagged]
    claimed = {c.id: c.metadata for c in await b.claim(q, "w", 2, None, 30_000)}
    assert claimed == {plain: b"{}", tagged: b'{"k":"v"}'}
