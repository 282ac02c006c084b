"""The engine's per-activity path: the pure-Python reference twin.

:mod:`runnerq_fast.engine.worker` selects the compiled twin
(``runnerq_fast.engine._worker``) when it is built. Three pieces, all used
by :class:`~runnerq_fast.engine.WorkerEngine`, which hands them its
:class:`~runnerq_fast.engine.outcomes.Outcomes` (handlers, deadlines, the ack
buffer and outcome classification); nothing here knows the engine:

* :class:`Handoff`, the FIFO between the fetcher and the worker tasks (what
  ``asyncio.Queue`` did, with a batch put that also records the claims in
  flight);
* :func:`run_one`, one attempt: decode the payload (into the handler's
  payload type when it annotates one), await the handler under
  its timeout, classify the outcome and buffer its :class:`~runnerq_fast.models.Ack`;
* :func:`worker_loop`, a worker task: take activities from the hand-off and
  run them until it hands out ``None``, each with
  :data:`~runnerq_fast.engine.logcontext.running` set to it for the whole attempt;

plus :func:`settle`, the ack bookkeeping after a flush.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from runnerq_fast.codec import encode_json
from runnerq_fast.engine.context import ActivityContext
from runnerq_fast.engine.errtext import describe_error
from runnerq_fast.engine.hooks import call_hooks
from runnerq_fast.engine.logcontext import running
from runnerq_fast.engine.payloads import undecodable
from runnerq_fast.errors import InvalidActivityError, NonRetryableError, RetryableError
from runnerq_fast.models import Ack, AckOutcome, ClaimedActivity, LeaseRef

if TYPE_CHECKING:
    from runnerq_fast.engine.outcomes import Outcomes

__all__ = ["Handoff", "run_one", "settle", "worker_loop"]

log = logging.getLogger("runnerq_fast.engine")

_COMPLETED = int(AckOutcome.COMPLETED)


class Handoff:
    """FIFO of claimed activities (``None``: a worker should end), waking waiting workers.

    Behaves as an unbounded ``asyncio.Queue`` (same order, same cancellation
    handling in :meth:`get`) without its task accounting, and with fewer
    wake-ups for a batch: :meth:`put_batch` wakes one waiting worker at once
    and the others one loop step later, as many as items are still waiting
    then. A worker takes the next item without waiting when there is one, so
    handlers that end without awaiting anything are run by the first worker
    woken, one after another, instead of waking a worker per item that would
    find nothing left; a handler that does await leaves the rest to the
    workers woken one step later.

    Parameters
    ----------
    loop : asyncio.AbstractEventLoop
        The loop the workers run on.
    """

    __slots__ = ("_getters", "_items", "_loop", "_spreading")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._items: collections.deque[ClaimedActivity | None] = collections.deque()
        self._getters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._spreading = False  # a _spread call is scheduled

    def __len__(self) -> int:
        return len(self._items)

    def empty(self) -> bool:
        """Whether nothing is waiting to be taken."""
        return not self._items

    def _wakeup_next(self) -> None:
        getters = self._getters
        while getters:
            getter = getters.popleft()
            if not getter.done():
                getter.set_result(None)
                break

    def put_nowait(self, item: ClaimedActivity | None) -> None:
        """Append ``item`` and wake one waiting worker."""
        self._items.append(item)
        self._wakeup_next()

    def put_batch(self, batch: Iterable[ClaimedActivity], inflight: dict[str, ClaimedActivity]) -> None:
        """Record each of ``batch`` in ``inflight`` (by id) and append it.

        Wakes one waiting worker now and, one loop step later, one more per
        item still waiting then (see the class docstring).
        """
        items = self._items
        for a in batch:
            inflight[a.id] = a
            items.append(a)
        if items and self._getters:
            self._wakeup_next()
            if items and self._getters and not self._spreading:
                self._spreading = True
                self._loop.call_soon(self._spread)

    def _spread(self) -> None:
        """Wake one waiting worker per item still waiting (the workers woken before have run by now)."""
        self._spreading = False
        left = len(self._items)
        getters = self._getters
        while left and getters:
            getter = getters.popleft()
            if not getter.done():
                getter.set_result(None)
                left -= 1

    def get_nowait(self) -> ClaimedActivity | None:
        """Take the oldest item.

        Raises
        ------
        asyncio.QueueEmpty
            If there is none.
        """
        if not self._items:
            raise asyncio.QueueEmpty
        return self._items.popleft()

    async def get(self) -> ClaimedActivity | None:
        """Take the oldest item, waiting for one."""
        while not self._items:
            getter = self._loop.create_future()
            self._getters.append(getter)
            try:
                await getter
            except BaseException:
                getter.cancel()
                with contextlib.suppress(ValueError):
                    self._getters.remove(getter)
                if self._items and not getter.cancelled():
                    self._wakeup_next()
                raise
        return self._items.popleft()


async def run_one(out: Outcomes, a: ClaimedActivity, task: asyncio.Task[Any] | None = None) -> None:
    """Run one attempt of ``a`` and buffer its ack in ``out``.

    Parameters
    ----------
    out : Outcomes
        The started engine's per-activity state (handlers, deadlines, ack buffer, stats).
    a : ClaimedActivity
        The claimed activity.
    task : asyncio.Task, optional
        The task running this call (saves a lookup per call).

    Raises
    ------
    asyncio.CancelledError
        If the worker task was cancelled (at shutdown the activity is then
        queued for release first).
    """
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
        out.dead_letter(a, undecodable(handler.payload_type, exc))
        return
    ctx = ActivityContext(a, out.executor, out.cancellation, out.progress)
    hooks = out.hooks
    if hooks:
        await call_hooks(hooks, "on_processing", a)
    started = time.perf_counter()
    timeout = a.timeout_ms / 1000.0 if a.timeout_ms > 0 else None
    ctx.task = task if task is not None else asyncio.current_task()
    running = out.running
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
    duration = time.perf_counter() - started
    child = ctx._child_executor
    if child is not None and child._issued and await out.dropped(a, ctx, duration if out.metrics_on else None):
        return  # it left enqueues through ctx.executor unawaited: failed
    if result is None:
        data = None
    else:
        try:
            data = encode_json(result, 0, "result")
        except InvalidActivityError as exc:
            out.fail(a, describe_error(exc, prefix=False), duration if out.metrics_on else None)
            return
    out.push_ack(Ack(a.id, a.claim_token, _COMPLETED, data))
    out.stats["completed"] += 1
    if out.metrics_on:
        out.done_metrics.append((a.activity_type, duration))
    if hooks:
        await call_hooks(hooks, "on_processed", a, duration, result=result)


def _failed(out: Outcomes, a: ClaimedActivity, exc: BaseException, started: float, timeout: float | None) -> bool:
    """Buffer the ack of a handler that raised ``exc``; ``True`` if ``exc`` must propagate instead."""
    ran = time.perf_counter() - started if out.metrics_on else None  # the attempt's run time, for the metrics
    if isinstance(exc, asyncio.CancelledError):
        current = asyncio.current_task()
        if (current is not None and current.cancelling()) or out.stopping:
            if out.stopping:
                # shutdown grace ran out: back to pending, no attempt counted
                out.release.append(LeaseRef(a.id, a.claim_token))
            return True
        # the handler raised CancelledError itself (e.g. awaited a cancelled task): a failed attempt
        out.retry_or_dead(a, describe_error(exc), None, ran, exc)
    elif isinstance(exc, NonRetryableError):
        out.fail(a, describe_error(exc), ran, exc)
    elif isinstance(exc, TimeoutError):
        elapsed = time.perf_counter() - started
        msg = describe_error(exc, prefix=False) or f"timed out after {elapsed:.3f} s (timeout {timeout} s)"
        out.retry_or_dead(a, f"TimeoutError: {msg}", None, ran, exc)  # the type's retry_on / no_retry_on
    elif isinstance(exc, RetryableError):
        out.retry_or_dead(a, describe_error(exc), exc.retry_after, ran, exc)
    else:
        # any other failure is retryable; KeyboardInterrupt, SystemExit, GeneratorExit or any other
        # BaseException raised by a handler must end neither this worker nor the process (a real
        # SIGINT reaches the engine through its signal handler, never through a handler's frame)
        out.retry_or_dead(a, describe_error(exc), None, ran, exc)
    return False


async def worker_loop(out: Outcomes, local: Handoff) -> None:
    """One worker task: run activities from ``local`` until it hands out ``None``.

    An exception escaping :func:`run_one` (an engine bug; any BaseException
    but a cancellation) is logged and the attempt counted as failed; the
    worker keeps going. Every activity taken frees its slot (``out.busy``,
    ``out.slot_free``, and its type's slot with per-type limits) when it
    ends; the last one running (``out.busy`` back to 0) has the buffered acks
    flushed at once (``out.ack_full``). While it runs, :data:`~runnerq_fast.engine.logcontext.running`
    names it (log records, :func:`~runnerq_fast.current_activity`).
    """
    me = asyncio.current_task()
    slot_free = out.slot_free
    type_busy = out.type_busy  # None unless per-type limits are set
    while True:
        a = await local.get()
        if a is None:
            return
        running.set(a)  # not reset: this task runs nothing else until the next activity sets it again
        try:
            await run_one(out, a, me)
        except asyncio.CancelledError:
            raise
        except BaseException:
            # an engine bug must neither kill this worker nor strand the activity
            log.exception("engine error while running activity %s; it will be retried", a.id)
            out.retry_or_dead(a, "engine error (see the worker log)", None)
        finally:
            out.busy -= 1
            if type_busy is not None:
                out.type_done(a.activity_type)
            slot_free.set()
            if out.busy == 0 and out.acks:
                # nothing claimed is left to run: no ack can join the buffer before the next claim
                # lands, so the flusher sends it now instead of at the end of ack_flush_interval
                out.ack_full.set()


def settle(inflight: dict[str, ClaimedActivity], acks: Iterable[Ack], unsent: Iterable[Ack]) -> None:
    """Take the claims that ``acks`` (all but ``unsent``, by identity) acknowledged out of ``inflight``.

    Only the claim an ack belongs to: a late ack of a reaped attempt must not
    take a newer claim of the same activity out of the heartbeat.
    """
    pending = {id(a) for a in unsent}
    for ack in acks:
        if pending and id(ack) in pending:
            continue
        held = inflight.get(ack.id)
        if held is not None and held.claim_token == ack.claim_token:
            del inflight[ack.id]
