"""Awaiting a handler under a timeout: the pure-Python reference twin.

:mod:`runnerq_fast.deadline` selects the compiled twin when it is built.
:func:`call_with_timeout` behaves as ``async with asyncio.timeout(t): await
fn(payload, ctx)`` (Python 3.11 semantics: on expiry the task is cancelled,
and the cancellation becomes :class:`TimeoutError` unless another cancel
request arrived meanwhile), for a fraction of the per-call cost: one timer
handle and no context-manager object.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

__all__ = ["call_with_timeout"]

_current_task = asyncio.current_task


class _Expiry:
    """The timer callback of one call: cancels the task and remembers that it did."""

    __slots__ = ("fired", "task")

    def __init__(self, task: asyncio.Task[Any]) -> None:
        self.task = task
        self.fired = False

    def __call__(self) -> None:
        self.task.cancel()
        self.fired = True


async def call_with_timeout(
    fn: Callable[[Any, Any], Any],
    payload: Any,
    ctx: Any,
    timeout: float | None,
    task: asyncio.Task[Any] | None = None,
) -> Any:
    """Await ``fn(payload, ctx)``, cancelling it after ``timeout`` seconds.

    Parameters
    ----------
    fn : callable
        An ``async def`` handler (or any callable returning an awaitable).
    payload, ctx
        Its two arguments.
    timeout : float or None
        Seconds from now; ``None`` waits without limit. A deadline already
        passed cancels at the next loop iteration, as ``asyncio.timeout`` does.
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
        If the deadline passed and the handler let the cancellation through
        (chained from the :class:`asyncio.CancelledError`).
    asyncio.CancelledError
        If the task was cancelled for another reason.
    Exception
        Whatever the handler raised.
    """
    if timeout is None:
        return await fn(payload, ctx)
    if task is None:
        task = _current_task()
    if task is None:
        raise RuntimeError("call_with_timeout() must be used inside a task")
    loop = task.get_loop()
    cancelling = task.cancelling()
    expiry = _Expiry(task)
    handle = loop.call_at(loop.time() + timeout, expiry)
    try:
        return await fn(payload, ctx)
    except asyncio.CancelledError as exc:
        if expiry.fired:
            expiry.fired = False
            if task.uncancel() <= cancelling:
                raise TimeoutError from exc
        raise
    finally:
        handle.cancel()
        if expiry.fired:  # expired, but the handler turned the cancellation into something else
            task.uncancel()
