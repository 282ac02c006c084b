"""What one attempt needs from a started engine, and where its outcome goes.

The engine creates one :class:`Outcomes` at :meth:`WorkerEngine.start` and
hands it to the per-activity path (:mod:`runnerq_fast.engine.worker`), which
reads the handlers, deadlines and bound executor from it and records every
outcome through it:

* classification into buffered acks: :meth:`Outcomes.fail`,
  :meth:`Outcomes.retry_or_dead` (backoff, or dead letter once the retries are
  spent), :meth:`Outcomes.dead_letter`, and the completed ack the worker path
  appends itself;
* the ack buffer (:attr:`Outcomes.acks` and its wake events) that the
  engine's flusher drains, the releases made at shutdown, and the stats;
* plain ``def`` handlers in the thread pool (:meth:`Outcomes.call_sync`) with
  the bookkeeping that keeps an activity from running twice at once;
* worker-slot accounting shared with the fetcher (:attr:`Outcomes.busy`,
  :attr:`Outcomes.slot_free`, and with per-type limits :attr:`Outcomes.type_busy`,
  :meth:`Outcomes.type_done`);
* operator cancellation of running activities: the attempts in progress
  (:attr:`Outcomes.running`), :meth:`Outcomes.request_cancel` (called by the
  engine's heartbeat when the store reports a cancel request) and
  :meth:`Outcomes.cancelled`, the ack that ends them;
* lost leases: :meth:`Outcomes.lease_lost` (called by the engine's heartbeat
  for a claim the store no longer holds) tells the handler, and
  :meth:`Outcomes.abandoned` ends an attempt stopped that way, with no ack.

Nothing here imports the engine: the engine calls this module, never the reverse.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from runnerq_fast.codec import decode_json
from runnerq_fast.config import WorkerConfig
from runnerq_fast.engine.backoff import backoff_seconds
from runnerq_fast.engine.context import ActivityContext
from runnerq_fast.engine.deadline import Deadlines
from runnerq_fast.engine.errtext import format_traceback
from runnerq_fast.engine.hooks import LifecycleHooks, call_hooks
from runnerq_fast.engine.payloads import payload_decoder
from runnerq_fast.engine.progress import ProgressBuffer
from runnerq_fast.errors import NonRetryableError, RetryableError
from runnerq_fast.metrics import (
    ACTIVITIES_COMPLETED,
    ACTIVITIES_DEAD_LETTERED,
    ACTIVITIES_FAILED,
    ACTIVITIES_RETRIED,
    ACTIVITY_DURATION,
    LabelledMetricsSink,
    NoopMetrics,
)
from runnerq_fast.models import Ack, AckOutcome, ClaimedActivity, LeaseRef, TypeDefaults

if TYPE_CHECKING:
    from runnerq_fast.executor import ActivityExecutor

__all__ = ["Backoff", "Handler", "Outcomes", "Registered"]

log = logging.getLogger("runnerq_fast.engine")

Handler = Callable[[Any, ActivityContext], Any]

_MAX_CACHED_TYPES = 10_000  # label tuples kept per engine; types beyond are built per call

_RETRY = int(AckOutcome.RETRY)
_FAILED = int(AckOutcome.FAILED)
_DEAD = int(AckOutcome.DEAD_LETTER)
_CANCELLED = int(AckOutcome.CANCELLED)


Backoff = float | tuple[float, float]
"""A type's retry backoff: base seconds (``base * 2**retry_count``, capped by the engine's
``max_retry_delay``), or ``(base, cap)`` seconds."""


class Registered:
    """A registered handler, whether it is a coroutine function (awaited on the loop) or plain, its
    payload decoder, and its type's options (``@engine.activity(..., retry_on=, no_retry_on=, backoff=,
    max_retries=, timeout=, priority=)``).

    Attributes
    ----------
    payload_type : Any
        The type the handler annotates its payload with, or ``None`` (untyped:
        no annotation, ``Any``, ``object``, a TypeVar); see :mod:`runnerq_fast.engine.payloads`.
    decode : callable
        Decodes the stored payload for the handler: the strict msgspec
        decoder into ``payload_type``, or the plain JSON decoder when untyped.
    defaults : TypeDefaults or None
        The enqueue defaults (max retries, timeout, priority; each ``None`` when not set) the engine
        records in the store at start; ``None``: nothing to record (a ``Registered`` made outside
        :meth:`~runnerq_fast.engine.WorkerEngine.register_activity`).
    retry_on : tuple of exception types or None
        When given (even empty), only these exceptions (and subclasses) are retried; others fail the
        activity. ``None``: every exception is retried.
    no_retry_on : tuple of exception types
        These exceptions fail the activity at once (checked before ``retry_on``).
    backoff : float or (float, float) or None
        The type's retry delay (see :data:`Backoff`); ``None``: the engine's.

    Raises
    ------
    ConfigError
        If the payload annotation cannot be evaluated or decoded into.
    """

    __slots__ = ("backoff", "decode", "defaults", "fn", "is_async", "no_retry_on", "payload_type", "retry_on",
                 "rules")

    def __init__(
        self,
        fn: Handler,
        activity_type: str = "",
        *,
        defaults: TypeDefaults | None = None,
        retry_on: tuple[type[BaseException], ...] | None = None,
        no_retry_on: tuple[type[BaseException], ...] = (),
        backoff: Backoff | None = None,
    ) -> None:
        self.fn = fn
        self.is_async = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
            getattr(fn, "__call__", None)  # noqa: B004 - async callable objects
        )
        self.payload_type, typed = payload_decoder(fn, activity_type)
        self.decode: Callable[[bytes | str], Any] = decode_json if typed is None else typed
        self.defaults = defaults
        self.retry_on = retry_on
        self.no_retry_on = no_retry_on
        self.backoff = backoff
        #: whether the type has retry rules of its own (the failure path checks this first)
        self.rules = retry_on is not None or bool(no_retry_on) or backoff is not None

    def retryable(self, exc: BaseException) -> bool:
        """Whether the type's rules let ``exc`` be retried.

        A :class:`RetryableError` is always retried (while retries remain), and so is a
        :class:`asyncio.CancelledError` the handler raised itself: the lists decide only for the
        handler's other exceptions (a :class:`NonRetryableError` never reaches here).
        """
        if isinstance(exc, RetryableError | asyncio.CancelledError):
            return True
        if self.no_retry_on and isinstance(exc, self.no_retry_on):
            return False
        return self.retry_on is None or isinstance(exc, self.retry_on)

    def delay(self, retry_count: int, config: WorkerConfig) -> float:
        """Seconds before retry ``retry_count + 1``: the type's backoff, else the engine's, with its jitter."""
        backoff = self.backoff
        if backoff is None:
            return backoff_seconds(retry_count, config.retry_delay, config.max_retry_delay, config.retry_jitter)
        base, cap = backoff if isinstance(backoff, tuple) else (backoff, max(backoff, config.max_retry_delay))
        return backoff_seconds(retry_count, base, cap, config.retry_jitter)


def _rule_named(handler: Registered, exc: BaseException) -> str:
    """Which rule of the type kept ``exc`` from a retry (for the error text)."""
    if handler.no_retry_on and isinstance(exc, handler.no_retry_on):
        return "no_retry_on"
    return "retry_on does not name " + type(exc).__name__


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def _uncancel() -> None:
    """Withdraw the current task's pending cancellation (we chose to keep waiting)."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        task.uncancel()


def new_stats() -> dict[str, int]:
    """Zeroed outcome counters: completed, retried, failed, dead_letter, cancelled, rejected (late acks),
    lease_lost (claims the heartbeat found taken back by the store)."""
    return {"completed": 0, "retried": 0, "failed": 0, "dead_letter": 0, "cancelled": 0, "rejected": 0,
            "lease_lost": 0}


class Outcomes:
    """The per-activity path's state for one run of an engine.

    Parameters
    ----------
    config : WorkerConfig
        The engine's settings (ack batch size, retry backoff).
    handlers : Mapping[str, Registered]
        Handlers by activity type.
    executor : ActivityExecutor
        Enqueues child activities (given to each :class:`ActivityContext`).
    metrics : LabelledMetricsSink
        Counters and durations, labelled by queue and activity type (and
        outcome); :class:`NoopMetrics` records nothing and is skipped.
    hooks : tuple of LifecycleHooks
        Called around each attempt.
    loop : asyncio.AbstractEventLoop
        The running loop.
    threads : ThreadPoolExecutor or None
        Runs plain ``def`` handlers (``None`` when every handler is async).
    limits : Mapping[str, int] or None
        Most activities of each type run at once, for the types this engine
        claims (``config.limits`` without the types it does not claim).
        Default ``None``: no per-type limit.
    """

    __slots__ = (
        "_hook_tasks",
        "_labels",
        "ack_batch_size",
        "ack_full",
        "ack_ready",
        "acks",
        "busy",
        "cancel_ids",
        "cancellation",
        "config",
        "deadlines",
        "done_metrics",
        "executor",
        "handlers",
        "hooks",
        "loop",
        "lost_ids",
        "metrics",
        "metrics_on",
        "progress",
        "release",
        "retry_wake",
        "running",
        "slot_free",
        "stats",
        "stopping",
        "threads",
        "type_busy",
        "type_free",
        "type_limits",
    )

    def __init__(
        self,
        config: WorkerConfig,
        handlers: Mapping[str, Registered],
        executor: ActivityExecutor,
        metrics: LabelledMetricsSink,
        hooks: tuple[LifecycleHooks, ...],
        loop: asyncio.AbstractEventLoop,
        threads: ThreadPoolExecutor | None,
        limits: Mapping[str, int] | None = None,
    ) -> None:
        self.config = config
        self.ack_batch_size = config.ack_batch_size
        self.handlers = handlers
        self.executor = executor
        self.metrics = metrics
        self.metrics_on = not isinstance(metrics, NoopMetrics)
        self.hooks = hooks
        self.loop = loop
        self.threads = threads
        self.deadlines = Deadlines(loop)
        #: set at shutdown; handlers see it as ``ctx.cancelled``
        self.cancellation = asyncio.Event()
        #: set by the engine when it stops: a cancelled attempt is then released, not failed
        self.stopping = False
        #: buffered acks, drained by the engine's flusher; ``ack_ready`` on the first, ``ack_full`` (flush now) at
        #: the batch size, or when the last activity running here ends (no ack can join before the next claim)
        self.acks: list[Ack] = []
        self.ack_ready = asyncio.Event()
        self.ack_full = asyncio.Event()
        #: the latest unsent ``ctx.set_progress`` value of each attempt, written by the engine
        self.progress = ProgressBuffer(loop)
        #: claims to put back to pending without counting an attempt (shutdown)
        self.release: list[LeaseRef] = []
        #: set when a retry this engine scheduled comes due (wakes an idle fetcher)
        self.retry_wake = asyncio.Event()
        #: worker slots taken (claimed and not yet ended); ``slot_free`` is set when one ends
        self.busy = 0
        self.slot_free = asyncio.Event()
        #: with per-type limits (``limits``: those of ``config.limits`` on types this engine claims): slots
        #: taken per limited type, and an event set when a type at its limit frees one; ``None`` without
        #: limits (the worker path then skips it)
        self.type_limits: dict[str, int] = dict(limits or {})
        self.type_busy: dict[str, int] | None = dict.fromkeys(self.type_limits, 0) if self.type_limits else None
        self.type_free = asyncio.Event()
        self.stats = new_stats()
        self._hook_tasks: set[asyncio.Future[None]] = set()
        self._labels: dict[str, tuple[tuple[str, ...], ...]] = {}
        #: (activity type, run seconds) of completed attempts not yet given to the sink (metrics on only);
        #: the worker path appends, :meth:`flush_metrics` hands them over in batches
        self.done_metrics: list[tuple[str, float]] = []

        #: the context of every attempt whose handler is running, by activity id
        self.running: dict[str, ActivityContext] = {}
        #: claimed activities an operator asked to cancel before their handler started; the worker path
        #: checks only this set, so the ids of :attr:`lost_ids` are in it too
        self.cancel_ids: set[str] = set()
        #: claimed activities whose lease was lost before their handler started (never started)
        self.lost_ids: set[str] = set()

    # ------------------------------------------------------------ metrics
    def labels(self, activity_type: str) -> tuple[tuple[str, ...], ...]:
        """The label tuples of ``activity_type``: (queue, type), then (queue, type, outcome) for
        completed, retry, failed and dead_letter (cached; see :data:`runnerq_fast.metrics.LABELS`)."""
        lab = self._labels.get(activity_type)
        if lab is None:
            q = self.config.queue_name
            lab = (
                (q, activity_type),
                (q, activity_type, "completed"),
                (q, activity_type, "retry"),
                (q, activity_type, "failed"),
                (q, activity_type, "dead_letter"),
            )
            if len(self._labels) < _MAX_CACHED_TYPES:
                self._labels[activity_type] = lab
        return lab

    def flush_metrics(self) -> None:
        """Give the buffered completions to the sink, one count and one ``observe_many`` per type.

        Called by the engine after each ack flush and at stop, so the per-activity
        path only appends to a list.
        """
        done = self.done_metrics
        if not done:
            return
        self.done_metrics = []
        by_type: dict[str, list[float]] = {}
        for t, seconds in done:
            runs = by_type.get(t)
            if runs is None:
                by_type[t] = [seconds]
            else:
                runs.append(seconds)
        m = self.metrics
        for t, runs in by_type.items():
            lab = self.labels(t)
            m.count(ACTIVITIES_COMPLETED, lab[0], len(runs))
            m.observe_many(ACTIVITY_DURATION, lab[1], runs)

    def _record(self, activity_type: str, counter: str, outcome: int, duration: float | None) -> None:
        lab = self.labels(activity_type)
        self.metrics.count(counter, lab[0])
        if duration is not None:
            self.metrics.observe(ACTIVITY_DURATION, lab[outcome], duration)

    def type_done(self, activity_type: str) -> None:
        """Free a slot of ``activity_type`` (only called when :attr:`type_busy` is set)."""
        type_busy = self.type_busy
        assert type_busy is not None
        held = type_busy.get(activity_type)
        if held is not None:
            type_busy[activity_type] = held - 1
            if held >= self.type_limits[activity_type]:
                self.type_free.set()

    # ------------------------------------------------------------ classification
    def push_ack(self, ack: Ack) -> None:
        """Buffer ``ack`` and wake the flusher (at the first ack, and when a batch is full)."""
        acks = self.acks
        acks.append(ack)
        if len(acks) == 1:
            self.ack_ready.set()
        if len(acks) >= self.ack_batch_size:
            self.ack_full.set()

    def fail(
        self, a: ClaimedActivity, err: str, duration: float | None = None, exc: BaseException | None = None
    ) -> None:
        """Record a final failure of ``a`` (not retried) with error text ``err``.

        ``duration`` is the attempt's run time in seconds, ``None`` when no
        handler ran (unknown type, undecodable payload). ``exc`` is what the
        handler raised, if it raised: its traceback is stored with the
        attempt and logged (at error level, once), and the ``on_failed``
        hooks get it.
        """
        tb = None
        if exc is None:
            log.warning("activity %s (%s) failed: %s", a.id, a.activity_type, err)
        else:
            tb = format_traceback(exc)
            log.error("activity %s (%s) failed: %s\n%s", a.id, a.activity_type, err, tb.rstrip("\n"))
        self.push_ack(Ack(a.id, a.claim_token, _FAILED, None, err, 0, tb))
        self.stats["failed"] += 1
        if self.metrics_on:
            self._record(a.activity_type, ACTIVITIES_FAILED, 3, duration)
        if self.hooks:
            self.spawn_hook("on_failed", a, err, exception=exc, traceback=tb)

    def retry_or_dead(
        self,
        a: ClaimedActivity,
        err: str,
        retry_after: float | None,
        duration: float | None = None,
        exc: BaseException | None = None,
    ) -> None:
        """Schedule a retry of ``a``, or dead-letter it once its retries are spent.

        With ``exc`` (what the handler raised, when neither a
        :class:`RetryableError` nor a :class:`NonRetryableError`), the
        type's rules apply first: an exception its ``no_retry_on`` names,
        or one its ``retry_on`` (when given) does not, fails the activity
        at once (:meth:`fail`), as a :class:`NonRetryableError` does.

        Parameters
        ----------
        a : ClaimedActivity
            The failed attempt.
        err : str
            Error text stored with the attempt.
        retry_after : float or None
            Delay in seconds asked for by :class:`RetryableError`; ``None``
            uses the type's ``backoff``, else the engine's
            ``min(max_retry_delay, retry_delay * 2**retry_count)`` (SPEC §3),
            with the configured jitter.
        duration : float or None
            The attempt's run time in seconds, for the metrics (``None``: not measured).
        exc : BaseException or None
            What the handler raised, if it raised: its traceback is stored
            with the attempt (logged at debug level for a retry, at error
            level for a dead letter) and the hooks get it.
        """
        handler = self.handlers.get(a.activity_type)
        if handler is not None and not handler.rules:
            handler = None  # the engine's rules (the common case: one lookup on the failure path)
        if handler is not None and exc is not None and not handler.retryable(exc):
            self.fail(a, f"{err} (not retried: the type's {_rule_named(handler, exc)})", duration, exc)
            return
        if a.retry_count >= a.max_retries:
            self.dead_letter(a, err, duration, exc)
            return
        cfg = self.config
        if retry_after is not None:
            delay = retry_after
        elif handler is not None:
            delay = handler.delay(a.retry_count, cfg)
        else:
            delay = backoff_seconds(a.retry_count, cfg.retry_delay, cfg.max_retry_delay, cfg.retry_jitter)
        retry_at = int((time.time() + delay) * 1000)
        # wake the fetcher when it is due (+2 ms: the store's clock has millisecond steps)
        self.loop.call_later(delay + 0.002, self.retry_wake.set)
        tb = None if exc is None else format_traceback(exc)
        log.info("activity %s (%s) attempt %d failed, retrying in %.3f s: %s",
                 a.id, a.activity_type, a.retry_count + 1, delay, err)
        if tb is not None and log.isEnabledFor(logging.DEBUG):
            log.debug("activity %s (%s) attempt %d: %s", a.id, a.activity_type, a.retry_count + 1, tb.rstrip("\n"))
        self.push_ack(Ack(a.id, a.claim_token, _RETRY, None, err, retry_at, tb))
        self.stats["retried"] += 1
        if self.metrics_on:
            self._record(a.activity_type, ACTIVITIES_RETRIED, 2, duration)
        if self.hooks:
            self.spawn_hook("on_released", a, delay, err, exception=exc, traceback=tb)

    def dead_letter(
        self, a: ClaimedActivity, err: str, duration: float | None = None, exc: BaseException | None = None
    ) -> None:
        """Move ``a`` to the dead letters with error text ``err``.

        ``duration`` is the run time in seconds, if a handler ran; ``exc``
        what it raised, if it raised (its traceback is stored, logged here and
        given to the ``on_dead_letter`` hooks).
        """
        attempts = a.retry_count + 1
        tb = None if exc is None else format_traceback(exc)
        log.error("activity %s (%s) dead-lettered after %d attempt%s: %s%s",
                  a.id, a.activity_type, attempts, "" if attempts == 1 else "s", err,
                  "" if tb is None else "\n" + tb.rstrip("\n"))
        self.push_ack(Ack(a.id, a.claim_token, _DEAD, None, err, 0, tb))
        self.stats["dead_letter"] += 1
        if self.metrics_on:
            self._record(a.activity_type, ACTIVITIES_DEAD_LETTERED, 4, duration)
        if self.hooks:
            self.spawn_hook("on_dead_letter", a, err, exception=exc, traceback=tb)

    def request_cancel(self, ids: Iterable[str], inflight: Mapping[str, ClaimedActivity]) -> int:
        """Stop the handlers of ``ids``, which an operator asked to cancel.

        An ``async def`` handler's task is cancelled (once); a plain ``def``
        one, which a thread cannot interrupt, sees ``ctx.cancel_requested``.
        Either way the attempt then ends :meth:`cancelled`. An id claimed but
        not started yet is cancelled when a worker takes it.

        Parameters
        ----------
        ids : iterable of str
            Activity ids the store reported as cancel requested.
        inflight : mapping of str to ClaimedActivity
            The engine's claims not yet acknowledged (to forget ids no longer held).

        Returns
        -------
        int
            Handlers newly asked to stop.
        """
        stopped = 0
        for aid in ids:
            ctx = self.running.get(aid)
            if ctx is None:
                if aid in inflight:
                    self.cancel_ids.add(aid)
                continue
            if ctx.cancel_requested:
                continue
            ctx.cancel_requested = True
            stopped += 1
            handler = self.handlers.get(ctx.activity_type)
            if handler is not None and handler.is_async and ctx.task is not None:
                ctx._cancel_sent = True
                ctx.task.cancel()
            log.info("activity %s (%s): cancel requested, stopping its handler", aid, ctx.activity_type)
        self.cancel_ids.intersection_update(inflight)
        self.cancel_ids |= self.lost_ids  # taken out of ``inflight`` but still not to be started
        return stopped

    def cancelled(self, a: ClaimedActivity, ctx: ActivityContext | None = None) -> None:
        """End the attempt of ``a`` as cancelled by an operator (after its handler stopped, if it ran).

        Withdraws the task cancellation :meth:`request_cancel` sent, whether or
        not the handler let it through.
        """
        if ctx is not None and ctx._cancel_sent:
            ctx._cancel_sent = False
            task = ctx.task
            if task is not None and task.cancelling():
                task.uncancel()
        log.info("activity %s (%s) cancelled by request", a.id, a.activity_type)
        self.push_ack(Ack(a.id, a.claim_token, _CANCELLED))
        self.stats["cancelled"] += 1

    def lease_lost(self, ids: Iterable[str], inflight: Mapping[str, ClaimedActivity]) -> int:
        """Tell the attempts of ``ids`` that their lease was lost (the store took the activity back).

        An ``async def`` handler's task is cancelled (once); a plain ``def``
        one, which a thread cannot interrupt, sees ``ctx.lease_lost``. An id
        claimed but not started yet is never started. Whatever the handler
        still acknowledges is rejected by the store's claim guard.

        Parameters
        ----------
        ids : iterable of str
            Activity ids whose claim the store no longer holds.
        inflight : mapping of str to ClaimedActivity
            The engine's claims not yet acknowledged (an id not running but in
            here waits in the hand-off for a worker).

        Returns
        -------
        int
            Running handlers newly told.
        """
        told = 0
        for aid in ids:
            ctx = self.running.get(aid)
            if ctx is None:
                if aid in inflight:
                    self.lost_ids.add(aid)
                    self.cancel_ids.add(aid)
                continue
            if ctx.lease_lost:
                continue
            ctx.lease_lost = True
            told += 1
            handler = self.handlers.get(ctx.activity_type)
            if handler is not None and handler.is_async and ctx.task is not None and not ctx._cancel_sent:
                ctx._cancel_sent = True
                ctx.task.cancel()
        return told

    def abandoned(self, a: ClaimedActivity, ctx: ActivityContext | None = None,
                  exc: BaseException | None = None) -> bool:
        """Settle an attempt of ``a`` whose lease was lost; ``True`` if it ends here, with no ack.

        It ends here when it never started (``ctx`` is ``None``) or when its
        handler ended with the cancellation :meth:`lease_lost` sent (``exc``);
        there is no claim left to acknowledge. Otherwise (a plain ``def``
        returned or raised, or an ``async def`` one swallowed the cancellation)
        the caller acknowledges the outcome as usual and the store rejects it.
        Either way the task cancellation :meth:`lease_lost` sent is withdrawn.
        """
        self.lost_ids.discard(a.id)
        sent = False
        if ctx is not None and ctx._cancel_sent:
            sent, ctx._cancel_sent = True, False
            task = ctx.task
            if task is not None and task.cancelling():
                task.uncancel()
        if ctx is not None and not (sent and isinstance(exc, asyncio.CancelledError)):
            return False
        log.info("activity %s (%s): attempt abandoned, its lease was lost", a.id, a.activity_type)
        return True

    async def dropped(self, a: ClaimedActivity, ctx: ActivityContext, duration: float | None = None) -> bool:
        """Fail ``a`` if its ``async def`` handler returned leaving enqueues through ``ctx.executor`` unawaited.

        Called only when the handler used ``ctx.executor`` and returned. A
        coroutine of ``ctx.executor.activity(...).execute()`` (or
        ``enqueue_many``) that never started was never awaited: its child
        was never created. The loop runs once first, so that a task the
        handler made of one starts; those still not started are closed and
        the attempt fails (not retried: the code must ``await`` them). The
        activity ends ``failed`` with an error naming the types.

        Returns
        -------
        bool
            Whether the attempt was failed here (no ack to add).
        """
        child = ctx._child_executor
        if child is None or not child.unawaited():
            return False
        await asyncio.sleep(0)  # a task made of one starts now
        left = child.unawaited()
        if not left:
            return False
        for coro, _ in left:
            coro.close()
        names = ", ".join(sorted({what for _, what in left}))
        self.fail(a, f"the handler returned leaving {len(left)} enqueue(s) through ctx.executor never awaited "
                     f"({names}): nothing was enqueued by them; `await` each (or use a plain def handler, whose "
                     "ctx.executor enqueues without await)", duration)
        return True

    def spawn_hook(self, name: str, *args: Any, **outcome: Any) -> None:
        """Run lifecycle hook ``name`` in the background (failures are logged by :func:`call_hooks`).

        ``outcome`` (``exception=``, ``traceback=``) goes to :func:`call_hooks`.
        """
        task = asyncio.ensure_future(call_hooks(self.hooks, name, *args, **outcome))
        self._hook_tasks.add(task)
        task.add_done_callback(self._hook_tasks.discard)

    # ------------------------------------------------------------ plain def handlers
    async def call_sync(self, fn: Handler, payload: Any, ctx: ActivityContext, timeout: float | None) -> Any:
        """Run a plain ``def`` handler in the thread pool.

        The call runs in a copy of the caller's :mod:`contextvars` context
        (like :func:`asyncio.to_thread`), so the running activity is known in
        its thread too. The timeout (seconds, ``None`` for none) counts from the moment a
        thread starts the call, not while the call waits for a free thread. A
        thread cannot be interrupted, so that an activity never runs twice at
        once: a timed-out call still counts as a failed attempt but its ack
        waits until the thread has returned; at shutdown a call that has not
        started is withdrawn (and its activity released), while a running one
        is waited for (past ``shutdown_grace``) and acknowledged with its real
        outcome.

        Raises
        ------
        TimeoutError
            If the call ran longer than ``timeout`` (raised once the thread returned).
        asyncio.CancelledError
            If cancelled before the call started, or outside shutdown.
        """
        assert self.threads is not None
        loop = self.loop
        started: asyncio.Future[None] = loop.create_future()
        context = contextvars.copy_context()  # the thread sees what the worker task sees (the running activity)

        def run() -> Any:
            loop.call_soon_threadsafe(_resolve, started)
            result = context.run(fn, payload, ctx)
            if inspect.isawaitable(result):
                raise _returned_awaitable(fn, result)
            return result

        call = self.threads.submit(run)
        done = asyncio.wrap_future(call)
        try:
            await asyncio.shield(started)
        except asyncio.CancelledError:
            if not self.stopping or call.cancel():
                raise  # withdrawn before it ran: the caller releases the activity
            _uncancel()  # it started meanwhile: wait for it below
        try:
            if timeout is None:
                return await asyncio.shield(done)
            return await asyncio.wait_for(asyncio.shield(done), timeout)
        except TimeoutError:
            log.warning("plain-def handler of %s timed out after %s s; waiting for its thread before the retry",
                        ctx.activity_id, timeout)
            await self._wait_thread(done)
            raise TimeoutError(f"timed out after {timeout} s") from None
        except asyncio.CancelledError:
            if not self.stopping:
                raise
            log.warning("plain-def handler of %s cannot be cancelled; waiting for it to finish", ctx.activity_id)
            await self._wait_thread(done)
            return done.result()

    async def _wait_thread(self, done: asyncio.Future[Any]) -> None:
        """Wait for a thread-pool call to end, ignoring shutdown cancellation."""
        while not done.done():
            try:
                await asyncio.shield(done)
            except asyncio.CancelledError:
                if not self.stopping:
                    raise
                _uncancel()
            except BaseException:
                return


def _returned_awaitable(fn: Handler, result: Any) -> NonRetryableError:
    """The error of a plain ``def`` handler that returned an awaitable (closed here, never run).

    Nothing would ever await it: what it was meant to do (say, enqueue a child
    through an async executor) would silently not happen. The attempt fails
    (not retried: the code must change).
    """
    close = getattr(result, "close", None)
    if inspect.iscoroutine(result) and close is not None:
        close()  # no "never awaited" warning: this error says it
    name = getattr(fn, "__qualname__", type(fn).__name__)
    return NonRetryableError(
        f"plain def handler {name} returned {type(result).__name__} {result!r}, an awaitable nobody awaits; "
        "declare the handler `async def` to await it (a plain def handler's ctx.executor enqueues without await)"
    )
