# cython: language_level=3, boundscheck=False, wraparound=False
"""Compiled per-activity path of the engine (twin of ``runnerq_fast.engine._worker_py``).

The same steps as the reference, with the stdlib, msgspec and model
callables cached as C globals, the hand-off a ``cdef class`` whose items the
worker loop takes without a call when one is waiting, and typed counters.
Like the twin, it works on the engine's ``Outcomes`` and never sees the engine.
"""

cimport cython
from cpython.contextvars cimport PyContextVar_Set

from runnerq_fast.engine._context cimport ActivityContext, new_context
from runnerq_fast.engine._deadline cimport Deadlines, _Entry

import asyncio
import collections
import logging
import time

from runnerq_fast._codec import encode_json
from runnerq_fast.engine.errtext import describe_error
from runnerq_fast.engine.hooks import call_hooks
from runnerq_fast.engine.logcontext import running
from runnerq_fast.engine.payloads import undecodable
from runnerq_fast.errors import InvalidActivityError, NonRetryableError, RetryableError
from runnerq_fast.models import Ack, AckOutcome, LeaseRef

log = logging.getLogger("runnerq_fast.engine")

cdef object _deque = collections.deque
cdef object _QueueEmpty = asyncio.QueueEmpty
cdef object _CancelledError = asyncio.CancelledError
cdef object _current_task = asyncio.current_task
cdef object _perf_counter = time.perf_counter
cdef object _encode_json = encode_json
cdef object _Ack = Ack
cdef object _LeaseRef = LeaseRef
cdef object _NonRetryableError = NonRetryableError
cdef object _RetryableError = RetryableError
cdef object _InvalidActivityError = InvalidActivityError
cdef object _COMPLETED = int(AckOutcome.COMPLETED)

cdef object _call_hooks = call_hooks
cdef object _describe_error = describe_error
cdef object _running = running
cdef object _undecodable = undecodable


cdef class Handoff:
    """FIFO of claimed activities (``None``: a worker should end), waking waiting workers (see ``_worker_py``)."""

    cdef object _loop
    cdef object _items
    cdef object _getters
    cdef bint _spreading

    def __init__(self, loop):
        self._loop = loop
        self._items = _deque()
        self._getters = _deque()
        self._spreading = False

    def __len__(self):
        return len(self._items)

    def empty(self):
        """Whether nothing is waiting to be taken."""
        return not self._items

    cdef _wakeup_next(self):
        getters = self._getters
        while getters:
            getter = getters.popleft()
            if not getter.done():
                getter.set_result(None)
                break

    def put_nowait(self, item):
        """Append ``item`` and wake one waiting worker."""
        self._items.append(item)
        self._wakeup_next()

    def put_batch(self, batch, dict inflight):
        """Record each of ``batch`` in ``inflight`` (by id) and append it; wake one worker now, the rest later."""
        items = self._items
        append = items.append
        for a in batch:
            inflight[a.id] = a
            append(a)
        if items and self._getters:
            self._wakeup_next()
            if items and self._getters and not self._spreading:
                self._spreading = True
                self._loop.call_soon(self._spread)

    def _spread(self):
        """Wake one waiting worker per item still waiting (the workers woken before have run by now)."""
        self._spreading = False
        cdef Py_ssize_t left = len(self._items)
        getters = self._getters
        while left and getters:
            getter = getters.popleft()
            if not getter.done():
                getter.set_result(None)
                left -= 1

    def get_nowait(self):
        """Take the oldest item (``asyncio.QueueEmpty`` if there is none)."""
        if not self._items:
            raise _QueueEmpty
        return self._items.popleft()

    async def get(self):
        """Take the oldest item, waiting for one."""
        while not self._items:
            getter = self._loop.create_future()
            self._getters.append(getter)
            try:
                await getter
            except BaseException:
                getter.cancel()
                try:
                    self._getters.remove(getter)
                except ValueError:
                    pass
                if self._items and not getter.cancelled():
                    self._wakeup_next()
                raise
        return self._items.popleft()


cdef bint _failed(out, a, exc, double started, timeout) except -1:
    """Buffer the ack of a handler that raised ``exc``; true if ``exc`` must propagate instead.

    The ``except`` clauses of ``_worker_py.run_one``, in their order.
    """
    ran = _perf_counter() - started if out.metrics_on else None
    if isinstance(exc, _CancelledError):
        current = _current_task()
        if (current is not None and current.cancelling()) or out.stopping:
            if out.stopping:
                # shutdown grace ran out: back to pending, no attempt counted
                out.release.append(_LeaseRef(a.id, a.claim_token))
            return True
        # the handler raised CancelledError itself (e.g. awaited a cancelled task): a failed attempt
        out.retry_or_dead(a, _describe_error(exc), None, ran, exc)
    elif isinstance(exc, _NonRetryableError):
        out.fail(a, _describe_error(exc), ran, exc)
    elif isinstance(exc, TimeoutError):
        elapsed = _perf_counter() - started
        msg = _describe_error(exc, prefix=False) or f"timed out after {elapsed:.3f} s (timeout {timeout} s)"
        out.retry_or_dead(a, f"TimeoutError: {msg}", None, ran, exc)  # the type's retry_on / no_retry_on
    elif isinstance(exc, _RetryableError):
        out.retry_or_dead(a, _describe_error(exc), exc.retry_after, ran, exc)
    else:
        # any other failure is retryable; KeyboardInterrupt, SystemExit or any other BaseException
        # raised by a handler must end neither this worker nor the process
        out.retry_or_dead(a, _describe_error(exc), None, ran, exc)
    return False


@cython.final
cdef class _Fixed:
    """The parts of an ``Outcomes`` that never change after it is made, read once per worker task.

    (``Outcomes.acks`` is not among them: the engine's flusher swaps the list.)
    """

    cdef dict stats
    cdef object ack_ready, ack_full
    cdef Py_ssize_t ack_batch_size
    cdef bint metrics_on

    def __init__(self, out):
        self.stats = out.stats
        self.ack_ready = out.ack_ready
        self.ack_full = out.ack_full
        self.ack_batch_size = out.ack_batch_size
        self.metrics_on = out.metrics_on


cdef bint _completed(out, _Fixed fixed, a, result, double duration) except -1:
    """Buffer the ack of a handler that returned ``result``; true unless the result could not be stored.

    ``duration`` (seconds) is read only when metrics are on.
    """
    if result is None:
        data = None
    else:
        try:
            data = _encode_json(result, 0, "result")
        except _InvalidActivityError as exc:
            out.fail(a, _describe_error(exc, prefix=False), duration if fixed.metrics_on else None)
            return False
    cdef list acks = out.acks
    acks.append(_Ack(a.id, a.claim_token, _COMPLETED, data))
    cdef Py_ssize_t n = len(acks)
    if n == 1:
        fixed.ack_ready.set()
    if n >= fixed.ack_batch_size:
        fixed.ack_full.set()
    cdef dict stats = fixed.stats
    stats["completed"] += 1
    if fixed.metrics_on:
        out.done_metrics.append((a.activity_type, duration))
    return True


async def run_one(out, a, task=None):
    """Run one attempt of ``a`` and buffer its ack in ``out`` (see ``_worker_py.run_one``)."""
    handler = out.handlers.get(a.activity_type)
    if handler is None:
        out.fail(a, f"handler_not_found: no handler for activity type {a.activity_type!r}")
        return
    cancel_ids = out.cancel_ids
    if cancel_ids and a.id in cancel_ids:
        # an operator cancelled it, or its lease was lost, while it waited for a worker
        cancel_ids.discard(a.id)
        if a.id in out.lost_ids:
            out.abandoned(a)
        else:
            out.cancelled(a)
        return
    try:
        payload = handler.decode(a.payload)  # the JSON value, or the handler's annotated type
    except Exception as exc:
        out.dead_letter(a, _undecodable(handler.payload_type, exc))
        return
    ctx = new_context(a, out.executor, out.cancellation, out.progress)
    hooks = out.hooks
    if hooks:
        await _call_hooks(hooks, "on_processing", a)
    cdef double started = _perf_counter()
    timeout_ms = a.timeout_ms
    timeout = timeout_ms / 1000.0 if timeout_ms > 0 else None
    ctx.task = task if task is not None else _current_task()
    cdef dict running = out.running
    running[a.id] = ctx  # from here until the handler ends, an operator's cancel can reach it
    try:
        try:
            if handler.is_async:
                result = await out.deadlines.call(handler.fn, payload, ctx, timeout, task)
            else:
                result = await out.call_sync(handler.fn, payload, ctx, timeout)
        finally:
            del running[a.id]
    except BaseException as exc:
        if ctx.lease_lost and out.abandoned(a, ctx, exc):
            return  # stopped because its lease was lost: no claim left to acknowledge
        if ctx.cancel_requested:
            out.cancelled(a, ctx)  # whatever the stopped handler raised
            return
        if _failed(out, a, exc, started, timeout):
            raise
        return
    if ctx.lease_lost:
        out.abandoned(a, ctx)  # it returned after losing its lease: its ack below is rejected by the store
    if ctx.cancel_requested:
        out.cancelled(a, ctx)  # it returned (or swallowed the cancellation) after the request
        return
    cdef double duration = _perf_counter() - started
    child = ctx._child_executor
    if child is not None and child._issued and await out.dropped(a, ctx, duration if out.metrics_on else None):
        return  # it left enqueues through ctx.executor unawaited: failed
    if _completed(out, _Fixed(out), a, result, duration) and hooks:
        await _call_hooks(hooks, "on_processed", a, duration, result=result)


async def worker_loop(out, Handoff local):
    """One worker task: run activities from ``local`` until it hands out ``None`` (see ``_worker_py``).

    Async handlers without lifecycle hooks run inline (the steps of
    :func:`run_one`, with the engine's fixed parts read once); everything
    else goes through :func:`run_one`. Either way ``logcontext.running``
    names the activity for the whole attempt.
    """
    me = _current_task()
    cancelling_now = me.cancelling  # bound methods, looked up once per worker
    slot_free_set = out.slot_free.set
    type_busy = out.type_busy  # None unless per-type limits are set
    items = local._items
    take = items.popleft
    cdef dict handlers = out.handlers
    deadlines_obj = out.deadlines
    cdef Deadlines deadlines = deadlines_obj if type(deadlines_obj) is Deadlines else None
    deadlines_call = deadlines_obj.call
    cdef _Entry entry
    executor = out.executor
    cancellation = out.cancellation
    progress = out.progress
    cdef dict running = out.running
    cdef set cancel_ids = out.cancel_ids
    cdef bint inline = not out.hooks
    cdef double started, timeout_s
    cdef ActivityContext ctx
    cdef _Fixed fixed = _Fixed(out)
    cdef dict async_fns = {}  # activity type -> (its async handler function, its payload decoder, its Registered)
    cdef tuple entry_fn  # handlers never change once started
    while True:
        if items:
            a = take()
        else:
            a = await local.get()
        if a is None:
            return
        PyContextVar_Set(_running, a)  # not reset: this task runs nothing else until the next activity sets it again
        try:
            entry_fn = async_fns.get(a.activity_type) if inline else None
            if entry_fn is None and inline:
                handler = handlers.get(a.activity_type)
                if handler is not None and handler.is_async:
                    entry_fn = async_fns[a.activity_type] = (handler.fn, handler.decode, handler)
            if entry_fn is None or cancel_ids:
                await run_one(out, a, me)
            else:
                fn = entry_fn[0]
                try:
                    payload = entry_fn[1](a.payload)  # the JSON value, or the handler's annotated type
                except Exception as exc:
                    out.dead_letter(a, _undecodable(entry_fn[2].payload_type, exc))
                else:
                    ctx = new_context(a, executor, cancellation, progress)
                    started = _perf_counter()
                    timeout_ms = a.timeout_ms
                    ctx.task = me
                    a_id = a.id
                    running[a_id] = ctx
                    try:
                        try:
                            if deadlines is None or timeout_ms <= 0:
                                result = await deadlines_call(fn, payload, ctx,
                                                              timeout_ms / 1000.0 if timeout_ms > 0 else None, me)
                            else:
                                # Deadlines.call inlined: no coroutine of its own per activity
                                timeout_s = <double>timeout_ms / 1000.0
                                entry = deadlines.enter(me, timeout_s)
                                cancelling = cancelling_now()
                                try:
                                    result = await fn(payload, ctx)
                                except _CancelledError as exc:
                                    if entry.fired:
                                        entry.fired = False
                                        if me.uncancel() <= cancelling:
                                            raise TimeoutError from exc
                                    raise
                                finally:
                                    entry.entries.discard(entry)
                                    if entry.fired:
                                        me.uncancel()
                        finally:
                            del running[a_id]
                    except BaseException as exc:
                        if ctx.lease_lost and out.abandoned(a, ctx, exc):
                            pass  # stopped because its lease was lost: nothing to acknowledge
                        elif ctx.cancel_requested:
                            out.cancelled(a, ctx)
                        elif _failed(out, a, exc, started, timeout_ms / 1000.0 if timeout_ms > 0 else None):
                            raise
                    else:
                        if ctx.lease_lost:
                            out.abandoned(a, ctx)  # its ack is rejected by the store
                        if ctx.cancel_requested:
                            out.cancelled(a, ctx)
                        elif (ctx._child_executor is not None and ctx._child_executor._issued
                              and await out.dropped(a, ctx, _perf_counter() - started if fixed.metrics_on else None)):
                            pass  # it left enqueues through ctx.executor unawaited: failed
                        else:
                            _completed(out, fixed, a, result,
                                       _perf_counter() - started if fixed.metrics_on else 0.0)
        except _CancelledError:
            raise
        except BaseException:
            # an engine bug must neither kill this worker nor strand the activity
            log.exception("engine error while running activity %s; it will be retried", a.id)
            out.retry_or_dead(a, "engine error (see the worker log)", None)
        finally:
            busy = out.busy - 1
            out.busy = busy
            if type_busy is not None:
                out.type_done(a.activity_type)
            slot_free_set()
            if busy == 0 and out.acks:
                # nothing claimed is left to run: no ack can join the buffer before the next claim
                # lands, so the flusher sends it now instead of at the end of ack_flush_interval
                fixed.ack_full.set()


def settle(dict inflight, acks, unsent):
    """Take the claims that ``acks`` (all but ``unsent``, by identity) acknowledged out of ``inflight``."""
    cdef set pending = {id(x) for x in unsent}
    for ack in acks:
        if pending and id(ack) in pending:
            continue
        ack_id = ack.id
        held = inflight.pop(ack_id, None)  # one lookup: put back in the rare case of another claim
        if held is not None and held.claim_token != ack.claim_token:
            inflight[ack_id] = held
