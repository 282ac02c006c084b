"""The enqueue buffer: concurrent single-activity requests coalesced into batched backend calls.

Like the engine's ack buffer, but for enqueues: each HTTP request hands its
validated :class:`~runnerq_fast.models.NewActivity` to the queue's
:class:`EnqueueBuffer` and awaits its :class:`~runnerq_fast.models.EnqueueResult`.
One flusher task stores everything that arrived since the last round trip in
one ``Backend.enqueue`` call, so under load the HTTP path costs one round
trip per batch, not per request, and an idle request is stored at once (no
linger by default). A request is answered only after its batch is stored.

Two items with the same (activity type, idempotency key) never share a
batch: the later one waits for the next round trip, so idempotency is
decided by the store exactly as for separate calls.

A batch the store cancels (PostgreSQL's ``statement_timeout``, a SQLite
database locked past its busy timeout; nothing of it was applied) is sent
again in halves, in order, down to one activity
(:func:`~runnerq_fast.executor.enqueue_in_pieces`); the size learnt is kept
for the next batches and grows back as they land.
"""

from __future__ import annotations

import asyncio
import logging

from runnerq_fast.errors import InvalidActivityError
from runnerq_fast.executor import PieceSize, enqueue_in_pieces
from runnerq_fast.models import EnqueueResult, NewActivity
from runnerq_fast.storage import Backend

__all__ = ["EnqueueBuffer"]

log = logging.getLogger("runnerq_fast.web")

_Pending = tuple[NewActivity, "asyncio.Future[EnqueueResult]"]


class EnqueueBuffer:
    """Batches the enqueues of one queue.

    Parameters
    ----------
    backend : Backend
        Where the activities are stored.
    queue : str
        The queue (already validated).
    max_batch : int
        Most activities one backend call stores. Default 1000.
    linger : float
        Seconds the flusher waits before each round trip to let more requests
        join; default 0 (a round trip's own duration is the batching window).
    """

    def __init__(self, backend: Backend, queue: str, *, max_batch: int = 1000, linger: float = 0.0) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        if linger < 0:
            raise ValueError("linger must be >= 0 seconds")
        self.backend = backend
        self.queue = queue
        self.max_batch = max_batch
        self.linger = linger
        self._pending: list[_Pending] = []
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._pieces = PieceSize()
        #: Round trips made and activities stored (for tests and the benchmark).
        self.flushes = 0
        self.stored = 0

    async def submit(self, item: NewActivity) -> EnqueueResult:
        """Store ``item`` with the next batch and return what the store did.

        Raises
        ------
        RuntimeError
            If the buffer is closed (the app is shutting down).
        Exception
            Whatever ``Backend.enqueue`` raised for the batch (an
            :class:`InvalidActivityError` only for this item: a batch that
            fails on bad data is retried item by item).
        """
        if self._closed:
            raise RuntimeError("the enqueue buffer is closed (the service is shutting down)")
        fut: asyncio.Future[EnqueueResult] = asyncio.get_running_loop().create_future()
        self._pending.append((item, fut))
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())
        return await fut

    def _take_batch(self) -> list[_Pending]:
        """Up to ``max_batch`` pending items, no two with the same idempotency scope."""
        pending = self._pending
        if len(pending) <= self.max_batch and not any(it.idempotency_key is not None for it, _ in pending):
            self._pending = []
            return pending
        batch: list[_Pending] = []
        rest: list[_Pending] = []
        seen: set[tuple[str, str]] = set()
        for entry in pending:
            item = entry[0]
            if len(batch) >= self.max_batch:
                rest.append(entry)
                continue
            if item.idempotency_key is not None:
                scope = (item.activity_type, item.idempotency_key)
                if scope in seen:
                    rest.append(entry)
                    continue
                seen.add(scope)
            batch.append(entry)
        self._pending = rest
        return batch

    async def _run(self) -> None:
        try:
            while self._pending:
                if self.linger:
                    await asyncio.sleep(self.linger)
                batch = self._take_batch()
                await self._flush(batch)
        except asyncio.CancelledError:
            pending, self._pending = self._pending, []
            _fail(pending, RuntimeError("the service stopped before the activity was stored"))
            raise
        finally:
            self._task = None

    async def _flush(self, batch: list[_Pending]) -> None:
        items = [item for item, _ in batch]
        results: list[EnqueueResult] = []
        try:
            await enqueue_in_pieces(self.backend, self.queue, items, results, self._pieces)
        except (InvalidActivityError, ValueError, TypeError) as exc:
            self._stored(batch, results)
            rest = batch[len(results):]
            if len(rest) == 1:
                _fail(rest, exc)
                return
            # One request's data failed the whole call: store the others one by one.
            log.info("an enqueue batch of %d failed on its data (%s); storing item by item", len(rest), exc)
            for entry in rest:
                await self._flush([entry])
            return
        except asyncio.CancelledError:
            self._stored(batch, results)
            _fail(batch, RuntimeError("the service stopped before the activity was stored"))
            raise
        except Exception as exc:
            self._stored(batch, results)  # the leading pieces of a batch the store cancelled landed
            _fail(batch, exc)
            return
        self._stored(batch, results)

    def _stored(self, batch: list[_Pending], results: list[EnqueueResult]) -> None:
        """Answer the leading requests of ``batch`` with ``results`` (one each, in order, all stored)."""
        if not results:
            return
        self.flushes += 1
        self.stored += len(results)
        for (_, fut), res in zip(batch, results, strict=False):
            if not fut.done():
                fut.set_result(res)

    async def close(self) -> None:
        """Refuse new items and wait until everything submitted is stored (or failed)."""
        self._closed = True
        task = self._task
        if task is not None:
            await asyncio.shield(task)


def _fail(batch: list[_Pending], exc: BaseException) -> None:
    for _, fut in batch:
        if not fut.done():
            fut.set_exception(exc)
