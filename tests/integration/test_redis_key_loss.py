"""Losing any one key of a queue (evicted under ``allkeys-lru``, deleted by hand) never stops the queue
(issue 26, item 7).

The keys come from :data:`runnerq_fast.backends.redis.keys.QUEUE_KEYS` and ``SHARED_KEYS``: a queue with
work in every status is built, every key it wrote must be one of them (a key added to the scripts but
not to ``keys.py`` fails here), and each name is then deleted in turn (every key of it, e.g. every
activity hash) before the queue is used again: enqueue, claim, ack, the reaper pass and every read
must not raise, and everything whose own hash survived is drained.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import runnerq_fast as rq
from runnerq_fast.backends.redis import RedisBackend, keys
from runnerq_fast.backends.redis.cluster import RedisClusterBackend
from runnerq_fast.errors import BackendError
from runnerq_fast.models import Ack, AckOutcome, ActivityFilter, ClaimedActivity, TypeDefaults, WorkerInfo
from tests.conformance import new, now_ms
from tests.faults.servers import RedisServer, have_redis_server

QUEUE = "lossy{q}"  # a name its tag escapes: the pattern matching below must use keys.prefix
LAYOUT = [name for name, _ in (*keys.QUEUE_KEYS, *keys.SHARED_KEYS)]


def name_of(ns: str, key: str) -> str | None:
    """The :data:`keys.QUEUE_KEYS` / ``SHARED_KEYS`` name ``key`` of :data:`QUEUE` is an instance of."""
    for name, _ in keys.SHARED_KEYS:
        if key == f"{ns}:{name}":
            return name
    p = keys.prefix(ns, QUEUE)
    if not key.startswith(p):
        return None
    rest = key[len(p) :]
    fixed = [n for n, _ in keys.QUEUE_KEYS if "<" not in n]
    if rest in fixed:
        return rest
    for name, _ in keys.QUEUE_KEYS:
        if "<" in name and rest.startswith(name[: name.index("<")]) and len(rest) > name.index("<"):
            return name
    return None


@dataclass
class Built:
    """What :func:`build` left in the queue, by what it is."""

    ready: list[str] = field(default_factory=list)  # pending, due retrying, suspect: drained by any claim
    later: list[str] = field(default_factory=list)  # scheduled in an hour
    held: list[ClaimedActivity] = field(default_factory=list)  # processing, lease of a minute
    finished: list[str] = field(default_factory=list)


async def build(b: RedisBackend) -> Built:
    """A queue with pending, scheduled, retrying, suspect, processing and every finished status, a
    parent and child, an idempotency key, a hold and a registered worker."""
    out = Built()
    ex = rq.ActivityExecutor(b, QUEUE)
    parent = new("t")
    await b.enqueue(QUEUE, [parent, new("t"), new("t")])
    kid = new("u", parent_id=parent.id)
    await b.enqueue(QUEUE, [kid])
    keyed = await ex.activity("t").idempotency_key("k").execute()
    out.ready += [parent.id, kid.id, keyed.activity_id]
    out.later.append((await ex.activity("t").delay(3600).execute()).activity_id)
    for typ in ("run", "gone", "retry", "done"):
        await b.enqueue(QUEUE, [new(typ) for _ in range(4 if typ == "done" else 2 if typ == "run" else 1)])
    out.held = await b.claim(QUEUE, "w1", 10, ["run"], 60_000)
    (gone,) = await b.claim(QUEUE, "w1", 10, ["gone"], 1)
    (retry,) = await b.claim(QUEUE, "w1", 10, ["retry"], 60_000)
    done = await b.claim(QUEUE, "w1", 10, ["done"], 60_000)
    outcomes = (AckOutcome.COMPLETED, AckOutcome.FAILED, AckOutcome.DEAD_LETTER, AckOutcome.CANCELLED)
    acks = [Ack(a.id, a.claim_token, o, b"1" if o == AckOutcome.COMPLETED else None, "e") for a, o in
            zip(done, outcomes, strict=True)]
    acks.append(Ack(retry.id, retry.claim_token, AckOutcome.RETRY, None, "again", now_ms()))
    assert await b.ack(QUEUE, acks) == []
    out.finished += [a.id for a in done]
    await asyncio.sleep(0.01)
    assert (await b.requeue_expired(QUEUE, 100)).requeued == [gone.id]  # a suspect now
    out.ready += [gone.id, retry.id]
    for typ in ("t", "u"):  # the rest of the pending
        out.ready += [i async for i in _ids(b, typ) if i not in out.ready and i not in out.later]
    assert await b.hold(QUEUE, "prune", "me", 60_000)
    info = WorkerInfo(worker_id="w1", queue=QUEUE, host="h", pid=1, activity_types=("t",), in_flight=0,
                      concurrency=1, started_at_ms=now_ms(), last_seen_ms=now_ms())
    await b.register_worker(info, 60_000)
    await b.set_type_defaults(QUEUE, [TypeDefaults(activity_type="t", max_retries=5)])
    return out


async def _ids(b: RedisBackend, typ: str) -> AsyncIterator[str]:
    for s in await b.list_activities(QUEUE, "pending", 0, 100):
        if s.activity_type == typ:
            yield s.id


async def every_key(b: RedisBackend, ns: str) -> list[str]:
    return [k.decode() async for k in b.client.scan_iter(match=f"{ns}:*", count=1000)]


async def read_everything(b: RedisBackend, ids: list[str]) -> None:
    """Every read of the queue (stats, listings, the console's queries): none may raise."""
    await b.stats(QUEUE)
    await b.list_activities(QUEUE, None, 0, 100)
    for s in keys.STATUSES:
        await b.list_activities(QUEUE, s, 0, 100)
    await b.query_activities(QUEUE, ActivityFilter())
    await b.query_activities(QUEUE, ActivityFilter(activity_types=("t",), statuses=("pending",)))
    await b.count_activities(QUEUE, ActivityFilter())
    await b.count_activities(QUEUE, ActivityFilter(activity_types=("t",)))
    await b.list_queues()
    await b.list_workers(QUEUE)
    await b.get_type_defaults(QUEUE)
    await b.list_dead_letter(QUEUE)
    await b.ready_work(QUEUE)
    await b.suspects_ready(QUEUE, None)
    for i in ids:
        await b.get_activity(i)
        await b.get_events(i)
        await b.get_result(i)


async def drain(b: RedisBackend) -> set[str]:
    """Claim (any type, suspects too) and complete until a round claims nothing; the ids completed."""
    completed: set[str] = set()
    for _ in range(50):
        await b.requeue_expired(QUEUE, 1000)
        got = await b.claim(QUEUE, "w2", 100, None, 60_000)
        got += await b.claim_suspect(QUEUE, "w2", None, 60_000)
        if not got:
            return completed
        assert await b.ack(QUEUE, [Ack(a.id, a.claim_token, AckOutcome.COMPLETED, b"2", None) for a in got]) == []
        completed |= {a.id for a in got}
    raise AssertionError("the queue did not drain in 50 rounds")


async def check_loss(b: RedisBackend, ns: str, name: str) -> None:
    built = await build(b)
    found = {k: name_of(ns, k) for k in await every_key(b, ns)}
    assert [k for k, n in found.items() if n is None] == [], "keys outside keys.QUEUE_KEYS / SHARED_KEYS"
    assert set(found.values()) == set(LAYOUT), "the built queue does not have every key of the layout"
    lost = [k for k, n in found.items() if n == name]
    for k in lost:
        assert await b.client.delete(k) == 1
    everyone = [*built.ready, *built.later, *(a.id for a in built.held), *built.finished]
    await read_everything(b, everyone)

    # the work held before the loss is acked by its worker
    rejected = await b.ack(QUEUE, [Ack(a.id, a.claim_token, AckOutcome.COMPLETED, b"1", None) for a in built.held])
    assert rejected == ([a.id for a in built.held] if name == "a:<id>" else [])
    fresh = [new("t"), new("v")]
    assert (await b.enqueue(QUEUE, fresh))
    completed = await drain(b)
    assert {a.id for a in fresh} <= completed
    if name != "a:<id>":  # every activity whose hash survived ran
        assert set(built.ready) <= completed, name
        for i in built.ready:
            assert (await b.get_result(i)) is not None
    await read_everything(b, everyone)
    # the queue keeps working: one more round trip of every kind
    again = new("t")
    await b.enqueue(QUEUE, [again])
    assert await drain(b) == {again.id}
    stats = await b.stats(QUEUE)
    assert stats.pending == stats.retrying == 0, stats
    # an activity whose hash was lost while processing is counted until its lease runs out (the reaper
    # then takes it out of its indexes)
    assert stats.processing == (len(built.held) if name == "a:<id>" else 0), stats


@pytest.mark.parametrize("name", LAYOUT)
async def test_losing_one_key_of_the_layout_never_stops_the_queue(
    redis_backend: RedisBackend, redis_namespace: str, name: str
) -> None:
    await check_loss(redis_backend, redis_namespace, name)


@pytest.mark.slow
@pytest.mark.parametrize("name", LAYOUT)
async def test_losing_one_key_of_the_layout_never_stops_a_queue_on_redis_cluster(
    redis_cluster_backend: RedisClusterBackend, redis_cluster_namespace: str, name: str
) -> None:
    await check_loss(redis_cluster_backend, redis_cluster_namespace, name)


async def _read(stream: AsyncIterator[rq.ActivityEvent], n: int) -> list[rq.ActivityEvent]:
    """The first ``n`` events of ``stream`` (then closed)."""
    out: list[rq.ActivityEvent] = []
    try:
        async for ev in stream:
            out.append(ev)
            if len(out) == n:
                break
    finally:
        await stream.aclose()  # type: ignore[attr-defined]
    return out


async def check_event_ids_after_losing_the_stream_and_its_counter(b: RedisBackend, ns: str) -> None:
    """The stream and ``evseq`` lost together (eviction can take both): event ids still only go up,
    so a live reader and one resuming after the last id before the loss read every new event."""
    queue = "evlost"
    first = [new("t") for _ in range(100)]
    await b.enqueue(queue, first)
    before = await asyncio.wait_for(_read(b.event_stream(queue, 0), len(first)), 10)
    last = before[-1].id
    assert [ev.id for ev in before] == list(range(last - len(first) + 1, last + 1))
    live = asyncio.ensure_future(_read(b.event_stream(queue, None), 150))
    await asyncio.sleep(0.2)  # the live reader has read where the stream ends
    try:
        seen = await _lose_twice(b, ns, queue, before, live)
    finally:
        live.cancel()
    # listings: every activity's events, old and new, each under its own id, in order
    everything = [ev.id for part in seen for ev in part]
    assert everything == sorted(set(everything))
    listed = [ev.id for s in await b.list_activities(queue, "pending", 0, 1000) for ev in await b.get_events(s.id)]
    assert sorted(listed) == everything


async def _lose_twice(
    b: RedisBackend, ns: str, queue: str, before: list[rq.ActivityEvent], live: asyncio.Future[list[rq.ActivityEvent]]
) -> list[list[rq.ActivityEvent]]:
    last = before[-1].id
    seen = [before]
    for round_ in range(2):  # and once more: a loss after a loss
        for name in ("events", "evseq"):
            assert await b.client.delete(keys.prefix(ns, queue) + name) == 1
        resumed = asyncio.ensure_future(_read(b.event_stream(queue, last), 150))
        fresh = [new("t") for _ in range(150)]
        for i in range(0, 150, 50):  # three script runs
            await b.enqueue(queue, fresh[i : i + 50])
        got = await asyncio.wait_for(resumed, 10)
        assert [ev.activity_id for ev in got] == [a.id for a in fresh], round_
        ids = [ev.id for ev in got]
        assert ids[0] > last and ids == list(range(ids[0], ids[0] + 150)), (last, ids[:3])
        assert ids[-1] < 2**53  # read exactly by JavaScript
        # the activity's own history carries the id the stream gave
        assert [ev.id for ev in await b.get_events(fresh[0].id)] == [ids[0]]
        if round_ == 0:
            assert [ev.id for ev in await asyncio.wait_for(live, 10)] == ids
        seen.append(got)
        last = ids[-1]
    return seen


async def test_event_ids_never_go_back_when_the_stream_and_its_counter_are_lost(
    redis_backend: RedisBackend, redis_namespace: str
) -> None:
    await check_event_ids_after_losing_the_stream_and_its_counter(redis_backend, redis_namespace)


@pytest.mark.slow
async def test_event_ids_never_go_back_when_the_stream_and_its_counter_are_lost_on_redis_cluster(
    redis_cluster_backend: RedisClusterBackend, redis_cluster_namespace: str
) -> None:
    await check_event_ids_after_losing_the_stream_and_its_counter(redis_cluster_backend, redis_cluster_namespace)


def test_the_layout_table_of_keys_py_names_every_key_of_the_list() -> None:
    doc = keys.__doc__ or ""
    rows = [line.split("``")[1] for line in doc.splitlines() if line.startswith(("``P ", "``rq:"))]
    listed = [("P " + n) for n, _ in keys.QUEUE_KEYS] + [f"rq:{n}" for n, _ in keys.SHARED_KEYS]
    assert [r for r in rows if r != "P done"] == listed



@pytest.mark.slow
async def test_a_queue_evicted_under_allkeys_lru_works_again_once_memory_is_freed(tmp_path: Path) -> None:
    if not have_redis_server():
        pytest.skip("redis-server is not on PATH")
    server = RedisServer(tmp_path, "--maxmemory", "3mb", "--maxmemory-policy", "allkeys-lru", "--save", "",
                         "--appendonly", "no")
    server.start()
    b = await RedisBackend.open(server.url, namespace="ev")
    try:
        payload = b'"' + b"x" * 2000 + b'"'
        for round_ in range(40):  # enqueue, claim and complete under memory pressure: keys are evicted
            with contextlib.suppress(BackendError):  # a script may run out of memory halfway: no matter
                await b.enqueue(QUEUE, [new("t", payload) for _ in range(100)])
                got = await b.claim(QUEUE, "w", 50, None, 60_000 if round_ % 2 else 1)
                await b.ack(QUEUE, [Ack(a.id, a.claim_token, AckOutcome.COMPLETED, payload, None) for a in got[:25]])
                await b.requeue_expired(QUEUE, 1000)
        info = await b.client.info("stats")
        assert int(info["evicted_keys"]) > 0
        # the memory freed and the policy fixed, the queue works again with no hand repair
        await b.client.config_set("maxmemory", "0")
        await b.client.config_set("maxmemory-policy", "noeviction")
        await read_everything(b, [])
        fresh = [new("t"), new("u")]
        await b.enqueue(QUEUE, fresh)
        completed = await drain(b)
        assert {a.id for a in fresh} <= completed
        await read_everything(b, list(completed))
        stats = await b.stats(QUEUE)
        assert stats.pending == stats.retrying == 0, stats
        again = new("t")
        await b.enqueue(QUEUE, [again])
        assert await drain(b) == {again.id}
    finally:
        await b.close()
        server.stop()
