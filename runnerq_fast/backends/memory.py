"""In-process backend: the reference semantics, for tests and embedding.

Everything lives in dicts and heaps of the running event loop, so every
operation is atomic (no ``await`` inside one). Nothing survives the process.
Rows, queue state, events and the claim and ack loops are in
:mod:`runnerq_fast.backends._memstore_py` (compiled twin: ``_memstore``).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import time
import uuid
from collections.abc import AsyncIterator, Sequence

from runnerq_fast import speedups
from runnerq_fast.backends._waiters import discard_waiter
from runnerq_fast.models import (
    READY_STATUSES,
    TERMINAL_STATUSES,
    Ack,
    ActivityEvent,
    ActivityResult,
    ActivitySnapshot,
    ClaimedActivity,
    DeadLetterRecord,
    EnqueueOutcome,
    EnqueueResult,
    LeaseRef,
    NewActivity,
    OnDuplicate,
    QueueStats,
    ReapReport,
)
from runnerq_fast.storage import Backend, refuse_connection

if speedups.enabled:  # the module, not its names: import-linter sees the package, not a compiled module
    from runnerq_fast.backends import _memstore

    QueueState = _memstore.QueueState
    Row = _memstore.Row
    StoreCore = _memstore.StoreCore
else:
    from runnerq_fast.backends._memstore_py import QueueState, Row, StoreCore

__all__ = ["MemoryBackend"]

_REUSABLE = frozenset({"failed", "dead_letter", "cancelled"})


def _now_ms() -> int:
    return int(time.time() * 1000)


class MemoryBackend(StoreCore, Backend):
    """Backend holding everything in this process's memory.

    Parameters
    ----------
    url : str
        ``memory://`` (anything after the scheme is ignored).
    """

    name = "memory"

    def __init__(self, url: str = "memory://") -> None:
        StoreCore.__init__(self)
        self.url = url
        self._idem: dict[tuple[str, str, str], tuple[str, int]] = {}
        self._closed = False

    async def close(self) -> None:
        self._closed = True
        for q in self._queues.values():
            q.wake.set()

    # ---------------------------------------------------------------- queueing
    async def enqueue(
        self, queue: str, items: Sequence[NewActivity], *, connection: object | None = None
    ) -> list[EnqueueResult]:
        refuse_connection(self, connection)
        now = _now_ms()
        q = self._queue(queue)
        out: list[EnqueueResult] = []
        for item in items:
            if item.idempotency_key is not None:
                ikey = (queue, item.activity_type, item.idempotency_key)
                held = self._idem.get(ikey)
                if held is not None and held[1] > now and held[0] in self._rows:
                    holder = self._rows[held[0]]
                    beh = item.on_duplicate
                    if beh == OnDuplicate.RETURN_EXISTING:
                        out.append(EnqueueResult(holder.id, EnqueueOutcome.EXISTING))
                        continue
                    if beh == OnDuplicate.NO_REUSE:
                        out.append(EnqueueResult(holder.id, EnqueueOutcome.REJECTED))
                        continue
                    if beh == OnDuplicate.ALLOW_REUSE_ON_FAILURE and holder.status not in _REUSABLE:
                        out.append(EnqueueResult(holder.id, EnqueueOutcome.EXISTING))
                        continue
                self._idem[ikey] = (item.id, now + item.idempotency_ttl_ms)
            row = Row(queue, item, now)
            self._rows[row.id] = row
            q.rows[row.id] = row
            self._event(row, "enqueued", now)
            if row.status == "scheduled":
                self._event(row, "scheduled", now)
            self._make_ready(q, row, now)
            out.append(EnqueueResult(row.id, EnqueueOutcome.CREATED))
        return out

    def _promote_due(self, q: QueueState, now: int) -> None:
        sched = q.scheduled
        while sched and sched[0][0] <= now:
            _, seq, aid = heapq.heappop(sched)
            row = self._rows.get(aid)
            if row is not None and row.heap_seq == seq and row.status in READY_STATUSES:
                self._push_ready(q, row)

    async def claim(
        self,
        queue: str,
        worker_id: str,
        limit: int,
        activity_types: Sequence[str] | None,
        lease_ms: int,
    ) -> list[ClaimedActivity]:
        now = _now_ms()
        q = self._queue(queue)
        q.wake.clear()
        self._promote_due(q, now)
        if activity_types is None:
            heaps = [h for h in q.by_type.values() if h]
        else:
            heaps = [h for t in activity_types if (h := q.by_type.get(t))]
        token = uuid.uuid4().hex
        lease_until = now + lease_ms
        return self._claim_from(q, heaps, limit, token, lease_until, now, worker_id)

    async def ack(self, queue: str, acks: Sequence[Ack]) -> list[str]:
        now = _now_ms()
        q = self._queue(queue)
        return self._ack_batch(q, acks, now)

    async def extend_leases(self, queue: str, leases: Sequence[LeaseRef], lease_ms: int) -> list[str]:
        now = _now_ms()
        lost: list[str] = []
        for ref in leases:
            row = self._held(ref.id, ref.claim_token)
            if row is None:
                lost.append(ref.id)
            else:
                row.lease_expires_at_ms = now + lease_ms
                self._event(row, "lease_extended", now, str(row.lease_expires_at_ms))
        return lost

    async def release(self, queue: str, leases: Sequence[LeaseRef]) -> list[str]:
        now = _now_ms()
        q = self._queue(queue)
        done: list[str] = []
        for ref in leases:
            row = self._held(ref.id, ref.claim_token)
            if row is None:
                continue
            row.status = "pending"
            row.claim_token = None
            row.lease_expires_at_ms = None
            q.processing.pop(row.id, None)
            self._event(row, "requeued", now, "released at shutdown")
            self._make_ready(q, row, now)
            done.append(row.id)
        return done

    async def requeue_expired(self, queue: str, limit: int) -> ReapReport:
        now = _now_ms()
        q = self._queue(queue)
        expired = [r for r in q.processing.values() if (r.lease_expires_at_ms or 0) <= now][:limit]
        requeued: list[str] = []
        dead: list[str] = []
        for row in expired:
            row.retry_count += 1
            if row.retry_count > row.max_retries:
                err = "lease expired; retries exhausted"
                row.dead_lettered_at_ms = now
                self._event(row, "dead_letter", now, err)
                self._finish(row, "dead_letter", now, None, err)
                dead.append(row.id)
            else:
                row.status = "pending"
                row.claim_token = None
                row.lease_expires_at_ms = None
                row.last_error = "lease expired"
                q.processing.pop(row.id, None)
                self._event(row, "requeued", now, "lease expired")
                self._make_ready(q, row, now)
                requeued.append(row.id)
        return ReapReport(requeued, dead)

    async def wait_for_work(self, queue: str, timeout: float) -> None:
        q = self._queue(queue)
        if q.wake.is_set() or self._closed:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(q.wake.wait(), timeout)

    # --------------------------------------------------------------- results
    async def get_result(self, activity_id: str) -> ActivityResult | None:
        return self._results.get(activity_id)

    async def wait_for_result(self, activity_id: str, timeout: float | None) -> ActivityResult | None:
        res = self._results.get(activity_id)
        if res is not None:
            return res
        fut: asyncio.Future[ActivityResult] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(activity_id, []).append(fut)
        try:
            return await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            return None
        finally:
            discard_waiter(self._waiters, activity_id, fut)

    async def cancel(self, activity_id: str) -> bool:
        row = self._rows.get(activity_id)
        if row is None or row.status not in READY_STATUSES:
            return False
        now = _now_ms()
        self._event(row, "cancelled", now)
        self._finish(row, "cancelled", now, None, None)
        return True

    # ------------------------------------------------------------ inspection
    async def stats(self, queue: str) -> QueueStats:
        counts: dict[str, int] = {}
        for row in self._queue(queue).rows.values():
            counts[row.status] = counts.get(row.status, 0) + 1
        return QueueStats(**counts)

    async def list_activities(
        self, queue: str, status: str | None, offset: int = 0, limit: int = 50
    ) -> list[ActivitySnapshot]:
        rows = [r for r in self._queue(queue).rows.values() if status is None or r.status == status]
        rows.reverse()
        return [r.snapshot() for r in rows[offset : offset + limit]]

    async def get_activity(self, activity_id: str) -> ActivitySnapshot | None:
        row = self._rows.get(activity_id)
        return None if row is None else row.snapshot()

    async def get_events(self, activity_id: str) -> list[ActivityEvent]:
        return list(self._events.get(activity_id, ()))

    async def list_dead_letter(self, queue: str, offset: int = 0, limit: int = 50) -> list[DeadLetterRecord]:
        rows = [r for r in self._queue(queue).rows.values() if r.status == "dead_letter"]
        rows.sort(key=lambda r: r.dead_lettered_at_ms or 0, reverse=True)
        return [
            DeadLetterRecord(r.snapshot(), r.last_error, r.dead_lettered_at_ms or 0)
            for r in rows[offset : offset + limit]
        ]

    async def event_stream(self, queue: str, after_id: int | None = None) -> AsyncIterator[ActivityEvent]:
        inbox: asyncio.Queue[ActivityEvent] = asyncio.Queue()
        self._subscribers.setdefault(queue, set()).add(inbox)
        try:
            last = after_id or 0
            if after_id is not None:
                for ev in list(self._queue(queue).events):
                    if ev.id > after_id:
                        last = ev.id
                        yield ev
            while True:
                ev = await inbox.get()
                if ev.id > last:
                    last = ev.id
                    yield ev
        finally:
            self._subscribers[queue].discard(inbox)

    # -------------------------------------------------------------- for tests
    def terminal_count(self, queue: str) -> int:
        """Activities of ``queue`` in a terminal status (a test helper)."""
        return sum(1 for r in self._queue(queue).rows.values() if r.status in TERMINAL_STATUSES)
