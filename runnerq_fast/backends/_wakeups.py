"""New-work signals of one queue inside one process, kept per activity type.

The in-process part of :meth:`Backend.wait_for_work` on the memory, SQLite
and PostgreSQL backends. A fetcher's claim clears the flags of the types it
claims (``None``: every type), so a wakeup that lands while it claims or
before it waits is not lost; any new work (of a type the signal is not told)
raises every flag and wakes every waiting fetcher, who then claims. Flags are
per type so that one engine's claim never clears the wakeup another engine,
claiming other types, has not yet seen.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

__all__ = ["WorkSignal"]


class WorkSignal:
    """Per-type "work may be ready" flags of one queue, with the fetchers waiting on them."""

    __slots__ = ("_flags", "_waiters")

    def __init__(self) -> None:
        #: activity type (``None``: a claim of every type) -> work may be ready since its last claim
        self._flags: dict[str | None, bool] = {}
        self._waiters: list[asyncio.Future[None]] = []

    def set(self) -> None:
        """New work may be ready (of any type): raise every flag and wake every waiter."""
        flags = self._flags
        for k in flags:
            flags[k] = True
        if self._waiters:
            waiters, self._waiters = self._waiters, []
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)

    def clear(self, activity_types: Sequence[str] | None = None) -> None:
        """A claim of ``activity_types`` (``None``: every type) is about to look."""
        flags = self._flags
        if activity_types is None:
            flags[None] = False
        else:
            for t in activity_types:
                flags[t] = False

    def is_set(self, activity_types: Sequence[str] | None = None) -> bool:
        """Whether work may have become ready for ``activity_types`` since their last claim."""
        flags = self._flags
        if activity_types is None:
            return flags.get(None, False)
        return any(flags.get(t, False) for t in activity_types)

    async def wait(self, activity_types: Sequence[str] | None, timeout: float) -> None:
        """Return once the flag of one of ``activity_types`` is raised, or after ``timeout`` seconds."""
        if self.is_set(activity_types):
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(fut, timeout)
        finally:
            if not fut.done():
                fut.cancel()
            with contextlib.suppress(ValueError):
                self._waiters.remove(fut)
