"""The memory backend's per-activity core: the pure-Python reference twin.

:mod:`runnerq_fast.backends.memory` builds :class:`MemoryBackend` on
:class:`StoreCore` from this module or from its compiled twin
(``src_pyx/runnerq_fast/backends/_memstore.pyx``, typed rows and queue
state), as :mod:`runnerq_fast.speedups` chose. Rows, queue state, events,
results and the claim and ack loops live here; everything else stays in
``memory.py``.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections import deque
from collections.abc import Sequence

from runnerq_fast.backends._wakeups import WorkSignal
from runnerq_fast.backends.rowcheck import decode_metadata
from runnerq_fast.models import (
    READY_STATUSES,
    TERMINAL_STATUSES,
    Ack,
    AckOutcome,
    ActivityEvent,
    ActivityResult,
    ActivitySnapshot,
    ClaimedActivity,
    NewActivity,
)

__all__ = ["QueueState", "ReadyQueue", "Row", "StoreCore"]


_SEQ_MASK = (1 << 64) - 1


def _ready_key(priority: int, retry_count: int, ready_at_ms: int, ordinal: int, seq: int) -> int:
    """One integer ordering ready rows as (priority desc, retry count desc, ready time asc, ordinal asc, seq).

    ``ordinal`` is the row's creation order (the seq of its first push), so
    equals (a batch shares one millisecond) are taken oldest first however
    often a row was pushed again (a priority change, a retry), as the other
    backends take them in id order. The ready queues hold these keys (unique
    through ``seq``, which is ``key & _SEQ_MASK``), each with its row's id
    beside it (:class:`ReadyQueue`): a heap step compares two integers, not two
    tuples field by field. Exact while retry counts and ready times (epoch ms,
    >= 0) stay below 2**99 and ordinals and seqs below 2**64.
    """
    return (((((((-priority) << 100) - retry_count) << 100) + ready_at_ms << 64) + ordinal) << 64) + seq


class ReadyQueue:
    """The ready entries (:func:`_ready_key`, activity id) of one activity type, smallest key first.

    Entries pushed in increasing key order (the usual case: the rows of an
    enqueue, each after the last) are appended to a sorted run, their ids
    in a parallel deque; any other entry goes to a heap of keys, its id kept
    by seq (a key's low 64 bits). :meth:`pop` takes the smaller of the two
    heads, so the order is a heap's, while a backlog enqueued in order costs
    one comparison per push and per pop instead of a heap's log2(n) of them,
    and no id lookup.
    """

    __slots__ = ("heap", "heap_ids", "run", "run_ids")

    def __init__(self) -> None:
        self.run: deque[int] = deque()
        self.run_ids: deque[str] = deque()
        self.heap: list[int] = []
        self.heap_ids: dict[int, str] = {}

    def __len__(self) -> int:
        return len(self.run) + len(self.heap)

    def push(self, key: int, activity_id: str) -> None:
        """Add the entry of ``activity_id`` under ``key`` (keys are unique)."""
        run = self.run
        if not run or key > run[-1]:
            run.append(key)
            self.run_ids.append(activity_id)
        else:
            heapq.heappush(self.heap, key)
            self.heap_ids[key & _SEQ_MASK] = activity_id

    def peek(self) -> int:
        """The smallest key (the queue must not be empty)."""
        run, heap = self.run, self.heap
        if not heap:
            return run[0]
        if run and run[0] < heap[0]:
            return run[0]
        return heap[0]

    def pop(self) -> tuple[int, str]:
        """Take the entry of the smallest key out: (its seq, its activity id) (the queue must not be empty)."""
        run, heap = self.run, self.heap
        if not heap or (run and run[0] < heap[0]):
            return run.popleft() & _SEQ_MASK, self.run_ids.popleft()
        seq = heapq.heappop(heap) & _SEQ_MASK
        return seq, self.heap_ids.pop(seq)


class Row:
    __slots__ = (
        "activity_type",
        "cancel_requested",
        "claim_token",
        "created_at_ms",
        "dead_lettered_at_ms",
        "events",
        "finished_at_ms",
        "heap_seq",
        "id",
        "idempotency_key",
        "last_error",
        "lease_expires_at_ms",
        "max_retries",
        "metadata",
        "ordinal",
        "parent_id",
        "payload",
        "priority",
        "queue",
        "ready_at_ms",
        "result",
        "retry_count",
        "started_at_ms",
        "status",
        "suspect",
        "timeout_ms",
        "traceback",
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
        #: the traceback of the last attempt whose handler raised (get_activity shows it)
        self.traceback: str | None = None
        self.heap_seq = 0
        #: its creation order: the seq of its first push (StoreCore), kept when it is pushed again
        self.ordinal = 0
        self.parent_id = item.parent_id
        self.cancel_requested = False
        #: its lease expired while it was claimed beside others: claimed alone from now on (StoreCore)
        self.suspect = False
        #: its events, oldest first (StoreCore._event appends)
        self.events: list[ActivityEvent] = []
        #: its outcome once finished (StoreCore._finish), else None
        self.result: ActivityResult | None = None

    def snapshot(self) -> ActivitySnapshot:
        return ActivitySnapshot(
            id=self.id,
            queue=self.queue,
            activity_type=self.activity_type,
            status=self.status,
            priority=self.priority,
            payload=self.payload,
            metadata=decode_metadata(self.metadata),
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
            parent_id=self.parent_id,
        )



class QueueState:
    __slots__ = (
        "by_status", "by_type", "children", "events", "order", "order_tail", "processing", "rows",
        "scheduled", "suspects", "type_rows", "wake",
    )

    def __init__(self) -> None:
        # ready queues, one per activity type, of ``_ready_key`` integers (their low 64 bits are the seq)
        self.by_type: dict[str, ReadyQueue] = {}
        # ready suspect rows, kept apart (only ``claim_suspect`` takes them), same entries
        self.suspects: dict[str, ReadyQueue] = {}
        # not-yet-due activities: (ready_at_ms, seq, id)
        self.scheduled: list[tuple[int, int, str]] = []
        self.processing: dict[str, Row] = {}
        self.rows: dict[str, Row] = {}
        self.events: deque[ActivityEvent] = deque(maxlen=10_000)
        self.wake = WorkSignal()  # set by work made ready, cleared per type by claims
        # rows by status (the "processing" entry is ``processing`` itself)
        self.by_status: dict[str, dict[str, Row]] = {
            s: {} for s in ("pending", "scheduled", "retrying", *TERMINAL_STATUSES)
        }
        self.by_status["processing"] = self.processing
        # listing indexes: (created_at_ms, id) sorted, rows by type, children by parent id; enqueue
        # batches not yet merged into ``order`` wait in ``order_tail`` as (created_at_ms, ids)
        self.order: list[tuple[int, str]] = []
        self.order_tail: list[tuple[int, list[str]]] = []
        self.type_rows: dict[str, dict[str, Row]] = {}
        self.children: dict[str, dict[str, Row]] = {}



class StoreCore:
    """Rows, per-queue state, events and results, with the per-activity claim and ack loops."""

    def __init__(self) -> None:
        self._queues: dict[str, QueueState] = {}
        self._rows: dict[str, Row] = {}
        self._waiters: dict[str, list[asyncio.Future[ActivityResult]]] = {}
        self._subscribers: dict[str, set[asyncio.Queue[ActivityEvent]]] = {}
        self._seq = itertools.count(1)
        self._event_ids = itertools.count(1)

    def _queue(self, name: str) -> QueueState:
        q = self._queues.get(name)
        if q is None:
            q = self._queues[name] = QueueState()
        return q

    def _next_event_id(self) -> int:
        """The id of the next event (ids count from 1, one sequence for the whole store)."""
        return next(self._event_ids)

    def _event(self, row: Row, event_type: str, now: int, detail: str | None = None) -> None:
        ev = ActivityEvent(next(self._event_ids), row.id, row.queue, event_type, now, detail)
        row.events.append(ev)
        q = self._queues[row.queue]
        q.events.append(ev)
        subs = self._subscribers.get(row.queue)
        if subs:
            for s in subs:
                s.put_nowait(ev)

    def _failure_event(self, row: Row, event_type: str, now: int, detail: str | None, traceback: str | None) -> None:
        """:meth:`_event` of a failed attempt: ``row``'s timeline keeps its ``traceback``.

        The queue's recent events and the live stream get the event without it
        (they are bounded by count, not by size, and fanned out to watchers).
        """
        if traceback is None:
            self._event(row, event_type, now, detail)
            return
        event_id = next(self._event_ids)
        ev = ActivityEvent(event_id, row.id, row.queue, event_type, now, detail)
        row.events.append(ActivityEvent(event_id, row.id, row.queue, event_type, now, detail, traceback))
        q = self._queues[row.queue]
        q.events.append(ev)
        subs = self._subscribers.get(row.queue)
        if subs:
            for s in subs:
                s.put_nowait(ev)

    def _push_ready(self, q: QueueState, row: Row) -> None:
        seq = next(self._seq)
        row.heap_seq = seq
        if not row.ordinal:
            row.ordinal = seq
        heaps = q.suspects if row.suspect else q.by_type
        ready = heaps.get(row.activity_type)
        if ready is None:
            ready = heaps[row.activity_type] = ReadyQueue()
        ready.push(_ready_key(row.priority, row.retry_count, row.ready_at_ms, row.ordinal, seq), row.id)

    def _push_scheduled(self, q: QueueState, row: Row) -> None:
        seq = next(self._seq)
        row.heap_seq = seq
        if not row.ordinal:
            row.ordinal = seq
        heapq.heappush(q.scheduled, (row.ready_at_ms, seq, row.id))
        if q.scheduled[0][1] == seq:
            q.wake.set()  # a new earliest due time: waiting fetchers time their wait again

    def _make_ready(self, q: QueueState, row: Row, now: int) -> None:
        if row.ready_at_ms > now:
            self._push_scheduled(q, row)
        else:
            self._push_ready(q, row)
            q.wake.set()

    def _move(self, q: QueueState, row: Row, status: str) -> None:
        """Set ``row.status``, keeping ``q.by_status`` in step."""
        q.by_status[row.status].pop(row.id, None)
        q.by_status[status][row.id] = row
        row.status = status

    def _finish(self, row: Row, status: str, now: int, data: bytes | None, error: str | None) -> None:
        self._move(self._queues[row.queue], row, status)
        row.finished_at_ms = now
        row.claim_token = None
        row.lease_expires_at_ms = None
        if error is not None:
            row.last_error = error
        # as the SQL backends' result: a failure's carries the last traceback (a completion's error is None)
        tb = row.traceback if error is not None and (status == "failed" or status == "dead_letter") else None
        res = ActivityResult(row.id, status, data, error, tb)
        row.result = res
        waiters = self._waiters.pop(row.id, None)
        if waiters:
            for w in waiters:
                if not w.done():
                    w.set_result(res)

    def _held(self, ref_id: str, token: str) -> Row | None:
        row = self._rows.get(ref_id)
        if row is None or row.status != "processing" or row.claim_token != token:
            return None
        return row


    def _claim_from(
        self,
        q: QueueState,
        heaps: list[ReadyQueue],
        limit: int,
        token: str,
        lease_until: int,
        now: int,
        worker_id: str,
    ) -> list[ClaimedActivity]:
        """Pop up to ``limit`` ready rows from ``heaps`` (non-empty ready queues; best first) and claim them."""
        rows = self._rows
        out: list[ClaimedActivity] = []
        while heaps and len(out) < limit:
            best = heaps[0] if len(heaps) == 1 else min(heaps, key=ReadyQueue.peek)
            seq, activity_id = best.pop()
            if not best:
                heaps.remove(best)
            row = rows.get(activity_id)
            if row is None or row.heap_seq != seq or row.status not in READY_STATUSES:
                continue
            q.by_status[row.status].pop(row.id, None)
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

    def _ack_batch(self, q: QueueState, acks: Sequence[Ack], now: int) -> list[str]:
        """Apply ``acks``; return the ids whose claim is no longer held."""
        rejected: list[str] = []
        for a in acks:
            row = self._held(a.id, a.claim_token)
            if row is None:
                rejected.append(a.id)
                continue
            row.suspect = False  # it ended normally: claimed the ordinary way from now on
            outcome = a.outcome
            if outcome == AckOutcome.COMPLETED:
                self._event(row, "completed", now)
                self._finish(row, "completed", now, a.result, None)
            elif outcome == AckOutcome.CANCELLED or (outcome == AckOutcome.RETRY and row.cancel_requested):
                # a retry of an activity an operator asked to cancel ends it instead
                if a.traceback is not None:
                    row.traceback = a.traceback
                self._event(row, "cancelled", now)
                self._finish(row, "cancelled", now, None, None)
            elif outcome == AckOutcome.RETRY:
                row.retry_count += 1
                row.ready_at_ms = max(a.retry_at_ms, now)
                row.claim_token = None
                row.lease_expires_at_ms = None
                row.last_error = a.error
                if a.traceback is not None:
                    row.traceback = a.traceback
                self._move(q, row, "retrying")
                self._failure_event(row, "retrying", now, a.error, a.traceback)
                self._make_ready(q, row, now)
            elif outcome == AckOutcome.FAILED:
                if a.traceback is not None:
                    row.traceback = a.traceback
                self._failure_event(row, "failed", now, a.error, a.traceback)
                self._finish(row, "failed", now, None, a.error)
            else:
                row.dead_lettered_at_ms = now
                if a.traceback is not None:
                    row.traceback = a.traceback
                self._failure_event(row, "dead_letter", now, a.error, a.traceback)
                self._finish(row, "dead_letter", now, None, a.error)
        return rejected
