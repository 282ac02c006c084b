"""In-process backend: the reference semantics, for tests and embedding.

Everything lives in dicts and heaps of the running event loop, so every
operation is atomic (no ``await`` inside one). Nothing survives the process.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Sequence

from runnerq_fast.models import (
    READY_STATUSES,
    TERMINAL_STATUSES,
    Ack,
    AckOutcome,
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
from runnerq_fast.storage import Backend

__all__ = ["MemoryBackend"]

_REUSABLE = frozenset({"failed", "dead_letter", "cancelled"})


def _now_ms() -> int:
    return int(time.time() * 1000)


class _Row:
    __slots__ = (
        "activity_type",
        "claim_token",
        "created_at_ms",
        "dead_lettered_at_ms",
        "finished_at_ms",
        "heap_seq",
        "id",
        "idempotency_key",
        "last_error",
        "lease_expires_at_ms",
        "max_retries",
        "metadata",
        "payload",
        "priority",
        "queue",
        "ready_at_ms",
        "retry_count",
        "started_at_ms",
        "status",
        "timeout_ms",
    )

    def __init__(self, queue: str, item: NewActivity, now: int) -> None:
        self.id = item.id
        self.queue = queue
        self.activity_type = item.activity_type
        self.payload = item.payload
        self.priority = item.priority
        self.max_retries = item.max_retries
        self.timeout_ms = item.timeout_ms
        self.metadata = item.metadata
        self.idempotency_key = item.idempotency_key
        self.retry_count = 0
        self.created_at_ms = now
        self.ready_at_ms = item.run_at_ms if item.run_at_ms > now else now
        self.status = "scheduled" if item.run_at_ms > now else "pending"
        self.claim_token: str | None = None
        self.lease_expires_at_ms: int | None = None
        self.started_at_ms: int | None = None
        self.finished_at_ms: int | None = None
        self.dead_lettered_at_ms: int | None = None
        self.last_error: str | None = None
        self.heap_seq = 0

    def snapshot(self) -> ActivitySnapshot:
        return ActivitySnapshot(
            id=self.id,
            queue=self.queue,
            activity_type=self.activity_type,
            status=self.status,
            priority=self.priority,
            payload=self.payload,
            metadata=self.metadata,
            retry_count=self.retry_count,
            max_retries=self.max_retries,
            timeout_ms=self.timeout_ms,
            created_at_ms=self.created_at_ms,
            ready_at_ms=self.ready_at_ms,
            started_at_ms=self.started_at_ms,
            finished_at_ms=self.finished_at_ms,
            lease_expires_at_ms=self.lease_expires_at_ms if self.status == "processing" else None,
            last_error=self.last_error,
            idempotency_key=self.idempotency_key,
        )


class _Queue:
    __slots__ = ("by_type", "events", "processing", "rows", "scheduled", "wake")

    def __init__(self) -> None:
        # ready heaps, one per activity type: (-priority, -retry_count, ready_at_ms, seq, id)
        self.by_type: dict[str, list[tuple[int, int, int, int, str]]] = {}
        # not-yet-due activities: (ready_at_ms, seq, id)
        self.scheduled: list[tuple[int, int, str]] = []
        self.processing: dict[str, _Row] = {}
        self.rows: dict[str, _Row] = {}
        self.events: deque[ActivityEvent] = deque(maxlen=10_000)
        self.wake = asyncio.Event()


class MemoryBackend(Backend):
    """Backend holding everything in this process's memory.

    Parameters
    ----------
    url : str
        ``memory://`` (anything after the scheme is ignored).
    """

    name = "memory"

    def __init__(self, url: str = "memory://") -> None:
        self.url = url
        self._queues: dict[str, _Queue] = {}
        self._rows: dict[str, _Row] = {}
        self._events: dict[str, list[ActivityEvent]] = {}
        self._results: dict[str, ActivityResult] = {}
        self._waiters: dict[str, list[asyncio.Future[ActivityResult]]] = {}
        self._idem: dict[tuple[str, str, str], tuple[str, int]] = {}
        self._subscribers: dict[str, set[asyncio.Queue[ActivityEvent]]] = {}
        self._seq = itertools.count(1)
        self._event_ids = itertools.count(1)
        self._closed = False

    async def close(self) -> None:
        self._closed = True
        for q in self._queues.values():
            q.wake.set()

    # ---------------------------------------------------------------- helpers
    def _queue(self, name: str) -> _Queue:
        q = self._queues.get(name)
        if q is None:
            q = self._queues[name] = _Queue()
        return q

    def _event(self, row: _Row, event_type: str, now: int, detail: str | None = None) -> None:
        ev = ActivityEvent(next(self._event_ids), row.id, row.queue, event_type, now, detail)
        lst = self._events.get(row.id)
        if lst is None:
            self._events[row.id] = [ev]
        else:
            lst.append(ev)
        q = self._queues[row.queue]
        q.events.append(ev)
        subs = self._subscribers.get(row.queue)
        if subs:
            for s in subs:
                s.put_nowait(ev)

    def _push_ready(self, q: _Queue, row: _Row) -> None:
        seq = next(self._seq)
        row.heap_seq = seq
        heap = q.by_type.get(row.activity_type)
        if heap is None:
            heap = q.by_type[row.activity_type] = []
        heapq.heappush(heap, (-row.priority, -row.retry_count, row.ready_at_ms, seq, row.id))

    def _push_scheduled(self, q: _Queue, row: _Row) -> None:
        seq = next(self._seq)
        row.heap_seq = seq
        heapq.heappush(q.scheduled, (row.ready_at_ms, seq, row.id))

    def _make_ready(self, q: _Queue, row: _Row, now: int) -> None:
        if row.ready_at_ms > now:
            self._push_scheduled(q, row)
        else:
            self._push_ready(q, row)
            q.wake.set()

    def _finish(self, row: _Row, status: str, now: int, data: bytes | None, error: str | None) -> None:
        row.status = status
        row.finished_at_ms = now
        row.claim_token = None
        row.lease_expires_at_ms = None
        if error is not None:
            row.last_error = error
        self._queues[row.queue].processing.pop(row.id, None)
        res = ActivityResult(row.id, status, data, error)
        self._results[row.id] = res
        waiters = self._waiters.pop(row.id, None)
        if waiters:
            for w in waiters:
                if not w.done():
                    w.set_result(res)

    # ---------------------------------------------------------------- queueing
    async def enqueue(self, queue: str, items: Sequence[NewActivity]) -> list[EnqueueResult]:
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
            row = _Row(queue, item, now)
            self._rows[row.id] = row
            q.rows[row.id] = row
            self._event(row, "enqueued", now)
            if row.status == "scheduled":
                self._event(row, "scheduled", now)
            self._make_ready(q, row, now)
            out.append(EnqueueResult(row.id, EnqueueOutcome.CREATED))
        return out

    def _promote_due(self, q: _Queue, now: int) -> None:
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
        rows = self._rows
        out: list[ClaimedActivity] = []
        while heaps and len(out) < limit:
            best = heaps[0] if len(heaps) == 1 else min(heaps, key=lambda h: h[0])
            entry = heapq.heappop(best)
            if not best:
                heaps.remove(best)
            row = rows.get(entry[4])
            if row is None or row.heap_seq != entry[3] or row.status not in READY_STATUSES:
                continue
            row.status = "processing"
            row.claim_token = token
            row.lease_expires_at_ms = lease_until
            row.started_at_ms = now
            q.processing[row.id] = row
            self._event(row, "claimed", now, worker_id)
            out.append(
                ClaimedActivity(
                    row.id,
                    row.activity_type,
                    row.payload,
                    row.priority,
                    row.retry_count,
                    row.max_retries,
                    row.timeout_ms,
                    row.metadata,
                    token,
                    row.created_at_ms,
                    row.ready_at_ms,
                )
            )
        return out

    def _held(self, ref_id: str, token: str) -> _Row | None:
        row = self._rows.get(ref_id)
        if row is None or row.status != "processing" or row.claim_token != token:
            return None
        return row

    async def ack(self, queue: str, acks: Sequence[Ack]) -> list[str]:
        now = _now_ms()
        q = self._queue(queue)
        rejected: list[str] = []
        for a in acks:
            row = self._held(a.id, a.claim_token)
            if row is None:
                rejected.append(a.id)
                continue
            outcome = a.outcome
            if outcome == AckOutcome.COMPLETED:
                self._event(row, "completed", now)
                self._finish(row, "completed", now, a.result, None)
            elif outcome == AckOutcome.RETRY:
                row.retry_count += 1
                row.status = "retrying"
                row.ready_at_ms = max(a.retry_at_ms, now)
                row.claim_token = None
                row.lease_expires_at_ms = None
                row.last_error = a.error
                q.processing.pop(row.id, None)
                self._event(row, "retrying", now, a.error)
                self._make_ready(q, row, now)
            elif outcome == AckOutcome.FAILED:
                self._event(row, "failed", now, a.error)
                self._finish(row, "failed", now, None, a.error)
            else:
                row.dead_lettered_at_ms = now
                self._event(row, "dead_letter", now, a.error)
                self._finish(row, "dead_letter", now, None, a.error)
        return rejected

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
            lst = self._waiters.get(activity_id)
            if lst is not None and fut in lst:
                lst.remove(fut)
                if not lst:
                    del self._waiters[activity_id]

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
