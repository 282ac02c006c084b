"""The workload behind ``runnerq-fast demo``: a realistic mixed queue, end to end, in one process.

It needs nothing outside the installed package. By default it stores
everything in a SQLite file in the working directory
(:data:`DEFAULT_URL`, ``./runnerq-demo.db``); any backend URL works
(``postgresql://...``, ``redis://...``, ``memory://``) because only the public
API is used.

Each run uses a fresh queue, ``demo-<UTC time>-<random>``, so a second run in
the same file starts clean while the earlier runs stay inspectable.

The workload (``n`` activities in all, the children included):

* six activity types with different payload sizes and priorities: e-mails
  (about 0.3 KB, normal), payments (0.2 KB, high), fraud checks (0.2 KB,
  critical), image resizes (about 4 KB, low), inventory syncs (about 1 KB,
  normal) and reports (about 32 KB, low);
* about 1 % delayed by 0.5-2 s;
* :data:`CHAINS` chains of :data:`CHAIN_STEPS` steps, each step enqueueing
  the next as a child activity from inside its handler;
* about 5 % that fail on their first attempt and succeed on the retry;
* one poison activity that always fails and ends in dead letter after its
  retries.

The engine starts first and the activities are enqueued in batches while it
runs, so the latencies are those of a live system: enqueue→start is handler
start minus the time the activity became ready (creation, or creation plus
its delay), end-to-end is handler return minus the same time.

Interrupted (``run_demo(stop=...)``; the CLI sets it on Ctrl-C), a run stops
within about a second wherever it is: planning (in a thread, so the loop stays
responsive), enqueueing or draining. The engine gets a short grace and puts
what it held back to ``pending``; the report has ``interrupted=True`` and the
counts the queue was left with. :data:`engine` (``runnerq_fast.demo:engine``)
serves the demo's handlers, so ``runnerq-fast worker runnerq_fast.demo:engine
--queue <the run's queue>`` finishes an interrupted run.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import math
import os
import random
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar
from urllib.parse import urlsplit

import msgspec

import runnerq_fast as rq
from runnerq_fast.backends.sqlite import sqlite_path
from runnerq_fast.urls import redact_url

__all__ = [
    "CHAINS",
    "CHAIN_STEPS",
    "DEFAULT_N",
    "DEFAULT_URL",
    "MAX_N",
    "MIN_N",
    "STOP_GRACE",
    "DemoReport",
    "DemoWorkload",
    "plan_workload",
    "run_demo",
]

DEFAULT_URL = "sqlite:///runnerq-demo.db"
"""The demo's default backend: ``runnerq-demo.db`` in the working directory."""

DEFAULT_N = 10_000
"""Activities per run by default (children included)."""

CHAINS = 5
"""Chains of child activities per run."""

CHAIN_STEPS = 8
"""Steps per chain: the first is enqueued by the demo, every other one by its parent."""

MIN_N = 100
"""Smallest ``n`` that holds every part of the workload."""

MAX_N = 100_000
"""Largest ``n``: the whole workload is planned in memory before the first enqueue
(about 4 KB per activity on average), so a larger run would take gigabytes and
minutes before it even started."""

FLAKY_SHARE = 0.05
"""Share of activities that fail once and succeed on the retry."""

DELAYED_SHARE = 0.01
"""Share of activities started 0.5-2 s after they are enqueued."""

POISON_RETRIES = 2
"""Retries of the poison activity before it is dead-lettered."""

STOP_GRACE = 0.5
"""Seconds the handlers running when a run is interrupted get to finish (the demo's take milliseconds)."""

ProgressCallback = Callable[[int, int], None]
"""``progress(finished, total)``, called a few times per second."""

_T = TypeVar("_T")

# (type, share, priority, approximate payload bytes)
_MIX: tuple[tuple[str, float, rq.Priority, int], ...] = (
    ("send_email", 0.40, rq.Priority.NORMAL, 300),
    ("charge_payment", 0.15, rq.Priority.HIGH, 200),
    ("fraud_check", 0.10, rq.Priority.CRITICAL, 200),
    ("resize_image", 0.20, rq.Priority.LOW, 4_000),
    ("sync_inventory", 0.13, rq.Priority.NORMAL, 1_000),
    ("generate_report", 0.02, rq.Priority.LOW, 32_000),
)
_TERMINAL = ("completed", "failed", "dead_letter", "cancelled")
_FILLER = "".join(random.Random(42).choices("abcdefghijklmnopqrstuvwxyz0123456789", k=65_536))
"""Text that payloads slice their filler from (making it per payload costs seconds per run)."""
_ENQUEUE_BATCH = 250


class DemoWorkload(msgspec.Struct, frozen=True):
    """What one run enqueues (before children).

    Attributes
    ----------
    items : list of tuple
        ``(activity_type, payload, priority, delay_seconds, max_retries)``
        per top-level activity, in enqueue order.
    total : int
        Activities the run ends with, children included.
    """

    items: list[tuple[str, dict[str, Any], int, float, int]]
    total: int


class DemoReport(msgspec.Struct, kw_only=True):
    """The outcome of one demo run.

    Times are in seconds unless a name ends in ``_ms`` (milliseconds).

    Attributes
    ----------
    backend_url : str
        The backend used (password removed).
    backend_name : str
        ``"sqlite"``, ``"postgresql"``, ...
    location : str
        Where the data lives (the SQLite file's absolute path, else the URL).
    queue : str
        The run's fresh queue name.
    total : int
        Activities expected (children included).
    stats : QueueStats
        Counts by status at the end.
    seconds : float
        From the first enqueue until every activity ended.
    drain_seconds : float
        From the first enqueue until the last activity that was not delayed
        finished; ``throughput`` divides by it.
    throughput : float
        Activities that were not delayed, completed per second over
        ``drain_seconds``.
    start_p50_ms, start_p99_ms : float
        Enqueue→start latency (handler start minus ready time), milliseconds.
    e2e_p50_ms, e2e_p99_ms : float
        End-to-end latency (handler return minus ready time), milliseconds.
    retries : int
        Attempts that were retries.
    dead_letter_id : str or None
        Id of the poison activity (dead-lettered).
    retried_id : str or None
        Id of one activity that failed once and then succeeded.
    chain_ids : list of str
        Ids of one chain's steps, in order.
    timed_out : bool
        The run stopped at its timeout before every activity ended.
    interrupted : bool
        The run was stopped (``stop`` set: Ctrl-C in the CLI) before every
        activity ended; ``stats`` are the counts it left in the queue.
    reused_file : bool or None
        For SQLite, whether the file existed before this run (``None`` for
        other backends).
    """

    backend_url: str
    backend_name: str
    location: str
    queue: str
    total: int
    stats: rq.QueueStats
    seconds: float
    drain_seconds: float
    throughput: float
    start_p50_ms: float
    start_p99_ms: float
    e2e_p50_ms: float
    e2e_p99_ms: float
    retries: int
    dead_letter_id: str | None
    retried_id: str | None
    chain_ids: list[str]
    timed_out: bool
    interrupted: bool = False
    reused_file: bool | None = None

    @property
    def unfinished(self) -> int:
        """Activities stored and not finished (pending, scheduled, retrying or processing)."""
        s = self.stats
        return s.pending + s.scheduled + s.retrying + s.processing

    @property
    def succeeded(self) -> bool:
        """Every activity completed except the poison one, which is dead-lettered."""
        s = self.stats
        return (
            not self.timed_out
            and not self.interrupted
            and s.dead_letter == 1
            and s.completed == self.total - 1
            and s.failed == 0
            and s.total == self.total
        )


def plan_workload(n: int, seed: int = 0) -> DemoWorkload:
    """Build the top-level activities of a run of ``n`` activities.

    Parameters
    ----------
    n : int
        Activities in all, children included; from :data:`MIN_N` to :data:`MAX_N`.
    seed : int
        Seed of the pseudo-random mix (same seed, same workload).

    Returns
    -------
    DemoWorkload

    Raises
    ------
    ValueError
        If ``n`` is smaller than :data:`MIN_N` or larger than :data:`MAX_N`.
    """
    if n < MIN_N:
        raise ValueError(f"the demo needs at least {MIN_N} activities, got {n}")
    if n > MAX_N:
        raise ValueError(f"the demo runs at most {MAX_N} activities, got {n}")
    rng = random.Random(seed)
    items: list[tuple[str, dict[str, Any], int, float, int]] = []
    for c in range(CHAINS):
        items.append(("chain_step", {"chain": c, "step": 0, "steps": CHAIN_STEPS}, rq.Priority.HIGH, 0.0, 3))
    items.append(("ingest_feed", {"feed": "partner-7", "poison": True, "raw": "\x7fNOT-JSON\x7f"},
                  rq.Priority.NORMAL, 0.0, POISON_RETRIES))
    plain = n - CHAINS * CHAIN_STEPS - 1
    weights = [m[1] for m in _MIX]
    for i in range(plain):
        name, _, priority, size = rng.choices(_MIX, weights)[0]
        payload = _payload(name, i, size, rng)
        if rng.random() < FLAKY_SHARE:
            payload["flaky"] = True
        delay = 0.0
        if rng.random() < DELAYED_SHARE:
            delay = round(rng.uniform(0.5, 2.0), 3)
            payload["delay_s"] = delay
        items.append((name, payload, int(priority), delay, 3))
    # the poison and the chain heads go in with the first batch; shuffle the rest a little
    head, rest = items[: CHAINS + 1], items[CHAINS + 1 :]
    rng.shuffle(rest)
    return DemoWorkload(head + rest, n)


def _payload(name: str, i: int, size: int, rng: random.Random) -> dict[str, Any]:
    if name == "send_email":
        return {"to": f"customer{i}@example.com", "template": "order-shipped",
                "vars": {"order": f"A-{100000 + i}", "name": f"Customer {i}", "carrier": "UPS"}}
    if name == "charge_payment":
        return {"order": f"A-{100000 + i}", "amount_cents": rng.randint(500, 50_000), "currency": "EUR",
                "card": "tok_visa"}
    if name == "fraud_check":
        return {"order": f"A-{100000 + i}", "ip": f"10.0.{i % 256}.{(i * 7) % 256}", "score_model": "v3"}
    n = max(0, size - 120)
    start = rng.randrange(len(_FILLER) - n)
    filler = _FILLER[start : start + n]
    if name == "resize_image":
        return {"image": f"img-{i}.jpg", "sizes": [64, 256, 1024], "exif": filler}
    if name == "sync_inventory":
        return {"warehouse": f"wh-{i % 12}", "skus": [f"SKU-{(i * 31 + k) % 9999:04d}" for k in range(20)],
                "note": filler[:600]}
    rows = [{"day": d, "orders": rng.randint(0, 999), "revenue": rng.randint(0, 10**6)} for d in range(size // 40)]
    return {"report": f"daily-{i}", "rows": rows}


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1))
    return ordered[k]


def _location(backend: rq.Backend, url: str) -> str:
    path = getattr(backend, "path", None)
    if backend.name == "sqlite" and isinstance(path, str):
        return os.path.abspath(path)
    return redact_url(url)


class _Recorder:
    """Latencies and ids collected by the handlers (all on the event loop)."""

    def __init__(self) -> None:
        self.start_ms: list[float] = []
        self.e2e_ms: list[float] = []
        self.retries = 0
        self.retried_id: str | None = None
        self.chain: dict[int, str] = {}
        self.last_undelayed_end = 0.0
        self.undelayed_done = 0
        #: Activities whose last attempt has run (completed, or the poison's final failure).
        self.finished = 0

    def started(self, ctx: rq.ActivityContext, payload: Any) -> float:
        now = time.time()
        ready = ctx.enqueued_at + float(payload.get("delay_s", 0.0) if isinstance(payload, dict) else 0.0)
        if ctx.retry_count == 0:
            self.start_ms.append(max(0.0, now - ready) * 1000.0)
        else:
            self.retries += 1
        return ready

    def ended(self, ready: float, payload: Any) -> None:
        now = time.time()
        self.e2e_ms.append(max(0.0, now - ready) * 1000.0)
        self.finished += 1
        if not (isinstance(payload, dict) and "delay_s" in payload):
            self.last_undelayed_end = max(self.last_undelayed_end, now)
            self.undelayed_done += 1


def _register(engine: rq.WorkerEngine, rec: _Recorder) -> None:
    async def run(ctx: rq.ActivityContext, payload: Any, work: Callable[[], Any]) -> Any:
        ready = rec.started(ctx, payload)
        if isinstance(payload, dict) and payload.get("flaky") and ctx.retry_count == 0:
            raise rq.RetryableError("upstream timed out (simulated, succeeds on retry)", retry_after=0.05)
        if isinstance(payload, dict) and payload.get("flaky"):
            rec.retried_id = rec.retried_id or ctx.activity_id
        value = work()
        if asyncio.iscoroutine(value):
            value = await value
        rec.ended(ready, payload)
        return value

    @engine.activity("send_email")
    async def send_email(payload: Any, ctx: rq.ActivityContext) -> Any:
        async def io() -> dict[str, str]:
            await asyncio.sleep(0.001)  # an SMTP round trip, much shortened
            return {"message_id": f"<{ctx.activity_id[:12]}@mail.example.com>"}

        return await run(ctx, payload, io)

    @engine.activity("charge_payment")
    async def charge_payment(payload: Any, ctx: rq.ActivityContext) -> Any:
        return await run(ctx, payload, lambda: {"charged": payload["amount_cents"], "status": "captured"})

    @engine.activity("fraud_check")
    async def fraud_check(payload: Any, ctx: rq.ActivityContext) -> Any:
        score = int(hashlib.blake2b(payload["ip"].encode(), digest_size=2).hexdigest(), 16) % 100
        return await run(ctx, payload, lambda: {"score": score, "verdict": "ok" if score < 95 else "review"})

    @engine.activity("resize_image")
    async def resize_image(payload: Any, ctx: rq.ActivityContext) -> Any:
        def resize() -> dict[str, Any]:
            digest = hashlib.sha256(payload["exif"].encode()).hexdigest()[:16]
            return {"variants": [f"{payload['image']}@{s}-{digest}" for s in payload["sizes"]]}

        return await run(ctx, payload, resize)

    @engine.activity("sync_inventory")
    async def sync_inventory(payload: Any, ctx: rq.ActivityContext) -> Any:
        return await run(ctx, payload, lambda: {"synced": len(payload["skus"])})

    @engine.activity("generate_report")
    async def generate_report(payload: Any, ctx: rq.ActivityContext) -> Any:
        def total() -> dict[str, int]:
            rows = payload["rows"]
            return {"rows": len(rows), "revenue": sum(r["revenue"] for r in rows)}

        return await run(ctx, payload, total)

    @engine.activity("chain_step")
    async def chain_step(payload: Any, ctx: rq.ActivityContext) -> Any:
        async def step() -> dict[str, Any]:
            if payload["chain"] == 0:
                rec.chain[payload["step"]] = ctx.activity_id
            nxt = payload["step"] + 1
            if nxt < payload["steps"]:
                child = await (ctx.executor.activity("chain_step").payload({**payload, "step": nxt})
                               .priority(rq.Priority.HIGH).execute())
                return {"step": payload["step"], "next": child.activity_id}
            return {"step": payload["step"], "next": None}

        return await run(ctx, payload, step)

    @engine.activity("ingest_feed")
    async def ingest_feed(payload: Any, ctx: rq.ActivityContext) -> Any:
        rec.started(ctx, payload)
        if ctx.retry_count >= ctx.max_retries:
            rec.finished += 1  # this attempt's failure dead-letters it
        raise ValueError(f"feed {payload['feed']!r}: record is not valid JSON: {payload['raw']!r}")


async def run_demo(
    url: str = DEFAULT_URL,
    n: int = DEFAULT_N,
    *,
    concurrency: int = 128,
    timeout: float = 120.0,
    progress: ProgressCallback | None = None,
    seed: int | None = None,
    stop: asyncio.Event | None = None,
) -> DemoReport:
    """Run the demo workload on ``url`` and report what happened.

    Parameters
    ----------
    url : str
        Backend URL. Default :data:`DEFAULT_URL` (a SQLite file in the
        working directory, created if missing).
    n : int
        Activities in all, children included. Default :data:`DEFAULT_N`.
    concurrency : int
        The engine's ``max_workers``. Default 128.
    timeout : float
        Longest the run may take, seconds; the report then has
        ``timed_out=True``. Default 120 s.
    progress : callable, optional
        ``progress(finished, total)``, called about five times per second.
    seed : int, optional
        Seed of the workload mix; default: a random one.
    stop : asyncio.Event, optional
        Set it to end the run early (the CLI sets it on Ctrl-C): within about
        a second the engine stops (handlers get :data:`STOP_GRACE` seconds,
        what it held goes back to ``pending``) and the report, with
        ``interrupted=True``, counts what the queue was left with.

    Returns
    -------
    DemoReport

    Raises
    ------
    ValueError
        If ``n`` is below :data:`MIN_N` or above :data:`MAX_N`.
    ConfigError
        If the URL is not usable (bad scheme, missing directory, ...).
    BackendError
        If the backend cannot be reached.
    """
    if not MIN_N <= n <= MAX_N:
        plan_workload(n)  # the ValueError, before anything is opened
    stop = asyncio.Event() if stop is None else stop
    queue = f"demo-{datetime.now(UTC):%Y%m%d-%H%M%S}-{uuid.uuid4().hex[:6]}"
    existed: bool | None = None
    if urlsplit(url).scheme.lower() == "sqlite":
        existed = os.path.isfile(sqlite_path(url))
    backend = await rq.connect(url)
    try:
        # planning 100,000 activities takes seconds of CPU: off the loop, so that a stop is seen at once
        workload = await _until_stopped(_in_thread(plan_workload, n, random.randrange(2**32) if seed is None
                                                   else seed), stop)
        if workload is None:
            report = DemoReport(backend_url=redact_url(url), backend_name=backend.name,
                                location=_location(backend, url), queue=queue, total=n, stats=rq.QueueStats(),
                                seconds=0.0, drain_seconds=0.0, throughput=0.0, start_p50_ms=0.0,
                                start_p99_ms=0.0, e2e_p50_ms=0.0, e2e_p99_ms=0.0, retries=0, dead_letter_id=None,
                                retried_id=None, chain_ids=[], timed_out=False, interrupted=True)
        else:
            report = await _run(backend, url, queue, workload, concurrency, timeout, progress, stop)
    finally:
        await backend.close()
    report.reused_file = existed
    return report


def _in_thread(fn: Callable[..., _T], *args: Any) -> asyncio.Future[_T]:
    """``fn(*args)`` in a daemon thread: a stopped run neither waits for it nor keeps the process alive for it
    (the loop's default executor would do both)."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[_T] = loop.create_future()

    def settle(value: _T | None, exc: BaseException | None) -> None:
        if fut.done():
            return
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(value)  # type: ignore[arg-type]

    def work() -> None:
        value: _T | None = None
        error: BaseException | None = None
        try:
            value = fn(*args)
        except BaseException as exc:  # handed to the awaiting coroutine
            error = exc
        with contextlib.suppress(RuntimeError):  # the loop is closed: the run was stopped and has ended
            loop.call_soon_threadsafe(settle, value, error)

    threading.Thread(target=work, name="runnerq-demo-plan", daemon=True).start()
    return fut


async def _until_stopped(fut: asyncio.Future[_T], stop: asyncio.Event) -> _T | None:
    """``fut``'s value, or ``None`` as soon as ``stop`` is set."""
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait((fut, stopped), return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
    if fut.done():
        return fut.result()
    fut.cancel()
    return None


async def _run(
    backend: rq.Backend,
    url: str,
    queue: str,
    workload: DemoWorkload,
    concurrency: int,
    timeout: float,
    progress: ProgressCallback | None,
    stop: asyncio.Event,
) -> DemoReport:
    engine = rq.WorkerEngine(
        backend, queue_name=queue, max_workers=concurrency, retry_delay=0.05, max_retry_delay=0.2,
        poll_interval=0.25, lease_timeout=30.0,
    )
    rec = _Recorder()
    _register(engine, rec)
    inspector = engine.inspector()
    total = workload.total
    timed_out = False
    dead_id: str | None = None
    async with engine:
        t0 = time.time()
        ex = engine.executor
        for start in range(0, len(workload.items), _ENQUEUE_BATCH):
            if stop.is_set():
                break
            batch = []
            for name, payload, priority, delay, retries in workload.items[start : start + _ENQUEUE_BATCH]:
                b = ex.activity(name).payload(payload).priority(priority).max_retries(retries)
                if delay:
                    b = b.delay(delay)
                batch.append(b)
            ids = await ex.enqueue_many(batch)
            if start == 0:
                dead_id = ids[CHAINS]  # the poison activity follows the chain heads
            await asyncio.sleep(0)  # let the engine run between batches
        deadline = time.monotonic() + timeout
        # Progress comes from the handlers (no query per tick, so the store's
        # size does not matter); the backend's own counts confirm the end once
        # every activity has had its last attempt and the acks are flushed.
        while not stop.is_set():
            if progress is not None:
                progress(min(rec.finished, total), total)
            if rec.finished >= total:
                stats = await inspector.stats()
                if sum(getattr(stats, s) for s in _TERMINAL) >= total:
                    break
            if time.monotonic() > deadline:
                timed_out = True
                break
            await asyncio.sleep(0.1)
        seconds = time.time() - t0
        if stop.is_set():
            engine.request_stop(grace=STOP_GRACE)  # what it held goes back to pending as it stops
    stats = await inspector.stats()
    end = rec.last_undelayed_end or (t0 + seconds)
    drain = max(end - t0, 1e-9)
    return DemoReport(
        backend_url=redact_url(url),
        backend_name=backend.name,
        location=_location(backend, url),
        queue=queue,
        total=total,
        stats=stats,
        seconds=seconds,
        drain_seconds=drain,
        throughput=rec.undelayed_done / drain,
        start_p50_ms=_percentile(rec.start_ms, 0.50),
        start_p99_ms=_percentile(rec.start_ms, 0.99),
        e2e_p50_ms=_percentile(rec.e2e_ms, 0.50),
        e2e_p99_ms=_percentile(rec.e2e_ms, 0.99),
        retries=rec.retries,
        dead_letter_id=dead_id,
        retried_id=rec.retried_id,
        chain_ids=[rec.chain[k] for k in sorted(rec.chain)],
        timed_out=timed_out,
        interrupted=stop.is_set() and not (rec.finished >= total and stats.total == total
                                            and sum(getattr(stats, s) for s in _TERMINAL) >= total),
    )


_engine: rq.WorkerEngine | None = None


def __getattr__(name: str) -> Any:
    """``engine``: a worker of the demo's handlers (made at first use), for ``runnerq-fast worker
    runnerq_fast.demo:engine --backend URL --queue QUEUE`` to finish an interrupted run's queue."""
    global _engine
    if name != "engine":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if _engine is None:
        _engine = rq.WorkerEngine(None, queue_name="demo", max_workers=128, retry_delay=0.05, max_retry_delay=0.2)
        _register(_engine, _Recorder())
    return _engine
