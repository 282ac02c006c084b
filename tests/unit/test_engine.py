"""Engine behaviour beyond the conformance suite (memory backend)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest

import runnerq_fast as rq
from runnerq_fast.models import Ack, ClaimedActivity, LeaseRef, LeaseReport, NewActivity
from tests.conformance import FAST


class RecordingMetrics:
    def __init__(self) -> None:
        self.counters: dict[str, int] = {}
        self.durations: dict[str, list[float]] = {}

    def inc_counter(self, name: str, value: int = 1) -> None:
        self.counters[name] = self.counters.get(name, 0) + value

    def observe_duration(self, name: str, seconds: float) -> None:
        self.durations.setdefault(name, []).append(seconds)


def make(backend: rq.MemoryBackend, **kw: Any) -> rq.WorkerEngine:
    return rq.WorkerEngine(backend, **{**FAST, "queue_name": "u", **kw})


async def test_undecodable_payload_is_dead_lettered_and_queue_moves_on() -> None:
    backend = rq.MemoryBackend()
    engine = make(backend)
    done: list[int] = []

    @engine.activity("t")
    async def t(payload: Any, ctx: rq.ActivityContext) -> None:
        done.append(payload)

    await backend.enqueue("u", [NewActivity(id="a" * 32, activity_type="t", payload=b"{not json", priority=4)])
    fut = await engine.executor.activity("t").payload(7).execute()
    async with engine:
        await fut.result(timeout=5)
        with pytest.raises(rq.ActivityFailed, match="payload could not be decoded"):
            await rq.ActivityFuture(backend, "a" * 32).result(timeout=5)
    assert done == [7]


async def test_sync_handlers_run_off_the_loop_in_a_bounded_pool() -> None:
    backend = rq.MemoryBackend()
    engine = make(backend, max_workers=8, sync_workers=2)
    threads: set[str] = set()
    running = 0
    peak = 0
    lock = threading.Lock()

    @engine.activity("block")
    def block(payload: Any, ctx: rq.ActivityContext) -> int:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        threads.add(threading.current_thread().name)
        time.sleep(0.05)
        with lock:
            running -= 1
        return int(payload) + 1

    ids = await engine.executor.enqueue_many([("block", i) for i in range(6)])
    async with engine:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.005)

        tick_task = asyncio.create_task(ticker())
        results = [await rq.ActivityFuture(backend, i).result(timeout=5) for i in ids]
        tick_task.cancel()
    assert results == [1, 2, 3, 4, 5, 6]
    assert peak == 2 and all(n.startswith("runnerq-sync") for n in threads)
    assert ticks > 10  # the loop kept running while handlers blocked


async def test_metrics_sink_counts_outcomes() -> None:
    backend = rq.MemoryBackend()
    metrics = RecordingMetrics()
    engine = make(backend, metrics=metrics)

    @engine.activity("ok")
    async def ok(payload: Any, ctx: rq.ActivityContext) -> None:
        if payload == "fail":
            raise rq.NonRetryableError("no")
        if payload == "retry" and ctx.retry_count == 0:
            raise RuntimeError("again")

    futs = [await engine.executor.activity("ok").payload(p).execute() for p in ("a", "retry", "fail")]
    async with engine:
        for f in futs:
            with contextlib.suppress(rq.ActivityFailed):
                await f.result(timeout=5)
    c = metrics.counters
    assert c["runnerq_activities_completed_total"] == 2
    assert c["runnerq_activities_retried_total"] == 1
    assert c["runnerq_activities_failed_total"] == 1
    assert c["runnerq_activities_claimed_total"] == 4
    assert len(metrics.durations["runnerq_activity_duration_seconds"]) == 2


async def test_release_and_dead_letter_hooks_fire() -> None:
    backend = rq.MemoryBackend()
    seen: list[tuple[str, str]] = []

    class Hooks(rq.LifecycleHooks):
        def on_released(self, activity: Any, delay: float, error: str) -> None:
            seen.append(("released", error))

        def on_dead_letter(self, activity: Any, error: str) -> None:
            seen.append(("dead", error))

        def on_failed(self, activity: Any, error: str) -> None:
            seen.append(("failed", error))

    engine = make(backend, hooks=[Hooks()])

    @engine.activity("x")
    async def x(payload: Any, ctx: rq.ActivityContext) -> None:
        raise RuntimeError(f"try {ctx.retry_count}")

    fut = await engine.executor.activity("x").max_retries(1).execute()
    async with engine:
        with pytest.raises(rq.ActivityFailed):
            await fut.result(timeout=5)
        await asyncio.sleep(0.05)
    assert seen == [("released", "RuntimeError: try 0"), ("dead", "RuntimeError: try 1")]


async def test_retry_after_overrides_backoff() -> None:
    backend = rq.MemoryBackend()
    engine = make(backend, retry_delay=30.0, max_retry_delay=60.0)
    times: list[float] = []

    @engine.activity("x")
    async def x(payload: Any, ctx: rq.ActivityContext) -> str:
        times.append(time.monotonic())
        if ctx.retry_count == 0:
            raise rq.RetryableError("later", retry_after=0.2)
        return "ok"

    fut = await engine.executor.activity("x").execute()
    async with engine:
        assert await fut.result(timeout=5) == "ok"
    assert 0.18 <= times[1] - times[0] < 5


async def test_unencodable_result_fails_the_activity() -> None:
    backend = rq.MemoryBackend()
    engine = make(backend)

    @engine.activity("x")
    async def x(payload: Any, ctx: rq.ActivityContext) -> Any:
        return {"v": float("nan")}

    fut = await engine.executor.activity("x").execute()
    async with engine:
        with pytest.raises(rq.ActivityFailed, match="NaN"):
            await fut.result(timeout=5)


async def test_register_twice_or_after_start_is_config_error() -> None:
    engine = make(rq.MemoryBackend())

    @engine.activity("x")
    async def x(payload: Any, ctx: rq.ActivityContext) -> None:
        return None

    with pytest.raises(rq.ConfigError, match="already"):
        engine.register_activity("x", x)
    async with engine:
        with pytest.raises(rq.ConfigError, match="before the engine starts"):
            engine.register_activity("y", x)


async def test_engine_without_handlers_refuses_to_start() -> None:
    with pytest.raises(rq.ConfigError, match="no handlers"):
        await make(rq.MemoryBackend()).start()


async def test_engine_opens_backend_from_url_and_closes_it() -> None:
    engine = rq.WorkerEngine("memory://", queue_name="u", **FAST)

    @engine.activity("x")
    async def x(payload: Any, ctx: rq.ActivityContext) -> int:
        return 5

    with pytest.raises(rq.ConfigError, match="not open"):
        _ = engine.executor
    async with engine:
        fut = await engine.executor.activity("x").execute()
        assert await fut.result(timeout=5) == 5


async def test_cancellation_signal_is_set_on_stop() -> None:
    engine = make(rq.MemoryBackend(), shutdown_grace=2.0)
    started = asyncio.Event()
    saw_cancel: list[bool] = []

    @engine.activity("x")
    async def x(payload: Any, ctx: rq.ActivityContext) -> None:
        started.set()
        await ctx.cancellation.wait()
        saw_cancel.append(ctx.is_cancelled)

    fut = await engine.executor.activity("x").execute()
    await engine.start()
    await started.wait()
    await engine.stop()
    assert saw_cancel == [True]
    assert (await engine.backend.get_result(fut.activity_id)) is not None


async def test_claims_are_batched_not_one_per_activity() -> None:
    backend = rq.MemoryBackend()
    calls: list[int] = []
    original = backend.claim

    async def counting_claim(*args: Any, **kw: Any) -> Any:
        got = await original(*args, **kw)
        calls.append(len(got))
        return got

    backend.claim = counting_claim  # type: ignore[method-assign]
    engine = make(backend, max_workers=50)

    @engine.activity("x")
    async def x(payload: Any, ctx: rq.ActivityContext) -> None:
        return None

    ids = await engine.executor.enqueue_many([("x", i) for i in range(1000)])
    async with engine:
        await rq.ActivityFuture(backend, ids[-1]).result(timeout=10)
    assert sum(calls) == 1000
    assert len([c for c in calls if c]) <= 1000 / 12  # at least a quarter of the slots per round trip


async def test_run_until_stopped_returns_on_request_stop() -> None:
    engine = make(rq.MemoryBackend())

    @engine.activity("x")
    async def x(payload: Any, ctx: rq.ActivityContext) -> None:
        return None

    await engine.start()
    asyncio.get_running_loop().call_later(0.05, engine.request_stop)
    await asyncio.wait_for(engine.run_until_stopped(handle_signals=False), 5)
    assert engine.in_flight == 0


async def test_stop_requested_before_start_stops_right_after_start() -> None:
    engine = make(rq.MemoryBackend())

    @engine.activity("x")
    async def x(payload: Any, ctx: rq.ActivityContext) -> None:
        return None

    engine.request_stop()  # e.g. SIGTERM while the backend was still opening
    await asyncio.wait_for(engine.run_until_stopped(handle_signals=False), 5)
    assert engine.in_flight == 0


async def test_configure_before_start_only() -> None:
    engine = make(rq.MemoryBackend())

    @engine.activity("x")
    async def x(payload: Any, ctx: rq.ActivityContext) -> None:
        return None

    engine.configure(max_workers=3, queue_name="v")
    assert (engine.config.max_workers, engine.queue_name, engine.executor.queue_name) == (3, "v", "v")
    with pytest.raises(rq.ConfigError, match="unknown"):
        engine.configure(nope=1)  # type: ignore[call-arg]
    with pytest.raises(rq.ConfigError):
        engine.configure(max_workers=0)
    async with engine:
        with pytest.raises(rq.ConfigError, match="running"):
            engine.configure(max_workers=5)


class _FlakyBackend(rq.MemoryBackend):
    """Acks and lease extensions raise while ``down`` is set: an outage as one worker sees it."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False

    async def ack(self, queue: str, acks: Sequence[Ack]) -> list[str]:
        if self.down:
            raise ConnectionError("backend down")
        return await super().ack(queue, acks)

    async def extend_leases(self, queue: str, leases: Sequence[LeaseRef], lease_ms: int) -> LeaseReport:
        if self.down:
            raise ConnectionError("backend down")
        return await super().extend_leases(queue, leases, lease_ms)


async def test_stale_ack_rejected_after_a_reclaim_keeps_the_new_attempt_heartbeated() -> None:
    """Regression: the first attempt's ack cannot land, its lease expires, the reaper requeues it and
    this same engine claims it again. The old ack, flushed once the backend is back, is rejected; it must
    not take the NEW claim out of the heartbeat, or that lease lapses mid-run and a third run starts.

    The expiry is not counted (the activity was claimed the ordinary way), so the second run is a
    suspect's: it starts only once the old claim is settled (its ack rejected), and runs alone."""
    backend = _FlakyBackend()
    engine = make(backend, lease_timeout=0.3)
    runs: list[int] = []

    @engine.activity("t")
    async def t(payload: Any, ctx: rq.ActivityContext) -> int:
        runs.append(ctx.retry_count)
        if len(runs) == 1:
            backend.down = True  # this attempt's ack and every heartbeat fail for 0.8 s, past its lease
            asyncio.get_running_loop().call_later(0.8, setattr, backend, "down", False)
        elif len(runs) == 2:
            await asyncio.sleep(1.2)  # four leases long: only the heartbeat keeps this claim
        return len(runs)

    fut = await engine.executor.activity("t").payload(None).execute()
    async with engine:
        assert await fut.result(timeout=10) == 2
    assert runs == [0, 0]
    assert engine.stats["rejected"] == 1


async def test_plain_def_handler_is_waited_for_at_shutdown_not_released() -> None:
    """A thread cannot be interrupted: releasing its activity would let another worker run it at the same time."""
    backend = rq.MemoryBackend()
    engine = make(backend, shutdown_grace=0.05)
    started = threading.Event()

    @engine.activity("block")
    def block(payload: Any, ctx: rq.ActivityContext) -> str:
        started.set()
        time.sleep(0.4)
        return "finished"

    fut = await engine.executor.activity("block").execute()
    await engine.start()
    await asyncio.get_running_loop().run_in_executor(None, started.wait, 5)
    await engine.stop()
    result = await backend.get_result(fut.activity_id)
    assert result is not None and result.status == "completed"
    kinds = [e.event_type for e in await backend.get_events(fut.activity_id)]
    assert "requeued" not in kinds


async def test_timed_out_plain_def_handler_is_not_retried_while_its_thread_runs() -> None:
    backend = rq.MemoryBackend()
    engine = make(backend)
    spans: list[tuple[float, float]] = []

    @engine.activity("slow")
    def slow(payload: Any, ctx: rq.ActivityContext) -> int:
        t0 = time.monotonic()
        if ctx.retry_count == 0:
            time.sleep(0.4)  # far past the 0.1 s timeout
        spans.append((t0, time.monotonic()))
        return ctx.retry_count

    fut = await engine.executor.activity("slow").timeout(0.1).execute()
    async with engine:
        assert await fut.result(timeout=5) == 1
    (_, first_end), (second_start, _) = spans
    assert second_start >= first_end  # never both at once
    events = await backend.get_events(fut.activity_id)
    assert any(e.event_type == "retrying" and "timed out after 0.1 s" in (e.detail or "") for e in events)


class _PoisonBackend(rq.MemoryBackend):
    """A store that refuses any ack batch containing one particular activity."""

    poison = ""

    async def ack(self, queue: str, acks: Sequence[Ack]) -> list[str]:
        if any(a.id == self.poison for a in acks):
            raise ValueError("invalid byte sequence")
        return await super().ack(queue, acks)


async def test_an_ack_the_store_refuses_does_not_jam_the_others() -> None:
    backend = _PoisonBackend()
    engine = make(backend, ack_batch_size=50)

    @engine.activity("x")
    async def x(payload: Any, ctx: rq.ActivityContext) -> int:
        return int(payload)

    ids = await engine.executor.enqueue_many([("x", i) for i in range(20)])
    backend.poison = ids[7]
    async with engine:
        for i, aid in enumerate(ids):
            if i != 7:
                assert await rq.ActivityFuture(backend, aid).result(timeout=10) == i
        assert engine.in_flight == 0  # the poison ack was dropped, its heartbeat with it
    snap = await backend.get_activity(ids[7])
    assert snap is not None and snap.status == "processing"  # the reaper takes it back after its lease


class _SlowAckBackend(rq.MemoryBackend):
    async def ack(self, queue: str, acks: Sequence[Ack]) -> list[str]:
        rejected = await super().ack(queue, acks)
        await asyncio.sleep(0.2)  # stored, but the answer is slow
        return rejected


async def test_stop_during_an_ack_in_flight_does_not_send_it_twice() -> None:
    backend = _SlowAckBackend()
    engine = make(backend)

    @engine.activity("x")
    async def x(payload: Any, ctx: rq.ActivityContext) -> None:
        return None

    ids = await engine.executor.enqueue_many([("x", i) for i in range(10)])
    await engine.start()
    await rq.ActivityFuture(backend, ids[-1]).result(timeout=5)
    await engine.stop()
    assert engine.stats["rejected"] == 0 and engine.stats["completed"] == 10


async def test_stop_gives_up_on_acks_after_its_deadline() -> None:
    backend = _FlakyBackend()
    engine = make(backend, shutdown_grace=0.0)

    @engine.activity("x")
    async def x(payload: Any, ctx: rq.ActivityContext) -> None:
        backend.down = True

    fut = await engine.executor.activity("x").execute()
    await engine.start()
    while engine.stats["completed"] == 0:
        await asyncio.sleep(0.01)
    t0 = time.monotonic()
    await asyncio.wait_for(engine.stop(), 15)
    assert 4.0 <= time.monotonic() - t0 < 10.0  # max(shutdown_grace, 5 s), then the lease takes over
    snap = await backend.get_activity(fut.activity_id)
    # not lost: still held, or already taken back by the reaper once its 2 s lease ran out
    assert snap is not None and snap.status in {"processing", "pending"}


@pytest.mark.parametrize("kind", ["cancelled", "generator-exit", "system-exit-in-thread"])
async def test_handler_raising_base_exceptions_fails_the_attempt_and_the_worker_lives(kind: str) -> None:
    backend = rq.MemoryBackend()
    engine = make(backend, max_workers=1)

    @engine.activity("odd")
    async def odd(payload: Any, ctx: rq.ActivityContext) -> None:
        if kind == "cancelled":
            t = asyncio.ensure_future(asyncio.sleep(10))
            t.cancel()
            await t
        raise GeneratorExit()

    @engine.activity("exits")
    def exits(payload: Any, ctx: rq.ActivityContext) -> None:
        raise SystemExit(3)

    @engine.activity("ok")
    async def ok(payload: Any, ctx: rq.ActivityContext) -> str:
        return "still working"

    bad = await engine.executor.activity("exits" if kind == "system-exit-in-thread" else "odd").max_retries(1).execute()
    good = await engine.executor.activity("ok").execute()
    async with engine:
        with pytest.raises(rq.ActivityFailed, match="dead_letter"):
            await bad.result(timeout=5)
        assert await good.result(timeout=5) == "still working"
    assert [e.event_type for e in await backend.get_events(bad.activity_id)].count("retrying") == 1


async def test_plain_def_timeout_counts_from_when_a_thread_starts_the_call() -> None:
    backend = rq.MemoryBackend()
    engine = make(backend, max_workers=4, sync_workers=1)
    runs: list[int] = []

    @engine.activity("s")
    def s(payload: Any, ctx: rq.ActivityContext) -> int:
        runs.append(int(payload))
        time.sleep(0.6 if payload == 0 else 0.1)
        return int(payload)

    first = await engine.executor.activity("s").payload(0).timeout(5).execute()
    queued = [await engine.executor.activity("s").payload(i).timeout(0.4).execute() for i in (1, 2)]
    async with engine:
        assert await first.result(timeout=10) == 0
        assert [await f.result(timeout=10) for f in queued] == [1, 2]
    assert sorted(runs) == [0, 1, 2]  # each ran once: waiting for the one thread was not a timeout


async def test_stop_withdraws_plain_def_calls_that_have_not_started() -> None:
    backend = rq.MemoryBackend()
    engine = make(backend, max_workers=3, sync_workers=1, shutdown_grace=0.05)
    ran: list[int] = []
    started = threading.Event()

    @engine.activity("s")
    def s(payload: Any, ctx: rq.ActivityContext) -> int:
        ran.append(int(payload))
        started.set()
        time.sleep(0.5)
        return int(payload)

    ids = await engine.executor.enqueue_many([("s", i) for i in range(3)])
    await engine.start()
    await asyncio.get_running_loop().run_in_executor(None, started.wait, 5)
    t0 = time.monotonic()
    await engine.stop()
    assert time.monotonic() - t0 < 1.5
    assert len(ran) == 1
    statuses = {}
    for aid in ids:
        snap = await backend.get_activity(aid)
        assert snap is not None
        statuses[aid] = (snap.status, snap.retry_count)
    assert sorted(statuses.values()) == [("completed", 0), ("pending", 0), ("pending", 0)]


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 1e14, -1.0])
def test_retry_after_must_be_a_sane_number_of_seconds(bad: float) -> None:
    with pytest.raises(ValueError, match="retry_after"):
        rq.RetryableError("x", retry_after=bad)


async def test_memory_backend_refuses_a_callers_connection_and_stores_nothing() -> None:
    backend = rq.MemoryBackend()
    executor = rq.ActivityExecutor(backend, "u")
    with pytest.raises(rq.ConfigError, match="memory backend cannot enqueue inside the caller's transaction"):
        await executor.activity("t").execute(connection=object())
    with pytest.raises(rq.ConfigError, match="memory backend"):
        await executor.enqueue_many([("t", 1)], connection=object())
    assert (await backend.stats("u")).total == 0


def test_a_handler_that_cannot_take_payload_and_ctx_is_refused_at_registration() -> None:
    engine = make(rq.MemoryBackend())

    async def one(payload: Any) -> None: ...

    def three(payload: Any, ctx: rq.ActivityContext, extra: int) -> None: ...

    async def kw_only(payload: Any, ctx: rq.ActivityContext, *, flag: bool) -> None: ...

    with pytest.raises(rq.ConfigError, match=r"handler .*one\(payload: 'Any'\) -> 'None' for activity type 'a' "
                                             r"must take two positional parameters.*it takes 1$"):
        engine.register_activity("a", one)  # type: ignore[arg-type]
    with pytest.raises(rq.ConfigError, match=r"it requires 3 \(payload, ctx, extra\)"):
        engine.activity("b")(three)  # type: ignore[type-var]
    with pytest.raises(rq.ConfigError, match=r"keyword-only parameter\(s\) flag"):
        engine.activity("c")(kw_only)  # type: ignore[type-var]
    assert engine.activity_types == []

    # what may be called as handler(payload, ctx) is accepted
    async def defaults(payload: Any, ctx: rq.ActivityContext, retries: int = 3, *, flag: bool = False) -> None: ...

    def star(*args: Any) -> None: ...

    class Callable:
        async def __call__(self, payload: Any, ctx: rq.ActivityContext) -> None: ...

    engine.register_activity("d", defaults)
    engine.register_activity("e", star)
    engine.register_activity("f", Callable())
    engine.register_activity("g", print)  # a builtin with no signature to read: accepted
    assert engine.activity_types == ["d", "e", "f", "g"]


async def test_acks_are_flushed_at_once_when_the_last_running_activity_ends() -> None:
    """With nothing left to run no ack can join the batch, so the buffer is flushed then, not at the interval;
    while another activity still runs, acks wait for the interval (or the batch size, or the fetcher's next claim:
    no poll comes within the test, the queue being empty) as before."""
    backend = rq.MemoryBackend()
    engine = make(backend, ack_flush_interval=30.0, max_workers=4, poll_interval=30.0)
    gate = asyncio.Event()
    ran: list[str] = []

    @engine.activity("t")
    async def t(payload: Any, ctx: rq.ActivityContext) -> Any:
        if payload == "slow":
            await gate.wait()
        ran.append(payload)
        return payload

    async with engine:
        # alone: done as soon as its handler returns
        t0 = time.monotonic()
        assert await (await engine.executor.activity("t").payload("alone").execute()).result(timeout=5) == "alone"
        assert time.monotonic() - t0 < 5
        # beside a running one: its ack waits in the buffer
        slow = await engine.executor.activity("t").payload("slow").execute()
        quick = await engine.executor.activity("t").payload("quick").execute()
        for _ in range(500):
            if "quick" in ran:
                break
            await asyncio.sleep(0.01)
        assert "quick" in ran
        await asyncio.sleep(0.05)
        assert await backend.get_result(quick.activity_id) is None  # buffered: "slow" still runs
        gate.set()  # the last one ends: both acks go out now
        assert await slow.result(timeout=5) == "slow" and await quick.result(timeout=5) == "quick"


class _CallLog(rq.MemoryBackend):
    """Logs the engine's claims and acks in the order they reach the store."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, list[str]]] = []

    async def claim(self, queue: str, worker_id: str, limit: int, activity_types: Sequence[str] | None,
                    lease_ms: int) -> list[ClaimedActivity]:
        got = await super().claim(queue, worker_id, limit, activity_types, lease_ms)
        self.calls.append(("claim", [a.id for a in got]))
        return got

    async def ack(self, queue: str, acks: Sequence[Ack]) -> list[str]:
        self.calls.append(("ack", [a.id for a in acks]))
        return await super().ack(queue, acks)


async def test_acks_buffered_when_the_fetcher_claims_go_right_behind_that_claim() -> None:
    """The claim that the finished activities' free slots allow is sent first and their acks right after it,
    without waiting for the flush interval, so a store that runs one statement at a time (Redis, SQLite) is
    never left idle waiting for the acks while the claimed batch runs."""
    backend = _CallLog()
    engine = make(backend, ack_flush_interval=30.0, ack_batch_size=1000, max_workers=4, claim_batch_size=4)
    gate = asyncio.Event()

    @engine.activity("t")
    async def t(payload: Any, ctx: rq.ActivityContext) -> Any:
        if payload == "slow":
            await gate.wait()
        return payload

    first = await engine.executor.enqueue_many([("t", "q1"), ("t", "q2"), ("t", "q3"), ("t", "slow")])
    later = await engine.executor.enqueue_many([("t", "l1"), ("t", "l2")])
    async with engine:
        for _ in range(500):
            if all([await backend.get_result(i) for i in first[:3]]):
                break
            await asyncio.sleep(0.01)
        # "slow" still runs, so only a claim can have sent the three quick ones' acks before the 30 s interval
        assert [(await backend.get_result(i)) is not None for i in first] == [True, True, True, False]
        kinds = [k for k, _ in backend.calls]
        assert kinds[:3] == ["claim", "claim", "ack"], backend.calls
        assert sorted(backend.calls[0][1]) == sorted(first) and sorted(backend.calls[1][1]) == sorted(later)
        # the three, and whatever else finished before the flush ran (the memory store answers a claim at once)
        assert set(first[:3]) <= set(backend.calls[2][1]) <= set(first[:3] + later)
        gate.set()
        assert await engine.executor.future(first[3]).result(timeout=5) == "slow"


@pytest.mark.parametrize(("max_retries", "said"), [(0, "after 1 attempt:"), (1, "after 2 attempts:")])
async def test_the_dead_letter_log_counts_its_attempts(
    caplog: pytest.LogCaptureFixture, max_retries: int, said: str,
) -> None:
    backend = rq.MemoryBackend()
    engine = make(backend)

    @engine.activity("x")
    async def x(payload: Any, ctx: rq.ActivityContext) -> None:
        raise RuntimeError("no")

    fut = await engine.executor.activity("x").max_retries(max_retries).execute()
    with caplog.at_level("ERROR", logger="runnerq_fast"):
        async with engine:
            with pytest.raises(rq.ActivityFailed):
                await fut.result(timeout=5)
    lines = [r.getMessage() for r in caplog.records if "dead-lettered" in r.getMessage()]
    assert len(lines) == 1 and said in lines[0], lines


@pytest.mark.parametrize(("lease", "warned"), [(0.001, True), (0.5, True), (1.0, False), (30.0, False)])
async def test_a_lease_shorter_than_a_second_is_warned_about_at_start(
    caplog: pytest.LogCaptureFixture, lease: float, warned: bool,
) -> None:
    """A 1 ms lease was accepted silently: every activity of a 5 s handler ran twice (fresh-user check)."""
    engine = make(rq.MemoryBackend(), lease_timeout=lease)

    @engine.activity("x")
    async def x(payload: Any, ctx: rq.ActivityContext) -> None:
        pass

    with caplog.at_level("WARNING", logger="runnerq_fast"):
        async with engine:
            pass
    said = [r.getMessage() for r in caplog.records if "lease_timeout is" in r.getMessage()]
    assert len(said) == (1 if warned else 0), said
    if warned:
        assert f"lease_timeout is {lease:g} s" in said[0] and "runs again elsewhere" in said[0]
