"""Retry backoff (SPEC §3): the pure-Python reference twin of the compiled module."""

from __future__ import annotations

import random

__all__ = ["backoff_seconds"]


def backoff_seconds(retry: int, base: float = 1.0, cap: float = 3600.0, jitter: float = 0.0) -> float:
    """Delay before the next attempt, in seconds.

    ``min(cap, base * 2**retry)``, computed without overflow for any ``retry``.

    Parameters
    ----------
    retry : int
        Retries already made (0 before the first retry); negative counts as 0.
    base : float
        ``retry_delay`` in seconds (default 1 s).
    cap : float
        ``max_retry_delay`` in seconds (default 3600 s).
    jitter : float
        Fraction in [0, 1]; the delay is multiplied by a uniform factor in
        ``[1 - jitter, 1]`` (drawn with :func:`random.random`) to spread
        retries of a failed batch.

    Returns
    -------
    float
        Seconds, in ``[0, cap]``.

    Raises
    ------
    TypeError
        If an argument is not a number.
    """
    if retry < 0:
        retry = 0
    # 2**64 exceeds any cap a user can set in seconds; stop doubling there.
    delay = cap if retry >= 64 else min(cap, base * float(1 << retry))
    if jitter > 0.0:
        delay *= 1.0 - random.random() * min(jitter, 1.0)
    return delay
