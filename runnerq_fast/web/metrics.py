"""``GET /metrics``: the Prometheus text format, through prometheus-client.

Each app has its own :class:`prometheus_client.CollectorRegistry` (never the
global one) holding:

* the :class:`~runnerq_fast.metrics.prometheus.PrometheusMetrics` sink — the
  one passed to ``create_app(metrics=...)`` (share it with a
  ``WorkerEngine`` in the same process to serve the engine's counters and
  histograms), else the app's own, which counts what it enqueues;
* :class:`BackendGauges`: depth by status and the age of the oldest ready
  activity per queue, read from the backend at scrape time and cached for
  ``ttl`` seconds, so scrapes never hammer the store.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import Metric
from starlette.requests import Request
from starlette.responses import Response

from runnerq_fast.metrics.prometheus import PrometheusMetrics
from runnerq_fast.models import QueueStats
from runnerq_fast.web.context import WebContext

__all__ = ["DEPTH", "OLDEST_READY_AGE", "BackendGauges", "MetricsRoute"]

DEPTH = "runnerq_queue_depth"
OLDEST_READY_AGE = "runnerq_oldest_ready_age_seconds"
_STATUSES = tuple(QueueStats.__struct_fields__)

log = logging.getLogger("runnerq_fast.web")


class BackendGauges:
    """Gauges read from the backend: ``runnerq_queue_depth{queue,status}`` and
    ``runnerq_oldest_ready_age_seconds{queue}``.

    Parameters
    ----------
    ctx : WebContext
        The app (its backend and served queues).
    ttl : float
        Seconds a reading is reused. Default 2.
    """

    def __init__(self, ctx: WebContext, ttl: float = 2.0) -> None:
        self.ctx = ctx
        self.ttl = ttl
        self._read_at = -float("inf")
        self._depth: dict[str, QueueStats] = {}
        self._oldest_ready_ms: dict[str, int | None] = {}
        #: Backend readings made (for tests).
        self.readings = 0

    async def refresh(self) -> None:
        """Read the backend unless the last reading is younger than ``ttl``."""
        now = time.monotonic()
        if now - self._read_at < self.ttl:
            return
        backend = await self.ctx.backend()
        summaries = await backend.list_queues()
        wanted = self.ctx.queues
        depth: dict[str, QueueStats] = {}
        oldest: dict[str, int | None] = {}
        for s in summaries:
            if wanted is None or s.queue in wanted:
                depth[s.queue] = s.counts
                oldest[s.queue] = s.oldest_ready_ms
        for q in wanted or ():
            depth.setdefault(q, QueueStats())
            oldest.setdefault(q, None)
        self._depth, self._oldest_ready_ms = depth, oldest
        self._read_at = time.monotonic()
        self.readings += 1

    def clear(self) -> None:
        """Forget the last reading (the next scrape reads the backend)."""
        self._depth, self._oldest_ready_ms = {}, {}
        self._read_at = -float("inf")

    def describe(self) -> Iterator[Metric]:
        """The two families, without samples."""
        yield GaugeMetricFamily(DEPTH, "Activities of a queue in each status.", labels=["queue", "status"])
        yield GaugeMetricFamily(OLDEST_READY_AGE, "Age of the oldest activity ready to run, seconds.",
                                labels=["queue"])

    def collect(self) -> Iterator[Metric]:
        """The last reading as samples."""
        depth = GaugeMetricFamily(DEPTH, "Activities of a queue in each status.", labels=["queue", "status"])
        for queue, st in self._depth.items():
            for status in _STATUSES:
                depth.add_metric([queue, status], getattr(st, status))
        yield depth
        age = GaugeMetricFamily(OLDEST_READY_AGE, "Age of the oldest activity ready to run, seconds.",
                                labels=["queue"])
        now_ms = time.time() * 1000
        for queue, ms in self._oldest_ready_ms.items():
            age.add_metric([queue], 0.0 if ms is None else max(0.0, (now_ms - ms) / 1000.0))
        yield age


class MetricsRoute:
    """The ``/metrics`` endpoint of one app.

    Parameters
    ----------
    ctx : WebContext
        The app's state.
    sink : PrometheusMetrics
        The sink whose counters and histograms are served.
    gauge_ttl : float
        Seconds a backend gauge reading is reused.
    """

    def __init__(self, ctx: WebContext, sink: PrometheusMetrics, gauge_ttl: float = 2.0) -> None:
        self.sink = sink
        self.gauges = BackendGauges(ctx, gauge_ttl)
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(sink)
        self.registry.register(self.gauges)

    async def metrics(self, request: Request) -> Response:
        """``GET /metrics``: every metric in the Prometheus text format."""
        try:
            await self.gauges.refresh()
        except Exception as exc:  # serve the counters anyway; stale gauges would mislead
            log.warning("reading the backend for the gauges failed: %s: %s", type(exc).__name__, exc)
            self.gauges.clear()
        return Response(generate_latest(self.registry), media_type=CONTENT_TYPE_LATEST)
