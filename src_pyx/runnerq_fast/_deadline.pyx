# cython: language_level=3, boundscheck=False, wraparound=False
"""Compiled handler call under a timeout (twin of ``runnerq_fast._deadline_py``).

The same algorithm as the reference (one timer handle whose callback cancels
the task; the cancellation becomes ``TimeoutError``), as a C coroutine with a
C-level timer callback.
"""

import asyncio

cdef object _current_task = asyncio.current_task
cdef object _CancelledError = asyncio.CancelledError


cdef class _Expiry:
    """The timer callback of one call: cancels the task and remembers that it did."""

    cdef object task
    cdef public bint fired

    def __cinit__(self, task):
        self.task = task
        self.fired = False

    def __call__(self):
        self.task.cancel()
        self.fired = True


async def call_with_timeout(fn, payload, ctx, timeout, task=None):
    """Await ``fn(payload, ctx)``, cancelling it after ``timeout`` seconds (see ``runnerq_fast._deadline_py``)."""
    cdef _Expiry expiry
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
    except _CancelledError as exc:
        if expiry.fired:
            expiry.fired = False
            if task.uncancel() <= cancelling:
                raise TimeoutError from exc
        raise
    finally:
        handle.cancel()
        if expiry.fired:
            task.uncancel()
