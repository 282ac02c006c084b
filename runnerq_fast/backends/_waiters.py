"""Result waiters shared by every backend: futures keyed by activity id."""

from __future__ import annotations

import asyncio

from runnerq_fast.models import ActivityResult

__all__ = ["Waiters", "discard_waiter"]

#: activity id -> futures of the callers of ``wait_for_result`` for it.
Waiters = dict[str, list[asyncio.Future[ActivityResult]]]


def discard_waiter(waiters: Waiters, key: str, fut: asyncio.Future[ActivityResult]) -> None:
    """Forget ``fut`` (a finished or abandoned wait) and the key once nobody waits on it."""
    lst = waiters.get(key)
    if lst is not None and fut in lst:
        lst.remove(fut)
        if not lst:
            del waiters[key]
