"""What the load generators send: activity types, payload sizes, priorities, delays, idempotency keys.

Every generated activity carries, in its payload, the time it was sent
(``t``, epoch seconds) and its delay (``d``, seconds): the worker computes
from them when the activity became ready (``t + d``) and so its
enqueue → start latency, with the resolution of the clock rather than the
store's millisecond timestamps.

The mix (weights out of 100):

============  ======  ==============================  ==========================================
type          weight  payload                         handler (:mod:`runnerq_fast.loadtest.app`)
============  ======  ==============================  ==========================================
``notify``    25      ~150 B (a recipient, a subject)  async, no wait (a webhook or a counter)
``io_sleep``  45      0.5-2 KiB (a document)          async, sleeps 1-20 ms (a call to a service)
``cpu_hash``  20      4 KiB (a blob)                  plain ``def`` in the thread pool, ~1 ms CPU
``flaky``     10      ~1 KiB                          async, fails its first attempt, then succeeds
============  ======  ==============================  ==========================================

Priorities: normal 70 %, high 20 %, low 7 %, critical 3 %. Delays: 10 % of
activities wait 0.1-2 s. Idempotency: 10 % of ``notify`` activities carry a
key drawn from a pool of ``key_pool`` keys (``return_existing``), so repeats
return the first activity's id instead of storing a second one.
"""

from __future__ import annotations

import random
import string
import time
from typing import Any

import msgspec

__all__ = ["ActivitySpec", "Mix", "spike_users", "step_users"]

TYPES = ("notify", "io_sleep", "cpu_hash", "flaky")
_TYPE_WEIGHTS = (25, 45, 20, 10)
_PRIORITIES = ("normal", "high", "low", "critical")
_PRIORITY_WEIGHTS = (70, 20, 7, 3)
_PRIORITY_NUMBERS = {"low": 1, "normal": 2, "high": 3, "critical": 4}
_TEXT = "".join(random.Random(13).choices(string.ascii_letters + string.digits + " ", k=20_000))


class ActivitySpec(msgspec.Struct, frozen=True, omit_defaults=True):
    """One activity to enqueue, in the field names of the HTTP enqueue body.

    Attributes
    ----------
    type : str
        Activity type.
    payload : dict
        With ``t`` (send time, epoch seconds) and ``d`` (delay, seconds).
    priority : str
        ``low``, ``normal``, ``high`` or ``critical``.
    delay : float, optional
        Seconds before it may start.
    idempotency_key : str, optional
        Deduplicates within (queue, type) with ``return_existing``.
    """

    type: str
    payload: dict[str, Any]
    priority: str = "normal"
    delay: float | None = None
    idempotency_key: str | None = None

    @property
    def priority_number(self) -> int:
        """The priority as 1 (low) to 4 (critical)."""
        return _PRIORITY_NUMBERS[self.priority]


class Mix:
    """A generator of :class:`ActivitySpec` following the documented weights.

    Parameters
    ----------
    seed : int, optional
        Seed of the random generator (default: unseeded).
    key_pool : int
        Number of distinct idempotency keys (default 2,000); smaller means
        more repeats.
    delay_share : float
        Share of activities with a delay, in [0, 1] (default 0.1).
    """

    def __init__(self, seed: int | None = None, *, key_pool: int = 2000, delay_share: float = 0.1) -> None:
        if key_pool < 1:
            raise ValueError(f"key_pool must be at least 1, got {key_pool}")
        if not 0 <= delay_share <= 1:
            raise ValueError(f"delay_share must be in [0, 1], got {delay_share}")
        self._rng = random.Random(seed)
        self.key_pool = key_pool
        self.delay_share = delay_share

    def _text(self, size: int) -> str:
        start = self._rng.randrange(len(_TEXT) - size)
        return _TEXT[start:start + size]

    def one(self, now: float | None = None) -> ActivitySpec:
        """The next activity; ``now`` (epoch seconds, default the clock) is its send time."""
        rng = self._rng
        kind = rng.choices(TYPES, _TYPE_WEIGHTS)[0]
        priority = rng.choices(_PRIORITIES, _PRIORITY_WEIGHTS)[0]
        delay = round(rng.uniform(0.1, 2.0), 3) if rng.random() < self.delay_share else None
        key = None
        payload: dict[str, Any] = {"t": time.time() if now is None else now, "d": delay or 0.0}
        if kind == "notify":
            payload.update(to=f"user{rng.randrange(100_000)}@example.com", subject=self._text(rng.randint(40, 120)))
            if rng.random() < 0.1:
                key = f"notify-{rng.randrange(self.key_pool)}"
        elif kind == "io_sleep":
            payload.update(ms=rng.randint(1, 20), doc=self._text(rng.randint(500, 2000)))
        elif kind == "cpu_hash":
            payload.update(rounds=rng.randint(100, 300), blob=self._text(4096))
        else:
            payload.update(fail=1, body=self._text(rng.randint(800, 1200)))
        return ActivitySpec(kind, payload, priority, delay, key)

    def batch(self, size: int, now: float | None = None) -> list[ActivitySpec]:
        """``size`` activities sent at once (one send time)."""
        t = time.time() if now is None else now
        return [self.one(t) for _ in range(size)]


def step_users(elapsed: float, *, start: int, step: int, step_seconds: float, limit: int) -> int:
    """Users of a step load: ``start``, plus ``step`` more every ``step_seconds``, up to ``limit``.

    Parameters
    ----------
    elapsed : float
        Seconds since the test started.
    start, step, limit : int
        Users at first, added per step, and at most.
    step_seconds : float
        Length of a step in seconds (> 0).
    """
    if step_seconds <= 0:
        raise ValueError(f"step_seconds must be positive, got {step_seconds}")
    return min(limit, start + step * int(elapsed // step_seconds))


def spike_users(elapsed: float, *, base: int, peak: int, every: float, spike_seconds: float) -> int:
    """Users of a spike load: ``base``, and ``peak`` for the first ``spike_seconds`` of each ``every`` seconds
    after the first period.

    Parameters
    ----------
    elapsed : float
        Seconds since the test started.
    base, peak : int
        Users outside and during a spike.
    every, spike_seconds : float
        Period of the spikes and length of each, in seconds (0 < spike_seconds < every).
    """
    if not 0 < spike_seconds < every:
        raise ValueError(f"need 0 < spike_seconds < every, got {spike_seconds} and {every}")
    if elapsed < every:
        return base
    return peak if elapsed % every < spike_seconds else base
