"""Helpers for testing code that uses runnerq-fast, in your own test suite.

* :class:`TestEngine` runs your :class:`~runnerq_fast.WorkerEngine` on a
  fresh in-process memory backend: enqueue, :meth:`TestEngine.drain` until
  nothing is left to run, assert what was enqueued.
* :class:`RecordingBackend` is that memory backend: it records every
  activity created on it as an :class:`Enqueued` (type, decoded payload,
  delay, priority, metadata, idempotency key), with :meth:`~RecordingBackend.enqueued`
  and :meth:`~RecordingBackend.assert_enqueued` to query it. Give it to an
  :class:`~runnerq_fast.ActivityExecutor` to test code that only enqueues.
* :func:`run_eagerly` calls one handler directly, with a context, and
  returns its result; :func:`make_context` builds that context
  (an :class:`~runnerq_fast.ActivityContext`) from plain values.

Example::

    import runnerq_fast as rq
    from myapp.tasks import engine

    async def test_signup_sends_a_welcome_email():
        async with rq.testing.TestEngine(engine) as t:
            await t.executor.activity("signup").payload({"email": "a@b.c"}).execute()
            await t.drain()
            t.assert_enqueued("send_email", payload={"to": "a@b.c"})
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import msgspec

from runnerq_fast.backends.memory import MemoryBackend
from runnerq_fast.codec import decode_json, encode_json, encode_metadata, encode_payload
from runnerq_fast.engine import ActivityContext, WorkerEngine
from runnerq_fast.engine.outcomes import Registered
from runnerq_fast.errors import ConfigError
from runnerq_fast.executor import ActivityExecutor, ActivityFuture
from runnerq_fast.ids import new_activity_id
from runnerq_fast.models import ClaimedActivity, EnqueueOutcome, EnqueueResult, NewActivity, Priority

__all__ = ["Enqueued", "RecordingBackend", "TestEngine", "make_context", "run_eagerly"]

_UNSET: Any = object()

DELAY_TOLERANCE = 0.25
"""Seconds by which a recorded delay may differ from the one asserted (the clock moves between the two)."""


class Enqueued(msgspec.Struct, frozen=True, kw_only=True):
    """One activity created on a :class:`RecordingBackend`.

    Attributes
    ----------
    activity_id, queue, activity_type : str
    payload : Any
        The payload, decoded from its stored JSON.
    priority : int
        1 (LOW) to 4 (CRITICAL).
    delay : float
        Seconds from the enqueue to the activity's ready time (0 for immediate work).
    run_at : float or None
        Ready time, epoch seconds (``None`` for immediate work).
    max_retries : int
    timeout : float
        Handler timeout, seconds (0 = none).
    metadata : dict of str to str
    idempotency_key : str or None
    """

    activity_id: str
    queue: str
    activity_type: str
    payload: Any
    priority: int
    delay: float
    run_at: float | None
    max_retries: int
    timeout: float
    metadata: dict[str, str]
    idempotency_key: str | None


def _matches(e: Enqueued, activity_type: str | None, payload: Any, priority: int | None, delay: float | None,
             metadata: dict[str, str] | None, queue: str | None) -> bool:
    if activity_type is not None and e.activity_type != activity_type:
        return False
    if payload is not _UNSET and e.payload != payload:
        return False
    if priority is not None and e.priority != int(priority):
        return False
    if delay is not None and abs(e.delay - delay) > DELAY_TOLERANCE:
        return False
    if metadata is not None and any(e.metadata.get(k) != v for k, v in metadata.items()):
        return False
    return queue is None or e.queue == queue


class RecordingBackend(MemoryBackend):
    """A :class:`~runnerq_fast.MemoryBackend` that records every activity created on it.

    Activities an idempotency key deduplicated (no new activity) are not
    recorded. Parameters as :class:`MemoryBackend`.
    """

    name = "memory"

    def __init__(self, url: str = "memory://") -> None:
        super().__init__(url)
        self.records: list[Enqueued] = []

    async def enqueue(
        self, queue: str, items: Sequence[NewActivity], *, connection: object | None = None
    ) -> list[EnqueueResult]:
        now = time.time()
        results = await super().enqueue(queue, items, connection=connection)
        for item, res in zip(items, results, strict=True):
            if res.outcome != EnqueueOutcome.CREATED:
                continue
            run_at = item.run_at_ms / 1000.0 if item.run_at_ms else None
            self.records.append(Enqueued(
                activity_id=res.activity_id, queue=queue, activity_type=item.activity_type,
                payload=decode_json(item.payload), priority=item.priority,
                delay=round(max(0.0, run_at - now), 3) if run_at is not None else 0.0, run_at=run_at,
                max_retries=item.max_retries, timeout=item.timeout_ms / 1000.0,
                metadata=decode_json(item.metadata) if item.metadata else {}, idempotency_key=item.idempotency_key,
            ))
        return results

    def enqueued(self, activity_type: str | None = None, *, payload: Any = _UNSET, priority: int | None = None,
                 delay: float | None = None, metadata: dict[str, str] | None = None,
                 queue: str | None = None) -> list[Enqueued]:
        """The recorded activities matching every given filter, oldest first.

        Parameters
        ----------
        activity_type : str, optional
        payload : Any, optional
            Compared with ``==`` to the decoded payload (``unittest.mock.ANY`` works inside).
        priority : int, optional
        delay : float, optional
            Seconds, within :data:`DELAY_TOLERANCE`.
        metadata : dict, optional
            Every given key must have the given value.
        queue : str, optional
        """
        return [e for e in self.records if _matches(e, activity_type, payload, priority, delay, metadata, queue)]

    def assert_enqueued(self, activity_type: str, *, payload: Any = _UNSET, priority: int | None = None,
                        delay: float | None = None, metadata: dict[str, str] | None = None,
                        queue: str | None = None, count: int | None = None) -> list[Enqueued]:
        """Assert that matching activities were enqueued (``count`` of them, or at least one); return them.

        Raises
        ------
        AssertionError
            With what was enqueued instead.
        """
        found = self.enqueued(activity_type, payload=payload, priority=priority, delay=delay, metadata=metadata,
                              queue=queue)
        if (count is None and not found) or (count is not None and len(found) != count):
            wanted = "at least one" if count is None else str(count)
            seen = "\n".join(f"  {e.activity_type} payload={e.payload!r} delay={e.delay} priority={e.priority} "
                             f"metadata={e.metadata}" for e in self.records) or "  nothing"
            raise AssertionError(f"expected {wanted} {activity_type!r} activity matching, found {len(found)}; "
                                 f"enqueued:\n{seen}")
        return found

    def assert_not_enqueued(self, activity_type: str) -> None:
        """Assert that no activity of ``activity_type`` was enqueued.

        Raises
        ------
        AssertionError
            Listing the ones that were.
        """
        found = self.enqueued(activity_type)
        if found:
            raise AssertionError(f"expected no {activity_type!r} activity, found {len(found)}: "
                                 f"{[e.payload for e in found]!r}")

    def clear(self) -> None:
        """Forget what was recorded (the stored activities stay)."""
        self.records.clear()


class TestEngine:
    """Run a :class:`WorkerEngine` on a fresh :class:`RecordingBackend` for one test.

    Entering switches ``engine`` to the new backend (whatever backend or URL
    it had; it keeps this one afterwards) and, with ``start=True``, starts it
    with short poll and flush intervals; leaving stops it.

    Parameters
    ----------
    engine : WorkerEngine
        Your engine, with its handlers (and schedules) registered; not started.
    start : bool
        Run the handlers (default). ``False`` only records what is enqueued.
    backend : RecordingBackend, optional
        Use this one instead of a fresh one.

    Raises
    ------
    ConfigError
        If the engine is already running.
    """

    __test__ = False  # not a pytest test class

    def __init__(self, engine: WorkerEngine, *, start: bool = True, backend: RecordingBackend | None = None) -> None:
        self.engine = engine
        self.backend = backend or RecordingBackend()
        self._start = start

    async def __aenter__(self) -> TestEngine:
        self.engine.use_backend(self.backend)
        if self._start:
            self.engine.configure(poll_interval=min(self.engine.config.poll_interval, 0.05))
            await self.engine.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.engine.stop()

    @property
    def executor(self) -> ActivityExecutor:
        """Enqueues on the engine's queue (of the test backend)."""
        return self.engine.executor

    async def drain(self, timeout: float = 10.0, *, include_scheduled: bool = False) -> None:
        """Wait until the engine's queue has nothing left to run and every ack is stored.

        Parameters
        ----------
        timeout : float
            Seconds to wait at most.
        include_scheduled : bool
            Also wait for delayed activities (``scheduled``) to come due and run.
            Retries waiting for their backoff are always waited for.

        Raises
        ------
        TimeoutError
            If work is still left after ``timeout`` seconds.
        ConfigError
            If the engine was not started (``start=False``).
        """
        if not self._start:
            raise ConfigError("drain() needs the engine running: TestEngine(engine, start=True)")
        queue = self.engine.queue_name
        deadline = time.monotonic() + timeout
        while True:
            s = await self.backend.stats(queue)
            left = s.pending + s.processing + s.retrying + (s.scheduled if include_scheduled else 0)
            if left == 0 and self.engine.in_flight == 0:
                return
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{left} activities still to run on queue {queue!r} after {timeout} s ({s})")
            await asyncio.sleep(0.005)

    async def result(self, activity: str | ActivityFuture, timeout: float = 10.0) -> Any:
        """The result of an activity (see :meth:`ActivityFuture.result`).

        Parameters
        ----------
        activity : str or ActivityFuture
            The activity's id, or the future ``execute()`` returned for it.
        timeout : float
            Seconds to wait at most (default 10).

        Raises
        ------
        TypeError
            If ``activity`` is neither an id nor a future.
        """
        if isinstance(activity, ActivityFuture):
            return await activity.result(timeout)
        return await self.executor.future(activity).result(timeout)

    def enqueued(self, activity_type: str | None = None, **filters: Any) -> list[Enqueued]:
        """See :meth:`RecordingBackend.enqueued`."""
        return self.backend.enqueued(activity_type, **filters)

    def assert_enqueued(self, activity_type: str, **filters: Any) -> list[Enqueued]:
        """See :meth:`RecordingBackend.assert_enqueued`."""
        return self.backend.assert_enqueued(activity_type, **filters)

    def assert_not_enqueued(self, activity_type: str) -> None:
        """See :meth:`RecordingBackend.assert_not_enqueued`."""
        self.backend.assert_not_enqueued(activity_type)


def make_context(
    *,
    activity_id: str | None = None,
    activity_type: str = "test",
    metadata: dict[str, str] | None = None,
    retry_count: int = 0,
    max_retries: int = 3,
    priority: Priority | int = Priority.NORMAL,
    enqueued_at: float | None = None,
    executor: ActivityExecutor | None = None,
    cancelled: bool = False,
) -> ActivityContext:
    """An :class:`ActivityContext` as a handler would receive it, from plain values.

    Parameters
    ----------
    activity_id : str, optional
        Default: a new id.
    activity_type : str
        Default ``"test"``.
    metadata : dict of str to str, optional
    retry_count, max_retries : int
        Retries made before this attempt (default 0) and allowed (default 3).
    priority : int
        Default NORMAL.
    enqueued_at : float, optional
        Epoch seconds; default now.
    executor : ActivityExecutor, optional
        What ``ctx.executor`` enqueues child activities with; default an
        executor on a fresh :class:`RecordingBackend` (``ctx.executor.backend``).
    cancelled : bool
        Whether ``ctx.is_cancelled`` (the engine shutting down) is already true.
    """
    claimed = ClaimedActivity(
        activity_id or new_activity_id(), activity_type, b"null", int(priority), retry_count, max_retries, 0,
        encode_metadata(metadata), "test-claim",
        round((time.time() if enqueued_at is None else enqueued_at) * 1000), 0,
    )
    cancellation = asyncio.Event()
    if cancelled:
        cancellation.set()
    return ActivityContext(claimed, executor or ActivityExecutor(RecordingBackend()), cancellation)


async def run_eagerly(
    engine: WorkerEngine,
    activity_type: str,
    payload: Any = None,
    *,
    ctx: ActivityContext | None = None,
    **context: Any,
) -> Any:
    """Call ``engine``'s handler for ``activity_type`` at once, without a queue, and return its result.

    The payload and the result go through the JSON codec as in a worker
    (so an unencodable one fails here too, and a handler that annotates its
    payload gets it decoded into that type); a plain ``def`` handler runs in
    a thread, as in a worker. Exceptions the handler raises propagate.

    Parameters
    ----------
    engine : WorkerEngine
        Where the handler is registered (need not be started).
    activity_type : str
    payload : Any
    ctx : ActivityContext, optional
        Default: ``make_context(activity_type=activity_type, executor=<recording
        executor on the engine's queue>, **context)``.
    **context
        Keyword arguments of :func:`make_context`.

    Returns
    -------
    Any
        The handler's return value as ``future.result()`` would give it.

    Raises
    ------
    ConfigError
        If no handler is registered for ``activity_type``.
    InvalidActivityError
        If the payload or the result cannot be encoded.
    msgspec.ValidationError
        If the payload does not match the handler's payload type (a worker
        dead-letters it).
    """
    fn = engine.handler(activity_type)
    if ctx is None:
        context.setdefault("executor", ActivityExecutor(RecordingBackend(), engine.queue_name, engine.config))
        ctx = make_context(activity_type=activity_type, **context)
    registered = Registered(fn, activity_type)
    decoded = registered.decode(encode_payload(payload, engine.config.max_payload_bytes))
    if registered.is_async:
        result = await fn(decoded, ctx)
    else:
        result = await asyncio.to_thread(fn, decoded, ctx)
    return None if result is None else decode_json(encode_json(result, 0, "result"))
