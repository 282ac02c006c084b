"""In-process backend: the reference semantics, for tests and embedding.

Everything lives in dicts and heaps of the running event loop, so every
operation is atomic (no ``await`` inside one). Nothing survives the process.
Rows, queue state, events and the claim and ack loops are in
:mod:`runnerq_fast.backends._memstore_py` (compiled twin: ``_memstore``).
"""

from __future__ import annotations

import asyncio
import bisect
import heapq
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence

import msgspec

from runnerq_fast import filters, speedups
from runnerq_fast.backends import keyset
from runnerq_fast.backends._waiters import discard_waiter
from runnerq_fast.codec import decode_json
from runnerq_fast.models import (
    LEASE_EXPIRED_UNCHARGED,
    READY_STATUSES,
    TERMINAL_STATUSES,
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
    EnqueueOutcome,
    EnqueueResult,
    LeaseRef,
    LeaseReport,
    NewActivity,
    OnDuplicate,
    ProgressUpdate,
    QueueStats,
    QueueSummary,
    ReadyWork,
    ReapReport,
    TypeDefaults,
    WorkerInfo,
)
from runnerq_fast.storage import (
    Backend,
    check_hold,
    check_prune,
    check_prune_events,
    check_worker_ttl,
    refuse_connection,
)

if speedups.enabled:  # the module, not its names: import-linter sees the package, not a compiled module
    from runnerq_fast.backends import _memstore

    QueueState = _memstore.QueueState
    ReadyQueue = _memstore.ReadyQueue
    Row = _memstore.Row
    StoreCore = _memstore.StoreCore
else:
    from runnerq_fast.backends._memstore_py import QueueState, ReadyQueue, Row, StoreCore

__all__ = ["MemoryBackend"]

_REUSABLE = frozenset({"failed", "dead_letter", "cancelled"})


def _now_ms() -> int:
    return int(time.time() * 1000)


def _key(row: Row) -> tuple[int, str]:
    return (row.created_at_ms, row.id)


def msgspec_replace(flt: ActivityFilter, **changes: object) -> ActivityFilter:
    """``flt`` with some fields changed."""
    return msgspec.structs.replace(flt, **changes)


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
        self._holds: dict[tuple[str, str], tuple[str, int]] = {}  # (queue, purpose) -> (holder, expiry ms)
        # worker registry: (queue, worker_id) -> (entry, expiry epoch ms)
        self._workers: dict[tuple[str, str], tuple[WorkerInfo, int]] = {}
        # the last progress of each activity that reported some (JSON text), kept beside the rows (which the
        # claim and ack loops of the store core build and read): only get_activity reads it
        self._progress: dict[str, str] = {}
        # per-type enqueue defaults: queue -> activity type -> its entry
        self._type_defaults: dict[str, dict[str, TypeDefaults]] = {}
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
        rows, qrows, by_status, type_rows = self._rows, q.rows, q.by_status, q.type_rows
        batch: list[str] = []
        typed: dict[str, Row] | None = None
        typed_name: str | None = None
        for item in items:
            if item.idempotency_key is not None:
                ikey = (queue, item.activity_type, item.idempotency_key)
                held = self._idem.get(ikey)
                if held is not None and held[1] > now and held[0] in rows:
                    holder = rows[held[0]]
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
            rid = row.id
            rows[rid] = row
            qrows[rid] = row
            by_status[row.status][rid] = row
            batch.append(rid)
            if item.activity_type != typed_name:
                typed_name = item.activity_type
                typed = type_rows.get(typed_name)
                if typed is None:
                    typed = type_rows[typed_name] = {}
            assert typed is not None
            typed[rid] = row
            if item.parent_id is not None:
                kids = q.children.get(item.parent_id)
                if kids is None:
                    kids = q.children[item.parent_id] = {}
                kids[rid] = row
            self._event(row, "enqueued", now)
            if row.status == "scheduled":
                self._event(row, "scheduled", now)
            self._make_ready(q, row, now)
            out.append(EnqueueResult(rid, EnqueueOutcome.CREATED))
        if batch:
            q.order_tail.append((now, batch))  # merged into q.order by the next listing (_order)
        return out

    @staticmethod
    def _order(q: QueueState) -> list[tuple[int, str]]:
        """``q.order`` with the enqueue batches since the last listing merged in, sorted."""
        order = q.order
        if q.order_tail:
            size = len(order)
            for now, ids in q.order_tail:
                order.extend([(now, i) for i in ids])
            q.order_tail.clear()
            tail = order[size:]
            if tail != sorted(tail) or (size and order[size - 1] > tail[0]):
                order.sort()  # ids out of order, or the clock stepped back
        return order

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
        q.wake.clear(activity_types)
        self._promote_due(q, now)
        if activity_types is None:
            heaps = [h for h in q.by_type.values() if h]
        else:
            heaps = [h for t in activity_types if (h := q.by_type.get(t))]
        token = uuid.uuid4().hex
        lease_until = now + lease_ms
        return self._claim_from(q, heaps, limit, token, lease_until, now, worker_id)

    async def claim_suspect(
        self, queue: str, worker_id: str, activity_types: Sequence[str] | None, lease_ms: int
    ) -> list[ClaimedActivity]:
        now = _now_ms()
        q = self._queue(queue)
        self._promote_due(q, now)
        heaps = self._suspect_heaps(q, activity_types)
        return self._claim_from(q, heaps, 1, uuid.uuid4().hex, now + lease_ms, now, worker_id)

    async def suspects_ready(self, queue: str, activity_types: Sequence[str] | None) -> int:
        return sum(len(h) for h in self._suspect_heaps(self._queue(queue), activity_types))

    @staticmethod
    def _suspect_heaps(q: QueueState, activity_types: Sequence[str] | None) -> list[ReadyQueue]:
        if activity_types is None:
            return [h for h in q.suspects.values() if h]
        return [h for t in activity_types if (h := q.suspects.get(t))]

    async def ack(self, queue: str, acks: Sequence[Ack]) -> list[str]:
        now = _now_ms()
        q = self._queue(queue)
        return self._ack_batch(q, acks, now)

    async def extend_leases(self, queue: str, leases: Sequence[LeaseRef], lease_ms: int) -> LeaseReport:
        now = _now_ms()
        lost: list[str] = []
        stop: list[str] = []
        for ref in leases:
            row = self._held(ref.id, ref.claim_token)
            if row is None:
                lost.append(ref.id)
            else:
                row.lease_expires_at_ms = now + lease_ms
                self._event(row, "lease_extended", now, str(row.lease_expires_at_ms))
                if row.cancel_requested:
                    stop.append(row.id)
        return LeaseReport(lost, stop)

    async def set_progress(self, queue: str, updates: Sequence[ProgressUpdate]) -> list[str]:
        now = _now_ms()
        lost: list[str] = []
        for u in updates:
            row = self._held(u.id, u.claim_token)
            if row is None:
                lost.append(u.id)
            else:
                self._progress[row.id] = u.progress
                self._event(row, "progress", now, u.progress)
        return lost

    async def release(self, queue: str, leases: Sequence[LeaseRef]) -> list[str]:
        now = _now_ms()
        q = self._queue(queue)
        done: list[str] = []
        for ref in leases:
            row = self._held(ref.id, ref.claim_token)
            if row is None:
                continue
            if row.cancel_requested:
                self._event(row, "cancelled", now, "released at shutdown")
                self._finish(row, "cancelled", now, None, None)
            else:
                row.claim_token = None
                row.lease_expires_at_ms = None
                self._move(q, row, "pending")
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
        cancelled: list[str] = []
        for row in expired:
            if row.cancel_requested:
                self._event(row, "cancelled", now, "lease expired")
                self._finish(row, "cancelled", now, None, None)
                cancelled.append(row.id)
                continue
            charged = row.suspect  # claimed alone: its own expiry; else it may have shared a dying worker
            row.suspect = True
            if row.retry_count + charged > row.max_retries:  # retries taken stay at max_retries, as a handler's
                # last failure leaves them
                err = "lease expired; retries exhausted"
                row.dead_lettered_at_ms = now
                self._event(row, "dead_letter", now, err)
                self._finish(row, "dead_letter", now, None, err)
                dead.append(row.id)
            else:
                row.retry_count += charged
                row.claim_token = None
                row.lease_expires_at_ms = None
                row.last_error = "lease expired" if charged else LEASE_EXPIRED_UNCHARGED
                self._move(q, row, "pending")
                self._event(row, "requeued", now, row.last_error)
                self._make_ready(q, row, now)
                requeued.append(row.id)
        return ReapReport(requeued, dead, cancelled)

    async def wait_for_work(
        self, queue: str, timeout: float, activity_types: Sequence[str] | None = None
    ) -> None:
        """Wait for work made ready since the last claim, at most until the earliest scheduled activity is due.

        The due time is the head of the queue's scheduled heap, of any type (a
        claim promotes every due activity, so the head is never overdue for
        long); an earlier one arriving wakes the wait to time it again.
        """
        q = self._queue(queue)
        if self._closed or q.wake.is_set(activity_types):
            return
        sched = q.scheduled
        if sched:
            # +1 ms: the store's clock has millisecond steps
            due = (sched[0][0] + 1) / 1000.0 - time.time()
            if due <= 0:
                return
            timeout = min(timeout, due)
        await q.wake.wait(activity_types, timeout)

    # --------------------------------------------------------------- results
    async def get_result(self, activity_id: str) -> ActivityResult | None:
        row = self._rows.get(activity_id)
        return None if row is None else row.result

    async def wait_for_result(self, activity_id: str, timeout: float | None) -> ActivityResult | None:
        row = self._rows.get(activity_id)
        if row is not None and row.result is not None:
            return row.result
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
        q = self._queues.get(queue)
        if q is None:
            return QueueStats()
        return QueueStats(**{s: len(rows) for s, rows in q.by_status.items()})

    async def list_activities(
        self, queue: str, status: str | None, offset: int = 0, limit: int = 50
    ) -> list[ActivitySnapshot]:
        q = self._queues.get(queue)
        if q is None or limit <= 0:
            return []
        keys = self._order(q)
        if status is None:
            end = max(len(keys) - offset, 0)
            picked = [q.rows[i] for _, i in reversed(keys[max(end - limit, 0) : end])]
        else:
            picked = sorted(q.by_status.get(status, {}).values(), key=_key, reverse=True)[offset : offset + limit]
        return [r.snapshot() for r in picked]

    async def get_activity(self, activity_id: str) -> ActivitySnapshot | None:
        row = self._rows.get(activity_id)
        if row is None:
            return None
        snap = row.snapshot()
        progress = self._progress.get(activity_id)
        if row.traceback is None and progress is None:
            return snap
        return msgspec.structs.replace(snap, traceback=row.traceback, progress=progress)

    async def get_events(self, activity_id: str) -> list[ActivityEvent]:
        row = self._rows.get(activity_id)
        return [] if row is None else list(row.events)

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

    # ------------------------------------------------------ worker registry
    async def register_worker(self, info: WorkerInfo, ttl_ms: int) -> None:
        now = _now_ms()
        self._workers[(info.queue, info.worker_id)] = (info, now + check_worker_ttl(ttl_ms))
        for key, (_, expires) in list(self._workers.items()):
            if expires <= now:
                del self._workers[key]

    async def deregister_worker(self, queue: str, worker_id: str) -> None:
        self._workers.pop((queue, worker_id), None)

    async def list_workers(self, queue: str | None = None) -> list[WorkerInfo]:
        now = _now_ms()
        return [
            info
            for key, (info, expires) in sorted(self._workers.items())
            if expires > now and (queue is None or key[0] == queue)
        ]

    async def set_type_defaults(self, queue: str, defaults: Sequence[TypeDefaults]) -> None:
        known = self._type_defaults.setdefault(queue, {})
        for d in defaults:
            known[d.activity_type] = d

    async def get_type_defaults(self, queue: str) -> dict[str, TypeDefaults]:
        return dict(self._type_defaults.get(queue, {}))

    async def ready_work(self, queue: str) -> ReadyWork:
        q = self._queues.get(queue)
        if q is None:
            return ReadyWork({}, None)
        now = _now_ms()
        by_type: dict[str, int] = {}
        oldest: int | None = None
        for status in READY_STATUSES:
            for r in q.by_status[status].values():
                if r.ready_at_ms <= now:
                    by_type[r.activity_type] = by_type.get(r.activity_type, 0) + 1
                    if oldest is None or r.ready_at_ms < oldest:
                        oldest = r.ready_at_ms
        return ReadyWork(by_type, oldest)

    # ------------------------------------------------- listings with filters
    async def list_queues(self) -> list[QueueSummary]:
        now = _now_ms()
        out: list[QueueSummary] = []
        for name in sorted(self._queues):
            q = self._queues[name]
            if not q.rows:
                continue
            by_type: dict[str, dict[str, int]] = {}
            for typ, rows in q.type_rows.items():
                counts: dict[str, int] = {}
                for r in rows.values():
                    counts[r.status] = counts.get(r.status, 0) + 1
                if counts:
                    by_type[typ] = counts
            due = [r.ready_at_ms for s in READY_STATUSES for r in q.by_status[s].values() if r.ready_at_ms <= now]
            out.append(QueueSummary(name, await self.stats(name), by_type, min(due) if due else None))
        return out

    def _source(self, q: QueueState, flt: ActivityFilter, limit: int = 50) -> list[Row] | None:
        """The rows an index serves for ``flt`` (smallest choice), or ``None`` for "walk the queue in order"."""
        if flt.ids is not None:
            return [r for i in flt.ids if (r := q.rows.get(i)) is not None]
        if flt.parent_id is not None:
            return list(q.children.get(flt.parent_id, {}).values())
        best: list[dict[str, Row]] | None = None
        size = len(q.rows)
        if flt.statuses is not None:
            best = [q.by_status[s] for s in flt.statuses]
            size = sum(len(d) for d in best)
        if flt.activity_types is not None:
            typed = [d for t in flt.activity_types if (d := q.type_rows.get(t)) is not None]
            n = sum(len(d) for d in typed)
            if n <= size:
                best, size = typed, n
        if best is None:
            return None
        # Sorting the candidates costs about their number; walking the queue's order
        # costs about (rows / candidates) per item found, for `limit` items. Take the cheaper.
        if size * size <= 4 * limit * len(q.rows):
            return [r for d in best for r in d.values()]
        return None

    def _scan(
        self, q: QueueState, flt: ActivityFilter, cursor: filters.Cursor | None, newest_first: bool, limit: int = 50
    ) -> Iterator[Row]:
        """Rows of ``q`` in (created, id) order after ``cursor``, pre-selected by an index where one helps."""
        lo_ms, hi_ms = flt.created_after_ms, flt.created_before_ms
        at = None if cursor is None else (cursor.created, cursor.id)
        source = self._source(q, flt, limit)
        if source is not None:
            # few candidates: keep those every index-served condition accepts, then sort them
            match = self._indexed_match
            picked = [
                (r.created_at_ms, r.id, r)
                for r in source
                if match(r, flt)
                and (lo_ms is None or r.created_at_ms >= lo_ms)
                and (hi_ms is None or r.created_at_ms < hi_ms)
                and (at is None or ((r.created_at_ms, r.id) < at if newest_first else (r.created_at_ms, r.id) > at))
            ]
            picked.sort(reverse=newest_first)  # ids are unique: rows are never compared
            for entry in picked:
                yield entry[2]
            return
        keys = self._order(q)
        rows = q.rows
        lo, hi = 0, len(keys)
        if lo_ms is not None:
            lo = bisect.bisect_left(keys, (lo_ms, ""))
        if hi_ms is not None:
            hi = bisect.bisect_left(keys, (hi_ms, ""))
        if at is not None:
            if newest_first:
                hi = min(hi, bisect.bisect_left(keys, at))
            else:
                lo = max(lo, bisect.bisect_right(keys, at))
        span = range(hi - 1, lo - 1, -1) if newest_first else range(lo, hi)
        for i in span:
            row = rows.get(keys[i][1])
            if row is not None:
                yield row

    @staticmethod
    def _indexed_match(row: Row, flt: ActivityFilter) -> bool:
        return (
            (flt.statuses is None or row.status in flt.statuses)
            and (flt.activity_types is None or row.activity_type in flt.activity_types)
            and (flt.parent_id is None or row.parent_id == flt.parent_id)
            and (flt.ids is None or row.id in flt.ids)
        )

    @staticmethod
    def _row_match(row: Row, flt: ActivityFilter) -> bool:
        if flt.priorities is not None and row.priority not in flt.priorities:
            return False
        if flt.metadata:
            meta = decode_json(row.metadata) if row.metadata not in (b"{}", "{}") else {}
            return filters.metadata_matches(meta, flt.metadata)
        return True

    async def query_activities(
        self,
        queue: str,
        flt: ActivityFilter,
        *,
        limit: int = 50,
        cursor: str | None = None,
        newest_first: bool = True,
    ) -> ActivityPage:
        flt = filters.check_filter(flt)
        at = filters.check_page(limit, cursor, newest_first)
        q = self._queues.get(queue)
        if q is None:
            return ActivityPage([], None)
        rows = (r for r in self._scan(q, flt, at, newest_first, limit) if self._indexed_match(r, flt))
        ok = (lambda r: self._row_match(r, flt)) if filters.row_filters(flt) else None
        items, last = keyset.page(rows, limit, _key, ok)
        nxt = None if last is None else filters.encode_cursor(last[0], last[1], newest_first)
        return ActivityPage([r.snapshot() for r in items], nxt)

    async def count_activities(
        self, queue: str, flt: ActivityFilter, *, cap: int = filters.COUNT_CAP
    ) -> ActivityCount:
        flt = filters.check_filter(flt)
        cap = filters.check_cap(cap)
        q = self._queues.get(queue)
        if q is None:
            return ActivityCount(0, True)
        return self._count(q, flt, cap)

    def _count(self, q: QueueState, flt: ActivityFilter, cap: int) -> ActivityCount:
        if flt == ActivityFilter(statuses=flt.statuses):
            n = sum(len(q.by_status[s]) for s in flt.statuses or filters.ALL_STATUSES)
            return ActivityCount(min(n, cap), n <= cap)
        rows = (r for r in self._unordered(q, flt) if self._indexed_match(r, flt))
        return keyset.count(rows, cap, (lambda r: self._row_match(r, flt)) if filters.row_filters(flt) else None)

    def _unordered(self, q: QueueState, flt: ActivityFilter) -> Iterator[Row]:
        """The rows the smallest index holds for ``flt`` (in no particular order: counting needs none)."""
        if flt.ids is not None:
            sets: list[dict[str, Row]] = [{i: r for i in flt.ids if (r := q.rows.get(i)) is not None}]
        elif flt.parent_id is not None:
            sets = [q.children.get(flt.parent_id, {})]
        else:
            sets = [q.rows]
            if flt.statuses is not None:
                sets = [q.by_status[s] for s in flt.statuses]
            if flt.activity_types is not None:
                typed = [d for t in flt.activity_types if (d := q.type_rows.get(t)) is not None]
                if sum(len(d) for d in typed) <= sum(len(d) for d in sets):
                    sets = typed
        lo, hi = flt.created_after_ms, flt.created_before_ms
        for rows in sets:
            for r in rows.values():
                if (lo is None or r.created_at_ms >= lo) and (hi is None or r.created_at_ms < hi):
                    yield r

    def _select(self, q: QueueState, flt: ActivityFilter, action: str, limit: int) -> tuple[list[Row], int]:
        """Up to ``limit`` rows ``action`` applies to (newest first), and how many matched but are skipped."""
        act, skip = filters.applicable(action, flt)
        rows: list[Row] = []
        if act:
            sub = msgspec_replace(flt, statuses=act)
            for row in self._scan(q, sub, None, True):
                if self._indexed_match(row, sub) and self._row_match(row, sub):
                    rows.append(row)
                    if len(rows) == limit:
                        break
        skipped = self._count(q, msgspec_replace(flt, statuses=skip), limit).count if skip else 0
        return rows, skipped

    def _action(self, queue: str, flt: ActivityFilter, action: str, limit: int) -> tuple[QueueState, list[Row], int]:
        flt = filters.check_filter(flt)
        limit = filters.check_action_limit(limit)
        q = self._queues.get(queue)
        if q is None:
            return self._queue(queue), [], 0
        rows, skipped = self._select(q, flt, action, limit)
        return q, rows, skipped

    async def retry_activities(self, queue: str, flt: ActivityFilter, *, limit: int = 10_000) -> ActionResult:
        q, rows, skipped = self._action(queue, flt, "retry", limit)
        now = _now_ms()
        for row in rows:
            old = row.status
            self._move(q, row, "pending")
            row.retry_count = 0
            row.ready_at_ms = now
            row.finished_at_ms = None
            row.dead_lettered_at_ms = None
            row.claim_token = None
            row.lease_expires_at_ms = None
            row.cancel_requested = False
            row.result = None
            self._event(row, "retry_requested", now, old)
            self._make_ready(q, row, now)
        return ActionResult("retry", [r.id for r in rows], skipped)

    async def cancel_activities(self, queue: str, flt: ActivityFilter, *, limit: int = 10_000) -> ActionResult:
        _, rows, skipped = self._action(queue, flt, "cancel", limit)
        now = _now_ms()
        changed: list[str] = []
        for row in rows:
            if row.status == "processing":
                if row.cancel_requested:
                    skipped += 1
                    continue
                row.cancel_requested = True
                self._event(row, "cancel_requested", now)
            else:
                self._event(row, "cancelled", now)
                self._finish(row, "cancelled", now, None, None)
            changed.append(row.id)
        return ActionResult("cancel", changed, skipped)

    async def run_now(self, queue: str, flt: ActivityFilter, *, limit: int = 10_000) -> ActionResult:
        q, rows, skipped = self._action(queue, flt, "run_now", limit)
        now = _now_ms()
        for row in rows:
            old = row.status
            self._move(q, row, "pending")
            row.ready_at_ms = now
            self._event(row, "run_now", now, old)
            self._make_ready(q, row, now)
        return ActionResult("run_now", [r.id for r in rows], skipped)

    async def set_priority(
        self, queue: str, flt: ActivityFilter, priority: int, *, limit: int = 10_000
    ) -> ActionResult:
        priority = filters.check_priority(priority)
        q, rows, skipped = self._action(queue, flt, "set_priority", limit)
        now = _now_ms()
        changed: list[str] = []
        for row in rows:
            if row.priority == priority:
                skipped += 1
                continue
            old = row.priority
            row.priority = priority
            self._event(row, "priority_changed", now, f"{old}->{priority}")
            self._make_ready(q, row, now)  # re-sorts it: the old heap entry is now stale
            changed.append(row.id)
        return ActionResult("set_priority", changed, skipped)

    async def delete_activities(self, queue: str, flt: ActivityFilter, *, limit: int = 10_000) -> ActionResult:
        q, rows, skipped = self._action(queue, flt, "delete", limit)
        now = _now_ms()
        for row in rows:
            self._forget(q, queue, row)
            self._stream_only(q, queue, row.id, "deleted", now)
        return ActionResult("delete", [r.id for r in rows], skipped)

    def _forget(self, q: QueueState, queue: str, row: Row) -> None:
        """Remove a finished ``row`` with its index entries, events, result and idempotency key."""
        rid = row.id
        del self._rows[rid]
        self._progress.pop(rid, None)
        del q.rows[rid]
        q.by_status[row.status].pop(rid, None)
        order = self._order(q)
        at = bisect.bisect_left(order, (row.created_at_ms, rid))
        if at < len(order) and order[at][1] == rid:
            del order[at]
        q.type_rows.get(row.activity_type, {}).pop(rid, None)
        if row.parent_id is not None:
            q.children.get(row.parent_id, {}).pop(rid, None)
        if row.idempotency_key is not None:
            ikey = (queue, row.activity_type, row.idempotency_key)
            held = self._idem.get(ikey)
            if held is not None and held[0] == rid:
                del self._idem[ikey]

    # ------------------------------------------------------------ retention
    async def prune(self, queue: str, statuses: Sequence[str], older_than_ms: int, *, limit: int = 1000) -> int:
        wanted = check_prune(statuses, older_than_ms, limit)
        q = self._queues.get(queue)
        if q is None:
            return 0
        before = _now_ms() - older_than_ms
        picked: list[Row] = []
        for status in wanted:
            # a status's rows are kept in the order they entered it: for a finished status, finish order
            for row in q.by_status[status].values():
                if len(picked) >= limit or (row.finished_at_ms or 0) >= before:
                    break
                picked.append(row)
        for row in picked:
            self._forget(q, queue, row)
        return len(picked)

    async def prune_events(self, queue: str, older_than_ms: int, *, limit: int = 1000) -> int:
        check_prune_events(older_than_ms, limit)
        q = self._queues.get(queue)
        if q is None:
            return 0
        before = _now_ms() - older_than_ms
        gone = 0
        for row in q.rows.values():  # every activity of the queue: the memory store has no index by event time
            events = row.events
            if not events or events[0].at_ms >= before:
                continue
            keep = 0
            while keep < len(events) and events[keep].at_ms < before and gone < limit:
                keep += 1
                gone += 1
            del events[:keep]
            if gone >= limit:
                break
        return gone

    async def hold(self, queue: str, purpose: str, holder: str, ttl_ms: int) -> bool:
        check_hold(purpose, ttl_ms)
        now = _now_ms()
        current = self._holds.get((queue, purpose))
        if current is not None and current[0] != holder and current[1] > now:
            return False
        self._holds[(queue, purpose)] = (holder, now + ttl_ms)
        return True

    def _stream_only(self, q: QueueState, queue: str, activity_id: str, kind: str, now: int) -> None:
        """An event for the live stream only (the activity's own timeline is gone)."""
        ev = ActivityEvent(self._next_event_id(), activity_id, queue, kind, now, None)
        q.events.append(ev)
        for s in self._subscribers.get(queue, ()):
            s.put_nowait(ev)

    # -------------------------------------------------------------- for tests
    def terminal_count(self, queue: str) -> int:
        """Activities of ``queue`` in a terminal status (a test helper)."""
        return sum(1 for r in self._queue(queue).rows.values() if r.status in TERMINAL_STATUSES)
