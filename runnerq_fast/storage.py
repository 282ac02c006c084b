"""The contract every backend implements.

The engine, executor and inspector only ever talk to a :class:`Backend`; they
never import a concrete backend (import-linter enforces it). Every method that
touches many activities takes them as a batch so a backend can serve it in one
round trip. All times are epoch milliseconds; all durations are milliseconds.

Semantics every backend must honour (SPEC §3, checked by the conformance suite
in ``tests/conformance.py``):

* claim order: ``priority DESC, retry_count DESC, ready_at ASC`` where
  ``ready_at`` is the scheduled time, or the creation time for immediate work;
  only activities of the given types when a type filter is given;
* a claim sets status ``processing``, stamps a fresh ``claim_token`` and a
  lease ``now + lease_ms``;
* an ack or lease extension applies only while the activity is still
  ``processing`` under the same ``claim_token``; otherwise it is rejected;
* an expired lease counts as an attempt only against an activity that was
  claimed alone (a *suspect*, see :meth:`Backend.claim_suspect`): ``retry_count + 1``,
  then ``dead_letter`` when that exceeds ``max_retries``, else back to
  ``pending``, still suspect. Any other expired lease goes back to ``pending``
  with ``retry_count`` unchanged and the activity becomes suspect: it may have
  merely shared its worker with the activity that killed it. A suspect is
  never returned by :meth:`Backend.claim`, only by :meth:`Backend.claim_suspect`;
  an accepted ack clears the mark (a release keeps it);
* :meth:`Backend.release` puts claimed work back to ``pending`` without
  counting an attempt (graceful shutdown);
* every transition records an event; every terminal transition records a
  result and wakes :meth:`Backend.wait_for_result` callers;
* operator actions (:meth:`Backend.retry_activities`, ``cancel_activities``,
  ``run_now``, ``set_priority``, ``delete_activities``) apply to the
  activities a :class:`~runnerq_fast.models.ActivityFilter` matches, write one
  event per activity they change and skip (and count) the ones in a status
  the action does not apply to (:data:`runnerq_fast.filters.ACTIONS`);
* cancelling a running activity marks it *cancel requested*: the next
  :meth:`Backend.extend_leases` reports it, the engine stops the handler and
  acks it :attr:`~runnerq_fast.models.AckOutcome.CANCELLED`; until then a RETRY
  ack, a release or an expired lease also end it ``cancelled``;
* the worker registry (:meth:`Backend.register_worker`) lists an entry
  until ``ttl_ms`` after its last registration on the store's clock, or
  until it is deregistered; :meth:`Backend.ready_work` reads only activities
  in a ready status;
* listings are keyset-paged in ``(created_at, id)`` order and never scan
  every finished row of a queue: filters a backend checks row by row
  examine at most :data:`runnerq_fast.filters.ROW_SCAN_LIMIT` rows per page;
* a store that is unreachable or fails raises
  :class:`~runnerq_fast.errors.BackendError` (the driver's exception as its
  ``__cause__``), never the driver's own exception: every public coroutine
  method runs through :func:`runnerq_fast.resilience.guarded_call`, which
  retries what is safe to retry; a backend only classifies its driver's
  exceptions in :meth:`Backend._store_fault`.
"""

from __future__ import annotations

import abc
import asyncio
import functools
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar

from runnerq_fast.config import MAX_DELAY_SECONDS
from runnerq_fast.errors import ConfigError, EventLoopMismatchError, InvalidActivityError
from runnerq_fast.filters import COUNT_CAP
from runnerq_fast.models import (
    Ack,
    ActionResult,
    ActivityCount,
    ActivityEvent,
    ActivityFilter,
    ActivityPage,
    ActivityResult,
    ActivitySnapshot,
    ClaimedActivity,
    DeadLetterRecord,
    EnqueueResult,
    LeaseRef,
    LeaseReport,
    MigrationReport,
    NewActivity,
    ProgressUpdate,
    QueueStats,
    QueueSummary,
    ReadyWork,
    ReapReport,
    TypeDefaults,
    WorkerInfo,
)
from runnerq_fast.resilience import Fault, StoreHealth, guarded_call, store_error
from runnerq_fast.urls import redact_url

__all__ = [
    "Backend",
    "Fault",
    "check_hold",
    "check_prune",
    "check_prune_events",
    "check_worker_ttl",
    "open_backend",
    "refuse_connection",
    "register_connector",
]

_R = TypeVar("_R")


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _loop_checked(
    name: str, fn: Callable[..., Coroutine[Any, Any, _R]], guard: bool
) -> Callable[..., Coroutine[Any, Any, _R]]:
    """``fn`` (a public coroutine method of a backend) preceded by :meth:`Backend.ensure_loop`.

    With ``guard`` (a backend that maps driver exceptions, see
    :meth:`Backend._store_fault`) it then runs through
    :func:`runnerq_fast.resilience.guarded_call`: a store fault becomes
    :class:`~runnerq_fast.errors.BackendError`, retried first where that is
    safe. A call with the caller's own ``connection=`` runs in the caller's
    transaction and is neither translated nor retried.
    """
    params = inspect.signature(fn).parameters
    timeout_at = list(params).index("timeout") - 1 if "timeout" in params else -1  # position after self

    @functools.wraps(fn)
    async def checked(self: Backend, *args: Any, **kwargs: Any) -> _R:
        loop = _running_loop()
        if loop is not self._home_loop:
            self._adopt_loop(loop)
        if not guard or kwargs.get("connection") is not None:
            return await fn(self, *args, **kwargs)
        timeout = None
        if timeout_at >= 0:
            timeout = args[timeout_at] if len(args) > timeout_at else kwargs.get("timeout")
        return await guarded_call(self, name, fn, args, kwargs, timeout, timeout_at >= 0)

    checked.__runnerq_loop_checked__ = True  # type: ignore[attr-defined]
    checked.__runnerq_guarded__ = guard  # type: ignore[attr-defined]
    return checked


def _stream_checked(fn: Callable[..., AsyncIterator[_R]]) -> Callable[..., AsyncIterator[_R]]:
    """``fn`` (a public async generator method, a live stream) with store faults raised as BackendError.

    A stream is not retried here: each backend's stream resumes by itself
    after a lost connection; what still escapes it ends the stream.
    """

    @functools.wraps(fn)
    async def checked(self: Backend, *args: Any, **kwargs: Any) -> AsyncIterator[_R]:
        loop = _running_loop()
        if loop is not self._home_loop:
            self._adopt_loop(loop)
        stream = fn(self, *args, **kwargs)
        try:
            while True:
                try:
                    item = await anext(stream)
                except StopAsyncIteration:
                    return
                except Exception as exc:
                    if self._store_fault(exc) is None:
                        raise
                    raise store_error(self._store_health.label, fn.__name__, exc) from exc
                yield item
        finally:
            await stream.aclose()  # type: ignore[attr-defined]

    checked.__runnerq_loop_checked__ = True  # type: ignore[attr-defined]
    return checked


def _binding_init(init: Callable[..., None]) -> Callable[..., None]:
    """``init`` followed by binding the backend to the running loop (none running: bound at its first call)."""

    @functools.wraps(init)
    def binding(self: Backend, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        if self._home_loop is None:
            self._home_loop = _running_loop()

    binding.__runnerq_loop_checked__ = True  # type: ignore[attr-defined]
    return binding


class Backend(abc.ABC):
    """Storage for activities, their events and results.

    A backend instance may be shared by an engine, any number of executors
    and inspectors in one event loop. It is opened by
    :func:`runnerq_fast.connect` and closed with :meth:`close`.
    """

    #: URL the backend was opened with (credentials included as given).
    url: str = ""

    #: Scheme name: "memory", "postgresql", "sqlite", "redis".
    name: str = "abstract"

    #: The event loop this backend belongs to: the one running when it was created (opened), else the
    #: one of its first call. Its connections, locks and background tasks live there.
    _home_loop: asyncio.AbstractEventLoop | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Make every public coroutine method of a backend check the running event loop first.

        One check per call (a batch, never an activity): a backend used from
        a loop other than its own raises :class:`EventLoopMismatchError`,
        naming the cause, on every backend alike, instead of a driver's
        "Event loop is closed" or a hang.
        """
        super().__init_subclass__(**kwargs)
        init = vars(cls).get("__init__")
        if init is not None and not getattr(init, "__runnerq_loop_checked__", False):
            cls.__init__ = _binding_init(init)  # type: ignore[method-assign]
        # a store with no driver (memory) has no faults to map: its calls skip the guard (and its cost)
        guard = cls._store_fault is not Backend._store_fault
        for attr in dir(cls):  # with methods a mixin brings (the Redis operations)
            if attr.startswith("_"):
                continue
            value = inspect.getattr_static(cls, attr)
            if getattr(value, "__isabstractmethod__", False):
                continue
            if getattr(value, "__runnerq_loop_checked__", False):
                if not inspect.iscoroutinefunction(value) or getattr(value, "__runnerq_guarded__", False) == guard:
                    continue
                value = value.__wrapped__  # inherited from a backend that guards differently
            if inspect.iscoroutinefunction(value):
                setattr(cls, attr, _loop_checked(attr, value, guard))
            elif inspect.isasyncgenfunction(value):
                setattr(cls, attr, _stream_checked(value))

    #: Seconds a call keeps retrying a failing store (see :mod:`runnerq_fast.resilience`) when it has
    #: no ``timeout`` argument of its own; then it raises :class:`~runnerq_fast.errors.BackendError`.
    retry_timeout: float = 5.0

    _closed: bool = False
    __store_health: StoreHealth | None = None

    #: The per-type enqueue defaults read from this store, shared by its executors:
    #: queue -> (monotonic time they go stale, defaults by type); see :meth:`get_type_defaults`.
    _type_defaults_cache: dict[str, tuple[float, dict[str, TypeDefaults]]] | None = None

    @property
    def _store_health(self) -> StoreHealth:
        """This backend's up/down state (one warning per change; see :class:`~runnerq_fast.resilience.StoreHealth`)."""
        health = self.__store_health
        if health is None:
            health = self.__store_health = StoreHealth(f"{self.name} backend at {redact_url(self.url)}")
        return health

    def _store_fault(self, exc: Exception) -> Fault | None:
        """What ``exc``, raised by one of this backend's calls, says about the store; ``None``: not a fault.

        The one place a backend maps its driver's exceptions (the default, for
        a store with no driver, maps none). A fault becomes
        :class:`~runnerq_fast.errors.BackendError`, retried first as the
        :class:`Fault` allows; anything else (this library's own errors, a
        bug) passes through.
        """
        return None

    def ensure_loop(self) -> None:
        """Check that the running event loop is this backend's own (binding it on first use).

        Every public coroutine method does this first; the engine calls it at
        start so a misplaced backend fails there.

        Raises
        ------
        EventLoopMismatchError
            If the backend was opened in (or first used from) another event
            loop: its connections and background tasks belong to that loop.
            Open one backend per event loop (e.g. per ``asyncio.run()`` or per test).
        """
        loop = _running_loop()
        if loop is not self._home_loop:
            self._adopt_loop(loop)

    def _adopt_loop(self, loop: asyncio.AbstractEventLoop | None) -> None:
        home = self._home_loop
        if loop is None:
            return  # driven outside any loop (a finalizer): nothing to compare
        if home is None:
            self._home_loop = loop
            return
        state = "which is now closed" if home.is_closed() else "which is still running"
        raise EventLoopMismatchError(
            f"{type(self).__name__} was opened in another event loop ({state}) than the one now using it; "
            "a backend's connections and tasks belong to the loop it was opened in: open one backend per "
            "event loop (e.g. per asyncio.run() or per test)"
        )

    async def migrate(self) -> MigrationReport | None:
        """Create or upgrade the schema; a no-op for schemaless backends.

        Returns
        -------
        MigrationReport or None
            What was applied, and the versions the store holds that this
            release does not know (logged as a warning too: the store stays
            usable, so an application can be rolled back after an upgrade).
            A schemaless backend reports nothing applied. ``None`` from a
            backend that reports nothing (the Redis backend; any subclass
            written when this method returned ``None``).
        """
        return MigrationReport()

    @abc.abstractmethod
    async def close(self) -> None:
        """Release connections and background tasks. Idempotent."""

    async def __aenter__(self) -> Backend:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ---------------------------------------------------------------- queueing
    @abc.abstractmethod
    async def enqueue(
        self, queue: str, items: Sequence[NewActivity], *, connection: object | None = None
    ) -> list[EnqueueResult]:
        """Store new activities, applying idempotency atomically.

        Parameters
        ----------
        queue : str
            Queue name.
        items : sequence of NewActivity
            Already validated; stored in one round trip where the store allows.
        connection : object, optional
            The caller's own database connection, inside a transaction the
            caller opened: the activities are written in that transaction
            (they exist if and only if it commits) and the work notification
            goes out when it commits. Only the SQL backends take one (an
            asyncpg connection for PostgreSQL, a ``sqlite3.Connection`` to the
            same file for SQLite); ``None`` (default) writes in a transaction
            of the backend's own.

        Returns
        -------
        list of EnqueueResult
            One per item, same order.

        Raises
        ------
        ConfigError
            If ``connection`` is given and this backend cannot write through
            it (see :func:`refuse_connection`), or it is not inside a transaction.
        """

    @abc.abstractmethod
    async def claim(
        self,
        queue: str,
        worker_id: str,
        limit: int,
        activity_types: Sequence[str] | None,
        lease_ms: int,
    ) -> list[ClaimedActivity]:
        """Claim up to ``limit`` ready activities in SPEC order, in one round trip.

        ``activity_types=None`` claims any type. Returned in claim order.
        """

    @abc.abstractmethod
    async def claim_suspect(
        self, queue: str, worker_id: str, activity_types: Sequence[str] | None, lease_ms: int
    ) -> list[ClaimedActivity]:
        """Claim the first ready suspect activity in SPEC order (at most one), to run it alone.

        A suspect is an activity whose lease expired while it was claimed the
        ordinary way (:meth:`claim`), beside others: the reaper did not count
        the attempt. The engine calls this only with nothing else in flight,
        so if this claim's lease expires too, the activity is the one that
        stopped its worker and :meth:`requeue_expired` counts the attempt.

        Parameters
        ----------
        queue : str
            Queue name.
        worker_id : str
            Recorded on the claim.
        activity_types : sequence of str or None
            Types this worker claims (``None``: any).
        lease_ms : int
            Lease in milliseconds.

        Returns
        -------
        list of ClaimedActivity
            Empty, or the one suspect claimed.
        """

    @abc.abstractmethod
    async def suspects_ready(self, queue: str, activity_types: Sequence[str] | None) -> int:
        """How many suspect activities of these types (``None``: any) :meth:`claim_suspect` could claim now.

        Cheap (an index range or a set's size); the engine asks once per
        reaper pass. May count an entry a claim then finds stale.
        """

    @abc.abstractmethod
    async def ack(self, queue: str, acks: Sequence[Ack]) -> list[str]:
        """Apply finished attempts in one round trip.

        Returns
        -------
        list of str
            Ids whose ack was rejected because the claim no longer holds.
        """

    @abc.abstractmethod
    async def extend_leases(self, queue: str, leases: Sequence[LeaseRef], lease_ms: int) -> LeaseReport:
        """Set the lease of every held activity to ``now + lease_ms`` (the heartbeat).

        Returns
        -------
        LeaseReport
            ``lost``: ids whose claim no longer holds (their lease was not
            extended); ``cancel_requested``: held ids an operator asked to
            cancel (their lease was extended).
        """

    @abc.abstractmethod
    async def set_progress(self, queue: str, updates: Sequence[ProgressUpdate]) -> list[str]:
        """Store the progress of held activities (the engine's coalesced ``ctx.set_progress`` writes).

        Each update is written only while its claim holds (status
        ``processing`` under ``claim_token``), with a ``progress`` event
        whose detail is the value's JSON text. At most one update per id.

        Returns
        -------
        list of str
            Ids whose claim no longer holds (nothing written for them).
        """

    @abc.abstractmethod
    async def release(self, queue: str, leases: Sequence[LeaseRef]) -> list[str]:
        """Put held activities back to ``pending`` without counting an attempt.

        A held activity whose cancellation was requested ends ``cancelled``
        instead. Returns the ids actually released (or so cancelled).
        """

    @abc.abstractmethod
    async def requeue_expired(self, queue: str, limit: int) -> ReapReport:
        """Reap up to ``limit`` activities whose lease has expired.

        Only a suspect's expiry counts an attempt (see the module docstring);
        the others go back to ``pending`` uncounted, marked suspect. Both are
        in ``requeued`` (or ``dead_lettered``, ``cancelled``).
        """

    @abc.abstractmethod
    async def wait_for_work(
        self, queue: str, timeout: float, activity_types: Sequence[str] | None = None
    ) -> None:
        """Return when work the caller can claim may be ready on ``queue``, or after ``timeout`` seconds.

        Parameters
        ----------
        queue : str
            The queue the caller claims from.
        timeout : float
            Longest wait, in seconds.
        activity_types : sequence of str or None, optional
            The types the caller claims (as passed to :meth:`claim`); ``None``
            (the default) means every type.

        Notes
        -----
        It returns when work of one of ``activity_types`` may have become
        ready since the caller's last :meth:`claim` (an enqueue, a release,
        a reaped lease), and at the latest when the earliest scheduled or
        retrying activity of those types comes due, so a delayed activity is
        claimed at its due time however long ``timeout`` is. A spurious early
        return is allowed; callers simply try to claim.
        """

    # --------------------------------------------------------------- results
    @abc.abstractmethod
    async def get_result(self, activity_id: str) -> ActivityResult | None:
        """The stored outcome, or ``None`` while the activity is not finished."""

    @abc.abstractmethod
    async def wait_for_result(self, activity_id: str, timeout: float | None) -> ActivityResult | None:
        """Wait (woken by a notification, not a poll) until the activity ends.

        Returns ``None`` if ``timeout`` seconds pass first.
        """

    @abc.abstractmethod
    async def cancel(self, activity_id: str) -> bool:
        """Cancel an activity that has not started (pending, scheduled, retrying).

        Returns ``True`` if it was cancelled.
        """

    # ------------------------------------------------------------ inspection
    @abc.abstractmethod
    async def stats(self, queue: str) -> QueueStats:
        """Count activities of ``queue`` by status."""

    @abc.abstractmethod
    async def list_activities(
        self, queue: str, status: str | None, offset: int = 0, limit: int = 50
    ) -> list[ActivitySnapshot]:
        """Activities of ``queue`` (any status if ``None``), newest first."""

    @abc.abstractmethod
    async def get_activity(self, activity_id: str) -> ActivitySnapshot | None:
        """One activity, or ``None`` if unknown."""

    @abc.abstractmethod
    async def get_events(self, activity_id: str) -> list[ActivityEvent]:
        """The activity's events, oldest first.

        The ``retrying``, ``failed`` or ``dead_letter`` event of an attempt whose
        handler raised carries that attempt's traceback (``ActivityEvent.traceback``).
        """

    @abc.abstractmethod
    async def list_dead_letter(self, queue: str, offset: int = 0, limit: int = 50) -> list[DeadLetterRecord]:
        """Dead-lettered activities of ``queue``, newest first."""

    @abc.abstractmethod
    def event_stream(self, queue: str, after_id: int | None = None) -> AsyncIterator[ActivityEvent]:
        """Live events of ``queue``; with ``after_id``, first replays later stored ones.

        Their ``traceback`` is ``None``: the stream leaves failed attempts' tracebacks out.
        """

    # ------------------------------------------------- listings with filters
    @abc.abstractmethod
    async def list_queues(self) -> list[QueueSummary]:
        """Every queue the store knows, by name, with counts by status and by type.

        The counts may read every row of a queue (an index-only count where
        the store has one); listings and :meth:`count_activities` never do.
        """

    @abc.abstractmethod
    async def query_activities(
        self,
        queue: str,
        flt: ActivityFilter,
        *,
        limit: int = 50,
        cursor: str | None = None,
        newest_first: bool = True,
    ) -> ActivityPage:
        """One page of the activities of ``queue`` that ``flt`` matches.

        Parameters
        ----------
        queue : str
            Queue name.
        flt : ActivityFilter
            Conditions, validated by :func:`runnerq_fast.filters.check_filter`.
        limit : int
            Most items returned, 1-:data:`~runnerq_fast.filters.MAX_PAGE`. Default 50.
        cursor : str, optional
            ``next_cursor`` of the previous page; ``None`` starts at the beginning.
        newest_first : bool
            Order by ``(created_at, id)`` descending (default) or ascending.

        Returns
        -------
        ActivityPage
            Rows created after the previous page was read appear on the page
            they sort into, never twice. A page may be short (even empty) and
            still have a ``next_cursor`` when priority or metadata conditions
            examined :data:`~runnerq_fast.filters.ROW_SCAN_LIMIT` rows.

        Raises
        ------
        InvalidActivityError
            For a bad filter, limit or cursor (nothing is read).
        """

    @abc.abstractmethod
    async def count_activities(self, queue: str, flt: ActivityFilter, *, cap: int = COUNT_CAP) -> ActivityCount:
        """How many activities of ``queue`` match ``flt``, counting at most ``cap``.

        The work is bounded: at most ``cap`` matching rows are counted, and a
        priority or metadata condition examines at most ``cap`` +
        :data:`~runnerq_fast.filters.ROW_SCAN_LIMIT` candidate rows.
        ``exact=False`` says counting stopped early (at least ``count`` match).

        Raises
        ------
        InvalidActivityError
            For a bad filter or cap.
        """

    # -------------------------------------------------------------- actions
    @abc.abstractmethod
    async def retry_activities(self, queue: str, flt: ActivityFilter, *, limit: int = 10_000) -> ActionResult:
        """Put failed, dead-lettered and cancelled activities back to ``pending``, ready now.

        ``retry_count`` starts again at 0; the earlier errors stay in the
        events. Records ``retry_requested`` per activity. At most ``limit``
        (1-:data:`~runnerq_fast.filters.MAX_ACTION_LIMIT`) change.

        Raises
        ------
        InvalidActivityError
            For a bad filter or limit (nothing changes).
        """

    @abc.abstractmethod
    async def cancel_activities(self, queue: str, flt: ActivityFilter, *, limit: int = 10_000) -> ActionResult:
        """Cancel activities: not started ones end ``cancelled`` at once, running ones are asked to stop.

        Pending, scheduled and retrying activities end ``cancelled`` (event
        ``cancelled``, result waiters woken); a processing one is marked
        cancel-requested (event ``cancel_requested``) and ends ``cancelled``
        once its engine notices on its next heartbeat. See :meth:`retry_activities`
        for ``limit`` and errors.
        """

    @abc.abstractmethod
    async def run_now(self, queue: str, flt: ActivityFilter, *, limit: int = 10_000) -> ActionResult:
        """Make scheduled and retrying activities ``pending``, ready now (event ``run_now``).

        See :meth:`retry_activities` for ``limit`` and errors.
        """

    @abc.abstractmethod
    async def set_priority(
        self, queue: str, flt: ActivityFilter, priority: int, *, limit: int = 10_000
    ) -> ActionResult:
        """Change the priority (1-4) of activities that have not started (event ``priority_changed``).

        Activities already at ``priority`` are skipped. The claim order follows
        at once. See :meth:`retry_activities` for ``limit``; a priority outside
        1-4 is an :class:`~runnerq_fast.errors.InvalidActivityError`.
        """

    @abc.abstractmethod
    async def delete_activities(self, queue: str, flt: ActivityFilter, *, limit: int = 10_000) -> ActionResult:
        """Delete finished activities with their events and idempotency keys.

        A ``deleted`` event goes to the live stream; afterwards the activity,
        its result and its timeline are gone (:meth:`get_events` returns
        nothing). See :meth:`retry_activities` for ``limit`` and errors.
        """

    # ------------------------------------------------------------ retention
    @abc.abstractmethod
    async def prune(self, queue: str, statuses: Sequence[str], older_than_ms: int, *, limit: int = 1000) -> int:
        """Delete one batch of finished activities of ``queue`` (one short transaction).

        Deletes up to ``limit`` activities whose status is one of ``statuses``
        (each of ``completed``, ``failed``, ``dead_letter``, ``cancelled``) and
        that finished more than ``older_than_ms`` milliseconds ago, with their
        events and their idempotency keys (a key is released only while it
        still names the pruned activity: a later enqueue with that key creates
        a new activity). An activity that is not finished is never deleted.
        The children of a pruned activity keep their ``parent_id`` and stay
        listed by it. Nothing goes to the live stream. Callers loop until a
        batch returns fewer than ``limit`` (:func:`runnerq_fast.observability.prune`).

        Parameters
        ----------
        queue : str
            Queue name.
        statuses : sequence of str
            Finished statuses to prune; empty prunes nothing.
        older_than_ms : int
            Minimum age of the finish time, milliseconds, >= 0 (0: everything finished until now).
        limit : int
            Most activities deleted by this call, 1-100,000. Default 1,000.

        Returns
        -------
        int
            Activities deleted (fewer than ``limit``: nothing older is left, for now).
        """

    @abc.abstractmethod
    async def prune_events(self, queue: str, older_than_ms: int, *, limit: int = 1000) -> int:
        """Delete one batch of the events of ``queue`` recorded more than ``older_than_ms`` ago.

        Events of activities still stored go too (a long-running activity
        loses the oldest entries of its timeline); the activities themselves
        stay. On Redis an activity's events live in its hash (at most 1,000
        per activity) and go with it: this deletes nothing and returns 0.

        Parameters
        ----------
        queue : str
            Queue name.
        older_than_ms : int
            Minimum age of an event, milliseconds, >= 0.
        limit : int
            Most events (PostgreSQL: event batch rows) deleted by this call, 1-100,000. Default 1,000.

        Returns
        -------
        int
            Events (PostgreSQL: event batch rows) deleted.
        """

    async def check_server(self) -> None:  # noqa: B027 - optional: most stores have nothing to check
        """Warn, once per store and process, about server settings that hurt a worker.

        :meth:`WorkerEngine.start <runnerq_fast.WorkerEngine.start>` calls it;
        opening a backend does not, so the CLI, the synchronous client and
        scripts stay quiet. PostgreSQL warns when autovacuum is off
        (:meth:`~runnerq_fast.backends.postgres.PostgresBackend.check_autovacuum`),
        Redis and Redis Cluster when a ``maxmemory-policy`` is not
        ``noeviction``
        (:meth:`~runnerq_fast.backends.redis.RedisBackend.check_eviction_policy`);
        SQLite and memory have nothing to check here. Never raises for a
        setting it cannot read.
        """

    async def maintain(self) -> None:  # noqa: B027 - optional: most stores need no housekeeping
        """Housekeeping the engine's pruner runs every pass (while it holds a queue's ``"prune"`` hold).

        PostgreSQL folds the count deltas its triggers append into its
        counters; the other backends have nothing to do.
        """

    @abc.abstractmethod
    async def hold(self, queue: str, purpose: str, holder: str, ttl_ms: int) -> bool:
        """Take or renew the hold ``purpose`` of ``queue`` for ``holder`` for ``ttl_ms`` milliseconds.

        A lease on a name, shared by every process using the store: at most
        one holder has it at a time. It is granted when nobody holds it, its
        last holder's time ran out, or ``holder`` already holds it (then its
        time is renewed). The engine's pruner takes ``"prune"`` so one pruner
        runs per queue however many workers serve it.

        Parameters
        ----------
        queue, purpose : str
            What is held (``purpose`` at most 255 characters).
        holder : str
            Who asks (a worker id).
        ttl_ms : int
            How long the hold lasts from now unless renewed, milliseconds, >= 1.

        Returns
        -------
        bool
            Whether ``holder`` holds it now.
        """

    # ------------------------------------------------------ worker registry
    @abc.abstractmethod
    async def register_worker(self, info: WorkerInfo, ttl_ms: int) -> None:
        """Add or refresh the registry entry of one engine (its heartbeat), in one round trip.

        The entry ``(info.queue, info.worker_id)`` is replaced by ``info`` and
        expires ``ttl_ms`` milliseconds from now on the store's clock unless
        registered again; expired entries are never listed.

        Parameters
        ----------
        info : WorkerInfo
            The engine as it is now.
        ttl_ms : int
            Milliseconds (>= 1) the entry lives without another registration.

        Raises
        ------
        ValueError
            If ``ttl_ms`` is below 1.
        """

    @abc.abstractmethod
    async def deregister_worker(self, queue: str, worker_id: str) -> None:
        """Remove the registry entry of one engine at once (a clean stop); unknown entries are ignored."""

    @abc.abstractmethod
    async def list_workers(self, queue: str | None = None) -> list[WorkerInfo]:
        """The live (unexpired) registry entries of ``queue``, or of every queue for ``None``.

        Returns
        -------
        list of WorkerInfo
            Ordered by ``(queue, worker_id)``.
        """

    # ------------------------------------------------- per-type enqueue defaults
    @abc.abstractmethod
    async def set_type_defaults(self, queue: str, defaults: Sequence[TypeDefaults]) -> None:
        """Record the enqueue defaults of some activity types of ``queue``, in one round trip.

        Each type's entry is replaced whole (the last writer wins; a ``None``
        field clears what an earlier writer set). Types not named keep their
        entry. A started engine calls this once, for the types it has
        handlers for (:meth:`~runnerq_fast.engine.WorkerEngine.activity`'s
        ``max_retries``, ``timeout``, ``priority``).

        Parameters
        ----------
        queue : str
            The queue.
        defaults : sequence of TypeDefaults
            One entry per type (a type named twice: the last one counts).
        """

    @abc.abstractmethod
    async def get_type_defaults(self, queue: str) -> dict[str, TypeDefaults]:
        """The enqueue defaults recorded for the activity types of ``queue``, by type (empty when none)."""

    @abc.abstractmethod
    async def ready_work(self, queue: str) -> ReadyWork:
        """What a worker could claim now: counts by type and the oldest ready time.

        Counts pending activities plus scheduled and retrying ones that are due.
        Reads only activities in those statuses (never the finished ones), so
        its cost follows the backlog, not the history of the queue.
        """


def check_worker_ttl(ttl_ms: int) -> int:
    """``ttl_ms`` if it is a valid registry entry lifetime (for :meth:`Backend.register_worker`).

    Raises
    ------
    ValueError
        If ``ttl_ms`` is not an integer of at least 1 (milliseconds).
    """
    if isinstance(ttl_ms, bool) or not isinstance(ttl_ms, int) or ttl_ms < 1:
        raise ValueError(f"ttl_ms must be a positive number of milliseconds, got {ttl_ms!r}")
    return ttl_ms


def refuse_connection(backend: Backend, connection: object | None) -> None:
    """Raise unless ``connection`` is ``None``: for backends that cannot join a caller's transaction.

    Raises
    ------
    ConfigError
        If ``connection`` is not ``None``.
    """
    if connection is not None:
        raise ConfigError(
            f"the {backend.name} backend cannot enqueue inside the caller's transaction "
            f"(got connection={type(connection).__name__}); only PostgreSQL (an asyncpg connection) "
            "and SQLite (a sqlite3.Connection to the same file) can"
        )


_FINISHED = ("completed", "failed", "dead_letter", "cancelled")
MOST_PRUNED = 100_000
"""The most activities (or events) one :meth:`Backend.prune` / :meth:`Backend.prune_events` call deletes."""


def check_prune(statuses: Sequence[str], older_than_ms: int, limit: int) -> list[str]:
    """Validate the arguments of :meth:`Backend.prune`; return the statuses as a list without repeats.

    Raises
    ------
    InvalidActivityError
        If a status is not a finished one, ``older_than_ms`` is not an int >= 0
        or ``limit`` not an int in 1-100,000 (nothing is deleted).
    """
    if isinstance(statuses, str):
        statuses = (statuses,)
    wanted: list[str] = []
    for status in statuses:
        if status not in _FINISHED:
            raise InvalidActivityError(
                f"only finished activities are pruned ({', '.join(_FINISHED)}); got status {status!r}"
            )
        if status not in wanted:
            wanted.append(status)
    check_prune_events(older_than_ms, limit)
    return wanted


_MOST_AGE_MS = round(MAX_DELAY_SECONDS * 1000)  # a larger age overflowed SQLite's and PostgreSQL's integers


def check_prune_events(older_than_ms: int, limit: int) -> None:
    """Validate the arguments of :meth:`Backend.prune_events` (see :func:`check_prune`)."""
    if isinstance(older_than_ms, bool) or not isinstance(older_than_ms, int) or not 0 <= older_than_ms <= _MOST_AGE_MS:
        raise InvalidActivityError(f"older_than_ms must be an int in [0, {_MOST_AGE_MS}] (100 years), "
                                   f"got {older_than_ms!r}")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MOST_PRUNED:
        raise InvalidActivityError(f"limit must be an int in [1, {MOST_PRUNED}], got {limit!r}")


def check_hold(purpose: str, ttl_ms: int) -> None:
    """Validate the arguments of :meth:`Backend.hold`.

    Raises
    ------
    ConfigError
        If ``purpose`` is not a name of 1-255 characters or ``ttl_ms`` not an int >= 1.
    """
    if not isinstance(purpose, str) or not 1 <= len(purpose) <= 255:
        raise ConfigError(f"a hold's purpose must be a name of 1-255 characters, got {purpose!r}")
    if isinstance(ttl_ms, bool) or not isinstance(ttl_ms, int) or ttl_ms < 1:
        raise ConfigError(f"a hold's ttl_ms must be an int >= 1, got {ttl_ms!r}")


_connector: Callable[..., Awaitable[Backend]] | None = None


def register_connector(connector: Callable[..., Awaitable[Backend]]) -> None:
    """Install the function that opens a backend from a URL.

    The package's ``__init__`` installs :func:`runnerq_fast.connect`, so the
    core can accept a URL without importing any backend module.
    """
    global _connector
    _connector = connector


async def open_backend(url: str, **options: object) -> Backend:
    """Open ``url`` through the registered connector (``options`` go to the backend's ``open``).

    Raises
    ------
    ConfigError
        If no connector is registered (``runnerq_fast`` was not imported).
    """
    if _connector is None:
        raise ConfigError("no backend connector registered; import runnerq_fast first")
    return await _connector(url, **options)
