"""Conformance: lost leases and the activities that shared a dying worker (issue 11, items 11 and 12).

Mixed into every backend's conformance class beside :class:`tests.conformance.BackendConformance`.

* Item 11: a heartbeat that races an ack is no lost lease; a real loss is
  logged once, stops the heartbeat of that claim, and the handler learns it
  (an ``async def`` one is cancelled, a plain ``def`` one sees
  ``ctx.lease_lost``); whatever it still acknowledges is rejected.
* Item 12: an expired lease counts an attempt only against an activity claimed
  alone (a *suspect*); the activities that merely shared a claim with it are
  put back uncounted and each then runs alone.

A worker "dies" here by stopping its heartbeat without acknowledging: a claim
made straight on the backend and never renewed, or an engine whose lease
renewals fail (a partition between it and the store).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

import pytest

import runnerq_fast as rq
from runnerq_fast.models import LEASE_EXPIRED_UNCHARGED, Ack, AckOutcome, LeaseRef
from runnerq_fast.storage import Backend
from tests.conformance import FAST, eventually, new, wait_status

LOST = "leases were lost"


async def _until(check: Any, timeout: float, what: str) -> None:
    async def probe() -> bool:
        return bool(check())

    await eventually(probe, timeout, what)


class LeaseConformance:
    """Lease loss and suspect activities, on every backend. Subclasses provide ``backend``."""

    queue = "conf"

    def lease_engine(self, backend: Backend, **kw: Any) -> rq.WorkerEngine:
        return rq.WorkerEngine(backend, **{**FAST, "queue_name": self.queue, **kw})

    # ------------------------------------------------------------ item 11
    async def test_a_heartbeat_racing_an_ack_reports_no_lost_lease(
        self, backend: Backend, caplog: pytest.LogCaptureFixture
    ) -> None:
        engine = self.lease_engine(backend, heartbeat_interval=0.01)
        real_ack = backend.ack
        slow_replies = 0

        async def ack_with_a_slow_reply(queue: str, acks: Any) -> list[str]:
            # the ack lands at once; its reply takes a while: heartbeats meanwhile still hold the claims
            nonlocal slow_replies
            rejected = await real_ack(queue, acks)
            slow_replies += 1
            await asyncio.sleep(0.1)
            return rejected

        @engine.activity("t")
        async def t(payload: Any, ctx: rq.ActivityContext) -> int:
            return int(payload)

        futs = [await engine.executor.activity("t").payload(i).execute() for i in range(5)]
        backend.ack = ack_with_a_slow_reply  # type: ignore[method-assign]
        try:
            with caplog.at_level(logging.WARNING, logger="runnerq_fast.engine"):
                async with engine:
                    assert [await f.result(timeout=5) for f in futs] == list(range(5))
                    await _until(lambda: engine.in_flight == 0, 5.0, "the acks to settle")
        finally:
            del backend.ack
        assert slow_replies >= 1
        assert LOST not in caplog.text
        assert engine.stats["rejected"] == 0 and engine.stats["lease_lost"] == 0

    @pytest.mark.parametrize("plain", [False, True], ids=["async", "plain-def"])
    async def test_a_lost_lease_is_logged_once_and_its_handler_learns_it(
        self, backend: Backend, caplog: pytest.LogCaptureFixture, plain: bool
    ) -> None:
        # worker A runs the activity and is cut off from the store (its lease renewals fail) until the
        # lease expires and worker B has run the activity; then A's heartbeat reaches the store again
        a = self.lease_engine(backend, lease_timeout=0.3, heartbeat_interval=0.05, worker_id="A")
        b = self.lease_engine(backend, worker_id="B")
        real_extend = backend.extend_leases
        cut = False
        learned: list[str] = []
        started = threading.Event()

        async def extend_unless_cut(queue: str, refs: Any, lease_ms: int) -> Any:
            if cut:
                raise rq.BackendError("cut off from the store")
            return await real_extend(queue, refs, lease_ms)

        if plain:
            @a.activity("t")
            def held_plain(payload: Any, ctx: rq.ActivityContext) -> str:
                started.set()
                deadline = time.monotonic() + 10
                while not ctx.lease_lost and time.monotonic() < deadline:
                    time.sleep(0.01)
                learned.append("flag" if ctx.lease_lost else "never told")
                return "late"
        else:
            @a.activity("t")
            async def held(payload: Any, ctx: rq.ActivityContext) -> str:
                started.set()
                try:
                    await asyncio.sleep(10)
                except asyncio.CancelledError:
                    learned.append("cancelled" if ctx.lease_lost else "cancelled without the flag")
                    raise
                learned.append("never told")
                return "late"

        @b.activity("t")
        async def other(payload: Any, ctx: rq.ActivityContext) -> str:
            return "from B"

        fut = await a.executor.activity("t").execute()
        backend.extend_leases = extend_unless_cut  # type: ignore[method-assign,assignment]
        try:
            with caplog.at_level(logging.WARNING, logger="runnerq_fast.engine"):
                async with a:
                    await _until(started.is_set, 5.0, "A's handler to start")
                    cut = True
                    async with b:
                        assert await fut.result(timeout=5) == "from B"
                    cut = False
                    await _until(lambda: learned, 5.0, "A's handler to learn its lease was lost")
                    await _until(lambda: a.in_flight == 0, 5.0, "A to let the lost claim go")
                    await asyncio.sleep(0.3)  # six more heartbeats: the loss is not logged again
        finally:
            del backend.extend_leases
        assert learned == (["flag"] if plain else ["cancelled"])
        lost_lines = [r for r in caplog.records if LOST in r.getMessage()]
        assert len(lost_lines) == 1 and fut.activity_id in lost_lines[0].getMessage()
        # a plain def returned: its late ack was sent and rejected; a cancelled async one acks nothing
        assert a.stats["rejected"] == (1 if plain else 0) and a.stats["lease_lost"] == 1
        assert a.stats["completed"] == (1 if plain else 0)
        result = await backend.get_result(fut.activity_id)
        assert result is not None and result.status == "completed"
        assert rq.codec.decode_json(result.data or b"") == "from B"

    # ------------------------------------------------------------ item 12
    async def test_a_dying_worker_charges_no_attempt_to_its_batch_mates(self, backend: Backend) -> None:
        q = self.queue
        # worker "dead" claims six activities in one batch and dies (never renews, never acks)
        ids = [r.activity_id for r in await backend.enqueue(q, [new("t", max_retries=0) for _ in range(6)])]
        assert len(await backend.claim(q, "dead", 6, None, 100)) == 6
        engine = self.lease_engine(backend, max_workers=4, worker_id="alive")
        running = peak = 0

        @engine.activity("t")
        async def t(payload: Any, ctx: rq.ActivityContext) -> int:
            nonlocal running, peak
            running += 1
            peak = max(peak, running)
            await asyncio.sleep(0.02)
            running -= 1
            return ctx.retry_count

        async with engine:
            for aid in ids:
                await wait_status(backend, aid, "completed", timeout=10)
        for aid in ids:
            snap = await backend.get_activity(aid)
            assert snap is not None and snap.retry_count == 0, snap
            kinds = [(e.event_type, e.detail) for e in await backend.get_events(aid)]
            assert ("requeued", LEASE_EXPIRED_UNCHARGED) in kinds, kinds
        assert peak == 1, "each suspect runs alone"
        assert await backend.suspects_ready(q, None) == 0

    async def test_a_suspect_is_claimed_alone_charged_alone_and_cleared_by_its_ack(self, backend: Backend) -> None:
        q = self.queue
        (x,) = await backend.enqueue(q, [new("t", max_retries=1)])
        await asyncio.sleep(0.003)
        (y,) = await backend.enqueue(q, [new("t", max_retries=1)])
        (z,) = await backend.enqueue(q, [new("u")])
        assert len(await backend.claim(q, "w", 3, None, 30)) == 3
        await asyncio.sleep(0.08)
        report = await backend.requeue_expired(q, 100)
        assert sorted(report.requeued) == sorted([x.activity_id, y.activity_id, z.activity_id])
        # suspects: only a separate single claim takes them, never an ordinary one
        assert await backend.claim(q, "w", 10, None, 5000) == []
        assert await backend.suspects_ready(q, None) == 3
        assert await backend.suspects_ready(q, ["t"]) == 2
        assert await backend.suspects_ready(q, ["v"]) == 0
        assert await backend.claim_suspect(q, "w", ["v"], 5000) == []
        # x expires again while claimed alone: counted, then dead-lettered once the retries are spent, its
        # retry_count left at max_retries (1 retry taken, 2 attempts) as a handler's last failure leaves it:
        # it read 2 (3 "tries" of 2 in the console) on every backend (issue 27 item 7b)
        for retries, status in ((1, "pending"), (1, "dead_letter")):
            (alone,) = await backend.claim_suspect(q, "w", ["t"], 30)
            assert alone.id == x.activity_id
            await asyncio.sleep(0.08)
            report = await backend.requeue_expired(q, 100)
            snap = await backend.get_activity(x.activity_id)
            assert snap is not None and (snap.retry_count, snap.status) == (retries, status)
        assert report.dead_lettered == [x.activity_id]
        (dead,) = [d.activity for d in await backend.list_dead_letter(q) if d.activity.id == x.activity_id]
        assert dead.retry_count == dead.max_retries == 1
        # y fails its attempt normally: the mark goes, an ordinary claim takes it again
        (alone,) = await backend.claim_suspect(q, "w", ["t"], 5000)
        assert alone.id == y.activity_id and alone.retry_count == 0
        retry = Ack(alone.id, alone.claim_token, AckOutcome.RETRY, None, "boom", int(time.time() * 1000) - 1)
        assert await backend.ack(q, [retry]) == []
        (again,) = await backend.claim(q, "w", 10, ["t"], 30)
        assert again.id == y.activity_id and again.retry_count == 1
        # claimed the ordinary way again, its next expiry is again not counted
        await asyncio.sleep(0.08)
        await backend.requeue_expired(q, 100)
        snap = await backend.get_activity(y.activity_id)
        assert snap is not None and snap.status == "pending" and snap.retry_count == 1
        # a release (shutdown) keeps the mark
        (zc,) = await backend.claim_suspect(q, "w", ["u"], 5000)
        assert await backend.release(q, [LeaseRef(zc.id, zc.claim_token)]) == [z.activity_id]
        assert await backend.claim(q, "w", 10, ["u"], 5000) == []
        assert await backend.suspects_ready(q, ["u"]) == 1

    async def test_an_engine_stops_draining_once_another_took_the_suspects(self, backend: Backend) -> None:
        q = self.queue
        # A runs a long activity when suspects appear: it stops claiming to run them alone; idle B
        # takes them first, and A goes back to claiming without waiting for its long activity
        a = self.lease_engine(backend, worker_id="A", max_workers=2)
        b = self.lease_engine(backend, worker_id="B", activity_types=["t"])
        long_done = asyncio.Event()
        order: list[str] = []

        @a.activity("long")
        async def long(payload: Any, ctx: rq.ActivityContext) -> None:
            await asyncio.sleep(2.0)
            order.append("long")
            long_done.set()

        @a.activity("t")
        async def t_a(payload: Any, ctx: rq.ActivityContext) -> None:
            order.append(f"A:{payload}")

        @a.activity("u")
        async def u_a(payload: Any, ctx: rq.ActivityContext) -> None:
            order.append(f"A:{payload}")  # only A runs this type

        @b.activity("t")
        async def t_b(payload: Any, ctx: rq.ActivityContext) -> None:
            order.append(f"B:{payload}")

        await backend.enqueue(q, [new("t", b'"s1"'), new("t", b'"s2"')])
        assert len(await backend.claim(q, "dead", 2, ["t"], 600)) == 2  # a worker that dies with them
        await a.executor.activity("long").execute()
        async with a:
            await _until(lambda: a.in_flight == 1, 5.0, "A to start the long activity")
            await eventually(lambda: self._suspects(backend), 5.0, "the reaper to mark them suspect")
            await asyncio.sleep(0.15)  # A's reaper pass sees them: A drains
            async with b:
                await _until(lambda: {"B:s1", "B:s2"} <= set(order), 5.0, "B to run the suspects")
                fut = await a.executor.activity("u").payload("fresh").execute()
                await fut.result(timeout=5)
            assert not long_done.is_set(), "A claimed again while its long activity still ran"
            await long_done.wait()
        assert order.index("A:fresh") < order.index("long")

    async def _suspects(self, backend: Backend) -> bool:
        return await backend.suspects_ready(self.queue, None) == 2
