"""Throughput and latency harness behind ``runnerq-fast bench`` and ``benchmarks/run.py``.

One run, on one backend, in one process:

1. **enqueue**: ``n`` no-op activities on a fresh, uniquely named queue, in
   batches of ``batch_size`` through :meth:`ActivityExecutor.enqueue_many`
   (one backend round trip per batch), timed as enqueues per second;
2. **drain**: ONE :class:`~runnerq_fast.WorkerEngine` with the default
   configuration (apart from ``concurrency``) processes them, timed from
   :meth:`WorkerEngine.start` until every ack is flushed. Completion is
   detected in process (a counter in the handler, then the engine's
   in-flight count reaching zero), never by polling the backend; the backend's
   own count is checked once at the end;
3. **idle latency**: with the engine idle, ``idle_samples`` activities are
   enqueued one at a time and the time from just before the enqueue call to
   the handler's start is recorded;
4. **typed idle latency**: a second engine on the same queue claiming only
   another type (its own backend connection, as a second worker process
   would have; the same store on ``memory://``) runs beside the first, and
   ``typed_samples`` single activities of either engine's type, in the order
   A B B A (repeated), are timed the same way: every one must wake the engine
   that can claim it (strict alternation would hide a wakeup that goes to
   whichever fetcher waited longest, as Redis serves ``BLPOP``);
5. **due latency**: ``due_samples`` delayed activities, enqueued one at a
   time on the idle engine with delays of 30 to 150 ms, timed from their due
   time to the handler's start: the engine must wake at the due time, not at
   its next poll.

Two latencies are reported and must not be confused:

* ``backlog_latency``: handler start minus the activity's stored creation
  time (``ctx.enqueued_at``, millisecond resolution) during the drain. It is
  dominated by queueing behind the backlog, so it grows with ``n``.
* ``idle_latency``: the enqueue-to-start latency of a single activity on an
  idle engine (client clock before the enqueue call to handler start, both
  ``time.time()`` in the same process): enqueue round trip + wakeup + claim.
  ``typed_idle_latency`` is the same with two type-disjoint engines on the
  queue; ``due_latency`` runs from a delayed activity's due time instead.

Nothing but the run's own queue is written, and nothing is deleted.

Examples
--------
>>> result = await run_bench(BenchConfig(backend_url="memory://", n=10_000))
>>> result.process_per_s
"""

from __future__ import annotations

import asyncio
import math
import os
import platform
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import msgspec

import runnerq_fast as rq
from runnerq_fast import speedups
from runnerq_fast.errors import ConfigError
from runnerq_fast.urls import redact_url

__all__ = [
    "BenchConfig",
    "BenchResult",
    "LatencySummary",
    "ProgressCallback",
    "result_to_json",
    "run_bench",
    "summarize_latencies",
]

NOOP_TYPE = "bench_noop"
"""Activity type of the drained no-op activities."""

IDLE_TYPE = "bench_idle"
"""Activity type of the idle-latency probes."""

OTHER_TYPE = "bench_other"
"""Activity type of the second engine's probes (typed idle latency)."""

DUE_DELAYS = (0.03, 0.06, 0.1, 0.15)
"""Delays of the due-latency probes, seconds, used in turn."""

ProgressCallback = Callable[[str, int, int], None]
"""``progress(phase, done, total)``; phases are ``"enqueue"``, ``"drain"``, ``"idle"``, ``"typed"``, ``"due"``."""


class BenchConfig(msgspec.Struct, kw_only=True, frozen=True):
    """What to measure.

    Attributes
    ----------
    backend_url : str
        Backend to measure, e.g. ``memory://`` or ``postgresql://user@host/db``.
    n : int
        Activities enqueued and drained. Default 20,000.
    batch_size : int
        Activities per :meth:`enqueue_many` call. Default 500.
    concurrency : int or None
        The engine's ``max_workers``; ``None`` (default) keeps the engine default.
    queue_name : str or None
        Queue to use; ``None`` (default) makes a fresh ``bench-<random>`` name
        so runs never interfere.
    idle_samples : int
        Activities enqueued one at a time for the idle latency; 0 skips the
        phase. Default 200.
    idle_interval : float
        Pause between idle probes, seconds. Default 0.005.
    idle_settle : float
        Pause after the drain before the first idle probe, seconds, so the
        fetcher is asleep waiting for work. Default 0.2.
    typed_samples : int
        Single enqueues for either of two type-disjoint engines (A B B A ...),
        for the typed idle latency; 0 skips the phase. Default 100.
    due_samples : int
        Delayed activities for the due latency; 0 skips the phase. Default 40.
    drain_timeout : float
        Longest the drain may take before the run fails, seconds. Default 600.
    probe_timeout : float
        Longest one idle probe may take to start, seconds. Default 5.
    """

    backend_url: str
    n: int = 20_000
    batch_size: int = 500
    concurrency: int | None = None
    queue_name: str | None = None
    idle_samples: int = 200
    idle_interval: float = 0.005
    idle_settle: float = 0.2
    typed_samples: int = 100
    due_samples: int = 40
    drain_timeout: float = 600.0
    probe_timeout: float = 5.0

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ConfigError(f"n must be >= 1, got {self.n}")
        if self.batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.concurrency is not None and self.concurrency < 1:
            raise ConfigError(f"concurrency must be >= 1, got {self.concurrency}")
        for name in ("idle_samples", "typed_samples", "due_samples"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be >= 0, got {getattr(self, name)}")
        for name in ("idle_interval", "idle_settle"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be >= 0 seconds")
        for name in ("drain_timeout", "probe_timeout"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"{name} must be > 0 seconds")


class LatencySummary(msgspec.Struct, kw_only=True, frozen=True):
    """Distribution of latencies, all in **milliseconds**.

    Attributes
    ----------
    samples : int
        Number of measurements (0: the other fields are 0).
    p50_ms, p90_ms, p99_ms : float
        Nearest-rank percentiles.
    mean_ms, min_ms, max_ms : float
        Mean, smallest and largest value.
    missed : int
        Probes that did not start within the probe timeout (probe phases only).
    """

    samples: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    mean_ms: float
    min_ms: float
    max_ms: float
    missed: int = 0


class BenchResult(msgspec.Struct, kw_only=True, frozen=True):
    """Figures of one run, plus the configuration and the machine.

    Attributes
    ----------
    backend : str
        Backend scheme name (``memory``, ``postgresql``, ...).
    backend_url : str
        The URL with any password replaced by ``***``.
    queue_name : str
        Queue the run used.
    n, batch_size : int
        As configured.
    concurrency : int
        The engine's ``max_workers`` actually used.
    enqueue_seconds : float
        Wall time of the enqueue phase, seconds.
    enqueue_per_s : float
        Activities enqueued per second.
    process_seconds : float
        Wall time from engine start until the last ack was flushed, seconds.
    process_per_s : float
        Activities drained per second.
    completed : int
        Activities of the drain the backend reports ``completed`` (must equal ``n``).
    backend_stats : dict of str to int
        The queue's counts by status at the end of the run.
    engine_stats : dict of str to int
        The engine's own outcome counters at the end of the run.
    backlog_latency : LatencySummary
        Handler start minus stored creation time during the drain (includes
        time spent queued behind the backlog; millisecond resolution).
    idle_latency : LatencySummary
        Enqueue call to handler start of single activities on an idle engine.
    typed_idle_latency : LatencySummary
        The same with two type-disjoint engines on the queue, each probe of
        one engine's type (``samples`` 0 when skipped).
    due_latency : LatencySummary
        Due time to handler start of delayed activities on an idle engine
        (``samples`` 0 when skipped).
    engine_config : dict
        The engine's full :class:`~runnerq_fast.WorkerConfig`.
    loop : str
        ``"uvloop"`` or ``"asyncio"``.
    speedups_enabled : bool
        Whether the compiled hot paths were active (``runnerq_fast.speedups.enabled``).
    python, implementation, platform, machine : str
        Interpreter version and implementation, OS and CPU architecture.
    cpu_count : int
        Logical CPUs of the machine.
    version : str
        runnerq-fast version.
    started_at : str
        UTC start of the run, ISO 8601.
    """

    backend: str
    backend_url: str
    queue_name: str
    n: int
    batch_size: int
    concurrency: int
    enqueue_seconds: float
    enqueue_per_s: float
    process_seconds: float
    process_per_s: float
    completed: int
    backend_stats: dict[str, int]
    engine_stats: dict[str, int]
    backlog_latency: LatencySummary
    idle_latency: LatencySummary
    typed_idle_latency: LatencySummary
    due_latency: LatencySummary
    engine_config: dict[str, Any]
    loop: str
    speedups_enabled: bool
    python: str
    implementation: str
    platform: str
    machine: str
    cpu_count: int
    version: str
    started_at: str


def summarize_latencies(values_s: list[float], missed: int = 0) -> LatencySummary:
    """Summarize latencies given in **seconds** as milliseconds.

    Parameters
    ----------
    values_s : list of float
        Latencies in seconds; sorted in place.
    missed : int
        Count of probes that produced no value.

    Returns
    -------
    LatencySummary
        Nearest-rank percentiles; all zeros (with ``samples=0``) for an empty list.
    """
    if not values_s:
        return LatencySummary(samples=0, p50_ms=0.0, p90_ms=0.0, p99_ms=0.0, mean_ms=0.0, min_ms=0.0, max_ms=0.0,
                              missed=missed)
    values_s.sort()
    count = len(values_s)

    def pct(q: float) -> float:
        rank = max(1, math.ceil(q * count))
        return round(values_s[rank - 1] * 1000.0, 3)

    return LatencySummary(
        samples=count,
        p50_ms=pct(0.50),
        p90_ms=pct(0.90),
        p99_ms=pct(0.99),
        mean_ms=round(sum(values_s) / count * 1000.0, 3),
        min_ms=round(values_s[0] * 1000.0, 3),
        max_ms=round(values_s[-1] * 1000.0, 3),
        missed=missed,
    )


def _loop_name() -> str:
    loop = asyncio.get_running_loop()
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"


class _Probe:
    """Shared state between the bench coroutine and the handlers."""

    __slots__ = ("backlog", "count", "done", "idle", "idle_started", "sink", "target")

    def __init__(self, target: int) -> None:
        self.target = target
        self.count = 0
        self.backlog: list[float] = []
        self.idle: list[float] = []
        #: where the probe handlers record their latency (the current phase's list)
        self.sink = self.idle
        self.done = asyncio.Event()
        self.idle_started = asyncio.Event()

    def record(self, payload: Any) -> None:
        """A probe started: its latency from the time in its payload (``t``, epoch seconds)."""
        self.sink.append(time.time() - float(payload["t"]))
        self.idle_started.set()

    async def run(
        self,
        enqueue: Callable[[int, float], Awaitable[Any]],
        samples: int,
        timeout: float,
        pause: float,
        progress: Callable[[int], None],
    ) -> int:
        """Run ``samples`` probes one after another: ``enqueue(i, t)``, then wait for its start; return the missed."""
        missed = 0
        for i in range(samples):
            self.idle_started.clear()
            await enqueue(i, time.time())
            try:
                async with asyncio.timeout(timeout):
                    await self.idle_started.wait()
            except TimeoutError:
                missed += 1
            progress(i + 1)
            if pause:
                await asyncio.sleep(pause)
        return missed


async def run_bench(config: BenchConfig, progress: ProgressCallback | None = None) -> BenchResult:
    """Run one benchmark (see the module docstring) and return its figures.

    Parameters
    ----------
    config : BenchConfig
        What to measure.
    progress : callable, optional
        Called as ``progress(phase, done, total)`` after each enqueue batch,
        about every 0.1 s of the drain and after each idle probe.

    Returns
    -------
    BenchResult

    Raises
    ------
    ConfigError
        If the backend URL is missing or unsupported.
    RuntimeError
        If the drain does not finish within ``drain_timeout`` seconds or the
        backend's final count disagrees with ``n``.
    """
    started_at = datetime.now(UTC).isoformat(timespec="seconds")
    queue = config.queue_name or f"bench-{uuid.uuid4().hex[:12]}"
    n = config.n
    probe = _Probe(n)
    report: ProgressCallback = progress or (lambda _phase, _done, _total: None)

    backend = await rq.connect(config.backend_url)
    try:
        settings: dict[str, Any] = {"queue_name": queue}
        if config.concurrency is not None:
            settings["max_workers"] = config.concurrency
        engine = rq.WorkerEngine(backend, **settings)

        @engine.activity(NOOP_TYPE)
        async def noop(payload: Any, ctx: rq.ActivityContext) -> None:
            probe.backlog.append(time.time() - ctx.enqueued_at)
            probe.count += 1
            if probe.count >= probe.target:
                probe.done.set()

        @engine.activity(IDLE_TYPE)
        async def idle(payload: Any, ctx: rq.ActivityContext) -> None:
            probe.record(payload)

        executor = engine.executor

        # 1. enqueue
        batch = [(NOOP_TYPE, None)] * min(config.batch_size, n)
        enqueued = 0
        report("enqueue", 0, n)
        t0 = time.perf_counter()
        while enqueued < n:
            size = min(config.batch_size, n - enqueued)
            await executor.enqueue_many(batch if size == len(batch) else batch[:size])
            enqueued += size
            report("enqueue", enqueued, n)
        enqueue_seconds = time.perf_counter() - t0

        # 2. drain
        report("drain", 0, n)
        t0 = time.perf_counter()
        await engine.start()
        try:
            deadline = t0 + config.drain_timeout
            while not probe.done.is_set():
                if time.perf_counter() > deadline:
                    raise RuntimeError(f"drain did not finish in {config.drain_timeout} s ({probe.count}/{n} ran)")
                try:
                    async with asyncio.timeout(0.1):
                        await probe.done.wait()
                except TimeoutError:
                    report("drain", probe.count, n)
            # every handler ran; the activity is done once its ack is flushed
            while engine.in_flight:
                if time.perf_counter() > deadline:
                    raise RuntimeError(f"acks of {engine.in_flight} activities were not flushed in time")
                await asyncio.sleep(0.0005)
            process_seconds = time.perf_counter() - t0
            report("drain", n, n)

            # 3. idle latency
            missed = typed_missed = due_missed = 0
            timeout, pause = config.probe_timeout, config.idle_interval
            if config.idle_samples:
                await asyncio.sleep(config.idle_settle)
                report("idle", 0, config.idle_samples)

                async def one(i: int, t: float) -> None:
                    await executor.activity(IDLE_TYPE).payload({"t": t}).execute()

                missed = await probe.run(one, config.idle_samples, timeout, pause,
                                         lambda done: report("idle", done, config.idle_samples))

            # 4. typed idle latency: a second engine, of another type, on the same queue
            typed: list[float] = []
            if config.typed_samples:
                probe.sink = typed
                typed_missed = await _typed_probes(config, backend, queue, settings, probe, executor, report)

            # 5. due latency
            due: list[float] = []
            if config.due_samples:
                probe.sink = due
                await asyncio.sleep(config.idle_settle)
                report("due", 0, config.due_samples)

                async def delayed(i: int, t: float) -> None:
                    at_ms = int((t + DUE_DELAYS[i % len(DUE_DELAYS)]) * 1000)  # the store keeps milliseconds
                    due_at = executor.activity(IDLE_TYPE).run_at((at_ms + 0.5) / 1000)  # stored as exactly at_ms
                    await due_at.payload({"t": at_ms / 1000}).execute()

                due_missed = await probe.run(delayed, config.due_samples, timeout + max(DUE_DELAYS), pause,
                                             lambda done: report("due", done, config.due_samples))
        finally:
            await engine.stop()

        stats = await backend.stats(queue)
        probes = config.idle_samples + config.typed_samples + config.due_samples
        completed_noop = stats.completed - (probes - missed - typed_missed - due_missed)
        if completed_noop != n:
            raise RuntimeError(f"backend reports {completed_noop} drained activities completed, expected {n}")
        return BenchResult(
            backend=backend.name,
            backend_url=redact_url(config.backend_url),
            queue_name=queue,
            n=n,
            batch_size=config.batch_size,
            concurrency=engine.config.max_workers,
            enqueue_seconds=round(enqueue_seconds, 6),
            enqueue_per_s=round(n / enqueue_seconds, 1),
            process_seconds=round(process_seconds, 6),
            process_per_s=round(n / process_seconds, 1),
            completed=completed_noop,
            backend_stats=msgspec.structs.asdict(stats),
            engine_stats=engine.stats,
            backlog_latency=summarize_latencies(probe.backlog),
            idle_latency=summarize_latencies(probe.idle, missed),
            typed_idle_latency=summarize_latencies(typed, typed_missed),
            due_latency=summarize_latencies(due, due_missed),
            engine_config=msgspec.to_builtins(engine.config),
            loop=_loop_name(),
            speedups_enabled=bool(speedups.enabled),
            python=platform.python_version(),
            implementation=platform.python_implementation(),
            platform=platform.platform(),
            machine=platform.machine(),
            cpu_count=os.cpu_count() or 0,
            version=rq.__version__,
            started_at=started_at,
        )
    finally:
        await backend.close()


async def _typed_probes(
    config: BenchConfig,
    backend: rq.Backend,
    queue: str,
    settings: dict[str, Any],
    probe: _Probe,
    executor: rq.ActivityExecutor,
    report: ProgressCallback,
) -> int:
    """Phase 4: start a second engine claiming only :data:`OTHER_TYPE`, probe both engines in turn.

    Returns the probes that did not start in time.
    """
    other_backend = backend if backend.name == "memory" else await rq.connect(config.backend_url)
    try:
        other = rq.WorkerEngine(other_backend, **settings)

        @other.activity(OTHER_TYPE)
        async def other_probe(payload: Any, ctx: rq.ActivityContext) -> None:
            probe.record(payload)

        await other.start()
        try:
            await asyncio.sleep(config.idle_settle)
            report("typed", 0, config.typed_samples)

            async def one(i: int, t: float) -> None:
                await executor.activity(OTHER_TYPE if i % 4 in (1, 2) else IDLE_TYPE).payload({"t": t}).execute()

            return await probe.run(one, config.typed_samples, config.probe_timeout, config.idle_interval,
                                   lambda done: report("typed", done, config.typed_samples))
        finally:
            await other.stop()
    finally:
        if other_backend is not backend:
            await other_backend.close()


def result_to_json(result: BenchResult | list[BenchResult]) -> bytes:
    """Pretty JSON (2-space indent, trailing newline) of one result or a list of them."""
    return msgspec.json.format(msgspec.json.encode(result), indent=2) + b"\n"
