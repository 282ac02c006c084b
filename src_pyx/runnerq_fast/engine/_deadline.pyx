# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Compiled handler timeouts sharing one timer per slot (twin of ``runnerq_fast.engine._deadline_py``).

The same algorithm as the reference, as a C coroutine over C-level entries.
"""

from libc.math cimport ceil

import asyncio

cdef object _current_task = asyncio.current_task
cdef object _CancelledError = asyncio.CancelledError


cdef class _Entry:
    """One call in a slot: the task to cancel and whether the slot did."""

    def __init__(self, task):
        self.task = task
        self.fired = False


cdef class Deadlines:
    """Timeouts of handler calls on one event loop, sharing one timer per slot (see ``_deadline_py``)."""

    def __init__(self, loop, double min_resolution=0.005):
        self._loop = loop
        self._min_res = min_resolution
        self._slots = {}
        self._fire_cb = self._fire
        self._last_res = 0.0
        self._last_slot = 0
        self._last_entries = None
        self._time = loop.time

    @property
    def pending_slots(self):
        """Slots whose timer has not fired yet."""
        return len(self._slots)

    cdef set _slot_entries(self, double res, long long slot):
        """The entry set of time slot ``slot`` of width ``res`` seconds, made and timed on first use.

        A call in the same slot as the last one (most calls) reuses its set
        without building a key or looking it up; :meth:`_fire` forgets it.
        """
        cdef set entries
        if self._last_entries is not None and res == self._last_res and slot == self._last_slot:
            return self._last_entries
        key = (res, slot)
        found = self._slots.get(key)
        if found is None:
            entries = set()
            self._slots[key] = entries
            self._loop.call_at(slot * res, self._fire_cb, key)
        else:
            entries = <set>found
        self._last_res = res
        self._last_slot = slot
        self._last_entries = entries
        return entries

    def _fire(self, key):
        cdef _Entry entry
        entries = self._slots.pop(key, None)
        if entries is self._last_entries:
            self._last_entries = None
        if entries:
            for e in entries:
                entry = <_Entry>e
                entry.fired = True
                entry.task.cancel()

    cdef _Entry enter(self, object task, double timeout):
        """Register ``task`` for cancellation once ``timeout`` seconds have passed (the start of :meth:`call`).

        The caller awaits the handler, then removes the entry from
        ``entry.entries`` and withdraws the cancellation as :meth:`call` does.
        """
        cdef double res = timeout / 1000.0
        cdef set entries
        if res < self._min_res:
            res = self._min_res
        entries = self._slot_entries(res, <long long>ceil((<double>self._time() + timeout) / res))
        cdef _Entry entry = _Entry.__new__(_Entry)
        entry.task = task
        entry.fired = False
        entry.entries = entries
        entries.add(entry)
        return entry

    async def call(self, fn, payload, ctx, timeout, task=None):
        """Await ``fn(payload, ctx)``, cancelling it once ``timeout`` seconds have passed."""
        cdef _Entry entry
        cdef double res, t
        cdef set entries
        if timeout is None:
            return await fn(payload, ctx)
        if task is None:
            task = _current_task()
        if task is None:
            raise RuntimeError("Deadlines.call() must be used inside a task")
        t = timeout
        res = t / 1000.0
        if res < self._min_res:
            res = self._min_res
        entries = self._slot_entries(res, <long long>ceil((<double>self._time() + t) / res))
        entry = _Entry(task)
        entries.add(entry)
        cancelling = task.cancelling()
        try:
            return await fn(payload, ctx)
        except _CancelledError as exc:
            if entry.fired:
                entry.fired = False
                if task.uncancel() <= cancelling:
                    raise TimeoutError from exc
            raise
        finally:
            entries.discard(entry)
            if entry.fired:
                task.uncancel()
