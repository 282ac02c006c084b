"""A latency histogram with microsecond resolution, for percentiles over any number of samples.

Values are recorded in seconds and kept as counts per bucket: one bucket per
microsecond below 100 µs, then buckets 1 % wide (so 1.00-1.01 ms, ...), which
bounds the error of any percentile to 1 % of its value (and 1 µs below
100 µs) whatever the number of samples, in a few kilobytes. Histograms of
several processes or time windows merge by adding counts.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

__all__ = ["LatencyHistogram"]

_LINEAR_US = 100
_GROWTH = 1.01
_LOG_GROWTH = math.log(_GROWTH)


def _index(us: float) -> int:
    if us < _LINEAR_US:
        return int(us)
    return _LINEAR_US + int(math.log(us / _LINEAR_US) / _LOG_GROWTH)


def _upper_us(index: int) -> float:
    """The upper edge of bucket ``index`` in microseconds."""
    if index < _LINEAR_US:
        return float(index + 1)
    return _LINEAR_US * _GROWTH ** (index - _LINEAR_US + 1)


class LatencyHistogram:
    """Counts of latencies in buckets of 1 µs (below 100 µs) or 1 % of the value (above).

    Parameters
    ----------
    values : iterable of float, optional
        Latencies in **seconds** recorded at once.

    Notes
    -----
    A negative value (clocks of two processes read a few microseconds apart)
    is recorded as 0 and counted in :attr:`negative`.
    """

    __slots__ = ("_counts", "count", "max", "min", "negative", "total")

    def __init__(self, values: Iterable[float] = ()) -> None:
        self._counts: dict[int, int] = {}
        self.count = 0
        self.total = 0.0
        self.min = math.inf
        self.max = 0.0
        self.negative = 0
        for v in values:
            self.record(v)

    def record(self, seconds: float) -> None:
        """Add one latency, in seconds.

        Raises
        ------
        ValueError
            If ``seconds`` is NaN or infinite.
        """
        if not math.isfinite(seconds):
            raise ValueError(f"a latency must be a finite number of seconds, got {seconds!r}")
        if seconds < 0:
            self.negative += 1
            seconds = 0.0
        i = _index(seconds * 1e6)
        self._counts[i] = self._counts.get(i, 0) + 1
        self.count += 1
        self.total += seconds
        self.min = min(self.min, seconds)
        self.max = max(self.max, seconds)

    def merge(self, other: LatencyHistogram) -> None:
        """Add every count of ``other`` to this histogram."""
        for i, n in other._counts.items():
            self._counts[i] = self._counts.get(i, 0) + n
        self.count += other.count
        self.total += other.total
        self.min = min(self.min, other.min)
        self.max = max(self.max, other.max)
        self.negative += other.negative

    @property
    def mean(self) -> float:
        """Mean latency in seconds (NaN when empty)."""
        return self.total / self.count if self.count else math.nan

    def percentile(self, p: float) -> float:
        """The ``p``-th percentile in **seconds** (nearest rank), NaN when empty.

        The value returned is the upper edge of the bucket holding the sample
        of rank ``ceil(p / 100 * count)``, capped by the largest value
        recorded: at most 1 % (or 1 µs) above the exact sample.

        Parameters
        ----------
        p : float
            In [0, 100]; 0 gives the smallest value, 100 the largest.

        Raises
        ------
        ValueError
            If ``p`` is outside [0, 100].
        """
        if not 0 <= p <= 100:
            raise ValueError(f"a percentile is in [0, 100], got {p!r}")
        if not self.count:
            return math.nan
        if p == 0:
            return self.min
        rank = max(1, math.ceil(p / 100 * self.count))
        seen = 0
        for i in sorted(self._counts):
            seen += self._counts[i]
            if seen >= rank:
                return min(_upper_us(i) / 1e6, self.max)
        return self.max  # pragma: no cover - the counts add up to count

    def summary_ms(self, percentiles: Iterable[float] = (50, 90, 99, 99.9)) -> dict[str, float | int | None]:
        """Count, mean, min, max and the given percentiles, in **milliseconds** (``None`` when empty)."""
        def ms(v: float) -> float | None:
            return None if math.isnan(v) or math.isinf(v) else round(v * 1000, 3)

        out: dict[str, float | int | None] = {"count": self.count, "mean_ms": ms(self.mean),
                                               "min_ms": ms(self.min), "max_ms": ms(self.max) if self.count else None}
        for p in percentiles:
            out[f"p{p:g}_ms"] = ms(self.percentile(p))
        return out
