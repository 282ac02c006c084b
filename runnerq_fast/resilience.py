"""What a backend call does when its store fails: translate, retry what is safe, report the state once.

Every public coroutine method of a :class:`~runnerq_fast.storage.Backend`
runs through :func:`guarded_call` (installed by ``Backend.__init_subclass__``,
so a backend's own code never wraps anything). A backend only says what its
driver's exceptions mean, in one method,
:meth:`~runnerq_fast.storage.Backend._store_fault`, returning a
:class:`Fault`:

* ``UNSENT``: the request never reached the store (connection refused, no
  free connection): nothing was applied, so every call is retried;
* ``BUSY``: the store received the request and cancelled or rolled it back
  (a statement or lock timeout, a serialization failure or deadlock, a SQLite
  database locked by another writer): nothing was applied, the store itself
  answers, and the same request may succeed later or in smaller pieces. Every
  call is retried (the store's health is not in question), and one that
  still fails raises :class:`~runnerq_fast.errors.StoreBusyError`. A caller
  that chose the size of its request (the engine's ack flush, reaper and
  pruner) asks for it at once with :func:`busy_attempts`: a statement the
  store keeps cancelling is too slow for the server's limit, and it retries
  in smaller batches (so does a producer's batch enqueue, see
  :func:`~runnerq_fast.executor.enqueue_in_pieces`);
* ``UNKNOWN``: the connection broke while the request was in flight; it may
  have been applied, so only calls in :data:`RETRY_SAFE` (reads, claims,
  idempotent writes) are retried;
* ``ANSWERED``: the store answered with an error; retrying would get the same
  answer, so the call fails at once.

Retries back off exponentially (50 ms doubling to 1 s, with jitter) within
the caller's ``timeout`` argument if the method has one, else within the
backend's :attr:`~runnerq_fast.storage.Backend.retry_timeout`. A call that
still fails raises :class:`~runnerq_fast.errors.BackendError` with the driver's
exception chained as ``__cause__``; anything that is not a store fault (this
library's own errors, bugs, cancellation) passes through untouched.

:class:`StoreHealth` logs one warning when the store starts failing and one
when it answers again, however many calls fail in between.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import enum
import logging
import random
import time
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

from runnerq_fast.errors import BackendError, StoreBusyError

__all__ = ["RETRY_SAFE", "Fault", "StoreHealth", "busy_attempts", "busy_limit", "guarded_call", "store_error"]

log = logging.getLogger(__name__)

_R = TypeVar("_R")

RETRY_SAFE = frozenset(
    {
        # reads
        "get_result",
        "wait_for_result",
        "wait_for_work",
        "get_activity",
        "get_events",
        "stats",
        "list_activities",
        "list_dead_letter",
        "list_queues",
        "query_activities",
        "count_activities",
        "list_workers",
        "ready_work",
        # a claim applied twice only leases more work to this worker, which the reaper returns
        "claim",
        # idempotent writes: applying them again changes nothing
        "extend_leases",
        "set_progress",  # the same value again (one more progress event at most)
        "migrate",
        "register_worker",  # an upsert of the whole entry
        "deregister_worker",
    }
)
"""Backend methods retried after any connection fault, even one that may have reached the store.

Every other method (enqueue, ack, release, cancel, the operator actions, ...)
is retried only when the failure is known to have happened before the
request was sent (:attr:`Fault.UNSENT`).
"""

_NO_PROOF = frozenset({"wait_for_work"})
"""Methods whose return does not prove the store answers (they may only wait on a local event)."""

_CUT_SLACK = 0.05
"""Seconds past the caller's timeout before a call still waiting on the store is cut off: the method's own
timeout answers first when the store responds, and ``timeout=0`` still looks once."""

_FIRST_DELAY = 0.05
_MAX_DELAY = 1.0

_busy_limit: contextvars.ContextVar[int | None] = contextvars.ContextVar("runnerq_busy_attempts", default=None)
"""Attempts of a call the store answers :attr:`Fault.BUSY` (see :func:`busy_attempts`); ``None``: until its deadline."""

_inside: contextvars.ContextVar[bool] = contextvars.ContextVar("runnerq_backend_call", default=False)
"""True while a guarded call runs: a public method called from inside another is not guarded twice."""


class Fault(enum.Enum):
    """What a driver exception says about the request that raised it."""

    UNSENT = "unsent"
    """The request never reached the store; nothing was applied."""

    BUSY = "busy"
    """The store cancelled or rolled the request back (a timeout, a conflict, a lock): nothing was applied."""

    UNKNOWN = "unknown"
    """The connection failed while the request was in flight; it may have been applied."""

    ANSWERED = "answered"
    """The store received the request and answered with an error."""


class StoreHealth:
    """Whether a backend's store answers; logs one warning per change of state.

    Parameters
    ----------
    label : str
        How the store is named in the log, e.g. ``"PostgreSQL at postgresql://host/db"``
        (credentials already masked).
    """

    __slots__ = ("_down_since", "label", "last_fault")

    def __init__(self, label: str) -> None:
        self.label = label
        self._down_since: float | None = None
        #: The latest connection fault while the store is down (``None`` while it is up).
        self.last_fault: BaseException | None = None

    @property
    def up(self) -> bool:
        """``False`` from the first connection fault until the next call that succeeds."""
        return self._down_since is None

    def failed(self, exc: BaseException) -> None:
        """Record a connection fault; the first one after a success logs a warning."""
        self.last_fault = exc
        if self._down_since is None:
            self._down_since = time.monotonic()
            log.warning(
                "%s is unreachable or failing (%s: %s); calls retry where safe, else raise BackendError",
                self.label,
                type(exc).__name__,
                exc,
            )

    def succeeded(self) -> None:
        """Record a call that reached the store; the first one after a fault logs a warning."""
        since = self._down_since
        if since is not None:
            self._down_since = None
            self.last_fault = None
            log.warning("%s answers again after %.1f s", self.label, time.monotonic() - since)


@contextlib.contextmanager
def busy_attempts(attempts: int) -> Iterator[None]:
    """Within the block, try a backend call the store answers :attr:`Fault.BUSY` at most ``attempts`` times.

    For a caller that chose the size of its request and makes it smaller
    when the store cancels it (a statement over ``statement_timeout``): it
    gets :class:`~runnerq_fast.errors.StoreBusyError` after ``attempts``
    tries instead of the same request retried for the backend's
    ``retry_timeout``. Other faults are retried as usual. The setting
    follows the current task (a context variable).

    Parameters
    ----------
    attempts : int
        Tries in all, >= 1.

    Raises
    ------
    ValueError
        If ``attempts`` is below 1.
    """
    if attempts < 1:
        raise ValueError(f"attempts must be >= 1, got {attempts!r}")
    token = _busy_limit.set(attempts)
    try:
        yield
    finally:
        _busy_limit.reset(token)


def busy_limit() -> int | None:
    """The ``attempts`` of the innermost :func:`busy_attempts` block around the caller; ``None`` outside one."""
    return _busy_limit.get()


def store_error(label: str, method: str, exc: BaseException, fault: Fault | None = None) -> BackendError:
    """The :class:`BackendError` for ``exc``, raised by ``method`` of the store named ``label``.

    A :class:`~runnerq_fast.errors.StoreBusyError` when ``fault`` is
    :attr:`Fault.BUSY`; ``transient`` unless ``fault`` is :attr:`Fault.ANSWERED`
    (``None``: a fault of unknown kind, transient). The caller raises it ``from exc``.
    """
    cls = StoreBusyError if fault is Fault.BUSY else BackendError
    err = cls(f"{label}: {method} failed ({type(exc).__name__}: {exc})")
    err.transient = fault is not Fault.ANSWERED
    return err


async def guarded_call(
    backend: Any,
    method: str,
    fn: Callable[..., Coroutine[Any, Any, _R]],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    timeout: float | None,
    has_timeout: bool,
) -> _R:
    """Run ``fn(backend, *args, **kwargs)``, translating and retrying store faults (see the module).

    Parameters
    ----------
    backend : Backend
        Supplies ``_store_fault(exc)``, ``_store_health``, ``retry_timeout``
        (seconds) and ``_closed``.
    method : str
        The method's name (decides :data:`RETRY_SAFE`).
    fn : coroutine function
        The backend's own implementation.
    args, kwargs : tuple, dict
        Its arguments (without ``backend``).
    timeout : float or None
        The caller's ``timeout`` argument, seconds, if ``has_timeout``.
    has_timeout : bool
        Whether the method takes a ``timeout``. A number bounds all attempts
        together, and the call then answers within it: a method cut off while
        it waits returns ``None`` (what a method with a timeout returns when it
        passes), or raises :class:`BackendError` if the store failed meanwhile.
        ``None`` retries each failure streak for ``retry_timeout``.

    Raises
    ------
    BackendError
        When a store fault is not retried, or still happens when the time is up.
    """
    if _inside.get():  # called by another guarded call of the backend: that one handles faults
        return await fn(backend, *args, **kwargs)
    token = _inside.set(True)
    attempts = _Attempts(backend, method)
    try:
        if not has_timeout or timeout is None:
            return await attempts.run(fn, args, kwargs, None)
        left = max(0.0, timeout)
        scope = asyncio.timeout(left + _CUT_SLACK)
        try:
            async with scope:
                return await attempts.run(fn, args, kwargs, time.monotonic() + left)
        except TimeoutError:
            if not scope.expired():
                raise
            # cut off while waiting: during an outage (this call's fault, or the one the backend's own
            # loops reported) that is the store's failure, else the wait simply timed out
            fault: BaseException | None = attempts.last_fault
            kind = attempts.last_kind
            if fault is None and method not in _NO_PROOF:
                fault, kind = attempts.health.last_fault, None
            if fault is not None:
                raise store_error(attempts.health.label, method, fault, kind) from fault
            return None  # type: ignore[return-value]
    finally:
        _inside.reset(token)


class _Attempts:
    """The attempts of one guarded call: retried with backoff until success, a final fault or the deadline."""

    __slots__ = ("backend", "health", "last_fault", "last_kind", "method")

    def __init__(self, backend: Any, method: str) -> None:
        self.backend = backend
        self.method = method
        self.health: StoreHealth = backend._store_health
        self.last_fault: Exception | None = None
        self.last_kind: Fault | None = None

    async def run(
        self,
        fn: Callable[..., Coroutine[Any, Any, _R]],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        deadline: float | None,
    ) -> _R:
        backend = self.backend
        delay = _FIRST_DELAY
        busy = 0
        busy_limit = _busy_limit.get()
        while True:
            try:
                result = await fn(backend, *args, **kwargs)
            except Exception as exc:
                fault = backend._store_fault(exc)
                if fault is None:
                    raise
                if fault is Fault.BUSY:
                    busy += 1  # the store answers (it cancelled the request): its health is not in question
                elif fault is not Fault.ANSWERED:
                    self.health.failed(exc)
                retry = (fault is Fault.UNSENT or (fault is Fault.BUSY and (busy_limit is None or busy < busy_limit))
                         or (fault is Fault.UNKNOWN and self.method in RETRY_SAFE))
                now = time.monotonic()
                if deadline is None:
                    deadline = now + backend.retry_timeout
                if not retry or backend._closed or now >= deadline:
                    raise store_error(self.health.label, self.method, exc, fault) from exc
                self.last_fault, self.last_kind = exc, fault
                # the last attempt comes at the deadline, not one pause before it; jittered backoff
                await asyncio.sleep(min(delay * random.uniform(0.5, 1.0), deadline - now))
                delay = min(delay * 2, _MAX_DELAY)
                continue
            if self.method not in _NO_PROOF:
                self.health.succeeded()
            return result
