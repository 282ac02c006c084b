"""Conformance suite for the worker registry and the unhandled activity types.

Every backend's conformance class inherits :class:`RegistryConformance` next
to :class:`tests.conformance.BackendConformance`, with the same ``backend``
fixture (a fresh, empty store per test).
"""

from __future__ import annotations

import asyncio
import os
import socket
from typing import Any

import pytest

import runnerq_fast as rq
from runnerq_fast.models import Ack, AckOutcome, ReadyWork, WorkerInfo
from runnerq_fast.observability.workers import UnhandledType, find_unhandled_types
from runnerq_fast.storage import Backend
from tests.conformance import FAST, eventually, new, now_ms

Q = "reg"
"""The queue these tests use (a class attribute would clash with the other suites' ``queue``)."""


def worker(worker_id: str, queue: str = Q, types: tuple[str, ...] = ("a",), **kw: Any) -> WorkerInfo:
    fields: dict[str, Any] = {
        "host": "h1", "pid": 4242, "in_flight": 0, "concurrency": 8, "started_at_ms": now_ms() - 1000,
        "last_seen_ms": now_ms(), **kw,
    }
    return WorkerInfo(worker_id=worker_id, queue=queue, activity_types=types, **fields)


class RegistryConformance:
    """Register, heartbeat, expiry, deregister, listing; ready work by type; unhandled types."""

    async def test_register_lists_entries_by_queue_and_a_heartbeat_replaces_the_entry(self, backend: Backend) -> None:
        b1, a1 = worker("w-b"), worker("w-a", types=("a", "b"), in_flight=3)
        other = worker("w-c", queue="reg-other", types=("*",))
        for w in (b1, a1, other):
            await backend.register_worker(w, 30_000)
        assert await backend.list_workers(Q) == [a1, b1]  # every field round-trips, ordered by id
        assert await backend.list_workers("reg-other") == [other]
        everyone = await backend.list_workers()
        assert [(w.queue, w.worker_id) for w in everyone if w.queue.startswith("reg")] == [
            ("reg", "w-a"), ("reg", "w-b"), ("reg-other", "w-c")]
        beat = worker("w-a", types=("a", "b"), in_flight=7, last_seen_ms=a1.last_seen_ms + 5000)
        await backend.register_worker(beat, 30_000)
        assert await backend.list_workers(Q) == [beat, b1]
        assert await backend.list_workers("reg-nobody") == []

    async def test_an_entry_that_stops_heartbeating_expires_and_a_heartbeat_keeps_it(self, backend: Backend) -> None:
        await backend.register_worker(worker("w-dies"), 400)
        await backend.register_worker(worker("w-lives"), 400)
        assert [w.worker_id for w in await backend.list_workers(Q)] == ["w-dies", "w-lives"]
        for _ in range(3):
            await asyncio.sleep(0.2)
            await backend.register_worker(worker("w-lives"), 400)
        assert [w.worker_id for w in await backend.list_workers(Q)] == ["w-lives"]
        assert [w.worker_id for w in await backend.list_workers() if w.queue == Q] == ["w-lives"]

    async def test_deregister_removes_at_once_and_ignores_unknown_entries(self, backend: Backend) -> None:
        await backend.register_worker(worker("w-1"), 30_000)
        await backend.register_worker(worker("w-2"), 30_000)
        await backend.register_worker(worker("w-1", queue="reg-2"), 30_000)
        await backend.deregister_worker(Q, "w-1")
        await backend.deregister_worker(Q, "w-unknown")
        await backend.deregister_worker("reg-unknown", "w-2")
        assert [w.worker_id for w in await backend.list_workers(Q)] == ["w-2"]
        assert [w.worker_id for w in await backend.list_workers("reg-2")] == ["w-1"]  # same id, other queue

    @pytest.mark.parametrize("ttl", [0, -5, 1.5, True])
    async def test_a_bad_ttl_is_refused_and_keeps_the_stored_entry(self, backend: Backend, ttl: Any) -> None:
        kept = worker("w-1", in_flight=1)
        await backend.register_worker(kept, 30_000)
        with pytest.raises(ValueError, match="ttl_ms"):
            await backend.register_worker(worker("w-1", in_flight=2), ttl)
        assert await backend.list_workers(Q) == [kept]

    async def _ready_mix(self, backend: Backend) -> int:
        """3 a, 2 b ready; 1 f scheduled and now due; c not due; d processing; e completed. Returns a's ready time."""
        first = await backend.enqueue(Q, [new("a") for _ in range(3)])
        await backend.enqueue(Q, [new("b"), new("b"), new("c", run_at_ms=now_ms() + 3_600_000),
                                           new("d"), new("e"), new("f", run_at_ms=now_ms() + 150)])
        for t in ("d", "e"):
            (c,) = await backend.claim(Q, "w", 1, [t], 30_000)
            if t == "e":
                await backend.ack(Q, [Ack(c.id, c.claim_token, AckOutcome.COMPLETED, b"1", None)])
        await asyncio.sleep(0.3)  # f is due now (but not promoted: nothing claimed since)
        snap = await backend.get_activity(first[0].activity_id)
        assert snap is not None
        return snap.ready_at_ms

    async def test_ready_work_counts_what_a_worker_could_claim_now_by_type(self, backend: Backend) -> None:
        assert await backend.ready_work(Q) == ReadyWork({}, None)
        oldest = await self._ready_mix(backend)
        ready = await backend.ready_work(Q)
        assert ready.by_type == {"a": 3, "b": 2, "f": 1}
        assert ready.oldest_ready_ms == oldest
        assert (await backend.ready_work("reg-empty")).by_type == {}

    async def test_unhandled_types_are_ready_types_no_live_worker_claims(self, backend: Backend) -> None:
        await self._ready_mix(backend)
        assert await find_unhandled_types(backend, Q) == [
            UnhandledType("a", 3), UnhandledType("b", 2), UnhandledType("f", 1)]
        await backend.register_worker(worker("w-a", types=("a",)), 30_000)
        await backend.register_worker(worker("w-other", queue="reg-2", types=("b",)), 30_000)  # another queue
        assert await find_unhandled_types(backend, Q) == [UnhandledType("b", 2), UnhandledType("f", 1)]
        await backend.register_worker(worker("w-any", types=("*",)), 300)
        assert await find_unhandled_types(backend, Q) == []
        await asyncio.sleep(0.5)  # the "*" worker stopped heartbeating: its entry expired
        assert await find_unhandled_types(backend, Q) == [UnhandledType("b", 2), UnhandledType("f", 1)]
        await backend.deregister_worker(Q, "w-a")
        assert [u.activity_type for u in await find_unhandled_types(backend, Q)] == ["a", "b", "f"]

    async def test_an_engine_registers_at_start_heartbeats_and_leaves_at_stop(self, backend: Backend) -> None:
        engine = rq.WorkerEngine(backend, **{**FAST, "queue_name": Q, "heartbeat_interval": 0.1,
                                             "max_workers": 4})
        gate = asyncio.Event()

        @engine.activity("slow")
        async def slow(payload: Any, ctx: rq.ActivityContext) -> None:
            await gate.wait()

        @engine.activity("other")
        async def other(payload: Any, ctx: rq.ActivityContext) -> None:
            return None

        fut = await engine.executor.activity("slow").execute()
        async with engine:
            (me,) = await backend.list_workers(Q)
            assert (me.worker_id, me.host, me.pid) == (engine.worker_id, socket.gethostname(), os.getpid())
            assert sorted(me.activity_types) == ["other", "slow"] and me.concurrency == 4
            assert me.started_at_ms <= me.last_seen_ms <= now_ms()

            async def busy() -> bool:
                ws = await backend.list_workers(Q)
                return len(ws) == 1 and ws[0].in_flight == 1 and ws[0].last_seen_ms > me.last_seen_ms

            await eventually(busy, what="a heartbeat reporting the activity in flight")
            gate.set()
            await fut.result(timeout=5)
        assert await backend.list_workers(Q) == []  # a clean stop leaves at once, no TTL wait

    async def test_the_inspector_shows_the_queues_workers_ready_work_and_unhandled_types(
        self, backend: Backend
    ) -> None:
        await self._ready_mix(backend)
        mine, theirs = worker("w-b", types=("b",)), worker("w-x", queue="reg-2")
        await backend.register_worker(mine, 30_000)
        await backend.register_worker(theirs, 30_000)
        insp = rq.QueueInspector(backend, Q)
        assert await insp.workers() == [mine]
        assert (await insp.ready_work()).by_type == {"a": 3, "b": 2, "f": 1}
        assert await insp.unhandled_types() == [rq.UnhandledType("a", 3), rq.UnhandledType("f", 1)]

    async def test_type_defaults_round_trip_replace_whole_and_stay_per_queue(self, backend: Backend) -> None:
        from runnerq_fast.models import TypeDefaults

        assert await backend.get_type_defaults(Q) == {}
        a = TypeDefaults(activity_type="a", max_retries=7, timeout_ms=1500, priority=3)
        b = TypeDefaults(activity_type="b", timeout_ms=0)
        await backend.set_type_defaults(Q, [a, b])
        await backend.set_type_defaults("reg-other", [TypeDefaults(activity_type="a", max_retries=1)])
        await backend.set_type_defaults(Q, [])
        assert await backend.get_type_defaults(Q) == {"a": a, "b": b}
        # the last writer wins, whole: a None field clears what the earlier one set; other types are kept
        a2 = TypeDefaults(activity_type="a", priority=1)
        await backend.set_type_defaults(Q, [a2])
        assert await backend.get_type_defaults(Q) == {"a": a2, "b": b}
        assert await backend.get_type_defaults("reg-other") == {"a": TypeDefaults(activity_type="a", max_retries=1)}
        assert await backend.get_type_defaults("reg-nobody") == {}

    async def test_an_engine_publishes_its_types_options_and_another_producer_applies_them(
        self, backend: Backend
    ) -> None:
        engine = rq.WorkerEngine(backend, queue_name=Q, **FAST)

        @engine.activity("opt", max_retries=9, timeout=2.5, priority=rq.Priority.HIGH)
        async def opt(payload: Any, ctx: rq.ActivityContext) -> None:
            return None

        @engine.activity("plain")
        async def plain(payload: Any, ctx: rq.ActivityContext) -> None:
            return None

        async with engine:
            defaults = await backend.get_type_defaults(Q)
            assert defaults["opt"].max_retries == 9 and defaults["opt"].timeout_ms == 2500
            assert defaults["opt"].priority == 3
            assert (defaults["plain"].max_retries, defaults["plain"].timeout_ms, defaults["plain"].priority) == (
                None, None, None)
            # a producer that knows nothing of the handler (another process, the HTTP API, the CLI)
            producer = rq.ActivityExecutor(backend, Q, rq.WorkerConfig(default_max_retries=2, default_timeout=60))
            got = await producer.activity("opt").execute()
            set_here = await producer.activity("opt").max_retries(0).timeout(0).priority(1).execute()
            other = await producer.activity("plain").execute()
            snaps = {f.activity_id: await backend.get_activity(f.activity_id) for f in (got, set_here, other)}
        g, s, o = (snaps[f.activity_id] for f in (got, set_here, other))
        assert g is not None and s is not None and o is not None
        assert (g.max_retries, g.timeout_ms, g.priority) == (9, 2500, 3)
        assert (s.max_retries, s.timeout_ms, s.priority) == (0, 0, 1)  # an enqueue still overrides
        assert (o.max_retries, o.timeout_ms, o.priority) == (2, 60_000, 2)  # the producer's own defaults
