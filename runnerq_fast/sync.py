"""A blocking client for code without an event loop: Django and Flask views, scripts, threads.

:class:`SyncExecutor` owns one private event loop running in a daemon
thread. The backend is opened in that loop and only ever used there (a
backend lives in one event loop); every call from any thread is handed to it
with :func:`asyncio.run_coroutine_threadsafe` and waited for. Enqueues from
many threads are coalesced: while one batch is at the backend the next ones
gather, and each batch is one ``Backend.enqueue`` round trip (sent again in
halves, in order, if the store cancels it: see
:func:`~runnerq_fast.executor.enqueue_in_pieces`).

The builder is :class:`~runnerq_fast.executor.ActivityBuilder` itself
(wrapped, so :meth:`SyncActivityBuilder.execute` blocks and returns the id):
the same setters, the same validation, the same defaults.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from collections.abc import Callable, Coroutine, Iterable
from datetime import datetime
from typing import Any, Generic, Self, TypeVar, overload

from runnerq_fast.config import WorkerConfig
from runnerq_fast.errors import ConfigError, DuplicateActivityError
from runnerq_fast.executor import (
    ActivityBuilder,
    ActivityExecutor,
    PayloadT,
    PieceSize,
    enqueue_in_pieces,
    unwrap_result,
)
from runnerq_fast.models import ActivityResult, EnqueueOutcome, EnqueueResult, NewActivity, OnDuplicate, Priority
from runnerq_fast.progress import Progress, decode_progress
from runnerq_fast.storage import Backend, open_backend

__all__ = ["SyncActivityBuilder", "SyncExecutor"]

T = TypeVar("T")

_MAX_BATCH = 1000


def _new_loop() -> asyncio.AbstractEventLoop:
    if os.environ.get("RUNNERQ_LOOP", "uvloop") != "asyncio":
        try:
            import uvloop
        except ImportError:  # pragma: no cover - uvloop is a dependency on POSIX
            pass
        else:
            loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
            return loop
    return asyncio.new_event_loop()


class SyncActivityBuilder(Generic[PayloadT]):
    """The fluent builder of :class:`~runnerq_fast.ActivityBuilder`, finished by a blocking :meth:`execute`.

    Every setter is the async builder's (same validation: it raises
    :class:`InvalidActivityError` at the call) and returns this builder;
    generic in the payload type as the async builder.
    """

    __slots__ = ("_builder", "_client")

    def __init__(self, client: SyncExecutor, builder: ActivityBuilder[PayloadT]) -> None:
        self._client = client
        self._builder = builder

    @property
    def activity_type(self) -> str:
        """The activity's type."""
        return self._builder.activity_type

    def payload(self, payload: PayloadT) -> Self:
        """See :meth:`ActivityBuilder.payload`."""
        self._builder.payload(payload)
        return self

    def priority(self, priority: Priority | int) -> Self:
        """See :meth:`ActivityBuilder.priority`."""
        self._builder.priority(priority)
        return self

    def delay(self, seconds: float) -> Self:
        """See :meth:`ActivityBuilder.delay` (seconds)."""
        self._builder.delay(seconds)
        return self

    def run_at(self, when: datetime | float) -> Self:
        """See :meth:`ActivityBuilder.run_at` (aware datetime or epoch seconds)."""
        self._builder.run_at(when)
        return self

    def max_retries(self, retries: int) -> Self:
        """See :meth:`ActivityBuilder.max_retries`."""
        self._builder.max_retries(retries)
        return self

    def timeout(self, seconds: float) -> Self:
        """See :meth:`ActivityBuilder.timeout` (seconds, 0 = none)."""
        self._builder.timeout(seconds)
        return self

    def metadata(self, metadata: dict[str, str]) -> Self:
        """See :meth:`ActivityBuilder.metadata`."""
        self._builder.metadata(metadata)
        return self

    def idempotency_key(self, key: str, on_duplicate: OnDuplicate = OnDuplicate.RETURN_EXISTING) -> Self:
        """See :meth:`ActivityBuilder.idempotency_key`."""
        self._builder.idempotency_key(key, on_duplicate)
        return self

    def build(self) -> NewActivity:
        """See :meth:`ActivityBuilder.build`."""
        return self._builder.build()

    def execute(self, timeout: float | None = None) -> str:
        """Enqueue the activity, blocking until the backend has stored it.

        Parameters
        ----------
        timeout : float or None
            Seconds to wait for the backend; ``None`` waits as long as it takes.

        Returns
        -------
        str
            The activity id (the existing one when an idempotency key matched).

        Raises
        ------
        InvalidActivityError
            Bad input; nothing was stored.
        DuplicateActivityError
            The idempotency key is taken and the behaviour is ``NO_REUSE``.
        TimeoutError
            The backend did not answer within ``timeout`` (the activity may
            still be stored: give it an idempotency key to retry safely).
        ConfigError
            The client is closed.
        """
        ex = self._builder._executor
        if ex._defaults_stale():  # the type's defaults, read at most every TYPE_DEFAULTS_TTL seconds
            self._client._call(ex.type_defaults(), timeout)
        item = self._builder.build()
        try:
            res = self._client._enqueue(item).result(timeout)
        except TimeoutError:
            raise TimeoutError(f"the backend did not store the activity within {timeout} s") from None
        if res.outcome == EnqueueOutcome.REJECTED:
            raise DuplicateActivityError(item.idempotency_key or "", res.activity_id)
        return res.activity_id


class SyncExecutor:
    """Enqueue activities and wait for results from synchronous code, from any number of threads.

    Parameters
    ----------
    backend : str or None
        Backend URL (``postgresql://…``, ``redis://…``, ``sqlite:///file.db``;
        ``memory://`` works but is private to this client). ``None``: the
        ``RUNNERQ_BACKEND`` environment variable. The backend is opened in
        the client's own event loop thread.
    queue_name : str, optional
        Queue to enqueue to; default ``config.queue_name`` (``"default"``).
    config : WorkerConfig, optional
        Defaults for timeout, retries, payload limit and idempotency TTL.
    **options
        Passed to the backend's ``open`` like :func:`runnerq_fast.connect`'s
        (e.g. ``namespace=`` for Redis, ``max_size=`` for the PostgreSQL pool).

    Raises
    ------
    ConfigError
        If no URL is given, or the URL's scheme is unknown.
    BackendError
        If the backend cannot be opened.

    Examples
    --------
    >>> with rq.SyncExecutor("postgresql://localhost/app", "app") as client:
    ...     activity_id = client.activity("send_email").payload({"to": "a@b.c"}).execute()
    ...     print(client.result(activity_id, timeout=10))
    """

    def __init__(self, backend: str | None = None, queue_name: str | None = None, *,
                 config: WorkerConfig | None = None, **options: object) -> None:
        url = backend or os.environ.get("RUNNERQ_BACKEND")
        if not url:
            raise ConfigError("no backend given (pass a URL or set RUNNERQ_BACKEND)")
        if not isinstance(url, str):
            raise ConfigError(f"SyncExecutor takes a backend URL, got {type(backend).__name__}: the backend is "
                              "opened in the client's own event loop")
        self._lock = threading.Lock()
        self._pending: list[tuple[NewActivity, concurrent.futures.Future[EnqueueResult]]] = []
        self._flushing = False
        self._pieces = PieceSize()  # the enqueue batches' size, learnt from cancellations
        self._flush_task: asyncio.Task[None] | None = None
        self._closed = False
        self._loop = _new_loop()
        self._thread = threading.Thread(target=self._run_loop, name="runnerq-sync-client", daemon=True)
        self._thread.start()
        try:
            self._backend: Backend = self._call(open_backend(url, **options))
        except BaseException:
            self._stop_loop()
            raise
        self._executor = ActivityExecutor(self._backend, queue_name, config)

    # ----------------------------------------------------------------- loop
    def _run_loop(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_forever()
        finally:
            self._loop.close()

    def _stop_loop(self) -> None:
        self._closed = True
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        if self._closed:
            coro.close()
            raise ConfigError("the SyncExecutor is closed")
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("a SyncExecutor cannot be called from its own event loop thread")
        fut = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return fut.result(timeout)
        except TimeoutError:
            fut.cancel()  # the call is abandoned in the loop too
            raise TimeoutError(f"the backend did not answer within {timeout} s") from None

    def _enqueue(self, item: NewActivity) -> concurrent.futures.Future[EnqueueResult]:
        """Queue ``item`` for the next enqueue batch; the future resolves to its :class:`EnqueueResult`."""
        fut: concurrent.futures.Future[EnqueueResult] = concurrent.futures.Future()
        with self._lock:
            if self._closed:
                raise ConfigError("the SyncExecutor is closed")
            self._pending.append((item, fut))
            if not self._flushing:
                self._flushing = True
                # under the lock: scheduled before any close() can schedule the backend's closing
                self._loop.call_soon_threadsafe(self._start_flush)
        return fut

    def _start_flush(self) -> None:
        self._flush_task = self._loop.create_task(self._flush())

    async def _flush(self) -> None:
        """Send the gathered enqueues, one backend call per batch, until none is left."""
        backend, queue = self._backend, self._executor.queue_name
        while True:
            with self._lock:
                batch, self._pending = self._pending[:_MAX_BATCH], self._pending[_MAX_BATCH:]
                if not batch:
                    self._flushing = False
                    return
            results: list[EnqueueResult] = []
            try:
                await enqueue_in_pieces(backend, queue, [item for item, _ in batch], results, self._pieces)
            except BaseException as exc:
                for _, fut in batch[len(results):]:  # the leading pieces were stored: those get their result
                    if not fut.done():
                        fut.set_exception(exc)
                if isinstance(exc, asyncio.CancelledError | KeyboardInterrupt | SystemExit):
                    self._resolve(batch, results)
                    raise
            self._resolve(batch, results)

    @staticmethod
    def _resolve(batch: list[tuple[NewActivity, concurrent.futures.Future[EnqueueResult]]],
                 results: list[EnqueueResult]) -> None:
        """Resolve the futures of ``batch``'s leading items with ``results`` (one each, in order)."""
        for (_, fut), res in zip(batch, results, strict=False):
            if not fut.done():
                fut.set_result(res)

    # ----------------------------------------------------------------- API
    @property
    def queue_name(self) -> str:
        """The queue this client enqueues to."""
        return self._executor.queue_name

    @property
    def backend_name(self) -> str:
        """The backend's scheme name (``"postgresql"``, ``"redis"``, ``"sqlite"``, ``"memory"``)."""
        return self._backend.name

    @overload
    def activity(self, activity_type: str) -> SyncActivityBuilder[Any]: ...

    @overload
    def activity(
        self, activity_type: Callable[[PayloadT, Any], object]
    ) -> SyncActivityBuilder[PayloadT]: ...

    def activity(self, activity_type: str | Callable[..., object]) -> SyncActivityBuilder[Any]:
        """Start describing an activity of ``activity_type``; finish with ``.execute()``.

        Parameters
        ----------
        activity_type : str or handler
            The type's name, or a handler registered for it (see
            :meth:`ActivityExecutor.activity`): ``payload`` then takes the
            handler's payload type, checked by a type checker.

        Raises
        ------
        InvalidActivityError
            If the type is empty, over 255 characters or not a string, or the
            handler is not registered (or registered for several types).
        """
        return SyncActivityBuilder(self, ActivityBuilder(self._executor, activity_type))

    def enqueue_many(self, items: Iterable[SyncActivityBuilder | tuple[str, Any]],
                     timeout: float | None = None) -> list[str]:
        """Enqueue a batch in one backend round trip; see :meth:`ActivityExecutor.enqueue_many`.

        Returns
        -------
        list of str
            The activity ids, in input order.
        """
        inner = [it._builder if isinstance(it, SyncActivityBuilder) else it for it in items]
        return self._call(self._executor.enqueue_many(inner), timeout)

    def result(self, activity_id: str, timeout: float | None = None) -> Any:
        """Block until the activity ends and return its decoded result.

        Woken by the backend's notification, not by polling.

        Parameters
        ----------
        activity_id : str
            An id returned by :meth:`SyncActivityBuilder.execute` (or any process's).
        timeout : float or None
            Seconds to wait; ``None`` waits forever.

        Raises
        ------
        ActivityFailed
            The activity ended ``failed`` or ``dead_letter``.
        ActivityCancelled
            The activity was cancelled.
        CorruptResultError
            It completed, but its stored result does not decode (damaged outside this library).
        TimeoutError
            ``timeout`` seconds passed first.
        BackendError
            The store is unreachable or failed (see :meth:`ActivityFuture.result`).
        """
        res = self._call(self._backend.wait_for_result(activity_id, timeout))
        if res is None:
            raise TimeoutError(f"activity {activity_id} did not finish within {timeout} s")
        return unwrap_result(res)

    def get_result(self, activity_id: str) -> ActivityResult | None:
        """The stored outcome, or ``None`` while the activity is not finished (does not wait)."""
        return self._call(self._backend.get_result(activity_id))

    def status(self, activity_id: str) -> str | None:
        """The activity's status, or ``None`` if it is unknown."""
        snap = self._call(self._backend.get_activity(activity_id))
        return None if snap is None else snap.status

    def progress(self, activity_id: str) -> Progress | None:
        """The last progress the activity's handler reported (``ctx.set_progress``): a fraction from 0 to 1
        or a dict; ``None`` if none was, or the activity is unknown."""
        snap = self._call(self._backend.get_activity(activity_id))
        return None if snap is None else decode_progress(snap.progress)

    def cancel(self, activity_id: str) -> bool:
        """Cancel an activity that has not started; ``True`` if it was."""
        return self._call(self._backend.cancel(activity_id))

    def run(self, fn: Callable[[ActivityExecutor], Coroutine[Any, Any, T]], timeout: float | None = None) -> T:
        """Run ``await fn(executor)`` in the client's loop, for anything the blocking API does not cover.

        ``fn`` receives the loop's :class:`ActivityExecutor`; do not keep it
        or its futures beyond the call.
        """
        return self._call(fn(self._executor), timeout)

    def close(self) -> None:
        """Send what is queued, close the backend and end the loop thread. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            fut = asyncio.run_coroutine_threadsafe(self._aclose(), self._loop)
            fut.result()
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()

    async def _aclose(self) -> None:
        while self._flushing:  # let the enqueues already accepted reach the backend
            task = self._flush_task
            if task is not None and not task.done():
                await asyncio.shield(task)
            else:
                await asyncio.sleep(0)
        await self._backend.close()

    def __enter__(self) -> SyncExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"SyncExecutor({self._backend.name}, queue={self.queue_name!r}, {state})"
