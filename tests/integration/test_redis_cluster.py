"""Redis Cluster specifics: URLs, queues spread over the masters, lookups across them, a master failover.

The cluster is the session's (``tests/redis_cluster_fixtures.py``: three
masters on local ports, each with a replica, node timeout 1 s). The failover
tests are marked ``slow`` (``.venv/bin/python -m pytest -m slow
tests/integration/test_redis_cluster.py``) and leave the cluster with its
masters moved, which the other tests do not mind (they look nodes up).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import signal
import time
from collections import defaultdict
from typing import Any

import pytest
from redis.asyncio.cluster import RedisCluster

import runnerq_fast as rq
from runnerq_fast.backends.redis import keys
from runnerq_fast.backends.redis.cluster import RedisClusterBackend, parse_cluster_url
from runnerq_fast.errors import ConfigError
from runnerq_fast.models import Ack, AckOutcome
from tests.conformance import FAST, eventually, new
from tests.redis_cluster_fixtures import LocalCluster
from tests.redis_fixtures import to_earlier_layout

# ------------------------------------------------------------------ URLs (no server)


def test_url_names_every_node_user_password_and_tls() -> None:
    nodes, user, password, tls = parse_cluster_url("rediss+cluster://app:s%40cret@h1:7000,h2,[::1]:7002/0")
    assert nodes == [("h1", 7000), ("h2", 6379), ("::1", 7002)]
    assert (user, password, tls) == ("app", "s@cret", True)
    assert parse_cluster_url("redis+cluster://:pw@h:1")[1:] == (None, "pw", False)


@pytest.mark.parametrize(
    "url",
    [
        "redis://h:7000",  # not a cluster scheme
        "redis+cluster://",  # no node
        "redis+cluster://h:0",
        "redis+cluster://h:port",
        "redis+cluster://h:7000/1",  # a cluster has database 0 only
        "redis+cluster://h:7000?password=x",  # no options from the URL
    ],
)
def test_url_refused(url: str) -> None:
    with pytest.raises(ConfigError):
        parse_cluster_url(url)


def test_url_error_never_shows_the_password() -> None:
    with pytest.raises(ConfigError) as info:
        parse_cluster_url("redis+cluster://:hunter2@h:99999")
    assert "hunter2" not in str(info.value)


async def test_connect_picks_the_cluster_backend(redis_cluster_url: str, redis_cluster_namespace: str) -> None:
    backend = await rq.connect(redis_cluster_url, namespace=redis_cluster_namespace)
    try:
        assert isinstance(backend, RedisClusterBackend)
        assert await backend.check_eviction_policy() == "noeviction"  # read on every master
    finally:
        await backend.close()


async def test_a_cluster_node_given_as_redis_url_is_refused_with_the_url_to_use(redis_cluster: LocalCluster) -> None:
    port = redis_cluster.ports[0]
    # was: connected, then every call of a queue in another master's slots failed with MovedError (a worker
    # logged "claim failed" for ever)
    with pytest.raises(ConfigError, match=rf"Redis Cluster node.*redis\+cluster://127\.0\.0\.1:{port}"):
        await rq.connect(f"redis://127.0.0.1:{port}/0")


async def test_unreachable_cluster_is_a_backend_error() -> None:
    with pytest.raises(rq.BackendError):
        await RedisClusterBackend.open("redis+cluster://127.0.0.1:1")


# ------------------------------------------------------------ queues over the masters


def _slot_owner(cluster: RedisCluster, key: str) -> str:
    node = cluster.get_node_from_key(key)
    assert node is not None
    return str(node.name)


async def test_many_queues_spread_over_every_master_and_drain(
    redis_cluster_backend: RedisClusterBackend, redis_cluster_namespace: str
) -> None:
    backend, ns = redis_cluster_backend, redis_cluster_namespace
    client = backend.cluster
    names = [f"q{i}" for i in range(30)]
    # every key of a queue hashes to one slot (its tag), and the slots land on every master
    slots = {}
    for q in names:
        queue_keys = [keys.prefix(ns, q), keys.activity(ns, q, "x"), keys.stream(ns, q), keys.wake_of_type(ns, q, "t")]
        found = {int(await client.execute_command("CLUSTER KEYSLOT", k)) for k in queue_keys}
        assert len(found) == 1
        slots[q] = found.pop()
    owners = {q: _slot_owner(client, keys.prefix(ns, q)) for q in names}
    masters = {n.name for n in client.get_primaries()}
    assert len(masters) == 3
    assert set(owners.values()) == masters

    per_queue = 20
    ids: dict[str, list[str]] = {}
    for q in names:
        ex = rq.ActivityExecutor(backend, q)
        ids[q] = await ex.enqueue_many([("job", {"q": q, "i": i}) for i in range(per_queue)])
    # every queue is listed, wherever its slot is
    assert set(names) <= {s.queue for s in await backend.list_queues()}

    ran: dict[str, set[int]] = defaultdict(set)
    engines = []
    for group in (names[0:10], names[10:20], names[20:30]):  # one engine per queue, 30 in all
        for q in group:
            engine = rq.WorkerEngine(backend, **{**FAST, "queue_name": q, "max_workers": 4})

            @engine.activity("job")
            async def job(payload: Any, ctx: rq.ActivityContext) -> str:
                ran[payload["q"]].add(payload["i"])
                return str(payload["q"])

            engines.append(engine)
    for e in engines:
        await e.start()
    try:

        async def all_done() -> bool:
            stats = await asyncio.gather(*(rq.QueueInspector(backend, q).stats() for q in names))
            return all(s.completed == per_queue for s in stats)

        await eventually(all_done, 60, "every queue drained")
    finally:
        for e in engines:
            await e.stop()
    assert {q: sorted(v) for q, v in ran.items()} == {q: list(range(per_queue)) for q in names}
    # lookups by id alone find each activity's queue on its own master (no cross-slot command)
    for q in (names[0], names[15], names[29]):
        res = await backend.get_result(ids[q][3])
        assert res is not None and res.status == "completed"
        snap = await backend.get_activity(ids[q][3])
        assert snap is not None and snap.queue == q


async def test_migrate_upgrades_the_queues_of_every_master(redis_cluster_backend: RedisClusterBackend) -> None:
    b = redis_cluster_backend
    queues = [f"up-{i}" for i in range(6)]  # spread over the masters by their slots
    held = {q: (await b.enqueue(q, [new("t")]))[0].activity_id for q in queues}
    for q, i in held.items():
        await to_earlier_layout(b.client, keys.activity(b._ns, q, i))
    await b.migrate()
    for q, i in held.items():
        (got,) = await b.claim(q, "w", 1, None, 30_000)
        assert got.id == i
        assert await b.ack(q, [Ack(i, got.claim_token, AckOutcome.COMPLETED, b"1")]) == []


async def test_result_wait_hears_queues_on_every_master(redis_cluster_backend: RedisClusterBackend) -> None:
    backend = redis_cluster_backend
    client = backend.cluster
    # one queue per master: the pub/sub notification of each must reach the one subscriber
    by_master: dict[str, str] = {}
    i = 0
    while len(by_master) < 3:
        q = f"w{i}"
        by_master.setdefault(_slot_owner(client, keys.prefix(backend._ns, q)), q)
        i += 1
    for q in by_master.values():
        ex = rq.ActivityExecutor(backend, q)
        fut = await ex.activity("job").payload(q).execute()
        waiting = asyncio.ensure_future(backend.wait_for_result(fut.activity_id, 30))
        [claimed] = await backend.claim(q, "w", 1, None, 10_000)
        await asyncio.sleep(0.05)
        started = time.monotonic()
        await backend.ack(q, [Ack(claimed.id, claimed.claim_token, AckOutcome.COMPLETED, b'"ok"')])
        res = await waiting
        assert res is not None and res.status == "completed"
        assert time.monotonic() - started < 4.0  # woken by the notification, not by the 5 s safety net


async def test_scripts_reloaded_on_a_master_that_lost_them(
    redis_cluster_backend: RedisClusterBackend, redis_cluster: LocalCluster
) -> None:
    backend = redis_cluster_backend
    ex = rq.ActivityExecutor(backend, "flushed")
    await ex.activity("job").execute()
    await backend.cluster.script_flush()  # on every master (as a promoted replica may have none)
    fut = await ex.activity("job").execute()  # enqueue pipeline: NOSCRIPT -> reloaded on every master
    await backend.cluster.script_flush()
    claimed = await backend.claim("flushed", "w", 5, None, 5000)  # a lone script call: reloaded too
    assert fut.activity_id in [a.id for a in claimed]


# ---------------------------------------------------------------------- failover


async def _drain_through(
    backend: RedisClusterBackend,
    cluster: LocalCluster,
    queue: str,
    fail: Any,
    caplog: pytest.LogCaptureFixture,
) -> tuple[list[str], dict[str, list[tuple[float, float]]]]:
    """Enqueue, drain with two engines, call ``fail(master port)`` mid-drain, and wait for the drain to end."""
    n = 400
    spans: dict[str, list[tuple[float, float]]] = defaultdict(list)
    ex = rq.ActivityExecutor(backend, queue)
    ids = await ex.enqueue_many([("job", i) for i in range(n)])
    engines = []
    for _ in range(2):
        engine = rq.WorkerEngine(
            backend, **{**FAST, "queue_name": queue, "max_workers": 8, "lease_timeout": 3.0, "shutdown_grace": 5.0}
        )

        @engine.activity("job")
        async def job(payload: Any, ctx: rq.ActivityContext) -> int:
            start = time.monotonic()
            await asyncio.sleep(0.01)
            spans[ctx.activity_id].append((start, time.monotonic()))
            return int(payload)

        engines.append(engine)
    slot_master = cluster.master_of_slot(backend.cluster.keyslot(keys.prefix(backend._ns, queue)))
    # the enqueue reached the replica (replication is asynchronous: an enqueue acknowledged in the last
    # moment before a crash may not have; that loss is the one the README describes, not tested here)
    await asyncio.get_running_loop().run_in_executor(None, cluster.wait_synced, slot_master)
    insp = rq.QueueInspector(backend, queue)
    caplog.set_level(logging.WARNING)
    for e in engines:
        await e.start()
    try:

        async def some_done() -> bool:
            return (await insp.stats()).completed >= n // 4

        await eventually(some_done, 60, "a quarter drained")
        await asyncio.get_running_loop().run_in_executor(None, fail, slot_master)

        async def drained() -> bool:
            try:
                s = await insp.stats()
            except rq.BackendError:
                return False
            return s.pending + s.processing + s.retrying + s.scheduled == 0 and s.completed > 0

        await eventually(drained, 90, "the drain to end after the failover")
    finally:
        for e in engines:
            await e.stop()
    assert cluster.master_of_slot(backend.cluster.keyslot(keys.prefix(backend._ns, queue))) != slot_master
    return ids, spans


def _no_overlap(spans: dict[str, list[tuple[float, float]]]) -> None:
    """No activity ran twice at the same time (re-runs after a lost ack/lease are allowed: at-least-once)."""
    for aid, runs in spans.items():
        runs = sorted(runs)
        for (_, end), (start, _) in itertools.pairwise(runs):
            assert start >= end, f"activity {aid} ran twice at once: {runs}"


@pytest.mark.slow
@pytest.mark.timeout(240, method="thread")
async def test_manual_failover_during_a_drain_loses_nothing(
    redis_cluster_url: str, redis_cluster_namespace: str, redis_cluster: LocalCluster,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``CLUSTER FAILOVER`` on the replica: the master hands over every write first, so nothing is lost."""
    backend = await RedisClusterBackend.open(redis_cluster_url, namespace=redis_cluster_namespace)

    def fail(master: int) -> None:
        replica = redis_cluster.replica_of(master)
        assert redis_cluster.cli(replica, "CLUSTER", "FAILOVER").strip() == "OK"
        deadline = time.monotonic() + 30
        while redis_cluster.role(replica) != "master":
            assert time.monotonic() < deadline, "the replica was not promoted"
            time.sleep(0.05)

    try:
        ids, spans = await _drain_through(backend, redis_cluster, "manual", fail, caplog)
        results = [await backend.get_result(i) for i in ids]
        assert all(r is not None and r.status == "completed" for r in results)  # every activity completed
        assert set(spans) == set(ids)
        _no_overlap(spans)
    finally:
        await backend.close()


@pytest.mark.slow
@pytest.mark.timeout(240, method="thread")
async def test_master_killed_during_a_drain_workers_carry_on(
    redis_cluster_url: str, redis_cluster_namespace: str, redis_cluster: LocalCluster,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """SIGKILL of the queue's master: its replica is promoted, the workers reconnect and finish the drain.

    Replication is asynchronous: writes the master acknowledged in the last
    moment before the kill may never have reached the replica. The test waits
    for the enqueue to reach the replica, so what can be lost is state changes
    of the drain (a claim or an ack): an activity may run again
    (at-least-once) but none is lost. None runs twice at the same time: a
    lost claim makes the activity claimable again on the new master, but the
    handlers (10 ms) end long before a replica takes over (a node timeout,
    1 s); a handler outlasting the failover could overlap (README, "Redis Cluster").
    """
    backend = await RedisClusterBackend.open(redis_cluster_url, namespace=redis_cluster_namespace)
    killed: list[int] = []

    def fail(master: int) -> None:
        replica = redis_cluster.replica_of(master)
        redis_cluster.procs[master].send_signal(signal.SIGKILL)
        redis_cluster.procs[master].wait(timeout=10)
        killed.append(master)
        deadline = time.monotonic() + 30
        while redis_cluster.role(replica) != "master":
            assert time.monotonic() < deadline, "the replica was not promoted"
            time.sleep(0.05)

    try:
        ids, spans = await _drain_through(backend, redis_cluster, "killed", fail, caplog)
        results = [await backend.get_result(i) for i in ids]
        assert all(r is not None and r.status == "completed" for r in results)
        assert set(spans) == set(ids)
        _no_overlap(spans)
        logged = " ".join(r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)
        assert logged  # the outage was reported
    finally:
        await backend.close()
        for port in killed:  # back as a replica of its old shard, so the next tests see six nodes
            redis_cluster.start_node(port)
        redis_cluster.wait_ok()
