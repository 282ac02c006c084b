"""Awaiting redis-py calls so that a cancellation is never lost.

redis-py (8.x) can absorb a ``CancelledError`` delivered while a command is
in flight and return normally; the engine's loops would then never stop.
Every await on the Redis client goes through :func:`guarded`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

__all__ = ["guarded"]

T = TypeVar("T")


def _cancel_requests() -> int:
    task = asyncio.current_task()
    return 0 if task is None else task.cancelling()


def _resist_swallowed_cancel(before: int) -> None:
    """Re-raise a cancellation that redis-py swallowed during a call.

    redis-py (8.x) can absorb a ``CancelledError`` delivered while a command
    is in flight and return normally; the engine's loops would then never
    stop. ``before`` is :func:`_cancel_requests` taken before the call.
    """
    if _cancel_requests() > before:
        raise asyncio.CancelledError


async def guarded(call: Awaitable[T]) -> T:
    """Await one redis-py call, re-raising a cancellation it swallowed.

    Every await on the client goes through here, so no loop of the backend can
    outlive a ``cancel()`` (see :func:`_resist_swallowed_cancel`).
    """
    before = _cancel_requests()
    result = await call
    _resist_swallowed_cancel(before)
    return result
