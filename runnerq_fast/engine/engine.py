"""The worker engine: fetcher, worker tasks, ack buffer, heartbeat, reaper, shutdown.

One engine serves one queue of one backend::

    fetcher ──claim(free slots)──▶ local queue ──▶ worker tasks ──▶ ack buffer ──ack(batch)──▶ backend
       ▲  wait_for_work (notification)                                   heartbeat: extend_leases(all in flight)
                                                                          reaper:    requeue_expired

* The fetcher claims up to the number of free worker slots in one round trip.
* Worker tasks run handlers (async ones on the loop, plain ``def`` ones in a
  bounded thread pool) with the activity's timeout.
* Outcomes go into an ack buffer flushed as one backend call every
  ``ack_flush_interval`` seconds or ``ack_batch_size`` acks, and at once when
  the last activity running ends (no other ack can join the batch before the
  next claim lands, so waiting would only delay the results).
* One heartbeat call extends the lease of every activity in flight.
* The reaper takes back activities whose lease expired (another worker died);
  the store counts the attempt only against an activity that ran alone, and
  marks the others suspect: the fetcher then runs each suspect alone
  (:meth:`WorkerEngine._run_alone`), so a poison activity is found out
  without charging the activities that shared its worker.
* A heartbeat that finds a claim gone (not merely acknowledged meanwhile)
  logs it once and tells its handler (``ctx.lease_lost``; an async one is
  cancelled).
* The pruner (:mod:`~runnerq_fast.engine.pruner`) deletes finished activities
  past their retention, one pruner per queue across workers.
* Shutdown stops claiming, gives running handlers ``shutdown_grace`` seconds,
  cancels the rest and releases them to ``pending`` without counting an attempt,
  releases claimed-but-unstarted work, and flushes the acks.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import signal
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar, Unpack

import msgspec

from runnerq_fast.config import WorkerConfig, WorkerSettings
from runnerq_fast.engine.batching import AdaptiveBatch
from runnerq_fast.engine.errtext import describe_error
from runnerq_fast.engine.hooks import LifecycleHooks
from runnerq_fast.engine.outcomes import Backoff, Handler, Outcomes, Registered, new_stats
from runnerq_fast.engine.presence import Presence
from runnerq_fast.engine.progress import PROGRESS_INTERVAL
from runnerq_fast.engine.pruner import Pruner
from runnerq_fast.engine.scheduler import Schedule, make_schedule, run_schedules
from runnerq_fast.engine.worker import Handoff, settle, worker_loop
from runnerq_fast.errors import BackendError, ConfigError, InvalidActivityError, StoreBusyError
from runnerq_fast.executor import ActivityExecutor, check_type_options, mark_handler, validate_activity_type
from runnerq_fast.metrics import (
    ACKS_REJECTED,
    ACTIVITIES_CLAIMED,
    ACTIVITIES_REAPED,
    BACKEND_ERRORS,
    QUEUE_WAIT,
    MetricsSink,
    NoopMetrics,
    labelled,
)
from runnerq_fast.models import Ack, ClaimedActivity, LeaseRef, Priority, TypeDefaults
from runnerq_fast.observability.admin import QueueAdmin
from runnerq_fast.observability.inspector import QueueInspector
from runnerq_fast.resilience import busy_attempts
from runnerq_fast.storage import Backend, open_backend

__all__ = ["Handler", "WorkerEngine", "describe_error", "run_with_uvloop"]

log = logging.getLogger("runnerq_fast.engine")

SHORT_LEASE_SECONDS = 1.0
"""Leases shorter than this (seconds) get a warning at start: a stall of the event loop or the store longer
than the lease hands the activity to another worker while it still runs."""

H = TypeVar("H", bound=Handler)


_BUSY_PAUSE = 0.05
"""Seconds before the first retry of a batch the store cancelled (doubling while it keeps cancelling)."""

_MOST_ACKS = 1 << 30
"""The ack flush's batch ceiling: the whole buffer, unless the store cancelled a batch (``_flush_all``)."""

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def _check_signature(activity_type: str, handler: Handler) -> None:
    """Raise :class:`ConfigError` unless ``handler(payload, ctx)`` is a valid call of ``handler``."""
    try:
        sig = inspect.signature(handler)
    except (TypeError, ValueError):
        return  # no signature to read (some builtins, C callables): the first call will tell
    params = list(sig.parameters.values())
    positional = [p for p in params if p.kind in _POSITIONAL]
    takes_varargs = any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params)
    required = [p.name for p in positional if p.default is p.empty]
    required_kw = [p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY and p.default is p.empty]
    if (len(positional) >= 2 or takes_varargs) and len(required) <= 2 and not required_kw:
        return
    name = getattr(handler, "__qualname__", type(handler).__name__)
    if required_kw:
        why = f"it also requires the keyword-only parameter(s) {', '.join(required_kw)}"
    elif len(required) > 2:
        why = f"it requires {len(required)} ({', '.join(required)})"
    else:
        why = f"it takes {len(positional)}"
    raise ConfigError(
        f"handler {name}{sig} for activity type {activity_type!r} must take two positional parameters, "
        f"(payload, ctx) — e.g. `async def {getattr(handler, '__name__', 'handler')}(payload, ctx): ...`; {why}"
    )


def _exception_types(
    activity_type: str, what: str, value: type[BaseException] | Sequence[type[BaseException]]
) -> tuple[type[BaseException], ...]:
    """``value`` (one class, or a tuple or list of them) as a tuple of exception classes, else :class:`ConfigError`."""
    types = tuple(value) if isinstance(value, tuple | list) else (value,)
    for t in types:
        if not (isinstance(t, type) and issubclass(t, BaseException)):
            raise ConfigError(f"activity type {activity_type!r}: {what} takes exception classes, got {t!r}")
    return types


def _check_backoff(activity_type: str, backoff: object) -> Backoff | None:
    """``backoff`` if it is ``None``, seconds >= 0, or ``(base, cap)`` seconds, else :class:`ConfigError`."""
    if backoff is None:
        return None
    parts = backoff if isinstance(backoff, tuple) else (backoff,)
    if len(parts) not in (1, 2) or not all(
        isinstance(p, int | float) and not isinstance(p, bool) and 0 <= p < float("inf") for p in parts
    ):
        raise ConfigError(f"activity type {activity_type!r}: backoff is seconds (base) or (base, cap) seconds, "
                          f"finite and >= 0, got {backoff!r}")
    if len(parts) == 2:
        if parts[1] < parts[0]:
            raise ConfigError(
                f"activity type {activity_type!r}: backoff (base, cap) needs cap >= base, got {backoff!r}")
        return (float(parts[0]), float(parts[1]))
    return float(parts[0])


def _default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


class WorkerEngine:
    """Runs registered handlers for activities claimed from one queue.

    Parameters
    ----------
    backend : Backend or str or None
        An opened backend, or a URL opened at :meth:`start` (``None``: the
        ``RUNNERQ_BACKEND`` environment variable).
    config : WorkerConfig, optional
        All settings; keyword arguments override its fields.
    metrics : MetricsSink, optional
        Counters and durations (default: none recorded).
    hooks : iterable of LifecycleHooks, optional
        Called around each attempt; failures are logged, never fatal.
    worker_id : str, optional
        Name recorded on claims; default ``host-pid-random``.
    **settings
        Any :class:`WorkerConfig` field, e.g. ``queue_name="app"``,
        ``max_workers=64``, ``activity_types=["send_email"]``. Typed by
        :class:`~runnerq_fast.config.WorkerSettings`, so a type checker rejects
        a misspelt name or a wrong type.

    Raises
    ------
    ConfigError
        If a setting is unknown or out of range.

    Examples
    --------
    >>> engine = WorkerEngine(backend, queue_name="app", max_workers=64)
    >>> @engine.activity("send_email")
    ... async def send_email(payload, ctx):
    ...     return {"sent": True}
    >>> async with engine:
    ...     await engine.run_until_stopped()
    """

    def __init__(
        self,
        backend: Backend | str | None = None,
        *,
        config: WorkerConfig | None = None,
        metrics: MetricsSink | None = None,
        hooks: Iterable[LifecycleHooks] = (),
        worker_id: str | None = None,
        **settings: Unpack[WorkerSettings],
    ) -> None:
        base = config or WorkerConfig()
        try:
            self.config: WorkerConfig = msgspec.structs.replace(base, **settings) if settings else base
        except TypeError as exc:
            raise ConfigError(f"unknown engine setting: {exc}") from None
        self._backend_url: str | None = None
        self._backend: Backend | None = None
        self._owns_backend = False
        if isinstance(backend, Backend):
            self._backend = backend
        elif backend is None or isinstance(backend, str):
            self._backend_url = backend
        else:
            raise ConfigError(f"backend must be a Backend or a URL string, got {type(backend).__name__}")
        self.metrics: MetricsSink = metrics or NoopMetrics()
        self._metrics_on = not isinstance(self.metrics, NoopMetrics)
        try:
            self._sink = labelled(self.metrics)  # the labelled calls the engine makes
        except TypeError as exc:
            raise ConfigError(str(exc)) from None
        self._outcomes: Outcomes | None = None  # the per-activity path's state, created at start
        self.hooks: tuple[LifecycleHooks, ...] = tuple(hooks)
        self.worker_id = worker_id or _default_worker_id()
        self._handlers: dict[str, Registered] = {}
        #: the enqueue defaults of the types registered with any (shared with the executor's local_defaults)
        self._type_defaults: dict[str, TypeDefaults] = {}
        self._schedules: dict[str, Schedule] = {}
        self._executor: ActivityExecutor | None = None
        self._started = False
        self._stopping = False
        self._stopped: asyncio.Event | None = None  # created on start, in the running loop
        self._stop_pending = False
        self._stop_grace: float | None = None
        self._reset_runtime()

    # -------------------------------------------------------------- registry
    def activity(
        self,
        activity_type: str,
        *,
        max_retries: int | None = None,
        timeout: float | None = None,
        priority: Priority | int | None = None,
        backoff: Backoff | None = None,
        retry_on: type[BaseException] | Sequence[type[BaseException]] | None = None,
        no_retry_on: type[BaseException] | Sequence[type[BaseException]] = (),
    ) -> Callable[[H], H]:
        """Decorator registering a handler for ``activity_type``, with the type's options.

        The handler is ``async def h(payload, ctx)`` or plain ``def h(payload, ctx)``
        (run in a thread pool); its return value must be JSON-encodable and is
        stored as the result. Where it annotates ``payload`` (a msgspec
        Struct, a dataclass, ``datetime``, ``list[UUID]``...), the payload is
        decoded into that type, strictly: one that does not match is
        dead-lettered, naming the field (see :mod:`runnerq_fast.engine.payloads`).
        ``executor.activity(h)`` then starts a builder whose ``payload`` a
        type checker checks against that type.

        ``max_retries``, ``timeout`` and ``priority`` are the type's enqueue
        defaults: every enqueue of the type that does not set the option
        itself gets them, wherever it is made (this engine's executor, the
        sync client, another process, the HTTP API, the CLI), because the
        engine records them in the store when it starts (the last engine
        started wins) and producers read them (cached
        :data:`~runnerq_fast.executor.TYPE_DEFAULTS_TTL` seconds). Before any
        engine with the type has started, producers use their own
        engine-wide defaults (``default_max_retries``, ``default_timeout``,
        NORMAL). ``backoff``, ``retry_on`` and ``no_retry_on`` are applied by
        the engine running the handler.

        Parameters
        ----------
        activity_type : str
            The type.
        max_retries : int, optional
            Retries after the first attempt (0: never retried).
        timeout : float, optional
            Handler timeout in **seconds** (0: none).
        priority : Priority or int, optional
            1 (LOW) to 4 (CRITICAL).
        backoff : float or (float, float), optional
            Seconds before a retry: ``base`` gives ``base * 2**retry_count``
            capped by the engine's ``max_retry_delay`` (or by ``base`` when
            larger); ``(base, cap)`` caps at ``cap``. The engine's
            ``retry_jitter`` applies. Default: the engine's ``retry_delay``
            and ``max_retry_delay``. A :class:`RetryableError`'s
            ``retry_after`` still wins.
        retry_on : exception type or tuple (or list) of them, optional
            Retry only these (and their subclasses); any other exception
            fails the activity at once. ``()`` retries none of them (as
            Celery's ``autoretry_for=()``; a :class:`RetryableError` still
            is). Default ``None``: every exception is retried.
        no_retry_on : exception type or tuple (or list) of them, optional
            Fail the activity at once on these (checked before ``retry_on``).

        Notes
        -----
        Precedence: :class:`NonRetryableError` always fails and
        :class:`RetryableError` is always retried (while retries are left),
        whatever the type's rules; any other exception, the handler's own
        timeout (``TimeoutError``) included, is checked against
        ``no_retry_on``, then ``retry_on``.

        Raises
        ------
        ConfigError
            If the type already has a handler, the engine has started, an
            option is out of range, the handler cannot be called as
            ``handler(payload, ctx)``, or its payload annotation cannot be
            evaluated or decoded into.
        InvalidActivityError
            If the type name is empty or too long.
        """

        def register(fn: H) -> H:
            self.register_activity(activity_type, fn, max_retries=max_retries, timeout=timeout, priority=priority,
                                   backoff=backoff, retry_on=retry_on, no_retry_on=no_retry_on)
            return fn

        return register

    def register_activity(
        self,
        activity_type: str,
        handler: Handler,
        *,
        max_retries: int | None = None,
        timeout: float | None = None,
        priority: Priority | int | None = None,
        backoff: Backoff | None = None,
        retry_on: type[BaseException] | Sequence[type[BaseException]] | None = None,
        no_retry_on: type[BaseException] | Sequence[type[BaseException]] = (),
    ) -> None:
        """Register ``handler`` for ``activity_type``, with the type's options (see :meth:`activity`)."""
        validate_activity_type(activity_type)
        if self._started:
            raise ConfigError("handlers must be registered before the engine starts")
        if activity_type in self._handlers:
            raise ConfigError(f"activity type {activity_type!r} already has a handler")
        if not callable(handler):
            raise ConfigError(f"handler for {activity_type!r} is not callable")
        _check_signature(activity_type, handler)
        try:
            check_type_options(max_retries, timeout, priority)
        except InvalidActivityError as exc:
            raise ConfigError(f"activity type {activity_type!r}: {exc}") from None
        defaults = TypeDefaults(
            activity_type=activity_type,
            max_retries=max_retries,
            timeout_ms=None if timeout is None else round(timeout * 1000),
            priority=None if priority is None else int(priority),
        )
        self._handlers[activity_type] = Registered(
            handler,
            activity_type,
            defaults=defaults,
            retry_on=None if retry_on is None else _exception_types(activity_type, "retry_on", retry_on),
            no_retry_on=_exception_types(activity_type, "no_retry_on", no_retry_on),
            backoff=_check_backoff(activity_type, backoff),
        )
        mark_handler(handler, activity_type)  # engine.executor.activity(handler) finds the type's name
        if max_retries is not None or timeout is not None or priority is not None:
            self._type_defaults[activity_type] = defaults

    def periodic(
        self,
        every_or_cron: str | float,
        activity_type: str,
        *,
        payload: Any = None,
        name: str | None = None,
        timezone: str | None = None,
        missed: str = "skip",
        catch_up: float = 86400.0,
        priority: Priority | int | None = None,
        metadata: dict[str, str] | None = None,
        max_retries: int | None = None,
        timeout: float | None = None,
    ) -> Schedule:
        """Enqueue one ``activity_type`` activity per tick of a cron expression or an interval.

        Every engine with the same schedule (same name) enqueues each tick
        with the idempotency key ``periodic:<name>:<tick epoch ms>``, so the
        queue gets exactly one activity per tick however many engines run it
        (see :mod:`runnerq_fast.engine.scheduler`). The activity type needs
        no handler in this engine: another engine may run it.

        Parameters
        ----------
        every_or_cron : str or float
            A cron expression (``"*/5 * * * *"``; 5 fields, or 6 with seconds
            first) or an interval in **seconds** (>= 0.01), whose ticks are
            aligned to the Unix epoch.
        activity_type : str
            Type enqueued at each tick.
        payload : Any, optional
            JSON-encodable payload of every activity.
        name : str, optional
            Unique schedule name (default: ``activity_type``); keep it stable
            across deployments, it keys the ticks.
        timezone : str, optional
            IANA timezone of a cron expression (default ``"UTC"``), e.g.
            ``"Europe/Paris"``; DST follows Debian cron.
        missed : {"skip", "run_once"}
            What happens to ticks no engine could enqueue (default ``"skip"``):
            ``"run_once"`` enqueues, at start, the latest past tick if it is at
            most ``catch_up`` seconds old (and was not already enqueued).
        catch_up : float
            Seconds, default 86400 (one day); only used by ``"run_once"``.
        priority : Priority or int, optional
            Priority of every activity (default: the type's, see
            :meth:`activity`, else NORMAL).
        metadata : dict of str to str, optional
            Extra metadata; ``{"schedule": name}`` is always added.
        max_retries : int, optional
            Retries after the first attempt of every activity (default: the
            type's, else the engine's ``default_max_retries``).
        timeout : float, optional
            Handler timeout of every activity in **seconds**, 0 = none
            (default: the type's, else the engine's ``default_timeout``).

        Returns
        -------
        Schedule
            The registered schedule (also in :attr:`schedules`).

        Raises
        ------
        ConfigError
            If the engine has started, the name is taken, or an argument is
            invalid (bad cron expression, interval, timezone, policy, payload).
        InvalidActivityError
            If the activity type is empty, too long or not a string.
        """
        validate_activity_type(activity_type)
        if self._started:
            raise ConfigError("schedules must be added before the engine starts")
        schedule = make_schedule(every_or_cron, activity_type, payload=payload, name=name, timezone=timezone,
                                 missed=missed, catch_up=catch_up, priority=priority, metadata=metadata,
                                 max_retries=max_retries, timeout=timeout)
        if schedule.name in self._schedules:
            raise ConfigError(f"a schedule named {schedule.name!r} exists; give this one another name=")
        self._schedules[schedule.name] = schedule
        return schedule

    @property
    def schedules(self) -> list[Schedule]:
        """The periodic schedules registered with :meth:`periodic`, in registration order."""
        return list(self._schedules.values())

    def handler(self, activity_type: str) -> Handler:
        """The handler registered for ``activity_type`` (what ``rq.testing.run_eagerly`` calls).

        Raises
        ------
        ConfigError
            If the type has no handler.
        """
        registered = self._handlers.get(activity_type)
        if registered is None:
            raise ConfigError(f"no handler registered for activity type {activity_type!r}")
        return registered.fn

    @property
    def activity_types(self) -> list[str]:
        """Types with a registered handler."""
        return list(self._handlers)

    # ------------------------------------------------------------- accessors
    @property
    def backend(self) -> Backend:
        """The backend (raises :class:`ConfigError` before a URL backend is opened)."""
        if self._backend is None:
            raise ConfigError("the engine's backend is not open yet; call start() first")
        return self._backend

    @property
    def queue_name(self) -> str:
        """The queue this engine serves."""
        return self.config.queue_name

    @property
    def executor(self) -> ActivityExecutor:
        """Enqueues activities on this engine's queue."""
        if self._executor is None:
            self._executor = ActivityExecutor(
                self.backend, self.config.queue_name, self.config, metrics=self._sink if self._metrics_on else None
            )
            self._executor.local_defaults = self._type_defaults
        return self._executor

    def inspector(self) -> QueueInspector:
        """A read-only view of this engine's queue."""
        return QueueInspector(self.backend, self.config.queue_name)

    def admin(self) -> QueueAdmin:
        """Operator actions (retry, cancel, run now, priority, delete) on this engine's queue."""
        return QueueAdmin(self.backend, self.config.queue_name)

    def use_backend(self, backend: Backend | str) -> None:
        """Replace the backend before :meth:`start` (the CLI's ``--backend``)."""
        if self._started:
            raise ConfigError("cannot change the backend of a running engine")
        self._executor = None
        if isinstance(backend, str):
            self._backend, self._backend_url = None, backend
        else:
            self._backend, self._backend_url = backend, None

    # ------------------------------------------------------------- lifecycle
    def _reset_runtime(self) -> None:
        self._inflight: dict[str, ClaimedActivity] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._workers: list[asyncio.Task[None]] = []
        self._fetcher: asyncio.Task[None] | None = None
        self._flusher: asyncio.Task[None] | None = None
        self._scheduler: asyncio.Task[None] | None = None
        self._claiming = False
        self._alone_wanted = False  # suspects are waiting: run them alone before claiming more (_run_alone)
        self._flush_closing = False
        self._flush_deadline: float | None = None
        self._flushing: list[Ack] = []  # the acks of the flush in progress (sent, outcome not known yet)
        self._ack_chunk = AdaptiveBatch(_MOST_ACKS)  # acks per statement: halved while the store cancels them
        self._reap_batch = AdaptiveBatch(self.config.reaper_batch_size)
        self._progress_lock = asyncio.Lock()  # one progress write at a time (_flush_progress)

    def _claim_filter(self) -> list[str] | None:
        declared = self.config.activity_types
        if declared == "*":
            return None
        if declared is None:
            if not self._handlers:
                raise ConfigError("no handlers registered; register one with @engine.activity(...)")
            return list(self._handlers)
        assert isinstance(declared, list)
        missing = [t for t in declared if t not in self._handlers]
        if missing:
            raise ConfigError(f"activity types declared without a handler: {', '.join(missing)}")
        if not declared:
            raise ConfigError("activity_types is an empty list; nothing could be claimed")
        return list(declared)

    def _check_limits(self) -> None:
        limits = self.config.limits
        self._limits: dict[str, int] = {}
        self._unlimited: list[str] = []
        if not limits:
            return
        if self._types is None:
            raise ConfigError('limits need the list of types this engine claims; not with activity_types="*"')
        # a limit on a type with a handler that this engine does not claim (a worker narrowed with
        # --activity-types to other types) limits nothing here; a type with no handler is a typo
        unknown = [t for t in limits if t not in self._handlers]
        if unknown:
            raise ConfigError(f"limits name types this engine has no handler for: {', '.join(unknown)}")
        self._limits = {t: n for t, n in limits.items() if t in self._types}
        self._unlimited = [t for t in self._types if t not in self._limits]

    async def start(self) -> None:
        """Open the backend if given as a URL and start every loop.

        Raises
        ------
        ConfigError
            If no handler is registered, or a declared activity type has none.
        EventLoopMismatchError
            If the backend given belongs to another event loop.
        """
        if self._started:
            raise ConfigError("engine already started")
        self._types = self._claim_filter()
        self._check_limits()
        if self._backend is None:
            url = self._backend_url or os.environ.get("RUNNERQ_BACKEND")
            if not url:
                raise ConfigError("no backend given (pass a Backend or URL, or set RUNNERQ_BACKEND)")
            self._backend = await open_backend(url)
            self._owns_backend = True
        self._backend.ensure_loop()  # a backend of another event loop fails here, not in every loop below
        await self._backend.check_server()  # server settings that hurt a worker: warned once per store
        await self._publish_type_defaults()
        self._reset_runtime()
        self._started = True
        self._stopping = False
        cfg = self.config
        self._lease_ms = round(cfg.lease_timeout * 1000)
        if cfg.lease_timeout < SHORT_LEASE_SECONDS:
            log.warning(
                "lease_timeout is %g s: a lease this short expires whenever the loop or the store stalls for "
                "longer (heartbeat every %g s), and its activity then runs again elsewhere while this run goes "
                "on; leases are seconds (default 30)", cfg.lease_timeout, cfg.effective_heartbeat_interval)
        self._loop = asyncio.get_running_loop()
        self._stopped = asyncio.Event()
        if self._stop_pending:
            self._stopped.set()
        self._local = Handoff(self._loop)
        threads = (
            ThreadPoolExecutor(cfg.effective_sync_workers, thread_name_prefix="runnerq-sync")
            if any(not h.is_async for h in self._handlers.values())
            else None
        )
        out = self._outcomes = Outcomes(cfg, self._handlers, self.executor, self._sink, self.hooks, self._loop,
                                        threads, self._limits)
        self._workers = [asyncio.create_task(worker_loop(out, self._local), name=f"runnerq-worker-{i}")
                         for i in range(cfg.max_workers)]
        self._flusher = asyncio.create_task(self._flush_loop(), name="runnerq-ack-flusher")
        self._presence = Presence(self._backend, cfg.queue_name, self.worker_id, self._types, cfg.max_workers,
                                  cfg.effective_heartbeat_interval)
        await self._presence.beat(0)
        self._tasks = [
            asyncio.create_task(self._heartbeat_loop(), name="runnerq-heartbeat"),
            asyncio.create_task(self._reaper_loop(), name="runnerq-reaper"),
            asyncio.create_task(self._progress_loop(), name="runnerq-progress"),
        ]
        if cfg.prune_interval > 0:
            self._tasks.append(asyncio.create_task(Pruner(self.backend, cfg, self.worker_id).run(),
                                                   name="runnerq-pruner"))
        self._fetcher = asyncio.create_task(self._fetch_loop(), name="runnerq-fetcher")
        if self._schedules:
            self._scheduler = asyncio.create_task(run_schedules(self.executor, self.schedules),
                                                  name="runnerq-scheduler")
            for sched in self._schedules.values():
                log.info("schedule %r: %s (%s, missed=%s) -> %s", sched.name, sched.spec, sched.timezone,
                         sched.missed, sched.activity_type)
        log.info(
            "engine %s started on %s queue=%r workers=%d types=%s",
            self.worker_id, self.backend.name, cfg.queue_name, cfg.max_workers,
            "*" if self._types is None else ",".join(self._types),
        )

    async def _publish_type_defaults(self) -> None:
        """Record the enqueue defaults of the types this engine claims in the store (one call, at start).

        Every such type is written, those without options too (clearing what
        an older deployment set): the last engine started wins. A failure is
        logged: the engine still runs its handlers with their rules, and
        producers keep what they read (or their own defaults).
        """
        assert self._backend is not None
        claimed = self._handlers if self._types is None else {t: self._handlers[t] for t in self._types}
        entries = [r.defaults for r in claimed.values() if r.defaults is not None]
        if not entries:
            return
        try:
            await self._backend.set_type_defaults(self.config.queue_name, entries)
        except Exception as exc:
            log.warning("could not record the activity types' enqueue defaults in the store (%s); producers "
                        "elsewhere use their own defaults for them until an engine records them", describe_error(exc))

    async def __aenter__(self) -> WorkerEngine:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def run_until_stopped(self, *, handle_signals: bool = True) -> None:
        """Wait until :meth:`stop` is called or SIGTERM/SIGINT arrives, then stop.

        Parameters
        ----------
        handle_signals : bool
            Install SIGTERM and SIGINT handlers that begin a graceful stop
            (only possible in the main thread).
        """
        loop = asyncio.get_running_loop()
        installed: list[signal.Signals] = []
        if handle_signals:
            # installed before start(), so a signal while the backend opens or
            # migrates still ends in a graceful stop
            for sig in (signal.SIGTERM, signal.SIGINT):
                with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                    loop.add_signal_handler(sig, self._signal_stop, sig)
                    installed.append(sig)
        try:
            if not self._started:
                await self.start()
            assert self._stopped is not None
            await self._stopped.wait()
        finally:
            for sig in installed:
                loop.remove_signal_handler(sig)
            await self.stop()

    def _signal_stop(self, sig: int) -> None:
        log.info("received %s; stopping gracefully", signal.Signals(sig).name)
        self.request_stop()

    def request_stop(self, *, grace: float | None = None) -> None:
        """Ask the engine to stop; :meth:`run_until_stopped` then returns.

        The fetcher starts no claim from now on (one already sent lands, and
        what it brings is released by the stop). Safe to call before or
        during :meth:`start`: the engine then stops as soon as it has started.

        Parameters
        ----------
        grace : float, optional
            Seconds running handlers get before they are cancelled and
            released, when shorter than ``config.shutdown_grace`` (the
            default); for a stop that has not begun yet.

        Raises
        ------
        ConfigError
            If ``grace`` is negative or not a number.
        """
        if grace is not None and not grace >= 0:
            raise ConfigError(f"grace must be >= 0 seconds, got {grace!r}")
        if grace is not None:
            self._stop_grace = grace if self._stop_grace is None else min(grace, self._stop_grace)
        self._stop_pending = True
        if self._stopped is not None:
            self._stopped.set()

    def run(self) -> None:
        """Blocking entry point: start on uvloop (if installed), run until a signal."""

        run_with_uvloop(self.run_until_stopped())

    def configure(self, **settings: Unpack[WorkerSettings]) -> None:
        """Change :class:`WorkerConfig` fields before :meth:`start`.

        Raises
        ------
        ConfigError
            If the engine is running, a name is unknown or a value is out of range.
        """
        if self._started:
            raise ConfigError("cannot reconfigure a running engine")
        try:
            self.config = msgspec.structs.replace(self.config, **settings)
        except TypeError as exc:
            raise ConfigError(f"unknown engine setting: {exc}") from None
        self._executor = None

    async def stop(self) -> None:
        """Stop gracefully (SPEC §3); idempotent.

        Stops claiming; running handlers get ``shutdown_grace`` seconds; the
        rest are cancelled and, like claimed work not yet started, put back to
        ``pending`` without counting an attempt; buffered acks are flushed.
        """
        if not self._started or self._stopping:
            return
        self._stopping = True
        assert self._stopped is not None and self._outcomes is not None
        out = self._outcomes
        out.stopping = True
        self._stopped.set()
        out.cancellation.set()
        cfg = self.config
        # 0. stop enqueueing ticks (another engine, or the next start, takes the schedule over)
        if self._scheduler is not None:
            self._scheduler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._scheduler
            self._scheduler = None
        # 1. stop claiming (let a claim in flight land, so nothing it took is lost)
        fetcher = self._fetcher
        if fetcher is not None:
            if not self._claiming:
                fetcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await fetcher
        # 2. release what was claimed but not started
        while not self._local.empty():
            item = self._local.get_nowait()
            if item is not None:
                out.release.append(LeaseRef(item.id, item.claim_token))
                out.busy -= 1
                if out.type_busy is not None:
                    out.type_done(item.activity_type)
        for _ in self._workers:
            self._local.put_nowait(None)
        # 3. give running handlers the grace period, then cancel them
        grace = cfg.shutdown_grace if self._stop_grace is None else min(cfg.shutdown_grace, self._stop_grace)
        if self._workers:
            _, pending = await asyncio.wait(self._workers, timeout=grace)
            for t in pending:
                t.cancel()
            if pending:
                log.warning("cancelling %d activities still running after %.1f s grace", len(pending), grace)
                await asyncio.gather(*pending, return_exceptions=True)
        # 4. flush acks (the flusher finishes what it is sending; never cancelled mid-flush,
        #    or a batch that did land would be sent again), release cancelled and unstarted work
        self._flush_deadline = self._loop.time() + max(cfg.shutdown_grace, 5.0)
        self._flush_closing = True
        out.ack_ready.set()
        out.ack_full.set()
        if self._flusher is not None:
            await self._flusher
        await self._flush_all()
        if out.progress.pending:  # the last values of the attempts released below
            await self._flush_progress()
        if out.release:
            refs, out.release = out.release, []
            for ref in refs:  # no longer renewed: the heartbeat would call them lost once released
                held = self._inflight.get(ref.id)
                if held is not None and held.claim_token == ref.claim_token:
                    del self._inflight[ref.id]
            try:
                await self.backend.release(cfg.queue_name, refs)
            except Exception:
                log.exception("could not release %d activities; they return when their lease expires",
                              len(refs))
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._presence.leave()
        if out.threads is not None:
            out.threads.shutdown(wait=False, cancel_futures=True)
        self._started = False
        self._stop_pending = False
        self._stop_grace = None
        log.info("engine %s stopped: %s", self.worker_id, out.stats)
        if self._owns_backend and self._backend is not None:
            await self._backend.close()
            self._backend = None
            self._executor = None
            self._owns_backend = False

    @property
    def stats(self) -> dict[str, int]:
        """Outcomes this engine recorded since start (acks flushed or buffered)."""
        return dict(self._outcomes.stats) if self._outcomes is not None else new_stats()

    @property
    def in_flight(self) -> int:
        """Activities claimed by this engine and not yet acknowledged."""
        return len(self._inflight)

    # --------------------------------------------------------------- fetcher
    async def _fetch_loop(self) -> None:
        cfg = self.config
        backend = self.backend
        queue = cfg.queue_name
        limit_cap = cfg.claim_batch_size
        local = self._local
        inflight = self._inflight
        out = self._outcomes
        assert out is not None
        error_delay = 0.05
        low_water = max(1, cfg.max_workers // 4)
        limited = out.type_busy is not None
        while not (self._stopping or self._stop_pending):
            if self._alone_wanted:
                await self._run_alone()
                continue
            free = cfg.max_workers - out.busy
            # Claim when a worker is idle, or when enough slots are free to
            # make a round trip worth it; otherwise wait for a worker to finish.
            if free <= 0 or (free < low_water and not local.empty()):
                out.slot_free.clear()
                await out.slot_free.wait()
                continue
            want = free if free < limit_cap else limit_cap
            if out.acks:
                # the acks of the batch that freed these slots go right behind this claim (see _flush_loop)
                out.ack_full.set()
            self._claiming = True
            try:
                if limited:
                    n, want = await self._claim_limited(free)
                    self._claiming = False
                    if want == 0:
                        # every type with room is at its limit: wait for one of them to free a slot
                        await out.type_free.wait()
                        continue
                    if self._stopping:
                        return
                    if n < want:
                        await self._idle_wait()
                    continue
                batch = await backend.claim(queue, self.worker_id, want, self._types, self._lease_ms)
            except Exception as exc:
                self._claiming = False
                if self._stopping:
                    return
                log.warning("claim failed (%s: %s); retrying in %.2f s", type(exc).__name__, exc, error_delay)
                if self._metrics_on:
                    self._sink.count(BACKEND_ERRORS, (queue,))
                await asyncio.sleep(error_delay)
                error_delay = min(error_delay * 2, 1.0)
                continue
            self._claiming = False
            error_delay = 0.05
            n = len(batch)
            if n and (self._stopping or self._stop_pending):
                self._hand_back(batch)
                return
            if n:
                out.busy += n
                local.put_batch(batch, inflight)
                if self._metrics_on:
                    self._record_claims(batch)
                if self._stopping:
                    return
            if n < want:
                # The queue had less than we could take: sleep until told of new
                # work, or until a retry this engine scheduled becomes due.
                await self._idle_wait()

    def _record_claims(self, batch: list[ClaimedActivity]) -> None:
        """Count a claimed batch by type and observe each activity's queue wait (ready time to now)."""
        assert self._outcomes is not None
        now_ms = time.time() * 1000.0
        waits: dict[str, list[float]] = {}
        for a in batch:
            w = (now_ms - a.ready_at_ms) / 1000.0
            got = waits.get(a.activity_type)
            if got is None:
                waits[a.activity_type] = [w if w > 0.0 else 0.0]
            else:
                got.append(w if w > 0.0 else 0.0)
        labels, sink = self._outcomes.labels, self._sink
        for t, ws in waits.items():
            lab = labels(t)[0]
            sink.count(ACTIVITIES_CLAIMED, lab, len(ws))
            sink.observe_many(QUEUE_WAIT, lab, ws)

    async def _claim_limited(self, free: int) -> tuple[int, int]:
        """Claim for up to ``free`` slots under per-type limits; return (claimed, asked for).

        One claim per limited type with room (at most its limit minus what
        runs), then one for the unlimited types with the slots left, so a
        limited type never holds more than its limit and never takes the
        slots of the others. Each claim is handed to the workers as it lands.
        """
        out = self._outcomes
        assert out is not None and out.type_busy is not None
        type_busy = out.type_busy
        out.type_free.clear()
        cap = self.config.claim_batch_size
        queue = self.config.queue_name
        claimed = asked = 0
        for activity_type, limit in out.type_limits.items():
            room = min(limit - type_busy[activity_type], free - claimed, cap)
            if room <= 0:
                continue
            asked += room
            got = await self.backend.claim(queue, self.worker_id, room, [activity_type], self._lease_ms)
            type_busy[activity_type] += len(got)
            claimed += self._hand_off(got)
        rest = min(free - claimed, cap)
        if self._unlimited and rest > 0:
            asked += rest
            claimed += self._hand_off(
                await self.backend.claim(queue, self.worker_id, rest, self._unlimited, self._lease_ms))
        return claimed, asked

    def _hand_back(self, batch: list[ClaimedActivity]) -> None:
        """A claim that landed after a stop was asked: none of it runs, the stop releases it all."""
        assert self._outcomes is not None
        self._outcomes.release.extend(LeaseRef(a.id, a.claim_token) for a in batch)

    def _hand_off(self, batch: list[ClaimedActivity]) -> int:
        n = len(batch)
        if n and (self._stopping or self._stop_pending):
            self._hand_back(batch)
            return 0
        if n:
            assert self._outcomes is not None
            self._outcomes.busy += n
            self._local.put_batch(batch, self._inflight)
            if self._metrics_on:
                self._record_claims(batch)
        return n

    async def _run_alone(self) -> None:
        """Claim the suspect activities this engine can run, and run each with nothing else in flight here.

        A suspect's lease expired while it was claimed beside others, so the
        store did not count the attempt (see :meth:`Backend.claim_suspect`).
        Ordinary claims stop; once every claim in flight is acknowledged, one
        suspect is claimed and run, and the next only after its ack landed,
        until none is left. If a suspect kills this worker, it was the only
        activity held, and the reaper counts the attempt against it alone.
        """
        self._alone_wanted = False
        out = self._outcomes
        assert out is not None
        cfg = self.config
        ran = 0
        while not (self._stopping or self._stop_pending):
            if not await self._drained():
                break  # another engine took the suspects while this one was draining
            if self._stopping or self._stop_pending:
                break
            self._claiming = True
            try:
                got = await self.backend.claim_suspect(cfg.queue_name, self.worker_id, self._types, self._lease_ms)
            except Exception as exc:
                log.warning("suspect claim failed (%s: %s); trying again after the next reaper pass",
                            type(exc).__name__, exc)
                if self._metrics_on:
                    self._sink.count(BACKEND_ERRORS, (cfg.queue_name,))
                break
            finally:
                self._claiming = False
            if not got:
                break
            if out.type_busy is not None and got[0].activity_type in out.type_busy:
                out.type_busy[got[0].activity_type] += 1
            self._hand_off(got)
            ran += 1
        if ran:
            log.info("ran %d suspect activities alone (their lease had expired beside others)", ran)

    async def _drained(self) -> bool:
        """Wait until no claim of this engine is in flight (running, waiting for a worker, or its ack unflushed).

        Every ``reaper_interval`` seconds of waiting it asks the store again
        whether suspects are still waiting, and returns ``False`` (no longer
        worth draining) when none is: every engine of the queue starts
        draining when it sees one, and the first that is drained takes it.
        """
        out = self._outcomes
        assert out is not None
        cfg = self.config
        check_at = self._loop.time() + cfg.reaper_interval
        while (out.busy or self._inflight) and not self._stopping:
            if out.busy:
                out.slot_free.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(max(0.0, check_at - self._loop.time())):
                        await out.slot_free.wait()
            else:
                await asyncio.sleep(cfg.ack_flush_interval)  # the flusher is landing the last acks
            if self._loop.time() >= check_at:
                check_at = self._loop.time() + cfg.reaper_interval
                try:
                    if not await self.backend.suspects_ready(cfg.queue_name, self._types):
                        return False
                except Exception as exc:
                    log.warning("suspect check failed (%s: %s)", type(exc).__name__, exc)
        return True

    def _want_alone(self) -> None:
        """Make the fetcher run the waiting suspects next (:meth:`_run_alone`), waking it wherever it waits."""
        self._alone_wanted = True
        out = self._outcomes
        if out is not None:
            out.slot_free.set()
            out.retry_wake.set()
            out.type_free.set()

    async def _idle_wait(self) -> None:
        """Wait for work this engine can claim, the poll interval, or a local retry coming due.

        The backend wakes it for new work of the types it claims and when the
        earliest scheduled or retrying activity of those types comes due.
        With per-type limits only the types with room are waited for, and a
        type at its limit freeing a slot also wakes it.
        """
        out = self._outcomes
        assert out is not None
        retry_wake = out.retry_wake
        retry_wake.clear()
        types = self._types
        if out.type_busy is not None:
            busy = out.type_busy
            types = [*self._unlimited, *(t for t, limit in out.type_limits.items() if busy[t] < limit)]
        told = asyncio.ensure_future(
            self.backend.wait_for_work(self.config.queue_name, self.config.poll_interval, types))
        due = asyncio.ensure_future(retry_wake.wait())
        waits = [told, due]
        if out.type_busy is not None:
            waits.append(asyncio.ensure_future(out.type_free.wait()))
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()

    # --------------------------------------------------------------- ack buffer
    async def _flush_loop(self) -> None:
        interval = self.config.ack_flush_interval
        out = self._outcomes
        assert out is not None
        while not self._flush_closing:
            await out.ack_ready.wait()
            if not self._flush_closing and len(out.acks) < out.ack_batch_size:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(interval):
                        await out.ack_full.wait()
            # One turn of the loop first: when the fetcher woke this flush (it claims for the slots these
            # acks' activities freed), or the interval ended in the same turn, its claim must reach the
            # store first. The store then runs the claim, answers, and runs these acks while this process
            # runs the claimed batch; acks sent first make the claim wait behind them and leave the store
            # idle while the batch runs (a Redis drain kept its server busy 0.75 of the time, not 0.97).
            await asyncio.sleep(0)
            await self._flush_all()

    async def _flush_all(self) -> None:
        """Flush every buffered ack, retrying on backend errors until it lands.

        A batch the store cancelled (:class:`~runnerq_fast.errors.StoreBusyError`:
        a statement or lock timeout, a deadlock; nothing of it was applied)
        is kept and sent again after a backoff in batches of half the size
        (:class:`~runnerq_fast.engine.batching.AdaptiveBatch`), down to one ack
        at a time; the size doubles back with each batch that lands. A
        cancellation says nothing about the acks, so they are never dropped
        for it.

        After three other failed attempts a batch is retried one ack at a
        time: acks that then land are done; an ack whose send fails
        transiently (the store unreachable, a connection lost, a
        cancellation) is kept with the rest of the batch; an ack the store
        answers with an error while it answers (other acks land or, when
        nothing landed, a lease renewal of the same activity does) is one the
        store can never take (a poison ack): it is logged and dropped, taken
        out of the heartbeat, and its activity runs again after its lease
        expires. During :meth:`stop`, retries end at ``self._flush_deadline``.
        """
        out = self._outcomes
        assert out is not None
        if self._metrics_on:
            out.flush_metrics()
        chunk = self._ack_chunk
        delay = 0.05
        failures = 0
        while out.acks:
            if len(out.acks) <= chunk.size:
                acks, out.acks = out.acks, []
            else:
                acks, out.acks = out.acks[:chunk.size], out.acks[chunk.size:]
            self._flushing = acks
            out.ack_ready.clear()
            out.ack_full.clear()
            busy = False
            try:
                if out.progress.pending:  # an attempt's last progress lands before its ack ends the claim
                    await self._flush_progress([a.id for a in acks])
                if failures >= 3:
                    rejected, unsent = await self._ack_one_by_one(acks)
                else:
                    with busy_attempts(1):  # a cancelled batch comes back at once, to be sent smaller
                        rejected, unsent = await self.backend.ack(self.config.queue_name, acks), []
            except asyncio.CancelledError:
                out.acks[:0] = acks
                raise
            except StoreBusyError as exc:
                rejected, unsent, busy = [], acks, True
                size = chunk.cancelled(len(acks))
                log.warning("ack flush of %d cancelled by the store (%s); nothing was applied, retrying in "
                            "batches of %d in %.2f s", len(acks), describe_error(exc, prefix=False), size, delay)
            except Exception as exc:
                rejected, unsent = [], acks
                log.warning("ack flush of %d failed (%s: %s); retrying in %.2f s",
                            len(acks), type(exc).__name__, describe_error(exc, prefix=False), delay)
            if unsent:
                # keep them: an activity is done only once its ack is stored
                out.acks[:0] = unsent
                if not busy:
                    failures += 1
                if self._metrics_on:
                    self._sink.count(BACKEND_ERRORS, (self.config.queue_name,))
                if self._flush_deadline is not None and self._loop.time() >= self._flush_deadline:
                    log.error("giving up on %d acks at shutdown; their activities run again after their lease",
                              len(out.acks))
                    out.acks.clear()
                    return
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
            else:
                delay, failures = 0.05, 0
                chunk.succeeded()
            self._acked(acks, unsent, rejected)
            self._flushing = []

    async def _ack_one_by_one(self, acks: list[Ack]) -> tuple[list[str], list[Ack]]:
        """Send ``acks`` singly; return (rejected ids, acks to retry).

        The first transient failure (:attr:`~runnerq_fast.errors.BackendError.transient`)
        stops the round: that ack and the ones not sent yet are returned to
        retry. An ack refused otherwise is dropped if the store answers
        (see :meth:`_flush_all`).
        """
        queue = self.config.queue_name
        rejected: list[str] = []
        failed: list[tuple[Ack, BaseException]] = []
        landed = 0
        for i, ack in enumerate(acks):
            try:
                with busy_attempts(1):
                    rejected += await self.backend.ack(queue, [ack])
            except BackendError as exc:
                if not exc.transient:
                    failed.append((ack, exc))
                    continue
                log.warning("ack of activity %s failed (%s); keeping it and %d more to retry",
                            ack.id, describe_error(exc, prefix=False), len(acks) - i - 1)
                unsent = acks[i:]
                break
            except Exception as exc:
                failed.append((ack, exc))
                continue
            landed += 1
        else:
            unsent = []
        if failed and not landed:
            # nothing landed: the store is down, or it refuses every one of these acks. A write on the same
            # activity tells which: renewing its lease (a no-op for the outcome) lands only if the store is up.
            probe = failed[0][0]
            try:
                await self.backend.extend_leases(queue, [LeaseRef(probe.id, probe.claim_token)], self._lease_ms)
            except Exception:
                if not unsent:
                    raise failed[0][1] from None  # the store is down, not the acks: keep them
                return rejected, [a for a, _ in failed] + unsent
        for ack, err in failed:
            log.error("dropping an ack the store refuses (%s: %s); activity %s runs again after its lease",
                      type(err).__name__, describe_error(err, prefix=False), ack.id)
            held = self._inflight.get(ack.id)
            if held is not None and held.claim_token == ack.claim_token:
                del self._inflight[ack.id]  # no longer heartbeated: its lease runs out
        return rejected, unsent

    def _acked(self, acks: list[Ack], unsent: list[Ack], rejected: list[str]) -> None:
        settle(self._inflight, acks, unsent)
        if rejected:
            assert self._outcomes is not None
            self._outcomes.stats["rejected"] += len(rejected)
            log.warning("%d late acks rejected (lease was reclaimed): %s", len(rejected), ", ".join(rejected[:10]))
            if self._metrics_on:
                self._sink.count(ACKS_REJECTED, (self.config.queue_name,), len(rejected))

    # -------------------------------------------------------------- progress
    async def _progress_loop(self) -> None:
        """Write buffered ``ctx.set_progress`` values: at once after a quiet spell, then at most every
        :data:`~runnerq_fast.engine.progress.PROGRESS_INTERVAL` seconds."""
        out = self._outcomes
        assert out is not None
        while True:
            await out.progress.ready.wait()
            await self._flush_progress()
            await asyncio.sleep(PROGRESS_INTERVAL)

    async def _flush_progress(self, activity_ids: list[str] | None = None) -> None:
        """Write the buffered progress values (of ``activity_ids`` only, if given: an ack batch's) in one
        call; one flush at a time, so the writes of an attempt land in order.

        A value whose write fails is kept (unless a newer one came) and sent
        with the next flush; a claim that no longer holds writes nothing.
        """
        out = self._outcomes
        assert out is not None
        async with self._progress_lock:
            updates = out.progress.take() if activity_ids is None else out.progress.take_for(activity_ids)
            if not updates:
                return
            try:
                await self.backend.set_progress(self.config.queue_name, updates)
            except Exception as exc:
                log.warning("progress write of %d activities failed (%s); retrying with the next",
                            len(updates), describe_error(exc, prefix=False))
                out.progress.restore(updates)
                if self._metrics_on:
                    self._sink.count(BACKEND_ERRORS, (self.config.queue_name,))
                return
            out.progress.sent += len(updates)

    # -------------------------------------------------------------- background
    async def _heartbeat_loop(self) -> None:
        cfg = self.config
        interval = cfg.effective_heartbeat_interval
        while True:
            await asyncio.sleep(interval)
            await self._presence.beat(len(self._inflight))  # the registry entry: one call per tick
            if not self._inflight:
                continue
            refs = [LeaseRef(a.id, a.claim_token) for a in self._inflight.values()]
            try:
                report = await self.backend.extend_leases(cfg.queue_name, refs, self._lease_ms)
            except Exception as exc:
                log.warning("lease heartbeat for %d activities failed (%s: %s)", len(refs), type(exc).__name__, exc)
                if self._metrics_on:
                    self._sink.count(BACKEND_ERRORS, (cfg.queue_name,))
                continue
            if report.cancel_requested and self._outcomes is not None:
                # an operator cancelled running activities: stop their handlers (ack CANCELLED)
                self._outcomes.request_cancel(report.cancel_requested, self._inflight)
            if report.lost:
                self._leases_lost(refs, report.lost)

    def _leases_lost(self, refs: list[LeaseRef], lost: list[str]) -> None:
        """Act on the claims a heartbeat found gone: log them once, tell their handlers, stop renewing them.

        A claim acknowledged meanwhile is not lost: the heartbeat raced the
        ack (the ack landed first, or its flush has not returned yet; a
        rejected ack is logged by the flush), or it was released at shutdown.
        The rest were taken back by the store (the lease expired while this
        worker stalled or could not reach it): each is logged here once,
        leaves the heartbeat, and its handler learns it
        (:meth:`Outcomes.lease_lost`); whatever it still acknowledges is
        rejected by the store.
        """
        out = self._outcomes
        assert out is not None
        inflight = self._inflight
        tokens = {r.id: r.claim_token for r in refs}
        settling = {a.id for a in out.acks} | {a.id for a in self._flushing} | {r.id for r in out.release}
        real: list[str] = []
        for aid in lost:
            held = inflight.get(aid)
            if held is None or held.claim_token != tokens.get(aid) or aid in settling:
                continue
            real.append(aid)
        if not real:
            return
        told = out.lease_lost(real, inflight)
        for aid in real:
            del inflight[aid]
        out.stats["lease_lost"] += len(real)
        log.warning("%d leases were lost (taken back by the store; %d running handlers told to stop): %s",
                    len(real), told, ", ".join(real[:10]))

    async def _reaper_loop(self) -> None:
        """Every ``reaper_interval``, requeue expired leases in batches until fewer than a batch are left.

        A batch the store cancels (:class:`~runnerq_fast.errors.StoreBusyError`,
        e.g. over ``statement_timeout``) was rolled back whole: the next one,
        after a short pause, asks for half as many (down to one), and each
        batch that lands doubles the size again up to ``reaper_batch_size``
        (:class:`~runnerq_fast.engine.batching.AdaptiveBatch`).
        """
        cfg = self.config
        batch = self._reap_batch
        pause = _BUSY_PAUSE
        while True:
            size = batch.size
            try:
                with busy_attempts(1):
                    report = await self.backend.requeue_expired(cfg.queue_name, size)
            except StoreBusyError as exc:
                smaller = batch.cancelled(size)
                log.warning("reaper batch of %d cancelled by the store (%s); nothing was applied, trying %d "
                            "in %.2f s", size, describe_error(exc, prefix=False), smaller, pause)
                if self._metrics_on:
                    self._sink.count(BACKEND_ERRORS, (cfg.queue_name,))
                await asyncio.sleep(pause)
                pause = min(pause * 2, cfg.reaper_interval)
                continue
            except Exception as exc:
                log.warning("reaper pass failed (%s: %s)", type(exc).__name__, exc)
                if self._metrics_on:
                    self._sink.count(BACKEND_ERRORS, (cfg.queue_name,))
            else:
                pause = _BUSY_PAUSE
                batch.succeeded()
                if report.requeued or report.dead_lettered:
                    log.warning("reaper: %d expired leases requeued, %d dead-lettered",
                                len(report.requeued), len(report.dead_lettered))
                    if self._metrics_on:
                        if report.requeued:
                            self._sink.count(ACTIVITIES_REAPED, (cfg.queue_name, "requeued"), len(report.requeued))
                        if report.dead_lettered:
                            self._sink.count(ACTIVITIES_REAPED, (cfg.queue_name, "dead_letter"),
                                             len(report.dead_lettered))
                    if len(report.requeued) + len(report.dead_lettered) + len(report.cancelled) >= size:
                        continue  # more may be waiting
                await self._check_suspects()  # not after a failed pass: the store is not answering
            await asyncio.sleep(cfg.reaper_interval)

    async def _check_suspects(self) -> None:
        """Once per reaper pass: if suspects this engine could claim are waiting, have them run alone."""
        if self._alone_wanted or self._stopping:
            return
        try:
            waiting = await self.backend.suspects_ready(self.config.queue_name, self._types)
        except Exception as exc:
            log.warning("suspect check failed (%s: %s)", type(exc).__name__, exc)
            return
        if waiting:
            self._want_alone()


def run_with_uvloop(main: Awaitable[None]) -> None:
    """Run ``main`` to completion on uvloop when it is installed, else on asyncio.

    ``RUNNERQ_LOOP=asyncio`` forces the stock loop.
    """
    use_uvloop = os.environ.get("RUNNERQ_LOOP", "uvloop") != "asyncio"
    if use_uvloop:
        try:
            import uvloop
        except ImportError:  # pragma: no cover - uvloop is a dependency on POSIX
            use_uvloop = False
    coro = main if inspect.iscoroutine(main) else _await(main)
    if use_uvloop:
        uvloop.run(coro)
    else:
        asyncio.run(coro)


async def _await(aw: Awaitable[None]) -> None:
    await aw

