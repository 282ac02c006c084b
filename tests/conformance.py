"""Backend conformance suite: every backend subclasses :class:`BackendConformance`.

A subclass provides an async fixture ``backend`` yielding an opened, empty
backend (a fresh database, file or key prefix per test). Every test here then
runs against it, so all backends are held to the same semantics (SPEC §3).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterable
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import msgspec
import pytest

import runnerq_fast as rq
from runnerq_fast.ids import new_activity_id
from runnerq_fast.models import LEASE_EXPIRED_UNCHARGED, Ack, AckOutcome, LeaseRef, NewActivity
from runnerq_fast.storage import Backend
from tests.typed_payloads import (
    ORDER_ID,
    SAMPLE_JSON,
    Line,
    Reading,
    Refund,
    Tagged,
    Weird,
    sample_order,
    typed_engine,
)

FAST: dict[str, Any] = {
    "lease_timeout": 2.0,
    "reaper_interval": 0.05,
    "poll_interval": 0.05,
    "ack_flush_interval": 0.001,
    "retry_delay": 0.01,
    "max_retry_delay": 0.05,
    "shutdown_grace": 2.0,
}


def now_ms() -> int:
    return int(time.time() * 1000)


def new(activity_type: str = "t", payload: bytes = b"{}", **kw: Any) -> NewActivity:
    return NewActivity(id=new_activity_id(), activity_type=activity_type, payload=payload, **kw)


async def eventually(check: Callable[[], Awaitable[bool]], timeout: float = 5.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


async def wait_status(backend: Backend, activity_id: str, status: str, timeout: float = 5.0) -> None:
    async def check() -> bool:
        snap = await backend.get_activity(activity_id)
        return snap is not None and snap.status == status

    await eventually(check, timeout, f"{activity_id} to be {status}")


def all_started(starts: dict[str, float], ids: Iterable[str]) -> Callable[[], Awaitable[bool]]:
    """A check for :func:`eventually`: every one of ``ids`` has a start time in ``starts``."""
    wanted = list(ids)

    async def check() -> bool:
        return all(i in starts for i in wanted)

    return check


class BackendConformance:
    """The semantics every backend must have. Subclasses provide ``backend``."""

    queue = "conf"

    def engine(self, backend: Backend, **kw: Any) -> rq.WorkerEngine:
        settings = {**FAST, "queue_name": self.queue, **kw}
        return rq.WorkerEngine(backend, **settings)

    # ------------------------------------------------------------------ order
    async def test_dequeue_order_is_priority_then_retries_then_ready_time(self, backend: Backend) -> None:
        q = self.queue
        (retried,) = await backend.enqueue(q, [new("r", priority=2)])
        (c,) = await backend.claim(q, "w", 1, ["r"], 5000)
        assert await backend.ack(q, [Ack(c.id, c.claim_token, AckOutcome.RETRY, None, "x", now_ms() - 1000)]) == []
        ids: dict[str, str] = {}
        for name, prio in [("a", 2), ("b", 3), ("c", 2), ("d", 1), ("e", 4)]:
            await asyncio.sleep(0.003)  # distinct ready times at millisecond resolution
            (res,) = await backend.enqueue(q, [new(name, priority=prio)])
            ids[res.activity_id] = name
        ids[retried.activity_id] = "r"
        got = await backend.claim(q, "w", 10, None, 5000)
        assert [ids[a.id] for a in got] == ["e", "b", "r", "a", "c", "d"]
        assert next(a for a in got if a.id == retried.activity_id).retry_count == 1

    async def test_claim_one_at_a_time_follows_the_same_order(self, backend: Backend) -> None:
        q = self.queue
        order = []
        for prio in [1, 4, 2, 3, 2]:
            await asyncio.sleep(0.003)
            (res,) = await backend.enqueue(q, [new("t", priority=prio)])
            order.append((prio, res.activity_id))
        expected = [aid for _, aid in sorted(order, key=lambda p: -p[0])]
        got = []
        for _ in range(5):
            (a,) = await backend.claim(q, "w", 1, ["t"], 5000)
            got.append(a.id)
        assert got == expected
        assert await backend.claim(q, "w", 1, ["t"], 5000) == []

    async def test_type_filter(self, backend: Backend) -> None:
        q = self.queue
        await backend.enqueue(q, [new("x"), new("y"), new("x"), new("z")])
        got = await backend.claim(q, "w", 10, ["x"], 5000)
        assert sorted(a.activity_type for a in got) == ["x", "x"]
        got = await backend.claim(q, "w", 10, ["y", "z"], 5000)
        assert sorted(a.activity_type for a in got) == ["y", "z"]
        assert await backend.claim(q, "w", 10, None, 5000) == []

    async def test_queues_are_isolated(self, backend: Backend) -> None:
        await backend.enqueue("other", [new("t")])
        assert await backend.claim(self.queue, "w", 10, None, 5000) == []
        assert len(await backend.claim("other", "w", 10, None, 5000)) == 1

    async def test_claim_respects_limit_and_stamps_lease(self, backend: Backend) -> None:
        q = self.queue
        await backend.enqueue(q, [new("t") for _ in range(7)])
        got = await backend.claim(q, "w", 5, None, 5000)
        assert len(got) == 5
        assert len({a.claim_token for a in got}) >= 1
        snap = await backend.get_activity(got[0].id)
        assert snap is not None and snap.status == "processing"
        assert snap.lease_expires_at_ms is not None and snap.lease_expires_at_ms > now_ms() + 3000
        assert len(await backend.claim(q, "w", 5, None, 5000)) == 2

    # ----------------------------------------------------------------- delays
    async def test_delayed_activity_waits_until_due(self, backend: Backend) -> None:
        q = self.queue
        (res,) = await backend.enqueue(q, [new("t", run_at_ms=now_ms() + 300)])
        snap = await backend.get_activity(res.activity_id)
        assert snap is not None and snap.status == "scheduled"
        assert await backend.claim(q, "w", 10, None, 5000) == []
        await asyncio.sleep(0.35)
        got = await backend.claim(q, "w", 10, None, 5000)
        assert [a.id for a in got] == [res.activity_id]

    async def test_engine_runs_delayed_activity_after_its_delay(self, backend: Backend) -> None:
        engine = self.engine(backend)
        started: list[float] = []

        @engine.activity("later")
        async def later(payload: Any, ctx: rq.ActivityContext) -> None:
            started.append(time.time())

        t0 = time.time()
        fut = await engine.executor.activity("later").delay(0.3).execute()
        async with engine:
            await fut.result(timeout=5)
        assert started and started[0] - t0 >= 0.29

    # ----------------------------------------------------------------- wakeups
    # An idle engine polls only every 5 s here: what starts sooner was woken by the backend.
    WAKE_BOUND = 0.25  # seconds; the bench measures the real figure (milliseconds)

    async def _started_by(self, engine: rq.WorkerEngine, activity_type: str, starts: dict[str, float]) -> None:
        @engine.activity(activity_type)
        async def record(payload: Any, ctx: rq.ActivityContext) -> None:
            starts[ctx.activity_id] = time.time()

    async def test_idle_engine_claims_a_delayed_activity_when_due_not_at_its_poll(self, backend: Backend) -> None:
        engine = self.engine(backend, poll_interval=5.0)
        starts: dict[str, float] = {}
        await self._started_by(engine, "later", starts)
        async with engine:
            await asyncio.sleep(0.2)  # idle: the fetcher is waiting
            due: dict[str, float] = {}
            for delay_ms in (600, 300):  # the second comes due first: the wait must be timed again
                at = now_ms() + delay_ms
                (res,) = await backend.enqueue(self.queue, [new("later", run_at_ms=at)])
                due[res.activity_id] = at / 1000.0
            await eventually(all_started(starts, due), 3.0, "both delayed activities to start")
        late = {i: starts[i] - due[i] for i in due}
        assert all(-0.005 <= d < self.WAKE_BOUND for d in late.values()), late

    async def test_idle_engine_claims_a_retry_scheduled_elsewhere_when_due(self, backend: Backend) -> None:
        q = self.queue
        (res,) = await backend.enqueue(q, [new("again")])
        (c,) = await backend.claim(q, "another-worker", 1, ["again"], 5000)
        engine = self.engine(backend, poll_interval=5.0)
        starts: dict[str, float] = {}
        await self._started_by(engine, "again", starts)
        async with engine:
            await asyncio.sleep(0.2)
            due = now_ms() + 300
            assert await backend.ack(q, [Ack(c.id, c.claim_token, AckOutcome.RETRY, None, "x", due)]) == []
            await eventually(all_started(starts, [res.activity_id]), 3.0, "the retry to start")
        assert -0.005 <= starts[res.activity_id] - due / 1000.0 < self.WAKE_BOUND

    async def test_two_type_disjoint_engines_are_each_woken_for_their_own_work(self, backend: Backend) -> None:
        starts: dict[str, float] = {}
        engines = [self.engine(backend, poll_interval=5.0) for _ in range(2)]
        for engine, activity_type in zip(engines, ("a", "b"), strict=True):
            await self._started_by(engine, activity_type, starts)
        async with engines[0], engines[1]:
            await asyncio.sleep(0.2)
            for activity_type in ("a", "b", "b", "a", "a", "b"):
                t0 = time.time()
                (res,) = await backend.enqueue(self.queue, [new(activity_type)])
                await eventually(all_started(starts, [res.activity_id]), 6.0, f"the {activity_type}")
                took = starts[res.activity_id] - t0
                assert took < self.WAKE_BOUND, f"{activity_type} started {took:.3f} s after its enqueue"
                await asyncio.sleep(0.05)  # both fetchers idle again

    # ----------------------------------------------------------- retry, dead letter
    async def test_retry_with_backoff_then_success(self, backend: Backend) -> None:
        engine = self.engine(backend)
        attempts: list[int] = []

        @engine.activity("flaky")
        async def flaky(payload: Any, ctx: rq.ActivityContext) -> dict[str, int]:
            attempts.append(ctx.retry_count)
            if ctx.retry_count < 2:
                raise RuntimeError("transient")
            return {"ok": ctx.retry_count}

        fut = await engine.executor.activity("flaky").max_retries(3).execute()
        async with engine:
            assert await fut.result(timeout=5) == {"ok": 2}
        assert attempts == [0, 1, 2]
        kinds = [e.event_type for e in await backend.get_events(fut.activity_id)]
        assert kinds.count("retrying") == 2 and kinds[-1] == "completed" and kinds[0] == "enqueued"
        snap = await backend.get_activity(fut.activity_id)
        assert snap is not None and snap.retry_count == 2 and snap.status == "completed"
        # the result of a completed activity carries no error, whatever its earlier attempts raised
        res = await backend.get_result(fut.activity_id)
        assert res is not None and res.status == "completed" and res.error is None

    async def test_retries_exhausted_go_to_dead_letter(self, backend: Backend) -> None:
        engine = self.engine(backend)
        attempts: list[int] = []

        @engine.activity("doomed")
        async def doomed(payload: Any, ctx: rq.ActivityContext) -> None:
            attempts.append(ctx.retry_count)
            raise rq.RetryableError("always")

        fut = await engine.executor.activity("doomed").max_retries(2).execute()
        async with engine:
            with pytest.raises(rq.ActivityFailed) as info:
                await fut.result(timeout=5)
        assert info.value.status == "dead_letter" and "always" in (info.value.error or "")
        assert attempts == [0, 1, 2]
        dead = await backend.list_dead_letter(self.queue)
        assert [d.activity.id for d in dead] == [fut.activity_id]
        # retries taken, as after a lease expiry (conformance_leases): 3 attempts = retry_count + 1
        assert dead[0].activity.retry_count == dead[0].activity.max_retries == 2

    async def test_zero_retries_means_one_attempt(self, backend: Backend) -> None:
        engine = self.engine(backend)
        calls = 0

        @engine.activity("once")
        async def once(payload: Any, ctx: rq.ActivityContext) -> None:
            nonlocal calls
            calls += 1
            raise ValueError("boom")

        fut = await engine.executor.activity("once").max_retries(0).execute()
        async with engine:
            with pytest.raises(rq.ActivityFailed, match="dead_letter"):
                await fut.result(timeout=5)
        assert calls == 1

    async def test_non_retryable_fails_at_once(self, backend: Backend) -> None:
        engine = self.engine(backend)
        calls = 0

        @engine.activity("bad")
        def bad(payload: Any, ctx: rq.ActivityContext) -> None:  # a plain def, run in the thread pool
            nonlocal calls
            calls += 1
            raise rq.NonRetryableError("invalid card")

        fut = await engine.executor.activity("bad").max_retries(5).execute()
        async with engine:
            with pytest.raises(rq.ActivityFailed) as info:
                await fut.result(timeout=5)
        assert info.value.status == "failed" and "invalid card" in (info.value.error or "")
        assert calls == 1

    async def test_timeout_counts_as_retryable_failure(self, backend: Backend) -> None:
        engine = self.engine(backend)
        attempts: list[int] = []

        @engine.activity("slow")
        async def slow(payload: Any, ctx: rq.ActivityContext) -> str:
            attempts.append(ctx.retry_count)
            if ctx.retry_count == 0:
                await asyncio.sleep(5)
            return "done"

        fut = await engine.executor.activity("slow").timeout(0.1).max_retries(1).execute()
        async with engine:
            assert await fut.result(timeout=5) == "done"
        assert attempts == [0, 1]
        events = await backend.get_events(fut.activity_id)
        assert any(e.event_type == "retrying" and "TimeoutError" in (e.detail or "") for e in events)

    async def test_unknown_type_with_wildcard_fails_as_handler_not_found(self, backend: Backend) -> None:
        engine = self.engine(backend, activity_types="*")

        @engine.activity("known")
        async def known(payload: Any, ctx: rq.ActivityContext) -> None:
            return None

        fut = await engine.executor.activity("mystery").execute()
        async with engine:
            with pytest.raises(rq.ActivityFailed) as info:
                await fut.result(timeout=5)
        assert info.value.status == "failed" and "handler_not_found" in (info.value.error or "")

    async def test_worker_claims_only_types_it_handles(self, backend: Backend) -> None:
        engine = self.engine(backend)

        @engine.activity("mine")
        async def mine(payload: Any, ctx: rq.ActivityContext) -> None:
            return None

        other = await engine.executor.activity("theirs").execute()
        fut = await engine.executor.activity("mine").execute()
        async with engine:
            await fut.result(timeout=5)
            await asyncio.sleep(0.1)
        snap = await backend.get_activity(other.activity_id)
        assert snap is not None and snap.status == "pending"

    async def test_declared_type_without_handler_is_config_error(self, backend: Backend) -> None:
        engine = self.engine(backend, activity_types=["a", "b"])

        @engine.activity("a")
        async def a(payload: Any, ctx: rq.ActivityContext) -> None:
            return None

        with pytest.raises(rq.ConfigError, match="b"):
            await engine.start()

    # ------------------------------------------------------------------ leases
    async def test_lease_expiry_counts_as_attempt_once_claimed_alone(self, backend: Backend) -> None:
        q = self.queue
        (res,) = await backend.enqueue(q, [new("t", max_retries=1)])
        await backend.claim(q, "w", 1, None, 50)
        await asyncio.sleep(0.1)
        # claimed the ordinary way: not counted (it may have shared a dying worker), now suspect
        report = await backend.requeue_expired(q, 100)
        assert report.requeued == [res.activity_id] and report.dead_lettered == []
        snap = await backend.get_activity(res.activity_id)
        assert snap is not None and snap.status == "pending" and snap.retry_count == 0
        assert snap.last_error == LEASE_EXPIRED_UNCHARGED
        assert await backend.claim(q, "w", 1, None, 50) == []
        for expected_retries in (0, 1):
            (alone,) = await backend.claim_suspect(q, "w", None, 50)
            assert alone.retry_count == expected_retries
            await asyncio.sleep(0.1)
            report = await backend.requeue_expired(q, 100)
        assert report.dead_lettered == [res.activity_id]
        result = await backend.get_result(res.activity_id)
        assert result is not None and result.status == "dead_letter"
        snap = await backend.get_activity(res.activity_id)
        assert snap is not None and snap.retry_count == 1  # 2 attempts, as a handler's last failure leaves it

    async def test_live_lease_is_not_reaped(self, backend: Backend) -> None:
        q = self.queue
        await backend.enqueue(q, [new("t")])
        await backend.claim(q, "w", 1, None, 5000)
        report = await backend.requeue_expired(q, 100)
        assert report.requeued == [] and report.dead_lettered == []

    async def test_late_ack_after_reclaim_is_rejected(self, backend: Backend) -> None:
        q = self.queue
        (res,) = await backend.enqueue(q, [new("t")])
        (first,) = await backend.claim(q, "w1", 1, None, 30)
        await asyncio.sleep(0.06)
        await backend.requeue_expired(q, 100)
        (second,) = await backend.claim_suspect(q, "w2", None, 5000)
        assert second.claim_token != first.claim_token
        late = Ack(first.id, first.claim_token, AckOutcome.COMPLETED, b'"late"')
        assert await backend.ack(q, [late]) == [res.activity_id]
        assert (await backend.extend_leases(q, [LeaseRef(first.id, first.claim_token)], 5000)).lost == [res.activity_id]
        snap = await backend.get_activity(res.activity_id)
        assert snap is not None and snap.status == "processing"
        assert await backend.ack(q, [Ack(second.id, second.claim_token, AckOutcome.COMPLETED, b'"ok"')]) == []
        result = await backend.get_result(res.activity_id)
        assert result is not None and result.status == "completed" and rq.codec.decode_json(result.data or b"") == "ok"

    async def test_same_worker_reclaim_still_rejects_the_old_claim(self, backend: Backend) -> None:
        q = self.queue
        (res,) = await backend.enqueue(q, [new("t")])
        (first,) = await backend.claim(q, "same", 1, None, 30)
        await asyncio.sleep(0.06)
        await backend.requeue_expired(q, 100)
        assert len(await backend.claim_suspect(q, "same", None, 5000)) == 1
        stale = Ack(first.id, first.claim_token, AckOutcome.FAILED, None, "x")
        assert await backend.ack(q, [stale]) == [res.activity_id]

    async def test_heartbeat_keeps_long_job_alive(self, backend: Backend) -> None:
        engine = self.engine(backend, lease_timeout=0.3, heartbeat_interval=0.05)
        runs = 0

        @engine.activity("long")
        async def long(payload: Any, ctx: rq.ActivityContext) -> str:
            nonlocal runs
            runs += 1
            await asyncio.sleep(1.0)
            return "survived"

        fut = await engine.executor.activity("long").execute()
        async with engine:
            assert await fut.result(timeout=5) == "survived"
        assert runs == 1
        snap = await backend.get_activity(fut.activity_id)
        assert snap is not None and snap.retry_count == 0
        kinds = [e.event_type for e in await backend.get_events(fut.activity_id)]
        assert kinds.count("lease_extended") >= 3 and kinds[-1] == "completed"

    async def test_extend_leases_moves_the_deadline(self, backend: Backend) -> None:
        q = self.queue
        await backend.enqueue(q, [new("t")])
        (a,) = await backend.claim(q, "w", 1, None, 100)
        assert await backend.extend_leases(q, [LeaseRef(a.id, a.claim_token)], 10_000) == rq.LeaseReport([], [])
        await asyncio.sleep(0.15)
        report = await backend.requeue_expired(q, 100)
        assert report.requeued == []

    # ------------------------------------------------------------- shutdown
    async def test_graceful_shutdown_puts_in_flight_work_back(self, backend: Backend) -> None:
        engine = self.engine(backend, shutdown_grace=0.1)
        started = asyncio.Event()

        @engine.activity("stuck")
        async def stuck(payload: Any, ctx: rq.ActivityContext) -> None:
            started.set()
            await asyncio.sleep(30)

        fut = await engine.executor.activity("stuck").execute()
        await engine.start()
        await asyncio.wait_for(started.wait(), 5)
        t0 = time.monotonic()
        await engine.stop()
        assert time.monotonic() - t0 < 2.0
        snap = await backend.get_activity(fut.activity_id)
        assert snap is not None and snap.status == "pending" and snap.retry_count == 0
        assert (await backend.get_events(fut.activity_id))[-1].event_type == "requeued"

    async def test_graceful_shutdown_lets_short_work_finish(self, backend: Backend) -> None:
        engine = self.engine(backend, shutdown_grace=5.0)
        started = asyncio.Event()

        @engine.activity("short")
        async def short(payload: Any, ctx: rq.ActivityContext) -> str:
            started.set()
            await asyncio.sleep(0.2)
            return "finished"

        fut = await engine.executor.activity("short").execute()
        await engine.start()
        await asyncio.wait_for(started.wait(), 5)
        await engine.stop()
        result = await backend.get_result(fut.activity_id)
        assert result is not None and result.status == "completed"

    async def test_release_does_not_count_an_attempt(self, backend: Backend) -> None:
        q = self.queue
        (res,) = await backend.enqueue(q, [new("t")])
        (a,) = await backend.claim(q, "w", 1, None, 5000)
        assert await backend.release(q, [LeaseRef(a.id, a.claim_token)]) == [res.activity_id]
        (again,) = await backend.claim(q, "w", 1, None, 5000)
        assert again.id == res.activity_id and again.retry_count == 0

    # ------------------------------------------------------------ idempotency
    async def _race(self, backend: Backend, behaviour: rq.OnDuplicate, key: str) -> list[Any]:
        ex = rq.ActivityExecutor(backend, self.queue)

        async def one(i: int) -> Any:
            try:
                return await ex.activity("pay").payload({"i": i}).idempotency_key(key, behaviour).execute()
            except rq.DuplicateActivityError as exc:
                return exc

        return await asyncio.gather(*(one(i) for i in range(50)))

    @pytest.mark.parametrize(
        ("behaviour", "created"),
        [
            (rq.OnDuplicate.ALLOW_REUSE, 50),
            (rq.OnDuplicate.RETURN_EXISTING, 1),
            (rq.OnDuplicate.ALLOW_REUSE_ON_FAILURE, 1),
            (rq.OnDuplicate.NO_REUSE, 1),
        ],
    )
    async def test_idempotency_under_50_concurrent_enqueues(
        self, backend: Backend, behaviour: rq.OnDuplicate, created: int
    ) -> None:
        outcomes = await self._race(backend, behaviour, "order-42")
        futures = [o for o in outcomes if isinstance(o, rq.ActivityFuture)]
        errors = [o for o in outcomes if isinstance(o, rq.DuplicateActivityError)]
        assert sum(f.created for f in futures) == created
        assert (await backend.stats(self.queue)).total == created
        if behaviour == rq.OnDuplicate.NO_REUSE:
            assert len(errors) == 49 and len({e.existing_id for e in errors}) == 1
        elif created == 1:
            assert len({f.activity_id for f in futures}) == 1 and not errors

    async def test_allow_reuse_on_failure_reuses_after_failure_only(self, backend: Backend) -> None:
        q = self.queue
        ex = rq.ActivityExecutor(backend, q)
        first = await ex.activity("pay").idempotency_key("k", rq.OnDuplicate.ALLOW_REUSE_ON_FAILURE).execute()
        again = await ex.activity("pay").idempotency_key("k", rq.OnDuplicate.ALLOW_REUSE_ON_FAILURE).execute()
        assert again.activity_id == first.activity_id and not again.created
        (a,) = await backend.claim(q, "w", 1, None, 5000)
        await backend.ack(q, [Ack(a.id, a.claim_token, AckOutcome.FAILED, None, "declined")])
        third = await ex.activity("pay").idempotency_key("k", rq.OnDuplicate.ALLOW_REUSE_ON_FAILURE).execute()
        assert third.created and third.activity_id != first.activity_id

    async def test_idempotency_key_is_scoped_by_type(self, backend: Backend) -> None:
        ex = rq.ActivityExecutor(backend, self.queue)
        a = await ex.activity("one").idempotency_key("k", rq.OnDuplicate.NO_REUSE).execute()
        b = await ex.activity("two").idempotency_key("k", rq.OnDuplicate.NO_REUSE).execute()
        assert a.created and b.created and a.activity_id != b.activity_id

    async def test_idempotency_key_expires(self, backend: Backend) -> None:
        ex = rq.ActivityExecutor(backend, self.queue, rq.WorkerConfig(idempotency_ttl=0.05))
        a = await ex.activity("one").idempotency_key("k", rq.OnDuplicate.NO_REUSE).execute()
        await asyncio.sleep(0.1)
        b = await ex.activity("one").idempotency_key("k", rq.OnDuplicate.NO_REUSE).execute()
        assert b.created and b.activity_id != a.activity_id

    # -------------------------------------------------------------- bad input
    @pytest.mark.parametrize(
        "make",
        [
            lambda ex: ex.activity("t").payload({"x": math.nan}),
            lambda ex: ex.activity("t").payload({"x": [math.inf]}),
            lambda ex: ex.activity("t").payload({"x": -math.inf}),
            lambda ex: ex.activity("t").payload({"x": "a\x00b"}),
            lambda ex: ex.activity("t").payload({"k\x00": 1}),
            lambda ex: ex.activity("t").payload({"x": object()}),
            lambda ex: ex.activity("t").payload({"x": "y" * (1024 * 1024 + 1)}),
            lambda ex: ex.activity(""),
            lambda ex: ex.activity("t" * 256),
            lambda ex: ex.activity("t").delay(-1),
            lambda ex: ex.activity("t").delay(math.nan),
            lambda ex: ex.activity("t").priority(9),
            lambda ex: ex.activity("t").max_retries(-1),
            lambda ex: ex.activity("t").timeout(-2),
            lambda ex: ex.activity("t").metadata({"k": 1}),
            lambda ex: ex.activity("t").delay(1e300),
            lambda ex: ex.activity("t").timeout(1e300),
            lambda ex: ex.activity("   "),
            lambda ex: ex.activity("t").idempotency_key("k", "bogus"),
            lambda ex: ex.activity("t").idempotency_key("k\x00"),
            lambda ex: ex.activity("t").payload(_deep(100_000)),
        ],
        ids=[
            "nan", "inf", "-inf", "nul-value", "nul-key", "unencodable", "oversized", "empty-type",
            "long-type", "negative-delay", "nan-delay", "bad-priority", "negative-retries",
            "negative-timeout", "non-str-metadata", "huge-delay", "huge-timeout", "blank-type",
            "bad-on-duplicate", "nul-key", "deep-nesting",
        ],
    )
    async def test_bad_input_is_refused_and_nothing_stored(
        self, backend: Backend, make: Callable[[rq.ActivityExecutor], rq.ActivityBuilder]
    ) -> None:
        ex = rq.ActivityExecutor(backend, self.queue)
        await ex.activity("keep").payload({"ok": 1}).execute()
        with pytest.raises(rq.InvalidActivityError):
            await make(ex).execute()
        assert (await backend.stats(self.queue)).total == 1

    @pytest.mark.parametrize("queue_name", ["", "   ", "q" * 256, "a\x00b", ".", ".."])
    async def test_bad_queue_name_is_refused(self, backend: Backend, queue_name: str) -> None:
        with pytest.raises(rq.InvalidActivityError, match="queue name"):
            rq.ActivityExecutor(backend, queue_name)

    async def test_bad_item_in_batch_stores_nothing(self, backend: Backend) -> None:
        ex = rq.ActivityExecutor(backend, self.queue)
        with pytest.raises(rq.InvalidActivityError):
            await ex.enqueue_many([("t", {"i": 1}), ("t", {"i": math.nan}), ("t", {"i": 3})])
        assert (await backend.stats(self.queue)).total == 0

    async def test_batch_enqueue_returns_ids_in_order(self, backend: Backend) -> None:
        ex = rq.ActivityExecutor(backend, self.queue)
        ids = await ex.enqueue_many([("t", {"i": i}) for i in range(300)])
        assert len(set(ids)) == 300
        snap = await backend.get_activity(ids[123])
        assert snap is not None and rq.codec.decode_json(snap.payload) == {"i": 123}
        assert (await backend.stats(self.queue)).pending == 300

    # ----------------------------------------------------- results, inspection
    async def test_result_future_woken_by_notification(self, backend: Backend) -> None:
        engine = self.engine(backend, poll_interval=5.0)

        @engine.activity("echo")
        async def echo(payload: Any, ctx: rq.ActivityContext) -> Any:
            return {"echo": payload, "meta": ctx.metadata}

        async with engine:
            await asyncio.sleep(0.05)
            t0 = time.monotonic()
            fut = await engine.executor.activity("echo").payload([1, "two"]).metadata({"tenant": "t1"}).execute()
            assert await fut.result(timeout=4) == {"echo": [1, "two"], "meta": {"tenant": "t1"}}
            # woken by notifications, not by the 5 s poll interval
            assert time.monotonic() - t0 < 2.0

    async def test_result_times_out(self, backend: Backend) -> None:
        ex = rq.ActivityExecutor(backend, self.queue)
        fut = await ex.activity("nobody").execute()
        with pytest.raises(TimeoutError):
            await fut.result(timeout=0.1)

    async def test_result_with_zero_timeout_reads_a_stored_result(self, backend: Backend) -> None:
        """``timeout`` bounds a wait; ``timeout=0`` still looks once (the guarded call's cut-off leaves it time)."""
        ex = rq.ActivityExecutor(backend, self.queue)
        fut = await ex.activity("t").execute()
        (claimed,) = await backend.claim(self.queue, "w", 1, None, 5000)
        assert await backend.ack(self.queue, [Ack(claimed.id, claimed.claim_token, AckOutcome.COMPLETED, b"7")]) == []
        assert await fut.result(timeout=0) == 7

    async def test_cancel_pending_activity(self, backend: Backend) -> None:
        ex = rq.ActivityExecutor(backend, self.queue)
        fut = await ex.activity("t").execute()
        assert await ex.cancel(fut.activity_id)
        assert not await ex.cancel(fut.activity_id)
        with pytest.raises(rq.ActivityCancelled):
            await fut.result(timeout=1)
        assert await backend.claim(self.queue, "w", 10, None, 5000) == []

    async def test_inspector_lists_gets_and_pages(self, backend: Backend) -> None:
        engine = self.engine(backend)

        @engine.activity("ok")
        async def ok(payload: Any, ctx: rq.ActivityContext) -> int:
            return int(payload["i"]) * 2

        ids = await engine.executor.enqueue_many([("ok", {"i": i}) for i in range(5)])
        await engine.executor.activity("ok").delay(60).payload({"i": 99}).execute()
        insp = engine.inspector()
        stats = await insp.stats()
        assert (stats.pending, stats.scheduled) == (5, 1)
        async with engine:
            await rq.ActivityFuture(backend, ids[-1]).result(timeout=5)
            await eventually(lambda: _completed(insp, 5), what="5 completed")
        page1 = await insp.list_activities("completed", offset=0, limit=3)
        page2 = await insp.list_activities("completed", offset=3, limit=3)
        assert len(page1) == 3 and len(page2) == 2
        assert {s.id for s in page1 + page2} == set(ids)
        assert await insp.result_value(ids[2]) == 4
        snap = await insp.get(ids[2])
        assert snap is not None and snap.activity_type == "ok" and snap.finished_at_ms is not None
        kinds = [e.event_type for e in await insp.events(ids[2])]
        assert kinds[0] == "enqueued" and "claimed" in kinds and kinds[-1] == "completed"
        assert await insp.get("0" * 32) is None
        with pytest.raises(rq.InvalidActivityError):
            await insp.list_activities("nonsense")

    async def test_live_event_stream(self, backend: Backend) -> None:
        insp = rq.QueueInspector(backend, self.queue)
        ex = rq.ActivityExecutor(backend, self.queue)
        seen: list[rq.ActivityEvent] = []

        async def consume() -> None:
            async for ev in insp.live_events():
                seen.append(ev)
                if len(seen) >= 2:
                    return

        task = asyncio.create_task(consume())
        await asyncio.sleep(0.1)
        fut = await ex.activity("t").execute()
        await ex.cancel(fut.activity_id)
        await asyncio.wait_for(task, 5)
        assert [e.event_type for e in seen] == ["enqueued", "cancelled"]
        # resuming after the first event replays the second
        replay: list[rq.ActivityEvent] = []

        async def resume() -> None:
            async for ev in insp.live_events(after_id=seen[0].id):
                replay.append(ev)
                return

        await asyncio.wait_for(resume(), 5)
        assert replay[0].id == seen[1].id

    async def test_live_event_stream_after_zero_replays_every_stored_event(self, backend: Backend) -> None:
        # Last-Event-ID: 0 (or ?after=0) means "from the start": PostgreSQL read it as an unknown id
        # and started from now, so a client asking for everything got nothing of what was stored.
        insp = rq.QueueInspector(backend, self.queue)
        ex = rq.ActivityExecutor(backend, self.queue)
        fut = await ex.activity("t").execute()
        await ex.cancel(fut.activity_id)
        stored = [e.id for e in await insp.events(fut.activity_id)]
        replay: list[rq.ActivityEvent] = []

        async def read() -> None:
            async for ev in insp.live_events(after_id=0):
                replay.append(ev)
                if len(replay) == 2:
                    return

        await asyncio.wait_for(read(), 5)
        assert [e.id for e in replay] == stored and [e.event_type for e in replay] == ["enqueued", "cancelled"]

    async def test_child_activities_via_context(self, backend: Backend) -> None:
        engine = self.engine(backend)

        @engine.activity("parent")
        async def parent(payload: Any, ctx: rq.ActivityContext) -> str:
            child = await ctx.executor.activity("child").payload({"n": payload["n"] + 1}).execute()
            return child.activity_id

        @engine.activity("child")
        async def child(payload: Any, ctx: rq.ActivityContext) -> int:
            return int(payload["n"])

        fut = await engine.executor.activity("parent").payload({"n": 1}).execute()
        async with engine:
            child_id = await fut.result(timeout=5)
            assert await rq.ActivityFuture(backend, child_id).result(timeout=5) == 2

    async def test_children_inherit_the_parents_metadata(self, backend: Backend) -> None:
        """The README's example: a child enqueued through ``ctx.executor`` sees its parent's metadata."""
        engine = self.engine(backend)
        seen: dict[str, dict[str, str]] = {}

        @engine.activity("parent")
        async def parent(payload: Any, ctx: rq.ActivityContext) -> list[str]:
            ex = ctx.executor
            plain = await ex.activity("child").payload("plain").execute()
            ctx.metadata["step"] = "1"  # added by the handler after the executor was made: passed on too
            own = await ex.activity("child").payload("own").metadata({"tenant": "t2", "k": "v"}).execute()
            alone = await ex.activity("child").payload("alone").metadata({"k": "v"}, inherit=False).execute()
            (batch,) = await ex.enqueue_many([("child", "batch")])
            return [plain.activity_id, own.activity_id, alone.activity_id, batch]

        @engine.activity("child")
        async def child(payload: Any, ctx: rq.ActivityContext) -> None:
            seen[payload] = ctx.metadata
            if payload == "plain":
                await ctx.executor.activity("child").payload("grandchild").execute()

        fut = await engine.executor.activity("parent").metadata({"tenant": "t1"}).execute()
        top = await engine.executor.activity("child").payload("top").execute()  # not a child: no metadata
        async with engine:
            ids = await fut.result(timeout=5)
            await top.result(timeout=5)
            for activity_id in ids:
                await rq.ActivityFuture(backend, activity_id).result(timeout=5)
            await eventually(lambda: asyncio.sleep(0, "grandchild" in seen), 5, "the grandchild")
        assert seen == {
            "plain": {"tenant": "t1"},
            "grandchild": {"tenant": "t1"},
            "own": {"tenant": "t2", "step": "1", "k": "v"},
            "alone": {"k": "v"},
            "batch": {"tenant": "t1", "step": "1"},
            "top": {},
        }

    async def test_many_activities_drain_exactly_once(self, backend: Backend) -> None:
        engine = self.engine(backend, max_workers=16, claim_batch_size=50, ack_batch_size=40)
        seen: dict[int, int] = {}

        @engine.activity("count")
        async def count(payload: Any, ctx: rq.ActivityContext) -> None:
            seen[payload] = seen.get(payload, 0) + 1

        ids = await engine.executor.enqueue_many([("count", i) for i in range(1000)])
        async with engine:
            await rq.ActivityFuture(backend, ids[-1]).result(timeout=20)
            await eventually(lambda: _completed(rq.QueueInspector(backend, self.queue), 1000), 20, "drain")
        assert seen == {i: 1 for i in range(1000)}

    async def test_failing_hook_never_fails_the_activity(self, backend: Backend) -> None:
        calls: list[str] = []

        class Hooks(rq.LifecycleHooks):
            def on_processing(self, activity: Any) -> None:
                calls.append("processing")
                raise RuntimeError("broken metrics")

            async def on_processed(self, activity: Any, duration: float) -> None:
                calls.append(f"processed:{duration >= 0}")
                raise RuntimeError("also broken")

        engine = self.engine(backend, hooks=[Hooks()])

        @engine.activity("ok")
        async def ok(payload: Any, ctx: rq.ActivityContext) -> str:
            return "fine"

        fut = await engine.executor.activity("ok").execute()
        async with engine:
            assert await fut.result(timeout=5) == "fine"
        assert calls == ["processing", "processed:True"]

    # ------------------------------------------------------------------ per-type limits, schedules
    async def test_per_type_limit_holds_and_the_other_types_are_not_starved(self, backend: Backend) -> None:
        engine = self.engine(backend, max_workers=6, limits={"slow": 2})
        running = peak = 0
        finished: dict[str, list[float]] = {"slow": [], "fast": []}

        @engine.activity("slow")
        async def slow(payload: Any, ctx: rq.ActivityContext) -> None:
            nonlocal running, peak
            running += 1
            peak = max(peak, running)
            try:
                await asyncio.sleep(0.02)
            finally:
                running -= 1
            finished["slow"].append(time.monotonic())

        @engine.activity("fast")
        async def fast(payload: Any, ctx: rq.ActivityContext) -> None:
            finished["fast"].append(time.monotonic())

        ex = engine.executor
        await ex.enqueue_many([ex.activity("slow").payload(i).priority(rq.Priority.HIGH) for i in range(12)])
        await ex.enqueue_many([("fast", i) for i in range(12)])

        async def all_done() -> bool:
            return len(finished["slow"]) == 12 and len(finished["fast"]) == 12

        async with engine:
            await eventually(all_done, 10, "every activity to finish")
        assert peak == 2
        assert max(finished["fast"]) < sorted(finished["slow"])[5]

    async def test_two_engines_enqueue_one_activity_per_schedule_tick(self, backend: Backend) -> None:
        engines = []
        for _ in range(2):
            engine = self.engine(backend, activity_types="*")
            engine.periodic(0.1, "tick")
            engines.append(engine)
        for e in engines:
            await e.start()
        await asyncio.sleep(0.05)
        up = time.time()
        await asyncio.sleep(0.6)
        first_down = time.time()
        for e in engines:
            await e.stop()
        rows = await backend.list_activities(self.queue, None, limit=1000)
        keys = [r.idempotency_key for r in rows]
        assert all(k is not None and k.startswith("periodic:tick:") for k in keys)
        ticks = sorted(int(str(k).rpartition(":")[2]) for k in keys)
        assert len(ticks) == len(set(ticks)), "a tick has two activities"
        window = [k * 100 for k in range(math.floor(up * 10) + 1, math.floor((first_down - 0.05) * 10) + 1)]
        assert [t for t in ticks if window[0] <= t <= window[-1]] == window


def _deep(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


async def _completed(insp: rq.QueueInspector, n: int) -> bool:
    return (await insp.stats()).completed >= n


class ErrorTextConformance:
    """Error text from user code reaches every store intact and never jams the engine."""

    queue = "conf-errors"

    async def test_nul_and_unprintable_errors_are_stored_and_the_queue_moves_on(self, backend: Backend) -> None:
        engine = rq.WorkerEngine(backend, **{**FAST, "queue_name": self.queue})

        class Unprintable(Exception):
            def __str__(self) -> str:
                raise RuntimeError("no")

        @engine.activity("bad")
        async def bad(payload: Any, ctx: rq.ActivityContext) -> None:
            if payload == "nul":
                raise rq.NonRetryableError("bad \x00 thing \udcff")
            raise Unprintable()

        @engine.activity("ok")
        async def ok(payload: Any, ctx: rq.ActivityContext) -> str:
            return "fine"

        nul = await engine.executor.activity("bad").payload("nul").execute()
        odd = await engine.executor.activity("bad").payload("odd").max_retries(0).execute()
        fine = await engine.executor.activity("ok").execute()
        async with engine:
            with pytest.raises(rq.ActivityFailed) as info:
                await nul.result(timeout=5)
            assert info.value.error == "NonRetryableError: bad \\x00 thing \\udcff"
            with pytest.raises(rq.ActivityFailed) as info:
                await odd.result(timeout=5)
            assert info.value.error == "Unprintable: <unprintable exception>"
            assert await fine.result(timeout=5) == "fine"

    async def test_retry_after_is_honoured_without_waiting_for_the_poll(self, backend: Backend) -> None:
        engine = rq.WorkerEngine(backend, **{**FAST, "queue_name": self.queue, "poll_interval": 5.0})
        starts: list[float] = []

        @engine.activity("again")
        async def again(payload: Any, ctx: rq.ActivityContext) -> int:
            starts.append(time.monotonic())
            if ctx.retry_count == 0:
                raise rq.RetryableError("soon", retry_after=0.2)
            return ctx.retry_count

        async with engine:
            await asyncio.sleep(0.05)
            fut = await engine.executor.activity("again").execute()
            assert await fut.result(timeout=5) == 1
        assert 0.18 <= starts[1] - starts[0] < 1.0

    # ------------------------------------------------------------ tracebacks (issue 27)
    async def test_a_failed_attempt_stores_its_traceback_from_the_handler_frame_down(self, backend: Backend) -> None:
        engine = rq.WorkerEngine(backend, **{**FAST, "queue_name": self.queue})

        def parse(payload: Any) -> Any:
            return payload["missing"]

        @engine.activity("parse")
        async def handler(payload: Any, ctx: rq.ActivityContext) -> None:
            try:
                parse(payload)
            except KeyError as exc:
                if ctx.retry_count == 0:
                    raise
                raise rq.NonRetryableError("cannot parse") from exc

        @engine.activity("ok")
        async def ok(payload: Any, ctx: rq.ActivityContext) -> str:
            return "fine"

        failing = await engine.executor.activity("parse").payload({}).max_retries(3).execute()
        fine = await engine.executor.activity("ok").execute()
        async with engine:
            with pytest.raises(rq.ActivityFailed) as info:
                await failing.result(timeout=5)
            assert await fine.result(timeout=5) == "fine"
        snap = await backend.get_activity(failing.activity_id)
        assert snap is not None and info.value.traceback == snap.traceback  # the future's exception carries it
        res = await backend.get_result(failing.activity_id)
        assert res is not None and res.traceback == snap.traceback
        res = await backend.get_result(fine.activity_id)
        assert res is not None and res.traceback is None
        assert snap is not None and snap.status == "failed" and snap.traceback is not None
        tb = snap.traceback
        assert tb.startswith("Traceback (most recent call last):\n")
        assert "in parse\n    return payload[\"missing\"]" in tb and "in handler\n" in tb
        assert "KeyError: 'missing'" in tb
        assert "The above exception was the direct cause of the following exception:" in tb
        assert tb.rstrip().endswith("NonRetryableError: cannot parse")
        files = [line for line in tb.splitlines() if line.startswith("  File ")]
        assert len(files) == 3 and all("conformance.py" in f for f in files)  # the engine's frames left out
        done = await backend.get_activity(fine.activity_id)
        assert done is not None and done.traceback is None
        listed = await backend.list_activities(self.queue, "failed")
        assert [s.traceback for s in listed] == [None]  # listings leave it out

    async def test_the_traceback_is_kept_until_another_attempt_raises(self, backend: Backend) -> None:
        q = self.queue
        (res,) = await backend.enqueue(q, [new("t", max_retries=5)])
        aid = res.activity_id
        (c,) = await backend.claim(q, "w", 1, None, 5000)
        first = "Traceback (most recent call last):\n  File \"x.py\", line 1, in f\nKeyError: 'a'\n" + "é" * 5000
        assert await backend.ack(q, [Ack(c.id, c.claim_token, AckOutcome.RETRY, None, "KeyError: 'a'", 0,
                                         first)]) == []
        snap = await backend.get_activity(aid)
        assert snap is not None and snap.status == "retrying" and snap.traceback == first
        (c,) = await backend.claim(q, "w", 1, None, 5000)
        assert await backend.ack(q, [Ack(c.id, c.claim_token, AckOutcome.RETRY, None, "no handler raised")]) == []
        snap = await backend.get_activity(aid)
        assert snap is not None and snap.last_error == "no handler raised" and snap.traceback == first
        (c,) = await backend.claim(q, "w", 1, None, 5000)
        assert await backend.ack(q, [Ack(c.id, c.claim_token, AckOutcome.DEAD_LETTER, None, "E: b", 0, "tb 2")]) == []
        snap = await backend.get_activity(aid)
        assert snap is not None and snap.status == "dead_letter" and snap.traceback == "tb 2"
        outcome = await backend.get_result(aid)
        assert outcome is not None and outcome.error == "E: b" and outcome.traceback == "tb 2"
        (dead,) = await backend.list_dead_letter(q)
        assert dead.activity.traceback is None and dead.error == "E: b"

    async def test_each_failed_attempt_keeps_its_traceback_on_its_event(self, backend: Backend) -> None:
        engine = rq.WorkerEngine(backend, **{**FAST, "queue_name": self.queue})

        @engine.activity("thrice")
        async def thrice(payload: Any, ctx: rq.ActivityContext) -> None:
            raise ValueError(f"attempt {ctx.retry_count}")

        @engine.activity("ok")
        async def ok(payload: Any, ctx: rq.ActivityContext) -> str:
            return "fine"

        fut = await engine.executor.activity("thrice").max_retries(2).execute()
        fine = await engine.executor.activity("ok").execute()
        async with engine:
            with pytest.raises(rq.ActivityFailed):
                await fut.result(timeout=5)
            assert await fine.result(timeout=5) == "fine"
        events = await backend.get_events(fut.activity_id)
        failures = [e for e in events if e.event_type in ("retrying", "failed", "dead_letter")]
        assert [e.event_type for e in failures] == ["retrying", "retrying", "dead_letter"]
        tbs = [e.traceback for e in failures]
        assert all(tb is not None and tb.startswith("Traceback (most recent call last):\n") for tb in tbs)
        assert [tb.rstrip().splitlines()[-1] for tb in tbs if tb is not None] == [
            f"ValueError: attempt {n}" for n in range(3)
        ]
        assert len(set(tbs)) == 3
        assert [e.traceback for e in events if e not in failures] == [None] * (len(events) - 3)
        snap = await backend.get_activity(fut.activity_id)
        assert snap is not None and snap.traceback == tbs[-1]  # the activity keeps the last one, as before
        assert all(e.traceback is None for e in await backend.get_events(fine.activity_id))

    async def test_event_tracebacks_by_outcome_and_their_removal(self, backend: Backend) -> None:
        q = self.queue
        results = await backend.enqueue(q, [new("t", max_retries=5) for _ in range(3)])
        ids = [r.activity_id for r in results]
        claims = await backend.claim(q, "w", 3, None, 5000)
        by_id = {c.id: c for c in claims}
        big = "Traceback (most recent call last):\n" + "é" * 15_000
        # one ack with a retry (traceback), a retry without one and a plain completion: the batch's
        # failure events keep their own tracebacks, the others none
        acks = [
            Ack(ids[0], by_id[ids[0]].claim_token, AckOutcome.RETRY, None, "E: a", 0, big),
            Ack(ids[1], by_id[ids[1]].claim_token, AckOutcome.RETRY, None, "E: b"),
            Ack(ids[2], by_id[ids[2]].claim_token, AckOutcome.COMPLETED, b"1"),
        ]
        assert await backend.ack(q, acks) == []
        ev0 = [e for e in await backend.get_events(ids[0]) if e.event_type == "retrying"]
        ev1 = [e for e in await backend.get_events(ids[1]) if e.event_type == "retrying"]
        assert [e.traceback for e in ev0] == [big] and [e.traceback for e in ev1] == [None]
        assert all(e.traceback is None for e in await backend.get_events(ids[2]))
        # both fail for good in one batch: failed and dead_letter, each with its own
        claims = await backend.claim(q, "w", 2, None, 5000)
        by_id = {c.id: c for c in claims}
        acks = [
            Ack(ids[0], by_id[ids[0]].claim_token, AckOutcome.FAILED, None, "E: c", 0, "tb c"),
            Ack(ids[1], by_id[ids[1]].claim_token, AckOutcome.DEAD_LETTER, None, "E: d", 0, "tb d"),
        ]
        assert await backend.ack(q, acks) == []
        got = {i: [(e.event_type, e.traceback) for e in await backend.get_events(i) if e.traceback] for i in ids}
        assert got == {ids[0]: [("retrying", big), ("failed", "tb c")], ids[1]: [("dead_letter", "tb d")], ids[2]: []}
        # the live stream (here its replay of what is stored) leaves them out
        replayed: list[rq.ActivityEvent] = []

        async def replay() -> None:
            async for ev in backend.event_stream(q, after_id=0):
                replayed.append(ev)
                if {"failed", "dead_letter"} <= {e.event_type for e in replayed}:
                    return

        await asyncio.wait_for(replay(), 10)  # (one ack's failed and dead_letter events, in either order)
        assert all(e.traceback is None for e in replayed)
        # deleting one leaves the other's, which shares the ack's event rows on some stores
        res = await backend.delete_activities(q, rq.ActivityFilter(ids=(ids[0],)))
        assert res.changed == [ids[0]]
        assert await backend.get_events(ids[0]) == []
        assert [e.traceback for e in await backend.get_events(ids[1]) if e.traceback] == ["tb d"]
        await asyncio.sleep(0.01)
        assert await backend.prune(q, ["dead_letter"], 0) == 1
        assert await backend.get_events(ids[1]) == []

    async def test_hooks_get_the_result_and_the_exception(self, backend: Backend) -> None:
        seen: dict[str, Any] = {}

        class Hooks(rq.LifecycleHooks):
            def on_processed(self, activity: rq.ActivityInfo, duration: float) -> None:
                seen["processed"] = activity.result

            def on_released(self, activity: rq.ActivityInfo, delay: float, error: str) -> None:
                seen["released"] = (activity.exception, activity.traceback)

            async def on_dead_letter(self, activity: rq.ActivityInfo, error: str) -> None:
                seen["dead"] = (activity.exception, activity.traceback)

            def on_failed(self, activity: rq.ActivityInfo, error: str) -> None:  # the old signature still works
                seen["failed"] = (activity.exception, error)

        engine = rq.WorkerEngine(backend, **{**FAST, "queue_name": self.queue}, hooks=[Hooks()])
        marker = object()

        @engine.activity("ok")
        async def ok(payload: Any, ctx: rq.ActivityContext) -> dict[str, Any]:
            return {"n": 1, "when": marker is not None}

        @engine.activity("boom")
        def boom(payload: Any, ctx: rq.ActivityContext) -> None:  # a plain def: run in a thread
            raise ValueError(f"boom {ctx.retry_count}")

        @engine.activity("fatal")
        async def fatal(payload: Any, ctx: rq.ActivityContext) -> None:
            raise rq.NonRetryableError("fatal")

        good = await engine.executor.activity("ok").execute()
        bad = await engine.executor.activity("boom").max_retries(1).execute()
        nope = await engine.executor.activity("fatal").execute()
        async with engine:
            assert await good.result(timeout=5) == {"n": 1, "when": True}
            for fut in (bad, nope):
                with pytest.raises(rq.ActivityFailed):
                    await fut.result(timeout=5)
            await _until(lambda: len(seen) == 4, 5.0, "the four hooks")
        assert seen["processed"] == {"n": 1, "when": True}
        exc, tb = seen["released"]
        assert isinstance(exc, ValueError) and str(exc) == "boom 0" and exc.__traceback__ is not None
        assert tb.rstrip().endswith("ValueError: boom 0") and "in boom\n" in tb and "concurrent" not in tb
        exc, tb = seen["dead"]
        assert isinstance(exc, ValueError) and str(exc) == "boom 1"
        snap = await backend.get_activity(bad.activity_id)
        assert snap is not None and snap.traceback == tb
        exc, error = seen["failed"]
        assert isinstance(exc, rq.NonRetryableError) and error == "NonRetryableError: fatal"


class _Fatal(BaseException):
    """Neither an Exception nor a cancellation: what a handler must never use to end its worker."""


async def _until(check: Callable[[], bool], timeout: float, what: str) -> None:
    async def probe() -> bool:
        return check()

    await eventually(probe, timeout, what)


def _limits() -> dict[str, float]:
    from runnerq_fast import config

    return {"delay": config.MAX_DELAY_SECONDS, "timeout": config.MAX_TIMEOUT_SECONDS}


@dataclasses.dataclass
class _Point:
    x: int


class _Pair(msgspec.Struct):
    a: int


class HardeningConformance:
    """Hostile settings, input, handlers and loops (issue 11): refused clearly, never stored half-way, never
    able to strand an activity, the same on every backend."""

    queue = "conf-hard"

    def engine(self, backend: Backend, **kw: Any) -> rq.WorkerEngine:
        return rq.WorkerEngine(backend, **{**FAST, "queue_name": self.queue, **kw})

    # ------------------------------------------------ item 4: settings and values out of range
    @pytest.mark.parametrize(
        ("field", "value"),
        [
            ("retry_delay", math.inf), ("retry_delay", math.nan), ("retry_delay", "1"),
            ("max_retry_delay", math.inf), ("max_retry_delay", 1e13), ("max_retry_delay", 1e30),
            ("lease_timeout", math.inf), ("lease_timeout", 1e30), ("heartbeat_interval", math.nan),
            ("poll_interval", math.inf), ("reaper_interval", 1e30), ("ack_flush_interval", math.nan),
            ("shutdown_grace", math.inf), ("default_timeout", 1e13), ("idempotency_ttl", 1e30),
            ("retry_jitter", math.nan), ("max_workers", 1e30), ("max_workers", True), ("claim_batch_size", 10**9),
            ("default_max_retries", 2**70), ("max_payload_bytes", 2**40), ("sync_workers", -1),
        ],
    )
    async def test_engine_setting_out_of_range_is_refused_when_set(self, backend: Backend, field: str,
                                                                   value: Any) -> None:
        with pytest.raises(rq.ConfigError, match=field):
            self.engine(backend, **{field: value})
        engine = self.engine(backend)
        with pytest.raises(rq.ConfigError, match=field):
            engine.configure(**{field: value})
        with pytest.raises(rq.ConfigError, match=field):
            rq.WorkerConfig(**{field: value})

    async def test_longest_backoff_delay_and_timeout_are_stored(self, backend: Backend) -> None:
        longest = _limits()
        engine = self.engine(backend, retry_delay=longest["delay"], max_retry_delay=longest["delay"])

        @engine.activity("fails")
        async def fails(payload: Any, ctx: rq.ActivityContext) -> None:
            if payload == "after":
                raise rq.RetryableError("later", retry_after=longest["delay"])
            raise RuntimeError("again later")

        backoff = await engine.executor.activity("fails").execute()
        after = await engine.executor.activity("fails").payload("after").execute()
        later = await (engine.executor.activity("fails").delay(longest["delay"]).timeout(longest["timeout"])
                       .max_retries(1_000_000).execute())
        async with engine:
            await wait_status(backend, backoff.activity_id, "retrying")
            await wait_status(backend, after.activity_id, "retrying")
        soon = now_ms() + round((longest["delay"] - 3600) * 1000)
        for fut in (backoff, after):
            snap = await backend.get_activity(fut.activity_id)
            assert snap is not None and snap.status == "retrying" and snap.ready_at_ms > soon
        snap = await backend.get_activity(later.activity_id)
        assert snap is not None and snap.status == "scheduled" and snap.ready_at_ms > soon
        assert snap.timeout_ms == round(longest["timeout"] * 1000) and snap.max_retries == 1_000_000

    # ------------------------------------------------ item 5: a refused lone ack
    async def test_a_refused_lone_ack_is_dropped_and_no_longer_heartbeated(
        self, backend: Backend, caplog: pytest.LogCaptureFixture
    ) -> None:
        engine = self.engine(backend, heartbeat_interval=0.05)
        poison: list[str] = []
        ack_calls: list[int] = []
        beats: list[list[str]] = []
        real_ack, real_extend = backend.ack, backend.extend_leases

        async def refusing_ack(queue: str, acks: Any) -> list[str]:
            ack_calls.append(len(acks))
            if any(a.id in poison for a in acks):
                raise rq.BackendError("the store refuses this ack")
            return await real_ack(queue, acks)

        async def spying_extend(queue: str, refs: Any, lease_ms: int) -> Any:
            beats.append([r.id for r in refs])
            return await real_extend(queue, refs, lease_ms)

        @engine.activity("t")
        async def t(payload: Any, ctx: rq.ActivityContext) -> str:
            return "done"

        fut = await engine.executor.activity("t").execute()
        poison.append(fut.activity_id)
        backend.ack = refusing_ack  # type: ignore[method-assign]
        backend.extend_leases = spying_extend  # type: ignore[method-assign,assignment]
        try:
            with caplog.at_level(logging.ERROR, logger="runnerq_fast.engine"):
                async with engine:
                    await _until(lambda: len(ack_calls) > 0 and engine.in_flight == 0, 5.0,
                                 "the refused ack to be dropped")
                    calls, seen = len(ack_calls), len(beats)
                    await asyncio.sleep(0.4)
                    assert len(ack_calls) == calls, "a dropped ack must not be sent again"
                    assert all(fut.activity_id not in ids for ids in beats[seen:])
        finally:
            del backend.ack, backend.extend_leases
        assert "dropping an ack the store refuses" in caplog.text and fut.activity_id in caplog.text
        snap = await backend.get_activity(fut.activity_id)
        assert snap is not None and snap.status == "processing"  # runs again once its lease expires

    # ------------------------------------------------ item 6: BaseException from a handler
    @pytest.mark.parametrize("plain", [False, True], ids=["async", "plain-def"])
    async def test_a_handler_raising_a_base_exception_fails_its_attempt_and_the_worker_lives(
        self, backend: Backend, plain: bool
    ) -> None:
        engine = self.engine(backend, max_workers=1)

        def body(payload: Any, ctx: rq.ActivityContext) -> int:
            if payload == "boom" and ctx.retry_count == 0:
                raise _Fatal("out of band")
            return ctx.retry_count

        if plain:
            engine.register_activity("h", body)
        else:

            async def h(payload: Any, ctx: rq.ActivityContext) -> int:
                return body(payload, ctx)

            engine.register_activity("h", h)
        boom = await engine.executor.activity("h").payload("boom").max_retries(1).execute()
        async with engine:
            assert await boom.result(timeout=5) == 1
            after = await engine.executor.activity("h").payload("ok").execute()
            assert await after.result(timeout=5) == 0
            events = await backend.get_events(boom.activity_id)
        retried = [e for e in events if e.event_type == "retrying"]
        assert retried and "_Fatal: out of band" in (retried[0].detail or "")

    # ------------------------------------------------ item 7: text no store can hold, metadata size
    @pytest.mark.parametrize(
        "make",
        [
            lambda ex: ex.activity("t\udcff"),
            lambda ex: ex.activity("t").idempotency_key("k\ud800"),
            lambda ex: ex.activity("t").metadata({"k": "v\udcff"}),
            lambda ex: ex.activity("t").metadata({"k\udcff": "v"}),
            lambda ex: ex.activity("t").payload({"x": "\udcff"}),
            lambda ex: ex.activity("t").payload({"\udcff": 1}),
            lambda ex: ex.activity("t").metadata({"big": "m" * (8 * 1024 * 1024)}),
        ],
        ids=["type", "idempotency-key", "metadata-value", "metadata-key", "payload-value", "payload-key",
             "metadata-8MiB"],
    )
    async def test_unstorable_text_and_oversized_metadata_are_refused(
        self, backend: Backend, make: Callable[[rq.ActivityExecutor], rq.ActivityBuilder]
    ) -> None:
        ex = rq.ActivityExecutor(backend, self.queue)
        await ex.activity("keep").execute()
        with pytest.raises(rq.InvalidActivityError):
            await make(ex).execute()
        with pytest.raises(rq.InvalidActivityError):
            await ex.enqueue_many([("t", 1), make(ex)])
        assert (await backend.stats(self.queue)).total == 1

    async def test_a_queue_name_no_store_can_hold_is_refused(self, backend: Backend) -> None:
        with pytest.raises(rq.InvalidActivityError, match="queue name"):
            rq.ActivityExecutor(backend, "q\udcff")
        with pytest.raises(rq.ConfigError, match="queue_name"):
            self.engine(backend, queue_name="q\udcff")
        for dots in (".", ".."):  # a URL path cannot name them: their HTTP routes and Location were unreachable
            with pytest.raises(rq.ConfigError, match=r"must not be '\.' or '\.\.'"):
                self.engine(backend, queue_name=dots)
        with pytest.raises(rq.ConfigError, match="activity_types"):
            self.engine(backend, activity_types=["t\udcff"])

    # ------------------------------------------------ item 8: values that do not round-trip
    @pytest.mark.parametrize(
        ("value", "where"),
        [
            ({1: "a"}, "payload has key 1"),
            ({"items": [0, 1, 2, b"x"]}, 'payload["items"][3] is bytes'),
            ({"items": [0, bytearray(b"x")]}, 'payload["items"][1] is bytearray'),
            ({"s": {1, 2}}, 'payload["s"] is set'),
            ({"s": frozenset()}, 'payload["s"] is frozenset'),
            ({"t": (1, 2)}, 'payload["t"] is tuple'),
            ((1, 2), "payload is tuple"),
            ({"deep": [{"x": [{"y": (1,)}]}]}, 'payload["deep"][0]["x"][0]["y"] is tuple'),
            # typed values (issue 27 item 5) are encoded, and the values inside a Struct or dataclass follow the rules
            ({"st": Tagged(("a", "b"))}, 'payload["st"].tags is tuple, which would arrive as a list'),
            ([_Point(1), Tagged({2: "x"})], "payload[1].tags has key 2 of type int"),
            (Reading(float("nan")), "payload.value is nan: JSON has no NaN or Infinity"),
            ({"w": Weird.HALF}, 'payload["w"] is Weird.HALF, whose value 0.5 is not a str or an int'),
            ({"at": datetime.now(UTC), "x": object()}, 'payload["x"] is object, which JSON cannot represent'),
            ({"r": Refund(ORDER_ID, b"1")}, 'payload["r"].cents is bytes'),  # type: ignore[arg-type]
        ],
    )
    async def test_a_payload_that_would_not_round_trip_is_refused_naming_its_path(
        self, backend: Backend, value: Any, where: str
    ) -> None:
        ex = rq.ActivityExecutor(backend, self.queue)
        with pytest.raises(rq.InvalidActivityError) as info:
            await ex.activity("t").payload(value).execute()
        assert where in str(info.value)
        assert (await backend.stats(self.queue)).total == 0

    async def test_a_refused_typed_payload_names_what_may_be_sent(self, backend: Backend) -> None:
        ex = rq.ActivityExecutor(backend, self.queue)
        with pytest.raises(rq.InvalidActivityError) as info:
            await ex.activity("t").payload({"t": (1,)}).execute()
        assert str(info.value).endswith("; or datetime, date, time, timedelta, UUID, Decimal, an enum member (str or "
                                        "int value), a msgspec Struct or a dataclass instance")
        nul = msgspec.structs.replace(sample_order(), lines=[Line("a\x00", 1, Decimal(1))])
        with pytest.raises(rq.InvalidActivityError, match="payload contains a NUL character"):
            await ex.activity("t").payload(nul).execute()
        with pytest.raises(rq.InvalidActivityError, match="over the limit of 200 bytes"):
            await rq.ActivityExecutor(backend, self.queue, rq.WorkerConfig(max_payload_bytes=200)).activity(
                "t").payload(sample_order()).execute()
        assert (await backend.stats(self.queue)).total == 0

    # ------------------------------------------------ issue 27 item 5: typed payloads
    async def test_typed_values_are_encoded_and_a_handler_annotating_their_type_gets_them_back_equal(
        self, backend: Backend
    ) -> None:
        received: list[Any] = []
        engine = typed_engine(backend, self.queue, received)
        order, refund = sample_order(), Refund(ORDER_ID, 250)
        at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
        ex = engine.executor
        futures = [
            await ex.activity(engine.handler("order")).payload(order).execute(),  # typed enqueue: the handler
            await ex.activity("refund").payload(refund).execute(),  # by name, a plain def handler
            await ex.activity("when").payload(at).execute(),
            await ex.activity("orders").payload([order, order]).execute(),
            await ex.activity("plain").payload(order).execute(),  # unannotated: the JSON value
        ]
        ids = await ex.enqueue_many([("order", order), ex.activity("refund").payload(refund)])
        async with engine:
            results = [await f.result(timeout=10) for f in futures]
            results += [await ex.future(i).result(timeout=10) for i in ids]
        assert results == [f"{ORDER_ID} 19.90", 250, None, 2, None, f"{ORDER_ID} 19.90", 250]
        by_type = sorted(received, key=lambda v: type(v).__name__)
        assert [type(v).__name__ for v in by_type] == ["Order", "Order", "Refund", "Refund", "datetime", "dict",
                                                      "list"]
        assert by_type[0] == by_type[1] == order and by_type[0].lines[0].unit_price.as_tuple().exponent == -2
        assert by_type[2] == by_type[3] == refund and by_type[4] == at and by_type[6] == [order, order]
        assert by_type[5] == SAMPLE_JSON  # an unannotated handler gets plain JSON values: ISO text, str, value
        snap = await backend.get_activity(futures[0].activity_id)
        assert snap is not None and msgspec.json.decode(snap.payload) == SAMPLE_JSON  # stored as JSON

    async def test_a_payload_that_does_not_match_the_handler_type_is_dead_lettered_at_once_naming_the_field(
        self, backend: Backend
    ) -> None:
        received: list[Any] = []
        engine = typed_engine(backend, self.queue, received)
        bad_qty = {**SAMPLE_JSON, "lines": [{"sku": "a", "qty": "two", "unit_price": "1"}]}
        ex = engine.executor
        futures = [
            await ex.activity("order").payload(bad_qty).max_retries(5).execute(),
            await ex.activity("order").execute(),  # no payload: null is not an Order
            await ex.activity("refund").payload(sample_order()).max_retries(5).execute(),  # another type
            await ex.activity("when").payload("yesterday").execute(),
        ]
        async with engine:
            errors = []
            for f in futures:
                with pytest.raises(rq.ActivityFailed) as info:
                    await f.result(timeout=10)
                assert info.value.status == "dead_letter"
                errors.append(info.value.error)
        assert received == []
        assert errors == [
            "payload does not match Order, the handler's payload type: Expected `int`, got `str` - at "
            "`$.lines[0].qty`",
            "payload does not match Order, the handler's payload type: Expected `object`, got `null`",
            "payload does not match Refund, the handler's payload type: Object missing required field `order_id`",
            "payload does not match datetime, the handler's payload type: Invalid RFC3339 encoded datetime",
        ]
        snap = await backend.get_activity(futures[0].activity_id)
        assert snap is not None and snap.status == "dead_letter" and snap.retry_count == 0  # no retry

    async def test_what_a_handler_receives_and_returns_equals_what_was_sent(self, backend: Backend) -> None:
        values: list[Any] = [
            None, True, False, 0, -1, 2**63 - 1, -(2**63), 2**64 - 1, 1.5, -0.0, 1e308, 5e-324, "",
            "é\u2028😀\\\"", [], {}, {"a": [1, {"b": None, "c": [True, 2.25]}]}, [[[]]], {"": ""},
        ]
        engine = self.engine(backend)
        received: list[Any] = []

        @engine.activity("echo")
        async def echo(payload: Any, ctx: rq.ActivityContext) -> Any:
            received.append(payload)
            return payload

        futures = [await engine.executor.activity("echo").payload(v).execute() for v in values]
        async with engine:
            results = [await f.result(timeout=5) for f in futures]
        by_id = {f.activity_id: v for f, v in zip(futures, values, strict=True)}
        assert sorted(map(repr, received)) == sorted(map(repr, by_id.values()))
        assert [repr(r) for r in results] == [repr(v) for v in values]

    async def test_a_handler_returning_a_value_that_would_not_round_trip_fails_naming_its_path(
        self, backend: Backend
    ) -> None:
        engine = self.engine(backend)

        @engine.activity("odd")
        async def odd(payload: Any, ctx: rq.ActivityContext) -> Any:
            return {"when": datetime.now(UTC), "ok": 1}

        fut = await engine.executor.activity("odd").execute()
        async with engine:
            with pytest.raises(rq.ActivityFailed) as info:
                await fut.result(timeout=5)
        assert 'result["when"] is datetime' in (info.value.error or "")

    # ------------------------------------------------ item 15: one event loop
    async def test_a_backend_used_from_another_event_loop_raises_a_clear_error(self, backend: Backend) -> None:
        assert (await backend.stats(self.queue)).total == 0  # used here: this loop is the backend's

        def use_elsewhere() -> BaseException | None:
            async def use() -> None:
                await asyncio.wait_for(backend.stats(self.queue), 5)

            try:
                asyncio.run(use())
            except BaseException as exc:
                return exc
            return None

        exc = await asyncio.to_thread(use_elsewhere)
        assert isinstance(exc, rq.EventLoopMismatchError), repr(exc)
        assert "event loop" in str(exc) and type(backend).__name__ in str(exc)
        assert (await backend.stats(self.queue)).total == 0  # and it still works where it belongs
