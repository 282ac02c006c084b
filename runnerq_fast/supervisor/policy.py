"""Restart policy: how long a crashed worker process waits before it is restarted, and when to give up."""

from __future__ import annotations

from collections import deque

from runnerq_fast.errors import ConfigError

__all__ = ["RestartPolicy"]


class RestartPolicy:
    """Exponential restart backoff and crash-loop detection, per worker slot.

    A slot is one of the supervisor's N positions; each keeps the times of its
    crashes within the last ``window`` seconds. The restart after the k-th of
    those crashes waits ``min(backoff_max, backoff * 2**(k-1))`` seconds, so a
    slot that ran without crashing for a whole window starts again from
    ``backoff``. The ``limit``-th crash within one window is a crash loop.

    Parameters
    ----------
    backoff : float
        Delay before the first restart, seconds (default 0.5).
    backoff_max : float
        Longest delay, seconds (default 30).
    limit : int
        Crashes of one slot within ``window`` that make a crash loop (default 5;
        1 gives up at the first crash).
    window : float
        Length of the sliding window, seconds (default 60).

    Raises
    ------
    ConfigError
        If a delay is negative, ``backoff_max < backoff``, ``limit < 1`` or ``window <= 0``.
    """

    def __init__(self, *, backoff: float = 0.5, backoff_max: float = 30.0, limit: int = 5,
                 window: float = 60.0) -> None:
        if backoff < 0 or backoff_max < backoff:
            raise ConfigError(f"restart backoff must satisfy 0 <= backoff <= backoff_max, got {backoff}, "
                              f"{backoff_max}")
        if limit < 1:
            raise ConfigError(f"restart limit must be at least 1, got {limit}")
        if window <= 0:
            raise ConfigError(f"restart window must be positive, got {window}")
        self.backoff = backoff
        self.backoff_max = backoff_max
        self.limit = limit
        self.window = window
        self._crashes: dict[int, deque[float]] = {}

    def crashed(self, slot: int, now: float) -> float | None:
        """Record a crash of ``slot`` at ``now`` (monotonic seconds).

        Returns
        -------
        float or None
            Seconds to wait before restarting the slot, or ``None`` when this
            crash completes a crash loop (give up).
        """
        times = self._crashes.setdefault(slot, deque())
        while times and times[0] <= now - self.window:
            times.popleft()
        times.append(now)
        if len(times) >= self.limit:
            return None
        return float(min(self.backoff_max, self.backoff * 2.0 ** (len(times) - 1)))

    def recent(self, slot: int, now: float) -> int:
        """Crashes of ``slot`` within the window ending at ``now``."""
        return sum(1 for t in self._crashes.get(slot, ()) if t > now - self.window)
