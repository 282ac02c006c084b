"""The dashboard routes: ``GET /api/v1/workers`` and ``GET /api/v1/queues/{queue}/dashboard``.

Where the figures come from, so that no request reads every row of a queue:

* **throughput and queue wait**: a rolling series the app keeps per queue
  from the queue's live event stream (:class:`QueueSeries`), in
  :data:`BUCKET_SECONDS` buckets over the last :data:`WINDOW_SECONDS`. It
  counts ``completed`` and ``failed``/``dead_letter`` events as they pass, and
  keeps a random sample of at most :data:`WAIT_SAMPLE` ``claimed`` events per
  bucket; the wait of a sampled claim (claim time minus ready time) is read
  with one bounded id lookup when the dashboard is next built. The store is
  never scanned for history; the series begins when the app starts watching
  the queue (at app start for the queues given to ``create_app(queues=...)``,
  else at the queue's first dashboard request) and lives as long as the app.
* **counts by status**: :meth:`~runnerq_fast.storage.Backend.stats`;
  **unhandled types and the oldest ready age**:
  :meth:`~runnerq_fast.storage.Backend.ready_work` (reads the backlog only)
  and :meth:`~runnerq_fast.storage.Backend.list_workers`.

The whole dashboard of a queue is built at most once per ``ttl`` (default
1 s) however many pages poll it or events flow: concurrent requests share
one build. A build that takes long (``stats`` counts every row of a queue on
the SQL backends: about half a second at a million rows) is reused for
:data:`BUILD_SHARE` times its duration if that is longer, so the dashboard
keeps the store busy for at most a tenth of the time.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
import time
from collections import deque
from datetime import UTC, datetime

from starlette.requests import Request
from starlette.responses import Response

from runnerq_fast.filters import MAX_PAGE
from runnerq_fast.models import ActivityEvent, ActivityFilter
from runnerq_fast.observability.workers import unhandled_types
from runnerq_fast.storage import Backend
from runnerq_fast.web.context import WebContext
from runnerq_fast.web.responses import JsonResponse
from runnerq_fast.web.wire import (
    DashboardView,
    SeriesPoint,
    UnhandledTypeView,
    WorkersResponse,
    ms_to_datetime,
    worker_view,
)

__all__ = [
    "BUCKET_SECONDS", "BUILD_SHARE", "WAIT_SAMPLE", "WINDOW_SECONDS", "DashboardRoutes", "QueueSeries", "percentile",
]

log = logging.getLogger("runnerq_fast.web")

BUCKET_SECONDS = 10
"""Length of one series bucket, seconds."""

WINDOW_SECONDS = 900
"""How far back the series reaches, seconds (15 minutes)."""

BUILD_SHARE = 10
"""A dashboard is reused for at least this many times as long as it took to build."""

WAIT_SAMPLE = 64
"""Most claims per bucket whose queue wait is measured (a uniform random sample of the bucket's claims)."""

_FAILED = frozenset({"failed", "dead_letter"})


def percentile(sorted_values: list[float], q: float) -> float:
    """The ``q`` quantile (0-1) of non-empty ascending ``sorted_values``: the nearest-rank value,
    the smallest one with at least ``q`` of the values at or below it."""
    rank = max(1, min(len(sorted_values), math.ceil(q * len(sorted_values))))
    return sorted_values[rank - 1]


class _Bucket:
    __slots__ = ("claims", "completed", "failed", "seen_claims", "start_ms", "waits")

    def __init__(self, start_ms: int) -> None:
        self.start_ms = start_ms
        self.completed = 0
        self.failed = 0
        self.seen_claims = 0
        self.claims: list[tuple[str, int]] = []  # sampled (activity id, claim time ms), not yet measured
        self.waits: list[float] = []  # measured waits of sampled claims, seconds


class QueueSeries:
    """Completed, failed and queue-wait figures of one queue, bucketed, fed by events.

    Parameters
    ----------
    bucket_seconds : int
        Bucket length, seconds. Default :data:`BUCKET_SECONDS`.
    window_seconds : int
        Buckets older than this are dropped, seconds. Default :data:`WINDOW_SECONDS`.
    wait_sample : int
        Most claims per bucket kept for measuring the wait. Default :data:`WAIT_SAMPLE`.
    """

    def __init__(
        self,
        bucket_seconds: int = BUCKET_SECONDS,
        window_seconds: int = WINDOW_SECONDS,
        wait_sample: int = WAIT_SAMPLE,
    ) -> None:
        if bucket_seconds < 1 or window_seconds < bucket_seconds or wait_sample < 1:
            raise ValueError("bucket_seconds >= 1, window_seconds >= bucket_seconds and wait_sample >= 1 are needed")
        self.bucket_ms = bucket_seconds * 1000
        self.size = window_seconds // bucket_seconds
        self.wait_sample = wait_sample
        self.started_ms = self._align(int(time.time() * 1000))
        self._buckets: deque[_Bucket] = deque()
        self._random = random.Random()

    def _align(self, ms: int) -> int:
        return ms - ms % self.bucket_ms

    def _bucket(self, at_ms: int) -> _Bucket | None:
        start = self._align(at_ms)
        buckets = self._buckets
        if buckets and buckets[-1].start_ms == start:
            return buckets[-1]
        if not buckets or start > buckets[-1].start_ms:
            buckets.append(_Bucket(start))
            while len(buckets) > self.size or buckets[0].start_ms <= start - self.size * self.bucket_ms:
                buckets.popleft()
            return buckets[-1]
        for b in reversed(buckets):  # a late event (clocks of several writers): its own bucket, if kept
            if b.start_ms == start:
                return b
        return None

    def add(self, ev: ActivityEvent) -> None:
        """Count one event of the queue (other kinds than completed, failed, dead_letter, claimed are ignored)."""
        kind = ev.event_type
        if kind == "completed":
            b = self._bucket(ev.at_ms)
            if b is not None:
                b.completed += 1
        elif kind in _FAILED:
            b = self._bucket(ev.at_ms)
            if b is not None:
                b.failed += 1
        elif kind == "claimed":
            b = self._bucket(ev.at_ms)
            if b is not None:
                b.seen_claims += 1
                if len(b.claims) + len(b.waits) < self.wait_sample:
                    b.claims.append((ev.activity_id, ev.at_ms))
                else:  # reservoir sampling: every claim of the bucket equally likely to be measured
                    j = self._random.randrange(b.seen_claims)
                    if j < len(b.claims):
                        b.claims[j] = (ev.activity_id, ev.at_ms)

    def unmeasured(self) -> list[tuple[str, int]]:
        """Sampled claims whose wait is not measured yet, oldest bucket first."""
        return [c for b in self._buckets for c in b.claims]

    def measure(self, looked_up: set[str], ready_at_ms: dict[str, int]) -> None:
        """Turn the sampled claims of the activities ``looked_up`` into waits, given their ready times.

        A claim whose activity was not found (deleted), or whose ready time is
        now after the claim (it was retried since), is dropped unmeasured;
        claims of activities not looked up stay for the next call.
        """
        for b in self._buckets:
            keep: list[tuple[str, int]] = []
            for aid, at_ms in b.claims:
                if aid not in looked_up:
                    keep.append((aid, at_ms))
                    continue
                ready = ready_at_ms.get(aid)
                if ready is not None and ready <= at_ms:
                    b.waits.append((at_ms - ready) / 1000.0)
            b.claims = keep

    def points(self, now_ms: int | None = None) -> list[SeriesPoint]:
        """One point per bucket from the later of the watch start and the window start up to now, oldest first."""
        now = self._align(int(time.time() * 1000) if now_ms is None else now_ms)
        first = max(self.started_ms, now - (self.size - 1) * self.bucket_ms)
        have = {b.start_ms: b for b in self._buckets}
        out: list[SeriesPoint] = []
        for start in range(first, now + 1, self.bucket_ms):
            b = have.get(start)
            if b is None:
                out.append(SeriesPoint(ms_to_datetime(start), 0, 0, None, None))
                continue
            waits = sorted(b.waits)
            p50 = percentile(waits, 0.5) if waits else None
            p95 = percentile(waits, 0.95) if waits else None
            out.append(SeriesPoint(ms_to_datetime(start), b.completed, b.failed, p50, p95))
        return out


MAX_WATCHES = 16
"""Queues whose event streams one app follows at once for dashboard series (served queues excepted)."""

WATCH_IDLE = 600.0
"""Seconds after its last dashboard request that a queue's watch stops (its series is dropped)."""


class _Watch:
    """The series of one queue and the task feeding it from the event stream."""

    def __init__(self, series: QueueSeries, task: asyncio.Task[None]) -> None:
        self.series = series
        self.task = task
        self.used = time.monotonic()  # last dashboard request (monotonic seconds)
        self.pinned = False  # a served queue (watched from app start): never evicted
        self.view: DashboardView | None = None
        self.fresh_until = -float("inf")  # monotonic time until which ``view`` is served
        self.lock = asyncio.Lock()


class DashboardRoutes:
    """The worker and dashboard routes of one app.

    Parameters
    ----------
    ctx : WebContext
        The app's state.
    ttl : float
        Seconds a queue's dashboard is reused. Default 1.

    Raises
    ------
    ValueError
        If ``ttl`` is negative or not a number.
    """

    def __init__(self, ctx: WebContext, ttl: float = 1.0) -> None:
        if not ttl >= 0:
            raise ValueError(f"dashboard_ttl must be >= 0 seconds, got {ttl!r}")
        self.ctx = ctx
        self.ttl = ttl
        self._watches: dict[str, _Watch] = {}
        #: Dashboards built from the backend (for tests: the cache holds).
        self.builds = 0

    async def watch_served(self) -> None:
        """Begin the series of every queue the app serves now (at app start), not at its first request.

        An app serving any queue (``queues=None``) watches each queue from its
        first dashboard request instead.
        """
        if self.ctx.queues is None:
            return
        backend = await self.ctx.backend()
        for queue in self.ctx.queues:
            self._watch(backend, queue, pin=True)

    async def close(self) -> None:
        """Stop watching every queue's events."""
        tasks = [w.task for w in self._watches.values()]
        self._watches.clear()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def workers(self, request: Request) -> Response:
        """``GET /api/v1/workers``: the live workers of ``?queue=``, or of every served queue."""
        name = request.query_params.get("queue")
        backend = await self.ctx.backend()
        if name is not None:  # "?queue=" names the default queue, as on every route; omit it for every queue
            found = await backend.list_workers(self.ctx.queue(name))
        else:
            served = self.ctx.queues
            found = [w for w in await backend.list_workers() if served is None or w.queue in served]
        return JsonResponse(WorkersResponse([worker_view(w) for w in found]))

    async def dashboard(self, request: Request) -> Response:
        """``GET /api/v1/queues/{queue}/dashboard``: counts, series, unhandled types, workers (cached ~1 s)."""
        queue = self.ctx.queue(request.path_params["queue"])
        backend = await self.ctx.backend()
        watch = self._watch(backend, queue)
        async with watch.lock:
            if watch.view is None or time.monotonic() >= watch.fresh_until:
                began = time.monotonic()
                watch.view = await self._build(backend, queue, watch.series)
                done = time.monotonic()
                watch.fresh_until = done + max(self.ttl, BUILD_SHARE * (done - began))
            view = watch.view
        return JsonResponse(view)

    def _watch(self, backend: Backend, queue: str, *, pin: bool = False) -> _Watch:
        """The watch of ``queue``, started if needed.

        At most :data:`MAX_WATCHES` queues are followed at once (each holds a
        stream read, a connection on Redis): asking for another evicts the
        watch least recently asked for, and a watch nobody asked for in
        :data:`WATCH_IDLE` seconds stops. Watches of served queues (``pin``)
        stay. Unauthenticated GETs for many made-up names so cost a bounded
        number of connections.
        """
        now = time.monotonic()
        watch = self._watches.get(queue)
        if watch is None or watch.task.done():
            self._evict(now)
            series = QueueSeries() if watch is None else watch.series
            task = asyncio.create_task(self._follow(backend, queue, series), name=f"runnerq-dashboard-{queue}")
            pinned = pin or (watch is not None and watch.pinned)
            watch = self._watches[queue] = _Watch(series, task)
            watch.pinned = pinned
        watch.used = now
        return watch

    def _evict(self, now: float) -> None:
        """Stop idle watches, then the least recently used ones, leaving room for one more."""
        for name, w in list(self._watches.items()):
            if not w.pinned and now - w.used > WATCH_IDLE:
                w.task.cancel()
                del self._watches[name]
        unpinned = sorted((w.used, name) for name, w in self._watches.items() if not w.pinned)
        while len(self._watches) >= MAX_WATCHES and unpinned:
            _, name = unpinned.pop(0)
            self._watches.pop(name).task.cancel()

    @property
    def watching(self) -> int:
        """How many queues' event streams are followed now (running watch tasks)."""
        return sum(1 for w in self._watches.values() if not w.task.done())

    async def _follow(self, backend: Backend, queue: str, series: QueueSeries) -> None:
        """Feed ``series`` from the queue's live events until cancelled; resume after a stream error."""
        last: int | None = None
        while not self.ctx.shutting_down.is_set():
            try:
                async for ev in backend.event_stream(queue, last):
                    last = ev.id
                    series.add(ev)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("dashboard event stream of %r failed (%s: %s); resuming in 1 s", queue,
                            type(exc).__name__, exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.ctx.shutting_down.wait(), 1.0)

    async def _build(self, backend: Backend, queue: str, series: QueueSeries) -> DashboardView:
        self.builds += 1
        pending = series.unmeasured()
        if pending:
            ids = tuple(dict.fromkeys(aid for aid, _ in pending))[:MAX_PAGE]
            page = await backend.query_activities(queue, ActivityFilter(ids=ids), limit=len(ids))
            series.measure(set(ids), {s.id: s.ready_at_ms for s in page.items})
        counts = await backend.stats(queue)
        ready = await backend.ready_work(queue)
        workers = await backend.list_workers(queue)
        now = datetime.now(UTC)
        now_ms = int(now.timestamp() * 1000)
        oldest = ready.oldest_ready_ms
        return DashboardView(
            queue=queue,
            counts=counts,
            total=counts.total,
            oldest_ready_age=None if oldest is None else max(0.0, (now_ms - oldest) / 1000.0),
            bucket_seconds=series.bucket_ms // 1000,
            window_seconds=series.size * series.bucket_ms // 1000,
            series=series.points(now_ms),
            unhandled_types=[UnhandledTypeView(u.activity_type, u.ready) for u in unhandled_types(ready, workers)],
            workers=len(workers),
            generated_at=now,
        )
