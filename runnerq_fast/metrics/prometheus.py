"""The Prometheus sink: :class:`PrometheusMetrics`.

The engine's per-activity calls only add to plain dicts and lists in this
process (no locks, no prometheus-client objects on the hot path); the
numbers become Prometheus metric families when a registry collects them
(``collect()``, the prometheus-client custom-collector protocol). So
prometheus-client is imported only at the first scrape, not with
``runnerq_fast``.

**Several processes.** When ``PROMETHEUS_MULTIPROC_DIR`` is set (as the
supervisor of ``runnerq-fast worker --processes N`` does for its children),
prometheus-client's multiprocess mode is the only way values leave the
process: the sink then also adds what it records to ordinary
prometheus-client counters and histograms (backed by that directory's
files), at the engine's batched calls, and its own ``collect()`` yields
nothing, so a ``MultiProcessCollector`` over the directory counts every
process once.

Labels are those of :data:`runnerq_fast.metrics.LABELS`. A metric that sees
more than ``max_label_sets`` distinct label sets (a client enqueueing
thousands of made-up activity types, say) records the rest under the values
``_other``, so a series count never grows without bound.
"""

from __future__ import annotations

import logging
import os
from bisect import bisect_left
from collections.abc import Iterator, Sequence
from itertools import pairwise
from math import fsum
from typing import TYPE_CHECKING, Any

from runnerq_fast.metrics import COUNTERS, HELP, HISTOGRAMS, LABELS

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric
    from prometheus_client.registry import CollectorRegistry

__all__ = ["DEFAULT_BUCKETS", "MULTIPROC_ENV", "OTHER", "PrometheusMetrics"]

log = logging.getLogger("runnerq_fast.metrics")

DEFAULT_BUCKETS: tuple[float, ...] = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
    1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0,
)  # fmt: skip
"""Histogram bucket bounds in seconds: 0.5 ms to 30 min."""

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
"""Set: prometheus-client's multiprocess mode (the sink writes through its files)."""

OTHER = "_other"
"""Label value standing for every label set beyond ``max_label_sets``."""


class PrometheusMetrics:
    """A :class:`~runnerq_fast.metrics.LabelledMetricsSink` exposed to Prometheus.

    Pass one to ``WorkerEngine(metrics=...)`` and to
    ``runnerq_fast.web.create_app(metrics=...)`` (whose ``/metrics`` then
    serves it), or register it in any prometheus-client registry.

    Parameters
    ----------
    registry : prometheus_client.CollectorRegistry, optional
        Registered there at once (e.g. ``prometheus_client.REGISTRY``).
        Default: not registered anywhere (no global state).
    buckets : sequence of float
        Histogram bounds in seconds, increasing. Default :data:`DEFAULT_BUCKETS`.
    max_label_sets : int
        Distinct label sets kept per metric before the rest fold into
        ``_other``. Default 1000.
    multiprocess : bool or None
        Write through prometheus-client's multiprocess files (see above).
        Default ``None``: when ``PROMETHEUS_MULTIPROC_DIR`` is set.

    Raises
    ------
    ValueError
        If ``buckets`` is empty or not increasing, or ``max_label_sets`` < 1.
    """

    def __init__(
        self,
        *,
        registry: CollectorRegistry | None = None,
        buckets: Sequence[float] = DEFAULT_BUCKETS,
        max_label_sets: int = 1000,
        multiprocess: bool | None = None,
    ) -> None:
        bounds = tuple(float(b) for b in buckets)
        if not bounds or any(b >= c for b, c in pairwise(bounds)):
            raise ValueError("buckets must be a non-empty increasing sequence of seconds")
        if max_label_sets < 1:
            raise ValueError("max_label_sets must be >= 1")
        self.buckets = bounds
        self.max_label_sets = max_label_sets
        self._counters: dict[str, dict[tuple[str, ...], int]] = {name: {} for name in COUNTERS}
        # per label set: one count per bucket, one for +Inf, then the sum (seconds)
        self._hists: dict[str, dict[tuple[str, ...], list[float]]] = {name: {} for name in HISTOGRAMS}
        self._warned: set[str] = set()
        if multiprocess is None:
            multiprocess = bool(os.environ.get(MULTIPROC_ENV))
        self.multiprocess = multiprocess
        self._shared: dict[str, Any] = {}  # name -> prometheus-client Counter/Histogram (multiprocess only)
        if registry is not None:
            registry.register(self)

    # ------------------------------------------------------------ the sink
    def _fold(self, name: str, labels: tuple[str, ...]) -> tuple[str, ...]:
        if name not in self._warned:
            self._warned.add(name)
            log.warning("%s has %d label sets; further ones are recorded as %r", name, self.max_label_sets, OTHER)
        return (OTHER,) * len(labels)

    def count(self, name: str, labels: tuple[str, ...], value: int = 1) -> None:
        """Add ``value`` to counter ``name`` at ``labels``."""
        d = self._counters.get(name)
        if d is None:
            d = self._counters[name] = {}
        old = d.get(labels)
        if old is None:
            if len(d) >= self.max_label_sets:
                labels = self._fold(name, labels)
            old = d.get(labels, 0)
        d[labels] = old + value
        if self.multiprocess:
            self._metric(name, histogram=False).labels(*labels).inc(value)

    def observe(self, name: str, labels: tuple[str, ...], seconds: float) -> None:
        """Record ``seconds`` in histogram ``name`` at ``labels``."""
        d = self._hists.get(name)
        if d is None:
            d = self._hists[name] = {}
        h = d.get(labels)
        if h is None:
            if len(d) >= self.max_label_sets:
                labels = self._fold(name, labels)
            h = d.get(labels)
            if h is None:
                h = d[labels] = [0.0] * (len(self.buckets) + 2)
        h[bisect_left(self.buckets, seconds)] += 1
        h[-1] += seconds
        if self.multiprocess:
            self._metric(name, histogram=True).labels(*labels).observe(seconds)

    def observe_many(self, name: str, labels: tuple[str, ...], seconds: Sequence[float]) -> None:
        """Record every value of ``seconds`` in histogram ``name`` at ``labels``."""
        if not seconds:
            return
        d = self._hists.get(name)
        h = None if d is None else d.get(labels)
        if h is None:
            self.observe(name, labels, seconds[0])
            seconds = seconds[1:]
            d = self._hists[name]
            h = d.get(labels)
            if h is None:  # folded into _other
                labels = (OTHER,) * len(labels)
                h = d[labels]
        bounds = self.buckets
        for v in seconds:
            h[bisect_left(bounds, v)] += 1
        h[-1] += fsum(seconds)
        if self.multiprocess:
            child = self._metric(name, histogram=True).labels(*labels)
            for v in seconds:
                child.observe(v)

    def inc_counter(self, name: str, value: int = 1) -> None:
        """RunnerQ's unlabelled call: every label of the metric is empty."""
        self.count(name, ("",) * len(LABELS.get(name, ())), value)

    def observe_duration(self, name: str, seconds: float) -> None:
        """RunnerQ's unlabelled call: every label of the metric is empty."""
        self.observe(name, ("",) * len(LABELS.get(name, ())), seconds)

    def _metric(self, name: str, *, histogram: bool) -> Any:
        """The prometheus-client metric writing ``name`` to the multiprocess files (made on first use)."""
        m = self._shared.get(name)
        if m is None:
            from prometheus_client import CollectorRegistry, Counter, Histogram

            private = CollectorRegistry()  # never the global registry: the files are what counts
            names = _label_names(name)
            if histogram:
                m = Histogram(name, HELP.get(name, name), names, buckets=self.buckets, registry=private)
            else:
                m = Counter(name, HELP.get(name, name), names, registry=private)
            self._shared[name] = m
        return m

    # ------------------------------------------------------------- reading
    def value(self, name: str, labels: tuple[str, ...]) -> float:
        """A counter's value, or a histogram's observation count (0 if never recorded)."""
        if name in self._hists:
            h = self._hists[name].get(labels)
            return 0.0 if h is None else float(sum(h[:-1]))
        return float(self._counters.get(name, {}).get(labels, 0))

    # ------------------------------------------------ prometheus collector
    def describe(self) -> Iterator[Metric]:
        """The metric families, without samples (registry duplicate checks); none in multiprocess mode."""
        if self.multiprocess:
            return
        from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

        for name in self._counters:
            yield CounterMetricFamily(name, HELP.get(name, name), labels=_label_names(name))
        for name in self._hists:
            yield HistogramMetricFamily(name, HELP.get(name, name), labels=_label_names(name), unit="")

    def collect(self) -> Iterator[Metric]:
        """Every family with its current samples (called by a registry at scrape time).

        Nothing in multiprocess mode: a ``MultiProcessCollector`` reads the files instead.
        """
        if self.multiprocess:
            return
        from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

        for name, d in list(self._counters.items()):
            names = _label_names(name)
            fam = CounterMetricFamily(name, HELP.get(name, name), labels=names)
            for labels, value in list(d.items()):
                fam.add_metric(_fit(labels, names), value)
            yield fam
        bounds = [_bound(b) for b in self.buckets]
        for name, hd in list(self._hists.items()):
            names = _label_names(name)
            hfam = HistogramMetricFamily(name, HELP.get(name, name), labels=names)
            for labels, h in list(hd.items()):
                row = list(h)  # one consistent copy
                cumulative: list[tuple[str, float]] = []
                total = 0.0
                for bound, n in zip(bounds, row, strict=False):
                    total += n
                    cumulative.append((bound, total))
                total += row[len(bounds)]
                cumulative.append(("+Inf", total))
                hfam.add_metric(_fit(labels, names), cumulative, sum_value=row[-1])
            yield hfam


def _label_names(name: str) -> list[str]:
    return list(LABELS.get(name, ()))


def _fit(labels: tuple[str, ...], names: list[str]) -> list[str]:
    """Label values padded or cut to the family's label names."""
    values = [str(v) for v in labels[: len(names)]]
    return values + [""] * (len(names) - len(values))


def _bound(b: float) -> str:
    return repr(float(b))
