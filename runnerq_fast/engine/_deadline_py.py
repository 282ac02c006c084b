"""Awaiting handlers under timeouts: the pure-Python reference twin.

:mod:`runnerq_fast.engine.deadline` selects the compiled twin when it is built.
:meth:`Deadlines.call` behaves as ``async with asyncio.timeout(t): await
fn(payload, ctx)`` (Python 3.11 semantics: on expiry the task is cancelled,
and the cancellation becomes :class:`TimeoutError` unless another cancel
request arrived meanwhile), for a fraction of the per-call cost: calls whose
deadlines fall in the same slot share one timer, so a call costs a set
insertion and removal instead of a timer handle and a context manager.

A slot is ``max(min_resolution, timeout / 1000)`` wide: a call is cancelled
no earlier than its timeout and at most one slot later (5 ms for timeouts up
to 5 s, 0.1 % beyond).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from typing import Any

__all__ = ["Deadlines"]

_current_task = asyncio.current_task


class _Entry:
    """One call in a slot: the task to cancel and whether the slot did."""

    __slots__ = ("fired", "task")

    def __init__(self, task: asyncio.Task[Any]) -> None:
        self.task = task
        self.fired = False


class Deadlines:
    """Timeouts of handler calls on one event loop, sharing one timer per slot.

    Parameters
    ----------
    loop : asyncio.AbstractEventLoop
        The loop the calls run on.
    min_resolution : float
        Narrowest slot, in seconds (default 0.005).
    """

    __slots__ = ("_loop", "_min_res", "_slots")

    def __init__(self, loop: asyncio.AbstractEventLoop, min_resolution: float = 0.005) -> None:
        self._loop = loop
        self._min_res = min_resolution
        self._slots: dict[tuple[float, int], set[_Entry]] = {}

    @property
    def pending_slots(self) -> int:
        """Slots whose timer has not fired yet."""
        return len(self._slots)

    def _fire(self, key: tuple[float, int]) -> None:
        entries = self._slots.pop(key, None)
        if entries:
            for entry in entries:
                entry.fired = True
                entry.task.cancel()

    async def call(
        self,
        fn: Callable[[Any, Any], Any],
        payload: Any,
        ctx: Any,
        timeout: float | None,
        task: asyncio.Task[Any] | None = None,
    ) -> Any:
        """Await ``fn(payload, ctx)``, cancelling it once ``timeout`` seconds have passed.

        Parameters
        ----------
        fn : callable
            An ``async def`` handler (or any callable returning an awaitable).
        payload, ctx
            Its two arguments.
        timeout : float or None
            Seconds from now; ``None`` waits without limit. A deadline already
            passed cancels at the next loop iteration.
        task : asyncio.Task, optional
            The task running this call, when the caller knows it (saves a
            :func:`asyncio.current_task` lookup per call); default: the current task.

        Returns
        -------
        Any
            What the handler returned.

        Raises
        ------
        TimeoutError
            If the deadline passed and the handler let the cancellation
            through (chained from the :class:`asyncio.CancelledError`).
        asyncio.CancelledError
            If the task was cancelled for another reason.
        RuntimeError
            If called outside a task.
        Exception
            Whatever the handler raised.
        """
        if timeout is None:
            return await fn(payload, ctx)
        if task is None:
            task = _current_task()
        if task is None:
            raise RuntimeError("Deadlines.call() must be used inside a task")
        res = timeout / 1000.0
        if res < self._min_res:
            res = self._min_res
        slot = math.ceil((self._loop.time() + timeout) / res)
        key = (res, slot)
        entries = self._slots.get(key)
        if entries is None:
            entries = self._slots[key] = set()
            self._loop.call_at(slot * res, self._fire, key)
        entry = _Entry(task)
        entries.add(entry)
        cancelling = task.cancelling()
        try:
            return await fn(payload, ctx)
        except asyncio.CancelledError as exc:
            if entry.fired:
                entry.fired = False
                if task.uncancel() <= cancelling:
                    raise TimeoutError from exc
            raise
        finally:
            entries.discard(entry)
            if entry.fired:  # expired, but the handler turned the cancellation into something else
                task.uncancel()
